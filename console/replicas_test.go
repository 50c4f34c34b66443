package console_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/alerts"
	"github.com/replaysafe/companion/console"
	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/items"
)

// replica is one companion service (its own ledger and handlers) on the env's store, as another process
// on the same store would be: on MongoDB with a connection of its own.
func (e *env) replica(tokens []handlers.Token) *httptest.Server {
	e.t.Helper()
	st := e.store
	if e.another != nil {
		st = e.another()
		e.t.Cleanup(func() { st.Close() })
	}
	ledger, err := items.NewLedger(e.ctx, st, items.Config{Now: e.clock.Now})
	if err != nil {
		e.t.Fatal(err)
	}
	srv := httptest.NewServer(handlers.New(handlers.Config{Ledger: ledger, Operators: st, Tokens: tokens,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Console: handlers.ConsoleConfig{Refresh: time.Hour, CauseText: alerts.CauseText}}))
	e.t.Cleanup(srv.Close)
	return srv
}

// alternating is a load balancer in front of replicas: each request goes to the next one in turn. It
// records which replica answered which page.
type alternating struct {
	srv     *httptest.Server
	mu      sync.Mutex
	next    int
	answers []string // "<replica> <method> <path> <status>"
}

func newAlternating(t *testing.T, replicas ...*httptest.Server) *alternating {
	a := &alternating{}
	proxies := make([]*httputil.ReverseProxy, len(replicas))
	for i, r := range replicas {
		u, _ := url.Parse(r.URL)
		proxies[i] = httputil.NewSingleHostReverseProxy(u)
	}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		i := a.next
		a.next = (a.next + 1) % len(proxies)
		a.mu.Unlock()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		proxies[i].ServeHTTP(rec, r)
		a.mu.Lock()
		a.answers = append(a.answers, string(rune('A'+i))+" "+r.Method+" "+r.URL.Path+" "+http.StatusText(rec.status))
		a.mu.Unlock()
	}))
	t.Cleanup(a.srv.Close)
	return a
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

// servedBy returns the replicas that answered a path with status.
func (a *alternating) servedBy(method, path, status string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var by []string
	for _, ans := range a.answers {
		if f := strings.Fields(ans); strings.HasSuffix(ans, " "+status) && f[1] == method && f[2] == path && !strings.Contains(strings.Join(by, ""), f[0]) {
			by = append(by, f[0])
		}
	}
	return strings.Join(by, "")
}

// Two replicas behind one address, the load balancer alternating between them: an operator signs in once
// and works on both. Every page, form and resolution goes to the next replica in turn; the session one
// replica made is valid on the other, a form's CSRF token from one page is accepted by the other replica,
// and resolutions through each are recorded. Signing out through one ends the session on both (the
// browser drops its cookie); a session past its 12 hours ends on both; a replica where the token is no
// longer configured (removed, or its secret changed) refuses the session; a changed cookie opens nothing.
// On SQLite (two services in one process on one store) and MongoDB (as two processes on one database).
func TestAConsoleSessionWorksOnEveryReplica(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{mongo: kind.mongo})
			for _, key := range []string{"inv-1", "inv-2"} {
				e.unknownItem(key, "QT-"+key, "", 0)
			}
			tokens := []handlers.Token{{Name: "ops-alice", Tenant: "default", Role: handlers.RoleOperator, Secret: operatorSecret}}
			lb := newAlternating(t, e.replica(tokens), e.replica(tokens))
			c := e.client()
			get := func(path string) (int, string, string) {
				t.Helper()
				return pageAt(t, c, lb.srv.URL+path)
			}
			post := func(path string, form url.Values) *http.Response {
				t.Helper()
				resp, err := c.PostForm(lb.srv.URL+path, form)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp
			}

			// Sign in once: the form from one replica, posted to the other.
			_, _, csrf := get("/console/signin")
			if resp := post("/console/signin", url.Values{"csrf": {csrf}, "token": {operatorSecret}}); resp.StatusCode != http.StatusSeeOther ||
				resp.Header.Get("Location") != "/console/" {
				t.Fatalf("sign-in answered %d to %q", resp.StatusCode, resp.Header.Get("Location"))
			}
			// The queue, twice: each replica once.
			for range 2 {
				if status, body, _ := get("/console/"); status != http.StatusOK || !strings.Contains(body, "ops-alice") || !strings.Contains(body, "inv-2") {
					t.Fatalf("the queue answered %d:\n%s", status, body)
				}
			}
			// Resolve each item with a form read from one replica and posted to the other: inv-1 read from A,
			// inv-2 (after the overview, one request more) from B.
			for _, key := range []string{"inv-1", "inv-2"} {
				if key == "inv-2" {
					if status, _, _ := get("/console/overview"); status != http.StatusOK {
						t.Fatalf("the overview answered %d", status)
					}
				}
				status, _, csrf := get("/console/item?key=" + key)
				if status != http.StatusOK || csrf == "" {
					t.Fatalf("the item page of %s answered %d (CSRF %q)", key, status, csrf)
				}
				resp := post("/console/item/resolve", url.Values{"csrf": {csrf}, "key": {key}, "outcome": {"succeeded"},
					"evidence": {"found " + key + " in the billing tool"}})
				if resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Location"), "done=recorded") {
					t.Fatalf("resolving %s answered %d to %q", key, resp.StatusCode, resp.Header.Get("Location"))
				}
				if it := e.get(key); it.State != items.StateSucceeded || it.Resolution == nil || it.Resolution.By != "ops-alice" {
					t.Fatalf("%s is %s, resolution %+v", key, it.State, it.Resolution)
				}
			}
			for _, page := range []struct{ method, path, status string }{{"GET", "/console/", "OK"}, {"GET", "/console/item", "OK"},
				{"POST", "/console/item/resolve", "See Other"}} {
				if by := lb.servedBy(page.method, page.path, page.status); by != "AB" && by != "BA" {
					t.Errorf("%s %s was answered %q by %s alone; want both replicas", page.method, page.path, page.status, by)
				}
			}

			// A changed cookie opens nothing, on either replica.
			u, _ := url.Parse(lb.srv.URL + "/console/")
			session := c.Jar.Cookies(u)
			var value string
			for _, ck := range session {
				if ck.Name == "companion_console" {
					value = ck.Value
				}
			}
			if value == "" || strings.Contains(value, operatorSecret) || strings.Contains(value, "ops-alice") {
				t.Fatalf("session cookie %q: want it sealed, never the token or its name in clear", value)
			}
			forged := e.client()
			flipped := []byte(value)
			flipped[len(flipped)/2] ^= 1
			forged.Jar.SetCookies(u, []*http.Cookie{{Name: "companion_console", Value: string(flipped), Path: "/console/"}})
			for range 2 {
				if resp, err := forged.Get(lb.srv.URL + "/console/"); err != nil || resp.StatusCode != http.StatusSeeOther {
					t.Fatalf("a changed cookie: %v %v, want 303 to sign in", resp.StatusCode, err)
				}
			}

			// A replica whose configuration no longer has the token (its secret changed) refuses the session.
			rotated := e.replica([]handlers.Token{{Name: "ops-alice", Tenant: "default", Role: handlers.RoleOperator, Secret: "op-secret-rotated-9876"}})
			stale := e.client()
			ru, _ := url.Parse(rotated.URL + "/console/")
			stale.Jar.SetCookies(ru, []*http.Cookie{{Name: "companion_console", Value: value, Path: "/console/"}})
			if resp, err := stale.Get(rotated.URL + "/console/"); err != nil || resp.StatusCode != http.StatusSeeOther ||
				!strings.Contains(resp.Header.Get("Location"), "ended=1") {
				t.Fatalf("a replica without the token: %v %v, want 303 to sign in (ended)", resp.StatusCode, err)
			}

			// Past its 12 hours the session ends on both replicas.
			copied := e.client()
			copied.Jar.SetCookies(u, []*http.Cookie{{Name: "companion_console", Value: value, Path: "/console/"}})
			e.clock.Advance(console.SessionTTL - time.Minute)
			for range 2 {
				if resp, err := copied.Get(lb.srv.URL + "/console/"); err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("before its end: %v %v, want 200", resp.StatusCode, err)
				}
			}
			e.clock.Advance(2 * time.Minute)
			for range 2 {
				if resp, err := copied.Get(lb.srv.URL + "/console/"); err != nil || resp.StatusCode != http.StatusSeeOther {
					t.Fatalf("after its end: %v %v, want 303 to sign in", resp.StatusCode, err)
				}
			}

			// Signing out through one replica: the next page, from the other, asks to sign in.
			e.clock.Advance(-console.SessionTTL)
			_, _, csrf = get("/console/signin")
			post("/console/signin", url.Values{"csrf": {csrf}, "token": {operatorSecret}})
			_, _, csrf = get("/console/")
			if resp := post("/console/signout", url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("sign-out answered %d", resp.StatusCode)
			}
			for range 2 {
				if status, _, _ := get("/console/"); status != http.StatusSeeOther {
					t.Fatalf("after signing out, the queue answered %d, want 303 to sign in", status)
				}
			}
		})
	}
}
