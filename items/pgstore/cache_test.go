package pgstore

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// openReplica opens a second store on s's schema, as another replica would.
func openReplica(t *testing.T, s *Store) *Store {
	t.Helper()
	r, err := New(context.Background(), s.pool, s.schema, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// claimAt claims key at attempt cur+1, changed at the time given.
func claimAt(tenant, key string, at time.Time, calls *int) items.TransitionFunc {
	return func(cur *items.Item) (*items.Item, error) {
		*calls++
		if cur == nil {
			cur = &items.Item{Tenant: tenant, Key: key, Destination: "d", CreatedAt: at}
		}
		cur.State, cur.Attempt, cur.UpdatedAt = items.StateInFlight, cur.Attempt+1, at
		return cur, nil
	}
}

func mustTransition(t *testing.T, s *Store, key string, fn items.TransitionFunc) *items.Item {
	t.Helper()
	it, err := s.Transition(context.Background(), "acme", key, fn)
	if err != nil {
		t.Fatalf("transition of %s: %v", key, err)
	}
	return it
}

func mustGet(t *testing.T, s *Store, key string) *items.Item {
	t.Helper()
	it, err := s.Get(context.Background(), "acme", key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return it
}

// TestCachedItemsAreWrittenWithoutARead: a new item (taken as new) and then a change of the item the
// store committed are each written without reading the item, and stored as decided.
func TestCachedItemsAreWrittenWithoutARead(t *testing.T) {
	s := openInternal(t)
	calls := 0
	mustTransition(t, s, "k", claimAt("acme", "k", epoch, &calls))
	it := mustTransition(t, s, "k", claimAt("acme", "k", epoch.Add(time.Second), &calls))
	if it.Attempt != 2 || it.Version != 2 || calls != 2 {
		t.Fatalf("answer: attempt %d version %d, fn called %d times; want attempt 2 at version 2, fn twice", it.Attempt, it.Version, calls)
	}
	if got := s.unread.Load(); got != 2 {
		t.Errorf("%d of 2 transactions were written without a read; want both", got)
	}
	if stored := mustGet(t, s, "k"); stored.Attempt != 2 || stored.Version != 2 {
		t.Errorf("stored: attempt %d version %d; want 2, 2", stored.Attempt, stored.Version)
	}
}

// TestAnotherReplicasWriteUnderTheCacheIsCaught: replica B changes an item replica A holds in its cache. A's
// next transition of it, decided on the cached state, must not be written: it is decided again on the
// item as stored, B's change included.
func TestAnotherReplicasWriteUnderTheCacheIsCaught(t *testing.T) {
	a := openInternal(t)
	b := openReplica(t, a)
	calls := 0
	mustTransition(t, a, "k", claimAt("acme", "k", epoch, &calls))
	mustTransition(t, b, "k", claimAt("acme", "k", epoch.Add(time.Second), &calls))
	calls = 0
	it := mustTransition(t, a, "k", claimAt("acme", "k", epoch.Add(2*time.Second), &calls))
	if it.Attempt != 3 || it.Version != 3 {
		t.Fatalf("A's answer: attempt %d version %d; want attempt 3 at version 3 (after B's claim)", it.Attempt, it.Version)
	}
	if calls != 2 {
		t.Errorf("fn called %d times; want twice (on the cache, then on the read)", calls)
	}
	if stored := mustGet(t, a, "k"); stored.Attempt != 3 || stored.Version != 3 {
		t.Errorf("stored: attempt %d version %d; want 3, 3", stored.Attempt, stored.Version)
	}
}

// TestChangeByHandUnderTheCacheIsCaught: an operator changes an item's document by hand, without moving
// its version or time of change. The replica that holds the item in its cache does not overwrite the
// change: its write, guarded by the row version (xmin) too, fails, and the item is decided again on the
// row as changed.
func TestChangeByHandUnderTheCacheIsCaught(t *testing.T) {
	s := openInternal(t)
	calls := 0
	old := mustTransition(t, s, "k", claimAt("acme", "k", epoch, &calls))
	old.Reference = "set by hand"
	writeByHand(t, s, old)
	calls = 0
	it := mustTransition(t, s, "k", claimAt("acme", "k", epoch.Add(time.Second), &calls))
	if it.Reference != "set by hand" || it.Attempt != 2 || calls != 2 {
		t.Errorf("the next claim: reference %q, attempt %d, fn called %d times; want the change by hand kept at attempt 2, fn twice (on the cache, then on the read)",
			it.Reference, it.Attempt, calls)
	}
	if stored := mustGet(t, s, "k"); stored.Reference != "set by hand" {
		t.Errorf("stored reference %q: the cached decision overwrote the change by hand", stored.Reference)
	}
}

// TestItemTakenAsNewThatExistsIsReadAgain: replica B made an item replica A has never seen. A takes it as
// new; its insert fails, and A decides again on the item as stored, then reads for a while rather than
// guess again.
func TestItemTakenAsNewThatExistsIsReadAgain(t *testing.T) {
	a := openInternal(t)
	b := openReplica(t, a)
	calls := 0
	mustTransition(t, b, "k", claimAt("acme", "k", epoch, &calls))
	calls = 0
	it := mustTransition(t, a, "k", claimAt("acme", "k", epoch.Add(time.Second), &calls))
	if it.Attempt != 2 || it.Version != 2 || calls != 2 {
		t.Fatalf("A's answer: attempt %d version %d, fn called %d times; want attempt 2 at version 2, fn twice", it.Attempt, it.Version, calls)
	}
	if got := a.guessNew.Load(); got != guessPause {
		t.Errorf("after a wrong guess, %d groups are to be read; want %d", got, guessPause)
	}
	// An item A does not hold is now read, not guessed: fn runs once.
	mustTransition(t, b, "j", claimAt("acme", "j", epoch, &calls))
	calls = 0
	if it := mustTransition(t, a, "j", claimAt("acme", "j", epoch.Add(time.Second), &calls)); it.Attempt != 2 || calls != 1 {
		t.Errorf("j: attempt %d, fn called %d times; want attempt 2, fn once (read, not guessed)", it.Attempt, calls)
	}
}

// TestItemRemovedAndMadeAgainIsNotTheCachedOne: an item A holds in its cache is removed (retention), and
// replica B makes a new item of the same key, at the same version. A's transition of it must be decided
// on B's item, not on the one A remembers.
func TestItemRemovedAndMadeAgainIsNotTheCachedOne(t *testing.T) {
	ctx := context.Background()
	a := openInternal(t)
	b := openReplica(t, a)
	calls := 0
	mustTransition(t, a, "k", claimAt("acme", "k", epoch, &calls))
	if _, err := a.pool.Exec(ctx, `DELETE FROM `+a.quoted+`.items WHERE key = 'k'`); err != nil {
		t.Fatal(err)
	}
	made := mustTransition(t, b, "k", func(cur *items.Item) (*items.Item, error) {
		return &items.Item{Tenant: "acme", Key: "k", Destination: "d", State: items.StateInFlight, Attempt: 7,
			CreatedAt: epoch.Add(time.Minute), UpdatedAt: epoch.Add(time.Minute)}, nil
	})
	if made.Version != 1 {
		t.Fatalf("B's item is at version %d; the test needs it at 1, as A's was", made.Version)
	}
	it := mustTransition(t, a, "k", claimAt("acme", "k", epoch.Add(2*time.Minute), &calls))
	if it.Attempt != 8 || it.Version != 2 {
		t.Fatalf("A's answer: attempt %d version %d; want attempt 8 at version 2 (B's item, claimed again)", it.Attempt, it.Version)
	}
}

// TestUnchangedItemIsRead: a transition that changes nothing is not answered from the cache, which the
// writes could not check: it is answered the item as stored, another replica's change included.
func TestUnchangedItemIsRead(t *testing.T) {
	a := openInternal(t)
	b := openReplica(t, a)
	calls := 0
	mustTransition(t, a, "k", claimAt("acme", "k", epoch, &calls))
	mustTransition(t, b, "k", claimAt("acme", "k", epoch.Add(time.Second), &calls))
	it := mustTransition(t, a, "k", func(cur *items.Item) (*items.Item, error) { return nil, nil })
	if it == nil || it.Attempt != 2 {
		t.Fatalf("an unchanged item is answered %+v; want the stored one, at attempt 2", it)
	}
}

// TestNoTransactionIsLeftOpen: a burst of callers, whose groups begin the next one's transaction as they
// commit and are written without a read, records each claim once; afterwards the store holds no
// connection (and so no transaction open on it).
func TestNoTransactionIsLeftOpen(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	var wg sync.WaitGroup
	for c := range 32 {
		wg.Go(func() {
			calls := 0
			for i := range 20 {
				key := string(rune('a'+c%26)) + string(rune('a'+c/26)) + "-" + string(rune('a'+i))
				if _, err := s.Transition(ctx, "acme", key, claimAt("acme", key, epoch, &calls)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	// A connection the committer holds between groups holds a transaction begun for the next one.
	deadline := time.Now().Add(5 * time.Second)
	for s.pool.Stat().AcquiredConns() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still held %s after the burst", s.pool.Stat().AcquiredConns(), 5*time.Second)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s.commits.Load() >= 640 {
		t.Errorf("%d commits for 640 transitions of 32 callers: none shared", s.commits.Load())
	}
	if s.carried.Load() == 0 || s.unread.Load() == 0 {
		t.Errorf("of %d groups, %d were given a transaction begun before them and %d written without a read; want some of each",
			s.commits.Load(), s.carried.Load(), s.unread.Load())
	}
	for i := range 20 { // each item as stored, claimed once
		key := "aa-" + string(rune('a'+i))
		if it := mustGet(t, s, key); it.Attempt != 1 || it.Version != 1 {
			t.Errorf("%s: attempt %d version %d; want 1, 1", key, it.Attempt, it.Version)
		}
	}
}

// TestSettleDoesNotTrustAReusedTransactionID: pg_xact_status says "committed" of a transaction id, but the
// items that transaction wrote are not as it wrote them (the id was given again after a crash, to another
// transaction): the store answers that it did not commit. An id in the future did not commit either.
func TestSettleDoesNotTrustAReusedTransactionID(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	calls := 0
	it := mustTransition(t, s, "k", claimAt("acme", "k", epoch, &calls))
	var committed string
	if err := s.pool.QueryRow(ctx, `SELECT xmin::text FROM `+s.quoted+`.items WHERE key = 'k'`).Scan(&committed); err != nil {
		t.Fatal(err)
	}
	var epochXid string // the full (epoch-extended) id pg_xact_status takes
	if err := s.pool.QueryRow(ctx, `SELECT (pg_current_xact_id()::text::bigint & ~x'ffffffff'::bigint | $1::bigint)::text`, committed).Scan(&epochXid); err != nil {
		t.Fatal(err)
	}
	lost := errors.New("connection reset by peer (test)")
	as := writtenState{"acme", "k", it.Version, it.UpdatedAt}
	if err := s.settle(ctx, epochXid, lost, []writtenState{as}); err != nil {
		t.Fatalf("settle of the transaction that wrote k as it is: %v; want committed", err)
	}
	other := as
	other.updatedAt = other.updatedAt.Add(time.Second)
	if err := s.settle(ctx, epochXid, lost, []writtenState{other}); !errors.Is(err, errNotCommitted) {
		t.Errorf("settle of a committed id whose item is not as written: %v; want not committed", err)
	}
	missing := writtenState{"acme", "never-written", 1, epoch}
	if err := s.settle(ctx, epochXid, lost, []writtenState{as, missing}); !errors.Is(err, errNotCommitted) {
		t.Errorf("settle of a committed id whose new item is missing: %v; want not committed", err)
	}
	var future string
	if err := s.pool.QueryRow(ctx, `SELECT (pg_current_xact_id()::text::bigint + 1000000)::text`).Scan(&future); err != nil {
		t.Fatal(err)
	}
	if err := s.settle(ctx, future, lost, []writtenState{as}); !errors.Is(err, errNotCommitted) {
		t.Errorf("settle of an id in the future: %v; want not committed", err)
	}
}

// TestLockHeldTooLongEndsCleanly: another session holds the row lock of an item the cache holds for longer
// than the store's timeout. A transition of it, decided without a read, waits with its COMMIT queued
// behind the write. The wait must end on the server (its lock timeout, or the statement cancelled at the
// store's timeout), not with a cut connection whose outcome must then be settled: the caller is answered
// ErrUnavailable within about the timeout, and nothing is written once the lock goes.
func TestLockHeldTooLongEndsCleanly(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	s.timeout = time.Second
	calls := 0
	before := mustTransition(t, s, "k", claimAt("acme", "k", epoch, &calls))
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+s.quoted+`.items WHERE key = 'k' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = s.Transition(ctx, "acme", "k", claimAt("acme", "k", epoch.Add(time.Second), &calls))
	took := time.Since(start)
	tx.Rollback(ctx) //nolint:errcheck // the lock's only use
	if !errors.Is(err, items.ErrUnavailable) {
		t.Fatalf("a transition of a locked item: %v; want ErrUnavailable", err)
	}
	if took > 2*time.Second {
		t.Errorf("it took %s to answer; want about the store's timeout (%s), not a settle", took.Round(time.Millisecond), s.timeout)
	}
	time.Sleep(200 * time.Millisecond) // a write queued behind the lock would have committed by now
	if stored := mustGet(t, s, "k"); stored.Version != before.Version || stored.Attempt != before.Attempt {
		t.Errorf("stored after the lock went: version %d attempt %d; want %d, %d (nothing written)", stored.Version, stored.Attempt, before.Version, before.Attempt)
	}
}
