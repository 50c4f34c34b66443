package alerts_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/alerts"
	"github.com/replaysafe/companion/items"
)

func (e *env) sweeper(l *items.Ledger, store alerts.SweepStore, pageSize int) *alerts.Sweeper {
	e.t.Helper()
	s, err := alerts.NewSweeper(alerts.SweeperConfig{Ledger: l, Store: store, PageSize: pageSize, Logger: e.logger})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) sweep(pageSize int) alerts.SweepCounts {
	e.t.Helper()
	c, err := e.sweeper(e.ledger, e.store, pageSize).RunOnce(e.ctx)
	if err != nil {
		e.t.Fatalf("sweep: %v", err)
	}
	return c
}

func TestSweepRecordsExpiredLeaseAsUnknown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, items.Config{})
	e.claim("inv-1", withDedupe(items.DedupeKey), withLease(60))
	e.claim("inv-2", withDedupe(items.DedupeKey), withLease(600))

	e.advance(59 * time.Second)
	if c := e.sweep(0); c.Expired != 0 {
		t.Fatalf("before the lease ends: expired %d, want 0", c.Expired)
	}
	e.advance(time.Second) // the lease ends at exactly claim + 60 s
	c := e.sweep(0)
	if c.Expired != 1 {
		t.Fatalf("expired %d, want 1", c.Expired)
	}
	it := e.get("inv-1")
	if it.State != items.StateUnknown || it.Cause != items.CauseLeaseExpired {
		t.Fatalf("inv-1 is %s (cause %q), want unknown (lease_expired)", it.State, it.Cause)
	}
	if it.NeedsPerson {
		t.Fatalf("inv-1 needs a person, but its destination dedupes by key: a same-key retry can settle it")
	}
	if got := e.get("inv-2").State; got != items.StateInFlight {
		t.Fatalf("inv-2 (lease live) is %s, want in_flight", got)
	}
	if c := e.sweep(0); c.Changed() {
		t.Fatalf("second sweep changed %+v, want nothing", c)
	}
}

func TestSweepLateAfterWriteThatLandedFirstWins(t *testing.T) {
	t.Parallel()
	e := newEnv(t, items.Config{})
	a := e.claim("inv-1", withLease(60))
	e.advance(2 * time.Minute)
	// The workflow's report arrives after the lease but before any sweep.
	e.report("inv-1", a.Claim, succeeded, func(p *items.AfterWriteParams) { p.ExternalID = "in_88" })
	if c := e.sweep(0); c.Expired != 0 {
		t.Fatalf("expired %d, want 0", c.Expired)
	}
	if it := e.get("inv-1"); it.State != items.StateSucceeded || it.ExternalID != "in_88" {
		t.Fatalf("item is %s/%q, want succeeded/in_88", it.State, it.ExternalID)
	}
}

// racingStore lets an after-write land between the sweeper's query and its transition: the query still
// saw the item in flight.
type racingStore struct {
	alerts.SweepStore
	between func()
	once    sync.Once
}

func (r *racingStore) ExpiredLeases(ctx context.Context, now time.Time, after items.ItemRef, limit int) ([]items.ItemRef, error) {
	refs, err := r.SweepStore.ExpiredLeases(ctx, now, after, limit)
	r.once.Do(r.between)
	return refs, err
}

func TestSweepLateAfterWriteRacingTheSweepWins(t *testing.T) {
	t.Parallel()
	e := newEnv(t, items.Config{})
	a := e.claim("inv-1", withLease(60))
	e.advance(2 * time.Minute)
	store := &racingStore{SweepStore: e.store, between: func() {
		e.report("inv-1", a.Claim, succeeded, func(p *items.AfterWriteParams) { p.ExternalID = "in_88" })
	}}
	c, err := e.sweeper(e.ledger, store, 0).RunOnce(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.Expired != 0 {
		t.Fatalf("expired %d after the report landed, want 0", c.Expired)
	}
	it := e.get("inv-1")
	if it.State != items.StateSucceeded {
		t.Fatalf("item is %s, want succeeded", it.State)
	}
	for _, ev := range it.History {
		if ev.Kind == items.EventLeaseExpired {
			t.Fatalf("history records a lease expiry after the success: %+v", it.History)
		}
	}
}

func TestSweepMarksItemsThatNeedAPerson(t *testing.T) {
	t.Parallel()
	cfg := items.Config{Destinations: map[string]items.Destination{
		"billing": {EscalateAfter: time.Hour},
		"crm":     {Dedupe: items.DedupeKey, MaxAttempts: 1},
	}}
	// unmarked clears the needs-person mark the ledger set, as on an item written by an older version: the
	// sweeper must find such items by itself.
	unmarked := func(e *env, key string, change func(it *items.Item)) {
		t.Helper()
		_, err := e.store.Transition(e.ctx, "default", key, func(it *items.Item) (*items.Item, error) {
			it.NeedsPerson, it.NeedsPersonCause, it.NeedsPersonSince, it.AlertStatus = false, "", nil, ""
			if change != nil {
				change(it)
			}
			return it, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		arrange func(e *env)
		want    string // cause, or "" for no mark
	}{
		{"UnknownWithDedupeNone", func(e *env) {
			e.claim("k", withDedupe(items.DedupeNone), withLease(60))
			e.advance(time.Minute)
		}, items.CauseNoDedupe},
		{"UnknownWithDedupeLookupWaitsForTheLookup", func(e *env) {
			e.unknownItem("k", withDedupe(items.DedupeLookup))
		}, ""},
		{"FailedLookup", func(e *env) {
			e.unknownItem("k", withDedupe(items.DedupeLookup))
			unmarked(e, "k", func(it *items.Item) { it.LookupFailed = true })
		}, items.CauseLookupFailed},
		{"NoAttemptsLeftAfterTheBudgetShrank", func(e *env) {
			a := e.claim("k", withDest("crm-old"))
			e.report("k", a.Claim, refused)
			_, err := e.store.Transition(e.ctx, "default", "k", func(it *items.Item) (*items.Item, error) {
				it.Destination = "crm" // the item now belongs to a destination with one attempt
				return it, nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}, items.CauseAttemptsExhausted},
		{"DuplicateEffect", func(e *env) {
			a := e.claim("k")
			e.report("k", a.Claim, succeeded, func(p *items.AfterWriteParams) { p.ExternalID = "in_1" })
			unmarked(e, "k", func(it *items.Item) { it.DuplicateEffect = true })
		}, items.CauseDuplicateEffect},
		{"UnknownWithDedupeKeyAndNoAttemptsLeft", func(e *env) {
			e.unknownItem("k", withDest("crm"), withDedupe(items.DedupeKey))
		}, items.CauseAwaitingOwner},
		{"UnknownWithDedupeKeyPastKeyRetention", func(e *env) {
			e.unknownItem("k", withDedupe(items.DedupeKey))
			e.advance(items.DefaultKeyRetentionSeconds * time.Second)
		}, items.CauseAwaitingOwner},
		{"UnknownWithDedupeKeyWithinRetention", func(e *env) {
			e.unknownItem("k", withDedupe(items.DedupeKey))
			e.advance(30 * time.Minute)
		}, ""},
		{"UnresolvedLongerThanEscalateAfter", func(e *env) {
			e.unknownItem("k", withDedupe(items.DedupeLookup))
			e.advance(time.Hour + time.Second)
		}, items.CauseStale},
		{"FailedRetryableNobodyRetried", func(e *env) {
			a := e.claim("k")
			e.report("k", a.Claim, refused)
			e.advance(61 * time.Minute)
		}, items.CauseStale},
		{"FailedPermanentIsSettled", func(e *env) {
			a := e.claim("k")
			e.report("k", a.Claim, items.Evidence{Outcome: items.OutcomeFailed, HTTPStatus: 422})
			e.advance(10 * time.Hour)
		}, ""},
		{"SucceededIsSettled", func(e *env) {
			a := e.claim("k")
			e.report("k", a.Claim, succeeded)
			e.advance(10 * time.Hour)
		}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, cfg)
			tc.arrange(e)
			c := e.sweep(0)
			it := e.get("k")
			if tc.want == "" {
				if it.NeedsPerson || len(c.NeedsPerson) > 0 {
					t.Fatalf("item needs a person (%s), counts %v; want no mark", it.NeedsPersonCause, c.NeedsPerson)
				}
				return
			}
			if !it.NeedsPerson || it.NeedsPersonCause != tc.want {
				t.Fatalf("item needs_person=%v cause %q, want %q", it.NeedsPerson, it.NeedsPersonCause, tc.want)
			}
			if c.NeedsPerson[tc.want] != 1 {
				t.Fatalf("counts %v, want one %s", c.NeedsPerson, tc.want)
			}
			if it.AlertStatus != items.AlertPending {
				t.Fatalf("alert status %q, want pending (the outbox picks it up)", it.AlertStatus)
			}
			if again := e.sweep(0); again.Changed() {
				t.Fatalf("second sweep changed %+v", again)
			}
		})
	}
}

func TestSweepPagesOverMoreItemsThanAPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, items.Config{Destinations: map[string]items.Destination{"billing": {EscalateAfter: time.Hour}}})
	for i := range 25 {
		e.claim(keyOf("lease", i), withLease(60), withDedupe(items.DedupeKey))
	}
	for i := range 13 {
		e.unknownItem(keyOf("stale", i), withDedupe(items.DedupeLookup))
	}
	e.advance(time.Hour + time.Second)
	c := e.sweep(4)
	if c.Expired != 25 {
		t.Fatalf("expired %d with pages of 4, want 25", c.Expired)
	}
	if c.NeedsPerson[items.CauseStale] != 13 {
		t.Fatalf("stale marks %v with pages of 4, want 13", c.NeedsPerson)
	}
	for i := range 25 {
		if st := e.get(keyOf("lease", i)).State; st != items.StateUnknown {
			t.Fatalf("%s is %s, want unknown", keyOf("lease", i), st)
		}
	}
}

func TestSweepersInSeveralReplicasChangeEachItemOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, items.Config{})
	for i := range 30 {
		e.claim(keyOf("inv", i), withLease(60), withDedupe(items.DedupeNone))
	}
	e.advance(time.Minute)
	var wg sync.WaitGroup
	counts := make([]alerts.SweepCounts, 3)
	for r := range counts {
		replica := e.newLedger(e.cfg)
		wg.Go(func() {
			c, err := e.sweeper(replica, e.store, 7).RunOnce(e.ctx)
			if err != nil {
				t.Error(err)
			}
			counts[r] = c
		})
	}
	wg.Wait()
	expired, marked := 0, 0
	for _, c := range counts {
		expired += c.Expired
		marked += c.NeedsPerson[items.CauseNoDedupe]
	}
	if expired != 30 || marked != 30 {
		t.Fatalf("three replicas expired %d and marked %d, want 30 and 30 (each item once)", expired, marked)
	}
	for i := range 30 {
		it := e.get(keyOf("inv", i))
		n := 0
		for _, ev := range it.History {
			if ev.Kind == items.EventLeaseExpired {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%s records %d lease expiries, want 1", it.Key, n)
		}
	}
}

func TestSweepLogsOnlyWhenItChangedSomething(t *testing.T) {
	t.Parallel()
	e := newEnv(t, items.Config{})
	e.claim("inv-1", withLease(60))
	e.sweep(0)
	if got := e.logs.String(); got != "" {
		t.Fatalf("a sweep that changed nothing logged %q", got)
	}
	e.advance(time.Minute)
	e.sweep(0)
	got := e.logs.String()
	if strings.Count(got, "\n") != 1 || !strings.Contains(got, "expired=1") {
		t.Fatalf("a sweep that expired one lease logged %q, want one line with expired=1", got)
	}
}
