package typo

import "testing"

func TestNearest(t *testing.T) {
	known := []string{"payload", "destination", "dedupe", "reference", "key"}
	for _, c := range []struct{ name, want string }{
		{"paylod", "payload"},  // a letter dropped
		{"Payload", "payload"}, // case
		{"destinaton", "destination"},
		{"dedup", "dedupe"},
		{"kye", ""}, // two edits in a name of three: too far
		{"owner", ""},
	} {
		if got := Nearest(c.name, known, Within(c.name)); got != c.want {
			t.Errorf("Nearest(%q) = %q, want %q", c.name, got, c.want)
		}
	}
	if got := Nearest("sever", []string{"serve", "sweep"}, 3); got != "serve" {
		t.Errorf("Nearest(sever) = %q, want serve", got)
	}
}

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"abc", "", 3}, {"kitten", "sitting", 3}, {"serve", "sever", 2}, {"payload", "payload", 0}} {
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
