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
