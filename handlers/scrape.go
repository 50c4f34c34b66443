package handlers

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/replaysafe/companion/items"
)

// scrapeCollector presents what one scrape found beside the ledger's totals: whether the store was ready,
// and the measures per destination that the alert rules and the dashboard of deploy/ read.
type scrapeCollector struct {
	// ready: the store could be read and written at this scrape (GET /readyz's check).
	ready bool
	// stats are the ledger's measures of each tenant the scrape shows; nil when they could not be read.
	stats []*items.Stats
	cfg   items.Config
}

var (
	descStoreReady = prometheus.NewDesc("companion_store_ready",
		"1 when the store could be read and written at this scrape (as GET /readyz checks), 0 when not: the ledger's measures are then left out.", nil, nil)
	destinationLabel = []string{"tenant", "destination"}
	descDestNeeds    = prometheus.NewDesc("companion_destination_needs_person", "Items waiting for their owner, by destination.", destinationLabel, nil)
	descDestAge      = prometheus.NewDesc("companion_destination_oldest_unresolved_age_seconds",
		"Age of the destination's oldest item that is unknown or needs a person, from when it started needing one (0 when there is none).", destinationLabel, nil)
	descDestUnknown = prometheus.NewDesc("companion_destination_entered_unknown_total",
		"The destination's items whose outcome was unknown at some point.", destinationLabel, nil)
	descDestEscalate = prometheus.NewDesc("companion_destination_escalate_after_seconds",
		"The destination's escalate_after (defaults filled in): how long an item may wait with nobody acting; 0 is never.", destinationLabel, nil)
)

// Describe implements prometheus.Collector.
func (scrapeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descStoreReady, descDestNeeds, descDestAge, descDestUnknown, descDestEscalate} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the destinations that have items, per tenant.
func (c scrapeCollector) Collect(ch chan<- prometheus.Metric) {
	ready := 0.0
	if c.ready {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(descStoreReady, prometheus.GaugeValue, ready)
	for _, st := range c.stats {
		for name, m := range st.Destinations {
			ch <- prometheus.MustNewConstMetric(descDestNeeds, prometheus.GaugeValue, float64(m.NeedsPerson), st.Tenant, name)
			ch <- prometheus.MustNewConstMetric(descDestAge, prometheus.GaugeValue, float64(m.OldestUnresolvedAgeSeconds), st.Tenant, name)
			ch <- prometheus.MustNewConstMetric(descDestUnknown, prometheus.CounterValue, float64(m.EnteredUnknown), st.Tenant, name)
			ch <- prometheus.MustNewConstMetric(descDestEscalate, prometheus.GaugeValue, c.cfg.Destination(name).EscalateAfter.Seconds(), st.Tenant, name)
		}
	}
}
