package batches_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/replaysafe/companion/batches"
	"github.com/replaysafe/companion/items"
)

// The store's batch queries, on every store: a batch's items in (index, key) order one at a time, items a
// single before-write registered without an index first, nothing of other batches or tenants.
func TestStoreBatchQueries(t *testing.T) {
	eachStore(t, func(t *testing.T, k storeKind) {
		f := newFixture(t, k)
		ctx := context.Background()
		single := func(tenant, key, batchID string) {
			p := intent(t, key, `{}`)
			p.Tenant, p.BatchID = tenant, batchID
			if _, err := f.ledger.BeforeWrite(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		single(tenant, "n:2", "b")
		single(tenant, "n:1", "b")
		ps := intents(t, "i:b", "i:a", "i:c")
		ps[0].BatchIndex, ps[1].BatchIndex, ps[2].BatchIndex = new(1), new(0), new(1)
		ps[2].LeaseSeconds = 10
		f.beforeWrite(t, "b", ps)
		single("other-tenant", "i:d", "b")
		single(tenant, "i:e", "b2")

		var got []string
		var afterIndex *int
		afterKey := ""
		for range 10 {
			page, err := f.store.BatchItems(ctx, tenant, "b", afterIndex, afterKey, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			if len(page) != 1 {
				t.Fatalf("limit 1 returned %d items", len(page))
			}
			afterIndex, afterKey = page[0].BatchIndex, page[0].Key
			got = append(got, fmt.Sprintf("%s@%v", afterKey, deref(afterIndex)))
		}
		if want := "[n:1@- n:2@- i:a@0 i:b@1 i:c@1]"; fmt.Sprint(got) != want {
			t.Fatalf("one at a time: %v, want %s", got, want)
		}
		all, err := f.store.BatchItems(ctx, tenant, "b", nil, "", 100)
		if err != nil || len(all) != 5 {
			t.Fatalf("all at once: %d items, %v", len(all), err)
		}

		counts, err := f.store.BatchCounts(ctx, tenant, "b", f.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(counts) != fmt.Sprint(map[items.State]int{items.StateInFlight: 5}) {
			t.Fatalf("counts now: %v", counts)
		}
		// i:c's lease ends after 10 s; the others' after 300 s.
		counts, err = f.store.BatchCounts(ctx, tenant, "b", f.clock.Now().Add(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(counts) != fmt.Sprint(map[items.State]int{items.StateInFlight: 4, items.StateUnknown: 1}) {
			t.Fatalf("counts at i:c's lease end: %v", counts)
		}
		if counts, err := f.store.BatchCounts(ctx, tenant, "nothing", f.clock.Now()); err != nil || len(counts) != 0 {
			t.Fatalf("counts of an unknown batch: %v, %v", counts, err)
		}

		// The service pages the same way, with items without an index first.
		st, err := f.svc.Status(ctx, batches.StatusParams{Tenant: tenant, BatchID: "b", Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		st2, err := f.svc.Status(ctx, batches.StatusParams{Tenant: tenant, BatchID: "b", Limit: 2, Cursor: st.NextCursor})
		if err != nil {
			t.Fatal(err)
		}
		if st.Items[1].Key != "n:2" || st.Items[1].BatchIndex != nil || st2.Items[0].Key != "i:a" {
			t.Fatalf("pages: %+v then %+v", st.Items, st2.Items)
		}
	})
}

func deref(p *int) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}
