package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/replaysafe/companion/items"
)

// Kept counts (items.Counts): GET /v1/stats and every metrics scrape read the item_counts table, a row
// per tenant, destination, state and needs_person, instead of the items. write changes it in the
// transaction that writes the items, so a count is never off by an item, even after a crash; a ledger of
// an earlier build gets its counts from one scan of the items the first time it opens.
//
// history_dropped and history_dropped_items (items.Counts.HistoryDropped, HistoryDroppedItems) came
// later than the table: migrateCounts adds them to an existing item_counts with a default of 0. That is
// exact for the ledger of an earlier release: no build before these columns wrote an item's
// history_dropped, so every item it counted contributes 0 to both. (A ledger written only by a
// development build of main between the two changes could hold items whose history_dropped is not
// 0; their drops stay uncounted in these sums, the items themselves still show them.) For the same
// reason recountSQL, which counts a ledger whose item_counts never existed, leaves both at 0: the
// count is in each item's encoded document, not in a column a scan could sum.

const countsSchema = `
CREATE TABLE IF NOT EXISTS item_counts (
	tenant            TEXT NOT NULL,
	destination       TEXT NOT NULL,
	state             TEXT NOT NULL,
	needs_person      INTEGER NOT NULL,
	items             INTEGER NOT NULL,
	retries           INTEGER NOT NULL,
	attempted         INTEGER NOT NULL,
	recoveries        INTEGER NOT NULL,
	resolutions       INTEGER NOT NULL,
	duplicates        INTEGER NOT NULL,
	entered_unknown   INTEGER NOT NULL,
	history_dropped       INTEGER NOT NULL DEFAULT 0,
	history_dropped_items INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (tenant, destination, state, needs_person)
) WITHOUT ROWID;
`

// countsBuilt marks, in meta, a ledger whose item_counts hold every item.
const countsBuilt = "item_counts_built"

// recountSQL counts the items as write keeps them counted, in one scan of the table: every column of
// item_counts but history_dropped and history_dropped_items (see above), in recountColumns' order.
const recountSQL = `SELECT tenant, destination, state, needs_person, count(*), sum(max(attempt - 1, 0)), sum(attempt >= 1),
	sum(same_key_recovered), sum(resolutions), sum(duplicate_effect), sum(entered_unknown)
	FROM items GROUP BY tenant, destination, state, needs_person`

// recountColumns are the columns of item_counts recountSQL fills.
const recountColumns = `(tenant, destination, state, needs_person, items, retries, attempted, recoveries, resolutions, duplicates,
	entered_unknown)`

// addCountsSQL adds a change to a group's counts.
const addCountsSQL = `INSERT INTO item_counts (tenant, destination, state, needs_person, items, retries, attempted, recoveries,
	resolutions, duplicates, entered_unknown, history_dropped, history_dropped_items) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (tenant, destination, state, needs_person) DO UPDATE SET items = items + excluded.items,
	retries = retries + excluded.retries, attempted = attempted + excluded.attempted,
	recoveries = recoveries + excluded.recoveries, resolutions = resolutions + excluded.resolutions,
	duplicates = duplicates + excluded.duplicates, entered_unknown = entered_unknown + excluded.entered_unknown,
	history_dropped = history_dropped + excluded.history_dropped,
	history_dropped_items = history_dropped_items + excluded.history_dropped_items`

// migrateCounts creates item_counts, adds the columns an item_counts of an earlier build lacks (see above:
// their 0 is exact), and, the first time, fills it from the items, in one transaction with the marker.
func (s *Store) migrateCounts(ctx context.Context) error {
	if _, err := s.w.ExecContext(ctx, countsSchema); err != nil {
		return fmt.Errorf("sqlitestore: migrate %s: %w", s.path, err)
	}
	for _, col := range []string{"history_dropped", "history_dropped_items"} {
		have, err := s.hasColumn(ctx, "item_counts", col)
		if err != nil {
			return fmt.Errorf("sqlitestore: migrate %s: %w", s.path, err)
		}
		if !have {
			if _, err := s.w.ExecContext(ctx, `ALTER TABLE item_counts ADD COLUMN `+col+` INTEGER NOT NULL DEFAULT 0`); err != nil {
				return fmt.Errorf("sqlitestore: migrate %s: %w", s.path, err)
			}
		}
	}
	// An empty item_counts left by a start stopped here is filled below: the marker is written only with
	// the counts.
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlitestore: migrate %s: %w", s.path, err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	res, err := tx.ExecContext(ctx, `INSERT INTO meta (name, value) VALUES (?, 1) ON CONFLICT DO NOTHING`, countsBuilt)
	if err != nil {
		return fmt.Errorf("sqlitestore: migrate %s: %w", s.path, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("sqlitestore: migrate %s: %w", s.path, err)
	}
	if n == 1 { // not built before
		if _, err := tx.ExecContext(ctx, `DELETE FROM item_counts; INSERT INTO item_counts `+recountColumns+` `+recountSQL); err != nil {
			return fmt.Errorf("sqlitestore: count the items of %s: %w", s.path, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlitestore: migrate %s: %w", s.path, err)
	}
	return nil
}

// writeCounts adds the changes a transaction's writes made to the kept counts, one statement per group
// that changed (a handful, even for a batch of 500).
func (s *Store) writeCounts(ctx context.Context, tx *sql.Tx, changes items.CountChanges) error {
	var add *sql.Stmt
	for g, c := range changes {
		if c.IsZero() {
			continue
		}
		if add == nil {
			add = tx.StmtContext(ctx, s.addCounts)
		}
		if _, err := add.ExecContext(ctx, g.Tenant, g.Destination, string(g.State), boolInt(g.NeedsPerson), c.Items, c.Retries,
			c.Attempted, c.SameKeyRecoveries, c.ManualResolutions, c.DuplicateEffects, c.EnteredUnknown, c.HistoryDropped, c.HistoryDroppedItems); err != nil {
			return unavailable(err)
		}
	}
	return nil
}

// countsSQL reads the kept counts of one tenant (a range of the primary key), or of every tenant.
const countsSQL = `SELECT tenant, destination, state, needs_person, items, retries, attempted, recoveries, resolutions, duplicates,
	entered_unknown, history_dropped, history_dropped_items FROM item_counts WHERE (?1 = '' OR tenant = ?1) AND items != 0`

// unresolvedSQL finds, per destination, since when its oldest unresolved item is unresolved (see
// items.Item.UnresolvedSince), reading only the partial indexes of the unresolved items: those needing a
// person, the leases, and the sweep candidates (an unknown item not needing a person is one). The times
// are in nanoseconds; leases are kept in milliseconds.
const unresolvedSQL = `
	SELECT destination, min(CASE WHEN needs_person_since IS NOT NULL THEN needs_person_since
		WHEN state = 'in_flight' AND lease_expires_at <= ?1 THEN lease_expires_at * 1000000 ELSE updated_at END)
		FROM items INDEXED BY items_needs_person_changed WHERE needs_person = 1 AND (?2 = '' OR tenant = ?2) GROUP BY destination
	UNION ALL
	SELECT destination, min(lease_expires_at) * 1000000 FROM items INDEXED BY items_lease
		WHERE state = 'in_flight' AND lease_expires_at <= ?1 AND needs_person = 0 AND (?2 = '' OR tenant = ?2) GROUP BY destination
	UNION ALL
	SELECT destination, min(updated_at) FROM items INDEXED BY items_sweep
		WHERE sweep_candidate = 1 AND state = 'unknown' AND needs_person = 0 AND (?2 = '' OR tenant = ?2) GROUP BY destination`

// Stats measures the tenant's items at now, in total and per destination; the empty tenant measures
// every tenant together. It reads the kept counts and the unresolved items, never the whole ledger.
// Returns ErrUnavailable.
func (s *Store) Stats(ctx context.Context, tenant string, now time.Time) (*items.Stats, error) {
	groups := map[items.CountGroup]items.Counts{}
	err := s.scan(ctx, func(rows *sql.Rows) error {
		var g items.CountGroup
		var c items.Counts
		var state string
		if err := rows.Scan(&g.Tenant, &g.Destination, &state, &g.NeedsPerson, &c.Items, &c.Retries, &c.Attempted,
			&c.SameKeyRecoveries, &c.ManualResolutions, &c.DuplicateEffects, &c.EnteredUnknown, &c.HistoryDropped, &c.HistoryDroppedItems); err != nil {
			return err
		}
		g.State = items.State(state)
		groups[g] = groups[g].Add(c)
		return nil
	}, countsSQL, tenant)
	if err != nil {
		return nil, err
	}
	since := map[string]time.Time{}
	err = s.scan(ctx, func(rows *sql.Rows) error {
		var d string
		var at sql.NullInt64
		if err := rows.Scan(&d, &at); err != nil || !at.Valid {
			return err
		}
		t := time.Unix(0, at.Int64)
		if old, ok := since[d]; !ok || t.Before(old) {
			since[d] = t
		}
		return nil
	}, unresolvedSQL, now.UnixMilli(), tenant)
	if err != nil {
		return nil, err
	}
	conflicts := map[string]int{}
	err = s.scan(ctx, func(rows *sql.Rows) error {
		var d string
		var v int
		if err := rows.Scan(&d, &v); err != nil {
			return err
		}
		conflicts[d] += v
		return nil
	}, `SELECT destination, sum(value) FROM counters WHERE (?1 = '' OR tenant = ?1) AND name = ?2 GROUP BY destination`,
		tenant, items.CounterFingerprintConflicts)
	if err != nil {
		return nil, err
	}
	return items.StatsOf(tenant, now, groups, since, conflicts), nil
}

// scan runs a query on a reader and calls row for each of its rows. Returns ErrUnavailable.
func (s *Store) scan(ctx context.Context, row func(*sql.Rows) error, q string, args ...any) error {
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return unavailable(err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows); err != nil {
			return unavailable(err)
		}
	}
	return unavailable(rows.Err())
}
