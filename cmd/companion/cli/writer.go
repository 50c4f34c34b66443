package cli

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/replaysafe/companion/items/sqlitestore"
)

// writerCollector presents the SQLite ledger's one writer (its committer) as Prometheus counters: the
// share of time it is busy says whether the writes are limited by it, which more cores do not lift; and
// its item cache: its bound, what it holds, and how many lookups it answered (hits) or left to the
// database (misses).
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
	descCacheBound = prometheus.NewDesc("companion_sqlite_item_cache_bound_items",
		"How many of the items it wrote the SQLite ledger's writer keeps in memory at most, so that their after-writes need not read them again (--item-cache); 0: no cache.", nil, nil)
	descCacheItems = prometheus.NewDesc("companion_sqlite_item_cache_items",
		"How many items the SQLite ledger's writer keeps in memory now (at most companion_sqlite_item_cache_bound_items).", nil, nil)
	descCacheHits = prometheus.NewDesc("companion_sqlite_item_cache_hits_total",
		"Item lookups of the SQLite ledger's writer answered from its item cache, without reading the database.", nil, nil)
	descCacheMisses = prometheus.NewDesc("companion_sqlite_item_cache_misses_total",
		"Item lookups of the SQLite ledger's writer read from the database: new keys, items the cache no longer holds, or all of them with the cache off.", nil, nil)
)

// Describe implements prometheus.Collector.
func (writerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descWriterBusy
	ch <- descWriterCommitting
	ch <- descWriterCommits
	ch <- descWriterTransitions
	ch <- descCacheBound
	ch <- descCacheItems
	ch <- descCacheHits
	ch <- descCacheMisses
}

// Collect implements prometheus.Collector.
func (c writerCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.s.WriterTotals()
	ch <- prometheus.MustNewConstMetric(descWriterBusy, prometheus.CounterValue, t.Busy.Seconds())
	ch <- prometheus.MustNewConstMetric(descWriterCommitting, prometheus.CounterValue, t.Committing.Seconds())
	ch <- prometheus.MustNewConstMetric(descWriterCommits, prometheus.CounterValue, float64(t.Commits))
	ch <- prometheus.MustNewConstMetric(descWriterTransitions, prometheus.CounterValue, float64(t.Transitions))
	cache := c.s.ItemCacheTotals()
	ch <- prometheus.MustNewConstMetric(descCacheBound, prometheus.GaugeValue, float64(cache.Bound))
	ch <- prometheus.MustNewConstMetric(descCacheItems, prometheus.GaugeValue, float64(cache.Items))
	ch <- prometheus.MustNewConstMetric(descCacheHits, prometheus.CounterValue, float64(cache.Hits))
	ch <- prometheus.MustNewConstMetric(descCacheMisses, prometheus.CounterValue, float64(cache.Misses))
}
