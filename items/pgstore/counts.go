package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/replaysafe/companion/items"
)

// Kept counts (items.Counts): GET /v1/stats and every metrics scrape read item_counts instead of the
// items, so that they cost the same at two thousand items and at millions. Every transaction of
// transitions changes the counts of the groups its items left and entered (items.CountChanges) in the
// same transaction, so a count is never off by an item, whatever crashes.
//
// A group's counts are spread over countSlots rows (slot): a transaction adds its changes to the row of
// the slot of the server process that runs it (pg_backend_pid() % countSlots). A row is locked from the
// transaction's change to its commit, and one row per group would make every transaction of every
// replica that touches a group (all the claims of a destination) wait for the previous one's commit, one
// WAL flush at a time; the slots let the transactions of different connections commit together. Stats
// sums the slots: at most countSlots rows per group, however many items.

// Stats measures the tenant's items at now, in total and per destination; the empty tenant measures every
// tenant together. It reads the kept counts and the unresolved items, never the whole ledger. Returns
// ErrUnavailable.
func (s *Store) Stats(ctx context.Context, tenant string, now time.Time) (*items.Stats, error) {
	type counted struct {
		g items.CountGroup
		c items.Counts
	}
	rows, err := collect(ctx, s, func(r pgx.Rows) (counted, error) {
		var c counted
		var state string
		var n [9]int64
		err := r.Scan(&c.g.Tenant, &c.g.Destination, &state, &c.g.NeedsPerson, &n[0], &n[1], &n[2], &n[3], &n[4], &n[5], &n[6], &n[7], &n[8])
		c.g.State = items.State(state)
		c.c = items.Counts{Items: int(n[0]), Retries: int(n[1]), Attempted: int(n[2]), SameKeyRecoveries: int(n[3]),
			ManualResolutions: int(n[4]), DuplicateEffects: int(n[5]), EnteredUnknown: int(n[6]), HistoryDropped: int(n[7]),
			HistoryDroppedItems: int(n[8])}
		return c, err
	}, s.q.Counts, tenant)
	if err != nil {
		return nil, err
	}
	groups := make(map[items.CountGroup]items.Counts, len(rows))
	for _, r := range rows {
		groups[r.g] = groups[r.g].Add(r.c)
	}
	type oldest struct {
		dest string
		at   *time.Time
	}
	olds, err := collect(ctx, s, func(r pgx.Rows) (oldest, error) {
		var o oldest
		return o, r.Scan(&o.dest, &o.at)
	}, s.q.Unresolved, now, tenant)
	if err != nil {
		return nil, err
	}
	since := map[string]time.Time{}
	for _, o := range olds {
		if o.at == nil {
			continue
		}
		if t, ok := since[o.dest]; !ok || o.at.Before(t) {
			since[o.dest] = *o.at
		}
	}
	type conflict struct {
		dest string
		n    int64
	}
	cs, err := collect(ctx, s, func(r pgx.Rows) (conflict, error) {
		var c conflict
		return c, r.Scan(&c.dest, &c.n)
	}, s.q.Conflicts, tenant, items.CounterFingerprintConflicts)
	if err != nil {
		return nil, err
	}
	conflicts := map[string]int{}
	for _, c := range cs {
		conflicts[c.dest] += int(c.n)
	}
	return items.StatsOf(tenant, now, groups, since, conflicts), nil
}

// NeedsPersonCount returns how many of the tenant's items need a person, from the kept counts: the
// console's queue counts its pages by it. Returns ErrUnavailable.
func (s *Store) NeedsPersonCount(ctx context.Context, tenant string) (int, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	var n int64
	if err := s.pool.QueryRow(ctx, s.q.NeedsPersonCount, tenant).Scan(&n); err != nil {
		return 0, interpretError(err)
	}
	return int(n), nil
}

// AddCounter adds delta to a named counter of a tenant and destination. Returns ErrUnavailable.
func (s *Store) AddCounter(ctx context.Context, tenant, destination, name string, delta int) error {
	_, err := s.execRetrying(ctx, s.q.AddCounter, tenant, destination, name, delta)
	return err
}
