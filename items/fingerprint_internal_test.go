package items

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// The plain path (text without escapes) and the decoding path must give the same canonical form, byte
// for byte: a difference would change fingerprints and turn a replay into a conflict, or a changed
// payload into a skip.
func TestCanonicalPlainMatchesDecoded(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	names := []string{"a", "b", "B", "é", "amount", "a b", "ä", "z", "recipient", "日本", "{", "[", ",", ":"}
	var value func(depth int) string
	space := func() string { return []string{"", " ", "\n\t", "  \r\n"}[r.IntN(4)] }
	value = func(depth int) string {
		switch k := r.IntN(9); {
		case k == 0 && depth < 4:
			n := r.IntN(5)
			seen := map[string]bool{}
			var parts []string
			for range n {
				name := names[r.IntN(len(names))]
				if seen[name] {
					continue
				}
				seen[name] = true
				parts = append(parts, space()+`"`+name+`"`+space()+":"+space()+value(depth+1)+space())
			}
			return "{" + strings.Join(parts, ",") + "}"
		case k == 1 && depth < 4:
			var parts []string
			for range r.IntN(4) {
				parts = append(parts, space()+value(depth+1)+space())
			}
			return "[" + strings.Join(parts, ",") + "]"
		case k == 2:
			return []string{"1", "1.0", "-0", "1e2", "120.50", "0.000001", "-12E-3"}[r.IntN(7)]
		case k == 3:
			return []string{"true", "false", "null"}[r.IntN(3)]
		default:
			return `"` + []string{"", "x", "a,b", "{}", "[1]", "é ü", "😀", "}", "\"", "tab\there"}[r.IntN(10)] + `"`
		}
	}
	for i := range 20000 {
		payload := []byte("{" + space() + `"k":` + value(0) + "," + `"id":` + fmt.Sprint(i) + space() + "}")
		if bytes.IndexByte(payload, '\\') >= 0 {
			continue
		}
		plain, ok := canonicalPlain(payload)
		decoded, err := canonicalDecoded(payload)
		if (err == nil) != ok {
			t.Fatalf("%s: plain ok=%v, decoded err=%v", payload, ok, err)
		}
		if ok && !bytes.Equal(plain, decoded) {
			t.Fatalf("%s:\nplain   %s\ndecoded %s", payload, plain, decoded)
		}
	}
}
