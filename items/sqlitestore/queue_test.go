package sqlitestore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// TestListByNeedsPersonSinceSkipsACorruptItem: in the queue's order (items.ListByNeedsPersonSince) a
// corrupt item is named in unreadable and keeps its place, whether it has a needs_person_since or not, and
// pages of one go on past it (as TestListSkipsACorruptItem in the order by change).
func TestListByNeedsPersonSinceSkipsACorruptItem(t *testing.T) {
	ctx := context.Background()
	store := openTemp(t)
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	at := func(h int) *time.Time { v := t0.Add(time.Duration(h) * time.Hour); return &v }
	for key, since := range map[string]*time.Time{"k-1": at(2), "k-2": at(1), "k-3": nil, "k-4": at(3)} {
		if _, err := store.Transition(ctx, "acme", key, func(*items.Item) (*items.Item, error) {
			return &items.Item{Tenant: "acme", Key: key, State: items.StateUnknown, Fingerprint: strings.Repeat("c", 64), Attempt: 1,
				NeedsPerson: true, NeedsPersonCause: items.CauseNoDedupe, NeedsPersonSince: since, CreatedAt: t0, UpdatedAt: *at(4),
				History: []items.Event{{At: *at(4), Kind: items.EventNeedsPerson}}}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	corrupt(t, store, "acme", "k-3") // first: no since
	corrupt(t, store, "acme", "k-1") // third
	yes := true
	var keys, unreadable []string
	pages := 0
	for p := (items.ListParams{Tenant: "acme", NeedsPerson: &yes, Order: items.ListByNeedsPersonSince, Limit: 1}); ; {
		page, err := store.ListItems(ctx, p)
		pages++
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		keys, unreadable = append(keys, keysOf(page.Items)...), append(unreadable, page.Unreadable...)
		if page.NextCursor == "" || pages > 10 {
			break
		}
		p.Cursor = page.NextCursor
	}
	if fmt.Sprint(keys) != "[k-2 k-4]" || fmt.Sprint(unreadable) != "[k-3 k-1]" || pages != 4 {
		t.Errorf("pages of 1 list %v and unreadable %v in %d pages, want [k-2 k-4], [k-3 k-1], 4 pages", keys, unreadable, pages)
	}
}
