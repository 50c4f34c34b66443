package sqlitestore

import (
	"context"
	"time"

	"github.com/replaysafe/companion/items"
)

// batchItemsWhere selects a batch's items; the literal batch_id != ” lets the partial index items_batch
// serve.
const batchItemsWhere = `WHERE tenant = ? AND batch_id = ? AND batch_id != ''`

// BatchItems returns up to limit items of tenant registered by batch batchID, in (batch_index, key) order,
// after the position (afterIndex, afterKey) when afterKey is set. Items without a batch index (NULL) sort
// first, as SQLite sorts NULL first. The items_batch index (tenant, batch_id, batch_index, key) serves both
// the filter and the order. Returns ErrUnavailable when the store cannot be read.
func (s *Store) BatchItems(ctx context.Context, tenant, batchID string, afterIndex *int, afterKey string, limit int) ([]*items.Item, error) {
	q := batchItemsWhere
	args := []any{tenant, batchID}
	switch {
	case afterKey == "":
	case afterIndex == nil:
		q += ` AND (batch_index IS NOT NULL OR key > ?)`
		args = append(args, afterKey)
	default:
		// A row value comparison is a range seek on the index; NULL indexes compare as NULL and drop out,
		// which is right: they all sort before any index.
		q += ` AND (batch_index, key) > (?, ?)`
		args = append(args, *afterIndex, afterKey)
	}
	q += ` ORDER BY batch_index, key LIMIT ?`
	args = append(args, limit)
	return s.itemsWhere(ctx, q, args...)
}

// batchCountsSQL counts a batch's items per state. items_batch does not hold state and lease_expires_at,
// so the rows of the batch are read; a batch is at most a few pages of them.
const batchCountsSQL = `SELECT CASE WHEN state = ? AND lease_expires_at <= ? THEN ? ELSE state END AS st,
	count(*) FROM items INDEXED BY items_batch WHERE tenant = ? AND batch_id = ? AND batch_id != '' GROUP BY st`

// BatchCounts returns the number of tenant's items registered by batch batchID per state, counting an
// in-flight item whose lease ended at or before now as unknown. Returns ErrUnavailable when the store
// cannot be read.
func (s *Store) BatchCounts(ctx context.Context, tenant, batchID string, now time.Time) (map[items.State]int, error) {
	// Without INDEXED BY the planner (no ANALYZE statistics) scans every item of the tenant by primary key.
	rows, err := s.r.QueryContext(ctx, batchCountsSQL, string(items.StateInFlight), now.UnixMilli(), string(items.StateUnknown), tenant, batchID)
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	counts := map[items.State]int{}
	for rows.Next() {
		var state string
		var n int
		if err := rows.Scan(&state, &n); err != nil {
			return nil, unavailable(err)
		}
		counts[items.State(state)] += n
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable(err)
	}
	return counts, nil
}
