package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/pgstore"
	"github.com/replaysafe/companion/items/pgstore/pgtest"
)

// replica is one process on the shared database: its clock, its store and its ledger, both on that clock.
type replica struct {
	store  *pgstore.Store
	ledger *items.Ledger
}

// skewedReplicas opens one replica whose clock is right and one whose clock is skew ahead of it (behind
// when negative), on one schema, each with its own pool, as two processes would.
func skewedReplicas(t *testing.T, skew time.Duration) (right, skewed replica) {
	t.Helper()
	url, schema := pgtest.Schema(t)
	open := func(now func() time.Time) replica {
		s, err := pgstore.Open(context.Background(), url, schema, pgstore.WithLogger(quiet), pgstore.WithClock(now))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		l, err := items.NewLedger(context.Background(), s, items.Config{Now: now, MaxClockSkew: items.DefaultMaxClockSkew})
		if err != nil {
			t.Fatal(err)
		}
		return replica{store: s, ledger: l}
	}
	return open(time.Now), open(func() time.Time { return time.Now().Add(skew) })
}

// leaseParams is a claim with a same-key retry allowed (dedupe key) and a 10 s lease: a replica that took
// the lease for expired would answer proceed (retry_same_key).
func leaseParams(key string) items.BeforeWriteParams {
	fp, _ := items.Fingerprint([]byte(`{"invoice":"742"}`))
	return items.BeforeWriteParams{Tenant: "acme", Key: key, Fingerprint: fp, Destination: "crm", Dedupe: items.DedupeKey, LeaseSeconds: 10}
}

// checkHeld checks that r, asked while the claim of first is live, neither proceeds nor records the lease
// as expired, by any of the ledger's paths that judge a lease.
func checkHeld(t *testing.T, r replica, first items.Answer) {
	t.Helper()
	ctx := context.Background()
	p := leaseParams(first.Key)
	ans, err := r.ledger.BeforeWrite(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if ans.Decision != items.Skip || ans.Reason != items.ReasonInProgress {
		t.Fatalf("a second replica got %s/%s while the first claim's lease was live, want skip/in_progress", ans.Decision, ans.Reason)
	}
	// The claim can be taken over the ledger's clock margin after the lease's end (a store replicas share).
	want := 10 + int(r.ledger.ClockMargin().Seconds())
	if ans.RetryAfter < want-2 || ans.RetryAfter > want+1 {
		t.Errorf("retry_after = %d s, want about %d (the lease left on the database's clock, and the clock margin)", ans.RetryAfter, want)
	}
	batch, err := r.ledger.BeforeWriteMany(ctx, "acme", []items.BeforeWriteParams{p})
	if err != nil {
		t.Fatal(err)
	}
	if batch[0].Decision != items.Skip {
		t.Fatalf("a second replica's batch got %s/%s while the first claim's lease was live", batch[0].Decision, batch[0].Reason)
	}
	_, _, err = r.ledger.Resolve(ctx, items.ResolveParams{Tenant: "acme", Key: first.Key,
		Outcome: items.ResolveNotCommitted, Evidence: "nothing in the destination yet", By: "ops"})
	var ie *items.Error
	if !errors.As(err, &ie) || ie.Code != items.CodeConflict {
		t.Fatalf("resolving an item whose lease is live: %v, want a conflict (it is in flight)", err)
	}
	if changed, err := r.ledger.ExpireLease(ctx, "acme", first.Key); err != nil || changed {
		t.Fatalf("ExpireLease of a live lease = %v, %v; want no change", changed, err)
	}
	it, err := r.ledger.Get(ctx, "acme", first.Key)
	if err != nil {
		t.Fatal(err)
	}
	if it.State != items.StateInFlight || it.Claim != first.Claim {
		t.Fatalf("after the second replica's requests the item is %s under claim %s, want in flight under %s", it.State, it.Claim, first.Claim)
	}
}

// TestLeaseIsJudgedOnTheDatabasesClock: two replicas on one database whose clocks differ by 20 s.
// Whichever holds a claim, the other sees it live for its whole lease: both stamp and judge leases on the
// database's clock. A replica 20 s ahead judging on its own clock would take a 10 s lease for expired at
// once and proceed; one 20 s behind would stamp leases that end 20 s early.
func TestLeaseIsJudgedOnTheDatabasesClock(t *testing.T) {
	for _, skew := range []time.Duration{20 * time.Second, -20 * time.Second} {
		t.Run(skew.String(), func(t *testing.T) {
			right, skewed := skewedReplicas(t, skew)
			if !skewed.store.HasClock() {
				t.Fatal("the store does not judge leases on the database's clock")
			}
			if off, err := skewed.store.ClockOffset(context.Background()); err != nil || (off+skew).Abs() > time.Second {
				t.Fatalf("ClockOffset of a clock %s off = %s, %v; want about %s", skew, off, err, -skew)
			}
			first, err := right.ledger.BeforeWrite(context.Background(), leaseParams("first-right"))
			if err != nil || first.Decision != items.Proceed {
				t.Fatalf("first claim: %+v, %v", first, err)
			}
			checkHeld(t, skewed, first)

			first, err = skewed.ledger.BeforeWrite(context.Background(), leaseParams("first-skewed"))
			if err != nil || first.Decision != items.Proceed {
				t.Fatalf("first claim: %+v, %v", first, err)
			}
			if d := first.LeaseExpiresAt.Sub(time.Now().Add(10 * time.Second)).Abs(); d > 2*time.Second {
				t.Fatalf("the skewed replica's lease ends at %s, %s off the database's clock plus 10 s", first.LeaseExpiresAt, d)
			}
			checkHeld(t, right, first)
		})
	}
}

// TestClockOffsetIgnoresWhatALeaseCannotTell: a process clock 50 ms off the database's reads as no offset
// (a test's fake clock stays exact, and a lease of 5 s cannot tell); one 2 s off reads as about 2 s.
func TestClockOffsetIgnoresWhatALeaseCannotTell(t *testing.T) {
	for _, c := range []struct {
		skew, want time.Duration
	}{{50 * time.Millisecond, 0}, {-50 * time.Millisecond, 0}, {2 * time.Second, -2 * time.Second}} {
		s := open(t, pgstore.WithClock(func() time.Time { return time.Now().Add(c.skew) }))
		off, err := s.ClockOffset(context.Background())
		if err != nil || (off-c.want).Abs() > 100*time.Millisecond || (c.want == 0) != (off == 0) {
			t.Errorf("a clock %s off reads as %s (%v), want %s", c.skew, off, err, c.want)
		}
	}
}
