package console_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/replaysafe/companion/items"
)

// A form is accepted only from the console's own origins (the public URL, the loopback names), never from
// an origin that merely matches the request's Host: a page whose name was rebound to the service names
// itself in both. A refused form changes nothing.
func TestAFormIsAcceptedOnlyFromTheConsolesOrigins(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{publicURL: "https://companion.example.com"})
	c := e.client()
	e.signIn(c, operatorSecret)
	u, _ := url.Parse(e.srv.URL)
	_, port, _ := strings.Cut(u.Host, ":")
	resolve := func(key, host, origin string) (int, string) {
		t.Helper()
		_, _, csrf := e.page(c, "/console/item?key="+key)
		form := url.Values{"key": {key}, "outcome": {"not_committed"}, "evidence": {"checked the billing tool by hand"}, "csrf": {csrf}}
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/console/item/resolve", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		if host != "" {
			req.Host = host
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	e.unknownItem("inv-1", "QT-1", "", 0)
	for _, origin := range []struct{ host, origin string }{
		{"attacker.example:" + port, "http://attacker.example:" + port}, // the rebinding page: Host and Origin agree
		{"", "http://attacker.example:" + port},
		{"", "https://companion.example.com.attacker.example"},
		{"", "http://companion.example.com"}, // the public URL is https
		{"", "null"},
		{"", "companion.example.com"},
	} {
		status, body := resolve("inv-1", origin.host, origin.origin)
		if status != http.StatusForbidden || !strings.Contains(body, "not this console") {
			t.Errorf("Host %q Origin %q: %d, want 403:\n%s", origin.host, origin.origin, status, body)
		}
		if it := e.get("inv-1"); it.State != items.StateUnknown || it.Resolution != nil {
			t.Fatalf("Host %q Origin %q changed the item: %s", origin.host, origin.origin, it.State)
		}
	}
	for i, origin := range []string{"https://companion.example.com", "https://companion.example.com:443", "http://localhost:" + port,
		"http://127.0.0.1:1", "http://[::1]:8080"} {
		key := "ok-" + string(rune('a'+i))
		e.unknownItem(key, "QT-"+key, "", 0)
		if status, body := resolve(key, "", origin); status != http.StatusSeeOther {
			t.Errorf("Origin %q: %d, want 303:\n%s", origin, status, body)
		}
		if it := e.get(key); it.State != items.StateFailed {
			t.Errorf("Origin %q: the item is %s, want failed (not committed)", origin, it.State)
		}
	}
}
