package sqlitestore

import (
	"context"
	"database/sql"
	"strconv"

	"github.com/replaysafe/companion/items"
)

// Retention (items.Retention). A call removes up to a limit of settled items in one transaction on the
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

// removeSettledSQL removes the settled items of one tenant, destination and state, oldest change first,
// walking items_state_changed from its oldest end. Settled is items.Item.Settled in the columns: not
// needing a person, and succeeded, or failed with nothing for the sweeper (sweep_candidate = 0: not
// retryable, no duplicate effect).
const removeSettledSQL = `DELETE FROM items WHERE rowid IN (
	SELECT rowid FROM items INDEXED BY items_state_changed
		WHERE tenant = ?1 AND state = ?2 AND updated_at <= ?3 AND destination = ?4 AND needs_person = 0
		AND (state = 'succeeded' OR sweep_candidate = 0) ORDER BY updated_at LIMIT ?5)
	RETURNING key, doc`

// RemoveSettled implements items.RetentionStore.
func (s *Store) RemoveSettled(ctx context.Context, p items.RemoveParams) (int, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, unavailable(err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	changes := items.CountChanges{}
	var keys []string
	for _, state := range []items.State{items.StateSucceeded, items.StateFailed} {
		rows, err := tx.QueryContext(ctx, removeSettledSQL, p.Tenant, string(state), p.ChangedBefore.UnixNano(), p.Destination, p.Limit-len(keys))
		if err != nil {
			return 0, unavailable(err)
		}
		for rows.Next() {
			var key, doc string
			if err := rows.Scan(&key, &doc); err != nil {
				rows.Close()
				return 0, unavailable(err)
			}
			it, err := decode(doc)
			if err != nil {
				rows.Close()
				return 0, err
			}
			changes.Remove(it)
			keys = append(keys, key)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return 0, unavailable(err)
		}
		if len(keys) >= p.Limit {
			break
		}
	}
	if len(keys) == 0 {
		return 0, nil
	}
	del, err := tx.PrepareContext(ctx, `DELETE FROM alerts WHERE tenant = ? AND key = ?`)
	if err != nil {
		return 0, unavailable(err)
	}
	defer del.Close()
	for _, k := range keys {
		if _, err := del.ExecContext(ctx, p.Tenant, k); err != nil {
			return 0, unavailable(err)
		}
	}
	if err := s.writeCounts(ctx, tx, changes); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, unavailable(err)
	}
	// Give the freed pages back; a failure only leaves them for reuse.
	_, _ = s.w.ExecContext(ctx, `PRAGMA incremental_vacuum(`+strconv.Itoa(vacuumPages)+`)`)
	return len(keys), nil
}
