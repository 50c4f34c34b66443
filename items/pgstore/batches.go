package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/replaysafe/companion/items"
)

// BatchItems returns up to limit items of tenant registered by batch batchID, in (batch_index, key) order,
// after the position (afterIndex, afterKey) when afterKey is set; items without a batch index come first.
// The items_batch index serves both the filter and the order. Returns ErrUnavailable.
func (s *Store) BatchItems(ctx context.Context, tenant, batchID string, afterIndex *int, afterKey string, limit int) ([]*items.Item, error) {
	sql, args := batchItems(s.quoted, tenant, batchID, afterIndex, afterKey, limit)
	return s.itemsOf(ctx, sql, args...)
}

// BatchCounts returns the number of tenant's items registered by batch batchID per state, counting an
// in-flight item whose lease ended at or before now as unknown. Returns ErrUnavailable.
func (s *Store) BatchCounts(ctx context.Context, tenant, batchID string, now time.Time) (map[items.State]int, error) {
	type count struct {
		state string
		n     int64
	}
	rows, err := collect(ctx, s, func(r pgx.Rows) (count, error) {
		var c count
		return c, r.Scan(&c.state, &c.n)
	}, s.q.BatchCounts, tenant, batchID, now)
	if err != nil {
		return nil, err
	}
	out := map[items.State]int{}
	for _, c := range rows {
		out[items.State(c.state)] += int(c.n)
	}
	return out, nil
}
