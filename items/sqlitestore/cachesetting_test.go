package sqlitestore

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/replaysafe/companion/items"
)

// TestItemCacheTotalsCountHitsAndMisses claims and reports items with the cache on and off: with it on, a
// report's item (its claim's group put it) is a hit and a new key a miss; with it off, every lookup is a
// miss and the bound is 0.
func TestItemCacheTotalsCountHitsAndMisses(t *testing.T) {
	for _, tc := range []struct {
		name                string
		opts                []Option
		bound               int
		hits, misses, items int
	}{
		// Two claims (new keys: misses), two reports (the claims' items: hits), one claim of a key
		// named twice in one batch (one lookup, a miss).
		{"default", nil, DefaultItemCache, 2, 3, 3},
		{"off", []Option{WithItemCache(0)}, 0, 0, 5, 0},
		// b's claim pushes a out, a's report b: no hits.
		{"bound of 1", []Option{WithItemCache(1)}, 1, 0, 5, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, l, _ := cacheLedger(t, tc.opts...)
			if got := s.ItemCacheTotals(); got != (ItemCacheTotals{Bound: tc.bound}) {
				t.Fatalf("at the start: %+v", got)
			}
			a, b := claim(t, l, "a"), claim(t, l, "b")
			for _, c := range []items.Answer{a, b} {
				if _, err := report(l, c, items.OutcomeSucceeded); err != nil {
					t.Fatal(err)
				}
			}
			ctx := context.Background()
			if _, err := s.TransitionMany(ctx, "acme", []string{"c", "c"}, func(i int, cur *items.Item) (*items.Item, error) {
				if i == 0 {
					return items.NewPrepared(items.BeforeWriteParams{Tenant: "acme", Key: "c", Fingerprint: strings.Repeat("f", 64)}, l.Config().Now())
				}
				return nil, nil
			}); err != nil {
				t.Fatal(err)
			}
			want := ItemCacheTotals{Bound: tc.bound, Items: tc.items, Hits: int64(tc.hits), Misses: int64(tc.misses)}
			if got := s.ItemCacheTotals(); got != want {
				t.Errorf("after 3 claims and 2 reports: %+v, want %+v", got, want)
			}
		})
	}
}

// withoutLock makes Open take no lock on the data dir, as a build without flock (lock_other.go) does,
// until the test ends. It changes a package variable: not for a test that runs in parallel (top-level
// parallel tests start only after the sequential ones, such as this one's callers, have finished).
func withoutLock(t *testing.T) {
	t.Helper()
	takeLock = func(string) (*os.File, error) { return nil, nil }
	t.Cleanup(func() { takeLock = lockDataDir })
}

// TestNoCacheWithoutTheLock opens a store without the data dir's lock: it has no item cache, whatever
// its bound, says so once in the log, and still answers every transition from the database.
func TestNoCacheWithoutTheLock(t *testing.T) {
	withoutLock(t)
	var log bytes.Buffer
	s, l, _ := cacheLedger(t, WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	if s.lock != nil || s.cache != nil {
		t.Fatalf("opened without the lock: lock %v, cache %v; want neither", s.lock, s.cache)
	}
	if n := strings.Count(log.String(), "item cache is off"); n != 1 {
		t.Errorf("the log says %d times that the cache is off, want once:\n%s", n, &log)
	}
	a := claim(t, l, "k")
	if r, err := report(l, a, items.OutcomeSucceeded); err != nil || r.State != items.StateSucceeded {
		t.Fatalf("report: %+v, %v", r, err)
	}
	if got := s.ItemCacheTotals(); got.Bound != 0 || got.Hits != 0 || got.Misses != 2 {
		t.Errorf("totals without the lock: %+v, want no bound, no hits, 2 misses", got)
	}

	// Asked for no cache, it has nothing to say.
	log.Reset()
	s2, _, _ := cacheLedger(t, WithLogger(slog.New(slog.NewTextHandler(&log, nil))), WithItemCache(0))
	if s2.cache != nil || strings.Contains(log.String(), "item cache") {
		t.Errorf("WithItemCache(0) without the lock: cache %v, log:\n%s", s2.cache, &log)
	}
}

// TestCacheBoundNeedsTheLock is the decision itself: a cache only where the lock is held.
func TestCacheBoundNeedsTheLock(t *testing.T) {
	for _, tc := range []struct {
		asked  int
		locked bool
		want   int
	}{
		{DefaultItemCache, true, DefaultItemCache},
		{DefaultItemCache, false, 0},
		{1, false, 0},
		{0, true, 0},
		{-1, true, 0},
	} {
		if got := cacheBound(tc.asked, tc.locked); got != tc.want {
			t.Errorf("cacheBound(%d, locked %v) = %d, want %d", tc.asked, tc.locked, got, tc.want)
		}
	}
	// On this platform Open holds the lock, and so has its cache.
	s, _, _ := cacheLedger(t)
	if s.lock == nil || s.cache == nil {
		t.Errorf("Open here: lock %v, cache %v; want both", s.lock, s.cache)
	}
}
