package pgstore

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
)

// TestLostConnectionsLeaveTheSeriesAsTheItems claims and reports items through a ledger while the store
// loses its connection as a group's writes are sent (the group is decided again), loses the answer of a
// COMMIT that committed (settled as committed), and loses one it cannot settle (ErrUnavailable, though
// it committed): after each, the series rows are exactly the events of the items as stored, counted
// once, never twice for a group decided again, never for one that did not commit.
func TestLostConnectionsLeaveTheSeriesAsTheItems(t *testing.T) {
	ctx := t.Context()
	s := openInternal(t)
	now := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	l, err := items.NewLedger(ctx, s, items.Config{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	fp, _ := items.Fingerprint([]byte(`{"invoice":"742"}`))
	var fault atomic.Value // the step to fail once, and the settle's answer
	s.fault = func(step string) error {
		want, _ := fault.Load().(string)
		switch {
		case want == "unsettled" && (step == "answer" || step == "settle"):
			return errors.New("connection refused (injected)")
		case want != "" && step == want:
			fault.Store("")
			return errors.New("connection reset by peer (injected)")
		}
		return nil
	}
	s.settleWait = 300 * time.Millisecond
	// Each round's claims and reports lose what it names; the last round's claims cannot be settled, and
	// are not reported (they committed: asked again, they answer in progress, without a claim).
	for round, r := range []struct{ claims, reports string }{{"write", "write"}, {"answer", "answer"}, {"", "unsettled"}, {"unsettled", ""}} {
		now = now.Add(40 * time.Minute)
		fault.Store(r.claims)
		var ps []items.BeforeWriteParams
		for i := range 4 {
			ps = append(ps, items.BeforeWriteParams{Tenant: "acme", Key: fmt.Sprintf("k%d-%d", round, i), Fingerprint: fp,
				Destination: fmt.Sprintf("d%d", i%2)})
		}
		answers, err := l.BeforeWriteMany(ctx, "acme", ps)
		fault.Store("")
		if r.claims == "unsettled" {
			if !errors.Is(err, items.ErrUnavailable) {
				t.Fatalf("claims whose commit cannot be settled: %v; want ErrUnavailable", err)
			}
			itemstest.CheckSeriesMatchesItems(t, s, "acme", now.Add(-48*time.Hour), now.Add(time.Hour))
			break
		}
		if err != nil {
			t.Fatalf("claims with a lost %q: %v", r.claims, err)
		}
		now = now.Add(time.Minute)
		var reports []items.AfterWriteParams
		for i, a := range answers {
			ev := items.Evidence{Outcome: items.OutcomeSucceeded}
			if i%2 == 1 {
				ev = items.Evidence{Outcome: items.OutcomeUnknown, Class: items.ClassTimeout}
			}
			reports = append(reports, items.AfterWriteParams{Tenant: "acme", Key: a.Key, Claim: a.Claim, Evidence: ev})
		}
		fault.Store(r.reports)
		_, _, err = l.AfterWriteMany(ctx, "acme", reports)
		fault.Store("")
		if r.reports == "unsettled" && !errors.Is(err, items.ErrUnavailable) || r.reports != "unsettled" && err != nil {
			t.Fatalf("reports with a lost %q: %v", r.reports, err)
		}
		itemstest.CheckSeriesMatchesItems(t, s, "acme", now.Add(-48*time.Hour), now.Add(time.Hour))
	}
	rows, err := s.SeriesRows(ctx, items.SeriesQuery{Tenant: "acme", Step: items.StepDay, From: now.Add(-48 * time.Hour), To: now.Add(time.Hour)})
	if err != nil || len(rows) != 1 || rows[0].Proceeds != 16 || rows[0].Succeeded != 6 || rows[0].Unknown != 6 {
		t.Fatalf("the day holds %+v (%v); want 16 claims, 6 succeeded, 6 unknown (the reports of the unsettled commit committed)", rows, err)
	}
}
