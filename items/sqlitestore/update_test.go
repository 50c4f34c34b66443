package sqlitestore

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// storedColumnsOf reads the columns an UPDATE may set (setColumns) of every item, by key, in
// appendColumns' form.
func storedColumnsOf(t *testing.T, s *Store) map[string][]any {
	t.Helper()
	rows, err := s.r.Query(`SELECT key, ` + strings.Join(setColumns, ", ") + ` FROM items`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]any{}
	for rows.Next() {
		var key string
		vals := make([]any, len(setColumns))
		dest := []any{&key}
		for i := range vals {
			dest = append(dest, &vals[i])
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		out[key] = vals
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkColumns fails unless every item's stored columns are those a full write of it (by key) would give.
func checkColumns(t *testing.T, s *Store, want map[string]*items.Item, when string) {
	t.Helper()
	stored := storedColumnsOf(t, s)
	for k, it := range want {
		want := appendColumns(nil, it, nil)
		for c, name := range setColumns {
			if !sameValue(stored[k][c], want[c]) {
				t.Errorf("%s: item %s: column %s is %v (%T), a full write gives %v (%T)", when, k, name, stored[k][c], stored[k][c], want[c], want[c])
			}
		}
	}
}

// TestUpdatedColumnsEqualAFullWrite moves random items from random state to random state, one by one and
// in groups of several transitions, and checks after each group that every row's columns are exactly
// what writing the item whole would store: an UPDATE that sets only the columns that change leaves none
// behind.
func TestUpdatedColumnsEqualAFullWrite(t *testing.T) {
	s := openTemp(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 7))
	keys := make([]string, 12)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
	}
	// next is a random item under key: a new state of every field, some keeping the current ones.
	next := func(key string, cur *items.Item) *items.Item {
		it := storedSample(r)
		it.Tenant, it.Key = "acme", key
		// What RandomItem leaves to chance too rarely for every column to change: an execution, a
		// pending alert, a history that entered unknown or recovered under the same key.
		it.ExecutionID = []string{"", "exec-1", "exec-2"}[r.IntN(3)]
		it.AlertStatus = []string{"", items.AlertPending, "sent"}[r.IntN(3)]
		if r.IntN(2) == 0 {
			it.History = append(it.History, items.Event{Kind: items.EventAfterWrite, To: items.StateUnknown})
		}
		if r.IntN(2) == 0 {
			it.State = items.StateSucceeded
			it.History = append(it.History, items.Event{Kind: items.EventClaimed, Reason: items.ReasonRetrySameKey})
		}
		if cur != nil && r.IntN(3) == 0 {
			// Only a few fields change, as in most transitions.
			it = cur
			it.UpdatedAt = it.UpdatedAt.Add(time.Duration(r.IntN(2)) * time.Second)
			if r.IntN(2) == 0 {
				it.NeedsPerson = !it.NeedsPerson
			}
		}
		return it
	}
	last := map[string]*items.Item{} // every item as the last transition left it
	for round := range 60 {
		var group []*transition
		for range 1 + r.IntN(4) {
			ks := make([]string, 1+r.IntN(5))
			for i := range ks {
				ks[i] = keys[r.IntN(len(keys))]
			}
			group = append(group, newTransition("acme", ks, func(i int, cur *items.Item) (*items.Item, error) {
				return next(ks[i], cur), nil
			}))
		}
		s.commitGroup(group)
		s.prepareUpdates()
		for i, tr := range group {
			if tr.err != nil {
				t.Fatalf("round %d, transition %d: %v", round, i, tr.err)
			}
		}
		for _, tr := range group {
			for i, k := range tr.keys {
				last[k] = tr.out[i].Clone()
			}
		}
		checkColumns(t, s, last, fmt.Sprintf("round %d", round))
		if t.Failed() {
			return
		}
	}
	if len(s.updates) == 0 {
		t.Error("no UPDATE was prepared after its first use")
	}
}

// TestUpdateCorrectsAColumnAnEarlierBuildWroteOtherwise stores an item whose fact columns say otherwise
// than the item (as a build that computed them differently would have left them), then changes the item
// without changing those facts: what the UPDATE sets is decided against the row as stored, so the columns
// are corrected.
func TestUpdateCorrectsAColumnAnEarlierBuildWroteOtherwise(t *testing.T) {
	s := openTemp(t)
	claim := newTransition("acme", []string{"k"}, claimFn("acme", []string{"k"}))
	s.commitGroup([]*transition{claim})
	if claim.err != nil {
		t.Fatal(claim.err)
	}
	if _, err := s.writeOutside(`UPDATE items SET attempt = attempt + 7, sweep_candidate = 1, needs_person = 1, owner = 'someone', workflow = 'other'`); err != nil {
		t.Fatal(err)
	}
	touch := newTransition("acme", []string{"k"}, func(_ int, _ *items.Item) (*items.Item, error) {
		// The item as the claim left it (what the store reads back would carry the altered columns).
		next := claim.out[0].Clone()
		next.UpdatedAt = next.UpdatedAt.Add(time.Second)
		return next, nil
	})
	s.commitGroup([]*transition{touch})
	if touch.err != nil {
		t.Fatal(touch.err)
	}
	checkColumns(t, s, map[string]*items.Item{"k": touch.out[0]}, "after the touch")
}
