package sqlitestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// The tests of this file try the committer's cache where it could go wrong: the ids it chooses for new
// items, groups that name a key twice or span tenants, and Close with transitions in flight. Each ends
// with cacheMatchesDatabase: every entry the cache holds is the item and the row the database holds.

// cacheMatchesDatabase checks every entry of s's cache against the database, read on the writer's
// connection (the committer must be idle): the item (its API JSON and version), the row's id, and each
// column the next UPDATE compares against (a cached value that differs from the stored one would leave
// that column unwritten when the next state has the cached value).
func cacheMatchesDatabase(t *testing.T, s *Store) {
	t.Helper()
	type entry struct {
		tenant, key string
		e           cached
	}
	var entries []entry
	s.cache.Each(func(id string, e cached) {
		tenant, key, _ := bytes.Cut([]byte(id), []byte{0})
		entries = append(entries, entry{string(tenant), string(key), e})
	})
	if len(entries) == 0 {
		t.Fatal("the cache is empty: nothing to check")
	}
	ctx := context.Background()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck
	for _, en := range entries {
		its, rows, bad, err := s.readMany(ctx, tx, en.tenant, []string{en.key})
		if err != nil || bad != nil {
			t.Fatalf("%s/%s: %v %v", en.tenant, en.key, err, bad)
		}
		it, row := its[en.key], rows[en.key]
		if it == nil {
			t.Errorf("%s/%s is cached (version %d) but not stored", en.tenant, en.key, en.e.Item.Version)
			continue
		}
		got, _ := en.e.Item.AppendJSON(nil)
		want, _ := it.AppendJSON(nil)
		if !bytes.Equal(got, want) || en.e.Item.Version != it.Version {
			t.Errorf("%s/%s: cached\n%s\nstored\n%s", en.tenant, en.key, got, want)
		}
		if en.e.Row.id != row.id {
			t.Errorf("%s/%s: cached row id %d, stored id %d", en.tenant, en.key, en.e.Row.id, row.id)
		}
		for c, v := range row.cols {
			if !sameValue(en.e.Row.cols[c], v) {
				t.Errorf("%s/%s: column %s cached %v, stored %v", en.tenant, en.key, setColumns[c], en.e.Row.cols[c], v)
			}
		}
	}
}

// TestCacheNewIDsAfterRetentionFailureAndRestart: the committer chooses new items' ids (one more than the
// largest). Retention removing the item of the largest id, a group that failed after inserting (its ids
// read again), and a restart must each leave the next new items with free ids, and the cache with the
// rows the database holds, so that their reports (found by the cached id) succeed.
func TestCacheNewIDsAfterRetentionFailureAndRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	newLedger := func() *items.Ledger {
		l, err := items.NewLedger(ctx, s, items.Config{Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	l := newLedger()
	settle := func(keys ...string) {
		t.Helper()
		for _, k := range keys {
			if r, err := report(l, claim(t, l, k), items.OutcomeSucceeded); err != nil || r.State != items.StateSucceeded {
				t.Fatalf("%s: %+v, %v", k, r, err)
			}
		}
	}
	settle("a", "b", "c") // c has the largest id
	var largest int64
	if err := s.r.QueryRow(`SELECT max(id) FROM items`).Scan(&largest); err != nil {
		t.Fatal(err)
	}
	open := claim(t, l, "open") // in flight: retention keeps it (id largest+1)
	// Retention removes a, b and c, c's the largest id but one.
	mu.Lock()
	now = now.Add(items.DefaultRetention + time.Hour)
	mu.Unlock()
	r, err := items.NewRetention(items.RetentionConfig{Store: s, Config: items.Config{Now: clock},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := r.RunOnce(ctx); err != nil || c.Removed != 3 {
		t.Fatalf("retention: %+v, %v; want 3 removed", c, err)
	}
	if _, err := report(l, open, items.OutcomeSucceeded); err != nil { // found by its cached row
		t.Fatal(err)
	}
	// Remove "open" too, the largest id: the next new item's id is one the committer counted past.
	mu.Lock()
	now = now.Add(items.DefaultRetention + time.Hour)
	mu.Unlock()
	if c, err := r.RunOnce(ctx); err != nil || c.Removed != 1 {
		t.Fatalf("retention: %+v, %v; want 1 removed", c, err)
	}
	settle("d", "e")
	// A group that inserted and then failed: its ids are read again by the next.
	s.fault = func(op string) error {
		if op == "commit" {
			return errors.New("injected commit failure")
		}
		return nil
	}
	if _, err := l.BeforeWrite(ctx, items.BeforeWriteParams{Tenant: "acme", Key: "lost", Canonical: []byte(`{}`)}); !errors.Is(err, items.ErrUnavailable) {
		t.Fatalf("claim with a failing commit: %v, want ErrUnavailable", err)
	}
	s.fault = nil
	settle("f", "lost")
	cacheMatchesDatabase(t, s)
	// A restart: the committer reads the largest id again, and the cache starts empty.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(ctx, dir); err != nil {
		t.Fatal(err)
	}
	l = newLedger()
	settle("g", "a") // "a" was removed: a new item again
	cacheMatchesDatabase(t, s)
	var n, distinct int
	if err := s.r.QueryRow(`SELECT count(*), count(DISTINCT id) FROM items`).Scan(&n, &distinct); err != nil || n != 6 || distinct != 6 {
		t.Fatalf("items %d, distinct ids %d, %v; want 6 (d, e, f, lost, g, a)", n, distinct, err)
	}
}

// TestCacheGroupOfOneKeyTwiceAndTwoTenants decides, with the keys cached, one group in which two
// transitions change one key, a third changes nothing of it, and a fourth changes the same key of
// another tenant: each answer is the state its transition left (the unchanged one a copy of its own), the
// database holds the last state, and the cache what the database holds.
func TestCacheGroupOfOneKeyTwiceAndTwoTenants(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	for _, tenant := range []string{"acme", "globex"} {
		pre := newTransition(tenant, []string{"k", "j"}, claimFn(tenant, []string{"k", "j"}))
		if s.commitGroup([]*transition{pre}); pre.err != nil {
			t.Fatal(pre.err)
		}
	}
	for _, id := range []string{itemID("acme", "k"), itemID("globex", "k")} {
		hit := false
		s.cache.Lookup([]string{id}, func(string, *cached) { hit = true })
		if !hit {
			t.Fatalf("%q is not cached: the test would not test it", id)
		}
	}
	unchanged := func(int, *items.Item) (*items.Item, error) { return nil, nil }
	first := newTransition("acme", []string{"k"}, claimFn("acme", []string{"k"}))
	same := newTransition("acme", []string{"j", "k", "k"}, func(i int, cur *items.Item) (*items.Item, error) {
		if i == 0 {
			return nil, nil
		}
		return claimFn("acme", []string{"j", "k", "k"})(i, cur)
	})
	look := newTransition("acme", []string{"k", "j"}, unchanged)
	other := newTransition("globex", []string{"k"}, claimFn("globex", []string{"k"}))
	s.commitGroup([]*transition{first, same, look, other})
	for _, tr := range []*transition{first, same, look, other} {
		if tr.err != nil {
			t.Fatal(tr.err)
		}
	}
	if first.out[0].Attempt != 2 || same.out[1].Attempt != 3 || same.out[2].Attempt != 4 || look.out[0].Attempt != 4 || other.out[0].Attempt != 2 {
		t.Errorf("attempts: first %d, same %d %d, look %d, other tenant %d; want 2, 3 4, 4, 2",
			first.out[0].Attempt, same.out[1].Attempt, same.out[2].Attempt, look.out[0].Attempt, other.out[0].Attempt)
	}
	// The answers of the unchanged j are not the cache's (nor each other's).
	var cachedJ *items.Item
	s.cache.Lookup([]string{itemID("acme", "j")}, func(_ string, e *cached) { cachedJ = e.Item })
	if cachedJ == nil || same.out[0] == cachedJ || look.out[1] == cachedJ || same.out[0] == look.out[1] {
		t.Error("an unchanged answer is the cache's item, or shared by two answers")
	}
	look.out[1].State = items.StateFailed
	for _, tenant := range []string{"acme", "globex"} {
		for _, k := range []string{"k", "j"} {
			stored, err := s.Get(ctx, tenant, k)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]int{"acme/k": 4, "acme/j": 1, "globex/k": 2, "globex/j": 1}[tenant+"/"+k]
			if stored.Attempt != want || stored.State != items.StateInFlight {
				t.Errorf("%s/%s stored attempt %d %s; want %d in_flight", tenant, k, stored.Attempt, stored.State, want)
			}
		}
	}
	cacheMatchesDatabase(t, s)
}

// TestCacheCloseWithTransitionsInFlight closes the store while callers claim and report: every caller is
// answered (its item, or ErrUnavailable), and every answer that claims an item is what the reopened
// ledger holds.
func TestCacheCloseWithTransitionsInFlight(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 8)
	for i := range keys {
		keys[i] = string(rune('a' + i))
	}
	type answer struct {
		key string
		it  *items.Item
	}
	answers := make(chan answer, 1000)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 8 {
		wg.Go(func() {
			<-start
			for n := 0; ; n++ {
				k := keys[(i+n)%len(keys)]
				it, err := s.Transition(ctx, "acme", k, func(cur *items.Item) (*items.Item, error) {
					return claimFn("acme", []string{k})(0, cur)
				})
				if err != nil {
					if !errors.Is(err, items.ErrUnavailable) {
						t.Errorf("%s: %v; want ErrUnavailable after Close", k, err)
					}
					return
				}
				answers <- answer{k, it}
				if n > 50 {
					return
				}
			}
		})
	}
	close(start)
	time.Sleep(5 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(answers)
	last := map[string]int{}
	for a := range answers {
		last[a.key] = max(last[a.key], a.it.Attempt)
	}
	if s, err = Open(ctx, dir); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range keys {
		it, err := s.Get(ctx, "acme", k)
		if errors.Is(err, items.ErrNotFound) && last[k] == 0 {
			continue
		}
		if err != nil || it.Attempt != last[k] {
			t.Errorf("%s: stored %+v, %v; the last answer was attempt %d", k, it, err, last[k])
		}
	}
}

// TestTransitionRefusesAnotherItemsKey: a transition of a key whose fn returns an item of another key or
// tenant (a bug of the caller's) is refused, its own error, nothing written: the store would have stored
// it under the key fn named while the committer's cache kept it under the key the transition named, and
// handed it to the next transition of that key, which the database does not hold.
func TestTransitionRefusesAnotherItemsKey(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	claimK := claimFn("acme", []string{"k"})
	if _, err := s.Transition(ctx, "acme", "k", func(cur *items.Item) (*items.Item, error) { return claimK(0, cur) }); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, tenant, key string }{{"new, another key", "acme", "x"}, {"new, another tenant", "globex", "y"},
		{"existing, another key", "acme", "k"}} {
		_, err := s.Transition(ctx, c.tenant, c.key, func(cur *items.Item) (*items.Item, error) {
			next, _ := claimK(0, cur)
			if cur == nil {
				next.Tenant = "acme"
				next.Key = "k2"
			} else {
				next.Key = "k2"
			}
			return next, nil
		})
		if err == nil || errors.Is(err, items.ErrUnavailable) {
			t.Errorf("%s: %v; want the transition's own error", c.name, err)
		}
		cur := new(items.Item)
		if _, err := s.Transition(ctx, c.tenant, c.key, func(got *items.Item) (*items.Item, error) { cur = got; return nil, nil }); err != nil {
			t.Fatal(err)
		}
		stored, err := s.Get(ctx, c.tenant, c.key)
		if errors.Is(err, items.ErrNotFound) {
			stored, err = nil, nil
		}
		if err != nil {
			t.Fatal(err)
		}
		if (cur == nil) != (stored == nil) || cur != nil && (cur.Key != stored.Key || cur.Version != stored.Version) {
			t.Errorf("%s: the next transition is handed %+v; the database holds %+v", c.name, cur, stored)
		}
	}
	if _, err := s.Get(ctx, "acme", "k2"); !errors.Is(err, items.ErrNotFound) {
		t.Errorf("k2 was stored: %v", err)
	}
}

// TestCacheUnderRetentionAndConcurrentCallers runs callers that claim and report a few keys while
// retention removes every settled item as soon as it settles (so new items take the ids of removed ones,
// and retention's drops fall between the committer's commits and its puts): no key is ever claimed twice
// at once, every report of a claim succeeds, and at the end the cache holds what the database holds and
// the kept counts are the items counted again.
func TestCacheUnderRetentionAndConcurrentCallers(t *testing.T) {
	ctx := context.Background()
	s, l, now := cacheLedger(t, WithItemCache(16)) // small: evictions too
	r, err := items.NewRetention(items.RetentionConfig{Store: s,
		Config: items.Config{Now: func() time.Time { return now.Add(items.DefaultRetention + time.Hour) }},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	const keys = 24
	var held [keys]sync.Mutex // TryLock: a claim answered proceed while another holds the key is a double claim
	var claims, removed int64
	var mu sync.Mutex
	stop := make(chan struct{})
	var retention sync.WaitGroup
	retention.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			c, err := r.RunOnce(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			removed += int64(c.Removed)
			mu.Unlock()
		}
	})
	var callers sync.WaitGroup
	for g := range 4 {
		callers.Go(func() {
			for n := range 150 {
				i := (g*7 + n*5) % keys
				key := string(rune('a'+i%26)) + "-key"
				a, err := l.BeforeWrite(ctx, items.BeforeWriteParams{Tenant: "acme", Key: key, Canonical: []byte(`{"k":1}`)})
				if err != nil {
					t.Error(err)
					return
				}
				if a.Decision != items.Proceed {
					continue
				}
				if !held[i].TryLock() {
					t.Errorf("%s claimed twice at once", key)
					return
				}
				rep, err := report(l, a, items.OutcomeSucceeded)
				held[i].Unlock()
				if err != nil || rep.State != items.StateSucceeded {
					t.Errorf("%s: report of its claim: %+v, %v", key, rep, err)
					return
				}
				mu.Lock()
				claims++
				mu.Unlock()
			}
		})
	}
	callers.Wait()
	close(stop)
	retention.Wait()
	if claims == 0 || removed == 0 {
		t.Fatalf("%d claims, %d removed: want both", claims, removed)
	}
	t.Logf("%d claims reported, %d items removed by retention", claims, removed)
	if s.cache.Len() > 0 {
		cacheMatchesDatabase(t, s)
	}
	kept := func(q string) string {
		var out []string
		rows, err := s.r.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var tenant, dest, state string
			var np int
			var n [7]int64
			if err := rows.Scan(&tenant, &dest, &state, &np, &n[0], &n[1], &n[2], &n[3], &n[4], &n[5], &n[6]); err != nil {
				t.Fatal(err)
			}
			out = append(out, tenant+"/"+dest+"/"+state+"/"+string(rune('0'+np))+":"+fmt.Sprint(n))
		}
		return strings.Join(out, "\n")
	}
	recount := kept(recountSQL + ` ORDER BY 1, 2, 3, 4`)
	counts := kept(`SELECT tenant, destination, state, needs_person, items, retries, attempted, recoveries, resolutions,
		duplicates, entered_unknown FROM item_counts WHERE items != 0 AND state != 'removed' ORDER BY 1, 2, 3, 4`)
	if recount != counts {
		t.Errorf("kept counts\n%s\nthe items counted again\n%s", counts, recount)
	}
}

// TestCacheItemFaultOfACachedItem: with k cached, a group in which one transition makes a state of k that
// cannot be encoded is decided again without it; the others' answers build on what the good transitions
// left (not on the blamed one's state), and the cache ends as the database.
func TestCacheItemFaultOfACachedItem(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	setup := newTransition("acme", []string{"k"}, claimFn("acme", []string{"k"}))
	if s.commitGroup([]*transition{setup}); setup.err != nil {
		t.Fatal(setup.err)
	}
	if !inCache(s, "k") {
		t.Fatal("k is not cached: the test would not test it")
	}
	a := newTransition("acme", []string{"k"}, claimFn("acme", []string{"k"}))
	unencodable := newTransition("acme", []string{"k"}, func(i int, cur *items.Item) (*items.Item, error) {
		cur.Attempt += 10
		cur.UpdatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
		return cur, nil
	})
	look := newTransition("acme", []string{"k"}, func(int, *items.Item) (*items.Item, error) { return nil, nil })
	c := newTransition("acme", []string{"k", "c"}, claimFn("acme", []string{"k", "c"}))
	s.commitGroupRecovering([]*transition{a, unencodable, look, c})
	if a.err != nil || look.err != nil || c.err != nil || unencodable.err == nil {
		t.Fatalf("a %v, look %v, c %v, unencodable %v", a.err, look.err, c.err, unencodable.err)
	}
	if a.out[0].Attempt != 2 || look.out[0].Attempt != 2 || c.out[0].Attempt != 3 {
		t.Errorf("attempts: a %d, look %d, c %d; want 2, 2, 3", a.out[0].Attempt, look.out[0].Attempt, c.out[0].Attempt)
	}
	if it, err := s.Get(ctx, "acme", "k"); err != nil || it.Attempt != 3 {
		t.Errorf("k stored: %+v, %v; want attempt 3", it, err)
	}
	cacheMatchesDatabase(t, s)
}
