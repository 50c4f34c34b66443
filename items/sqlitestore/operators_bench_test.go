package sqlitestore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/sqlitestore"
)

// benchLedger fills a store with n items in batches of 500: a tenth unknown (needing a person), the rest
// succeeded, each with a claim and a report in its history.
func benchLedger(b *testing.B, n int) (*sqlitestore.Store, time.Time) {
	b.Helper()
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	now := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	l, err := items.NewLedger(ctx, s, items.Config{Now: func() time.Time { return now }})
	if err != nil {
		b.Fatal(err)
	}
	fp, _ := items.Fingerprint([]byte(`{"invoice":"742"}`))
	for start := 0; start < n; start += 500 {
		var ps []items.BeforeWriteParams
		for i := start; i < min(start+500, n); i++ {
			ps = append(ps, items.BeforeWriteParams{Tenant: "acme", Key: fmt.Sprintf("wf:inv-%06d:send:0", i), Fingerprint: fp,
				Destination: fmt.Sprintf("dest-%d", i%4), BatchID: fmt.Sprintf("exec-%d", i/500)})
		}
		answers, err := l.BeforeWriteMany(ctx, "acme", ps)
		if err != nil {
			b.Fatal(err)
		}
		for i, a := range answers {
			ev := items.Evidence{Outcome: items.OutcomeSucceeded}
			if (start+i)%10 == 0 {
				ev = items.Evidence{Outcome: items.OutcomeUnknown, Class: items.ClassTimeout}
			}
			if _, err := l.AfterWrite(ctx, items.AfterWriteParams{Tenant: "acme", Key: a.Key, Claim: a.Claim, Evidence: ev}); err != nil {
				b.Fatal(err)
			}
		}
	}
	return s, now
}

func BenchmarkOperatorQueries(b *testing.B) {
	ctx := context.Background()
	s, now := benchLedger(b, 10000)
	yes := true
	b.Run("Stats10k", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Stats(ctx, "acme", now); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ListNeedsPerson100", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.ListItems(ctx, items.ListParams{Tenant: "acme", NeedsPerson: &yes, Limit: 100}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("SweepCandidatesAll", func(b *testing.B) {
		for b.Loop() {
			after := items.ItemRef{}
			for {
				found, err := s.SweepCandidates(ctx, after, 100)
				if err != nil {
					b.Fatal(err)
				}
				if len(found) < 100 {
					break
				}
				after = items.ItemRef{Tenant: found[99].Tenant, Key: found[99].Key}
			}
		}
	})
	b.Run("ExpiredLeases", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.ExpiredLeases(ctx, now, items.ItemRef{}, 100); err != nil {
				b.Fatal(err)
			}
		}
	})
}
