package sqlitestore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// BenchmarkSettledAlerts is what every dispatch asks the outbox to keep Slack messages true, in the steady
// state: a ledger of 10,000 items, the 1,000 waiting for a person each with an alert that went out and is
// open, none of them settled: SettledAlerts reads the 1,000 open delivered alerts and finds nothing.
func BenchmarkSettledAlerts(b *testing.B) {
	ctx := context.Background()
	s, now := benchLedger(b, 10000)
	var as []items.Alert
	for i := 0; i < 10000; i += 10 {
		as = append(as, items.Alert{Tenant: "acme", Key: fmt.Sprintf("wf:inv-%07d:send:0", i), Attempt: 1, Cause: items.CauseNoDedupe,
			Owner: "U1", Status: items.AlertPending, CreatedAt: now})
	}
	if n, err := s.AddAlerts(ctx, as); err != nil || n != len(as) {
		b.Fatalf("add alerts: %d %v", n, err)
	}
	if _, err := s.ClaimAlerts(ctx, items.AlertClaim{Group: items.AlertGroup{Tenant: "acme", Owner: "U1"}, Claim: "c", Now: now,
		Until: now.Add(time.Minute)}); err != nil {
		b.Fatal(err)
	}
	if n, err := s.FinishAlerts(ctx, items.AlertDelivery{Claim: "c", Channel: "C1", TS: "1.1", At: now}); err != nil || n != len(as) {
		b.Fatalf("finish: %d %v", n, err)
	}
	for b.Loop() {
		got, err := s.SettledAlerts(ctx, 200)
		if err != nil || len(got) != 0 {
			b.Fatalf("settled alerts: %d %v", len(got), err)
		}
	}
}
