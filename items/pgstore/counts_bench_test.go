package pgstore_test

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
	"github.com/replaysafe/companion/items/pgstore"
)

// statsLedger fills a store with n items through the ledger, in batches of 500 claims and 500 reports:
// the first 100 unknown (needing a person: dedupe none), the rest succeeded, over four destinations. The
// unresolved items are as many at every size, as Stats reads them and only them.
func statsLedger(b testing.TB, n int) (*pgstore.Store, time.Time) {
	b.Helper()
	ctx := context.Background()
	s := open(b)
	now := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	l, err := items.NewLedger(ctx, s, items.Config{Now: func() time.Time { return now }})
	if err != nil {
		b.Fatal(err)
	}
	fp, _ := items.Fingerprint([]byte(`{"invoice":"742"}`))
	for start := 0; start < n; start += 500 {
		var ps []items.BeforeWriteParams
		for i := start; i < min(start+500, n); i++ {
			ps = append(ps, items.BeforeWriteParams{Tenant: "acme", Key: fmt.Sprintf("wf:inv-%07d:send:0", i), Fingerprint: fp,
				Destination: fmt.Sprintf("dest-%d", i%4), BatchID: fmt.Sprintf("exec-%d", i/500), ExecutionID: fmt.Sprintf("run-%d", i/1000)})
		}
		answers, err := l.BeforeWriteMany(ctx, "acme", ps)
		if err != nil {
			b.Fatal(err)
		}
		reports := make([]items.AfterWriteParams, len(answers))
		for i, a := range answers {
			ev := items.Evidence{Outcome: items.OutcomeSucceeded}
			if start+i < 100 {
				ev = items.Evidence{Outcome: items.OutcomeUnknown, Class: items.ClassTimeout}
			}
			reports[i] = items.AfterWriteParams{Tenant: "acme", Key: a.Key, Claim: a.Claim, Evidence: ev}
		}
		if _, _, err := l.AfterWriteMany(ctx, "acme", reports); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := s.Pool().Exec(ctx, "VACUUM ANALYZE "+s.Schema()+".items"); err != nil {
		b.Fatal(err)
	}
	return s, now
}

// BenchmarkStatsAtSize measures GET /v1/stats's store read at 2k and at 300k items (COMPANION_BENCH_ITEMS
// names other sizes, comma-separated): its median (p50-ms) must stay within 3× from the smallest to the
// largest, and under 250 ms. Filling 300k items takes a minute or two.
//
//	go test ./items/pgstore -run '^$' -bench StatsAtSize -benchtime 200x
func BenchmarkStatsAtSize(b *testing.B) {
	sizes := []int{2000, 300000}
	if env := os.Getenv("COMPANION_BENCH_ITEMS"); env != "" {
		sizes = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatal(err)
			}
			sizes = append(sizes, n)
		}
	}
	ctx := context.Background()
	for _, n := range sizes {
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) {
			s, now := statsLedger(b, n)
			var took []time.Duration
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				st, err := s.Stats(ctx, "acme", now)
				if err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
				if st.Items != n || st.NeedsPerson != 100 {
					b.Fatalf("stats count %d items, %d needing a person; want %d and 100", st.Items, st.NeedsPerson, n)
				}
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2])/1e6, "p50-ms")
		})
	}
}
