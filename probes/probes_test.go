package probes_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/alerts"
	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/mongostore"
	"github.com/replaysafe/companion/items/mongostore/mongotest"
	"github.com/replaysafe/companion/items/sqlitestore"
	"github.com/replaysafe/companion/probes"
	"github.com/replaysafe/companion/sandbox"
)

const dest = "billing"

// env is a ledger on a SQLite file with a fake clock, the sandbox receiver as the destination (on the
// same clock, so its lookup lag follows it), and a prober of the destination's lookup.
type env struct {
	t        *testing.T
	ctx      context.Context
	clock    *itemstest.Clock
	store    testStore
	ledger   *items.Ledger
	receiver *sandbox.Receiver
	url      string
	prober   *probes.Prober
	logs     *handlerstest.SyncBuffer
	// lookup is the destination's lookup, defaults filled, as the prober has it.
	lookup probes.Lookup
}

// testStore is what the tests use of a store: the ledger's, the prober's and the alert outbox's.
type testStore interface {
	items.Store
	probes.Store
	alerts.Outbox
}

// openStore opens the store of a test; newEnv uses SQLite.
type openStore func(t *testing.T) testStore

func openSQLite(t *testing.T) testStore {
	s, err := sqlitestore.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openMongo opens the MongoDB store on a FerretDB server of the test's own.
func openMongo(t *testing.T) testStore {
	srv := mongotest.Start(t)
	s, err := mongostore.Open(context.Background(), srv.URI(), srv.Database())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newEnv(t *testing.T, lookup probes.Lookup, rcfg sandbox.Config) *env {
	t.Helper()
	return newEnvOn(t, openSQLite, lookup, rcfg)
}

func newEnvOn(t *testing.T, open openStore, lookup probes.Lookup, rcfg sandbox.Config) *env {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), clock: itemstest.NewClock(), logs: &handlerstest.SyncBuffer{}}
	rcfg.Now = e.clock.Now
	rcfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	rc, err := sandbox.New(rcfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rc.Handler())
	t.Cleanup(srv.Close)
	e.receiver, e.url = rc, srv.URL
	e.store = open(t)
	e.ledger, err = items.NewLedger(e.ctx, e.store, items.Config{Now: e.clock.Now,
		Destinations: map[string]items.Destination{dest: {Dedupe: items.DedupeLookup, LeaseSeconds: 60, Owner: "U0OWNER"}}})
	if err != nil {
		t.Fatal(err)
	}
	if lookup.URL == "" {
		lookup.URL = srv.URL + "/records?reference={reference}"
	}
	if lookup.IDPath == "" {
		lookup.IDPath = "records.0.id"
	}
	if lookup.RatePerSecond == 0 {
		lookup.RatePerSecond = 1000
	}
	e.lookup = lookup
	e.prober = e.newProber(e.store, 0)
	return e
}

// newProber is a prober of the env's lookup over store, logging to e.logs, with the given grace at a stop
// (0: the default).
func (e *env) newProber(store probes.Store, grace time.Duration) *probes.Prober {
	e.t.Helper()
	p, err := probes.New(probes.Config{Ledger: e.ledger, Store: store, Lookups: map[string]probes.Lookup{dest: e.lookup},
		StopGrace: grace, Logger: slog.New(slog.NewTextHandler(e.logs, nil))})
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

var payload = `{"invoice":"742","amount":120.5}`

// claim is the workflow's before-write for key, expected to answer want.
func (e *env) claim(key, want string) items.Answer {
	e.t.Helper()
	fp, err := items.Fingerprint([]byte(payload))
	if err != nil {
		e.t.Fatal(err)
	}
	a, err := e.ledger.BeforeWrite(e.ctx, items.BeforeWriteParams{Tenant: "default", Key: key, Fingerprint: fp,
		Destination: dest, Reference: "QT-" + key, ExecutionID: "exec-1"})
	if err != nil {
		e.t.Fatal(err)
	}
	if got := string(a.Decision) + "/" + string(a.Reason); got != want {
		e.t.Fatalf("before-write of %s: %s, want %s", key, got, want)
	}
	return a
}

// write is the workflow's write to the receiver, with an optional fault; it returns the record id, or ""
// when no answer came.
func (e *env) write(key, idempotencyKey, fault string) string {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.url+"/records", strings.NewReader(`{"reference":"QT-`+key+`"}`))
	req.Header.Set("Idempotency-Key", idempotencyKey)
	if fault != "" {
		req.Header.Set(sandbox.HeaderFault, fault)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	_, after, _ := strings.Cut(string(b), `"id":"`)
	id, _, _ := strings.Cut(after, `"`)
	return id
}

// report is the workflow's after-write.
func (e *env) report(key string, a items.Answer, ev items.Evidence, externalID string) {
	e.t.Helper()
	if _, err := e.ledger.AfterWrite(e.ctx, items.AfterWriteParams{Tenant: "default", Key: key, Claim: a.Claim, Evidence: ev, ExternalID: externalID}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) item(key string) *items.Item {
	e.t.Helper()
	it, err := e.store.Get(e.ctx, "default", key)
	if err != nil {
		e.t.Fatal(err)
	}
	return it
}

// run makes one probe run at the clock's time after advancing it by d.
func (e *env) run(d time.Duration) probes.Counts {
	e.t.Helper()
	e.clock.Advance(d)
	c, err := e.prober.RunOnce(e.ctx)
	if err != nil {
		e.t.Fatalf("RunOnce: %v", err)
	}
	return c
}

func (e *env) wantState(when, key string, state items.State) *items.Item {
	e.t.Helper()
	it := e.item(key)
	if it.State != state {
		e.t.Fatalf("%s: %s is %s, want %s (history %+v)", when, key, it.State, state, it.History)
	}
	return it
}

var unknownTimeout = items.Evidence{Outcome: items.OutcomeUnknown, Class: items.ClassTimeout}

// forEachStore runs test on SQLite and on MongoDB (FerretDB in-process), in parallel.
func forEachStore(t *testing.T, test func(t *testing.T, open openStore)) {
	for _, st := range []struct {
		name string
		open openStore
	}{{"SQLite", openSQLite}, {"MongoDB", openMongo}} {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			test(t, st.open)
		})
	}
}

// TestCommitThenDropSettledByAProbe: the receiver commits and drops the answer; its search shows the
// record only 60 s later. The first read (30 s) sees nothing and changes nothing; the second (2 m) finds
// it, and the item succeeds without any workflow call; a replay gets the stored id. One effect in all.
func TestCommitThenDropSettledByAProbe(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open openStore) {
		e := newEnvOn(t, open, probes.Lookup{}, sandbox.Config{LookupLag: 60 * time.Second})
		a := e.claim("inv-1", "proceed/new")
		if id := e.write("inv-1", a.IdempotencyKey, string(sandbox.FaultCommitThenDrop)); id != "" {
			t.Fatalf("commit_then_drop answered with %s", id)
		}
		e.report("inv-1", a, items.Evidence{Outcome: items.OutcomeUnknown, Class: items.ClassConnectionReset}, "")

		if c := e.run(29 * time.Second); len(c.Reads) != 0 {
			t.Errorf("29 s after the attempt a probe read: %+v", c)
		}
		if c := e.run(time.Second); c.Reads[items.ProbeAbsent] != 1 || len(c.Settled) != 0 {
			t.Errorf("the first read at 30 s: %+v, want one absent read and nothing settled", c)
		}
		it := e.wantState("after an absent first read", "inv-1", items.StateUnknown)
		if reads := it.ProbeReads(); len(reads) != 1 || reads[0].By != "probe:billing" || !strings.Contains(reads[0].Note, "read 1/3") {
			t.Errorf("the first read's history: %+v", reads)
		}
		if c := e.run(90 * time.Second); c.Settled[items.FindingFound] != 1 {
			t.Errorf("the second read at 2 m: %+v, want the item settled found", c)
		}
		it = e.wantState("after the probe found it", "inv-1", items.StateSucceeded)
		last := it.History[len(it.History)-1]
		if it.ExternalID != "rec_1" || last.Kind != items.EventReconcile || last.By != "probe:billing" ||
			!strings.Contains(last.Note, "read 1/3") || !strings.Contains(last.Note, `records.0.id = "rec_1"`) {
			t.Errorf("external id %q, last event %+v", it.ExternalID, last)
		}
		replay := e.claim("inv-1", "skip/succeeded")
		if replay.ExternalID != "rec_1" {
			t.Errorf("the replay got external id %q", replay.ExternalID)
		}
		if c := e.run(time.Hour); len(c.Reads) != 0 {
			t.Errorf("a settled item was read again: %+v", c)
		}
		if fx := e.receiver.Effects(); fx.Total != 1 {
			t.Errorf("effects %+v, want 1", fx)
		}
	})
}

// TestNeverReachedSettledAbsentAfterTheLastDelay: the write never reached the receiver. Absent reads at
// 30 s and 2 m change nothing; the read at 10 m settles it absent, and the next before-write proceeds once
// with the same key: one effect in all.
func TestNeverReachedSettledAbsentAfterTheLastDelay(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open openStore) {
		e := newEnvOn(t, open, probes.Lookup{}, sandbox.Config{})
		a := e.claim("inv-2", "proceed/new")
		e.report("inv-2", a, unknownTimeout, "")
		e.run(30 * time.Second)
		e.wantState("after the read at 30 s", "inv-2", items.StateUnknown)
		e.run(90 * time.Second)
		e.wantState("after the read at 2 m", "inv-2", items.StateUnknown)
		e.claim("inv-2", "reconcile/lookup_required")
		if c := e.run(7 * time.Minute); len(c.Reads) != 0 {
			t.Errorf("a read before the last delay: %+v", c)
		}
		if c := e.run(60 * time.Second); c.Settled[items.FindingAbsent] != 1 {
			t.Fatalf("the read at 10 m: %+v, want settled absent", c)
		}
		it := e.wantState("after the last read", "inv-2", items.StateFailed)
		if !it.Retryable || it.NeedsPerson || strings.Count(it.History[len(it.History)-1].Note, "\n") != 2 {
			t.Errorf("retryable %v needs_person %v evidence %q", it.Retryable, it.NeedsPerson, it.History[len(it.History)-1].Note)
		}
		retry := e.claim("inv-2", "proceed/retry")
		if retry.IdempotencyKey != a.IdempotencyKey {
			t.Errorf("the retry's key %s, want the same %s", retry.IdempotencyKey, a.IdempotencyKey)
		}
		id := e.write("inv-2", retry.IdempotencyKey, "")
		e.report("inv-2", retry, items.Evidence{Outcome: items.OutcomeSucceeded}, id)
		e.wantState("after the retry", "inv-2", items.StateSucceeded)
		e.claim("inv-2", "skip/succeeded")
		if fx := e.receiver.Effects(); fx.Total != 1 || fx.ByReference["QT-inv-2"] != 1 {
			t.Errorf("effects %+v, want 1", fx)
		}
	})
}

// recordingNotifier is the Slack side of the dispatcher: it keeps what was posted.
type recordingNotifier struct {
	mu    sync.Mutex
	posts []alerts.Message
}

func (n *recordingNotifier) Post(_ context.Context, _ string, m alerts.Message) (alerts.MessageRef, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.posts = append(n.posts, m)
	return alerts.MessageRef{Channel: "C1", TS: "1.0"}, nil
}

func (n *recordingNotifier) Update(context.Context, alerts.MessageRef, alerts.Message) error {
	return nil
}

// TestLookup500LeadsToLookupFailedAndOneAlert: the lookup answers 500 at every read; after the third the
// item waits for a person (lookup_failed), and one alert goes out carrying every read as evidence.
func TestLookup500LeadsToLookupFailedAndOneAlert(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open openStore) {
		e := newEnvOn(t, open, probes.Lookup{}, sandbox.Config{})
		a := e.claim("inv-3", "proceed/new")
		e.write("inv-3", a.IdempotencyKey, string(sandbox.FaultCommitThen500))
		e.report("inv-3", a, items.Evidence{Outcome: items.OutcomeFailed, HTTPStatus: 500}, "")
		e.wantState("after the 500", "inv-3", items.StateUnknown)
		req, _ := http.NewRequest(http.MethodPost, e.url+"/control/faults", strings.NewReader(`{"fault":"lookup_500","count":10}`))
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
			t.Fatalf("queueing lookup_500: %v", err)
		}
		for _, d := range []time.Duration{30 * time.Second, 90 * time.Second} {
			if c := e.run(d); c.Reads[items.ProbeFailed] != 1 || len(c.Settled) != 0 {
				t.Errorf("a failed read: %+v", c)
			}
		}
		e.wantState("after two failed reads", "inv-3", items.StateUnknown)
		if c := e.run(8 * time.Minute); c.Settled[items.FindingLookupFailed] != 1 {
			t.Fatalf("the third failed read: %+v, want lookup_failed", c)
		}
		it := e.wantState("after three failed reads", "inv-3", items.StateUnknown)
		if !it.LookupFailed || !it.NeedsPerson || it.NeedsPersonCause != items.CauseLookupFailed {
			t.Errorf("lookup_failed %v needs_person %v cause %q", it.LookupFailed, it.NeedsPerson, it.NeedsPersonCause)
		}
		n := &recordingNotifier{}
		d, err := alerts.NewDispatcher(alerts.DispatcherConfig{Ledger: e.ledger, Outbox: e.store, Notifier: n,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := d.RunOnce(e.ctx); err != nil {
				t.Fatal(err)
			}
		}
		d.Wait()
		if len(n.posts) != 1 || len(n.posts[0].Lines) != 1 {
			t.Fatalf("alerts posted: %+v, want one about one item", n.posts)
		}
		ev := n.posts[0].Lines[0].Evidence
		for _, want := range []string{"probe:billing", "read 1/3", "read 2/3", "read 3/3", "GET " + e.url + "/records?reference=QT-inv-3 → 500"} {
			if !strings.Contains(ev, want) {
				t.Errorf("the alert's evidence lacks %q:\n%s", want, ev)
			}
		}
		if c := e.run(time.Hour); len(c.Reads) != 0 {
			t.Errorf("an item whose lookup failed was read again: %+v", c)
		}
		if fx := e.receiver.Effects(); fx.Total != 1 {
			t.Errorf("effects %+v, want 1", fx)
		}
	})
}

// TestProbeLosesToTheWorkflow: a workflow's own reconcile lands between the claim and the verdict; the
// probe changes nothing.
func TestProbeLosesToTheWorkflow(t *testing.T) {
	t.Parallel()
	var e *env
	gate, arrived := make(chan struct{}), make(chan struct{}, 1)
	e = newEnv(t, probes.Lookup{}, sandbox.Config{})
	// A lookup that lets the workflow reconcile before it answers "found".
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-gate
		w.Write([]byte(`{"records":[{"id":"rec_other"}]}`))
	}))
	defer srv.Close()
	p, err := probes.New(probes.Config{Ledger: e.ledger, Store: e.store, Lookups: map[string]probes.Lookup{dest: {
		URL: srv.URL + "/?r={reference}", IDPath: "records.0.id"}}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	a := e.claim("inv-4", "proceed/new")
	e.report("inv-4", a, unknownTimeout, "")
	e.clock.Advance(time.Minute)
	done := make(chan probes.Counts)
	go func() {
		c, _ := p.RunOnce(e.ctx)
		done <- c
	}()
	<-arrived // the probe has claimed its read and waits for the answer
	if _, err := e.ledger.Reconcile(e.ctx, items.ReconcileParams{Tenant: "default", Key: "inv-4", Finding: items.FindingAbsent,
		Evidence: "searched billing by hand, nothing there", By: "wf"}); err != nil {
		t.Fatal(err)
	}
	close(gate)
	c := <-done
	it := e.wantState("after the race", "inv-4", items.StateFailed)
	if it.ExternalID != "" || c.Lost != 1 || len(c.Settled) != 0 {
		t.Errorf("external id %q, counts %+v: the probe's late finding must change nothing", it.ExternalID, c)
	}
}

// TestTwoProbersOneRead: two probers (two replicas) on one store read an item's due read once.
func TestTwoProbersOneRead(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	reads := 0
	gate := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reads++
		mu.Unlock()
		<-gate
		w.Write([]byte(`{"records":[]}`))
	}))
	defer srv.Close()
	e := newEnv(t, probes.Lookup{URL: srv.URL + "/?r={reference}"}, sandbox.Config{})
	second, err := probes.New(probes.Config{Ledger: e.ledger, Store: e.store, Lookups: map[string]probes.Lookup{dest: {
		URL: srv.URL + "/?r={reference}", IDPath: "records.0.id"}}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	a := e.claim("inv-5", "proceed/new")
	e.report("inv-5", a, unknownTimeout, "")
	e.clock.Advance(30 * time.Second)
	var wg sync.WaitGroup
	for _, p := range []*probes.Prober{e.prober, second} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := p.RunOnce(e.ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	close(gate)
	wg.Wait()
	if reads != 1 || len(e.item("inv-5").ProbeReads()) != 1 {
		t.Errorf("%d reads of the destination, %d recorded; want 1 and 1", reads, len(e.item("inv-5").ProbeReads()))
	}
}

// TestNoProbeUnderALiveLease: an item in flight is never read, even long after its settle delays would
// have come, until its lease expires and it is unknown.
func TestNoProbeUnderALiveLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, probes.Lookup{}, sandbox.Config{})
	e.claim("inv-6", "proceed/new")
	if c := e.run(59 * time.Second); len(c.Reads) != 0 {
		t.Errorf("an item under a live lease was read: %+v", c)
	}
	e.clock.Advance(time.Second)
	if _, err := e.ledger.ExpireLease(e.ctx, "default", "inv-6"); err != nil { // the sweeper's part
		t.Fatal(err)
	}
	e.wantState("at the lease's end", "inv-6", items.StateUnknown)
	if c := e.run(29 * time.Second); len(c.Reads) != 0 {
		t.Errorf("29 s after the lease expired: %+v, want no read yet", c)
	}
	if c := e.run(time.Second); c.Reads[items.ProbeAbsent] != 1 {
		t.Errorf("30 s after the lease expired: %+v, want one read", c)
	}
}
