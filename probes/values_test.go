package probes_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/probes"
	"github.com/replaysafe/companion/sandbox"
)

// claimWith is a before-write of key at the env's destination with the reference and tenant given,
// made unknown by a timeout.
func (e *env) unknownWith(tenant, key, reference string) {
	e.t.Helper()
	fp, err := items.Fingerprint([]byte(payload))
	if err != nil {
		e.t.Fatal(err)
	}
	a, err := e.ledger.BeforeWrite(e.ctx, items.BeforeWriteParams{Tenant: tenant, Key: key, Fingerprint: fp, Destination: dest, Reference: reference})
	if err != nil || a.Decision != items.Proceed {
		e.t.Fatalf("before-write of %s: %v %+v", key, err, a)
	}
	if _, err := e.ledger.AfterWrite(e.ctx, items.AfterWriteParams{Tenant: tenant, Key: key, Claim: a.Claim, Evidence: unknownTimeout}); err != nil {
		e.t.Fatal(err)
	}
}

// countingServer is a destination that answers every read with body, and counts the requests that reach it.
func countingServer(t *testing.T, body string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// A placeholder value that would leave the lookup's path (., .., /, \, % once decoded) or that is blank
// fails the read at once, with lookup_bad_reference in its evidence: no request reaches the destination,
// nothing is settled, and the item waits for its owner (no later read could do better). In the query the
// same values are only escaped.
func TestBadPlaceholderValuesSendNothing(t *testing.T) {
	t.Parallel()
	srv, hits := countingServer(t, `{"records":[{"id":"rec_other"}]}`)
	e := newEnv(t, probes.Lookup{URL: srv.URL + "/v1/customers/{reference}/orders", IDPath: "records.0.id",
		SettleAfter: []time.Duration{time.Second, 2 * time.Second}}, sandbox.Config{})
	bad := []string{"", "   ", ".", "..", "a/b", "../orders", `..\admin`, "%2e%2e", "%2E%2e%2fadmin", "%2F", "%252e%252e", "50%", "a%5Cb"}
	for i, ref := range bad {
		e.unknownWith("default", fmt.Sprintf("bad-%d", i), ref)
	}
	e.run(time.Second)
	e.run(10 * time.Minute)
	if n := hits.Load(); n != 0 {
		t.Fatalf("%d request(s) reached the destination for bad references", n)
	}
	for i, ref := range bad {
		it := e.item(fmt.Sprintf("bad-%d", i))
		last := it.History[len(it.History)-1]
		if it.State != items.StateUnknown || !it.LookupFailed || !it.NeedsPerson || it.ExternalID != "" ||
			!strings.Contains(last.Note, probes.CodeBadReference) || len(it.ProbeReads()) != 0 {
			t.Errorf("reference %q: %s lookup_failed=%v needs_person=%v external_id=%q, last event %s %q",
				ref, it.State, it.LookupFailed, it.NeedsPerson, it.ExternalID, last.Kind, last.Note)
		}
	}

	// In the query too (the contract's rule holds wherever the placeholder stands): no request, the
	// lookup fails with the cause, while a plain reference there is looked up.
	var mu sync.Mutex
	var queries []string
	qsrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.EscapedPath()+"?"+r.URL.RawQuery)
		mu.Unlock()
		fmt.Fprint(w, `{"records":[{"id":"rec_1"}]}`)
	}))
	t.Cleanup(qsrv.Close)
	q := newEnv(t, probes.Lookup{URL: qsrv.URL + "/v1/search?ref={reference}", IDPath: "records.0.id"}, sandbox.Config{})
	q.unknownWith("default", "inv-1", "INV/2026/../7")
	q.unknownWith("default", "inv-2", "INV-2026-7")
	q.run(time.Minute)
	mu.Lock()
	defer mu.Unlock()
	if len(queries) != 1 || queries[0] != "/v1/search?ref=INV-2026-7" {
		t.Fatalf("requests %q, want one, for ref=INV-2026-7", queries)
	}
	if it := q.item("inv-1"); it.State != items.StateUnknown || !it.LookupFailed ||
		!strings.Contains(it.History[len(it.History)-1].Note, probes.CodeBadReference) {
		t.Fatalf("inv-1 is %s lookup_failed=%v, want unknown with %s", it.State, it.LookupFailed, probes.CodeBadReference)
	}
	if it := q.item("inv-2"); it.State != items.StateSucceeded {
		t.Fatalf("inv-2 is %s, want succeeded", it.State)
	}
}

// A secret query parameter is sent with every read and shown nowhere: the history and the verdict's
// evidence show REDACTED in its place, as the log and a failed read's detail do.
func TestQuerySecretsAreSentAndNeverShown(t *testing.T) {
	t.Parallel()
	const secret = "crm_live_5a1f9e-query-secret"
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Query().Get("api_key"))
		mu.Unlock()
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, `{"error":"bad request to %s"}`, r.URL)
	}))
	t.Cleanup(srv.Close)
	e := newEnv(t, probes.Lookup{URL: srv.URL + "/records?reference={reference}", IDPath: "records.0.id",
		Query: []probes.QueryParam{{Name: "api_key", Value: secret}}, MaxFailedReads: 2,
		SettleAfter: []time.Duration{time.Second}, RetryAfter: time.Second}, sandbox.Config{})
	e.unknownWith("default", "inv-1", "QT-1")
	e.run(time.Second)
	e.run(2 * time.Second)
	mu.Lock()
	if len(seen) != 2 || seen[0] != secret {
		t.Fatalf("the destination saw api_key %q, want the secret twice", seen)
	}
	mu.Unlock()
	it := e.item("inv-1")
	if !it.LookupFailed {
		t.Fatalf("two failed reads did not fail the lookup: %+v", it.History)
	}
	doc := fmt.Sprintf("%+v", it)
	if strings.Contains(doc, secret) || !strings.Contains(doc, "api_key=REDACTED") {
		t.Errorf("the item shows the secret, or no REDACTED in its place:\n%s", doc)
	}
	if strings.Contains(e.logs.String(), secret) {
		t.Errorf("the log shows the secret:\n%s", e.logs)
	}

	// A destination that cannot be reached: the detail says so without the URL.
	srv.Close()
	e.unknownWith("default", "inv-2", "QT-2")
	e.run(time.Second)
	if doc := fmt.Sprintf("%+v", e.item("inv-2")); strings.Contains(doc, secret) {
		t.Errorf("a failed connection's read shows the secret:\n%s", doc)
	}
}

// An item of a tenant the destination is not open to (written before its tenants were set) is never read.
func TestAnItemOfAnotherTenantIsNeverRead(t *testing.T) {
	t.Parallel()
	srv, hits := countingServer(t, `{"records":[{"id":"rec_1"}]}`)
	e := newEnv(t, probes.Lookup{URL: srv.URL + "/records?reference={reference}", IDPath: "records.0.id"}, sandbox.Config{})
	e.unknownWith("globex", "inv-1", "QT-1")
	e.unknownWith("acme", "inv-2", "QT-2")
	scoped, err := items.NewLedger(context.Background(), e.store, items.Config{Now: e.clock.Now,
		Destinations: map[string]items.Destination{dest: {Dedupe: items.DedupeLookup, LeaseSeconds: 60, Tenants: []string{"acme"}}}})
	if err != nil {
		t.Fatal(err)
	}
	e.ledger = scoped
	e.prober = e.newProber(e.store, 0)
	e.run(time.Minute)
	if n := hits.Load(); n != 1 {
		t.Fatalf("%d reads, want 1 (acme's item only)", n)
	}
	if it, _ := e.store.Get(e.ctx, "globex", "inv-1"); it.State != items.StateUnknown || len(it.ProbeReads()) != 0 {
		t.Fatalf("globex's item was read: %s %+v", it.State, it.History)
	}
	if it, _ := e.store.Get(e.ctx, "acme", "inv-2"); it.State != items.StateSucceeded {
		t.Fatalf("acme's item is %s, want succeeded", it.State)
	}
}

// The configuration's secrets stay out of the URL, and go over https unless the host is loopback or the
// destination says insecure_http.
func TestLookupSecretsNeedTheirPlace(t *testing.T) {
	t.Parallel()
	hdr := []probes.Header{{Name: "Authorization", Value: "Bearer sk_live_abc"}}
	qry := []probes.QueryParam{{Name: "api_key", Value: "k_live_abc"}}
	for _, c := range []struct {
		name   string
		lookup probes.Lookup
		want   string // "" when accepted
	}{
		{"KeyInTheURL", probes.Lookup{URL: "https://crm.example/x?api_key=k_live_abc&q={reference}"}, "holds a secret in its query (api_key=…)"},
		{"TokenInTheURL", probes.Lookup{URL: "https://crm.example/x?q={reference}&access_token=abc"}, "access_token"},
		{"HubSpotKey", probes.Lookup{URL: "https://crm.example/x?hapikey=abc"}, "hapikey"},
		{"PlaceholderIsNoSecret", probes.Lookup{URL: "https://crm.example/x?key={key}&limit=1"}, ""},
		{"HeaderOverHTTP", probes.Lookup{URL: "http://crm.example/x?q={reference}", Headers: hdr}, "sends secrets (header Authorization) over plain http to crm.example"},
		{"QueryOverHTTP", probes.Lookup{URL: "http://crm.example/x?q={reference}", Query: qry}, "query api_key"},
		{"InsecureHTTPSaid", probes.Lookup{URL: "http://crm.internal/x?q={reference}", Query: qry, Headers: hdr, InsecureHTTP: true}, ""},
		{"LoopbackHTTP", probes.Lookup{URL: "http://127.0.0.1:9/x?q={reference}", Headers: hdr}, ""},
		{"LocalhostHTTP", probes.Lookup{URL: "http://localhost:9/x?q={reference}", Query: qry}, ""},
		{"HTTPWithoutSecrets", probes.Lookup{URL: "http://crm.example/x?q={reference}"}, ""},
		{"HTTPS", probes.Lookup{URL: "https://crm.example/x?q={reference}", Query: qry, Headers: hdr}, ""},
		{"QueryTwice", probes.Lookup{URL: "https://crm.example/x?api_key={key}", Query: qry}, "query.api_key: is also in the url's query"},
	} {
		c.lookup.IDPath = "id"
		var got []string
		for _, p := range c.lookup.WithDefaults().Check() {
			got = append(got, p.Field+": "+p.Problem)
		}
		all := strings.Join(got, "; ")
		if (c.want == "") != (all == "") || !strings.Contains(all, c.want) {
			t.Errorf("%s: problems %q, want %q", c.name, all, c.want)
		}
		if strings.Contains(all, "k_live_abc") || strings.Contains(all, "sk_live") {
			t.Errorf("%s: a problem shows the secret: %s", c.name, all)
		}
	}
}
