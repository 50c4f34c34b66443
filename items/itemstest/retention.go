package itemstest

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
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
		if st.ManualResolutions != 1 || st.EnteredUnknown != want.EnteredUnknown+1 {
			t.Errorf("cumulative measures after retention: manual_resolutions %d, entered_unknown %d (items left: %d)",
				st.ManualResolutions, st.EnteredUnknown, want.EnteredUnknown)
		}
		// A replay after retention is a new item.
		if a := h.bw("done", payloadA); a.Decision != items.Proceed || a.Reason != items.ReasonNew || a.Attempt != 1 {
			t.Errorf("a replay after retention: %s/%s attempt %d, want proceed/new attempt 1", a.Decision, a.Reason, a.Attempt)
		}
	})
}
