package sqlitestore

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
)

// TestCountsOfAnEarlierLedger opens a ledger as an earlier build left it (items, no item_counts) and
// checks that the first open counts every item, and that later transitions keep counting from there.
func TestCountsOfAnEarlierLedger(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	l, err := items.NewLedger(ctx, s, items.Config{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	fp, _ := items.Fingerprint([]byte(`{"invoice":"742"}`))
	claim := func(key, dest string) items.Answer {
		t.Helper()
		a, err := l.BeforeWrite(ctx, items.BeforeWriteParams{Tenant: "acme", Key: key, Fingerprint: fp, Destination: dest})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for i := range 30 {
		a := claim(fmt.Sprintf("k%d", i), fmt.Sprintf("dest-%d", i%3))
		ev := items.Evidence{Outcome: items.OutcomeSucceeded}
		if i%5 == 0 {
			ev = items.Evidence{Outcome: items.OutcomeFailed, Class: items.ClassTimeout}
		}
		if _, err := l.AfterWrite(ctx, items.AfterWriteParams{Tenant: "acme", Key: a.Key, Claim: a.Claim, Evidence: ev}); err != nil {
			t.Fatal(err)
		}
	}
	want, err := s.Stats(ctx, "acme", now)
	if err != nil {
		t.Fatal(err)
	}
	if want.Items != 30 || want.States[items.StateUnknown] != 6 {
		t.Fatalf("stats before: %+v", want.Measures)
	}
	// What an earlier build left: no counts, no marker.
	if _, err := s.w.ExecContext(ctx, `DROP TABLE item_counts; DELETE FROM meta WHERE name = ?`, countsBuilt); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s, err = Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Stats(ctx, "acme", now)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want); g != w {
		t.Fatalf("counted at open\n%s\nwant\n%s", g, w)
	}
	// Counting goes on from there, and a second open does not count again (twice the items).
	l, err = items.NewLedger(ctx, s, items.Config{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	claim("k-new", "dest-0")
	s.Close()
	s, err = Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	got, err = s.Stats(ctx, "acme", now)
	if err != nil {
		t.Fatal(err)
	}
	if got.Items != 31 || got.States[items.StateInFlight] != 1 {
		t.Fatalf("after a claim and a reopen: %+v", got.Measures)
	}
}

// TestReadManyAtEverySize reads sets of keys of every size around the prepared statements' sizes, with
// repeats and missing keys, and checks that each stored key is found once and the others are nil.
func TestReadManyAtEverySize(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	var stored []string
	for i := range 1200 {
		stored = append(stored, fmt.Sprintf("k%04d", i))
	}
	now := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	if _, err := s.TransitionMany(ctx, "acme", stored, func(_ int, cur *items.Item) (*items.Item, error) {
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(stored); i += 2 { // the even keys exist
		key := stored[i]
		if _, err := s.Transition(ctx, "acme", key, func(*items.Item) (*items.Item, error) {
			return &items.Item{Tenant: "acme", Key: key, State: items.StateSucceeded, Destination: "d", CreatedAt: now, UpdatedAt: now}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []int{1, 2, 7, 8, 9, 63, 64, 65, 499, 500, 501, 1100} {
		keys := append(slices.Clone(stored[:n]), stored[0]) // a repeat
		tx, err := s.w.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		found, rows, bad, err := s.readMany(ctx, tx, "acme", keys)
		_ = tx.Rollback()
		if err != nil || len(bad) != 0 {
			t.Fatalf("%d keys: %v %v", n, err, bad)
		}
		if len(found) != n {
			t.Fatalf("%d keys: %d found", n, len(found))
		}
		for i, k := range stored[:n] {
			if it := found[k]; (it != nil) != (i%2 == 0) || (it != nil && it.Key != k) || (it != nil) != (rows[k] != nil) {
				t.Fatalf("%d keys: %s = %+v (row %v)", n, k, it, rows[k])
			}
		}
	}
}

// TestCountsOfALedgerWithoutHistoryDropped opens a ledger whose item_counts an earlier build made, without
// the history_dropped columns: the open adds them, the stats read 0 for them and the same other counts,
// and a workflow's loop of reports afterwards is counted from there.
func TestCountsOfALedgerWithoutHistoryDropped(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	fp, _ := items.Fingerprint([]byte(`{"invoice":"742"}`))
	var claim string
	for i := range 12 {
		l, err := items.NewLedger(ctx, s, items.Config{Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		a, err := l.BeforeWrite(ctx, items.BeforeWriteParams{Tenant: "acme", Key: fmt.Sprintf("k%d", i), Fingerprint: fp, Destination: "crm"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.AfterWrite(ctx, items.AfterWriteParams{Tenant: "acme", Key: a.Key, Claim: a.Claim,
			Evidence: items.Evidence{Outcome: items.OutcomeSucceeded}}); err != nil {
			t.Fatal(err)
		}
		claim = a.Claim
	}
	want, err := s.Stats(ctx, "acme", now)
	if err != nil {
		t.Fatal(err)
	}
	// What an earlier build left: item_counts without the columns.
	if _, err := s.w.ExecContext(ctx, `ALTER TABLE item_counts DROP COLUMN history_dropped;
		ALTER TABLE item_counts DROP COLUMN history_dropped_items`); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s, err = Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, col := range []string{"history_dropped", "history_dropped_items"} {
		if ok, err := s.hasColumn(ctx, "item_counts", col); err != nil || !ok {
			t.Fatalf("item_counts has no %s after the open (%v)", col, err)
		}
	}
	got, err := s.Stats(ctx, "acme", now)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want); g != w || got.Items != 12 || got.HistoryDropped != 0 {
		t.Fatalf("stats after the open\n%s\nwant\n%s", g, w)
	}
	l, err := items.NewLedger(ctx, s, items.Config{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	itemstest.CheckReportLoopCounted(t, l, s, "acme", "k11", claim, "crm", &now)
}
