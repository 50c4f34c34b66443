package itemstest

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

func exerciseRetention(t *testing.T, open func(t *testing.T) OperatorStore) {
	t.Run("RemovesOnlySettledItemsPastTheirRetention", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		// Settled, and old: removed.
		a := h.claim("done", payloadA)
		h.aw("done", succeeded(a.Claim, "x-1"))
		for i := range 30 { // a workflow's loop of late reports: its history drops 14 of them
			late := failedStatus(a.Claim, 503)
			late.ErrorMessage = fmt.Sprintf("late report #%d", i)
			h.aw("done", late)
		}
		if n := h.item("done").HistoryDropped; n != 14 {
			t.Fatalf("done dropped %d repeated reports, want 14", n)
		}
		a = h.claim("gave-up", payloadA, dest(destOneShot))
		h.aw("gave-up", failedStatus(a.Claim, 422))
		h.unknownAfterTimeout("resolved")
		if _, _, err := h.resolve("resolved", items.ResolveSucceeded, "found it in the destination's log", "x-3"); err != nil {
			t.Fatal(err)
		}
		// Never removed, however old: retryable, unknown, in flight, needing a person.
		a = h.claim("retrying", payloadA, dest(destSearchable))
		h.aw("retrying", failedClass(a.Claim, items.ClassDNS))
		h.unknownAfterTimeout("lost")
		h.claim("flying", payloadA, lease(items.MaxLeaseSeconds))
		a = h.claim("twice", payloadA, dest(destKeyed))
		h.aw("twice", succeeded(a.Claim, "x-4"))
		h.aw("twice", succeeded(a.Claim, "x-5"))
		// Settled, but its destination keeps items for 90 days.
		a = h.claim("kept", payloadA, dest(destKeyed))
		h.aw("kept", succeeded(a.Claim, "x-6"))
		for key, want := range map[string]bool{"done": true, "gave-up": true, "resolved": true, "retrying": false, "lost": false,
			"flying": false, "twice": false, "kept": true} {
			if got := h.item(key).Settled(); got != want {
				t.Fatalf("%s (%s, needs_person %v) settled %v, want %v", key, h.item(key).State, h.item(key).NeedsPerson, got, want)
			}
		}
		h.advance(31 * 24 * time.Hour)
		// Settled, but recent: kept.
		a = h.claim("recent", payloadA)
		h.aw("recent", succeeded(a.Claim, "x-7"))

		cfg := h.ledger.Config()
		cfg.Destinations = map[string]items.Destination{destKeyed: {Retention: 90 * 24 * time.Hour}}
		r, err := items.NewRetention(items.RetentionConfig{Store: h.ops, Config: cfg, Limit: 1,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		c, err := r.RunOnce(h.ctx)
		if err != nil || c.Removed != 3 {
			t.Fatalf("RunOnce = %+v, %v; want 3 removed", c, err)
		}
		for _, key := range []string{"done", "gave-up", "resolved"} {
			if _, err := h.store.Get(h.ctx, tenantA, key); !errors.Is(err, items.ErrNotFound) {
				t.Errorf("%s was not removed: %v", key, err)
			}
		}
		var left []*items.Item
		for _, key := range []string{"retrying", "lost", "flying", "twice", "kept", "recent"} {
			left = append(left, h.item(key))
		}
		if again, err := r.RunOnce(h.ctx); err != nil || again.Removed != 0 {
			t.Errorf("a second run removed %d (%v)", again.Removed, err)
		}
		// The counts lose the removed items, keep their cumulative measures, and count them removed.
		st, err := h.ops.Stats(h.ctx, tenantA, h.now())
		if err != nil {
			t.Fatal(err)
		}
		want := recount(left, h.now())
		if st.Items != want.Items || fmt.Sprint(st.States) != fmt.Sprint(want.States) || st.NeedsPerson != want.NeedsPerson {
			t.Errorf("stats after retention %+v, recount of the items left %+v", st.Measures, want.Measures)
		}
		if st.Removed != 3 || st.Destinations[destDefault].Removed != 2 || st.Destinations[destOneShot].Removed != 1 {
			t.Errorf("removed %d (per destination %+v)", st.Removed, st.Destinations)
		}
		if st.ManualResolutions != 1 || st.EnteredUnknown != want.EnteredUnknown+1 || want.HistoryDropped != 0 ||
			st.HistoryDropped != 14 || st.HistoryDroppedItems != 1 || st.Destinations[destDefault].HistoryDropped != 14 {
			t.Errorf("cumulative measures after retention: manual_resolutions %d, entered_unknown %d (items left: %d), history_dropped %d in %d items (want 14 in 1)",
				st.ManualResolutions, st.EnteredUnknown, want.EnteredUnknown, st.HistoryDropped, st.HistoryDroppedItems)
		}
		// A replay after retention is a new item.
		if a := h.bw("done", payloadA); a.Decision != items.Proceed || a.Reason != items.ReasonNew || a.Attempt != 1 {
			t.Errorf("a replay after retention: %s/%s attempt %d, want proceed/new attempt 1", a.Decision, a.Reason, a.Attempt)
		}
	})

	t.Run("AcknowledgedItemsAreSettled", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		// A retryable failure flagged unresolved_too_long, acknowledged: settled, though still retryable.
		h.staleFailure("acked-failure")
		h.acknowledge("acked-failure")
		// A duplicate effect, acknowledged.
		h.duplicateEffect("acked-duplicate")
		h.acknowledge("acked-duplicate")
		// Acknowledged, then retried: the new attempt is nobody's acknowledgement. One fails again (a
		// retryable failure: not settled), the other succeeds (settled again).
		for _, key := range []string{"retried-failing", "retried-succeeding"} {
			h.staleFailure(key)
			h.acknowledge(key)
			a := h.bw(key, payloadA, dest(destEscalating))
			if a.Decision != items.Proceed || a.Attempt != 2 {
				t.Fatalf("retry of %s: %s/%s attempt %d", key, a.Decision, a.Reason, a.Attempt)
			}
			if it := h.item(key); it.State != items.StateInFlight || it.Settled() {
				t.Errorf("%s retried: %s, settled %v; want in flight, not settled", key, it.State, it.Settled())
			}
			if key == "retried-failing" {
				h.aw(key, failedStatusRetryAfter(a.Claim, 429, 60))
			} else {
				h.aw(key, succeeded(a.Claim, "x-9"))
			}
		}
		// Acknowledged, then another duplicate (a third external id): it needs a person again, and is
		// not settled however long it waits.
		dup := h.duplicateEffect("acked-then-duplicate")
		h.acknowledge("acked-then-duplicate")
		if r := h.aw("acked-then-duplicate", succeeded(dup.Claim, "r-3")); r.Reason != items.ReasonDuplicateEffect {
			t.Fatalf("another duplicate after the acknowledgement: %s", r.Reason)
		}
		// Not acknowledged: a retryable failure, a duplicate effect waiting for a person, an unknown item
		// that waits for nobody yet.
		a := h.claim("retryable", payloadA, dest(destEscalating))
		h.aw("retryable", failedStatusRetryAfter(a.Claim, 429, 60))
		h.duplicateEffect("duplicate")
		h.unknownAfterTimeout("unknown", dest(destKeyed))

		settled := map[string]bool{"acked-failure": true, "acked-duplicate": true, "retried-failing": false, "retried-succeeding": true,
			"retryable": false, "duplicate": false, "unknown": false, "acked-then-duplicate": false}
		for key, want := range settled {
			it := h.item(key)
			if got := it.Settled(); got != want {
				t.Errorf("%s (%s, needs_person %v) settled %v, want %v", key, it.State, it.NeedsPerson, got, want)
			}
		}
		if got, want := h.sweepCandidateKeys(), []string{"retried-failing", "retryable", "unknown"}; !slices.Equal(got, want) {
			t.Errorf("sweep candidates %v, want %v", got, want)
		}

		cfg := h.ledger.Config()
		cfg.Destinations = nil // every destination keeps settled items items.DefaultRetention
		r, err := items.NewRetention(items.RetentionConfig{Store: h.ops, Config: cfg, Limit: 2,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		// Before the retention has passed: nothing is removed, and the sweeper does not flag the
		// acknowledged items again, however long they wait.
		h.advance(items.DefaultRetention - 24*time.Hour)
		if c, err := r.RunOnce(h.ctx); err != nil || c.Removed != 0 {
			t.Fatalf("RunOnce before the retention = %+v, %v; want nothing removed", c, err)
		}
		for _, key := range []string{"acked-failure", "acked-duplicate", "retried-succeeding"} {
			if cause := h.markNeedsPerson(key); cause != "" {
				t.Errorf("the sweeper flags %s again: %s", key, cause)
			}
		}
		h.advance(48 * time.Hour)
		c, err := r.RunOnce(h.ctx)
		if err != nil || c.Removed != 3 {
			t.Fatalf("RunOnce after the retention = %+v, %v; want 3 removed", c, err)
		}
		var left []*items.Item
		for key, want := range settled {
			_, err := h.store.Get(h.ctx, tenantA, key)
			switch {
			case want && !errors.Is(err, items.ErrNotFound):
				t.Errorf("%s was not removed: %v", key, err)
			case !want && err != nil:
				t.Errorf("%s was removed: %v", key, err)
			case !want:
				left = append(left, h.item(key))
			}
		}
		if got, want := h.sweepCandidateKeys(), []string{"retried-failing", "retryable", "unknown"}; !slices.Equal(got, want) {
			t.Errorf("sweep candidates after retention %v, want %v", got, want)
		}
		st, err := h.ops.Stats(h.ctx, tenantA, h.now())
		if err != nil {
			t.Fatal(err)
		}
		want := recount(left, h.now())
		if st.Items != want.Items || fmt.Sprint(st.States) != fmt.Sprint(want.States) || st.NeedsPerson != want.NeedsPerson || st.Removed != 3 {
			t.Errorf("stats after retention %+v (removed %d), recount of the items left %+v", st.Measures, st.Removed, want.Measures)
		}
		// A replay of the acknowledged failure after retention is a new item, which proceeds.
		if a := h.bw("acked-failure", payloadA, dest(destEscalating)); a.Decision != items.Proceed || a.Reason != items.ReasonNew || a.Attempt != 1 {
			t.Errorf("a replay after retention: %s/%s attempt %d, want proceed/new attempt 1", a.Decision, a.Reason, a.Attempt)
		}
	})
}

// EarlierBuild is what CheckEarlierBuildAcknowledged needs of a store's test.
type EarlierBuild struct {
	// Open opens a new, empty store.
	Open func(t *testing.T) OperatorStore
	// StoreAsEarlierBuild makes the stored items of the tenant look as a build before 2026-12-02 wrote
	// them: sweep candidates by their fields, although a person acknowledged them.
	StoreAsEarlierBuild func(t *testing.T, s OperatorStore, tenant string)
	// Reopen closes s (where its ledger allows one process only) and opens its ledger again, as a
	// restart on the new build does.
	Reopen func(t *testing.T, s OperatorStore) OperatorStore
}

// CheckEarlierBuildAcknowledged checks that the items a person acknowledged that an earlier build stored
// as sweep candidates become settled at the next start, without a person touching them again: after
// the restart they are no sweep candidates, and retention removes them once their retention has passed.
func CheckEarlierBuildAcknowledged(t *testing.T, b EarlierBuild) {
	t.Helper()
	h := newOpsHarness(t, b.Open)
	h.staleFailure("acked-failure")
	h.duplicateEffect("acked-duplicate")
	h.acknowledge("acked-failure")
	h.acknowledge("acked-duplicate")
	a := h.claim("retryable", payloadA)
	h.aw("retryable", failedStatusRetryAfter(a.Claim, 429, 60))
	a = h.claim("done", payloadA)
	h.aw("done", succeeded(a.Claim, "x-1"))

	b.StoreAsEarlierBuild(t, h.ops, tenantA)
	if got, want := h.sweepCandidateKeys(), []string{"acked-duplicate", "acked-failure", "retryable"}; !slices.Equal(got, want) {
		t.Fatalf("sweep candidates as an earlier build stored them %v, want %v", got, want)
	}

	s := b.Reopen(t, h.ops)
	l, err := items.NewLedger(h.ctx, s, h.ledger.Config())
	if err != nil {
		t.Fatal(err)
	}
	h = &opsHarness{harness: &harness{t: t, ctx: h.ctx, store: s, ledger: l, clock: h.clock, tenant: tenantA}, ops: s}
	if got, want := h.sweepCandidateKeys(), []string{"retryable"}; !slices.Equal(got, want) {
		t.Errorf("sweep candidates after the restart %v, want %v", got, want)
	}
	h.advance(items.DefaultRetention + time.Hour)
	cfg := h.ledger.Config()
	cfg.Destinations = nil
	r, err := items.NewRetention(items.RetentionConfig{Store: s, Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := r.RunOnce(h.ctx); err != nil || c.Removed != 3 {
		t.Fatalf("RunOnce = %+v, %v; want 3 removed (done and the two acknowledged)", c, err)
	}
	for _, key := range []string{"acked-failure", "acked-duplicate", "done"} {
		if _, err := s.Get(h.ctx, tenantA, key); !errors.Is(err, items.ErrNotFound) {
			t.Errorf("%s was not removed: %v", key, err)
		}
	}
	st, err := s.Stats(h.ctx, tenantA, h.now())
	if err != nil {
		t.Fatal(err)
	}
	if want := recount([]*items.Item{h.item("retryable")}, h.now()); st.Items != want.Items ||
		fmt.Sprint(st.States) != fmt.Sprint(want.States) || st.Removed != 3 {
		t.Errorf("stats after retention %+v (removed %d), recount of the items left %+v", st.Measures, st.Removed, want.Measures)
	}
}

// acknowledge resolves key acknowledged, as a person does, and fails unless that was recorded.
func (h *opsHarness) acknowledge(key string) {
	h.t.Helper()
	if _, reason, err := h.resolve(key, items.ResolveAcknowledged, evidenceAck, ""); err != nil || reason != items.ReasonRecorded {
		h.t.Fatalf("acknowledging %s: %s, %v", key, reason, err)
	}
}

// sweepCandidateKeys returns the keys of the store's sweep candidates (up to 100), in their order.
func (h *opsHarness) sweepCandidateKeys() []string {
	h.t.Helper()
	found, err := h.ops.SweepCandidates(h.ctx, items.ItemRef{}, 100)
	if err != nil {
		h.t.Fatal(err)
	}
	return keysOf(found)
}
