package handlers_test

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
)

// hostOf is the host:port of the service's address.
func hostOf(t *testing.T, svc *handlerstest.Service) string {
	t.Helper()
	u, err := url.Parse(svc.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// In open mode a request naming any Host but a loopback one (a page whose name was rebound to 127.0.0.1)
// is answered 421 on every route, before anything else is checked, and changes nothing; the loopback names
// are answered on any port.
func TestOpenModeAnswersOnlyLoopbackHosts(t *testing.T) {
	t.Parallel()
	store := openSQLite(t)
	svc := handlerstest.NewService(t, store, handlerstest.ServiceConfig{Open: true, Configure: func(c *handlers.Config) {
		c.Operators = store.(handlers.OperatorStore)
		c.AllowedHosts = []string{"attacker.example"} // ignored in open mode
	}})
	svc.Claim("inv-1", nil)
	_, port, _ := strings.Cut(hostOf(t, svc), ":")
	routes := []handlerstest.Request{
		{Method: http.MethodGet, Path: "/v1/items"}, {Method: http.MethodGet, Path: "/v1/stats"},
		{Method: http.MethodGet, Path: "/v1/items/inv-1"}, {Method: http.MethodGet, Path: "/healthz"},
		{Method: http.MethodGet, Path: "/metrics"}, {Method: http.MethodGet, Path: "/openapi.json"},
		{Method: http.MethodGet, Path: "/console/"}, {Method: http.MethodGet, Path: "/no/such/route"},
		{Method: http.MethodPost, Path: "/v1/before-write", Body: map[string]any{"key": "inv-2", "payload": map[string]any{}}},
		{Method: http.MethodPost, Path: "/v1/items/inv-1/resolve", Body: map[string]any{"outcome": "not_committed", "evidence": "checked the billing tool"}},
		{Method: http.MethodPost, Path: "/console/item/resolve", ContentType: "application/x-www-form-urlencoded", Body: "key=inv-1"},
	}
	for _, host := range []string{"attacker.example:" + port, "attacker.example", "192.0.2.7:" + port, "localhost.attacker.example", "0.0.0.0:" + port, "[::]:" + port} {
		for _, rq := range routes {
			rq.Host = host
			r := svc.Do(rq)
			handlerstest.Expect(t, r, http.StatusMisdirectedRequest, handlers.CodeMisdirectedHost, "")
			if !strings.Contains(r.Str("error.message"), "localhost") {
				t.Errorf("%s %s for %s: the message does not say which host to use: %s", rq.Method, rq.Path, host, r.Body)
			}
		}
	}
	if it := svc.Item("default", "inv-1"); it.State != items.StateInFlight || it.Resolution != nil {
		t.Fatalf("a misdirected request changed inv-1: %s", it.State)
	}
	if _, err := svc.Store.Get(t.Context(), "default", "inv-2"); err == nil {
		t.Fatal("a misdirected before-write wrote inv-2")
	}
	for _, host := range []string{"localhost:" + port, "LOCALHOST:" + port, "localhost", "127.0.0.1:" + port, "127.0.0.2:" + port, "[::1]:" + port} {
		for _, path := range []string{"/v1/items", "/v1/stats", "/healthz", "/v1/items/inv-1"} {
			handlerstest.Expect(t, svc.Do(handlerstest.Request{Method: http.MethodGet, Path: path, Host: host}), http.StatusOK, "", "")
		}
	}
}

// With tokens, allowed_hosts makes the service answer those names (any port, or the port given) and the
// loopback ones only, before authentication; without it every Host is answered.
func TestAllowedHostsWithTokens(t *testing.T) {
	t.Parallel()
	svc := handlerstest.NewService(t, openSQLite(t), handlerstest.ServiceConfig{Configure: func(c *handlers.Config) {
		c.AllowedHosts = []string{"Companion.Example.com", "ops.example.com:8443"}
	}})
	svc.Claim("inv-1", nil)
	for host, status := range map[string]int{"companion.example.com": 200, "companion.example.com:443": 200, "ops.example.com:8443": 200,
		"localhost:1": 200, "[::1]:8080": 200, "COMPANION.example.com.": 200, "ops.example.com": 421, "ops.example.com:443": 421, "attacker.example": 421, "example.com": 421} {
		r := svc.Do(handlerstest.Request{Method: http.MethodGet, Path: "/v1/items/inv-1", Token: handlerstest.WorkflowAcme, Host: host})
		if r.Status != status {
			t.Errorf("Host %s: %d, want %d: %s", host, r.Status, status, r.Body)
		}
		if status == 421 {
			// Before authentication: no token, a wrong one, the same answer.
			handlerstest.Expect(t, svc.Do(handlerstest.Request{Method: http.MethodGet, Path: "/v1/items/inv-1", Token: "wrong", Host: host}),
				http.StatusMisdirectedRequest, handlers.CodeMisdirectedHost, "")
		}
	}
	open := handlerstest.NewService(t, openSQLite(t), handlerstest.ServiceConfig{})
	handlerstest.Expect(t, open.Do(handlerstest.Request{Method: http.MethodGet, Path: "/healthz", Host: "anything.example"}), http.StatusOK, "", "")
}

// Fifty wrong tokens in a row from one address: the first FailedAuthBurst are answered 401, the rest 429
// with Retry-After in the error shape, and while the address is over budget even the right token waits;
// after Retry-After it works. Right tokens never count: a burst of them leaves the whole budget.
func TestFailedTokensAreThrottledPerAddress(t *testing.T) {
	t.Parallel()
	svc := handlerstest.NewService(t, openSQLite(t), handlerstest.ServiceConfig{})
	for range 100 {
		handlerstest.Expect(t, svc.Get(handlerstest.WorkflowAcme, "/v1/items/none"), http.StatusNotFound, items.CodeNotFound, "")
	}
	counts := map[int]int{}
	retryAfter := ""
	for i := range 50 {
		r := svc.Get("wrong-secret-"+strconv.Itoa(i), "/v1/items/none")
		counts[r.Status]++
		if r.Status == http.StatusTooManyRequests {
			handlerstest.Expect(t, r, http.StatusTooManyRequests, handlers.CodeTooManyRequests, "")
			retryAfter = r.Header.Get("Retry-After")
		}
	}
	if counts[401] < handlers.FailedAuthBurst || counts[401] > handlers.FailedAuthBurst+3 || counts[429] < 35 {
		t.Fatalf("50 wrong tokens answered %v, want %d (and a few refilled) 401s, the rest 429", counts, handlers.FailedAuthBurst)
	}
	secs, err := strconv.Atoi(retryAfter)
	if err != nil || secs < 1 || secs > 2 {
		t.Fatalf("Retry-After %q, want 1-2 seconds", retryAfter)
	}
	// A request without any credential is not a guess: it is answered as before.
	handlerstest.Expect(t, svc.Get("", "/v1/items/none"), http.StatusUnauthorized, handlers.CodeUnauthorized, "")
	handlerstest.Expect(t, svc.Get("", "/healthz"), http.StatusOK, "", "")
	time.Sleep(time.Duration(secs) * time.Second)
	handlerstest.Expect(t, svc.Get(handlerstest.WorkflowAcme, "/v1/items/none"), http.StatusNotFound, items.CodeNotFound, "")
}

// X-Forwarded-For is believed only from a configured proxy: a guesser cannot spread its failures over
// addresses it makes up, while behind a trusted proxy each client has its own budget.
func TestForwardedForCountsOnlyFromATrustedProxy(t *testing.T) {
	t.Parallel()
	guess := func(svc *handlerstest.Service, from string) int {
		return svc.Do(handlerstest.Request{Method: http.MethodGet, Path: "/v1/items/none", Token: "wrong",
			Header: http.Header{"X-Forwarded-For": {from}}}).Status
	}
	direct := handlerstest.NewService(t, openSQLite(t), handlerstest.ServiceConfig{})
	limited := 0
	for i := range 30 {
		if guess(direct, "198.51.100."+strconv.Itoa(i)) == http.StatusTooManyRequests {
			limited++
		}
	}
	if limited == 0 {
		t.Fatal("made-up X-Forwarded-For addresses escaped the throttle of a service that trusts no proxy")
	}
	proxied := handlerstest.NewService(t, openSQLite(t), handlerstest.ServiceConfig{Configure: func(c *handlers.Config) {
		c.TrustedProxies = []string{"127.0.0.1/8", "::1"}
	}})
	for i := range 30 {
		if s := guess(proxied, "198.51.100."+strconv.Itoa(i)); s != http.StatusUnauthorized {
			t.Fatalf("client %d behind a trusted proxy: %d, want 401 (its own budget)", i, s)
		}
	}
	limited = 0
	for range 30 {
		if guess(proxied, "203.0.113.9") == http.StatusTooManyRequests {
			limited++
		}
	}
	if limited == 0 {
		t.Fatal("one client behind a trusted proxy was not throttled")
	}
}

// The console's sign-in form counts against the same budget as bearer tokens.
func TestFailedConsoleSignInsAreThrottled(t *testing.T) {
	t.Parallel()
	store := openSQLite(t)
	svc := handlerstest.NewService(t, store, handlerstest.ServiceConfig{Configure: func(c *handlers.Config) {
		c.Operators = store.(handlers.OperatorStore)
	}})
	counts := map[int]int{}
	for range 30 {
		r := svc.Do(handlerstest.Request{Method: http.MethodPost, Path: "/console/signin", ContentType: "application/x-www-form-urlencoded",
			Body: "token=wrong&csrf=x", Header: http.Header{"Cookie": {"companion_console_signin=x"}}})
		counts[r.Status]++
	}
	if counts[401] < handlers.FailedAuthBurst || counts[429] == 0 {
		t.Fatalf("30 wrong sign-ins answered %v, want 401s then 429s", counts)
	}
	handlerstest.Expect(t, svc.Get(handlerstest.OperatorAcme, "/v1/stats"), http.StatusTooManyRequests, handlers.CodeTooManyRequests, "")
}
