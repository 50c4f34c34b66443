package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/replaysafe/companion/items"
)

// Retention (items.Retention). A call selects up to a limit of settled items without locking anything,
// then removes those still at the version it selected, with their alerts and probe claims, and counts
// them removed, in one transaction: an item a transition changed since it was selected stays. The space
// of the removed rows is reused by the table once autovacuum has seen them.

// SettledDestinations implements items.RetentionStore: the destinations whose kept counts hold succeeded or
// failed items that do not need a person.
func (s *Store) SettledDestinations(ctx context.Context) ([]items.DestinationRef, error) {
	return collect(ctx, s, func(r pgx.Rows) (items.DestinationRef, error) {
		var d items.DestinationRef
		return d, r.Scan(&d.Tenant, &d.Destination)
	}, s.q.SettledDestinations)
}

// RemoveSettled implements items.RetentionStore.
func (s *Store) RemoveSettled(ctx context.Context, p items.RemoveParams) (int, *items.RemovePosition, error) {
	after := pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	afterKey := ""
	if p.After != nil {
		after, afterKey = pgtype.Timestamptz{Time: p.After.UpdatedAt, Valid: true}, p.After.Key
	}
	type candidate struct {
		key       string
		version   int64
		updatedAt time.Time
	}
	found, err := collect(ctx, s, func(r pgx.Rows) (candidate, error) {
		var c candidate
		return c, r.Scan(&c.key, &c.version, &c.updatedAt)
	}, s.q.SettledItems, p.Tenant, string(p.State), after, afterKey, p.ChangedBefore, p.Destination, p.Limit)
	if err != nil || len(found) == 0 {
		return 0, nil, err
	}
	var next *items.RemovePosition
	if len(found) == p.Limit {
		last := found[len(found)-1]
		next = &items.RemovePosition{UpdatedAt: last.updatedAt.UTC(), Key: last.key}
	}
	keys, versions := make([]string, len(found)), make([]int64, len(found))
	for i, c := range found {
		keys[i], versions[i] = c.key, c.version
	}
	removed, err := s.remove(ctx, p.Tenant, keys, versions)
	return removed, next, err
}

// remove removes the tenant's items still at the versions given, with their alerts and probe claims, and
// counts them removed, in one transaction. It returns how many it removed.
func (s *Store) remove(ctx context.Context, tenant string, keys []string, versions []int64) (int, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, interpretError(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if s.young() {
		if _, err := tx.Exec(ctx, customPlans); err != nil {
			return 0, interpretError(err)
		}
	}
	rows, err := tx.Query(ctx, s.q.RemoveItems, tenant, keys, versions)
	if err != nil {
		return 0, interpretError(err)
	}
	var gone []string
	counts := items.CountChanges{}
	var key string
	var doc []byte
	_, err = pgx.ForEachRow(rows, []any{&key, &doc}, func() error {
		it, err := decodeItem(doc, tenant, key)
		if err != nil {
			return err
		}
		counts.Remove(it)
		gone = append(gone, key)
		return nil
	})
	if err != nil {
		return 0, interpretError(err)
	}
	if len(gone) == 0 {
		return 0, nil
	}
	b := &pgx.Batch{}
	b.Queue(s.q.RemoveAlerts, tenant, gone)
	b.Queue(s.q.RemoveProbes, tenant, gone)
	if c := countArgs(counts); c != nil {
		b.Queue(s.q.AddCounts, c.args()...)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return 0, interpretError(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, interpretError(err)
	}
	return len(gone), nil
}
