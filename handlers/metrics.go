package handlers

import (
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/replaysafe/companion/items"
)

// Metrics are the Prometheus measures served at GET /metrics. Two kinds live here:
//
//   - measures of the ledger (items per state, needs_person, the oldest unresolved age, retries,
//     fingerprint conflicts, same-key recoveries, manual resolutions, duplicate effects, repeated reports
//     dropped from the histories), read from the store at every scrape, per tenant, so they agree with
//     GET /v1/stats and with every replica;
//   - measures of this process (before-write decisions, HTTP request durations, the Go runtime), counted
//     since it started.
//
// Every series of a tenant's (the ledger's, the decisions) carries a tenant label, and an operator token
// is shown its own tenant's alone; the process's other measures are the process's, the same for every
// caller. Open metrics (--metrics-open, or open mode) show every tenant's series, each with its label.
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
			Help: "Before-write decisions answered by this process, by tenant, decision and reason.",
		}, []string{"tenant", "decision", "reason"}),
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

// ObserveDecision counts one before-write decision (single or in a batch) of a tenant.
func (m *Metrics) ObserveDecision(tenant string, d items.Decision, r items.Reason) {
	m.observeDecisions(tenant, d, r, 1)
}

// observeDecisions counts n before-write decisions of one tenant, decision and reason at once, as n calls
// of ObserveDecision would.
func (m *Metrics) observeDecisions(tenant string, d items.Decision, r items.Reason, n int) {
	if m == nil || n == 0 {
		return
	}
	m.decisions.WithLabelValues(tenant, string(d), string(r)).Add(float64(n))
}

// ObserveRequest records how long a request took. route is the route pattern (/v1/items/:key), never
// the raw path, so keys do not become label values.
func (m *Metrics) ObserveRequest(method, route string, status int, took time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(method, route, strconv.Itoa(status)).Observe(took.Seconds())
}

// gatherer returns what one scrape shows: the process's measures, the ledger's of each tenant in sc, and
// the scrape's own (the store's readiness, the measures per destination). only, when not empty, keeps of
// the process's series with a tenant label that tenant's alone.
func (m *Metrics) gatherer(sc scrapeCollector, only string) prometheus.Gatherer {
	ledger := prometheus.NewRegistry()
	ledger.MustRegister(ledgerCollector{sc.stats}, sc)
	var process prometheus.Gatherer = m.process
	if only != "" {
		process = tenantSeries{m.process, only}
	}
	return prometheus.Gatherers{process, ledger}
}

// tenantSeries gathers g keeping, of the series with a tenant label, those of one tenant.
type tenantSeries struct {
	g      prometheus.Gatherer
	tenant string
}

// Gather implements prometheus.Gatherer.
func (t tenantSeries) Gather() ([]*dto.MetricFamily, error) {
	families, err := t.g.Gather()
	for _, f := range families {
		f.Metric = slices.DeleteFunc(f.Metric, func(m *dto.Metric) bool {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tenant" {
					return l.GetValue() != t.tenant
				}
			}
			return false
		})
	}
	return families, err
}

// ledgerCollector presents one reading of the ledger's measures, per tenant.
type ledgerCollector struct {
	stats []*items.Stats
}

var (
	tenantLabel = []string{"tenant"}
	descItems   = prometheus.NewDesc("companion_items", "Items in the ledger, by tenant and state.", []string{"tenant", "state"}, nil)
	descNeeds   = prometheus.NewDesc("companion_needs_person", "Items waiting for their owner.", tenantLabel, nil)
	descAge     = prometheus.NewDesc("companion_oldest_unresolved_age_seconds",
		"Age of the oldest item that is unknown or needs a person (0 when there is none).", tenantLabel, nil)
	descEnteredUnknown = prometheus.NewDesc("companion_entered_unknown_total", "Items whose outcome was unknown at some point.", tenantLabel, nil)
	descRetries        = prometheus.NewDesc("companion_retries_total", "Attempts beyond each item's first.", tenantLabel, nil)
	descConflicts      = prometheus.NewDesc("companion_fingerprint_conflicts_total",
		"Before-writes answered conflict/fingerprint_mismatch: a key reused with another payload after a possible dispatch.", tenantLabel, nil)
	descRecoveries = prometheus.NewDesc("companion_same_key_recoveries_total",
		"Items that succeeded after a same-key retry: recovered by the receiver's idempotency key.", tenantLabel, nil)
	descResolutions = prometheus.NewDesc("companion_manual_resolutions_total", "Resolutions by a person (operator API or Slack), acknowledgements included.", tenantLabel, nil)
	descDuplicates  = prometheus.NewDesc("companion_duplicate_effects_total", "Items flagged with a duplicate effect.", tenantLabel, nil)
	descRemoved     = prometheus.NewDesc("companion_items_removed_total", "Settled items removed by retention.", tenantLabel, nil)
	descDropped     = prometheus.NewDesc("companion_history_repeats_dropped_total",
		"Repeated after-write reports the items' histories no longer hold (their history_dropped): not 0, a workflow replays its reports in a loop.", tenantLabel, nil)
	descDroppedItems = prometheus.NewDesc("companion_history_dropped_items_total",
		"Items whose history dropped repeated after-write reports: the items a workflow reported on in a loop.", tenantLabel, nil)
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
	for _, st := range c.stats {
		m, tenant := st.Measures, st.Tenant
		for _, s := range items.States {
			ch <- prometheus.MustNewConstMetric(descItems, prometheus.GaugeValue, float64(m.States[s]), tenant, string(s))
		}
		ch <- prometheus.MustNewConstMetric(descNeeds, prometheus.GaugeValue, float64(m.NeedsPerson), tenant)
		ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, float64(m.OldestUnresolvedAgeSeconds), tenant)
		for _, v := range []struct {
			d *prometheus.Desc
			n int
		}{{descEnteredUnknown, m.EnteredUnknown}, {descRetries, m.Retries}, {descConflicts, m.FingerprintConflicts},
			{descRecoveries, m.SameKeyRecoveries}, {descResolutions, m.ManualResolutions}, {descDuplicates, m.DuplicateEffects},
			{descRemoved, m.Removed}, {descDropped, m.HistoryDropped}, {descDroppedItems, m.HistoryDroppedItems}} {
			ch <- prometheus.MustNewConstMetric(v.d, prometheus.CounterValue, float64(v.n), tenant)
		}
	}
}
