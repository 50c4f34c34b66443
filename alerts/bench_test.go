package alerts_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/replaysafe/companion/alerts"
	"github.com/replaysafe/companion/items"
)

// BenchmarkSweepExpiredLeases measures one sweep over 1,000 items whose lease ended (each expiry is one
// durable transaction), then one dispatch of their alerts (one batch: one message) to the log.
func BenchmarkSweepExpiredLeases(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		e := newEnv(b, items.Config{})
		var ps []items.BeforeWriteParams
		for i := range 1000 {
			idx := i
			ps = append(ps, items.BeforeWriteParams{Tenant: "default", Key: fmt.Sprintf("inv-%04d", i), Fingerprint: fingerprint,
				Destination: "billing", LeaseSeconds: 60, BatchID: "exec-1", BatchIndex: &idx})
		}
		if _, err := e.ledger.BeforeWriteMany(e.ctx, "default", ps); err != nil {
			b.Fatal(err)
		}
		e.advance(time.Minute)
		s, _ := alerts.NewSweeper(alerts.SweeperConfig{Ledger: e.ledger, Store: e.store, Logger: e.logger})
		d, _ := alerts.NewDispatcher(alerts.DispatcherConfig{Ledger: e.ledger, Outbox: e.store, Logger: e.logger})
		b.StartTimer()
		start := time.Now()
		c, err := s.RunOnce(e.ctx)
		if err != nil || c.Expired != 1000 {
			b.Fatalf("%+v %v", c, err)
		}
		swept := time.Since(start)
		dc, err := d.RunOnce(e.ctx)
		if err != nil || dc.Messages != 1 || dc.Alerted != 1000 {
			b.Fatalf("%+v %v", dc, err)
		}
		b.ReportMetric(float64(swept.Milliseconds()), "sweep-ms")
		b.ReportMetric(float64((time.Since(start) - swept).Milliseconds()), "dispatch-ms")
	}
}
