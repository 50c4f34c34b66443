package sqlitestore

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// BenchmarkItemCache claims and reports new items through the ledger, with the committer's item cache
// off and on, alternating in the same run: batch500 claims 500 items in one BeforeWriteMany and reports
// them in one AfterWriteMany (an op is the 500 items); single32 has 32 callers each claim and report one
// item (an op is the 32 items). cpu-µs/item is the process's CPU time (getrusage) per item: on a machine
// shared with other work, a steadier measure than the time per op. heap-MiB is the live heap at the end
// (the cache full, in batch500). commits/item tells how the callers
// shared their commits: fewer callers per commit cost more CPU per item, cache or not.
//
//	go test ./items/sqlitestore -run '^$' -bench ItemCache -benchtime 40x -count 3
func BenchmarkItemCache(b *testing.B) {
	for _, mode := range []string{"batch500", "single32"} {
		for _, cache := range []int{0, DefaultItemCache} {
			b.Run(fmt.Sprintf("%s/cache=%d", mode, cache), func(b *testing.B) {
				ctx := context.Background()
				s, err := Open(ctx, b.TempDir(), WithItemCache(cache))
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				var mu sync.Mutex
				now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
				clock := func() time.Time {
					mu.Lock()
					defer mu.Unlock()
					now = now.Add(time.Millisecond)
					return now
				}
				l, err := items.NewLedger(ctx, s, items.Config{Now: clock})
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				perOp := 500
				if mode == "single32" {
					perOp = 32
				}
				cpu0, commits0 := cpuTime(), s.commits.Load()
				for b.Loop() {
					if mode == "batch500" {
						claimAndReport(b, l, n, 500)
					} else {
						var wg sync.WaitGroup
						for c := range 32 {
							wg.Go(func() { claimAndReport(b, l, n+c, 1) })
						}
						wg.Wait()
					}
					n += perOp
				}
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Microsecond)/float64(n), "cpu-µs/item")
				b.ReportMetric(float64(s.commits.Load()-commits0)/float64(n), "commits/item")
				b.ReportMetric(float64(s.cache.Len()), "cached")
				var m runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&m)
				b.ReportMetric(float64(m.HeapAlloc)/(1<<20), "heap-MiB")
			})
		}
	}
}

// claimAndReport claims the new items first to first+count-1 (one call) and reports each a success.
func claimAndReport(b *testing.B, l *items.Ledger, first, count int) {
	ctx := context.Background()
	ps := make([]items.BeforeWriteParams, count)
	for i := range ps {
		k := first + i
		ps[i] = items.BeforeWriteParams{Tenant: "acme", Key: fmt.Sprintf("bench:i%07d:write:0", k),
			Canonical: fmt.Appendf(nil, `{"amount":%d,"customer":"cus_%07d"}`, 1000+k%5000, k), ExecutionID: "bench-e1"}
	}
	answers, err := l.BeforeWriteMany(ctx, "acme", ps)
	if err != nil {
		b.Error(err)
		return
	}
	reports := make([]items.AfterWriteParams, count)
	for i, a := range answers {
		if a.Decision != items.Proceed {
			b.Errorf("%s: %s %s", a.Key, a.Decision, a.Reason)
			return
		}
		reports[i] = items.AfterWriteParams{Tenant: "acme", Key: a.Key, Claim: a.Claim,
			Evidence: items.Evidence{Outcome: items.OutcomeSucceeded}, ExternalID: fmt.Sprintf("in_%d", first+i)}
	}
	_, refused, err := l.AfterWriteMany(ctx, "acme", reports)
	if err != nil {
		b.Error(err)
		return
	}
	for _, err := range refused {
		if err != nil {
			b.Error(err)
			return
		}
	}
}
