package sqlitestore_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/sqlitestore"
)

// statsLedger fills a store with n items through the ledger, in batches of 500 claims and 500 reports:
// the first 100 unknown (needing a person once swept), the rest succeeded, over four destinations. The
// unresolved items are as many at every size, as Stats reads them and only them one by one.
func statsLedger(b testing.TB, n int) (*sqlitestore.Store, time.Time) {
	return filledLedger(b, n, func(i int) bool { return i < 100 })
}

// filledLedger fills a store with n items through the ledger, in batches of 500 claims and 500 reports,
// over four destinations: item i is reported unknown where unknown(i), else succeeded.
func filledLedger(b testing.TB, n int, unknown func(i int) bool) (*sqlitestore.Store, time.Time) {
	return filledLedgerTicking(b, n, unknown, 0)
}

// openLedger opens a store in a temporary directory, closed when b ends, and a ledger over it on clock.
func openLedger(b testing.TB, clock func() time.Time) (*sqlitestore.Store, *items.Ledger) {
	b.Helper()
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	l, err := items.NewLedger(ctx, s, items.Config{Now: clock})
	if err != nil {
		b.Fatal(err)
	}
	return s, l
}

// filledLedgerTicking is filledLedger with a clock that moves tick at each reading, so that the items'
// change times differ as a live ledger's do; it returns the clock's last reading.
func filledLedgerTicking(b testing.TB, n int, unknown func(i int) bool, tick time.Duration) (*sqlitestore.Store, time.Time) {
	b.Helper()
	now := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	s, l := openLedger(b, func() time.Time { now = now.Add(tick); return now })
	fp, _ := items.Fingerprint([]byte(`{"invoice":"742"}`))
	itemstest.FillBatches(b, l, n, func(i int) items.BeforeWriteParams {
		return items.BeforeWriteParams{Tenant: "acme", Key: fmt.Sprintf("wf:inv-%07d:send:0", i), Fingerprint: fp,
			Destination: fmt.Sprintf("dest-%d", i%4), BatchID: fmt.Sprintf("exec-%d", i/500), ExecutionID: fmt.Sprintf("run-%d", i/1000)}
	}, func(i int) items.Evidence {
		if unknown(i) {
			return items.Evidence{Outcome: items.OutcomeUnknown, Class: items.ClassTimeout}
		}
		return items.Evidence{Outcome: items.OutcomeSucceeded}
	})
	return s, now
}

// BenchmarkStatsAtSize measures GET /v1/stats's store read at 2k and at 300k items (COMPANION_BENCH_ITEMS
// names other sizes, comma-separated): its median (p50-ms) must stay within 3× from the smallest to the
// largest, and under 250 ms. Filling 300k items takes a minute or two.
//
//	go test ./items/sqlitestore -run '^$' -bench StatsAtSize -benchtime 200x
func BenchmarkStatsAtSize(b *testing.B) {
	itemstest.StatsAtSize(b, func(b *testing.B, n int) (itemstest.OperatorStore, time.Time) { return statsLedger(b, n) })
}

// seriesLedger fills a store with n items through the ledger, four destinations, one item in fifty
// unknown, in batches an hour apart up to the clock's last reading (returned): 720 hours (30 days), or
// n/4 of them for fewer items, so that the last 48 hours have rows of every destination at every size,
// and a read of the series reads about as many rows at 2k items as at 300k.
func seriesLedger(b testing.TB, n int) (*sqlitestore.Store, time.Time) {
	b.Helper()
	ctx := context.Background()
	end := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	hours := min(720, n/4)
	now := end
	s, l := openLedger(b, func() time.Time { return now })
	fp, _ := items.Fingerprint([]byte(`{"invoice":"742"}`))
	for h, i := 0, 0; h < hours; h++ {
		now = end.Add(-time.Duration(hours-h) * time.Hour)
		var ps []items.BeforeWriteParams
		for ; i < n*(h+1)/hours; i++ {
			ps = append(ps, items.BeforeWriteParams{Tenant: "acme", Key: fmt.Sprintf("wf:inv-%07d:send:0", i), Fingerprint: fp,
				Destination: fmt.Sprintf("dest-%d", i%4)})
		}
		answers, err := l.BeforeWriteMany(ctx, "acme", ps)
		if err != nil {
			b.Fatal(err)
		}
		reports := make([]items.AfterWriteParams, len(answers))
		for j, a := range answers {
			ev := items.Evidence{Outcome: items.OutcomeSucceeded}
			if j%50 == 0 {
				ev = items.Evidence{Outcome: items.OutcomeUnknown, Class: items.ClassTimeout}
			}
			reports[j] = items.AfterWriteParams{Tenant: "acme", Key: a.Key, Claim: a.Claim, Evidence: ev}
		}
		if _, _, err := l.AfterWriteMany(ctx, "acme", reports); err != nil {
			b.Fatal(err)
		}
	}
	return s, end
}

// BenchmarkSeriesAtSize measures GET /v1/stats/series's store read (items.ReadSeries) at 2k and at 300k
// items spread over up to 30 days (COMPANION_BENCH_ITEMS names other sizes): the console's Overview reads, of
// every destination together, the last 48 hours by hour (Hours48) and the last 30 days by day (Days30),
// and the most one call answers, 1,000 hours of one destination (Hours1000). Their medians (p50-ms) must
// stay within 3× from the smallest size to the largest: the read is of kept rows, a row per destination
// and bucket, never of the items.
//
//	go test ./items/sqlitestore -run '^$' -bench SeriesAtSize -benchtime 200x
func BenchmarkSeriesAtSize(b *testing.B) {
	sizes := itemstest.BenchSizes(b)
	ctx := context.Background()
	for _, n := range sizes {
		s, now := seriesLedger(b, n)
		for _, q := range []struct {
			name string
			q    items.SeriesQuery
		}{
			{"Hours48", items.SeriesQuery{Tenant: "acme", Step: items.StepHour, To: now}},
			{"Days30", items.SeriesQuery{Tenant: "acme", Step: items.StepDay, To: now}},
			{"Hours1000", items.SeriesQuery{Tenant: "acme", Step: items.StepHour, Destination: "dest-1", From: now.Add(-1000 * time.Hour), To: now}},
		} {
			b.Run(fmt.Sprintf("items=%d/%s", n, q.name), func(b *testing.B) {
				var took []time.Duration
				for b.Loop() {
					start := time.Now()
					got, err := items.ReadSeries(ctx, s, q.q)
					if err != nil {
						b.Fatal(err)
					}
					took = append(took, time.Since(start))
					if q.name == "Days30" && got.Total().Proceeds != n && n >= 4*720 {
						b.Fatalf("the 30 days count %d claims, want %d", got.Total().Proceeds, n)
					}
				}
				slices.Sort(took)
				b.ReportMetric(float64(took[len(took)/2])/1e6, "p50-ms")
			})
		}
	}
}
