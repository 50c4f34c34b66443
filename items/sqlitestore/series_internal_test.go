package sqlitestore

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
)

// TestFailedGroupLeavesTheSeriesAsTheItems fails a group of claims and reports at its series statement,
// and at its commit: the group answers ErrUnavailable, and the series rows are still exactly the events
// of the items as stored (the failed group's events are in neither).
func TestFailedGroupLeavesTheSeriesAsTheItems(t *testing.T) {
	ctx := t.Context()
	s := openTemp(t)
	now := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	l, err := items.NewLedger(ctx, s, items.Config{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	fp, _ := items.Fingerprint([]byte(`{"invoice":"742"}`))
	claim := func(keys ...string) ([]items.Answer, error) {
		var ps []items.BeforeWriteParams
		for _, k := range keys {
			ps = append(ps, items.BeforeWriteParams{Tenant: "acme", Key: k, Fingerprint: fp, Destination: "billing"})
		}
		return l.BeforeWriteMany(ctx, "acme", ps)
	}
	if _, err := claim("a", "b"); err != nil {
		t.Fatal(err)
	}
	for i, op := range []string{"series", "commit"} {
		now = now.Add(time.Hour)
		s.fault = func(o string) error {
			if o == op {
				return errors.New("injected failure")
			}
			return nil
		}
		_, err := claim(fmt.Sprintf("c%d", i), fmt.Sprintf("d%d", i), "a")
		s.fault = nil
		if !errors.Is(err, items.ErrUnavailable) {
			t.Fatalf("a failure at %s: %v; want ErrUnavailable", op, err)
		}
		itemstest.CheckSeriesMatchesItems(t, s, "acme", now.Add(-48*time.Hour), now.Add(time.Hour))
		rows, err := s.SeriesRows(ctx, items.SeriesQuery{Tenant: "acme", Step: items.StepDay, From: now.Add(-48 * time.Hour), To: now})
		if err != nil || len(rows) != 1 || rows[0].Proceeds != 2 {
			t.Fatalf("after a failure at %s the day holds %+v (%v); want the 2 claims before", op, rows, err)
		}
	}
}
