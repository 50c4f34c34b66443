package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/pgstore/pgtest"
)

func newTransition(tenant string, keys []string, fn func(i int, cur *items.Item) (*items.Item, error)) *transition {
	return &transition{ctx: context.Background(), tenant: tenant, keys: keys, fn: fn}
}

var epoch = time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)

// claimFn claims each key: a new item at attempt 1, or the next attempt of an existing one.
func claimFn(tenant string, keys []string) func(int, *items.Item) (*items.Item, error) {
	return func(i int, cur *items.Item) (*items.Item, error) {
		if cur == nil {
			cur = &items.Item{Tenant: tenant, Key: keys[i], Destination: "d", CreatedAt: epoch}
		}
		cur.State, cur.Attempt, cur.UpdatedAt = items.StateInFlight, cur.Attempt+1, epoch
		return cur, nil
	}
}

// TestGroupRunsTransitionsInOrderAndDropsAFailedOne decides three transitions as one group: the second
// changes the first's item and then fails, so it must leave no trace; the third must see the first's
// state, and the first's and third's changes must be committed, with the other tenant's.
func TestGroupRunsTransitionsInOrderAndDropsAFailedOne(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	boom := errors.New("boom")
	a := newTransition("acme", []string{"k"}, claimFn("acme", []string{"k"}))
	b := newTransition("acme", []string{"k", "new-of-b"}, func(i int, cur *items.Item) (*items.Item, error) {
		if i == 1 {
			return nil, boom
		}
		return claimFn("acme", []string{"k"})(i, cur)
	})
	c := newTransition("acme", []string{"k", "x"}, claimFn("acme", []string{"k", "x"}))
	other := newTransition("globex", []string{"k"}, claimFn("globex", []string{"k"}))
	s.commitGroup([]*transition{a, b, c, other}, nil, nil)

	if a.err != nil || c.err != nil || other.err != nil {
		t.Fatalf("errors: a %v, c %v, other tenant %v", a.err, c.err, other.err)
	}
	if !errors.Is(b.err, boom) || b.out != nil {
		t.Errorf("b: %v, %v; want its own error and no items", b.out, b.err)
	}
	if got := c.out[0].Attempt; got != 2 {
		t.Errorf("c saw attempt %d of k; want 2 (a's claim, not b's)", got)
	}
	if stored, err := s.Get(ctx, "acme", "k"); err != nil || stored.Attempt != 2 || stored.Version != 2 {
		t.Fatalf("stored k: %+v, %v; want attempt 2 at version 2", stored, err)
	}
	if _, err := s.Get(ctx, "acme", "new-of-b"); !errors.Is(err, items.ErrNotFound) {
		t.Errorf("b's item was written: %v", err)
	}
	if _, err := s.Get(ctx, "acme", "x"); err != nil {
		t.Errorf("c's new item: %v", err)
	}
	if it, err := s.Get(ctx, "globex", "k"); err != nil || it.Attempt != 1 {
		t.Errorf("the other tenant's k: %+v, %v; want its own item at attempt 1", it, err)
	}
	st, err := s.Stats(ctx, "acme", epoch)
	if err != nil || st.Items != 2 || st.States[items.StateInFlight] != 2 {
		t.Errorf("the kept counts hold %+v (%v); want the two items of acme, in flight", st, err)
	}
}

// TestConcurrentCallersShareCommits runs 64 callers at once, each claiming its own key ten times: every
// claim is recorded once, and the callers shared transactions.
func TestConcurrentCallersShareCommits(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	var wg sync.WaitGroup
	for c := range 64 {
		wg.Go(func() {
			key := fmt.Sprintf("k%02d", c)
			for range 10 {
				if _, err := s.Transition(ctx, "acme", key, func(cur *items.Item) (*items.Item, error) {
					return claimFn("acme", []string{key})(0, cur)
				}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for c := range 64 {
		if it, err := s.Get(ctx, "acme", fmt.Sprintf("k%02d", c)); err != nil || it.Attempt != 10 || it.Version != 10 {
			t.Fatalf("k%02d: %+v, %v; want attempt 10 at version 10", c, it, err)
		}
	}
	if commits, decided := s.commits.Load(), s.decided.Load(); commits >= decided {
		t.Errorf("%d commits for %d transitions: the callers shared none", commits, decided)
	} else {
		t.Logf("%d transitions in %d commits", decided, commits)
	}
}

// TestTransitionAfterCloseIsUnavailable: a transition that arrives after Close answers ErrUnavailable.
func TestTransitionAfterCloseIsUnavailable(t *testing.T) {
	s := openInternal(t)
	s.Close()
	_, err := s.Transition(context.Background(), "acme", "k", func(*items.Item) (*items.Item, error) { return nil, nil })
	if !errors.Is(err, items.ErrUnavailable) {
		t.Fatalf("after Close: %v, want ErrUnavailable", err)
	}
}

// TestOneTransitionsFaultStaysWithIt decides one group holding, beside good transitions, one whose
// decision panics and one whose new state cannot be stored (a result that is not JSON): each of those two
// answers its own error, of kind internal, and writes nothing; the others are committed.
func TestOneTransitionsFaultStaysWithIt(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	good := newTransition("acme", []string{"a"}, claimFn("acme", []string{"a"}))
	panics := newTransition("acme", []string{"b"}, func(int, *items.Item) (*items.Item, error) { panic("a bug") })
	unstorable := newTransition("acme", []string{"c"}, func(i int, cur *items.Item) (*items.Item, error) {
		it, _ := claimFn("acme", []string{"c"})(i, cur)
		it.Result = []byte(`{not json`)
		return it, nil
	})
	after := newTransition("acme", []string{"d"}, claimFn("acme", []string{"d"}))
	s.commitGroup([]*transition{good, panics, unstorable, after}, nil, nil)
	if good.err != nil || after.err != nil {
		t.Fatalf("good transitions failed: %v, %v", good.err, after.err)
	}
	for name, tr := range map[string]*transition{"panics": panics, "unstorable": unstorable} {
		if tr.err == nil || items.ErrorCode(tr.err) != items.CodeInternal {
			t.Errorf("%s: %v, want an error of kind internal", name, tr.err)
		}
	}
	for key, want := range map[string]bool{"a": true, "b": false, "c": false, "d": true} {
		_, err := s.Get(ctx, "acme", key)
		if (err == nil) != want {
			t.Errorf("%s stored: %v, want %v", key, err == nil, want)
		}
	}
}

// TestCorruptItemFailsOnlyItsCaller: an item's document is corrupted underneath the service (by a writer that moves its version); a group
// naming it and other items answers the corrupt item's transition an error of kind internal, and records
// the others; Get says it is corrupt, and the operator's list names it as unreadable and goes on.
func TestCorruptItemFailsOnlyItsCaller(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	for _, k := range []string{"bad", "good"} {
		if _, err := s.Transition(ctx, "acme", k, func(cur *items.Item) (*items.Item, error) { return claimFn("acme", []string{k})(0, cur) }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.pool.Exec(ctx, `UPDATE `+s.quoted+`.items SET doc = '\x7b7b', version = version + 1 WHERE key = 'bad'`); err != nil {
		t.Fatal(err)
	}
	bad := newTransition("acme", []string{"good", "bad"}, claimFn("acme", []string{"good", "bad"}))
	good := newTransition("acme", []string{"good"}, claimFn("acme", []string{"good"}))
	s.commitGroup([]*transition{bad, good}, nil, nil)
	if bad.err == nil || items.ErrorCode(bad.err) != items.CodeInternal || !errors.Is(bad.err, errCorrupt) {
		t.Errorf("the transition of the corrupt item: %v, want it corrupt (internal)", bad.err)
	}
	if good.err != nil || good.out[0].Attempt != 2 {
		t.Errorf("the other transition: %+v, %v; want attempt 2", good.out, good.err)
	}
	if _, err := s.Get(ctx, "acme", "bad"); !errors.Is(err, errCorrupt) {
		t.Errorf("Get of the corrupt item: %v", err)
	}
	page, err := s.ListItems(ctx, items.ListParams{Tenant: "acme"})
	if err != nil || len(page.Items) != 1 || len(page.Unreadable) != 1 || page.Unreadable[0] != "bad" {
		t.Errorf("list: %d items, unreadable %v, %v; want good, and bad unreadable", len(page.Items), page.Unreadable, err)
	}
}

// TestLostCommitAnswerIsSettled: the answer to a group's COMMIT is lost after the server committed (the
// connection broke, say). The store learns from the server that the transaction committed and answers
// the callers as recorded, without deciding again: fn ran once, the item is stored once.
func TestLostCommitAnswerIsSettled(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	var lost atomic.Bool
	s.fault = func(step string) error {
		if step == "answer" && lost.CompareAndSwap(false, true) {
			return errors.New("connection reset by peer (injected)")
		}
		return nil
	}
	calls := 0
	it, err := s.Transition(ctx, "acme", "k", func(cur *items.Item) (*items.Item, error) {
		calls++
		return claimFn("acme", []string{"k"})(0, cur)
	})
	if err != nil || it.Attempt != 1 {
		t.Fatalf("a transition whose commit's answer was lost: %+v, %v; want it recorded", it, err)
	}
	if !lost.Load() || calls != 1 {
		t.Fatalf("answer lost %v, fn called %d times; want it lost once and fn once (the commit settled, not decided again)", lost.Load(), calls)
	}
	if stored, err := s.Get(ctx, "acme", "k"); err != nil || stored.Version != 1 {
		t.Fatalf("stored: %+v, %v", stored, err)
	}
}

// TestConnectionLostBeforeCommitDecidesAgain: the connection breaks as a group's writes are sent, before
// its COMMIT reached the server. The server rolls the transaction back; the store learns so, and decides
// the group again on a fresh read: the caller gets its answer, the item is stored once.
func TestConnectionLostBeforeCommitDecidesAgain(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	var lost atomic.Bool
	s.fault = func(step string) error {
		if step == "write" && lost.CompareAndSwap(false, true) {
			return errors.New("broken pipe (injected)")
		}
		return nil
	}
	calls := 0
	it, err := s.Transition(ctx, "acme", "k", func(cur *items.Item) (*items.Item, error) {
		calls++
		return claimFn("acme", []string{"k"})(0, cur)
	})
	if err != nil || it.Attempt != 1 || it.Version != 1 {
		t.Fatalf("a transition whose connection was lost before the commit: %+v, %v; want it recorded once", it, err)
	}
	if calls != 2 {
		t.Fatalf("fn called %d times; want twice (decided again after the rollback)", calls)
	}
}

// TestUnsettledCommitIsUnavailable: when the answer to a COMMIT is lost and the server cannot be asked
// whether it committed within settleWait, the callers are answered ErrUnavailable, which says so, rather
// than a guess.
func TestUnsettledCommitIsUnavailable(t *testing.T) {
	s := openInternal(t)
	s.timeout, s.settleWait = 500*time.Millisecond, 500*time.Millisecond
	s.fault = func(step string) error {
		switch step {
		case "answer":
			return errors.New("connection reset by peer (injected)")
		case "settle":
			return errors.New("connection refused (injected)")
		}
		return nil
	}
	_, err := s.Transition(context.Background(), "acme", "k", func(cur *items.Item) (*items.Item, error) {
		return claimFn("acme", []string{"k"})(0, cur)
	})
	if !errors.Is(err, items.ErrUnavailable) || !strings.Contains(err.Error(), "could not be learned") {
		t.Fatalf("unsettled commit: %v, want ErrUnavailable saying its outcome is unknown", err)
	}
}

// TestReadDuringLoadOnAOneConnectionPool: with pool_max_conns=1 and callers that never let up, the
// committers' connection goes back to the pool between groups (mayCarry), so an operator's read is served
// within a group's time, not when the load ends.
func TestReadDuringLoadOnAOneConnectionPool(t *testing.T) {
	ctx := context.Background()
	url, schema := pgtest.Schema(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	s, err := Open(ctx, url+sep+"pool_max_conns=1", schema, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	mustTransition(t, s, "seen", func(cur *items.Item) (*items.Item, error) { return claimFn("acme", []string{"seen"})(0, cur) })
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("c%02d-%d", c, i)
				if _, err := s.Transition(ctx, "acme", key, func(cur *items.Item) (*items.Item, error) {
					return claimFn("acme", []string{key})(0, cur)
				}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond) // the load is on, and groups follow each other
	var slowest time.Duration
	for range 5 {
		began := time.Now()
		if _, err := s.Get(ctx, "acme", "seen"); err != nil {
			t.Error(err)
		}
		slowest = max(slowest, time.Since(began))
		time.Sleep(50 * time.Millisecond)
	}
	carried := s.carried.Load()
	close(stop)
	wg.Wait()
	t.Logf("slowest read %v under load; %d groups carried in %d commits", slowest, carried, s.commits.Load())
	if slowest > time.Second {
		t.Errorf("a read during the load took %v: it waited for the committers' connection", slowest)
	}
}

// TestYoungTableIsPlannedAfreshUntilItGrows: a new ledger's statements are planned at each execution
// (customPlans) until its items table reaches youngPages; the store reads the table's size in the
// background, and a replica opened on a grown table plans generically from its first group.
func TestYoungTableIsPlannedAfreshUntilItGrows(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	if !s.young() {
		t.Fatal("a new ledger's table is not young")
	}
	// Rows of another tenant, 1.9 kB each (four to a page: under 2 kB, PostgreSQL compresses none), past
	// youngPages.
	if _, err := s.pool.Exec(ctx, `INSERT INTO `+s.quoted+`.items (tenant, key, version, updated_at, attempt, needs_person,
		sweep_candidate, alert_pending, state, destination, workflow, owner, reference, batch_id, execution_id, doc)
		SELECT 'pad', 'k' || g, 1, now(), 1, false, false, false, 'succeeded', 'd', '', '', '', '', '', convert_to(repeat('x', 1800), 'UTF8')
		FROM generate_series(1, $1) AS g`, 4*youngPages+200); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.young() {
		if time.Now().After(deadline) {
			t.Fatalf("the table grew past %d pages, and the store still plans it as young", youngPages)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := openReplica(t, s); r.young() {
		t.Error("a replica opened on the grown table plans it as young")
	}
}
