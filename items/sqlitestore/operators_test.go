package sqlitestore_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/sqlitestore"
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

// A ledger made before alerts carried their post attempt gets the column when opened: its alerts have no
// post in doubt, and a post can be marked on them.
func TestAlertsGetThePostAttemptColumn(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	s := openIn(t, dir)
	if _, err := s.AddAlerts(ctx, []items.Alert{{Tenant: "acme", Key: "k1", Attempt: 1, Cause: items.CauseNoDedupe, Owner: "U0ANNA",
		Status: items.AlertPending, CreatedAt: now}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, sqlitestore.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`ALTER TABLE alerts DROP COLUMN post_attempt_at`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s = openIn(t, dir)
	defer s.Close()
	got, err := s.ClaimAlerts(ctx, items.AlertClaim{Group: items.AlertGroup{Tenant: "acme", Owner: "U0ANNA"}, Claim: "c1", Now: now, Until: now.Add(time.Minute)})
	if err != nil || len(got) != 1 || got[0].PostAttemptAt != nil {
		t.Fatalf("claimed %+v (%v), want the old alert with no post in doubt", got, err)
	}
	if n, err := s.MarkAlertPost(ctx, "c1", now); err != nil || n != 1 {
		t.Fatalf("marking a post on the old ledger changed %d (%v), want 1", n, err)
	}
	if as, err := s.ItemAlerts(ctx, "acme", "k1"); err != nil || len(as) != 1 || as[0].PostAttemptAt == nil || !as[0].PostAttemptAt.Equal(now) {
		t.Fatalf("alerts %+v (%v), want the post marked at %v", as, err, now)
	}
}
