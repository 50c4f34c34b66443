package sqlitestore_test

import (
	"context"
	"fmt"
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

// BenchmarkSeriesAtSize measures GET /v1/stats/series's store read at 2k and at 300k items spread over up
// to 30 days (itemstest.SeriesAtSize).
//
//	go test ./items/sqlitestore -run '^$' -bench SeriesAtSize -benchtime 200x
func BenchmarkSeriesAtSize(b *testing.B) {
	itemstest.SeriesAtSize(b, func(b *testing.B) itemstest.SeriesStore {
		s, err := sqlitestore.Open(context.Background(), b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	})
}
