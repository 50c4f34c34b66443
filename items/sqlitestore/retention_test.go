package sqlitestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/sqlitestore"
)

// pages returns the database's page count and free pages, read on a connection of its own.
func pages(t testing.TB, s *sqlitestore.Store) (count, free int) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+s.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.QueryRow(`PRAGMA page_count`).Scan(&count); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`PRAGMA freelist_count`).Scan(&free); err != nil {
		t.Fatal(err)
	}
	return count, free
}

func retention(t testing.TB, s *sqlitestore.Store, now time.Time) *items.Retention {
	t.Helper()
	r, err := items.NewRetention(items.RetentionConfig{Store: s, Config: items.Config{Now: func() time.Time { return now }},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRetentionGivesTheSpaceBack removes 3,000 settled items and checks that the file shrank by their
// pages (a new ledger vacuums incrementally), and that the items that are not settled stayed.
func TestRetentionGivesTheSpaceBack(t *testing.T) {
	s, now := statsLedger(t, 3000) // the first 100 unknown, the rest succeeded
	var mode int
	if err := sqlDB(t, s).QueryRow(`PRAGMA auto_vacuum`).Scan(&mode); err != nil || mode != 2 {
		t.Fatalf("auto_vacuum = %d (%v), want 2 (incremental)", mode, err)
	}
	before, _ := pages(t, s)
	c, err := retention(t, s, now.Add(items.DefaultRetention+time.Second)).RunOnce(context.Background())
	if err != nil || c.Removed != 2900 {
		t.Fatalf("RunOnce = %+v, %v; want 2900 removed", c, err)
	}
	if c.Took < c.LongestCall || c.LongestCall <= 0 {
		t.Errorf("took %s, longest call %s: the run's time must cover its longest call", c.Took, c.LongestCall)
	}
	after, free := pages(t, s)
	t.Logf("pages %d -> %d (%d free); took %s, longest call %s", before, after, free, c.Took, c.LongestCall)
	if after > before/3 || free > 64 {
		t.Errorf("pages %d -> %d, %d free: the space was not given back", before, after, free)
	}
	st, err := s.Stats(context.Background(), "acme", now)
	if err != nil || st.Items != 100 || st.States[items.StateUnknown] != 100 || st.Removed != 2900 {
		t.Errorf("stats after retention: %+v (%v)", st.Measures, err)
	}
}

func sqlDB(t testing.TB, s *sqlitestore.Store) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+s.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// BenchmarkRetention removes every settled item of a ledger of COMPANION_BENCH_ITEMS items (default
// 100k) while 4 callers claim and report new items, and reports the longest RemoveSettled call (how long
// the writer was held: longest-pause-ms), the slowest claim meanwhile (max-claim-ms), and the pages before
// and after.
//
//	go test ./items/sqlitestore -run '^$' -bench Retention -benchtime 1x
func BenchmarkRetention(b *testing.B) {
	n := 100000
	if env := os.Getenv("COMPANION_BENCH_ITEMS"); env != "" {
		var err error
		if n, err = strconv.Atoi(env); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		b.StopTimer()
		s, now := statsLedger(b, n)
		l, err := items.NewLedger(context.Background(), s, items.Config{Now: func() time.Time { return now }})
		if err != nil {
			b.Fatal(err)
		}
		before, _ := pages(b, s)
		// claims runs 4 callers claiming new items until stop is called, which returns the slowest claim.
		claims := func(phase string) (stop func() time.Duration) {
			ctx, cancel := context.WithCancel(context.Background())
			slowest := make(chan time.Duration, 4)
			for w := range 4 {
				go func() {
					var worst time.Duration
					fp, _ := items.Fingerprint([]byte(`{"n":1}`))
					for i := 0; ctx.Err() == nil; i++ {
						start := time.Now()
						if _, err := l.BeforeWrite(ctx, items.BeforeWriteParams{Tenant: "acme", Key: fmt.Sprintf("%s-%d-%d", phase, w, i), Fingerprint: fp}); err != nil && ctx.Err() == nil {
							b.Error(err)
						}
						worst = max(worst, time.Since(start))
					}
					slowest <- worst
				}()
			}
			return func() time.Duration {
				cancel()
				var worst time.Duration
				for range 4 {
					worst = max(worst, <-slowest)
				}
				return worst
			}
		}
		// The same callers without retention, for as long: the disk's own worst case.
		stop := claims("alone")
		time.Sleep(3 * time.Second)
		alone := stop()
		b.StartTimer()
		stop = claims("live")
		start := time.Now()
		c, err := retention(b, s, now.Add(items.DefaultRetention+time.Second)).RunOnce(context.Background())
		took := time.Since(start)
		worst := stop()
		b.ReportMetric(float64(alone)/1e6, "max-claim-alone-ms")
		if err != nil || c.Removed != n-100 {
			b.Fatalf("RunOnce = %+v, %v", c, err)
		}
		after, _ := pages(b, s)
		b.ReportMetric(float64(c.LongestCall)/1e6, "longest-pause-ms")
		b.ReportMetric(float64(worst)/1e6, "max-claim-ms")
		b.ReportMetric(float64(c.Removed)/took.Seconds(), "removed/s")
		b.ReportMetric(float64(before), "pages-before")
		b.ReportMetric(float64(after), "pages-after")
	}
}

// TestEarlierBuildAcknowledgedItemsAreSettled: a ledger written by a build that kept acknowledged items
// as sweep candidates (sweep_candidate = 1, set here by hand, and no marker of the correction) is
// corrected at Open, so that retention removes them (refreshSweepCandidates).
func TestEarlierBuildAcknowledgedItemsAreSettled(t *testing.T) {
	dir := t.TempDir()
	open := func(t *testing.T) itemstest.OperatorStore {
		s := openIn(t, dir)
		t.Cleanup(func() { s.Close() })
		return s
	}
	itemstest.CheckEarlierBuildAcknowledged(t, itemstest.EarlierBuild{
		Open: open,
		StoreAsEarlierBuild: func(t *testing.T, s itemstest.OperatorStore, tenant string) {
			store := s.(*sqlitestore.Store)
			res, err := store.WriteOutside(`UPDATE items SET sweep_candidate = 1
				WHERE tenant = ? AND needs_person = 0 AND (duplicate_effect = 1 OR (state = 'failed' AND resolutions > 0))`, tenant)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != 2 {
				t.Fatalf("storing as an earlier build: %d rows, want 2", n)
			}
			if _, err := store.WriteOutside(`DELETE FROM meta WHERE name = 'sweep_candidates_refreshed'`); err != nil {
				t.Fatal(err)
			}
		},
		Reopen: func(t *testing.T, s itemstest.OperatorStore) itemstest.OperatorStore {
			s.(*sqlitestore.Store).Close()
			return open(t)
		},
	})
}

// BenchmarkOpenRefreshesSweepCandidates measures what refreshSweepCandidates adds to Open: a ledger of
// 50,000 items of which 5,000 are sweep candidates (retryable failures), against the whole Open of the
// same ledger. FirstStart is the pass of the first start of this build (the marker removed before each
// run): few candidates were ever resolved, so only the partial index and the rows' columns are read;
// FirstStartAllResolved: every candidate was (resolutions > 0, set by hand), so every one is decoded.
// LaterStart is every later start: the marker's read.
//
//	go test ./items/sqlitestore -run '^$' -bench OpenRefreshesSweepCandidates -benchtime 20x
func BenchmarkOpenRefreshesSweepCandidates(b *testing.B) {
	const n, every = 50000, 10
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	dir := filepath.Dir(s.Path())
	l, err := items.NewLedger(ctx, s, items.Config{})
	if err != nil {
		b.Fatal(err)
	}
	fp, _ := items.Fingerprint([]byte(`{"invoice":"742"}`))
	itemstest.FillBatches(b, l, n, func(i int) items.BeforeWriteParams {
		return items.BeforeWriteParams{Tenant: "acme", Key: fmt.Sprintf("wf:inv-%07d:send:0", i), Fingerprint: fp}
	}, func(i int) items.Evidence {
		if i%every == 0 {
			return items.Evidence{Outcome: items.OutcomeFailed, HTTPStatus: 429, Class: items.ClassHTTP}
		}
		return items.Evidence{Outcome: items.OutcomeSucceeded}
	})
	var candidates int
	if err := sqlDB(b, s).QueryRow(`SELECT count(*) FROM items WHERE sweep_candidate = 1`).Scan(&candidates); err != nil || candidates != n/every {
		b.Fatalf("%d sweep candidates (%v), want %d", candidates, err, n/every)
	}
	refresh := func(first bool) func(b *testing.B) {
		return func(b *testing.B) {
			for b.Loop() {
				if first {
					b.StopTimer()
					if _, err := s.WriteOutside(`DELETE FROM meta WHERE name = 'sweep_candidates_refreshed'`); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				if n, err := s.RefreshSweepCandidates(ctx); err != nil || n != 0 {
					b.Fatalf("refresh: %d, %v", n, err)
				}
			}
		}
	}
	b.Run("Open", func(b *testing.B) {
		for b.Loop() {
			s.Close()
			var err error
			if s, err = sqlitestore.Open(ctx, dir); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("LaterStart", refresh(false))
	b.Run("FirstStart", refresh(true))
	if res, err := s.WriteOutside(`UPDATE items SET resolutions = 1 WHERE sweep_candidate = 1`); err != nil {
		b.Fatal(err)
	} else if m, _ := res.RowsAffected(); m != n/every {
		b.Fatalf("%d candidates marked resolved, want %d", m, n/every)
	}
	b.Run("FirstStartAllResolved", refresh(true))
	b.Cleanup(func() { s.Close() })
}
