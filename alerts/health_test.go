package alerts_test

import (
	"testing"
	"time"

	"github.com/replaysafe/companion/alerts"
	"github.com/replaysafe/companion/items"
)

// The sweeper and the dispatcher keep how their runs went, for the metrics the alert rules read
// (companion_sweep_last_success_timestamp_seconds and its kin): a run that ends without an error sets
// the last success; one the store stops counts as a failure and leaves it as it was. The dispatcher adds
// up what its runs delivered.
func TestSweeperAndDispatcherKeepHowTheirRunsWent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, items.Config{})
	e.unknownItem("inv-1", withDedupe(items.DedupeNone))
	sw, err := alerts.NewSweeper(alerts.SweeperConfig{Ledger: e.ledger, Store: e.store, Logger: e.logger})
	if err != nil {
		t.Fatal(err)
	}
	d, err := alerts.NewDispatcher(alerts.DispatcherConfig{Ledger: e.ledger, Outbox: e.store, Logger: e.logger})
	if err != nil {
		t.Fatal(err)
	}
	if h := sw.Health(); h != (alerts.RunHealth{}) {
		t.Fatalf("before any sweep: %+v", h)
	}
	before := time.Now()
	if _, err := sw.RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := d.RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	for name, h := range map[string]alerts.RunHealth{"sweeper": sw.Health(), "dispatcher": d.Health()} {
		if h.Runs != 1 || h.Failures != 0 || h.LastSuccess.Before(before) || h.LastSuccess.After(time.Now()) {
			t.Errorf("%s after a run: %+v", name, h)
		}
	}
	if got := d.Totals(); got.Messages != 1 || got.Alerted != 1 || got.Queued != 1 {
		t.Errorf("dispatcher totals %+v, want one message with one alert", got)
	}

	last := sw.Health().LastSuccess
	if err := e.store.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := sw.RunOnce(e.ctx); err == nil {
		t.Fatal("a sweep of a closed store succeeded")
	}
	if _, err := d.RunOnce(e.ctx); err == nil {
		t.Fatal("a dispatch of a closed store succeeded")
	}
	for name, h := range map[string]alerts.RunHealth{"sweeper": sw.Health(), "dispatcher": d.Health()} {
		if h.Runs != 2 || h.Failures != 1 || (name == "sweeper" && !h.LastSuccess.Equal(last)) {
			t.Errorf("%s after a failed run: %+v", name, h)
		}
	}
}
