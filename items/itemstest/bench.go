package itemstest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// FillBatches claims and reports n items through the ledger, 500 at a time (tenant acme): item i is
// claimed with params(i) and reported with evidence(i). Benchmarks fill their stores with it.
func FillBatches(b testing.TB, l *items.Ledger, n int, params func(i int) items.BeforeWriteParams, evidence func(i int) items.Evidence) {
	b.Helper()
	ctx := context.Background()
	for start := 0; start < n; start += 500 {
		var ps []items.BeforeWriteParams
		for i := start; i < min(start+500, n); i++ {
			ps = append(ps, params(i))
		}
		answers, err := l.BeforeWriteMany(ctx, "acme", ps)
		if err != nil {
			b.Fatal(err)
		}
		reports := make([]items.AfterWriteParams, len(answers))
		for i, a := range answers {
			reports[i] = items.AfterWriteParams{Tenant: "acme", Key: a.Key, Claim: a.Claim, Evidence: evidence(start + i)}
		}
		if _, _, err := l.AfterWriteMany(ctx, "acme", reports); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchSizes are the ledger sizes of the *AtSize benchmarks: 2k and 300k items, or the comma-separated
// sizes COMPANION_BENCH_ITEMS names.
func BenchSizes(b *testing.B) []int {
	env := os.Getenv("COMPANION_BENCH_ITEMS")
	if env == "" {
		return []int{2000, 300000}
	}
	var sizes []int
	for _, f := range strings.Split(env, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			b.Fatalf("COMPANION_BENCH_ITEMS: %q is not a number of items", f)
		}
		sizes = append(sizes, n)
	}
	return sizes
}

// StatsAtSize measures GET /v1/stats's store read (Stats of tenant acme) on ledgers of 2k and 300k items
// (COMPANION_BENCH_ITEMS names other sizes, comma-separated), each made by fill, which returns the store
// and the time to measure at: its median (p50-ms) must stay within 3× from the smallest to the largest,
// and under 250 ms. Every store's BenchmarkStatsAtSize runs it.
func StatsAtSize(b *testing.B, fill func(b *testing.B, n int) (OperatorStore, time.Time)) {
	sizes := BenchSizes(b)
	ctx := context.Background()
	for _, n := range sizes {
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) {
			s, now := fill(b, n)
			var took []time.Duration
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				st, err := s.Stats(ctx, "acme", now)
				if err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
				if st.Items != n {
					b.Fatalf("stats count %d items, want %d", st.Items, n)
				}
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2])/1e6, "p50-ms")
		})
	}
}

// SeriesAtSize measures GET /v1/stats/series's store read (items.ReadSeries) on ledgers of 2k and 300k
// items (COMPANION_BENCH_ITEMS names other sizes) spread over up to 30 days, each a new store from open
// filled by FillHours: the console's Overview reads, of every destination together, the last 48 hours by
// hour (Hours48) and the last 30 days by day (Days30), and the most one call answers, 1,000 hours of one
// destination (Hours1000). Their medians (p50-ms) must stay within 3× from the smallest size to the
// largest: the read is of kept rows, a row per destination and bucket, never of the items. Every store's
// BenchmarkSeriesAtSize runs it.
func SeriesAtSize(b *testing.B, open func(b *testing.B) SeriesStore) {
	sizes := BenchSizes(b)
	ctx := context.Background()
	for _, n := range sizes {
		s := open(b)
		now := FillHours(b, s, n)
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

// FillHours fills a store with n items through a ledger of its own, four destinations, one item in fifty
// unknown, in batches an hour apart up to the clock's last reading (returned): 720 hours (30 days), or
// n/4 of them for fewer items, so that the last 48 hours have rows of every destination at every size,
// and a read of the series reads about as many rows at 2k items as at 300k.
func FillHours(b testing.TB, s items.Store, n int) time.Time {
	b.Helper()
	ctx := context.Background()
	end := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	hours := min(720, n/4)
	now := end
	l, err := items.NewLedger(ctx, s, items.Config{Now: func() time.Time { return now }})
	if err != nil {
		b.Fatal(err)
	}
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
	return end
}
