package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/sqlitestore"
	"github.com/replaysafe/companion/sandbox"
)

// These tests attack a real companion serve the way a web page, a tenant or a workflow could: each one
// checks what a user would (the answer, and that nothing changed), never the service's internals.

// send makes one request with a Host, headers and an optional form body, and returns the status and body.
func send(t *testing.T, method, rawURL, host string, header http.Header, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, rawURL, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rawURL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// errorCode is the code of an answer in the error shape.
func errorCode(body string) string {
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal([]byte(body), &e)
	return e.Error.Code
}

// In open mode, a page whose name was rebound to 127.0.0.1 (DNS rebinding) names its own host: every
// route, the API's, the console's and the profiles' (--debug-addr), answers it 421 misdirected_host and
// nothing changes; localhost:PORT and 127.0.0.1:PORT are answered.
func TestOpenModeRefusesRebindingHostsOnEveryRoute(t *testing.T) {
	p := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": filepath.Join(t.TempDir(), "data"),
		"COMPANION_DEBUG_ADDR": "127.0.0.1:0"})
	status, claim := call(t, p, "POST", "/v1/before-write", "", `{"key":"inv-1","payload":{"n":1},"reference":"QT-1"}`)
	if status != 200 {
		t.Fatalf("before-write: %d %v", status, claim)
	}
	call(t, p, "POST", "/v1/after-write", "", `{"key":"inv-1","claim":"`+claim["claim"].(string)+`","outcome":"unknown","error":{"class":"timeout"}}`)
	_, port, _ := strings.Cut(p.Addr(), ":")
	_, debugPort, _ := strings.Cut(p.DebugAddr(), ":")
	type route struct{ base, method, path, body string }
	api := "http://" + p.Addr()
	routes := []route{
		{api, "GET", "/v1/items", ""}, {api, "GET", "/v1/stats", ""}, {api, "GET", "/v1/items/inv-1", ""},
		{api, "GET", "/metrics", ""}, {api, "GET", "/healthz", ""}, {api, "GET", "/readyz", ""}, {api, "GET", "/openapi.json", ""},
		{api, "GET", "/console/", ""}, {api, "GET", "/console/item?key=inv-1", ""}, {api, "GET", "/console/static/console.css", ""},
		{api, "POST", "/v1/items/inv-1/resolve", `{"outcome":"not_committed","evidence":"the rebinding page says so"}`},
		{api, "POST", "/v1/before-write", `{"key":"inv-2","payload":{"n":1}}`},
		{"http://" + p.DebugAddr(), "GET", "/debug/pprof/", ""}, {"http://" + p.DebugAddr(), "GET", "/debug/pprof/cmdline", ""},
	}
	for _, rt := range routes {
		for _, host := range []string{"attacker.example:" + port, "attacker.example:" + debugPort, "attacker.example", "192.0.2.1:" + port} {
			header := http.Header{}
			if rt.body != "" {
				header.Set("Content-Type", "application/json")
				header.Set("Origin", "http://"+host)
			}
			status, body := send(t, rt.method, rt.base+rt.path, host, header, rt.body)
			if status != http.StatusMisdirectedRequest || errorCode(body) != "misdirected_host" {
				t.Errorf("%s %s%s with Host %s: %d %.200s; want 421 misdirected_host", rt.method, rt.base, rt.path, host, status, body)
			}
		}
		for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port, "localhost:" + debugPort, "127.0.0.1:" + debugPort} {
			if rt.method != "GET" {
				continue
			}
			if status, body := send(t, rt.method, rt.base+rt.path, host, nil, ""); status != http.StatusOK {
				t.Errorf("%s %s%s with Host %s: %d %.200s; want 200", rt.method, rt.base, rt.path, host, status, body)
			}
		}
	}
	status, item := call(t, p, "GET", "/v1/items/inv-1", "", "")
	if status != 200 || item["state"] != "unknown" || item["resolution"] != nil {
		t.Fatalf("the refused requests changed inv-1: %d %v", status, item)
	}
	if status, _ := call(t, p, "GET", "/v1/items/inv-2", "", ""); status != http.StatusNotFound {
		t.Fatalf("a refused before-write wrote inv-2: %d", status)
	}
}

var csrfInForm = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// A signed-in operator's browser visiting another site: that site's form, posted to the console's resolve
// (whatever Host the request names, even one that matches its Origin, as a rebinding page's does), is
// refused and the item is unchanged. From the console's own address the same form resolves.
func TestConsoleResolveFromAForeignOriginChangesNothing(t *testing.T) {
	const wf, op = "wf-secret-0123456789", "op-secret-0123456789"
	p := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": filepath.Join(t.TempDir(), "data"),
		"COMPANION_TOKENS": "n8n:acme:workflow:" + wf + ",anna:acme:operator:" + op, "COMPANION_PUBLIC_URL": "https://companion.example.com"})
	if strings.Contains(p.err.String(), "the console accepts forms only") {
		t.Errorf("the start line warns of the console's origins although public_url is set:\n%s", p.err)
	}
	_, claim := call(t, p, "POST", "/v1/before-write", wf, `{"key":"inv-1","payload":{"n":1}}`)
	call(t, p, "POST", "/v1/after-write", wf, `{"key":"inv-1","claim":"`+claim["claim"].(string)+`","outcome":"unknown","error":{"class":"timeout"}}`)

	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	base := "http://" + p.Addr()
	form := func(path, origin, host string, values url.Values) int {
		t.Helper()
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(values.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if host != "" {
			req.Host = host
		}
		resp, err := browser.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	page := func(path string) string {
		t.Helper()
		resp, err := browser.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		m := csrfInForm.FindStringSubmatch(string(b))
		if m == nil {
			t.Fatalf("%s has no form: %s", path, b)
		}
		return m[1]
	}
	if status := form("/console/signin", base, "", url.Values{"csrf": {page("/console/signin")}, "token": {op}}); status != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", status)
	}
	resolve := url.Values{"key": {"inv-1"}, "outcome": {"not_committed"}, "evidence": {"nothing in the billing tool"}, "csrf": {page("/console/item?key=inv-1")}}
	_, port, _ := strings.Cut(p.Addr(), ":")
	for _, attack := range []struct{ origin, host string }{
		{"http://attacker.example:" + port, "attacker.example:" + port}, {"http://attacker.example:" + port, ""},
		{"https://companion.example.com.attacker.example", ""}, {"null", ""},
	} {
		if status := form("/console/item/resolve", attack.origin, attack.host, resolve); status != http.StatusForbidden {
			t.Errorf("resolve from Origin %s, Host %s: %d, want 403", attack.origin, attack.host, status)
		}
	}
	if _, item := call(t, p, "GET", "/v1/items/inv-1", op, ""); item["state"] != "unknown" || item["resolution"] != nil {
		t.Fatalf("a refused form changed inv-1: %v", item)
	}
	if status := form("/console/item/resolve", "https://companion.example.com", "", resolve); status != http.StatusSeeOther {
		t.Fatalf("resolve from the public URL: %d, want 303", status)
	}
	if _, item := call(t, p, "GET", "/v1/items/inv-1", op, ""); item["state"] != "failed" {
		t.Fatalf("the console's own form did not resolve inv-1: %v", item)
	}
}

// lookupDestination is the sandbox receiver behind a counter of the requests that reach it (and, for the
// lookups, a check of the api_key query parameter, when secret is set).
type lookupDestination struct {
	*httptest.Server
	receiver *sandbox.Receiver
	mu       sync.Mutex
	lookups  []string // the query strings of the lookups (GET) that reached it
}

func newLookupDestination(t *testing.T, secret string) *lookupDestination {
	t.Helper()
	rc, err := sandbox.New(sandbox.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	d := &lookupDestination{receiver: rc}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			d.mu.Lock()
			d.lookups = append(d.lookups, r.URL.EscapedPath()+"?"+r.URL.RawQuery)
			d.mu.Unlock()
			if secret != "" && r.URL.Query().Get("api_key") != secret {
				http.Error(w, `{"error":"unauthorized: `+r.URL.String()+`"}`, http.StatusUnauthorized)
				return
			}
		}
		rc.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(d.Close)
	return d
}

func (d *lookupDestination) reads() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.lookups...)
}

// unknownItem claims key with the body's extra members and reports a timeout.
func unknownItem(t *testing.T, p program, token, key, extra string) {
	t.Helper()
	status, a := call(t, p, "POST", "/v1/before-write", token, `{"key":"`+key+`","payload":{"n":1}`+extra+`}`)
	if status != 200 || a["decision"] != "proceed" {
		t.Fatalf("before-write %s: %d %v", key, status, a)
	}
	if status, r := call(t, p, "POST", "/v1/after-write", token, `{"key":"`+key+`","claim":"`+a["claim"].(string)+`","outcome":"unknown","error":{"class":"timeout"}}`); status != 200 {
		t.Fatalf("after-write %s: %d %v", key, status, r)
	}
}

// waitFor polls until done says so, or fails after a while.
func waitFor(t *testing.T, what string, done func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if done() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// A reference that would make a lookup climb out of its path (.., a / or \, % escapes), or that is blank,
// makes no request reach the destination and settles nothing: the item waits for its owner with
// lookup_bad_reference in its evidence. A good reference in the same run is read and settled.
func TestBadReferencesReachNoDestinationAndSettleNothing(t *testing.T) {
	d := newLookupDestination(t, "")
	dir := t.TempDir()
	cfg := writeConfig(t, "destinations:\n  billing:\n    lookup:\n"+
		"      url: "+d.URL+"/v1/customers/{reference}/records\n"+
		"      found: {status: 200, path: records.0.id}\n      absent_on_404: true\n      settle_after: [1s]\n      rate_per_second: 50\n")
	p := start(t, map[string]string{"COMPANION_CONFIG": cfg, "COMPANION_DATA_DIR": filepath.Join(dir, "data"), "COMPANION_ADDR": "127.0.0.1:0",
		"COMPANION_SWEEP_EVERY": "@every 1s"})
	bad := []string{"..", ".", "", "  ", "../../admin", "a/b", `..\..`, "%2e%2e", "%2F", "%252e%252e", "100%"}
	for i, ref := range bad {
		b, _ := json.Marshal(ref)
		unknownItem(t, p, "", fmt.Sprintf("bad-%d", i), `,"destination":"billing","reference":`+string(b))
	}
	unknownItem(t, p, "", "good", `,"destination":"billing","reference":"QT-9"`)
	waitFor(t, "the good item's read", func() bool {
		_, it := call(t, p, "GET", "/v1/items/good", "", "")
		return it["lookup_failed"] == true || it["state"] != "unknown"
	})
	for i, ref := range bad {
		key := fmt.Sprintf("bad-%d", i)
		waitFor(t, key+"'s lookup to fail", func() bool {
			_, it := call(t, p, "GET", "/v1/items/"+key, "", "")
			return it["lookup_failed"] == true
		})
		_, it := call(t, p, "GET", "/v1/items/"+key, "", "")
		history, _ := json.Marshal(it["history"])
		if it["state"] != "unknown" || it["needs_person"] != true || it["external_id"] != nil && it["external_id"] != "" ||
			!strings.Contains(string(history), "lookup_bad_reference") {
			t.Errorf("reference %q: %v", ref, it)
		}
	}
	if reads := d.reads(); len(reads) != 1 || !strings.HasPrefix(reads[0], "/v1/customers/QT-9/records") {
		t.Fatalf("the destination saw %q; want the good item's one read only", reads)
	}
}

// A lookup's secret query parameter (query: {api_key: {env: CRM_KEY}}) is sent with its reads and appears
// nowhere else: not in an item (history, evidence), the log, an alert (Slack), the metrics, or the error
// of a configuration that writes it in the URL.
func TestAQuerySecretNeverShows(t *testing.T) {
	const secret = "crm_live_7c2d9e1f-query-secret"
	d := newLookupDestination(t, secret)
	slackSaw := &recorder{}
	slackAPI := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		slackSaw.add(string(b))
		fmt.Fprint(w, `{"ok":true,"channel":"C1","ts":"1700000000.000100"}`)
	}))
	defer slackAPI.Close()
	dir := t.TempDir()
	lookup := "    lookup:\n      url: " + d.URL + "/records?reference={reference}\n      query:\n        api_key: {env: CRM_KEY}\n" +
		"      found: {status: 200, path: records.0.id}\n      settle_after: [1s]\n      max_failed_reads: 2\n      retry_after: 1s\n      rate_per_second: 50\n"
	cfg := writeConfig(t, "alerts:\n  default_owner: U0OWNER\ndestinations:\n  billing:\n    lease_seconds: 5\n"+lookup)
	env := map[string]string{"COMPANION_CONFIG": cfg, "COMPANION_DATA_DIR": filepath.Join(dir, "data"), "COMPANION_ADDR": "127.0.0.1:0",
		"CRM_KEY": secret, "SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "signing", "SLACK_API_URL": slackAPI.URL + "/",
		"COMPANION_SWEEP_EVERY": "@every 1s"}
	p := start(t, env)
	// inv-1 committed and its answer was lost: the lookup (with its key) finds it. inv-2's lookup fails twice.
	status, a := call(t, p, "POST", "/v1/before-write", "", `{"key":"inv-1","payload":{"n":1},"destination":"billing","reference":"QT-1"}`)
	if status != 200 {
		t.Fatal(a)
	}
	req, _ := http.NewRequest("POST", d.URL+"/records", strings.NewReader(`{"reference":"QT-1"}`))
	req.Header.Set(sandbox.HeaderFault, string(sandbox.FaultCommitThenDrop))
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("commit_then_drop answered")
	}
	call(t, p, "POST", "/v1/after-write", "", `{"key":"inv-1","claim":"`+a["claim"].(string)+`","outcome":"unknown","error":{"class":"connection_reset"}}`)
	fault, _ := http.NewRequest("POST", d.URL+"/control/faults", strings.NewReader(`{"fault":"lookup_500","count":100,"reference":"QT-2"}`))
	if resp, err := http.DefaultClient.Do(fault); err != nil || resp.StatusCode != 200 {
		t.Fatalf("arming lookup_500: %v", err)
	}
	unknownItem(t, p, "", "inv-2", `,"destination":"billing","reference":"QT-2"`)
	waitFor(t, "inv-1 settled and inv-2's lookup failed", func() bool {
		_, one := call(t, p, "GET", "/v1/items/inv-1", "", "")
		_, two := call(t, p, "GET", "/v1/items/inv-2", "", "")
		return one["state"] == "succeeded" && two["lookup_failed"] == true
	})
	waitFor(t, "the alert about inv-2", func() bool { return strings.Contains(slackSaw.all(), "inv-2") })
	reads := d.reads()
	if len(reads) < 3 || !strings.Contains(reads[0], "api_key="+secret) {
		t.Fatalf("the destination's reads %q do not carry the key", reads)
	}
	var shown strings.Builder
	for _, path := range []string{"/v1/items/inv-1", "/v1/items/inv-2", "/v1/items", "/metrics", "/console/item?key=inv-2"} {
		_, body := send(t, "GET", "http://"+p.Addr()+path, "", nil, "")
		shown.WriteString(body)
	}
	if !strings.Contains(shown.String(), "api_key=REDACTED") {
		t.Errorf("the items do not show the URL read with its key redacted:\n%.2000s", shown.String())
	}
	for what, text := range map[string]string{"the API and the console": shown.String(), "the log": p.err.String(), "Slack": slackSaw.all()} {
		if strings.Contains(text, secret) || strings.Contains(text, url.QueryEscape(secret)) {
			t.Errorf("%s shows the query secret", what)
		}
	}
	// Written in the URL itself, the secret stops the start, and the error does not repeat it.
	bad := writeConfig(t, "destinations:\n  billing:\n    lookup:\n      url: "+d.URL+"/records?api_key="+secret+"&reference={reference}\n"+
		"      found: {path: records.0.id}\n")
	q := newProgram(map[string]string{"COMPANION_CONFIG": bad, "COMPANION_DATA_DIR": filepath.Join(t.TempDir(), "data"), "COMPANION_ADDR": "127.0.0.1:0"})
	err := q.Run(context.Background(), []string{"serve"})
	q.Close()
	if err == nil || !strings.Contains(err.Error(), "holds a secret in its query (api_key=…)") || strings.Contains(err.Error(), secret) {
		t.Fatalf("a secret in the lookup URL: %v", err)
	}
}

// Tenant globex cannot make companion read a destination scoped to acme with its credentials: its
// before-write naming the destination is refused (400 destination_not_allowed, single and batch) and
// writes nothing, so no lookup is ever made for it; acme's works. A lookup destination without tenants:
// while two tenants hold tokens is a warning on the start line.
func TestATenantCannotTriggerALookupOfAnotherTenantsDestination(t *testing.T) {
	const acme, globex = "wf-acme-secret-0123456789", "wf-globex-secret-0123456789"
	d := newLookupDestination(t, "")
	dir := t.TempDir()
	cfg := writeConfig(t, "destinations:\n  crm:\n    tenants: [acme]\n    lookup:\n      url: "+d.URL+"/records?reference={reference}\n"+
		"      found: {status: 200, path: records.0.id}\n      settle_after: [1s]\n      rate_per_second: 50\n"+
		"  shared:\n    lookup:\n      url: "+d.URL+"/records?reference={reference}\n      found: {path: records.0.id}\n")
	p := start(t, map[string]string{"COMPANION_CONFIG": cfg, "COMPANION_DATA_DIR": filepath.Join(dir, "data"), "COMPANION_ADDR": "127.0.0.1:0",
		"COMPANION_TOKENS": "n8n-acme:acme:workflow:" + acme + ",n8n-globex:globex:workflow:" + globex, "COMPANION_SWEEP_EVERY": "@every 1s"})
	if line := p.err.String(); !strings.Contains(line, "destination shared has a lookup and no tenants list while tokens of 2 tenants (acme, globex)") ||
		strings.Contains(line, "destination crm has a lookup and no tenants") {
		t.Errorf("the start line does not warn of shared's lookup alone:\n%s", line)
	}
	status, body := call(t, p, "POST", "/v1/before-write", globex, `{"key":"g-1","payload":{"n":1},"destination":"crm","reference":"QT-ACME-42"}`)
	fields, _ := json.Marshal(body)
	if status != 400 || !strings.Contains(string(fields), `"code":"destination_not_allowed"`) || !strings.Contains(string(fields), `"field":"destination"`) {
		t.Fatalf("globex's before-write at crm: %d %s", status, fields)
	}
	status, body = call(t, p, "POST", "/v1/batches/before-write", globex, `{"batch_id":"exec-1","items":[{"key":"g-2","payload":{"n":1}},`+
		`{"key":"g-3","payload":{"n":1},"destination":"crm","reference":"QT-ACME-42"}]}`)
	fields, _ = json.Marshal(body)
	if status != 400 || !strings.Contains(string(fields), `"field":"items[1].destination"`) {
		t.Fatalf("globex's batch naming crm: %d %s", status, fields)
	}
	for _, key := range []string{"g-1", "g-2", "g-3"} {
		if status, _ := call(t, p, "GET", "/v1/items/"+key, globex, ""); status != http.StatusNotFound {
			t.Errorf("a refused request wrote %s: %d", key, status)
		}
	}
	unknownItem(t, p, acme, "a-1", `,"destination":"crm","reference":"QT-ACME-1"`)
	waitFor(t, "acme's read", func() bool { return len(d.reads()) > 0 })
	time.Sleep(1500 * time.Millisecond) // another sweep, in which a read for globex would show
	for _, r := range d.reads() {
		if strings.Contains(r, "QT-ACME-42") {
			t.Fatalf("the destination was read for globex: %q", d.reads())
		}
	}
}

// An owner outside the allow-list (tenants.<tenant>.owners, else the owners the alert routes name) is
// refused with owner_not_allowed naming the field, single and batch, and nothing is written; without any
// list every owner is honoured and the start line says request owners are unrestricted.
func TestAnOwnerOutsideTheAllowListWritesNothing(t *testing.T) {
	const wf = "wf-acme-secret-0123456789"
	dir := t.TempDir()
	cfg := writeConfig(t, "tenants:\n  acme:\n    owners: [U0BILLING, \"#billing-ops\"]\n")
	p := start(t, map[string]string{"COMPANION_CONFIG": cfg, "COMPANION_DATA_DIR": filepath.Join(dir, "data"), "COMPANION_ADDR": "127.0.0.1:0",
		"COMPANION_TOKENS": "n8n:acme:workflow:" + wf})
	if strings.Contains(p.err.String(), "unrestricted") {
		t.Errorf("the start line says owners are unrestricted although acme has a list:\n%s", p.err)
	}
	for _, body := range []string{`{"key":"o-1","payload":{"n":1},"owner":"U0ATTACKER"}`, `{"key":"o-1","payload":{"n":1},"owner":"#general"}`} {
		status, ans := call(t, p, "POST", "/v1/before-write", wf, body)
		b, _ := json.Marshal(ans)
		if status != 400 || !strings.Contains(string(b), `"code":"owner_not_allowed"`) || !strings.Contains(string(b), `"field":"owner"`) {
			t.Errorf("%s: %d %s", body, status, b)
		}
	}
	status, ans := call(t, p, "POST", "/v1/batches/prepare", wf, `{"batch_id":"exec-1","items":[{"key":"o-2","payload":{"n":1},"owner":"U0BILLING"},{"key":"o-3","payload":{"n":1},"owner":"U0ATTACKER"}]}`)
	if b, _ := json.Marshal(ans); status != 400 || !strings.Contains(string(b), `"field":"items[1].owner"`) {
		t.Errorf("batch with a foreign owner: %d %s", status, b)
	}
	for _, key := range []string{"o-1", "o-2", "o-3"} {
		if status, _ := call(t, p, "GET", "/v1/items/"+key, wf, ""); status != http.StatusNotFound {
			t.Errorf("a refused request wrote %s: %d", key, status)
		}
	}
	if status, ans := call(t, p, "POST", "/v1/before-write", wf, `{"key":"o-4","payload":{"n":1},"owner":"#billing-ops"}`); status != 200 {
		t.Errorf("an allowed owner: %d %v", status, ans)
	}

	free := start(t, map[string]string{"COMPANION_DATA_DIR": filepath.Join(t.TempDir(), "data"), "COMPANION_ADDR": "127.0.0.1:0"})
	if !strings.Contains(free.err.String(), "request owners are unrestricted for tenant default") {
		t.Errorf("the start line does not warn that owners are unrestricted:\n%s", free.err)
	}
	if status, ans := call(t, free, "POST", "/v1/before-write", "", `{"key":"o-1","payload":{"n":1},"owner":"U0ANYONE"}`); status != 200 {
		t.Errorf("without a list, an owner: %d %v", status, ans)
	}
}

// items list and items show print a reference stored with ESC and OSC sequences (written to the store
// directly, as data from before the API refused them) without a single control character.
func TestItemsListAndShowPrintNoControlCharacters(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	env := map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": dir}
	p := start(t, env)
	unknownItem(t, p, "", "inv-1", `,"reference":"QT-1","execution_id":"exec-1"`)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	store, err := sqlitestore.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Transition(context.Background(), "default", "inv-1", func(it *items.Item) (*items.Item, error) {
		it.Reference = "QT-\x1b[2J\x1b]0;owned\x07\x1b]52;c;cm0gLXJmIH4=\x07"
		it.Owner, it.Destination = "U0\u009b31m", "billing\u202e"
		it.History[0].Note = "\x1b[31mred\x1b[0m"
		return it, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	p = start(t, env)
	client := map[string]string{"COMPANION_URL": "http://" + p.Addr()}
	for _, args := range [][]string{{"items", "list"}, {"items", "list", "--json"}, {"items", "show", "inv-1"}, {"items", "show", "inv-1", "--json"}, {"stats"}} {
		out, err := run(t, client, args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if i := strings.IndexAny(out, "\x1b\x07\u009b\u202e"); i >= 0 {
			t.Errorf("%v prints a control character: %q", args, out[max(0, i-30):min(len(out), i+30)])
		}
		if args[0] == "items" && !strings.Contains(out, `\u001b[2J`) && !strings.Contains(out, `\\u001b[2J`) {
			t.Errorf("%v does not show the reference escaped:\n%s", args, out)
		}
		if strings.HasSuffix(args[len(args)-1], "--json") && !json.Valid([]byte(out)) {
			t.Errorf("%v prints JSON that is not valid:\n%s", args, out)
		}
	}
}

// Fifty wrong tokens within a second from one address are answered 429 (Retry-After, the error shape)
// once the budget is spent, and a right token works again after Retry-After.
func TestFiftyWrongTokensAreThrottledAndTheRightOneWorksAfter(t *testing.T) {
	const op = "op-secret-0123456789"
	p := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": filepath.Join(t.TempDir(), "data"),
		"COMPANION_TOKENS": "anna:acme:operator:" + op})
	var limited, refused atomic.Int32
	retryAfter := ""
	began := time.Now()
	for i := range 50 {
		req, _ := http.NewRequest("GET", "http://"+p.Addr()+"/v1/stats", nil)
		req.Header.Set("Authorization", "Bearer guess-"+strconv.Itoa(i)+"-0123456789")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusTooManyRequests:
			limited.Add(1)
			retryAfter = resp.Header.Get("Retry-After")
			if errorCode(string(b)) != "too_many_requests" {
				t.Errorf("429 body %s", b)
			}
		case http.StatusUnauthorized:
			refused.Add(1)
		default:
			t.Fatalf("a wrong token: %d %s", resp.StatusCode, b)
		}
	}
	if took := time.Since(began); took > time.Second {
		t.Logf("50 requests took %s (a slow machine)", took)
	}
	if limited.Load() < 30 || refused.Load() < 10 {
		t.Fatalf("50 wrong tokens: %d answered 401, %d 429; want the first ten 401, most of the rest 429", refused.Load(), limited.Load())
	}
	secs, err := strconv.Atoi(retryAfter)
	if err != nil || secs < 1 {
		t.Fatalf("Retry-After %q", retryAfter)
	}
	if status, _ := call(t, p, "GET", "/v1/stats", op, ""); status != http.StatusTooManyRequests {
		t.Logf("the right token within the window: %d (the window had passed on a slow machine)", status)
	}
	time.Sleep(time.Duration(secs) * time.Second)
	if status, body := call(t, p, "GET", "/v1/stats", op, ""); status != http.StatusOK {
		t.Fatalf("the right token after Retry-After: %d %v", status, body)
	}
	if strings.Contains(p.err.String(), "guess-") {
		t.Errorf("the log shows a guessed token")
	}
	if !strings.Contains(p.err.String(), "the console accepts forms only when opened as localhost or a loopback address: set public_url") {
		t.Errorf("a service with tokens and no public_url does not say where its console takes forms from:\n%s", p.err)
	}
}

// allowed_hosts (and COMPANION_ALLOWED_HOSTS, which wins) makes a service with tokens answer only its
// names and the loopback ones; a malformed entry stops the start naming it.
func TestAllowedHostsFromConfigAndEnvironment(t *testing.T) {
	const op = "op-secret-0123456789"
	dir := t.TempDir()
	cfg := writeConfig(t, "allowed_hosts: [companion.example.com]\ntrusted_proxies: [10.0.0.0/8, 127.0.0.1]\n")
	env := map[string]string{"COMPANION_CONFIG": cfg, "COMPANION_DATA_DIR": filepath.Join(dir, "data"), "COMPANION_ADDR": "127.0.0.1:0",
		"COMPANION_TOKENS": "anna:acme:operator:" + op}
	p := start(t, env)
	auth := http.Header{"Authorization": {"Bearer " + op}}
	for host, want := range map[string]int{"companion.example.com": 200, "companion.example.com:8443": 200, "localhost": 200, "other.example.com": 421} {
		if status, body := send(t, "GET", "http://"+p.Addr()+"/v1/stats", host, auth, ""); status != want {
			t.Errorf("config: Host %s: %d %.200s, want %d", host, status, body, want)
		}
	}
	p.Close()
	env["COMPANION_ALLOWED_HOSTS"] = "ops.example.com, ops.example.com:9000"
	p = start(t, env)
	for host, want := range map[string]int{"companion.example.com": 421, "ops.example.com:9000": 200, "127.0.0.1": 200} {
		if status, _ := send(t, "GET", "http://"+p.Addr()+"/v1/stats", host, auth, ""); status != want {
			t.Errorf("environment: Host %s: %d, want %d", host, status, want)
		}
	}
	for yaml, want := range map[string]string{
		"allowed_hosts: [https://companion.example.com]\n": "allowed_hosts[0]: \"https://companion.example.com\" must be a host name",
		"trusted_proxies: [proxy.local]\n":                 "trusted_proxies[0]: \"proxy.local\" is not an IP address or a CIDR range",
		"tenants:\n  acme:\n    owners: [\"\"]\n":          "tenants.acme.owners[0]: is empty",
		"destinations:\n  crm:\n    tenants: [\"a b\"]\n":  "destinations.crm.tenants[0]: \"a b\" is not a tenant",
	} {
		if _, _, err := startWithBadConfig(t, yaml, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want %q", yaml, err, want)
		}
	}
	q := newProgram(map[string]string{"COMPANION_DATA_DIR": filepath.Join(t.TempDir(), "data"), "COMPANION_ADDR": "127.0.0.1:0",
		"COMPANION_TRUSTED_PROXIES": "10.0.0.0/33"})
	err := q.Run(context.Background(), []string{"serve"})
	q.Close()
	if err == nil || !strings.Contains(err.Error(), `COMPANION_TRUSTED_PROXIES: "10.0.0.0/33" is not an IP address or a CIDR range`) {
		t.Errorf("a bad COMPANION_TRUSTED_PROXIES: %v", err)
	}
}
