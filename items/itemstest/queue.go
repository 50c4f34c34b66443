package itemstest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// needing writes an item of the harness's tenant that needs a person since since (nil: no recorded
// since, as an item written outside the ledger) and was last changed at changed, through the store.
func (h *opsHarness) needing(key string, since *time.Time, changed time.Time) {
	h.t.Helper()
	it, err := items.NewPrepared(h.params(key, payloadA), changed)
	if err != nil {
		h.t.Fatal(err)
	}
	it.State, it.Attempt = items.StateUnknown, 1
	it.NeedsPerson, it.NeedsPersonCause, it.NeedsPersonSince = true, items.CauseNoDedupe, since
	it.UpdatedAt = changed
	if _, err := h.store.Transition(h.ctx, h.tenant, key, func(*items.Item) (*items.Item, error) { return it, nil }); err != nil {
		h.t.Fatalf("write %s: %v", key, err)
	}
}

// listAll pages through the list p describes, limit items a page, and returns the keys in order and the
// number of pages.
func (h *opsHarness) listAll(p items.ListParams, limit int) ([]string, int) {
	h.t.Helper()
	var got []string
	p.Limit = limit
	for pages := 1; ; pages++ {
		page := h.list(p)
		got = append(got, keysOf(page.Items)...)
		if page.NextCursor == "" {
			return got, pages
		}
		if pages > 50 {
			h.t.Fatal("the cursor does not end")
		}
		p.Cursor = page.NextCursor
	}
}

// exerciseListBySince checks the order of the console's queue (items.ListByNeedsPersonSince): the items
// needing a person, the one waiting longest first, whatever the order of their last changes.
func exerciseListBySince(t *testing.T, open func(t *testing.T) OperatorStore) {
	yes := true
	bySince := items.ListParams{NeedsPerson: &yes, Order: items.ListByNeedsPersonSince}

	t.Run("OldestNeedsPersonSinceFirst", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		t0 := h.now().Truncate(time.Second)
		at := func(hours int) *time.Time { v := t0.Add(time.Duration(hours) * time.Hour); return &v }
		// The last change runs against the since: the list by change would give the opposite order.
		h.needing("d", at(3), *at(3))
		h.needing("b", at(2), *at(4))
		h.needing("a", at(2), *at(5)) // the same since as b: the key breaks the tie
		h.needing("c", at(1), *at(6))
		h.needing("n-2", nil, *at(7)) // no recorded since: before every other, by key
		h.needing("n-1", nil, *at(8))
		h.claim("settled", payloadA) // needs no person: not listed
		h.as(tenantB).claim("other", payloadA)
		if _, err := h.store.Transition(h.ctx, tenantB, "other", func(cur *items.Item) (*items.Item, error) {
			cur.NeedsPerson, cur.NeedsPersonCause, cur.NeedsPersonSince = true, items.CauseNoDedupe, at(-5)
			return cur, nil
		}); err != nil {
			t.Fatal(err)
		}
		want := []string{"n-1", "n-2", "c", "a", "b", "d"}
		for _, limit := range []int{1, 2, 4, 100} {
			got, pages := h.listAll(bySince, limit)
			if wantPages := max((len(want)+limit-1)/limit, 1); !slices.Equal(got, want) || pages != wantPages {
				t.Errorf("pages of %d gave %v in %d pages, want %v in %d", limit, got, pages, want, wantPages)
			}
		}
		// The kept count of the items needing a person is the list's length, per tenant.
		for tenant, want := range map[string]int{tenantA: 6, tenantB: 1, "nobody": 0} {
			if n, err := h.ops.NeedsPersonCount(h.ctx, tenant); err != nil || n != want {
				t.Errorf("NeedsPersonCount(%s) = %d, %v; want %d", tenant, n, err, want)
			}
		}
		// The list by change, for contrast, still gives the newest change first.
		if got := h.listKeys(items.ListParams{NeedsPerson: &yes}); !slices.Equal(got, []string{"n-1", "n-2", "c", "a", "b", "d"}) {
			t.Errorf("the list by change gave %v", got)
		}
		// Other filters apply as they do to the list by change.
		if got, _ := h.listAll(items.ListParams{NeedsPerson: &yes, Order: items.ListByNeedsPersonSince, States: []items.State{items.StateUnknown},
			Destination: "nowhere"}, 10); len(got) != 0 {
			t.Errorf("a destination nobody has gave %v", got)
		}
	})

	t.Run("FirstPageHoldsTheOldestOfMany", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		// Each item starts needing a person before the last, and is changed after it: the oldest are the
		// most recently changed, the ones a list by change reads last.
		const n, limit = 12, 5
		t0 := h.now().Truncate(time.Second)
		for i := range n {
			since := t0.Add(time.Duration(-i) * time.Minute)
			h.needing(fmt.Sprintf("k-%02d", i), &since, t0.Add(time.Duration(i)*time.Minute))
		}
		page := h.list(items.ListParams{NeedsPerson: &yes, Order: items.ListByNeedsPersonSince, Limit: limit})
		if got, want := keysOf(page.Items), []string{"k-11", "k-10", "k-09", "k-08", "k-07"}; !slices.Equal(got, want) || page.NextCursor == "" {
			t.Errorf("the first page of %d is %v (next %q), want the oldest %v and a next page", limit, got, page.NextCursor, want)
		}
	})

	t.Run("RefusesWhatItCannotOrder", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		h.needing("a", nil, h.now())
		h.needing("b", nil, h.now())
		no := false
		changeCursor := h.list(items.ListParams{NeedsPerson: &yes, Limit: 1}).NextCursor
		sinceCursor := h.list(items.ListParams{NeedsPerson: &yes, Order: items.ListByNeedsPersonSince, Limit: 1}).NextCursor
		if changeCursor == "" || sinceCursor == "" {
			t.Fatalf("no next cursor: %q %q", changeCursor, sinceCursor)
		}
		for _, tt := range []struct {
			name  string
			p     items.ListParams
			field string
		}{
			{"without needs_person", items.ListParams{Order: items.ListByNeedsPersonSince}, "needs_person"},
			{"needs_person=false", items.ListParams{NeedsPerson: &no, Order: items.ListByNeedsPersonSince}, "needs_person"},
			{"an unknown order", items.ListParams{NeedsPerson: &yes, Order: "oldest"}, "order"},
			{"a cursor of the list by change", items.ListParams{NeedsPerson: &yes, Order: items.ListByNeedsPersonSince, Cursor: changeCursor}, "cursor"},
			{"a cursor of the list by since, by change", items.ListParams{NeedsPerson: &yes, Cursor: sinceCursor}, "cursor"},
		} {
			tt.p.Tenant = tenantA
			_, err := h.ops.ListItems(h.ctx, tt.p)
			if items.ErrorCode(err) != items.CodeInvalid || !fieldNamed(err, tt.field) {
				t.Errorf("%s: %v, want invalid_request naming %s", tt.name, err, tt.field)
			}
		}
	})
}

// fieldNamed reports whether err is an items.Error about field.
func fieldNamed(err error, field string) bool {
	var e *items.Error
	if !errors.As(err, &e) {
		return false
	}
	return slices.ContainsFunc(e.Fields, func(f items.FieldProblem) bool { return f.Field == field })
}
