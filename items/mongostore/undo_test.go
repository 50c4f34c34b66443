package mongostore_test

import (
	"errors"
	"fmt"
	"github.com/replaysafe/companion/internal/tcpproxy"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/mongostore"
)

// errLost is the injected failure: the server applied the write, and its answer never came.
var errLost = errors.New("injected: the acknowledgement of an applied write was lost")

// batchOf is a batch of before-writes: four new items (one insert of many) and three prepared ones (one
// bulk write of their updates).
func batchOf(t *testing.T, l *items.Ledger, s items.Store, prefix string) []items.BeforeWriteParams {
	t.Helper()
	var ps []items.BeforeWriteParams
	for i := range 4 {
		ps = append(ps, claimParams(fmt.Sprintf("%s-new-%d", prefix, i)))
	}
	for i := range 3 {
		key := fmt.Sprintf("%s-prepared-%d", prefix, i)
		create(t, s, key)
		ps = append(ps, claimParams(key))
	}
	return ps
}

// checkNoClaimHeld checks that no item of ps is in flight: each new one is gone, each prepared one is
// prepared again, with no claim.
func checkNoClaimHeld(t *testing.T, l *items.Ledger, ps []items.BeforeWriteParams, k int) {
	t.Helper()
	for _, p := range ps {
		it, err := l.Get(t.Context(), p.Tenant, p.Key)
		switch {
		case errors.Is(err, items.ErrNotFound):
		case err != nil:
			t.Fatal(err)
		case it.State == items.StateInFlight || it.Claim != "" || it.Attempt != 0:
			t.Fatalf("failure after write %d: %s is left %s, attempt %d, claim %q", k, p.Key, it.State, it.Attempt, it.Claim)
		}
	}
}

// TestFailedBatchTakesBackItsClaims: a batch of claims whose k-th write is applied but answered with an
// error (for every k: the insert of the new items, the bulk write of the updates) answers ErrUnavailable,
// and leaves no claim held by nobody: the new items are gone, the prepared ones prepared. The same batch
// then proceeds in full, at attempt 1.
func TestFailedBatchTakesBackItsClaims(t *testing.T) {
	s, _ := openStore(t)
	l := newLedger(t, s, nil)
	for k := 1; k <= 2; k++ {
		ps := batchOf(t, l, s, fmt.Sprintf("k%d", k))
		writes := mongostore.FailAfterWrite(s, k, errLost)
		_, err := l.BeforeWriteMany(t.Context(), "acme", ps)
		if !errors.Is(err, items.ErrUnavailable) {
			t.Fatalf("failure after write %d: err = %v, want ErrUnavailable", k, err)
		}
		if writes() != k {
			t.Fatalf("the batch stopped after %d writes, want %d", writes(), k)
		}
		mongostore.FailAfterWrite(s, 0, nil)
		checkNoClaimHeld(t, l, ps, k)

		answers, err := l.BeforeWriteMany(t.Context(), "acme", ps)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range answers {
			if a.Decision != items.Proceed || a.Attempt != 1 {
				t.Fatalf("after the undo: %s got %s/%s attempt %d, want proceed at attempt 1", a.Key, a.Decision, a.Reason, a.Attempt)
			}
		}
		// The kept counts followed the undo: every item of every round so far is counted once, in flight.
		st, err := s.Stats(t.Context(), "acme", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if st.Items != 7*k || st.States[items.StateInFlight] != 7*k || st.States[items.StatePrepared] != 0 {
			t.Fatalf("failure after write %d: the stats count %d items, %d in flight, %d prepared; want %d in flight",
				k, st.Items, st.States[items.StateInFlight], st.States[items.StatePrepared], 7*k)
		}
		// And the series: the claims taken back are not counted, those made again are, once.
		itemstest.CheckSeriesMatchesItems(t, s, "acme", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	}
}

// TestFailedClaimIsTakenBack: a single before-write whose write (an insert, or an update of an item that
// exists) is applied but answered with an error answers ErrUnavailable and leaves no claim.
func TestFailedClaimIsTakenBack(t *testing.T) {
	s, _ := openStore(t)
	l := newLedger(t, s, nil)
	create(t, s, "single-prepared")
	for _, key := range []string{"single-new", "single-prepared"} {
		mongostore.FailAfterWrite(s, 1, errLost)
		_, err := l.BeforeWrite(t.Context(), claimParams(key))
		mongostore.FailAfterWrite(s, 0, nil)
		if !errors.Is(err, items.ErrUnavailable) {
			t.Fatalf("%s: err = %v, want ErrUnavailable", key, err)
		}
		checkNoClaimHeld(t, l, []items.BeforeWriteParams{claimParams(key)}, 1)
		if a, err := l.BeforeWrite(t.Context(), claimParams(key)); err != nil || a.Decision != items.Proceed || a.Attempt != 1 {
			t.Fatalf("%s after the undo: %+v, %v; want proceed at attempt 1", key, a, err)
		}
	}
	itemstest.CheckSeriesMatchesItems(t, s, "acme", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
}

// TestUndoLeavesAnotherWritersChange: the undo is guarded by version and claim. When another replica
// changed the item between the failed write and the undo, the undo matches nothing and the other
// replica's change stays (the claim then expires into unknown, as API.md allows).
func TestUndoLeavesAnotherWritersChange(t *testing.T) {
	s, openReplica := openStore(t)
	other := openReplica()
	l := newLedger(t, s, nil)
	mongostore.SetFault(s, func(string) error {
		if _, err := other.Transition(t.Context(), "acme", "guarded", note("the other replica's change")); err != nil {
			t.Errorf("the other replica's change: %v", err)
		}
		return errLost
	})
	_, err := l.BeforeWrite(t.Context(), claimParams("guarded"))
	mongostore.SetFault(s, nil)
	if !errors.Is(err, items.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	it, err := s.Get(t.Context(), "acme", "guarded")
	if err != nil {
		t.Fatal(err)
	}
	if got := notes(it); len(got) != 1 || it.State != items.StateInFlight || it.Version != 2 {
		t.Fatalf("after the refused undo: %s, version %d, notes %q; want the other replica's change kept", it.State, it.Version, got)
	}
}

// TestUndoAfterALostRaceRestoresTheWinnersItem: a transition whose insert lost to another replica (which
// created the item, prepared) claims that item on its second decision, and that write's answer is lost.
// The undo gives the other replica's item back, prepared; it does not delete it as if this call had
// created it.
func TestUndoAfterALostRaceRestoresTheWinnersItem(t *testing.T) {
	s, openReplica := openStore(t)
	other := openReplica()
	calls := 0
	mongostore.FailAfterWrite(s, 1, errLost)
	_, err := s.Transition(t.Context(), "acme", "raced", func(cur *items.Item) (*items.Item, error) {
		calls++
		if calls == 1 {
			create(t, other, "raced") // the other replica comes between this read and this insert
		}
		next := cur
		if next == nil {
			next = &items.Item{Tenant: "acme", Key: "raced", Fingerprint: fp1, Attempts: []items.Attempt{}, History: []items.Event{}}
		}
		next.State, next.Claim, next.Attempt = items.StateInFlight, fmt.Sprintf("c_mine_%d", calls), 1
		return next, nil
	})
	mongostore.FailAfterWrite(s, 0, nil)
	if !errors.Is(err, items.ErrUnavailable) || calls != 2 {
		t.Fatalf("err = %v after %d decisions, want ErrUnavailable after 2", err, calls)
	}
	it, err := s.Get(t.Context(), "acme", "raced")
	if err != nil {
		t.Fatalf("the other replica's item is gone: %v", err)
	}
	if it.State != items.StatePrepared || it.Claim != "" {
		t.Fatalf("after the undo the item is %s under claim %q, want the other replica's prepared item", it.State, it.Claim)
	}
}

// TestUndoOnAHungServerIsBounded: when the server hangs right after applying a batch's insert, the undo
// cannot reach it either. The batch still answers ErrUnavailable within about the store's timeout (the
// undo is one bulk write under one deadline, not one timeout per claim), saying that the claims could not
// be taken back; they stay, to expire into unknown.
func TestUndoOnAHungServerIsBounded(t *testing.T) {
	if realURI() != "" {
		t.Skip("runs on the in-process FerretDB only (it needs the server's address to put a proxy before it)")
	}
	proxy := tcpproxy.Start(t, sharedSrv.Addr())
	s, err := mongostore.Open(t.Context(), "mongodb://"+proxy.Addr+"/", sharedSrv.Database(), mongostore.WithTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := newLedger(t, s, nil)
	var ps []items.BeforeWriteParams
	for i := range 50 {
		ps = append(ps, claimParams(fmt.Sprintf("hung-undo-%d", i)))
	}
	mongostore.SetFault(s, func(string) error {
		proxy.Freeze()
		return errLost
	})
	start := time.Now()
	_, err = l.BeforeWriteMany(t.Context(), "acme", ps)
	elapsed := time.Since(start)
	proxy.Thaw()
	mongostore.SetFault(s, nil)
	if !errors.Is(err, items.ErrUnavailable) || !strings.Contains(err.Error(), "taking back its claims failed too") {
		t.Fatalf("err = %v, want ErrUnavailable naming the failed undo", err)
	}
	if elapsed > 3*time.Second {
		t.Fatalf("the failed batch took %s on a hung server, want about the 500ms timeout", elapsed)
	}
}
