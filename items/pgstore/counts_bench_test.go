package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
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
	itemstest.FillBatches(b, l, n, func(i int) items.BeforeWriteParams {
		return items.BeforeWriteParams{Tenant: "acme", Key: fmt.Sprintf("wf:inv-%07d:send:0", i), Fingerprint: fp,
			Destination: fmt.Sprintf("dest-%d", i%4), BatchID: fmt.Sprintf("exec-%d", i/500), ExecutionID: fmt.Sprintf("run-%d", i/1000)}
	}, func(i int) items.Evidence {
		if i < 100 {
			return items.Evidence{Outcome: items.OutcomeUnknown, Class: items.ClassTimeout}
		}
		return items.Evidence{Outcome: items.OutcomeSucceeded}
	})
	if _, err := s.Pool().Exec(ctx, "VACUUM ANALYZE "+s.Schema()+".items"); err != nil {
		b.Fatal(err)
	}
	return s, now
}

// BenchmarkStatsAtSize measures GET /v1/stats's store read at 2k and at 300k items (itemstest.StatsAtSize).
// Filling 300k items takes a few minutes.
//
//	go test ./items/pgstore -run '^$' -bench StatsAtSize -benchtime 200x
func BenchmarkStatsAtSize(b *testing.B) {
	itemstest.StatsAtSize(b, func(b *testing.B, n int) (itemstest.OperatorStore, time.Time) { return statsLedger(b, n) })
}

// BenchmarkSeriesAtSize measures GET /v1/stats/series's store read at 2k and at 300k items spread over up
// to 30 days (itemstest.SeriesAtSize). Filling 300k items takes a few minutes.
//
//	go test ./items/pgstore -run '^$' -bench SeriesAtSize -benchtime 50x
func BenchmarkSeriesAtSize(b *testing.B) {
	itemstest.SeriesAtSize(b, func(b *testing.B) itemstest.SeriesStore { return open(b) })
}
