package itemstest

import (
	"context"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// queuedStore is a store whose every transition waits queued before it runs, for wait on the suite's
// clock: as a request waits for the SQLite group committer, or for retries after a MongoDB write that
// lost to another writer.
type queuedStore struct {
	items.Store
	clock *Clock
	wait  time.Duration
}

func (s queuedStore) Transition(ctx context.Context, tenant, key string, fn items.TransitionFunc) (*items.Item, error) {
	s.clock.Advance(s.wait)
	return s.Store.Transition(ctx, tenant, key, fn)
}

func (s queuedStore) TransitionMany(ctx context.Context, tenant string, keys []string, fn func(int, *items.Item) (*items.Item, error)) ([]*items.Item, error) {
	s.clock.Advance(s.wait)
	return s.Store.TransitionMany(ctx, tenant, keys, fn)
}

// exerciseLeases checks that a lease counts from the moment its claim is written (API.md, "Leases across
// replicas"), not from the request's arrival.
func exerciseLeases(t *testing.T, open func(t *testing.T) items.Store) {
	const wait = 40 * time.Second
	// queued returns h with a ledger whose transitions wait queued first.
	queued := func(t *testing.T, h *harness) *harness {
		q := *h
		l, err := items.NewLedger(h.ctx, queuedStore{Store: h.store, clock: h.clock, wait: wait}, suiteConfig(h.clock.Now))
		if err != nil {
			t.Fatalf("NewLedger: %v", err)
		}
		q.ledger = l
		return &q
	}
	checkLease := func(t *testing.T, h *harness, a items.Answer, arrived time.Time, seconds int) {
		t.Helper()
		want := arrived.Add(wait + time.Duration(seconds)*time.Second)
		if a.LeaseExpiresAt == nil || !a.LeaseExpiresAt.Equal(want) {
			t.Fatalf("%s: lease_expires_at = %v, want %s: %d s from the write, which came %s after the request",
				a.Key, a.LeaseExpiresAt, want, seconds, wait)
		}
		if it := h.item(a.Key); it.LeaseExpiresAt == nil || !it.LeaseExpiresAt.Equal(want) {
			t.Fatalf("%s: the stored lease ends at %v, the answer says %s", a.Key, it.LeaseExpiresAt, want)
		}
	}

	t.Run("SingleCountsFromCommit", func(t *testing.T) {
		h := queued(t, newHarness(t, open))
		arrived := h.now()
		checkLease(t, h, h.claim("lease-single", payloadA, lease(60)), arrived, 60)
	})
	t.Run("BatchCountsFromCommit", func(t *testing.T) {
		h := queued(t, newHarness(t, open))
		arrived := h.now()
		ps := []items.BeforeWriteParams{
			h.params("lease-batch-1", payloadA, lease(60)),
			h.params("lease-batch-2", payloadA),
		}
		answers, err := h.ledger.BeforeWriteMany(h.ctx, h.tenant, ps)
		if err != nil {
			t.Fatal(err)
		}
		checkLease(t, h, answers[0], arrived, 60)
		checkLease(t, h, answers[1], arrived, items.DefaultLeaseSeconds)
	})
	t.Run("ExpiryJudgedAtCommit", func(t *testing.T) {
		// A 60 s lease with 30 s left when the request arrives has expired when the store decides, after
		// the wait: the item is judged on the time of the write.
		h := newHarness(t, open)
		h.claim("lease-expiry", payloadA, lease(60), dest(destKeyed))
		h.advance(30 * time.Second)
		a := queued(t, h).bw("lease-expiry", payloadA, dest(destKeyed))
		if a.Decision != items.Proceed || a.Reason != items.ReasonRetrySameKey {
			t.Fatalf("lease expired by the time of the write: %s/%s, want proceed/retry_same_key", a.Decision, a.Reason)
		}
	})
	t.Run("SharedStoreExpiresPastTheMargin", func(t *testing.T) {
		// On a store several processes share, a lease counts as expired only max_clock_skew after its end,
		// with a clock of the store's own too (API.md, "Leases across replicas"): what one reading of the
		// store's clock cannot tell, and another server's clock after a failover.
		h := newHarness(t, open)
		if _, ok := h.store.(items.SharedStore); !ok {
			t.Skip("one process holds the store: its leases are judged on one clock, with no margin")
		}
		cfg := suiteConfig(h.clock.Now)
		cfg.MaxClockSkew = 5 * time.Second
		l, err := items.NewLedger(h.ctx, h.store, cfg)
		if err != nil {
			t.Fatal(err)
		}
		h.ledger = l
		first := h.claim("lease-margin", payloadA, lease(60), dest(destKeyed))
		h.advance(62 * time.Second)
		if a := h.bw("lease-margin", payloadA, dest(destKeyed)); a.Decision != items.Skip || a.Reason != items.ReasonInProgress {
			t.Fatalf("2 s past the lease, within a margin of 5 s: %s/%s, want skip/in_progress", a.Decision, a.Reason)
		}
		if changed, err := l.ExpireLease(h.ctx, h.tenant, "lease-margin"); err != nil || changed {
			t.Fatalf("the sweeper within the margin: changed %v, %v; want no change", changed, err)
		}
		h.advance(4 * time.Second)
		if a := h.bw("lease-margin", payloadA, dest(destKeyed)); a.Decision != items.Proceed || a.Reason != items.ReasonRetrySameKey || a.Claim == first.Claim {
			t.Fatalf("past the lease and the margin: %s/%s, want proceed/retry_same_key with a new claim", a.Decision, a.Reason)
		}
	})
}
