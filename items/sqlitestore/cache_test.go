package sqlitestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// cacheLedger opens a store (its cache bounded to bound) and a ledger on it whose clock stands at *now.
func cacheLedger(t *testing.T, opts ...Option) (*Store, *items.Ledger, *time.Time) {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, t.TempDir(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	now := new(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	l, err := items.NewLedger(ctx, s, items.Config{Now: func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return *now
	}})
	if err != nil {
		t.Fatal(err)
	}
	return s, l, now
}

func claim(t *testing.T, l *items.Ledger, key string) items.Answer {
	t.Helper()
	a, err := l.BeforeWrite(context.Background(), items.BeforeWriteParams{Tenant: "acme", Key: key,
		Canonical: []byte(`{"invoice":"` + key + `"}`)})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func report(l *items.Ledger, a items.Answer, outcome items.Outcome) (items.Report, error) {
	return l.AfterWrite(context.Background(), items.AfterWriteParams{Tenant: "acme", Key: a.Key, Claim: a.Claim,
		Evidence: items.Evidence{Outcome: outcome}})
}

// current returns the item a transition of key is handed now, changing nothing.
func current(t *testing.T, s *Store, key string) *items.Item {
	t.Helper()
	var cur *items.Item
	if _, err := s.Transition(context.Background(), "acme", key, func(c *items.Item) (*items.Item, error) {
		cur = c
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	return cur
}

func inCache(s *Store, key string) bool {
	in := false
	s.cache.Lookup([]string{itemID("acme", key)}, func(string, *cached) { in = true })
	return in
}

// TestCacheAfterAFailedCommit claims an item (the cache holds it), then fails the commit of its report:
// the next transition is handed the claimed item, as the database holds it, not the succeeded one the
// failed group decided; the report sent again then succeeds.
func TestCacheAfterAFailedCommit(t *testing.T) {
	s, l, _ := cacheLedger(t)
	a := claim(t, l, "k")
	if !inCache(s, "k") {
		t.Fatal("the claimed item is not in the cache: the test would not test it")
	}
	s.fault = func(op string) error {
		if op == "commit" {
			return errors.New("injected commit failure")
		}
		return nil
	}
	if _, err := report(l, a, items.OutcomeSucceeded); !errors.Is(err, items.ErrUnavailable) {
		t.Fatalf("report with a failing commit: %v, want ErrUnavailable", err)
	}
	s.fault = nil
	if cur := current(t, s, "k"); cur.State != items.StateInFlight || cur.Version != 1 || cur.Claim != a.Claim {
		t.Fatalf("after the failed commit a transition is handed %s version %d; want the claim (in_flight, version 1)", cur.State, cur.Version)
	}
	if r, err := report(l, a, items.OutcomeSucceeded); err != nil || r.State != items.StateSucceeded {
		t.Fatalf("the report sent again: %+v, %v", r, err)
	}
}

// TestCacheStaleEntryIsRefusedThenForgotten changes an item behind the committer's back (as nothing in
// the service does: a bug's stand-in), leaving the cache stale: the version guard refuses the next write
// (ErrUnavailable, nothing written), and that failure drops the cache, so the write after it reads the
// database and succeeds, instead of failing for ever.
func TestCacheStaleEntryIsRefusedThenForgotten(t *testing.T) {
	s, l, _ := cacheLedger(t)
	a := claim(t, l, "k")
	if _, err := s.w.Exec(`UPDATE items SET version = version + 1 WHERE key = 'k'`); err != nil { // the cache not told
		t.Fatal(err)
	}
	if _, err := report(l, a, items.OutcomeSucceeded); !errors.Is(err, items.ErrUnavailable) {
		t.Fatalf("a report decided on a stale cached item: %v, want ErrUnavailable", err)
	}
	r, err := report(l, a, items.OutcomeSucceeded)
	if err != nil || r.State != items.StateSucceeded {
		t.Fatalf("the report after: %+v, %v; want succeeded", r, err)
	}
	if it, err := s.Get(context.Background(), "acme", "k"); err != nil || it.Version != 3 || it.State != items.StateSucceeded {
		t.Fatalf("stored: %+v, %v; want succeeded at version 3", it, err)
	}
}

// TestCacheStaleRowIDIsRefused moves rows behind the committer's back (as nothing in the service does: a
// bug's stand-in, such as an id chosen wrongly) so that the row id the cache holds for k is now another
// item's (j's) at the same version: the version guard alone would let k's report write k's state into
// j's row. The UPDATE's guard names the item too, so the report is refused (ErrUnavailable, nothing
// written), the cache emptied, and the report sent again succeeds; j is untouched.
func TestCacheStaleRowIDIsRefused(t *testing.T) {
	s, l, _ := cacheLedger(t)
	ctx := context.Background()
	a := claim(t, l, "k")
	claim(t, l, "j")
	if !inCache(s, "k") {
		t.Fatal("the claimed item is not in the cache: the test would not test it")
	}
	j, err := s.Get(ctx, "acme", "j")
	if err != nil {
		t.Fatal(err)
	}
	var kID, jID int64
	if err := s.r.QueryRow(`SELECT (SELECT id FROM items WHERE key = 'k'), (SELECT id FROM items WHERE key = 'j')`).Scan(&kID, &jID); err != nil {
		t.Fatal(err)
	}
	// Swap the two rows' ids; both items are at version 1.
	for _, swap := range [][2]int64{{kID, -1}, {jID, kID}, {-1, jID}} {
		if _, err := s.w.Exec(`UPDATE items SET id = ? WHERE id = ?`, swap[1], swap[0]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := report(l, a, items.OutcomeSucceeded); !errors.Is(err, items.ErrUnavailable) {
		t.Errorf("a report decided on a cached row id that is now another item's: %v, want ErrUnavailable", err)
	}
	if got, err := s.Get(ctx, "acme", "j"); err != nil || got.Version != j.Version || got.State != j.State || got.Claim != j.Claim {
		t.Fatalf("j after k's report: %+v, %v; want it untouched (%s version %d)", got, err, j.State, j.Version)
	}
	if r, err := report(l, a, items.OutcomeSucceeded); err != nil || r.State != items.StateSucceeded {
		t.Fatalf("the report sent again: %+v, %v; want succeeded", r, err)
	}
	if it, err := s.Get(ctx, "acme", "k"); err != nil || it.State != items.StateSucceeded {
		t.Fatalf("k stored: %+v, %v; want succeeded", it, err)
	}
}

// TestRetentionForgetsTheCachedItemsItRemoves: an item settled a moment ago is in the cache; retention
// removes it (its clock past the retention), and a before-write of the same key is then a new item
// (docs/configuration.md: a replay after retention is a new item), not the removed item's skip.
func TestRetentionForgetsTheCachedItemsItRemoves(t *testing.T) {
	s, l, now := cacheLedger(t)
	a := claim(t, l, "k")
	if _, err := report(l, a, items.OutcomeSucceeded); err != nil {
		t.Fatal(err)
	}
	claim(t, l, "other") // in flight: retention keeps it, and the cache too
	if !inCache(s, "k") {
		t.Fatal("the settled item is not in the cache: the test would not test it")
	}
	r, err := items.NewRetention(items.RetentionConfig{Store: s,
		Config: items.Config{Now: func() time.Time { return now.Add(items.DefaultRetention + time.Hour) }},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := r.RunOnce(context.Background()); err != nil || c.Removed != 1 {
		t.Fatalf("retention: %+v, %v; want 1 removed", c, err)
	}
	if inCache(s, "k") {
		t.Error("the removed item is still in the cache")
	}
	if !inCache(s, "other") {
		t.Error("retention dropped an item it did not remove from the cache")
	}
	again := claim(t, l, "k")
	if again.Decision != items.Proceed || again.Reason != items.ReasonNew || again.Attempt != 1 {
		t.Fatalf("a replay after retention: %s/%s attempt %d; want proceed/new attempt 1", again.Decision, again.Reason, again.Attempt)
	}
}

// TestCacheBound claims 1,000 items in batches and reports some of them again and again, through a cache
// of 100: it holds 100 items, the latest put, and its record of the order stays bounded; an item it let
// go is read from the database and answered as before.
func TestCacheBound(t *testing.T) {
	s, l, _ := cacheLedger(t, WithItemCache(100))
	ctx := context.Background()
	var answers []items.Answer
	for b := range 10 {
		var ps []items.BeforeWriteParams
		for i := range 100 {
			key := fmt.Sprintf("k-%04d", b*100+i)
			ps = append(ps, items.BeforeWriteParams{Tenant: "acme", Key: key, Canonical: []byte(`{"k":"` + key + `"}`)})
		}
		as, err := l.BeforeWriteMany(ctx, "acme", ps)
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, as...)
		if n := s.cache.Len(); n != 100 {
			t.Fatalf("after %d batches the cache holds %d items; want 100", b+1, n)
		}
	}
	if inCache(s, "k-0899") || !inCache(s, "k-0900") || !inCache(s, "k-0999") {
		t.Fatal("the cache does not hold the latest 100 items")
	}
	// Put the same few items again and again: the cache's record of its order must not grow with them.
	for range 2000 {
		if _, err := s.Transition(ctx, "acme", "k-0999", func(cur *items.Item) (*items.Item, error) {
			cur.UpdatedAt = cur.UpdatedAt.Add(time.Millisecond)
			return cur, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	places, held := s.cache.Places(), s.cache.Len()
	if held != 100 || places > 5*100+1024 {
		t.Fatalf("the cache holds %d items and %d places of its order; want 100 items, at most %d places", held, places, 5*100+1024)
	}
	// An evicted item is read from the database.
	if r, err := report(l, answers[0], items.OutcomeSucceeded); err != nil || r.State != items.StateSucceeded {
		t.Fatalf("report of an evicted item: %+v, %v", r, err)
	}
}

// TestCacheHandsOutCopies changes every answer a transition returns (its new state, and the current item
// where it changed nothing): what the next transition is handed is what was committed.
func TestCacheHandsOutCopies(t *testing.T) {
	s, l, _ := cacheLedger(t)
	ctx := context.Background()
	claim(t, l, "k")
	want, err := current(t, s, "k").AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	spoil := func(it *items.Item) {
		it.Owner, it.State, it.Claim = "mallory", items.StateFailed, "spoiled"
		it.Attempts[0].Claim = "spoiled"
		it.History[0].Kind = "spoiled"
	}
	// An answer where the transition changed nothing is the cached item's copy.
	unchanged, err := s.Transition(ctx, "acme", "k", func(*items.Item) (*items.Item, error) { return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	spoil(unchanged)
	if got, _ := current(t, s, "k").AppendJSON(nil); !bytes.Equal(got, want) {
		t.Fatalf("changing an unchanged answer changed the cache:\ngot  %s\nwant %s", got, want)
	}
	// A new state answered is the cache's no more than the stored item is.
	touched, err := s.Transition(ctx, "acme", "k", func(cur *items.Item) (*items.Item, error) {
		cur.UpdatedAt = cur.UpdatedAt.Add(time.Second)
		return cur, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want, _ = touched.AppendJSON(nil)
	spoil(touched)
	if got, _ := current(t, s, "k").AppendJSON(nil); !bytes.Equal(got, want) {
		t.Fatalf("changing a new state answered changed the cache:\ngot  %s\nwant %s", got, want)
	}
}

// checkedStore hands every transition's fn, with the current item, a check that it is the item the
// database holds (read on a reader connection, which sees the last commit), in the API's JSON.
type checkedStore struct {
	*Store
	t      *testing.T
	hits   int
	misses int
}

func (c *checkedStore) TransitionMany(ctx context.Context, tenant string, keys []string, fn func(int, *items.Item) (*items.Item, error)) ([]*items.Item, error) {
	return c.Store.TransitionMany(ctx, tenant, keys, func(i int, cur *items.Item) (*items.Item, error) {
		if inCache(c.Store, keys[i]) {
			c.hits++
		} else {
			c.misses++
		}
		stored, err := c.Store.Get(ctx, tenant, keys[i])
		if errors.Is(err, items.ErrNotFound) {
			stored, err = nil, nil
		}
		if err != nil {
			c.t.Errorf("%s: %v", keys[i], err)
		}
		if (cur == nil) != (stored == nil) {
			c.t.Errorf("%s: handed %v, stored %v", keys[i], cur, stored)
		} else if cur != nil {
			got, _ := cur.AppendJSON(nil)
			want, _ := stored.AppendJSON(nil)
			if !bytes.Equal(got, want) {
				c.t.Errorf("%s: handed\n%s\nstored\n%s", keys[i], got, want)
			}
			if cur.Version != stored.Version {
				c.t.Errorf("%s: handed version %d, stored %d", keys[i], cur.Version, stored.Version)
			}
		}
		return fn(i, cur)
	})
}

func (c *checkedStore) Transition(ctx context.Context, tenant, key string, fn items.TransitionFunc) (*items.Item, error) {
	out, err := c.TransitionMany(ctx, tenant, []string{key}, func(_ int, cur *items.Item) (*items.Item, error) { return fn(cur) })
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// TestCachedItemIsTheStoredItem runs claims, reports of every outcome, retries, reconciles and resolves
// through the ledger, one call at a time, and checks that every transition is handed the item the
// database holds, whether it came from the cache or from the database.
func TestCachedItemIsTheStoredItem(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	c := &checkedStore{Store: s, t: t}
	now := time.Date(2026, 12, 1, 8, 0, 0, 123456789, time.FixedZone("CET", 3600))
	l, err := items.NewLedger(ctx, c, items.Config{Now: func() time.Time { return now },
		Destinations: map[string]items.Destination{"billing": {Dedupe: items.DedupeKey}}})
	if err != nil {
		t.Fatal(err)
	}
	outcomes := []items.Evidence{{Outcome: items.OutcomeSucceeded}, {Outcome: items.OutcomeFailed, HTTPStatus: 503},
		{Outcome: items.OutcomeFailed, HTTPStatus: 422}, {Outcome: items.OutcomeUnknown, Class: items.ClassTimeout}}
	for round := range 3 {
		var ps []items.BeforeWriteParams
		for i := range 40 {
			index := i
			key := fmt.Sprintf("inv:i%03d:send:1", i)
			ps = append(ps, items.BeforeWriteParams{Tenant: "acme", Key: key, Canonical: []byte(`{"i":` + fmt.Sprint(i) + `}`),
				Destination: "billing", Reference: "INV-" + key, BatchID: fmt.Sprintf("b%d", round), BatchIndex: &index,
				ExecutionID: fmt.Sprintf("e%d", round), Owner: "U1"})
		}
		now = now.Add(time.Minute)
		answers, err := l.BeforeWriteMany(ctx, "acme", ps)
		if err != nil {
			t.Fatal(err)
		}
		var reports []items.AfterWriteParams
		for i, a := range answers {
			if a.Decision != items.Proceed {
				continue
			}
			reports = append(reports, items.AfterWriteParams{Tenant: "acme", Key: a.Key, Claim: a.Claim,
				Evidence: outcomes[(i+round)%len(outcomes)], ExternalID: "ext-" + a.Key, ErrorMessage: "boom"})
		}
		now = now.Add(time.Second)
		if _, _, err := l.AfterWriteMany(ctx, "acme", reports); err != nil {
			t.Fatal(err)
		}
		for i := range 40 {
			if i%4 != 3 {
				continue
			}
			now = now.Add(time.Second)
			_, _, _ = l.Resolve(ctx, items.ResolveParams{Tenant: "acme", Key: ps[i].Key, Outcome: items.ResolveSucceeded,
				Evidence: "seen in the dashboard", ExternalID: "ext", By: "maria"})
		}
	}
	if c.hits == 0 || c.misses == 0 {
		t.Fatalf("%d transitions from the cache, %d from the database: want both", c.hits, c.misses)
	}
	t.Logf("%d transitions handed a cached item, %d one read", c.hits, c.misses)
	cacheMatchesDatabase(t, s)
}

// TestCacheAfterAPanickingGroup: a panic outside any one decision (here in the fault hook at the commit,
// standing for the driver) fails the group, and the next transition is handed the item as committed.
func TestCacheAfterAPanickingGroup(t *testing.T) {
	s, l, _ := cacheLedger(t)
	a := claim(t, l, "k")
	s.fault = func(op string) error {
		if op == "commit" {
			panic("the driver panicked")
		}
		return nil
	}
	if _, err := report(l, a, items.OutcomeSucceeded); err == nil {
		t.Fatal("a report whose group panicked succeeded")
	}
	s.fault = nil
	if cur := current(t, s, "k"); cur.State != items.StateInFlight || cur.Version != 1 {
		t.Fatalf("after the panic a transition is handed %s version %d; want in_flight version 1", cur.State, cur.Version)
	}
	if r, err := report(l, a, items.OutcomeSucceeded); err != nil || r.State != items.StateSucceeded {
		t.Fatalf("the report sent again: %+v, %v", r, err)
	}
}
