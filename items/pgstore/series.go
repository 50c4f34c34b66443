package pgstore

import (
	"cmp"
	"context"
	"hash/fnv"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/replaysafe/companion/items"
)

// Measures over time (items.SeriesStore). The series table holds a row of items.Tally per tenant, step
// (1h, 1d), bucket start, destination and slot. Every transaction of transitions adds the events of the
// items it writes (items.SeriesChanges.Move) to the rows in the same transaction, in one statement
// (AddSeries) sent with the items' writes and the COMMIT: a row per destination and bucket the group
// touches (an hour and a day), whatever the number of items, so the rows are committed with the items or
// not at all, and are exact after a crash. As item_counts, a row is spread over countSlots slots, the
// slot of the server process that runs the transaction, so that the transactions of several connections
// and replicas that count in the same hour do not wait for each other's commits; the rows are upserted
// in key order, so that two of them that share a slot lock their rows in the same order. SeriesRows sums
// the slots. The events an item recorded before its ledger kept the series are not counted.

// seriesRows are the arrays of a change of the series (AddSeries), one element per row, in key order.
type seriesRows struct {
	tenant, step, destination []string
	start                     []time.Time
	counts                    [][]int64 // per column of items.TallyColumns
}

// seriesArgs returns the rows of the changes of the series, in the order of their keys (tenant, step,
// start, destination: the primary key's); nil when nothing changes.
func seriesArgs(sc items.SeriesChanges) *seriesRows {
	keys := slices.SortedFunc(maps.Keys(sc), func(a, b items.SeriesKey) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Step, b.Step), cmp.Compare(a.Start, b.Start),
			cmp.Compare(a.Destination, b.Destination))
	})
	r := seriesRows{counts: make([][]int64, len(items.TallyColumns))}
	for _, k := range keys {
		t := sc[k]
		if t.IsZero() {
			continue
		}
		r.tenant, r.step, r.destination = append(r.tenant, k.Tenant), append(r.step, string(k.Step)), append(r.destination, k.Destination)
		r.start = append(r.start, k.StartTime())
		for i, v := range t.Columns() {
			r.counts[i] = append(r.counts[i], v)
		}
	}
	if len(r.tenant) == 0 {
		return nil
	}
	return &r
}

func (r *seriesRows) args() []any {
	a := []any{r.tenant, r.step, r.start, r.destination}
	for _, c := range r.counts {
		a = append(a, c)
	}
	return a
}

// SeriesRows implements items.SeriesStore: one row per bucket, its destinations and slots summed.
func (s *Store) SeriesRows(ctx context.Context, q items.SeriesQuery) ([]items.SeriesRow, error) {
	return collect(ctx, s, func(r pgx.Rows) (items.SeriesRow, error) {
		row := items.SeriesRow{Destination: q.Destination}
		v := make([]int64, len(items.TallyColumns))
		into := []any{&row.Start}
		for i := range v {
			into = append(into, &v[i])
		}
		err := r.Scan(into...)
		row.Start = row.Start.UTC()
		row.Tally = items.TallyOfColumns(v)
		return row, err
	}, s.q.SeriesRows, q.Tenant, string(q.Step), q.From, q.To, q.Destination)
}

// CountConflicts implements items.SeriesStore: the kept counter and the series' day and hour in one
// statement.
func (s *Store) CountConflicts(ctx context.Context, tenant, destination string, at time.Time, n int) error {
	_, err := s.execRetrying(ctx, s.q.CountConflicts, tenant, destination, items.CounterFingerprintConflicts, n,
		items.StepDay.BucketStart(at), items.StepHour.BucketStart(at))
	return err
}

// releaseLock is the key of the advisory lock under which a replica records its release, so that two
// replicas of one version starting together record it once.
func releaseLock(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("companion releases\x00" + schema))
	return int64(h.Sum64())
}

// RecordRelease implements items.SeriesStore.
func (s *Store) RecordRelease(ctx context.Context, version string, at time.Time) (bool, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, interpretError(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, releaseLock(s.schema)); err != nil {
		return false, interpretError(err)
	}
	tag, err := tx.Exec(ctx, s.q.RecordRelease, at, version)
	if err != nil {
		return false, interpretError(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, interpretError(err)
	}
	return tag.RowsAffected() == 1, nil
}

// Releases implements items.SeriesStore.
func (s *Store) Releases(ctx context.Context, from, to time.Time) ([]items.Release, error) {
	return collect(ctx, s, func(r pgx.Rows) (items.Release, error) {
		var rel items.Release
		err := r.Scan(&rel.Version, &rel.At)
		rel.At = rel.At.UTC()
		return rel, err
	}, s.q.Releases, from, to)
}

// RemoveSeriesRows implements items.SeriesStore: a statement per step, through series_start.
func (s *Store) RemoveSeriesRows(ctx context.Context, hours, days time.Time) (int, error) {
	n := 0
	for _, step := range items.Steps {
		before := map[items.SeriesStep]time.Time{items.StepHour: hours, items.StepDay: days}[step]
		removed, err := s.execRetrying(ctx, s.q.RemoveSeries, string(step), before)
		if err != nil {
			return n, err
		}
		n += int(removed)
	}
	return n, nil
}
