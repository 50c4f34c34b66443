package probes_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replaysafe/companion/internal/stopgrace/stopgracetest"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/probes"
	"github.com/replaysafe/companion/sandbox"
)

// pausingStore is a real store that stands still after the first claim of a read it grants, until the
// pause's Resume is closed: the prober holds the read's claim and has not read yet, and the test stops it
// there. Every call goes to the real store; only the moment is the test's.
type pausingStore struct {
	probes.Store
	*stopgracetest.Pause
}

func newPausingStore(s probes.Store) *pausingStore {
	return &pausingStore{Store: s, Pause: stopgracetest.NewPause()}
}

func (p *pausingStore) ClaimProbe(ctx context.Context, c items.ProbeClaim) (bool, error) {
	won, err := p.Store.ClaimProbe(ctx, c)
	if err == nil && won {
		p.Hold()
	}
	return won, err
}

// running starts p.Run as serve does, on a schedule that never comes during the test (the run at start is
// the one that matters); stop cancels its context, as a graceful stop does, calls then (if not nil), and
// returns when Run has returned.
func (e *env) running(p *probes.Prober) (stop func(then func())) {
	e.t.Helper()
	return stopgracetest.Running(e.t, e.ctx, func(ctx context.Context) error { return p.Run(ctx, "@every 1h") })
}

var wait = stopgracetest.Wait

// slowDestination is a lookup that signals each request's arrival on arrived and answers found with id
// once answer lets it (answer gets the request's number, from 1); a request whose client gives up ends.
func slowDestination(t *testing.T, id string, answer func(n int64, r *http.Request) bool) (url string, arrived <-chan struct{}, requests *atomic.Int64) {
	t.Helper()
	ch := make(chan struct{}, 16)
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := n.Add(1)
		ch <- struct{}{}
		if !answer(i, r) {
			return
		}
		w.Write([]byte(`{"records":[{"id":"` + id + `"}]}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/?r={reference}", ch, &n
}

// unknownDue makes key unknown (the workflow lost the write's answer) and its first read due.
func (e *env) unknownDue(key string) {
	e.t.Helper()
	a := e.claim(key, "proceed/new")
	e.report(key, a, unknownTimeout, "")
	e.clock.Advance(30 * time.Second)
}

// probeVerdicts counts the item's reconciles by its destination's probe.
func probeVerdicts(it *items.Item) int {
	n := 0
	for _, ev := range it.History {
		if ev.Kind == items.EventReconcile && ev.By == "probe:"+dest {
			n++
		}
	}
	return n
}

// TestStopGivesBackAReadClaimedNotStarted: serve stops while its prober holds the claim of a read it has
// not started. The claim is given back at the stop, so a second prober (another replica, or the restarted
// process) reads the item at once, with the ledger's clock nowhere near the claim's end (twice the lookup
// timeout plus 30 s), and settles it.
func TestStopGivesBackAReadClaimedNotStarted(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open openStore) {
		e := newEnvOn(t, open, probes.Lookup{}, sandbox.Config{})
		a := e.claim("inv-s1", "proceed/new")
		id := e.write("inv-s1", a.IdempotencyKey, "")
		e.report("inv-s1", a, unknownTimeout, "") // the workflow lost the answer of a write that landed
		e.clock.Advance(30 * time.Second)

		store := newPausingStore(e.store)
		stop := e.running(e.newProber(store, 0))
		wait(t, store.Held, "claim")
		stop(func() { close(store.Resume) }) // the prober goes on once its context is cancelled
		it := e.wantState("after the stop", "inv-s1", items.StateUnknown)
		if len(it.ProbeReads()) != 0 {
			t.Errorf("the stopped prober recorded reads: %+v", it.ProbeReads())
		}
		if !strings.Contains(e.logs.String(), "read claim given back unread") {
			t.Errorf("the stop's give-back is not in the log:\n%s", e.logs)
		}

		c, err := e.newProber(e.store, 0).RunOnce(e.ctx) // at once: the clock has not moved
		if err != nil {
			t.Fatal(err)
		}
		if c.Settled[items.FindingFound] != 1 || c.Lost != 0 {
			t.Fatalf("the second prober at once: %+v, want the item settled found (the claim was not given back?)", c)
		}
		it = e.wantState("after the second prober", "inv-s1", items.StateSucceeded)
		if it.ExternalID != id || probeVerdicts(it) != 1 {
			t.Errorf("external id %q (want %q), %d probe verdicts (want 1)", it.ExternalID, id, probeVerdicts(it))
		}
	})
}

// TestStopDuringASlowReadRecordsItsFindingOnce: serve stops while the destination is slow to answer a
// read. The read is not cut off (it has the stop's grace): its finding is recorded, once, and no other
// prober reads the item again, then or after the claim would have run out.
func TestStopDuringASlowReadRecordsItsFindingOnce(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open openStore) {
		gate := make(chan struct{})
		url, arrived, requests := slowDestination(t, "rec_slow", func(_ int64, r *http.Request) bool {
			select {
			case <-gate:
				return true
			case <-r.Context().Done():
				return false
			}
		})
		e := newEnvOn(t, open, probes.Lookup{URL: url}, sandbox.Config{})
		e.unknownDue("inv-s2")

		stop := e.running(e.prober)
		wait(t, arrived, "read")
		stop(func() { close(gate) }) // the destination answers after the stop began
		it := e.wantState("after the stop", "inv-s2", items.StateSucceeded)
		if it.ExternalID != "rec_slow" || probeVerdicts(it) != 1 {
			t.Fatalf("external id %q, %d probe verdicts; want rec_slow, 1", it.ExternalID, probeVerdicts(it))
		}

		second := e.newProber(e.store, 0)
		for _, d := range []time.Duration{0, time.Hour} {
			e.clock.Advance(d)
			if c, err := second.RunOnce(e.ctx); err != nil || len(c.Reads) != 0 {
				t.Errorf("the second prober %v later: %+v (%v), want no read", d, c, err)
			}
		}
		if n := requests.Load(); n != 1 || probeVerdicts(e.item("inv-s2")) != 1 {
			t.Errorf("%d requests to the destination, %d verdicts; want 1 and 1", n, probeVerdicts(e.item("inv-s2")))
		}
	})
}

// TestStopCutsAReadPastTheGraceAndGivesItBack: the destination answers later than the stop's grace, so the
// read is cut off. It learned nothing and asking again is harmless: its claim is given back and no failed
// read is recorded, so a second prober at once reads the item and settles it.
func TestStopCutsAReadPastTheGraceAndGivesItBack(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open openStore) {
		url, arrived, requests := slowDestination(t, "rec_cut", func(n int64, r *http.Request) bool {
			if n == 1 {
				<-r.Context().Done() // the first read never gets an answer
				return false
			}
			return true
		})
		e := newEnvOn(t, open, probes.Lookup{URL: url}, sandbox.Config{})
		e.unknownDue("inv-s3")

		stop := e.running(e.newProber(e.store, 200*time.Millisecond))
		wait(t, arrived, "read")
		start := time.Now()
		stop(nil)
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("Run returned %v after its stop, want about the grace (200ms), well before the lookup's timeout (%v)",
				took, probes.DefaultTimeout)
		}
		it := e.wantState("after the stop", "inv-s3", items.StateUnknown)
		if len(it.ProbeReads()) != 0 {
			t.Errorf("the cut-off read was recorded: %+v", it.ProbeReads())
		}
		if !strings.Contains(e.logs.String(), "read cut off at the end of the stop grace, claim given back") {
			t.Errorf("the cut-off read's give-back is not in the log:\n%s", e.logs)
		}

		c, err := e.newProber(e.store, 0).RunOnce(e.ctx) // at once: the clock has not moved
		if err != nil {
			t.Fatal(err)
		}
		it = e.wantState("after the second prober", "inv-s3", items.StateSucceeded)
		if c.Settled[items.FindingFound] != 1 || it.ExternalID != "rec_cut" || requests.Load() != 2 {
			t.Errorf("the second prober at once: %+v, external id %q, %d requests; want found rec_cut after 2 requests",
				c, it.ExternalID, requests.Load())
		}
	})
}
