package sqlitestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
)

func TestOperatorsConformance(t *testing.T) {
	itemstest.ExerciseOperators(t, func(t *testing.T) itemstest.OperatorStore {
		s := openIn(t, t.TempDir())
		t.Cleanup(func() { s.Close() })
		return s
	}, itemstest.Options{})
}

// The schema is created only where missing: a ledger reopened keeps its items and their measures.
func TestStatsSurviveReopening(t *testing.T) {
	dir := t.TempDir()
	s := openIn(t, dir)
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	l, err := items.NewLedger(ctx, s, items.Config{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		claim(t, l, k)
	}
	before, err := s.Stats(ctx, "acme", now)
	if err != nil || before.States[items.StateInFlight] != 3 {
		t.Fatalf("stats before: %+v, %v", before, err)
	}
	s.Close()
	s = openIn(t, dir)
	defer s.Close()
	after, err := s.Stats(ctx, "acme", now)
	if err != nil || after.Items != 3 || after.States[items.StateInFlight] != 3 {
		t.Fatalf("stats after reopening: %+v, %v; want the 3 items back", after, err)
	}
}
