package sqlitestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/sqlitestore"
)

// benchLedger fills a store with n items: a tenth unknown (needing a person), the rest succeeded, each with
// a claim and a report in its history.
func benchLedger(b *testing.B, n int) (*sqlitestore.Store, time.Time) {
	return filledLedger(b, n, func(i int) bool { return i%10 == 0 })
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
	// The console queue's order: the oldest needs_person_since first, from items_needs_person_since.
	b.Run("ListNeedsPersonOldestFirst100", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.ListItems(ctx, items.ListParams{Tenant: "acme", NeedsPerson: &yes, Order: items.ListByNeedsPersonSince, Limit: 100}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("NeedsPersonCount", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.NeedsPersonCount(ctx, "acme"); err != nil {
				b.Fatal(err)
			}
		}
	})
	// Every item of benchLedger changed at the same moment (its clock stands still): the worst case of
	// the lists' tie break by key, which sorts the items of one change time.
	b.Run("List100AllAtOneTime", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.ListItems(ctx, items.ListParams{Tenant: "acme", Limit: 100}); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The operator's list as it opens (no filter) and with a filter that most items pass, on a ledger whose
	// items changed at different moments: each state's range of items_state_changed, merged.
	ticking, _ := filledLedgerTicking(b, 10000, func(i int) bool { return i%10 == 0 }, time.Millisecond)
	no := false
	for _, c := range []struct {
		name string
		p    items.ListParams
	}{
		{"List100", items.ListParams{Tenant: "acme", Limit: 100}},
		{"List100NotNeedsPerson", items.ListParams{Tenant: "acme", Limit: 100, NeedsPerson: &no}},
		{"List100Destination", items.ListParams{Tenant: "acme", Limit: 100, Destination: "dest-1"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				page, err := ticking.ListItems(ctx, c.p)
				if err != nil {
					b.Fatal(err)
				}
				if len(page.Items) != 100 {
					b.Fatalf("listed %d items, want 100", len(page.Items))
				}
			}
		})
	}
	// An error workflow's list of its run's items (1,000 of them: filledLedger's executions), first page
	// and every page: items_of_execution holds no updated_at, so each page sorts the run's items.
	b.Run("ListExecution1000FirstPage", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.ListItems(ctx, items.ListParams{Tenant: "acme", ExecutionID: "run-3", Limit: 100}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ListExecution1000AllPages", func(b *testing.B) {
		for b.Loop() {
			p := items.ListParams{Tenant: "acme", ExecutionID: "run-3", Limit: 100}
			n := 0
			for {
				page, err := s.ListItems(ctx, p)
				if err != nil {
					b.Fatal(err)
				}
				n += len(page.Items)
				if page.NextCursor == "" {
					break
				}
				p.Cursor = page.NextCursor
			}
			if n != 1000 {
				b.Fatalf("listed %d items of the run, want 1000", n)
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
