package probes_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/probes"
	"github.com/replaysafe/companion/sandbox"
)

// readOnce makes an item unknown and runs one probe read of it against handler, with lookup's settings;
// it returns the recorded read (its history event) and the item.
func readOnce(t *testing.T, lookup probes.Lookup, handler http.HandlerFunc) (items.Event, *items.Item) {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	if lookup.URL == "" {
		lookup.URL = srv.URL + "/search?q={reference}"
	} else {
		lookup.URL = strings.ReplaceAll(lookup.URL, "SERVER", srv.URL)
	}
	lookup.SettleAfter = []time.Duration{time.Second, 2 * time.Second}
	e := newEnv(t, lookup, sandbox.Config{})
	a := e.claim("inv:7+x", "proceed/new")
	e.report("inv:7+x", a, unknownTimeout, "")
	e.run(time.Second)
	it := e.item("inv:7+x")
	if reads := it.ProbeReads(); len(reads) == 1 {
		return reads[0], it
	}
	last := it.History[len(it.History)-1]
	if last.Kind != items.EventReconcile {
		t.Fatalf("no read recorded: %+v", it.History)
	}
	return last, it
}

func TestReadRules(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 4096)
	cases := []struct {
		name    string
		lookup  probes.Lookup
		status  int
		body    string
		outcome string // the read's outcome
		note    string // in the read's note
	}{
		{"FoundString", probes.Lookup{}, 200, `{"records":[{"id":"rec_9"}]}`, items.FindingFound, `records.0.id = "rec_9"`},
		{"FoundNumber", probes.Lookup{}, 200, `{"records":[{"id":12345678901234567890}]}`, items.FindingFound, `"12345678901234567890"`},
		{"EmptyArrayIsAbsent", probes.Lookup{}, 200, `{"records":[]}`, items.ProbeAbsent, "records.0.id empty"},
		{"NullIsAbsent", probes.Lookup{}, 200, `{"records":[{"id":null}]}`, items.ProbeAbsent, "empty"},
		{"EmptyStringIsAbsent", probes.Lookup{}, 200, `{"records":[{"id":"  "}]}`, items.ProbeAbsent, "empty"},
		{"ObjectIsFailed", probes.Lookup{}, 200, `{"records":[{"id":{"a":1}}]}`, items.ProbeFailed, "holds a value of type object"},
		{"NotJSONIsFailed", probes.Lookup{}, 200, `<html>`, items.ProbeFailed, "not JSON"},
		{"404IsFailedByDefault", probes.Lookup{}, 404, `{}`, items.ProbeFailed, "not the found status 200"},
		{"404IsAbsentWhenSaid", probes.Lookup{AbsentOn404: true}, 404, `{}`, items.ProbeAbsent, "404 reads as absent"},
		{"OtherFoundStatus", probes.Lookup{FoundStatus: 203}, 203, `{"records":[{"id":"r"}]}`, items.FindingFound, `= "r"`},
		{"500IsFailed", probes.Lookup{}, 500, `{"records":[{"id":"r"}]}`, items.ProbeFailed, "→ 500"},
		{"TooLargeIsFailed", probes.Lookup{MaxResponseBytes: 1024}, 200, `{"records":[{"id":"` + big + `"}]}`, items.ProbeFailed, "larger than 1024 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.lookup.IDPath = "records.0.id"
			ev, _ := readOnce(t, c.lookup, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(c.status)
				fmt.Fprint(w, c.body)
			})
			if ev.Outcome != c.outcome || !strings.Contains(ev.Note, c.note) {
				t.Errorf("outcome %q note %q; want %q with %q", ev.Outcome, ev.Note, c.outcome, c.note)
			}
		})
	}
}

// TestReadRequest: the values are escaped for where they stand, the headers are sent, and the answer's
// body never reaches the history.
func TestReadRequest(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got *http.Request
	ev, it := readOnce(t, probes.Lookup{URL: "SERVER/items/{key}?ref={reference}&ik={idempotency_key}", IDPath: "id",
		Headers: []probes.Header{{Name: "Authorization", Value: "Bearer sk_live_abc"}}},
		func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			got = r
			mu.Unlock()
			fmt.Fprint(w, `{"id":"","secret_note":"do-not-store"}`)
		})
	mu.Lock()
	defer mu.Unlock()
	if got.URL.EscapedPath() != "/items/inv:7+x" || got.URL.RawQuery[:len("ref=QT-inv%3A7%2Bx")] != "ref=QT-inv%3A7%2Bx" ||
		!strings.HasPrefix(got.URL.Query().Get("ik"), "ik_") || got.Header.Get("Authorization") != "Bearer sk_live_abc" {
		t.Errorf("request %s %v", got.URL, got.Header)
	}
	if ev.Outcome != items.ProbeAbsent {
		t.Errorf("outcome %q", ev.Outcome)
	}
	doc := fmt.Sprintf("%+v", it)
	for _, leak := range []string{"do-not-store", "sk_live_abc"} {
		if strings.Contains(doc, leak) {
			t.Errorf("the item holds %q", leak)
		}
	}
}

// TestRedirects: a redirect on the same host is followed; one to another host is not (the headers are
// for the lookup's host alone), and the read fails.
func TestRedirects(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	otherHit := ""
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		otherHit = r.Header.Get("Authorization")
		mu.Unlock()
		fmt.Fprint(w, `{"id":"stolen"}`)
	}))
	t.Cleanup(other.Close)
	headers := []probes.Header{{Name: "Authorization", Value: "Bearer sk_live_abc"}}
	ev, _ := readOnce(t, probes.Lookup{IDPath: "id", Headers: headers}, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/search" {
			http.Redirect(w, r, "/v2/search?"+r.URL.RawQuery, http.StatusFound)
			return
		}
		fmt.Fprint(w, `{"id":"rec_2"}`)
	})
	if ev.Outcome != items.FindingFound {
		t.Errorf("same-host redirect: %q %q", ev.Outcome, ev.Note)
	}
	ev, _ = readOnce(t, probes.Lookup{IDPath: "id", Headers: headers}, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/x", http.StatusFound)
	})
	mu.Lock()
	defer mu.Unlock()
	if ev.Outcome != items.ProbeFailed || !strings.Contains(ev.Note, "redirect to another host") || otherHit != "" {
		t.Errorf("cross-host redirect: %q %q; the other host saw %q", ev.Outcome, ev.Note, otherHit)
	}
}

// TestTimeout: a lookup slower than the timeout is a failed read that says so.
func TestTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	ev, _ := readOnce(t, probes.Lookup{IDPath: "id", Timeout: 200 * time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	if ev.Outcome != items.ProbeFailed || !strings.Contains(ev.Note, "timed out after 200ms") {
		t.Errorf("%q %q", ev.Outcome, ev.Note)
	}
}

// TestConcurrencyLimit: with concurrency 2, no more than two reads of one destination run at once.
func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	running, peak, total := 0, 0, 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		running++
		total++
		peak = max(peak, running)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		fmt.Fprint(w, `{"records":[]}`)
	}))
	t.Cleanup(srv.Close)
	e := newEnv(t, probes.Lookup{URL: srv.URL + "/?r={reference}", Concurrency: 2}, sandbox.Config{})
	for i := range 8 {
		key := fmt.Sprintf("c-%d", i)
		a := e.claim(key, "proceed/new")
		e.report(key, a, unknownTimeout, "")
	}
	c := e.run(30 * time.Second)
	if total != 8 || peak > 2 || c.Reads[items.ProbeAbsent] != 8 {
		t.Errorf("%d reads, at most %d at once, counts %+v; want 8, at most 2", total, peak, c)
	}
}

// TestLookupCheck: the problems of a lookup name the field, and never a header's value.
func TestLookupCheck(t *testing.T) {
	t.Parallel()
	bad := probes.Lookup{URL: "ftp://{reference}.example.com/x", IDPath: "", SettleAfter: []time.Duration{time.Minute, time.Second},
		Headers: []probes.Header{{Name: "X-Key", Value: "sk_line\nbreak"}}, Concurrency: 500}.WithDefaults()
	var fields []string
	for _, p := range bad.Check() {
		fields = append(fields, p.Field)
		if strings.Contains(p.Problem, "sk_line") {
			t.Errorf("a problem carries the header's value: %s", p.Problem)
		}
	}
	if got := strings.Join(fields, " "); got != "url headers.X-Key found.path settle_after concurrency" {
		t.Errorf("fields %q", got)
	}
	for _, u := range []string{"https://user:pw@h/x", "https://h/{ref}", "https://{reference}/x", "https://h/x#f"} {
		if len(probes.Lookup{URL: u, IDPath: "id"}.WithDefaults().Check()) == 0 {
			t.Errorf("%s was accepted", u)
		}
	}
	if probs := (probes.Lookup{URL: "https://h/x?q={reference}", IDPath: "$.records[0].id"}.WithDefaults().Check()); len(probs) != 0 {
		t.Errorf("a good lookup: %+v", probs)
	}
}

// TestTLSVerified: a lookup over TLS whose certificate the system does not trust is a failed read; the
// prober never skips verification.
func TestTLSVerified(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"id":"rec_1"}`)
	}))
	t.Cleanup(srv.Close)
	e := newEnv(t, probes.Lookup{URL: srv.URL + "/?r={reference}", IDPath: "id", SettleAfter: []time.Duration{time.Second}}, sandbox.Config{})
	a := e.claim("tls-1", "proceed/new")
	e.report("tls-1", a, unknownTimeout, "")
	if c := e.run(time.Second); c.Reads[items.ProbeFailed] != 1 {
		t.Fatalf("a read against an untrusted certificate: %+v", c)
	}
	if reads := e.item("tls-1").ProbeReads(); len(reads) != 1 || !strings.Contains(reads[0].Note, "certificate") {
		t.Errorf("the read: %+v", reads)
	}
}

// TestRateLimit: with rate_per_second 20, six reads of one destination take at least a quarter second.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, probes.Lookup{RatePerSecond: 20}, sandbox.Config{})
	for i := range 6 {
		key := fmt.Sprintf("r-%d", i)
		a := e.claim(key, "proceed/new")
		e.report(key, a, unknownTimeout, "")
	}
	start := time.Now()
	c := e.run(30 * time.Second)
	if took := time.Since(start); c.Reads[items.ProbeAbsent] != 6 || took < 250*time.Millisecond {
		t.Errorf("%+v in %s; want 6 reads spaced 50 ms apart", c, took)
	}
}
