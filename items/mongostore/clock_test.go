package mongostore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/mongostore"
)

// replica is one process on the shared database: its clock, its store and its ledger, both on that clock.
type replica struct {
	now    func() time.Time
	store  *mongostore.Store
	ledger *items.Ledger
}

// openReplicas opens one replica whose clock is right and one whose clock is skew ahead of it (behind
// when negative), both on one database, each store with its own client, as two processes would.
func openReplicas(t *testing.T, skew, maxSkew time.Duration, opts ...mongostore.Option) (right, skewed replica) {
	t.Helper()
	e := newEnv(t)
	open := func(now func() time.Time) replica {
		s, err := mongostore.Open(t.Context(), e.uri, e.db, append([]mongostore.Option{mongostore.WithClock(now)}, opts...)...)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		l, err := items.NewLedger(t.Context(), s, items.Config{Now: now, MaxClockSkew: maxSkew})
		if err != nil {
			t.Fatalf("NewLedger: %v", err)
		}
		return replica{now: now, store: s, ledger: l}
	}
	return open(time.Now), open(func() time.Time { return time.Now().Add(skew) })
}

// leaseParams is a claim with a same-key retry allowed (dedupe key) and a 10 s lease: a replica that took
// the lease for expired would answer proceed (retry_same_key).
func leaseParams(key string) items.BeforeWriteParams {
	p := claimParams(key)
	p.LeaseSeconds = 10
	return p
}

// checkHeld checks that r, asked while the claim of first is live, neither proceeds nor records the lease
// as expired, by any of the ledger's paths that judge a lease.
func checkHeld(t *testing.T, r replica, first items.Answer) {
	t.Helper()
	p := leaseParams(first.Key)
	ans, err := r.ledger.BeforeWrite(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	if ans.Decision != items.Skip || ans.Reason != items.ReasonInProgress {
		t.Fatalf("a second replica got %s/%s while the first claim's lease was live, want skip/in_progress", ans.Decision, ans.Reason)
	}
	// retry_after is counted on the shared clock: about the 10 s left and the 2 s margin (max_clock_skew),
	// not 10 s plus or minus the skew.
	if ans.RetryAfter < 10 || ans.RetryAfter > 13 {
		t.Errorf("retry_after = %d s, want about 12 (the lease left on the server's clock, and the margin)", ans.RetryAfter)
	}
	batch, err := r.ledger.BeforeWriteMany(t.Context(), "acme", []items.BeforeWriteParams{p})
	if err != nil {
		t.Fatal(err)
	}
	if batch[0].Decision != items.Skip {
		t.Fatalf("a second replica's batch got %s/%s while the first claim's lease was live", batch[0].Decision, batch[0].Reason)
	}
	_, _, err = r.ledger.Resolve(t.Context(), items.ResolveParams{Tenant: "acme", Key: first.Key,
		Outcome: items.ResolveNotCommitted, Evidence: "nothing in the destination yet", By: "ops"})
	var ie *items.Error
	if !errors.As(err, &ie) || ie.Code != items.CodeConflict {
		t.Fatalf("resolving an item whose lease is live: %v, want a conflict (it is in flight)", err)
	}
	if changed, err := r.ledger.ExpireLease(t.Context(), "acme", first.Key); err != nil || changed {
		t.Fatalf("ExpireLease of a live lease = %v, %v; want no change", changed, err)
	}
	it, err := r.ledger.Get(t.Context(), "acme", first.Key)
	if err != nil {
		t.Fatal(err)
	}
	if it.State != items.StateInFlight || it.Claim != first.Claim {
		t.Fatalf("after the second replica's requests the item is %s under claim %s, want in flight under %s", it.State, it.Claim, first.Claim)
	}
}

// TestLeaseIsJudgedOnTheServersClock: two replicas on one MongoDB whose clocks differ by 20 s. Whichever
// holds a claim, the other sees it live for its whole lease: both stamp and judge leases on the primary's
// clock, read inside the transition. A replica 20 s ahead judging on its own clock would take a 10 s
// lease for expired at once and proceed; one 20 s behind would stamp leases that end 20 s early.
func TestLeaseIsJudgedOnTheServersClock(t *testing.T) {
	for _, skew := range []time.Duration{20 * time.Second, -20 * time.Second} {
		t.Run(skew.String(), func(t *testing.T) {
			right, skewed := openReplicas(t, skew, items.DefaultMaxClockSkew)
			if !skewed.store.HasClock() {
				t.Fatal("the store does not read the server's clock")
			}
			if off, err := skewed.store.ClockOffset(t.Context()); err != nil || (off+skew).Abs() > time.Second {
				t.Fatalf("ClockOffset of a clock %s off = %s, %v; want about %s", skew, off, err, -skew)
			}

			// The right replica claims; the skewed one asks.
			first, err := right.ledger.BeforeWrite(t.Context(), leaseParams("first-right"))
			if err != nil || first.Decision != items.Proceed {
				t.Fatalf("first claim: %+v, %v", first, err)
			}
			checkHeld(t, skewed, first)

			// The skewed replica claims; the right one asks. The lease it answers and stores is counted
			// on the server's clock, not on its own.
			first, err = skewed.ledger.BeforeWrite(t.Context(), leaseParams("first-skewed"))
			if err != nil || first.Decision != items.Proceed {
				t.Fatalf("first claim: %+v, %v", first, err)
			}
			if d := first.LeaseExpiresAt.Sub(time.Now().Add(10 * time.Second)).Abs(); d > 2*time.Second {
				t.Fatalf("the skewed replica's lease ends at %s, %s off the server's clock plus 10 s", first.LeaseExpiresAt, d)
			}
			checkHeld(t, right, first)
		})
	}
}

// TestLeaseMarginWithoutServerClock: where the store cannot read the server's clock, a replica judges
// leases on its own clock and takes one for expired only max_clock_skew after its end. With a replica 11 s
// ahead and a 10 s lease, a margin of 15 s keeps the claim live; a margin of 0 lets the replica ahead take
// it for expired at once and proceed, which is what the margin (and, on a server with a clock, the
// server's clock) is for.
func TestLeaseMarginWithoutServerClock(t *testing.T) {
	const skew = 11 * time.Second
	for _, tc := range []struct {
		margin  time.Duration
		proceed bool
	}{{15 * time.Second, false}, {0, true}} {
		right, ahead := openReplicas(t, skew, tc.margin, mongostore.WithoutServerClock())
		if ahead.store.HasClock() {
			t.Fatal("HasClock with WithoutServerClock")
		}
		first, err := right.ledger.BeforeWrite(t.Context(), leaseParams("margin"))
		if err != nil || first.Decision != items.Proceed {
			t.Fatalf("first claim: %+v, %v", first, err)
		}
		ans, err := ahead.ledger.BeforeWrite(t.Context(), leaseParams("margin"))
		if err != nil {
			t.Fatal(err)
		}
		if got := ans.Decision == items.Proceed; got != tc.proceed {
			t.Fatalf("margin %s, clocks %s apart: %s/%s", tc.margin, skew, ans.Decision, ans.Reason)
		}
		// The replica ahead, at 11 s past the claim on its clock, waits for the lease's 10 s and the 15 s
		// margin: 14 s.
		if !tc.proceed && (ans.RetryAfter < 13 || ans.RetryAfter > 15) {
			t.Fatalf("retry_after = %d s, want 14 (lease and margin, on the asking replica's clock)", ans.RetryAfter)
		}
	}
}

// BenchmarkBeforeWriteClock measures what reading the server's clock costs a before-write (a new claim
// each): with it, and with the process clock (WithoutServerClock).
func BenchmarkBeforeWriteClock(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts []mongostore.Option
	}{{"server-clock", nil}, {"process-clock", []mongostore.Option{mongostore.WithoutServerClock()}}} {
		b.Run(tc.name, func(b *testing.B) {
			uri, db := realURI(), fmt.Sprintf("companion_bench_%d", time.Now().UnixNano())
			if uri == "" {
				uri, db = sharedSrv.URI(), sharedSrv.Database()
			} else {
				defer dropDatabase(uri, db)
			}
			s, err := mongostore.Open(b.Context(), uri, db, tc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			l, err := items.NewLedger(b.Context(), s, items.Config{})
			if err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				i++
				if _, err := l.BeforeWrite(b.Context(), claimParams(fmt.Sprintf("bench-%d", i))); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestClockOffsetIgnoresWhatALeaseCannotTell: a process clock 50 ms off the server's reads as no offset
// (below what a lease of 5 s or more can tell, and below what a round trip can measure on a far server);
// one 3 s off reads as 3 s.
func TestClockOffsetIgnoresWhatALeaseCannotTell(t *testing.T) {
	for skew, want := range map[time.Duration]time.Duration{50 * time.Millisecond: 0, -3 * time.Second: 3 * time.Second} {
		_, r := openReplicas(t, skew, 0)
		off, err := r.store.ClockOffset(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if (off - want).Abs() > 50*time.Millisecond {
			t.Errorf("a clock %s off the server's: ClockOffset = %s, want %s", skew, off, want)
		}
	}
}

// TestClockIsReadOncePerSecondAndAtANewPrimary: twenty before-writes in a row read the server's clock
// (one hello command) once, not twenty times: a reading is kept for a second. When the driver sees
// another primary (a failover), the next decision reads it again: the new primary's clock may differ.
func TestClockIsReadOncePerSecondAndAtANewPrimary(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mu sync.Mutex
	hellos := 0
	s, err := mongostore.Open(t.Context(), e.uri, e.db, mongostore.WithCommandMonitor(&event.CommandMonitor{
		Started: func(_ context.Context, ev *event.CommandStartedEvent) {
			if ev.CommandName == "hello" {
				mu.Lock()
				hellos++
				mu.Unlock()
			}
		}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	l := newLedger(t, s, nil)
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return hellos
	}
	if _, err := s.ClockOffset(t.Context()); err != nil {
		t.Fatal(err)
	}
	before := count()
	start := time.Now()
	for i := range 20 {
		if _, err := l.BeforeWrite(t.Context(), claimParams(fmt.Sprintf("clock-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if took, n := time.Since(start), count()-before; n > 1+int(took/time.Second) {
		t.Fatalf("20 before-writes in %s read the server's clock %d times, want at most one a second", took, n)
	}
	if !mongostore.ClockFresh(s) {
		t.Skip("the machine is too slow to see a kept reading: the before-writes took over a second each")
	}
	mongostore.TopologyChanged(s, &event.TopologyDescriptionChangedEvent{NewDescription: event.TopologyDescription{
		Servers: []event.ServerDescription{{Kind: "RSPrimary", Addr: "db2:27017"}}}})
	if mongostore.ClockFresh(s) {
		t.Fatal("the kept reading is still used after the primary changed")
	}
	before = count()
	if _, err := l.BeforeWrite(t.Context(), claimParams("clock-after-failover")); err != nil {
		t.Fatal(err)
	}
	if n := count() - before; n != 1 {
		t.Fatalf("the first decision after the primary changed read the clock %d times, want once", n)
	}
}

// TestLeaseMarginOnTheServersClock: on the server's clock too, a lease counts as expired only
// max_clock_skew after its end (a reading's uncertainty; after a failover, another member's clock). A
// replica asking 1 s after a 10 s lease's end, within a margin of 2 s, is told the claim is in progress;
// 3 s after, it proceeds with a same-key retry.
func TestLeaseMarginOnTheServersClock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open()
	if !s.HasClock() {
		t.Fatal("the store does not read the server's clock")
	}
	var at time.Time
	clock := func() time.Time { return at }
	l, err := items.NewLedger(t.Context(), s, items.Config{Now: clock, MaxClockSkew: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	at = time.Now()
	first, err := l.BeforeWrite(t.Context(), leaseParams("margin-server"))
	if err != nil || first.Decision != items.Proceed {
		t.Fatalf("first claim: %+v, %v", first, err)
	}
	at = first.LeaseExpiresAt.Add(time.Second)
	if a, err := l.BeforeWrite(t.Context(), leaseParams("margin-server")); err != nil || a.Decision != items.Skip || a.Reason != items.ReasonInProgress {
		t.Fatalf("1 s past the lease, within the margin: %+v, %v; want skip/in_progress", a, err)
	}
	at = first.LeaseExpiresAt.Add(3 * time.Second)
	if a, err := l.BeforeWrite(t.Context(), leaseParams("margin-server")); err != nil || a.Decision != items.Proceed || a.Reason != items.ReasonRetrySameKey {
		t.Fatalf("3 s past the lease, past the margin: %+v, %v; want proceed/retry_same_key", a, err)
	}
}
