package pgstore

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/replaysafe/companion/items"
)

// This file serves the sweeper, the alert outbox and the operator surface (alerts.SweepStore,
// alerts.Outbox, handlers.OperatorStore; items/itemstest.ExerciseOperators checks them).

// ListItems returns one page of the tenant's items matching p, in p's order. A row whose document cannot
// be read does not fail the list (one corrupt item would hide every other from the operator): it is named
// in the page's Unreadable and keeps its place, so that the cursor goes on past it. Returns an
// invalid_request error for a cursor it did not make, ErrUnavailable.
func (s *Store) ListItems(ctx context.Context, p items.ListParams) (items.ItemPage, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = items.DefaultListLimit
	}
	limit = min(limit, items.MaxListLimit)
	sql, args, err := listItems(s.quoted, p, limit+1)
	if err != nil {
		return items.ItemPage{}, err
	}
	type listed struct {
		updatedAt time.Time
		since     *time.Time
		key       string
		doc       []byte
	}
	rows, err := collect(ctx, s, func(r pgx.Rows) (listed, error) {
		var l listed
		return l, r.Scan(&l.updatedAt, &l.since, &l.key, &l.doc)
	}, sql, args...)
	if err != nil {
		return items.ItemPage{}, err
	}
	page := items.ItemPage{Items: []*items.Item{}}
	for i, r := range rows {
		if i == limit {
			last := rows[i-1]
			if p.Order == items.ListByNeedsPersonSince {
				page.NextCursor = items.SinceCursor{Since: utc(last.since), Key: last.key}.Encode()
			} else {
				page.NextCursor = items.ListCursor{UpdatedAt: last.updatedAt.UTC(), Key: last.key}.Encode()
			}
			break
		}
		it, err := decodeItem(r.doc, p.Tenant, r.key)
		if err != nil {
			page.Unreadable = append(page.Unreadable, r.key)
			continue
		}
		page.Items = append(page.Items, it)
	}
	return page, nil
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// itemsOf runs a query of tenant, key and document, and decodes the documents.
func (s *Store) itemsOf(ctx context.Context, sql string, args ...any) ([]*items.Item, error) {
	rows, err := collect(ctx, s, func(r pgx.Rows) (storedRow, error) {
		var row storedRow
		return row, r.Scan(&row.tenant, &row.key, &row.doc)
	}, sql, args...)
	if err != nil {
		return nil, err
	}
	out := make([]*items.Item, len(rows))
	for i, r := range rows {
		if out[i], err = decodeItem(r.doc, r.tenant, r.key); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// storedRow is an item's row as a query of its document reads it.
type storedRow struct {
	tenant, key string
	doc         []byte
}

// ExpiredLeases returns up to limit items in flight whose lease ended at or before now, ordered by tenant
// and key, after the given reference (the zero reference starts at the beginning). Returns ErrUnavailable.
func (s *Store) ExpiredLeases(ctx context.Context, now time.Time, after items.ItemRef, limit int) ([]items.ItemRef, error) {
	return collect(ctx, s, func(r pgx.Rows) (items.ItemRef, error) {
		var ref items.ItemRef
		return ref, r.Scan(&ref.Tenant, &ref.Key)
	}, s.q.ExpiredLeases, now, after.Tenant, after.Key, limit)
}

// SweepCandidates returns up to limit items that may newly need a person, ordered by tenant and key after
// the given reference: items not yet needing a person that are unknown, or failed and retryable, or
// flagged with a duplicate effect, and not acknowledged by a person in their current attempt
// (items.Facts.SweepCandidate). Returns ErrUnavailable.
func (s *Store) SweepCandidates(ctx context.Context, after items.ItemRef, limit int) ([]*items.Item, error) {
	return s.itemsOf(ctx, s.q.SweepCandidates, after.Tenant, after.Key, limit)
}

// PendingAlertItems returns up to limit items that need a person and whose alert has not gone out yet,
// ordered by tenant and key after the given reference. Returns ErrUnavailable.
func (s *Store) PendingAlertItems(ctx context.Context, after items.ItemRef, limit int) ([]*items.Item, error) {
	return s.itemsOf(ctx, s.q.PendingAlertItems, after.Tenant, after.Key, limit)
}

// AddAlerts records pending alerts, in one statement, except those for which the outbox already holds one
// with the same item, attempt and cause. It returns how many it added. Returns ErrUnavailable.
func (s *Store) AddAlerts(ctx context.Context, as []items.Alert) (int, error) {
	if len(as) == 0 {
		return 0, nil
	}
	var tenant, key, cause, owner, escalateTo, batchID, dest []string
	var attempt []int32
	var after []time.Duration
	var created []time.Time
	for _, a := range as {
		tenant, key, cause, owner = append(tenant, a.Tenant), append(key, a.Key), append(cause, a.Cause), append(owner, a.Owner)
		escalateTo, batchID, dest = append(escalateTo, a.EscalateTo), append(batchID, a.BatchID), append(dest, a.Destination)
		attempt, after, created = append(attempt, int32(a.Attempt)), append(after, a.EscalateAfter), append(created, a.CreatedAt)
	}
	n, err := s.execRetrying(ctx, s.q.AddAlerts, tenant, key, attempt, cause, owner, escalateTo, after, batchID, dest, created)
	return int(n), err
}

// AlertGroups returns up to limit groups with alerts a dispatcher may claim at now: pending alerts per
// tenant, owner and batch, and sent alerts whose escalation is due per tenant, escalate_to owner and
// batch. Returns ErrUnavailable.
func (s *Store) AlertGroups(ctx context.Context, now time.Time, limit int) ([]items.AlertGroup, error) {
	return collect(ctx, s, func(r pgx.Rows) (items.AlertGroup, error) {
		var g items.AlertGroup
		return g, r.Scan(&g.Tenant, &g.Owner, &g.BatchID, &g.Escalation)
	}, s.q.AlertGroups, now, limit)
}

// scanAlert reads a row of alertColumns.
func scanAlert(r pgx.Rows) (items.Alert, error) {
	var a items.Alert
	var attempt int32
	var escalateAt, sentAt, escalatedAt, closedAt, attemptAt pgtype.Timestamptz
	err := r.Scan(&a.Tenant, &a.Key, &attempt, &a.Cause, &a.Owner, &a.EscalateTo, &a.EscalateAfter, &a.BatchID, &a.Destination,
		&a.Status, &a.Channel, &a.TS, &escalateAt, &a.EscalatedBy, &a.EscalationChannel, &a.EscalationTS, &a.CreatedAt, &sentAt,
		&escalatedAt, &closedAt, &attemptAt)
	a.Attempt = int(attempt)
	a.CreatedAt = a.CreatedAt.UTC()
	a.EscalateAt, a.SentAt, a.EscalatedAt, a.ClosedAt, a.PostAttemptAt = at(escalateAt), at(sentAt), at(escalatedAt), at(closedAt), at(attemptAt)
	return a, err
}

func at(t pgtype.Timestamptz) *time.Time {
	if !t.Valid {
		return nil
	}
	u := t.Time.UTC()
	return &u
}

// ClaimAlerts takes the claimable alerts of c.Group for the claim token until c.Until, in one statement
// that locks them in key order: of two dispatchers claiming one group at once, one gets the alerts and
// the other none. It returns the claimed alerts ordered by key. Returns ErrUnavailable.
func (s *Store) ClaimAlerts(ctx context.Context, c items.AlertClaim) ([]items.Alert, error) {
	g := c.Group
	q := s.q.ClaimAlerts
	if g.Escalation {
		q = s.q.ClaimEscalations
	}
	out, err := collect(ctx, s, scanAlert, q, c.Claim, c.Until, g.Tenant, g.Owner, g.BatchID, c.Now)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b items.Alert) int { // RETURNING gives no order; messages list items by key
		switch {
		case a.Key != b.Key:
			return compare(a.Key, b.Key)
		case a.Attempt != b.Attempt:
			return a.Attempt - b.Attempt
		}
		return compare(a.Cause, b.Cause)
	})
	return out, nil
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// FinishAlerts records where the message of a claimed group landed and releases the claim: the alerts
// become sent (escalating at sent time + escalate_after when an escalate_to owner is set) or, for an
// escalation, escalated. Alerts closed meanwhile stay closed. It returns how many alerts it changed.
// Returns ErrUnavailable.
func (s *Store) FinishAlerts(ctx context.Context, f items.AlertDelivery) (int, error) {
	q := s.q.FinishAlerts
	if f.Escalation {
		q = s.q.FinishEscalations
	}
	n, err := s.execRetrying(ctx, q, f.Channel, f.TS, f.At, f.Claim)
	return int(n), err
}

// RenewAlertClaim keeps the alerts held by claim with it until until: a dispatcher renews its claim while
// its message is being posted, so that a slow post is not taken for a dead dispatcher. It returns how
// many alerts the claim holds; 0 means it was released, finished or taken over. Returns ErrUnavailable.
func (s *Store) RenewAlertClaim(ctx context.Context, claim string, until time.Time) (int, error) {
	n, err := s.execRetrying(ctx, s.q.RenewAlertClaim, claim, until)
	return int(n), err
}

// MarkAlertPost records on the alerts held by claim that a message carrying them is about to be posted at
// at: until FinishAlerts records where it landed, the next sender knows the post may have landed with
// its answer lost, and looks for it. A zero at clears the mark (the post was refused: nothing landed). It
// returns how many alerts it changed. Returns ErrUnavailable.
func (s *Store) MarkAlertPost(ctx context.Context, claim string, at time.Time) (int, error) {
	mark := pgtype.Timestamptz{Time: at, Valid: !at.IsZero()}
	n, err := s.execRetrying(ctx, s.q.MarkAlertPost, claim, mark)
	return int(n), err
}

// NoteAlertMessage records on the alerts as where a message carrying them landed (m's channel and ts;
// for an escalation, as its escalation message) without finishing them, for alerts not yet finished that
// have no such message: a dispatcher whose claim ran out while it posted leaves its message where the
// dispatcher holding the group now finds it, and updates it instead of posting another. It returns how
// many alerts it changed. Returns ErrUnavailable.
func (s *Store) NoteAlertMessage(ctx context.Context, as []items.Alert, m items.AlertDelivery) (int, error) {
	var tenant, key, cause []string
	var attempt []int32
	for _, a := range as {
		tenant, key, cause, attempt = append(tenant, a.Tenant), append(key, a.Key), append(cause, a.Cause), append(attempt, int32(a.Attempt))
	}
	q := s.q.NoteAlertMessage
	if m.Escalation {
		q = s.q.NoteEscalationMessage
	}
	n, err := s.execRetrying(ctx, q, m.Channel, m.TS, tenant, key, attempt, cause)
	return int(n), err
}

// ReleaseAlerts gives up a claim without sending, so the next dispatch tries again. Returns ErrUnavailable.
func (s *Store) ReleaseAlerts(ctx context.Context, claim string) error {
	_, err := s.execRetrying(ctx, s.q.ReleaseAlerts, claim)
	return err
}

// CloseAlert closes one alert: nothing more is sent for it. It reports whether the alert was open.
// Returns ErrUnavailable.
func (s *Store) CloseAlert(ctx context.Context, a items.Alert, now time.Time) (bool, error) {
	n, err := s.execRetrying(ctx, s.q.CloseAlert, a.Tenant, a.Key, a.Attempt, a.Cause, now)
	return n > 0, err
}

// CloseItemAlerts closes every open alert about an item (it was resolved). It returns how many it closed.
// Returns ErrUnavailable.
func (s *Store) CloseItemAlerts(ctx context.Context, tenant, key string, now time.Time) (int, error) {
	n, err := s.execRetrying(ctx, s.q.CloseItemAlerts, tenant, key, now)
	return int(n), err
}

// RequestEscalation makes the sent alerts about an item that have an escalate_to owner due for escalation
// now, naming who asked. Alerts already escalated or closed are left alone, so a repeated request changes
// nothing. It returns how many alerts it changed. Returns ErrUnavailable.
func (s *Store) RequestEscalation(ctx context.Context, tenant, key, by string, now time.Time) (int, error) {
	n, err := s.execRetrying(ctx, s.q.RequestEscalation, tenant, key, by, now)
	return int(n), err
}

// ItemAlerts returns the alerts about an item, oldest first. Returns ErrUnavailable.
func (s *Store) ItemAlerts(ctx context.Context, tenant, key string) ([]items.Alert, error) {
	return collect(ctx, s, scanAlert, s.q.ItemAlerts, tenant, key)
}

// SettledAlerts returns up to limit alerts that went out (sent or escalated) and are still open although
// their item no longer waits for a person at the alert's attempt (settled elsewhere, or removed): the
// messages whose buttons the dispatcher updates. Returns ErrUnavailable.
func (s *Store) SettledAlerts(ctx context.Context, limit int) ([]items.Alert, error) {
	return collect(ctx, s, scanAlert, s.q.SettledAlerts, limit)
}

// MessageAlerts returns the alerts a message carried (as the first alert or as an escalation), ordered by
// key. Returns ErrUnavailable.
func (s *Store) MessageAlerts(ctx context.Context, channel, ts string) ([]items.Alert, error) {
	return collect(ctx, s, scanAlert, s.q.MessageAlerts, channel, ts)
}
