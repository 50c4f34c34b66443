package cli

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/replaysafe/companion/items/sqlitestore"
)

// writerCollector presents the SQLite ledger's one writer (its committer) as Prometheus counters: the
// share of time it is busy says whether the writes are limited by it, which more cores do not lift.
type writerCollector struct{ s *sqlitestore.Store }

var (
	descWriterBusy = prometheus.NewDesc("companion_sqlite_writer_busy_seconds_total",
		"Time the SQLite ledger's one writer spent reading, deciding, writing and committing groups of transitions.", nil, nil)
	descWriterCommitting = prometheus.NewDesc("companion_sqlite_writer_commit_seconds_total",
		"Of the writer's busy time, the part spent committing: writing the write-ahead log and its fsync.", nil, nil)
	descWriterCommits = prometheus.NewDesc("companion_sqlite_commits_total",
		"Transactions the SQLite ledger's writer committed (each a group of the transitions waiting at that moment).", nil, nil)
	descWriterTransitions = prometheus.NewDesc("companion_sqlite_transitions_total",
		"Transitions the SQLite ledger's writer took (a batch call is one), committed or answered an error.", nil, nil)
)

// Describe implements prometheus.Collector.
func (writerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descWriterBusy
	ch <- descWriterCommitting
	ch <- descWriterCommits
	ch <- descWriterTransitions
}

// Collect implements prometheus.Collector.
func (c writerCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.s.WriterTotals()
	ch <- prometheus.MustNewConstMetric(descWriterBusy, prometheus.CounterValue, t.Busy.Seconds())
	ch <- prometheus.MustNewConstMetric(descWriterCommitting, prometheus.CounterValue, t.Committing.Seconds())
	ch <- prometheus.MustNewConstMetric(descWriterCommits, prometheus.CounterValue, float64(t.Commits))
	ch <- prometheus.MustNewConstMetric(descWriterTransitions, prometheus.CounterValue, float64(t.Transitions))
}
