package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/replaysafe/companion/items"
)

// Measures over time (items.SeriesStore). The series table holds a row of items.Tally per tenant, step
// (1h, 1d), bucket start and destination. write adds the events of the items it writes
// (items.SeriesChanges.Move) in the transaction that writes them, one statement per row a group changes
// (an hour and a day per destination, for a group of one item or of 2,000), so the rows are committed
// with the items or not at all: a crash, a failed commit or a failed group leaves them as exact as the
// items. A ledger of an earlier build gets an empty table: what its items recorded before is not counted
// (their later events are).
//
//	series primary key (tenant, step, start, destination)
//	                                         SeriesRows: one tenant's buckets of a step, a range of start
//	series_start (step, start)               RemoveSeriesRows: the rows past their keeping, of every tenant
//	releases (rowid)                         RecordRelease: the last one recorded
//	releases_at (at)                         Releases: a range of times, in order

// seriesCounts are the columns of a row's counts, in the order of items.TallyColumns.
var seriesCounts = items.TallyColumns

// seriesValues returns the values of seriesCounts of t.
func seriesValues(t *items.Tally) []any {
	var v []any
	for _, n := range t.Columns() {
		v = append(v, n)
	}
	return v
}

// seriesFrom sets t from the values of seriesCounts as the driver gives them (int64; nil for NULL):
// database/sql scans into an *any as it is, where into an *int it converts by way of a string.
func seriesFrom(t *items.Tally, v []any) {
	n := make([]int64, len(v))
	for i := range v {
		n[i], _ = v[i].(int64)
	}
	*t = items.TallyOfColumns(n)
}

var seriesSchema = `
CREATE TABLE IF NOT EXISTS series (
	tenant      TEXT NOT NULL,
	step        TEXT NOT NULL,
	start       INTEGER NOT NULL,
	destination TEXT NOT NULL,
	` + strings.Join(seriesCounts, " INTEGER NOT NULL DEFAULT 0,\n\t") + ` INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (tenant, step, start, destination)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS series_start ON series (step, start);
CREATE TABLE IF NOT EXISTS releases (
	at      INTEGER NOT NULL,
	version TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS releases_at ON releases (at);
`

// addSeriesSQL adds a change to a row of the series.
var addSeriesSQL = func() string {
	set := make([]string, len(seriesCounts))
	for i, c := range seriesCounts {
		set[i] = c + " = " + c + " + excluded." + c
	}
	return `INSERT INTO series (tenant, step, start, destination, ` + strings.Join(seriesCounts, ", ") + `) VALUES (?, ?, ?, ?` +
		strings.Repeat(", ?", len(seriesCounts)) + `) ON CONFLICT (tenant, step, start, destination) DO UPDATE SET ` + strings.Join(set, ", ")
}()

// seriesRowsSQL reads a tenant's rows of a step in a range of bucket starts, of one destination or of all
// together, summed per bucket.
var seriesRowsSQL = func() string {
	sums := make([]string, len(seriesCounts))
	for i, c := range seriesCounts {
		sums[i] = "sum(" + c + ")"
	}
	return `SELECT start, ` + strings.Join(sums, ", ") + ` FROM series
	WHERE tenant = ?1 AND step = ?2 AND start >= ?3 AND start < ?4 AND (?5 = '' OR destination = ?5) GROUP BY start`
}()

// removeSeriesSQL removes a step's rows whose bucket starts before a time.
const removeSeriesSQL = `DELETE FROM series INDEXED BY series_start WHERE step = ?1 AND start < ?2`

// Release queries: the last one recorded, and those of a range (at in nanoseconds).
const (
	lastReleaseSQL = `SELECT version FROM releases ORDER BY rowid DESC LIMIT 1`
	releasesSQL    = `SELECT version, at FROM releases WHERE at >= ?1 AND at < ?2 ORDER BY at`
)

func (s *Store) migrateSeries(ctx context.Context) error {
	if _, err := s.w.ExecContext(ctx, seriesSchema); err != nil {
		return fmt.Errorf("sqlitestore: migrate %s: %w", s.path, err)
	}
	return nil
}

// writeSeries adds the changes a transaction's writes made to the series, one statement per row.
func (s *Store) writeSeries(ctx context.Context, tx *sql.Tx, changes items.SeriesChanges) error {
	var add *sql.Stmt
	for k, t := range changes {
		if t.IsZero() {
			continue
		}
		if add == nil {
			add = tx.StmtContext(ctx, s.addSeries)
		}
		if _, err := add.ExecContext(ctx, append([]any{k.Tenant, string(k.Step), k.Start, k.Destination}, seriesValues(&t)...)...); err != nil {
			return unavailable(err)
		}
		if err := s.injected("series"); err != nil {
			return unavailable(err)
		}
	}
	return nil
}

// SeriesRows implements items.SeriesStore: one row per bucket, summed in the query.
func (s *Store) SeriesRows(ctx context.Context, q items.SeriesQuery) ([]items.SeriesRow, error) {
	var out []items.SeriesRow
	values := make([]any, 1+len(seriesCounts))
	into := make([]any, len(values))
	for i := range values {
		into[i] = &values[i]
	}
	err := s.scan(ctx, func(rows *sql.Rows) error {
		if err := rows.Scan(into...); err != nil {
			return err
		}
		start, _ := values[0].(int64)
		r := items.SeriesRow{Destination: q.Destination, Start: time.Unix(start, 0).UTC()}
		seriesFrom(&r.Tally, values[1:])
		out = append(out, r)
		return nil
	}, seriesRowsSQL, q.Tenant, string(q.Step), q.From.Unix(), q.To.Unix(), q.Destination)
	return out, err
}

// CountConflicts implements items.SeriesStore: the kept counter and the series' rows in one transaction.
func (s *Store) CountConflicts(ctx context.Context, tenant, destination string, at time.Time, n int) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return unavailable(err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, addCounterSQL, tenant, destination, items.CounterFingerprintConflicts, n); err != nil {
		return unavailable(err)
	}
	changes := items.SeriesChanges{}
	changes.Add(tenant, destination, at, items.Tally{Conflicts: n})
	if err := s.writeSeries(ctx, tx, changes); err != nil {
		return err
	}
	return unavailable(tx.Commit())
}

// RecordRelease implements items.SeriesStore.
func (s *Store) RecordRelease(ctx context.Context, version string, at time.Time) (bool, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return false, unavailable(err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	var last string
	switch err := tx.QueryRowContext(ctx, lastReleaseSQL).Scan(&last); {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return false, unavailable(err)
	case last == version:
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO releases (at, version) VALUES (?, ?)`, at.UnixNano(), version); err != nil {
		return false, unavailable(err)
	}
	if err := tx.Commit(); err != nil {
		return false, unavailable(err)
	}
	return true, nil
}

// Releases implements items.SeriesStore.
func (s *Store) Releases(ctx context.Context, from, to time.Time) ([]items.Release, error) {
	var out []items.Release
	err := s.scan(ctx, func(rows *sql.Rows) error {
		var r items.Release
		var at int64
		if err := rows.Scan(&r.Version, &at); err != nil {
			return err
		}
		r.At = time.Unix(0, at).UTC()
		out = append(out, r)
		return nil
	}, releasesSQL, from.UnixNano(), to.UnixNano())
	return out, err
}

// RemoveSeriesRows implements items.SeriesStore: a statement per step, through series_start.
func (s *Store) RemoveSeriesRows(ctx context.Context, hours, days time.Time) (int, error) {
	n := 0
	for step, before := range map[items.SeriesStep]time.Time{items.StepHour: hours, items.StepDay: days} {
		res, err := s.w.ExecContext(ctx, removeSeriesSQL, string(step), before.Unix())
		if err != nil {
			return n, unavailable(err)
		}
		c, err := res.RowsAffected()
		if err != nil {
			return n, unavailable(err)
		}
		n += int(c)
	}
	return n, nil
}
