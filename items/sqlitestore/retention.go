package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"time"

	"github.com/replaysafe/companion/items"
)

// Retention (items.Retention). A call removes (with their alerts and probe claims) up to a limit of settled items in one transaction on the
// writer's connection, so every other write waits for it: the limit keeps that to milliseconds. The file
// gives the space back as it goes: a ledger created by this build has auto_vacuum=INCREMENTAL, and after
// each removal the pages it freed (at most vacuumPages) are released, also in small steps. (A ledger
// created before reuses the freed pages, so it stops growing, but does not shrink; VACUUM, offline,
// converts it.)

// vacuumPages bounds the pages one incremental vacuum step releases (1 MiB): about what a call of
// items.DefaultRemoveLimit items frees.
const vacuumPages = 256

// settledDestinationsSQL lists, from the kept counts, the destinations holding items that may be settled.
const settledDestinationsSQL = `SELECT DISTINCT tenant, destination FROM item_counts
	WHERE items > 0 AND needs_person = 0 AND state IN ('succeeded', 'failed')`

// SettledDestinations implements items.RetentionStore.
func (s *Store) SettledDestinations(ctx context.Context) ([]items.DestinationRef, error) {
	var out []items.DestinationRef
	err := s.scan(ctx, func(rows *sql.Rows) error {
		var d items.DestinationRef
		if err := rows.Scan(&d.Tenant, &d.Destination); err != nil {
			return err
		}
		out = append(out, d)
		return nil
	}, settledDestinationsSQL)
	return out, err
}

// settledSQL selects, on a reader, the settled items of one tenant, destination and state (succeeded or
// failed) after a position, oldest change first, walking items_state_changed. Settled is
// items.Item.Settled in the columns: not needing a person, and nothing for the sweeper (sweep_candidate =
// 0: not retryable and no duplicate effect, or a person acknowledged them). The items of other
// destinations it passes over are read, but on a reader: no write waits for them.
const settledSQL = `SELECT key, version, updated_at FROM items INDEXED BY items_state_changed
	WHERE tenant = ?1 AND state = ?2 AND (updated_at, key) > (?3, ?4) AND updated_at <= ?5 AND destination = ?6
	AND needs_person = 0 AND sweep_candidate = 0 ORDER BY updated_at, key LIMIT ?7`

// removeItemSQL removes one selected item if it has not changed since.
const removeItemSQL = `DELETE FROM items WHERE tenant = ? AND key = ? AND version = ? RETURNING ` + storedColumns

// RemoveSettled implements items.RetentionStore.
func (s *Store) RemoveSettled(ctx context.Context, p items.RemoveParams) (int, *items.RemovePosition, error) {
	after := items.RemovePosition{UpdatedAt: time.Unix(0, -1<<62)}
	if p.After != nil {
		after = *p.After
	}
	type candidate struct {
		key     string
		version int64
	}
	var found []candidate
	var last items.RemovePosition
	err := s.scan(ctx, func(rows *sql.Rows) error {
		var c candidate
		var at int64
		if err := rows.Scan(&c.key, &c.version, &at); err != nil {
			return err
		}
		found = append(found, c)
		last = items.RemovePosition{UpdatedAt: time.Unix(0, at), Key: c.key}
		return nil
	}, settledSQL, p.Tenant, string(p.State), after.UpdatedAt.UnixNano(), after.Key, p.ChangedBefore.UnixNano(), p.Destination, p.Limit)
	if err != nil || len(found) == 0 {
		return 0, nil, err
	}
	next := &last
	if len(found) < p.Limit {
		next = nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, nil, unavailable(err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	remove, err := tx.PrepareContext(ctx, removeItemSQL)
	if err != nil {
		return 0, nil, unavailable(err)
	}
	defer remove.Close()
	var removeRecords []*sql.Stmt // the item's alerts and probe claims go with it
	for _, q := range []string{`DELETE FROM alerts WHERE tenant = ? AND key = ?`, `DELETE FROM probes WHERE tenant = ? AND key = ?`} {
		st, err := tx.PrepareContext(ctx, q)
		if err != nil {
			return 0, nil, unavailable(err)
		}
		defer st.Close()
		removeRecords = append(removeRecords, st)
	}
	changes := items.CountChanges{}
	removed := 0
	var gone []string // the removed items' ids, for the committer's cache
	for _, c := range found {
		it, err := removeItem(ctx, remove, p.Tenant, c.key, c.version)
		if errors.Is(err, items.ErrNotFound) {
			continue // changed since it was selected
		}
		if err != nil {
			return 0, nil, err
		}
		for _, st := range removeRecords {
			if _, err := st.ExecContext(ctx, p.Tenant, c.key); err != nil {
				return 0, nil, unavailable(err)
			}
		}
		changes.Remove(it)
		removed++
		if s.cache != nil {
			gone = append(gone, itemID(p.Tenant, c.key))
		}
	}
	if err := s.writeCounts(ctx, tx, changes); err != nil {
		return 0, nil, err
	}
	// The committer's cache forgets them before the removal is committed: this transaction holds the
	// writer's one connection, so no group is between its read and its commit now, and one that committed
	// but has not yet put its items in the cache will not put them (putAll's gen). A commit that fails
	// below leaves them forgotten, which only costs a read.
	if len(gone) > 0 {
		s.cache.Drop(gone)
	}
	if err := tx.Commit(); err != nil {
		return 0, nil, unavailable(err)
	}
	// Give the freed pages back; a failure only leaves them for reuse.
	_, _ = s.w.ExecContext(ctx, `PRAGMA incremental_vacuum(`+strconv.Itoa(vacuumPages)+`)`)
	return removed, next, nil
}

// removeItem runs remove (removeItemSQL) and returns the item it removed: ErrNotFound when the item has
// changed since it was selected, ErrUnavailable, or the stored document's error.
func removeItem(ctx context.Context, remove *sql.Stmt, tenant, key string, version int64) (*items.Item, error) {
	return oneItem(remove.QueryContext(ctx, tenant, key, version))
}

// resolvedCandidatesSQL reads, through the partial index items_sweep, the sweep candidates a person has
// resolved at least once: the only rows an earlier build can have stored as candidates that are none now.
const resolvedCandidatesSQL = `SELECT ` + storedColumns + `, id FROM items INDEXED BY items_sweep
	WHERE sweep_candidate = 1 AND resolutions > 0`

// sweepCandidatesRefreshed marks, in meta, a ledger whose sweep_candidate columns count a person's
// acknowledgement (refreshSweepCandidates).
const sweepCandidatesRefreshed = "sweep_candidates_refreshed"

// refreshSweepCandidates corrects, once per ledger (a marker in meta), the sweep_candidate column of the
// items an earlier build stored as sweep candidates although a person acknowledged them
// (items.Facts.SweepCandidate counts an acknowledgement since 2026-12-02): without it they would stay
// candidates, never settled, until a request rewrote them. It reads only the candidates that were ever
// resolved (resolvedCandidatesSQL: the partial index's entries, and the resolutions column of their
// rows), and rewrites only the column, guarded by the version, of those whose facts say otherwise now;
// it returns how many it corrected. It runs at Open, before the committer and its cache. A document that
// no longer decodes is left as it is (Get names it).
//
// Once, not at every start: the pass costs 2.4–4 µs per candidate even when none was resolved (12–21 ms
// for 5,000 on the 2-core development VM, as much as the rest of that ledger's Open), 20–25 µs per
// resolved one; a later start reads the marker, 0.05 ms (BenchmarkOpenRefreshesSweepCandidates). An earlier build run again on the ledger afterwards would
// store an item it acknowledged as a candidate again; that item is not removed until its next write, as
// that build would not have removed it either.
func (s *Store) refreshSweepCandidates(ctx context.Context) (int, error) {
	var done int
	if err := s.w.QueryRowContext(ctx, `SELECT count(*) FROM meta WHERE name = ?`, sweepCandidatesRefreshed).Scan(&done); err != nil || done > 0 {
		return 0, err
	}
	type stale struct{ id, version int64 }
	var found []stale
	rows, err := s.w.QueryContext(ctx, resolvedCandidatesSQL)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		it, r, decodeErr, err := scanItem(rows, &id)
		if err != nil {
			return 0, err
		}
		if decodeErr == nil && !it.Facts().SweepCandidate {
			found = append(found, stale{id: id, version: r.version})
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	rows.Close()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	n := 0
	for _, f := range found {
		res, err := tx.ExecContext(ctx, `UPDATE items SET sweep_candidate = 0 WHERE id = ? AND version = ?`, f.id, f.version)
		if err != nil {
			return 0, err
		}
		if c, err := res.RowsAffected(); err == nil {
			n += int(c)
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO meta (name, value) VALUES (?, 1) ON CONFLICT DO NOTHING`, sweepCandidatesRefreshed); err != nil {
		return 0, err
	}
	return n, tx.Commit()
}
