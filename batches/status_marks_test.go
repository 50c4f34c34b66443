package batches_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/replaysafe/companion/batches"
	"github.com/replaysafe/companion/items"
)

// Status carries, for the console, whether each item needs a person, why and its alert status, from the
// rows it reads anyway; the API's body leaves them out (API.md fixes its item fields).
func TestStatusSaysWhichItemsNeedAPerson(t *testing.T) {
	eachStore(t, func(t *testing.T, k storeKind) {
		f := newFixture(t, k)
		ps := intents(t, "n:0", "n:1")
		ps[0].Dedupe = items.DedupeNone
		res := f.beforeWrite(t, "exec-n", ps)
		f.afterWrite(t, items.AfterWriteParams{Key: "n:0", Claim: res.Items[0].Claim,
			Evidence: items.Evidence{Outcome: items.OutcomeUnknown, Class: items.ClassTimeout}}, succeeded(res.Items[1], "e-1"))
		st := f.status(t, "exec-n")
		want := []batches.StatusItem{
			{NeedsPerson: true, NeedsPersonCause: items.CauseNoDedupe, AlertStatus: items.AlertPending},
			{},
		}
		for i, it := range st.Items {
			got := batches.StatusItem{NeedsPerson: it.NeedsPerson, NeedsPersonCause: it.NeedsPersonCause, AlertStatus: it.AlertStatus}
			if got != want[i] {
				t.Errorf("%s: %+v, want %+v", it.Key, got, want[i])
			}
		}
	})
}

// BenchmarkStatus reads one page of a 200-item batch's status, a third of whose items need a person: 50
// items (the console's page) and all 200. (200, not the API's 500: filling 500 takes the in-process
// FerretDB past its store timeout on a shared 2-core machine.)
func BenchmarkStatus(b *testing.B) {
	const batchSize = 200
	for _, k := range storeKinds() {
		b.Run(k.name, func(b *testing.B) {
			f := newFixture(b, k)
			ctx := context.Background()
			ps := make([]items.BeforeWriteParams, batchSize)
			for i := range ps {
				canon, err := items.Canonical(fmt.Appendf(nil, `{"item":%d}`, i))
				if err != nil {
					b.Fatal(err)
				}
				ps[i] = items.BeforeWriteParams{Key: fmt.Sprintf("b:%03d", i), Canonical: canon, Dedupe: items.DedupeNone}
			}
			res, err := f.svc.BeforeWrite(ctx, batches.Batch{Tenant: tenant, BatchID: "exec-bench", Items: ps})
			if err != nil {
				b.Fatal(err)
			}
			var reports []items.AfterWriteParams
			for i, a := range res.Items {
				ev := items.Evidence{Outcome: items.OutcomeSucceeded}
				if i%3 == 0 {
					ev = items.Evidence{Outcome: items.OutcomeUnknown, Class: items.ClassTimeout}
				}
				reports = append(reports, items.AfterWriteParams{Key: a.Key, Claim: a.Claim, ExternalID: "e-" + a.Key, Evidence: ev})
			}
			// In parts: many reports in one request outlast the FerretDB test server's store timeout.
			for part := range slices.Chunk(reports, 20) {
				if _, err := f.svc.AfterWrite(ctx, batches.Reports{Tenant: tenant, Items: part}); err != nil {
					b.Fatal(err)
				}
			}
			for _, limit := range []int{50, batchSize} {
				b.Run(fmt.Sprint("page", limit), func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						st, err := f.svc.Status(ctx, batches.StatusParams{Tenant: tenant, BatchID: "exec-bench", Limit: limit})
						if err != nil || len(st.Items) != limit {
							b.Fatalf("status: %d items, %v", len(st.Items), err)
						}
					}
				})
			}
		})
	}
}
