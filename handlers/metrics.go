package handlers

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/replaysafe/companion/items"
)

// Metrics are the Prometheus measures served at GET /metrics. Two kinds live here:
//
//   - measures of the ledger (items per state, needs_person, the oldest unresolved age, retries,
//     fingerprint conflicts, same-key recoveries, manual resolutions, duplicate effects, repeated reports
//     dropped from the histories), read from the
//     store at every scrape for the caller's tenant, so they agree with GET /v1/stats and with every
//     replica;
//   - measures of this process (before-write decisions, HTTP request durations, the Go runtime), counted
//     since it started.
type Metrics struct {
	process   *prometheus.Registry
	decisions *prometheus.CounterVec
	requests  *prometheus.HistogramVec
}

// NewMetrics returns the process's measures, registered on a registry of their own.
func NewMetrics() *Metrics {
	m := &Metrics{
		process: prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "companion_decisions_total",
			Help: "Before-write decisions answered by this process, by decision and reason.",
		}, []string{"decision", "reason"}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "companion_http_request_duration_seconds",
			Help:    "Time to answer HTTP requests, by method, route and status.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"method", "route", "status"}),
	}
	m.process.MustRegister(m.decisions, m.requests, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Register adds a collector of this process's measures (the prober's reads, for one), shown with every
// scrape.
func (m *Metrics) Register(c prometheus.Collector) error { return m.process.Register(c) }

// ObserveDecision counts one before-write decision (single or in a batch).
func (m *Metrics) ObserveDecision(d items.Decision, r items.Reason) {
	if m == nil {
		return
	}
	m.decisions.WithLabelValues(string(d), string(r)).Inc()
}

// observeDecisions counts n before-write decisions of one decision and reason at once, as n calls of
// ObserveDecision would.
func (m *Metrics) observeDecisions(d items.Decision, r items.Reason, n int) {
	if m == nil || n == 0 {
		return
	}
	m.decisions.WithLabelValues(string(d), string(r)).Add(float64(n))
}

// ObserveRequest records how long a request took. route is the route pattern (/v1/items/:key), never
// the raw path, so keys do not become label values.
func (m *Metrics) ObserveRequest(method, route string, status int, took time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(method, route, strconv.Itoa(status)).Observe(took.Seconds())
}

// gatherer returns what one scrape shows: the process's measures, the ledger's for sc.st (none when nil)
// and the scrape's own (the store's readiness, the measures per destination).
func (m *Metrics) gatherer(sc scrapeCollector) prometheus.Gatherer {
	ledger := prometheus.NewRegistry()
	ledger.MustRegister(ledgerCollector{sc.st}, sc)
	return prometheus.Gatherers{m.process, ledger}
}

// ledgerCollector presents one reading of the ledger's measures.
type ledgerCollector struct {
	st *items.Stats
}

var (
	descItems = prometheus.NewDesc("companion_items", "Items in the ledger, by state.", []string{"state"}, nil)
	descNeeds = prometheus.NewDesc("companion_needs_person", "Items waiting for their owner.", nil, nil)
	descAge   = prometheus.NewDesc("companion_oldest_unresolved_age_seconds",
		"Age of the oldest item that is unknown or needs a person (0 when there is none).", nil, nil)
	descEnteredUnknown = prometheus.NewDesc("companion_entered_unknown_total", "Items whose outcome was unknown at some point.", nil, nil)
	descRetries        = prometheus.NewDesc("companion_retries_total", "Attempts beyond each item's first.", nil, nil)
	descConflicts      = prometheus.NewDesc("companion_fingerprint_conflicts_total",
		"Before-writes answered conflict/fingerprint_mismatch: a key reused with another payload after a possible dispatch.", nil, nil)
	descRecoveries = prometheus.NewDesc("companion_same_key_recoveries_total",
		"Items that succeeded after a same-key retry: recovered by the receiver's idempotency key.", nil, nil)
	descResolutions = prometheus.NewDesc("companion_manual_resolutions_total", "Resolutions by a person (operator API or Slack), acknowledgements included.", nil, nil)
	descDuplicates  = prometheus.NewDesc("companion_duplicate_effects_total", "Items flagged with a duplicate effect.", nil, nil)
	descRemoved     = prometheus.NewDesc("companion_items_removed_total", "Settled items removed by retention.", nil, nil)
	descDropped     = prometheus.NewDesc("companion_history_repeats_dropped_total",
		"Repeated after-write reports the items' histories no longer hold (their history_dropped): not 0, a workflow replays its reports in a loop.", nil, nil)
	descDroppedItems = prometheus.NewDesc("companion_history_dropped_items_total",
		"Items whose history dropped repeated after-write reports: the items a workflow reported on in a loop.", nil, nil)
)

// Describe implements prometheus.Collector.
func (ledgerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descItems, descNeeds, descAge, descEnteredUnknown, descRetries, descConflicts,
		descRecoveries, descResolutions, descDuplicates, descRemoved, descDropped, descDroppedItems} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c ledgerCollector) Collect(ch chan<- prometheus.Metric) {
	if c.st == nil {
		return
	}
	m := c.st.Measures
	for _, s := range items.States {
		ch <- prometheus.MustNewConstMetric(descItems, prometheus.GaugeValue, float64(m.States[s]), string(s))
	}
	ch <- prometheus.MustNewConstMetric(descNeeds, prometheus.GaugeValue, float64(m.NeedsPerson))
	ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, float64(m.OldestUnresolvedAgeSeconds))
	for _, v := range []struct {
		d *prometheus.Desc
		n int
	}{{descEnteredUnknown, m.EnteredUnknown}, {descRetries, m.Retries}, {descConflicts, m.FingerprintConflicts},
		{descRecoveries, m.SameKeyRecoveries}, {descResolutions, m.ManualResolutions}, {descDuplicates, m.DuplicateEffects},
		{descRemoved, m.Removed}, {descDropped, m.HistoryDropped}, {descDroppedItems, m.HistoryDroppedItems}} {
		ch <- prometheus.MustNewConstMetric(v.d, prometheus.CounterValue, float64(v.n))
	}
}
