package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// claimFn makes a new in-flight item of every key, or moves an existing one to the next attempt.
func claimFn(tenant string, keys []string) func(int, *items.Item) (*items.Item, error) {
	return func(i int, cur *items.Item) (*items.Item, error) {
		now := time.Now().UTC()
		if cur == nil {
			return &items.Item{Tenant: tenant, Key: keys[i], Destination: "billing", State: items.StateInFlight, Attempt: 1,
				CreatedAt: now, UpdatedAt: now}, nil
		}
		cur.Attempt++
		cur.UpdatedAt = now
		return cur, nil
	}
}

func newTransition(tenant string, keys []string, fn func(int, *items.Item) (*items.Item, error)) *transition {
	return &transition{ctx: context.Background(), tenant: tenant, keys: keys, fn: fn, done: make(chan struct{})}
}

// TestGroupRunsTransitionsInOrderAndDropsAFailedOne decides three transitions as one group: the second
// changes the first's item and then fails, so it must leave no trace; the third must see the first's
// state, and the first's and third's changes must be committed.
func TestGroupRunsTransitionsInOrderAndDropsAFailedOne(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
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
	s.commitGroup([]*transition{a, b, c, other})

	if a.err != nil || c.err != nil || other.err != nil {
		t.Fatalf("errors: a %v, c %v, other tenant %v", a.err, c.err, other.err)
	}
	if !errors.Is(b.err, boom) || b.out != nil {
		t.Errorf("b: %v, %v; want its own error and no items", b.out, b.err)
	}
	if got := c.out[0].Attempt; got != 2 {
		t.Errorf("c saw attempt %d of k; want 2 (a's claim, not b's)", got)
	}
	stored, err := s.Get(ctx, "acme", "k")
	if err != nil || stored.Attempt != 2 {
		t.Fatalf("stored k: %+v, %v; want attempt 2", stored, err)
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
}

// TestConcurrentCallersShareCommits runs 64 callers at once, each claiming its own key ten times, and
// checks that every claim was recorded exactly once and that the callers shared commits.
func TestConcurrentCallersShareCommits(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	const callers, rounds = 64, 10
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Go(func() {
			key := fmt.Sprintf("k-%d", c)
			for range rounds {
				if _, err := s.TransitionMany(ctx, "acme", []string{key}, claimFn("acme", []string{key})); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for c := range callers {
		it, err := s.Get(ctx, "acme", fmt.Sprintf("k-%d", c))
		if err != nil || it.Attempt != rounds || it.Version != rounds {
			t.Fatalf("k-%d: %+v, %v; want attempt and version %d", c, it, err, rounds)
		}
	}
	if n := s.commits.Load(); n >= callers*rounds {
		t.Errorf("%d commits for %d transitions: callers did not share commits", n, callers*rounds)
	} else {
		t.Logf("%d commits for %d transitions", n, callers*rounds)
	}
	// What GET /metrics reports of the writer: every transition taken, every commit, and the time spent.
	if w := s.WriterTotals(); w.Transitions != callers*rounds || w.Commits != s.commits.Load() || w.Committing <= 0 || w.Busy <= w.Committing {
		t.Errorf("WriterTotals = %+v; want %d transitions, %d commits, and some time busy, more than committing", w, callers*rounds, s.commits.Load())
	}
}

// TestTransitionAfterCloseIsUnavailable: a transition that arrives after Close answers ErrUnavailable.
func TestTransitionAfterCloseIsUnavailable(t *testing.T) {
	s, err := Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err = s.TransitionMany(context.Background(), "acme", []string{"k"}, claimFn("acme", []string{"k"}))
	if !errors.Is(err, items.ErrUnavailable) {
		t.Errorf("after Close: %v; want ErrUnavailable", err)
	}
}

// TestPanickingTransitionFailsItsGroupNotTheStore: a decision that panics answers an error, and the
// store goes on committing.
func TestPanickingTransitionFailsItsGroupNotTheStore(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	_, err := s.TransitionMany(ctx, "acme", []string{"k"}, func(int, *items.Item) (*items.Item, error) { panic("a bug") })
	if err == nil {
		t.Fatal("a panicking transition answered no error")
	}
	if _, err := s.TransitionMany(ctx, "acme", []string{"k"}, claimFn("acme", []string{"k"})); err != nil {
		t.Fatalf("the next transition: %v", err)
	}
	if it, err := s.Get(ctx, "acme", "k"); err != nil || it.Attempt != 1 {
		t.Errorf("k: %+v, %v; want the second transition's claim", it, err)
	}
}

// TestGroupReadsOncePerTenant decides a group of 32 single-key transitions of one tenant and two of
// another: the committer reads the group's items in one readMany per tenant, not one per transition, and
// every transition still decides against its own stored item.
func TestGroupReadsOncePerTenant(t *testing.T) {
	s := openTemp(t)
	var group []*transition
	for i := range 32 {
		key := []string{fmt.Sprintf("k-%d", i)}
		if i%2 == 0 { // claimed before: this group's transition makes its second attempt
			// (decided here, as the group below is, rather than by the committer goroutine)
			pre := newTransition("acme", key, claimFn("acme", key))
			if s.commitGroup([]*transition{pre}); pre.err != nil {
				t.Fatal(pre.err)
			}
		}
		group = append(group, newTransition("acme", key, claimFn("acme", key)))
	}
	for _, k := range []string{"k-0", "k-1"} {
		group = append(group, newTransition("globex", []string{k}, claimFn("globex", []string{k})))
	}
	before := s.groupReads.Load()
	s.commitGroup(group)
	if n := s.groupReads.Load() - before; n != 2 {
		t.Errorf("the group read its items in %d calls; want 2, one per tenant", n)
	}
	for i, tr := range group {
		want := 1
		if i < 32 && i%2 == 0 {
			want = 2
		}
		if tr.err != nil || tr.out[0].Attempt != want {
			t.Errorf("transition %d (%s %s): %+v, %v; want attempt %d", i, tr.tenant, tr.keys[0], tr.out, tr.err, want)
		}
	}
}

// TestGroupAnswersEachCallerItsOwnItem: transitions of one key in one group that change nothing are
// answered the state the earlier ones left; each caller must get an item of its own, as callers may change
// what they are given (the answers of 32 callers racing for one key are such a group).
func TestGroupAnswersEachCallerItsOwnItem(t *testing.T) {
	withAndWithoutCache(t, func(t *testing.T, s *Store) {
		keep := func(int, *items.Item) (*items.Item, error) { return nil, nil }
		// k is new: a claims it and b, c see a's claim; "old" is stored (and cached, with a cache):
		// c and d see it as stored. (The groups are decided here, not by the committer, which is idle.)
		first := newTransition("acme", []string{"old"}, claimFn("acme", []string{"old"}))
		if s.commitGroup([]*transition{first}); first.err != nil {
			t.Fatal(first.err)
		}
		a := newTransition("acme", []string{"k"}, claimFn("acme", []string{"k"}))
		b := newTransition("acme", []string{"k"}, keep)
		c := newTransition("acme", []string{"k", "old"}, keep)
		d := newTransition("acme", []string{"old"}, keep)
		s.commitGroup([]*transition{a, b, c, d})
		given := map[*items.Item]string{}
		for name, tr := range map[string]*transition{"a": a, "b": b, "c": c, "d": d} {
			if tr.err != nil {
				t.Fatalf("%s: %v", name, tr.err)
			}
			for i, it := range tr.out {
				if it == nil {
					t.Fatalf("%s: no item %d", name, i)
				}
				if other, ok := given[it]; ok {
					t.Errorf("%s and %s were answered the same item object (%s)", other, name, it.Key)
				}
				given[it] = name
			}
		}
		if b.out[0].Attempt != 1 || c.out[0].Attempt != 1 || c.out[1].Key != "old" || d.out[0].Key != "old" {
			t.Errorf("answers %+v %+v %+v; want a's claim of k and the stored old", b.out[0], c.out, d.out[0])
		}
	})
}

// TestTransitionManyAnswersARepeatedKeyItsOwnItem: a batch that names one key twice (TransitionMany allows
// it) is answered, at each place, the item as it was right after its own call, in an object of its own:
// a caller that changes its answer at one place must not change it at the other. Both when the second
// call changes nothing after the first claimed the item, and when neither changes a stored item (read
// from the database, or from the cache).
func TestTransitionManyAnswersARepeatedKeyItsOwnItem(t *testing.T) {
	withAndWithoutCache(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		claimOnce := func(i int, cur *items.Item) (*items.Item, error) {
			if i > 0 {
				return nil, nil
			}
			return claimFn("acme", []string{"k"})(0, cur)
		}
		keep := func(int, *items.Item) (*items.Item, error) { return nil, nil }
		for _, c := range []struct {
			name string
			fn   func(int, *items.Item) (*items.Item, error)
		}{{"claimed, then unchanged", claimOnce}, {"stored, unchanged twice", keep}} {
			out, err := s.TransitionMany(ctx, "acme", []string{"k", "k", "k"}, c.fn)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			for i := range out {
				if out[i] == nil || out[i].Key != "k" || out[i].Attempt != 1 {
					t.Fatalf("%s: answer %d is %+v, want k at attempt 1", c.name, i, out[i])
				}
				for j := range i {
					if out[i] == out[j] {
						t.Errorf("%s: places %d and %d were answered one item object", c.name, j, i)
					}
				}
			}
		}
	})
}

// withAndWithoutCache runs test on a new store without the committer's item cache and on one with a small
// cache, each its own subtest.
func withAndWithoutCache(t *testing.T, test func(t *testing.T, s *Store)) {
	for _, cache := range []int{0, 16} {
		t.Run(fmt.Sprintf("cache=%d", cache), func(t *testing.T) {
			s, err := Open(context.Background(), t.TempDir(), WithItemCache(cache))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			test(t, s)
		})
	}
}
