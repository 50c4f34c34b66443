package cli

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/replaysafe/companion/alerts"
)

// alertsCollector presents how this process's sweeper and alert dispatcher run, for an alert rule that
// fires when either stops (deploy/prometheus/alerts.yml), and what the dispatches delivered.
type alertsCollector struct{ a *alertServices }

var (
	descSweepLastSuccess = prometheus.NewDesc("companion_sweep_last_success_timestamp_seconds",
		"When this process's last sweep that ended without an error ended, in Unix seconds; 0 before the first.", nil, nil)
	descSweepFailures = prometheus.NewDesc("companion_sweep_failures_total",
		"Sweeps of this process that stopped on an error (the store could not be read or written).", nil, nil)
	descDispatchLastSuccess = prometheus.NewDesc("companion_alert_dispatch_last_success_timestamp_seconds",
		"When this process's last alert dispatch that ended without an error ended, in Unix seconds; 0 before the first.", nil, nil)
	descDispatchFailures = prometheus.NewDesc("companion_alert_dispatch_failures_total",
		"Alert dispatches of this process that stopped on an error (the store could not be read or written).", nil, nil)
	descAlertMessages = prometheus.NewDesc("companion_alert_messages_total",
		"Alert messages this process delivered (to Slack, or to the log where no owner or no Slack is configured).", nil, nil)
	descAlertUpdates = prometheus.NewDesc("companion_alert_messages_updated_total",
		"Alert messages this process updated because items they carried were settled elsewhere (their buttons removed).", nil, nil)
	descAlertFailures = prometheus.NewDesc("companion_alert_delivery_failures_total",
		"Alert messages whose delivery or update failed in this process (Slack failed or did not answer); each is tried again at the next dispatch.", nil, nil)
)

// Describe implements prometheus.Collector.
func (alertsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSweepLastSuccess, descSweepFailures, descDispatchLastSuccess, descDispatchFailures,
		descAlertMessages, descAlertUpdates, descAlertFailures} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c alertsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, h := range []struct {
		last, failures *prometheus.Desc
		health         alerts.RunHealth
	}{{descSweepLastSuccess, descSweepFailures, c.a.sweeper.Health()}, {descDispatchLastSuccess, descDispatchFailures, c.a.dispatcher.Health()}} {
		last := 0.0
		if !h.health.LastSuccess.IsZero() {
			last = float64(h.health.LastSuccess.UnixNano()) / 1e9
		}
		ch <- prometheus.MustNewConstMetric(h.last, prometheus.GaugeValue, last)
		ch <- prometheus.MustNewConstMetric(h.failures, prometheus.CounterValue, float64(h.health.Failures))
	}
	t := c.a.dispatcher.Totals()
	ch <- prometheus.MustNewConstMetric(descAlertMessages, prometheus.CounterValue, float64(t.Messages))
	ch <- prometheus.MustNewConstMetric(descAlertUpdates, prometheus.CounterValue, float64(t.Updated))
	ch <- prometheus.MustNewConstMetric(descAlertFailures, prometheus.CounterValue, float64(t.Failed))
}
