package console_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/alerts"
	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/mongostore"
	"github.com/replaysafe/companion/items/mongostore/mongotest"
	"github.com/replaysafe/companion/items/sqlitestore"

	"github.com/replaysafe/companion/console"
)

// Secrets of the test tokens.
const (
	operatorSecret = "op-secret-0123456789"
	workflowSecret = "wf-secret-0123456789"
)

// env is a companion service on a fresh SQLite store with a fake clock, served over HTTP.
type env struct {
	t      testing.TB
	ctx    context.Context
	clock  *itemstest.Clock
	store  store
	ledger *items.Ledger
	srv    *httptest.Server
	dir    string // the store's data directory
	// another opens another connection to the env's MongoDB database, as another process would; nil on
	// SQLite, which one process holds.
	another func() store
}

// store is what the env runs on: SQLite, or MongoDB (the in-process FerretDB).
type store interface {
	items.Store
	handlers.OperatorStore
}

// storeKinds are the stores a test runs the console on: SQLite, and MongoDB (the in-process FerretDB).
var storeKinds = []struct {
	name  string
	mongo bool
}{{"sqlite", false}, {"mongodb", true}}

type envOptions struct {
	open    bool
	refresh time.Duration
	// mongo runs the env on a FerretDB of its own instead of SQLite.
	mongo bool
	// withoutSeries runs it on a SQLite store seen without its measures over time
	// (handlerstest.WithoutSeries).
	withoutSeries bool
	// queueLimit is the console's QueueLimit (console.QueueLimit when 0).
	queueLimit int
	// publicURL is the service's public_url.
	publicURL string
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	var another func() store
	if o.mongo {
		srv := mongotest.Start(t)
		db := srv.Database()
		another = func() store {
			s, err := mongostore.Open(ctx, srv.URI(), db, mongostore.WithTimeout(mongotest.StoreTimeout()))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	}
	var store store
	if another != nil {
		store = another()
	} else {
		s, err := sqlitestore.Open(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		store = s
		if o.withoutSeries {
			store = handlerstest.WithoutSeries(s)
		}
	}
	t.Cleanup(func() { store.Close() })
	clock := itemstest.NewClock()
	ledger, err := items.NewLedger(ctx, store, items.Config{Now: clock.Now, Destinations: map[string]items.Destination{
		"billing": {Owner: "U0BILLING", CheckHint: "search the billing tool for the quote reference"},
		// slow asks for a person when an item stays unresolved for an hour (unresolved_too_long).
		"slow": {EscalateAfter: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	kind := "sqlite"
	switch {
	case o.mongo:
		kind = "mongodb"
	case o.withoutSeries:
		kind = "sqlite-without-series"
	}
	cfg := handlers.Config{Ledger: ledger, Operators: store, Open: o.open, PublicURL: o.publicURL, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), StoreKind: kind,
		Console: handlers.ConsoleConfig{Refresh: o.refresh, QueueLimit: o.queueLimit, CauseText: alerts.CauseText,
			Target: func(it *items.Item) console.Target {
				return console.Target{Owner: "U0BILLING", CheckHint: "search the billing tool for the quote reference"}
			}}}
	if !o.open {
		cfg.Tokens = []handlers.Token{
			{Name: "ops-alice", Tenant: "default", Role: handlers.RoleOperator, Secret: operatorSecret},
			{Name: "n8n-prod", Tenant: "default", Role: handlers.RoleWorkflow, Secret: workflowSecret},
		}
	}
	e := &env{t: t, ctx: ctx, clock: clock, store: store, ledger: ledger, dir: dir, another: another}
	e.srv = httptest.NewServer(handlers.New(cfg))
	t.Cleanup(e.srv.Close)
	return e
}

var fingerprint = func() string {
	f, err := items.Fingerprint([]byte(`{"invoice":"742","amount":120.5}`))
	if err != nil {
		panic(err)
	}
	return f
}()

// unknownItem claims key at a destination that can neither dedupe nor be searched and reports a
// timeout: the outcome is unknown and the item needs a person at once.
func (e *env) unknownItem(key, ref, batch string, index int) {
	e.t.Helper()
	p := items.BeforeWriteParams{Tenant: "default", Key: key, Fingerprint: fingerprint, Destination: "billing",
		Dedupe: items.DedupeNone, Reference: ref, ExecutionID: "exec-" + key}
	if batch != "" {
		p.BatchID, p.BatchIndex = batch, &index
	}
	a, err := e.ledger.BeforeWrite(e.ctx, p)
	if err != nil || a.Decision != items.Proceed {
		e.t.Fatalf("before-write %s: %v %+v", key, err, a)
	}
	e.clock.Advance(3 * time.Second)
	if _, err := e.ledger.AfterWrite(e.ctx, items.AfterWriteParams{Tenant: "default", Key: key, Claim: a.Claim,
		Evidence: items.Evidence{Outcome: items.OutcomeUnknown, Class: items.ClassTimeout}}); err != nil {
		e.t.Fatalf("after-write %s: %v", key, err)
	}
	if it := e.get(key); !it.NeedsPerson {
		e.t.Fatalf("%s does not need a person: %+v", key, it)
	}
}

// succeededItem claims key and reports success, with an HTTP status.
func (e *env) succeededItem(key, batch string, index int) {
	e.t.Helper()
	p := items.BeforeWriteParams{Tenant: "default", Key: key, Fingerprint: fingerprint, Destination: "billing",
		Dedupe: items.DedupeKey, BatchID: batch, BatchIndex: &index, ExecutionID: "exec-" + key}
	a, err := e.ledger.BeforeWrite(e.ctx, p)
	if err != nil || a.Decision != items.Proceed {
		e.t.Fatalf("before-write %s: %v %+v", key, err, a)
	}
	if _, err := e.ledger.AfterWrite(e.ctx, items.AfterWriteParams{Tenant: "default", Key: key, Claim: a.Claim,
		ExternalID: "in_" + key, Evidence: items.Evidence{Outcome: items.OutcomeSucceeded, HTTPStatus: 201}}); err != nil {
		e.t.Fatalf("after-write %s: %v", key, err)
	}
}

func (e *env) get(key string) *items.Item {
	e.t.Helper()
	it, err := e.store.Get(e.ctx, "default", key)
	if err != nil {
		e.t.Fatalf("get %s: %v", key, err)
	}
	return it
}

// client is a browser-like HTTP client: it keeps cookies and does not follow redirects.
func (e *env) client() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// page GETs a console path and returns the status, body and the first CSRF token in it.
func (e *env) page(c *http.Client, path string) (int, string, string) {
	e.t.Helper()
	return pageAt(e.t, c, e.srv.URL+path)
}

// pageAt GETs a page at address and returns the status, body and the first CSRF token in it.
func pageAt(t testing.TB, c *http.Client, address string) (int, string, string) {
	t.Helper()
	resp, err := c.Get(address)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	csrf := ""
	if m := csrfField.FindStringSubmatch(string(b)); m != nil {
		csrf = m[1]
	}
	return resp.StatusCode, string(b), csrf
}

func (e *env) post(c *http.Client, path string, form url.Values, header http.Header) (*http.Response, string) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// signIn signs c in with secret and returns the answer to the sign-in form.
func (e *env) signIn(c *http.Client, secret string) (*http.Response, string) {
	e.t.Helper()
	_, _, csrf := e.page(c, "/console/signin")
	if csrf == "" {
		e.t.Fatal("the sign-in form has no CSRF token")
	}
	return e.post(c, "/console/signin", url.Values{"csrf": {csrf}, "token": {secret}}, nil)
}

func TestSignInKeepsAnOperatorInASessionCookieWithoutTheToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	c := e.client()
	if status, _, _ := e.page(c, "/console/"); status != http.StatusSeeOther {
		t.Fatalf("the queue before sign-in answered %d, want 303 to the sign-in page", status)
	}
	resp, body := e.signIn(c, operatorSecret)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/" {
		t.Fatalf("sign-in answered %d %s: %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	var session *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "companion_console" {
			session = ck
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Path != "/console/" || session.Secure {
		t.Fatalf("session cookie %+v, want HttpOnly, SameSite=Strict, path /console/, not Secure over plain http", session)
	}
	if strings.Contains(session.Value, operatorSecret) || len(session.Value) < 40 {
		t.Fatalf("session cookie value %q: want the sealed session, never the token", session.Value)
	}
	status, body, _ := e.page(c, "/console/")
	if status != http.StatusOK || !strings.Contains(body, "ops-alice") {
		t.Fatalf("the queue after sign-in answered %d:\n%s", status, body)
	}

	// Behind a TLS-terminating proxy the cookie is Secure.
	_, _, csrf := e.page(c, "/console/signin")
	resp, _ = e.post(c, "/console/signin", url.Values{"csrf": {csrf}, "token": {operatorSecret}}, http.Header{"X-Forwarded-Proto": {"https"}})
	secure := false
	for _, ck := range resp.Cookies() {
		if ck.Name == "companion_console" {
			secure = ck.Secure
		}
	}
	if !secure {
		t.Fatal("with X-Forwarded-Proto: https the session cookie is not Secure")
	}

	// Signing out drops the session cookie: the browser has no session any more.
	_, _, csrf = e.page(c, "/console/")
	if resp, _ := e.post(c, "/console/signout", url.Values{"csrf": {csrf}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out answered %d", resp.StatusCode)
	}
	if status, _, _ := e.page(c, "/console/"); status != http.StatusSeeOther {
		t.Fatalf("the queue after sign-out answered %d, want 303", status)
	}
}

func TestAWorkflowTokenOrAnUnknownTokenCannotSignIn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	c := e.client()
	resp, body := e.signIn(c, workflowSecret)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "n8n-prod is a workflow token") {
		t.Fatalf("a workflow token's sign-in answered %d:\n%s", resp.StatusCode, body)
	}
	for _, ck := range resp.Cookies() {
		if ck.Name == "companion_console" && ck.MaxAge >= 0 {
			t.Fatalf("a workflow token got a session cookie %+v", ck)
		}
	}
	if resp, body := e.signIn(c, "not-a-token"); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "unknown token") ||
		strings.Contains(body, "paste only the secret") {
		t.Fatalf("an unknown token's sign-in answered %d:\n%s", resp.StatusCode, body)
	}
	// The whole configured line pasted instead of its secret: told which part to paste.
	if resp, body := e.signIn(c, "ops:acme:operator:"+operatorSecret); resp.StatusCode != http.StatusUnauthorized ||
		!strings.Contains(body, "paste only the secret, the part after the third colon of name:tenant:operator:secret") {
		t.Fatalf("a whole token line's sign-in answered %d:\n%s", resp.StatusCode, body)
	}
	if status, _, _ := e.page(c, "/console/"); status != http.StatusSeeOther {
		t.Fatalf("the queue answered %d after refused sign-ins, want 303 to sign in", status)
	}
	// The sign-in form itself needs its CSRF token.
	if resp, _ := e.post(c, "/console/signin", url.Values{"token": {operatorSecret}}, nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a sign-in without the CSRF token answered %d, want 403", resp.StatusCode)
	}
}

func TestAFormPostedWithoutTheCSRFTokenIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.unknownItem("inv-742", "QT-742", "", 0)
	c := e.client()
	e.signIn(c, operatorSecret)
	_, _, csrf := e.page(c, "/console/item?key=inv-742")
	if csrf == "" {
		t.Fatal("the item page has no CSRF token in its forms")
	}
	form := url.Values{"key": {"inv-742"}, "outcome": {"succeeded"}, "evidence": {"found INV-742 in the billing tool"}}
	for name, f := range map[string]url.Values{"none": form, "wrong": with(form, "csrf", csrf+"x")} {
		resp, body := e.post(c, "/console/item/resolve", f, nil)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "CSRF") {
			t.Fatalf("resolve with %s CSRF token answered %d:\n%s", name, resp.StatusCode, body)
		}
	}
	// The right token from another site's page is refused too.
	resp, _ := e.post(c, "/console/item/resolve", with(form, "csrf", csrf), http.Header{"Origin": {"https://evil.example"}})
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a cross-site form answered %d, want 403", resp.StatusCode)
	}
	// A form larger than MaxFormBytes is not read at all, so its token is not seen either.
	big := with(with(form, "csrf", csrf), "external_id", strings.Repeat("x", console.MaxFormBytes))
	if resp, _ := e.post(c, "/console/item/resolve", big, nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("an oversized form answered %d, want 403", resp.StatusCode)
	}
	if it := e.get("inv-742"); it.State != items.StateUnknown || it.Resolution != nil {
		t.Fatalf("a refused form changed the item: %s %+v", it.State, it.Resolution)
	}
	// With it, the same form resolves.
	resp, _ = e.post(c, "/console/item/resolve", with(form, "csrf", csrf), nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("resolve with the CSRF token answered %d", resp.StatusCode)
	}
	if it := e.get("inv-742"); it.State != items.StateSucceeded || it.Resolution == nil || it.Resolution.By != "ops-alice" {
		t.Fatalf("after resolving: %s %+v", it.State, it.Resolution)
	}
}

func with(v url.Values, k, val string) url.Values {
	out := url.Values{}
	for kk, vv := range v {
		out[kk] = vv
	}
	out.Set(k, val)
	return out
}

func TestEveryPageCarriesAStrictContentSecurityPolicy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{open: true})
	e.unknownItem("inv-1", "QT-1", "b-1", 0)
	c := e.client()
	for _, path := range []string{"/console/", "/console/item?key=inv-1", "/console/batch?id=b-1", "/console/find?q=inv-1",
		"/console/overview", "/console/nope", "/console/static/console.css"} {
		resp, err := c.Get(e.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		csp := resp.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "form-action 'self'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: CSP %q lacks %s", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: CSP %q, X-Frame-Options %q", path, csp, resp.Header.Get("X-Frame-Options"))
		}
	}
}

func TestOpenModeNeedsNoSignInAndResolvesAsLocal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{open: true})
	e.unknownItem("inv-9", "QT-9", "", 0)
	c := e.client()
	status, body, _ := e.page(c, "/console/")
	if status != http.StatusOK || !strings.Contains(body, "inv-9") {
		t.Fatalf("open mode queue answered %d:\n%s", status, body)
	}
	// No Sign out: there is no sign-in to go back to (it led straight back here); the header says why.
	if strings.Contains(body, "Sign out") || !strings.Contains(body, "local · tenant default (open mode: no sign-in)") {
		t.Errorf("open mode header:\n%s", body)
	}
	status, body, csrf := e.page(c, "/console/item?key=inv-9")
	if status != http.StatusOK || csrf == "" {
		t.Fatalf("open mode item page answered %d (csrf %q):\n%s", status, csrf, body)
	}
	resp, _ := e.post(c, "/console/item/resolve", url.Values{"csrf": {csrf}, "key": {"inv-9"}, "outcome": {"not_committed"},
		"evidence": {"no invoice QT-9 in the billing tool"}}, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("resolve answered %d", resp.StatusCode)
	}
	if it := e.get("inv-9"); it.State != items.StateFailed || it.Resolution.By != "local" {
		t.Fatalf("after not_committed: %s %+v", it.State, it.Resolution)
	}
}

func TestARefusedResolutionShowsTheContractsReason(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{open: true})
	e.unknownItem("inv-5", "QT-5", "", 0)
	c := e.client()
	_, _, csrf := e.page(c, "/console/item?key=inv-5")
	resp, body := e.post(c, "/console/item/resolve", url.Values{"csrf": {csrf}, "key": {"inv-5"}, "outcome": {"succeeded"},
		"evidence": {"short"}}, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "at least 10 characters") || !strings.Contains(body, "short</textarea>") {
		t.Fatalf("short evidence answered %d:\n%s", resp.StatusCode, body)
	}
	// The reason is said once (it used to be said twice: the message and its field's problem).
	if m := regexp.MustCompile(`(?s)id="refused">(.*?)</p>`).FindStringSubmatch(body); m == nil || strings.Count(m[1], "at least 10 characters") != 1 {
		t.Errorf("the refusal does not say its reason once: %v", m)
	}
	resp, body = e.post(c, "/console/item/resolve", url.Values{"csrf": {csrf}, "key": {"inv-5"}, "outcome": {"acknowledged"},
		"evidence": {"I saw the duplicate in billing"}}, nil)
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "can be acknowledged; this item is unknown") {
		t.Fatalf("acknowledging an unknown item answered %d:\n%s", resp.StatusCode, body)
	}
	if it := e.get("inv-5"); it.State != items.StateUnknown || !it.NeedsPerson {
		t.Fatalf("a refused resolution changed the item: %s", it.State)
	}
}

func urlQuery(s string) string { return url.QueryEscape(s) }

func TestTheQueuePagesOldestFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{open: true})
	n := console.QueuePageSize + 5
	for i := range n {
		e.unknownItem(fmt.Sprintf("inv-%03d", i), "", "", 0)
	}
	c := e.client()
	rows := regexp.MustCompile(`data-key="(inv-\d+)"`)
	keys := func(body string) []string {
		var out []string
		for _, m := range rows.FindAllStringSubmatch(body, -1) {
			out = append(out, m[1])
		}
		return out
	}
	_, first, _ := e.page(c, "/console/")
	_, second, _ := e.page(c, "/console/?page=2")
	k1, k2 := keys(first), keys(second)
	if len(k1) != console.QueuePageSize || k1[0] != "inv-000" || len(k2) != 5 || k2[4] != fmt.Sprintf("inv-%03d", n-1) {
		t.Fatalf("page 1 has %d items from %v, page 2 %v", len(k1), k1[:1], k2)
	}
	if !strings.Contains(first, `href="/console/?page=2"`) || !strings.Contains(second, "page 2 of 2") {
		t.Fatal("the pages do not link to each other")
	}
	// The links say which way the waiting goes: the next page holds items that waited less long (they
	// used to read "Older →", the opposite of what the next page holds).
	if !regexp.MustCompile(`id="next">Waiting less long →<`).MatchString(first) || !regexp.MustCompile(`id="prev">← Waiting longer<`).MatchString(second) {
		t.Error("the pager's links do not say that the next page waited less long and the previous one longer")
	}
}

// TestTheQueueGroupsByBatchInTheOrderOfTheirOldest: a page's items are grouped by owner and batch, each
// group in the order of its oldest item, the items of a group oldest first.
func TestTheQueueGroupsByBatchInTheOrderOfTheirOldest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{open: true})
	e.unknownItem("a-1", "", "run-a", 0)
	e.unknownItem("b-1", "", "run-b", 0)
	e.unknownItem("a-2", "", "run-a", 1)
	e.unknownItem("solo", "", "", 0)
	e.unknownItem("b-2", "", "run-b", 1)
	_, body, _ := e.page(e.client(), "/console/")
	var groups []string
	for _, sec := range strings.Split(body, `<section class="card group">`)[1:] {
		batch := "none"
		if m := regexp.MustCompile(`batch <a href="[^"]*">([^<]+)</a>`).FindStringSubmatch(sec); m != nil {
			batch = m[1]
		}
		groups = append(groups, batch+":"+strings.Join(queueKeys(sec), ","))
	}
	if got, want := strings.Join(groups, " "), "run-a:a-1,a-2 run-b:b-1,b-2 none:solo"; got != want {
		t.Errorf("groups %s, want %s", got, want)
	}
}

// TestTheQueueShowsTheOldestPastItsLimit: with more items needing a person than the queue's pages reach
// (a QueueLimit injected small), the first page holds the oldest, the pages end at the limit, and the page
// says that the newest are left out. (The queue used to read the newest changes first up to its limit,
// and left out the oldest.) On SQLite the queue is longer than a list page of 500 and reaches two pages;
// on MongoDB (FerretDB, whose writes slow down as its collection grows) it is 30 items and a limit of 20.
func TestTheQueueShowsTheOldestPastItsLimit(t *testing.T) {
	t.Parallel()
	const page = console.QueuePageSize
	for _, tt := range []struct {
		name     string
		mongo    bool
		n, limit int
		pages    []queuePage
	}{
		{"SQLite", false, items.MaxListLimit + 50, 2 * page, []queuePage{
			{"/console/", 0, page, "page 1 of 2", true},
			{"/console/?page=2", page, 2 * page, "page 2 of 2", false},
			{"/console/?page=9", page, 2 * page, "page 2 of 2", false},
		}},
		{"MongoDB", true, 30, 20, []queuePage{{"/console/", 0, 20, "", false}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{open: true, mongo: tt.mongo, queueLimit: tt.limit})
			for i := range tt.n {
				e.unknownItem(fmt.Sprintf("inv-%03d", i), "", "", 0)
			}
			c := e.client()
			for _, p := range tt.pages {
				status, body, _ := e.page(c, p.path)
				if status != http.StatusOK {
					t.Fatalf("%s: %d", p.path, status)
				}
				var want []string
				for i := p.from; i < p.to; i++ {
					want = append(want, fmt.Sprintf("inv-%03d", i))
				}
				if got := queueKeys(body); !slices.Equal(got, want) {
					t.Errorf("%s lists %d items %v…, want the %d oldest from %s", p.path, len(got), got[:min(len(got), 3)], len(want), want[0])
				}
				if !strings.Contains(body, p.of) || strings.Contains(body, `id="next"`) != p.next {
					t.Errorf("%s: not %q with a next page %v", p.path, p.of, p.next)
				}
				if !strings.Contains(body, fmt.Sprintf(`<span class="count" id="total">%d</span>`, tt.n)) || !strings.Contains(body, `id="truncated"`) ||
					!strings.Contains(body, fmt.Sprintf("the oldest %d of the %d", tt.limit, tt.n)) {
					t.Errorf("%s does not count %d items and say that its pages go as far as the oldest %d", p.path, tt.n, tt.limit)
				}
			}
		})
	}
}

// queuePage is a page of the queue and the items it must show: inv-from up to inv-to, in order.
type queuePage struct {
	path     string
	from, to int
	of       string
	next     bool
}

var queueRow = regexp.MustCompile(`class="queue-row" data-key="([^"]+)"`)

// queueKeys returns the keys of the queue's rows, in the page's order.
func queueKeys(body string) []string {
	var out []string
	for _, m := range queueRow.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

// claimIn claims key for the given run and reference and leaves it in flight.
func (e *env) claimIn(key, ref, execution string) {
	e.t.Helper()
	a, err := e.ledger.BeforeWrite(e.ctx, items.BeforeWriteParams{Tenant: "default", Key: key, Fingerprint: fingerprint,
		Destination: "billing", Dedupe: items.DedupeKey, Reference: ref, ExecutionID: execution})
	if err != nil || a.Decision != items.Proceed {
		e.t.Fatalf("before-write %s: %v %+v", key, err, a)
	}
	e.clock.Advance(time.Second)
}

func TestFindByReferenceAndExecutionID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{open: true})
	e.claimIn("inv-1", "QT-2026-0417", "run-9")
	e.claimIn("inv-2", "QT-2026-0417", "run-10")
	e.claimIn("inv-3", "QT-2026-0418", "run-9")
	e.claimIn("run-10", "", "run-11") // a key that is also an execution id: both are shown
	e.claimIn("inv-4", "<b>x</b>", "run-12")
	section := func(body, id string) []string {
		i := strings.Index(body, `id="`+id+`"`)
		if i < 0 {
			return nil
		}
		end := strings.Index(body[i:], "</section>")
		var keys []string
		for _, m := range regexp.MustCompile(`class="find-row" data-key="([^"]+)"`).FindAllStringSubmatch(body[i:i+end], -1) {
			keys = append(keys, m[1])
		}
		return keys
	}
	c := e.client()
	for _, tt := range []struct {
		q                    string
		item                 bool
		reference, execution []string
	}{
		{"QT-2026-0417", false, []string{"inv-2", "inv-1"}, nil},
		{"run-9", false, nil, []string{"inv-3", "inv-1"}},
		{"run-10", true, nil, []string{"inv-2"}},
		{" QT-2026-0418 ", false, []string{"inv-3"}, nil},
		{"QT-2026", false, nil, nil},
	} {
		status, body, _ := e.page(c, "/console/find?q="+urlQuery(tt.q))
		if status != http.StatusOK {
			t.Fatalf("find %q: %d", tt.q, status)
		}
		ref, exec := section(body, "found-reference"), section(body, "found-execution")
		if fmt.Sprint(ref) != fmt.Sprint(tt.reference) || fmt.Sprint(exec) != fmt.Sprint(tt.execution) ||
			strings.Contains(body, `id="found-item"`) != tt.item {
			t.Errorf("find %q: reference %v, execution %v, item %v; want %v, %v, %v", tt.q, ref, exec,
				strings.Contains(body, `id="found-item"`), tt.reference, tt.execution, tt.item)
		}
		if nothing := strings.Contains(body, `id="nothing"`); nothing != (tt.reference == nil && tt.execution == nil && !tt.item) {
			t.Errorf("find %q: nothing-found shown %v", tt.q, nothing)
		}
	}
	if _, body, _ := e.page(c, "/console/find?q="+urlQuery("<b>x</b>")); !strings.Contains(body, "&lt;b&gt;x&lt;/b&gt;") || strings.Contains(body, "<b>x</b>") {
		t.Error("a reference with markup is not escaped")
	}
}

func TestFindSaysHowToListMoreThanAPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{open: true})
	for i := range console.FindListLimit + 1 {
		e.claimIn(fmt.Sprintf("inv-%03d", i), "QT-O'Brien", "run-1")
	}
	_, body, _ := e.page(e.client(), "/console/find?q="+urlQuery("QT-O'Brien"))
	if n := strings.Count(body, `class="find-row"`); n != console.FindListLimit {
		t.Errorf("%d rows, want %d", n, console.FindListLimit)
	}
	if !strings.Contains(body, `companion items list --reference &#39;QT-O&#39;\&#39;&#39;Brien&#39; --all`) {
		t.Error("the page does not give the command that lists them all, quoted for a shell")
	}
}

// corrupt overwrites the stored document of key with bytes that do not decode, through a connection of
// its own to the store's file (the driver sqlitestore registered), as a damaged disk or a hand edit would.
func (e *env) corrupt(key string) {
	e.t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(e.dir, sqlitestore.FileName)+"?_pragma=busy_timeout(10000)")
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	if res, err := db.ExecContext(e.ctx, `UPDATE items SET doc = '{"key": ' WHERE tenant = 'default' AND key = ?`, key); err != nil {
		e.t.Fatal(err)
	} else if n, _ := res.RowsAffected(); n != 1 {
		e.t.Fatalf("corrupted %d rows, want 1", n)
	}
}

func TestTheQueueNamesAnItemItCannotRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{open: true})
	for _, k := range []string{"inv-1", "inv-2", "inv-3"} {
		e.unknownItem(k, "", "", 0)
	}
	e.corrupt("inv-2")
	status, body, _ := e.page(e.client(), "/console/")
	if status != http.StatusOK {
		t.Fatalf("the queue answers %d with a corrupt item in it", status)
	}
	if !strings.Contains(body, `data-key="inv-1"`) || !strings.Contains(body, `data-key="inv-3"`) || strings.Contains(body, `data-key="inv-2"`) {
		t.Error("the queue does not list the two readable items, or lists the corrupt one")
	}
	if i := strings.Index(body, `id="unreadable"`); i < 0 || !strings.Contains(body[i:], "<code>inv-2</code>") {
		t.Error("the queue does not name the item it cannot read")
	}
}

// BenchmarkQueue renders pages of a queue of console.QueueLimit+500 items that need a person, more than
// its pages reach: the first page (what everybody sees, reloaded every 15 s) reads the kept count and 51
// items, whatever the queue's length; the last page (100) reads the oldest 5,000 in 10 list pages of 500.
// (The queue used to read 5,000 on every page, and sort them.)
func BenchmarkQueue(b *testing.B) {
	e := newEnv(b, envOptions{open: true})
	for i := range console.QueueLimit + 500 {
		e.unknownItem(fmt.Sprintf("inv-%05d", i), "", "", 0)
	}
	c := e.client()
	for _, bb := range []struct {
		name, path string
		first      string
	}{
		{"FirstPage", "/console/?norefresh=1", "inv-00000"},
		{"LastPage", fmt.Sprintf("/console/?norefresh=1&page=%d", console.QueueLimit/console.QueuePageSize),
			fmt.Sprintf("inv-%05d", console.QueueLimit-console.QueuePageSize)},
	} {
		b.Run(bb.name, func(b *testing.B) {
			status, body, _ := e.page(c, bb.path)
			if keys := queueKeys(body); status != http.StatusOK || len(keys) != console.QueuePageSize || keys[0] != bb.first {
				b.Fatalf("%s: %d, %d rows from %v, want %d from %s", bb.path, status, len(keys), keys[:min(1, len(keys))], console.QueuePageSize, bb.first)
			}
			for b.Loop() {
				if status, _, _ := e.page(c, bb.path); status != http.StatusOK {
					b.Fatal(status)
				}
			}
		})
	}
}

// TestItemPageSaysHowManyRepeatsTheHistoryDropped: a workflow that reported the same unknown attempt in a
// loop leaves a bounded history; the item page says how many reports it no longer shows, and an item
// with its whole history says nothing of the kind.
func TestItemPageSaysHowManyRepeatsTheHistoryDropped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{open: true})
	e.unknownItem("inv-7", "QT-7", "", 0)
	e.unknownItem("inv-8", "QT-8", "", 0)
	e.reportInALoop(t, "inv-7", 30)
	c := e.client()
	status, body, _ := e.page(c, "/console/item?key=inv-7")
	if status != http.StatusOK || !strings.Contains(body, `id="history-dropped">15 repeated reports are not shown`) ||
		!strings.Contains(body, "socket hang up, try 29") || strings.Contains(body, "socket hang up, try 10<") {
		t.Errorf("the item page of a looped item answered %d:\n%s", status, body)
	}
	if _, body, _ := e.page(c, "/console/item?key=inv-8"); strings.Contains(body, "history-dropped") {
		t.Errorf("the item page of an item with its whole history speaks of dropped reports:\n%s", body)
	}
}

// TestOverviewCountsTheRepeatsTheHistoriesDropped: a workflow's loop of reports shows on the overview, in
// its destination's row and in the total, as many as the item dropped.
func TestOverviewCountsTheRepeatsTheHistoriesDropped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{open: true})
	e.unknownItem("inv-7", "QT-7", "", 0)
	e.unknownItem("inv-8", "QT-8", "", 0)
	c := e.client()
	if _, body, _ := e.page(c, "/console/overview"); !strings.Contains(body, "Dropped repeats</th>") || !strings.Contains(body, "<td>0</td></tr>") {
		t.Fatalf("the overview before a loop:\n%s", body)
	}
	e.reportInALoop(t, "inv-7", 30)
	if n := e.get("inv-7").HistoryDropped; n != 15 {
		t.Fatalf("inv-7 dropped %d repeats, want 15", n)
	}
	status, body, _ := e.page(c, "/console/overview")
	if status != http.StatusOK || strings.Count(body, `<td class="warn">15</td></tr>`) != 2 || strings.Contains(body, "<td>0</td></tr>") {
		t.Errorf("the overview after a loop of 30 reports answered %d (want 15 dropped in the destination's row and the total):\n%s", status, body)
	}
}

// reportInALoop reports the unknown item key's claim unknown n times, a second apart, each with another
// message (socket hang up, try i), as a workflow stuck in a loop does.
func (e *env) reportInALoop(t *testing.T, key string, n int) {
	t.Helper()
	claim := e.get(key).Claim
	for i := range n {
		e.clock.Advance(time.Second)
		if _, err := e.ledger.AfterWrite(e.ctx, items.AfterWriteParams{Tenant: "default", Key: key, Claim: claim,
			ErrorMessage: fmt.Sprintf("socket hang up, try %d", i), Evidence: items.Evidence{Outcome: items.OutcomeUnknown, Class: items.ClassTimeout}}); err != nil {
			t.Fatal(err)
		}
	}
}
