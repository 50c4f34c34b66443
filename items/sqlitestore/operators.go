package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/replaysafe/companion/items"
)

// This file serves the sweeper, the alert outbox and the operator surface. Its schema is additive: the
// alerts and counters tables beside the items table; the items' indexes these queries use are declared
// with the items table (store.go), which says which index serves which query.

var operatorsSchema = `
CREATE TABLE IF NOT EXISTS alerts (
	tenant             TEXT NOT NULL,
	key                TEXT NOT NULL,
	attempt            INTEGER NOT NULL,
	cause              TEXT NOT NULL,
	owner              TEXT NOT NULL,
	escalate_to        TEXT NOT NULL DEFAULT '',
	escalate_after     INTEGER NOT NULL DEFAULT 0,
	batch_id           TEXT NOT NULL DEFAULT '',
	destination        TEXT NOT NULL DEFAULT '',
	status             TEXT NOT NULL,
	claim              TEXT,
	claimed_until      INTEGER,
	channel            TEXT NOT NULL DEFAULT '',
	ts                 TEXT NOT NULL DEFAULT '',
	escalate_at        INTEGER,
	escalated_by       TEXT NOT NULL DEFAULT '',
	escalation_channel TEXT NOT NULL DEFAULT '',
	escalation_ts      TEXT NOT NULL DEFAULT '',
	created_at         INTEGER NOT NULL,
	sent_at            INTEGER,
	escalated_at       INTEGER,
	closed_at          INTEGER,
	post_attempt_at    INTEGER,
	PRIMARY KEY (tenant, key, attempt, cause)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS alerts_pending ON alerts (tenant, owner, batch_id) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS alerts_escalate ON alerts (escalate_at) WHERE status = 'sent' AND escalate_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS alerts_message ON alerts (channel, ts);
CREATE INDEX IF NOT EXISTS alerts_escalation_message ON alerts (escalation_channel, escalation_ts);
CREATE INDEX IF NOT EXISTS alerts_owner ON alerts (tenant, owner);
CREATE INDEX IF NOT EXISTS alerts_claim ON alerts (claim) WHERE claim IS NOT NULL;
CREATE INDEX IF NOT EXISTS alerts_delivered_open ON alerts (tenant, key) WHERE status IN ('sent', 'escalated');
CREATE TABLE IF NOT EXISTS counters (
	tenant      TEXT NOT NULL,
	destination TEXT NOT NULL,
	name        TEXT NOT NULL,
	value       INTEGER NOT NULL,
	PRIMARY KEY (tenant, destination, name)
) WITHOUT ROWID;
`

func (s *Store) migrateOperators(ctx context.Context) error {
	if _, err := s.w.ExecContext(ctx, operatorsSchema+probesSchema); err != nil {
		return fmt.Errorf("sqlitestore: migrate %s: %w", s.path, err)
	}
	// Ledgers made before alerts carried their post attempt get the column (NULL: no post in doubt).
	have, err := s.hasColumn(ctx, "alerts", "post_attempt_at")
	if err != nil {
		return fmt.Errorf("sqlitestore: migrate %s: %w", s.path, err)
	}
	if !have {
		if _, err := s.w.ExecContext(ctx, `ALTER TABLE alerts ADD COLUMN post_attempt_at INTEGER`); err != nil {
			return fmt.Errorf("sqlitestore: migrate %s: %w", s.path, err)
		}
	}
	return nil
}

func nanos(t time.Time) int64 { return t.UnixNano() }

func fromNanos(n sql.NullInt64) *time.Time {
	if !n.Valid {
		return nil
	}
	t := time.Unix(0, n.Int64).UTC()
	return &t
}

func (s *Store) itemsWhere(ctx context.Context, where string, args ...any) ([]*items.Item, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+storedColumns+` FROM items `+where, args...)
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	var out []*items.Item
	for rows.Next() {
		it, _, err, scanErr := scanItem(rows)
		if scanErr != nil {
			return nil, unavailable(scanErr)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable(err)
	}
	return out, nil
}

// expiredLeasesSQL reads the partial index items_lease up to now, then sorts the few expired leases.
// Without INDEXED BY the planner (no ANALYZE statistics) walks every item by primary key instead.
const expiredLeasesSQL = `SELECT tenant, key FROM items INDEXED BY items_lease WHERE state = 'in_flight' AND lease_expires_at <= ?
	AND (tenant, key) > (?, ?) ORDER BY tenant, key LIMIT ?`

// ExpiredLeases returns up to limit items in flight whose lease ended at or before now, ordered by tenant
// and key, after the given reference (the zero reference starts at the beginning). Returns ErrUnavailable.
func (s *Store) ExpiredLeases(ctx context.Context, now time.Time, after items.ItemRef, limit int) ([]items.ItemRef, error) {
	rows, err := s.r.QueryContext(ctx, expiredLeasesSQL, now.UnixMilli(), after.Tenant, after.Key, limit)
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	var out []items.ItemRef
	for rows.Next() {
		var r items.ItemRef
		if err := rows.Scan(&r.Tenant, &r.Key); err != nil {
			return nil, unavailable(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable(err)
	}
	return out, nil
}

// sweepCandidatesWhere and pendingAlertItemsWhere page through their partial indexes, which hold only
// the items they select and are in (tenant, key) order.
const (
	sweepCandidatesWhere   = `INDEXED BY items_sweep WHERE sweep_candidate = 1 AND (tenant, key) > (?, ?) ORDER BY tenant, key LIMIT ?`
	pendingAlertItemsWhere = `INDEXED BY items_alert_pending WHERE alert_pending = 1 AND (tenant, key) > (?, ?) ORDER BY tenant, key LIMIT ?`
)

// SweepCandidates returns up to limit items that may newly need a person, ordered by tenant and key after
// the given reference: items not yet needing a person that are unknown, or failed and retryable, or
// flagged with a duplicate effect, and not acknowledged by a person in their current attempt
// (items.Facts.SweepCandidate). Returns ErrUnavailable.
func (s *Store) SweepCandidates(ctx context.Context, after items.ItemRef, limit int) ([]*items.Item, error) {
	return s.itemsWhere(ctx, sweepCandidatesWhere, after.Tenant, after.Key, limit)
}

// PendingAlertItems returns up to limit items that need a person and whose alert has not gone out yet,
// ordered by tenant and key after the given reference. Returns ErrUnavailable.
func (s *Store) PendingAlertItems(ctx context.Context, after items.ItemRef, limit int) ([]*items.Item, error) {
	return s.itemsWhere(ctx, pendingAlertItemsWhere, after.Tenant, after.Key, limit)
}

// AddAlerts records pending alerts, in one transaction, except those for which the outbox already holds
// one with the same item, attempt and cause. It returns how many it added. Returns ErrUnavailable.
func (s *Store) AddAlerts(ctx context.Context, as []items.Alert) (int, error) {
	if len(as) == 0 {
		return 0, nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, unavailable(err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	added := 0
	for _, a := range as {
		res, err := tx.ExecContext(ctx, `INSERT INTO alerts (tenant, key, attempt, cause, owner, escalate_to, escalate_after,
			batch_id, destination, status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?) ON CONFLICT DO NOTHING`,
			a.Tenant, a.Key, a.Attempt, a.Cause, a.Owner, a.EscalateTo, int64(a.EscalateAfter), a.BatchID, a.Destination, nanos(a.CreatedAt))
		if err != nil {
			return 0, unavailable(err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, unavailable(err)
		}
		added += int(n)
	}
	if err := tx.Commit(); err != nil {
		return 0, unavailable(err)
	}
	return added, nil
}

// AlertGroups returns up to limit groups with alerts a dispatcher may claim at now: pending alerts per
// tenant, owner and batch, and sent alerts whose escalation is due per tenant, escalate_to owner and
// batch. Returns ErrUnavailable.
func (s *Store) AlertGroups(ctx context.Context, now time.Time, limit int) ([]items.AlertGroup, error) {
	rows, err := s.r.QueryContext(ctx, `
		SELECT tenant, owner, batch_id, 0 FROM alerts
			WHERE status = 'pending' AND (claim IS NULL OR claimed_until <= ?) GROUP BY tenant, owner, batch_id
		UNION ALL
		SELECT tenant, escalate_to, batch_id, 1 FROM alerts
			WHERE status = 'sent' AND escalate_at IS NOT NULL AND escalate_at <= ? AND escalate_to != ''
			AND (claim IS NULL OR claimed_until <= ?) GROUP BY tenant, escalate_to, batch_id
		LIMIT ?`, nanos(now), nanos(now), nanos(now), limit)
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	var out []items.AlertGroup
	for rows.Next() {
		var g items.AlertGroup
		if err := rows.Scan(&g.Tenant, &g.Owner, &g.BatchID, &g.Escalation); err != nil {
			return nil, unavailable(err)
		}
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable(err)
	}
	return out, nil
}

const alertColumns = `tenant, key, attempt, cause, owner, escalate_to, escalate_after, batch_id, destination, status,
	channel, ts, escalate_at, escalated_by, escalation_channel, escalation_ts, created_at, sent_at, escalated_at, closed_at, post_attempt_at`

func scanAlerts(rows *sql.Rows) ([]items.Alert, error) {
	defer rows.Close()
	var out []items.Alert
	for rows.Next() {
		var a items.Alert
		var after, created int64
		var escalateAt, sentAt, escalatedAt, closedAt, attemptAt sql.NullInt64
		if err := rows.Scan(&a.Tenant, &a.Key, &a.Attempt, &a.Cause, &a.Owner, &a.EscalateTo, &after, &a.BatchID,
			&a.Destination, &a.Status, &a.Channel, &a.TS, &escalateAt, &a.EscalatedBy, &a.EscalationChannel,
			&a.EscalationTS, &created, &sentAt, &escalatedAt, &closedAt, &attemptAt); err != nil {
			return nil, unavailable(err)
		}
		a.EscalateAfter = time.Duration(after)
		a.CreatedAt = time.Unix(0, created).UTC()
		a.EscalateAt, a.SentAt, a.EscalatedAt, a.ClosedAt = fromNanos(escalateAt), fromNanos(sentAt), fromNanos(escalatedAt), fromNanos(closedAt)
		a.PostAttemptAt = fromNanos(attemptAt)
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable(err)
	}
	return out, nil
}

// ClaimAlerts takes the claimable alerts of c.Group for the claim token until c.Until, in one guarded
// update: of two dispatchers claiming one group at once, one gets the alerts and the other none. It
// returns the claimed alerts ordered by key. Returns ErrUnavailable.
func (s *Store) ClaimAlerts(ctx context.Context, c items.AlertClaim) ([]items.Alert, error) {
	g := c.Group
	cond := `tenant = ? AND owner = ? AND batch_id = ? AND status = 'pending'`
	if g.Escalation {
		cond = `tenant = ? AND escalate_to = ? AND batch_id = ? AND status = 'sent' AND escalate_at IS NOT NULL AND escalate_at <= ` +
			fmt.Sprint(nanos(c.Now))
	}
	rows, err := s.w.QueryContext(ctx, `UPDATE alerts SET claim = ?, claimed_until = ?
		WHERE `+cond+` AND (claim IS NULL OR claimed_until <= ?) RETURNING `+alertColumns,
		c.Claim, nanos(c.Until), g.Tenant, g.Owner, g.BatchID, nanos(c.Now))
	if err != nil {
		return nil, unavailable(err)
	}
	out, err := scanAlerts(rows)
	if err != nil {
		return nil, err
	}
	sortAlerts(out)
	return out, nil
}

func sortAlerts(as []items.Alert) {
	// RETURNING gives no order; messages list items by key.
	for i := 1; i < len(as); i++ {
		for j := i; j > 0 && alertLess(as[j], as[j-1]); j-- {
			as[j], as[j-1] = as[j-1], as[j]
		}
	}
}

func alertLess(a, b items.Alert) bool {
	if a.Key != b.Key {
		return a.Key < b.Key
	}
	if a.Attempt != b.Attempt {
		return a.Attempt < b.Attempt
	}
	return a.Cause < b.Cause
}

// FinishAlerts records where the message of a claimed group landed and releases the claim: the alerts
// become sent (escalating at sent time + escalate_after when an escalate_to owner is set) or, for an
// escalation, escalated. Alerts closed meanwhile stay closed. It returns how many alerts it changed.
// Returns ErrUnavailable.
func (s *Store) FinishAlerts(ctx context.Context, f items.AlertDelivery) (int, error) {
	var res sql.Result
	var err error
	if f.Escalation {
		res, err = s.w.ExecContext(ctx, `UPDATE alerts SET status = 'escalated', escalation_channel = ?, escalation_ts = ?,
			escalated_at = ?, claim = NULL, claimed_until = NULL, post_attempt_at = NULL WHERE claim = ? AND status = 'sent'`,
			f.Channel, f.TS, nanos(f.At), f.Claim)
	} else {
		res, err = s.w.ExecContext(ctx, `UPDATE alerts SET status = 'sent', channel = ?, ts = ?, sent_at = ?,
			escalate_at = CASE WHEN escalate_to != '' AND escalate_after > 0 THEN ? + escalate_after END,
			claim = NULL, claimed_until = NULL, post_attempt_at = NULL WHERE claim = ? AND status = 'pending'`,
			f.Channel, f.TS, nanos(f.At), nanos(f.At), f.Claim)
	}
	if err != nil {
		return 0, unavailable(err)
	}
	n, err := res.RowsAffected()
	return int(n), unavailable(err)
}

// RenewAlertClaim keeps the alerts held by claim with it until until: a dispatcher renews its claim while
// its message is being posted, so that a slow post is not taken for a dead dispatcher. It returns how
// many alerts the claim holds; 0 means it was released, finished or taken over. Returns ErrUnavailable.
func (s *Store) RenewAlertClaim(ctx context.Context, claim string, until time.Time) (int, error) {
	res, err := s.w.ExecContext(ctx, `UPDATE alerts SET claimed_until = ? WHERE claim = ?`, nanos(until), claim)
	if err != nil {
		return 0, unavailable(err)
	}
	n, err := res.RowsAffected()
	return int(n), unavailable(err)
}

// MarkAlertPost records on the alerts held by claim that a message carrying them is about to be posted at
// at: until FinishAlerts records where it landed, the next sender knows the post may have landed with
// its answer lost, and looks for it. A zero at clears the mark (the post was refused: nothing landed). It
// returns how many alerts it changed. Returns ErrUnavailable.
func (s *Store) MarkAlertPost(ctx context.Context, claim string, at time.Time) (int, error) {
	var mark any
	if !at.IsZero() {
		mark = nanos(at)
	}
	res, err := s.w.ExecContext(ctx, `UPDATE alerts SET post_attempt_at = ? WHERE claim = ?`, mark, claim)
	if err != nil {
		return 0, unavailable(err)
	}
	n, err := res.RowsAffected()
	return int(n), unavailable(err)
}

// NoteAlertMessage records on the alerts as where a message carrying them landed (m's channel and ts;
// for an escalation, as its escalation message) without finishing them, for alerts not yet finished that
// have no such message: a dispatcher whose claim ran out while it posted leaves its message where the
// dispatcher holding the group now finds it, and updates it instead of posting another. It returns how
// many alerts it changed. Returns ErrUnavailable.
func (s *Store) NoteAlertMessage(ctx context.Context, as []items.Alert, m items.AlertDelivery) (int, error) {
	q := `UPDATE alerts SET channel = ?, ts = ? WHERE tenant = ? AND key = ? AND attempt = ? AND cause = ? AND status = 'pending' AND ts = ''`
	if m.Escalation {
		q = `UPDATE alerts SET escalation_channel = ?, escalation_ts = ?
			WHERE tenant = ? AND key = ? AND attempt = ? AND cause = ? AND status = 'sent' AND escalation_ts = ''`
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, unavailable(err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	n := 0
	for _, a := range as {
		res, err := tx.ExecContext(ctx, q, m.Channel, m.TS, a.Tenant, a.Key, a.Attempt, a.Cause)
		if err != nil {
			return 0, unavailable(err)
		}
		k, err := res.RowsAffected()
		if err != nil {
			return 0, unavailable(err)
		}
		n += int(k)
	}
	return n, unavailable(tx.Commit())
}

// ReleaseAlerts gives up a claim without sending, so the next dispatch tries again. Returns ErrUnavailable.
func (s *Store) ReleaseAlerts(ctx context.Context, claim string) error {
	_, err := s.w.ExecContext(ctx, `UPDATE alerts SET claim = NULL, claimed_until = NULL WHERE claim = ?`, claim)
	return unavailable(err)
}

// CloseAlert closes one alert: nothing more is sent for it. It reports whether the alert was open.
// Returns ErrUnavailable.
func (s *Store) CloseAlert(ctx context.Context, a items.Alert, now time.Time) (bool, error) {
	res, err := s.w.ExecContext(ctx, `UPDATE alerts SET status = 'closed', closed_at = ?, claim = NULL, claimed_until = NULL
		WHERE tenant = ? AND key = ? AND attempt = ? AND cause = ? AND status != 'closed'`, nanos(now), a.Tenant, a.Key, a.Attempt, a.Cause)
	if err != nil {
		return false, unavailable(err)
	}
	n, err := res.RowsAffected()
	return n > 0, unavailable(err)
}

// CloseItemAlerts closes every open alert about an item (it was resolved). It returns how many it closed.
// Returns ErrUnavailable.
func (s *Store) CloseItemAlerts(ctx context.Context, tenant, key string, now time.Time) (int, error) {
	res, err := s.w.ExecContext(ctx, `UPDATE alerts SET status = 'closed', closed_at = ?, claim = NULL, claimed_until = NULL
		WHERE tenant = ? AND key = ? AND status != 'closed'`, nanos(now), tenant, key)
	if err != nil {
		return 0, unavailable(err)
	}
	n, err := res.RowsAffected()
	return int(n), unavailable(err)
}

// RequestEscalation makes the sent alerts about an item that have an escalate_to owner due for escalation
// now, naming who asked. Alerts already escalated or closed are left alone, so a repeated request changes
// nothing. It returns how many alerts it changed. Returns ErrUnavailable.
func (s *Store) RequestEscalation(ctx context.Context, tenant, key, by string, now time.Time) (int, error) {
	res, err := s.w.ExecContext(ctx, `UPDATE alerts SET escalate_at = ?, escalated_by = ?
		WHERE tenant = ? AND key = ? AND status = 'sent' AND escalate_to != '' AND escalated_by = ''`, nanos(now), by, tenant, key)
	if err != nil {
		return 0, unavailable(err)
	}
	n, err := res.RowsAffected()
	return int(n), unavailable(err)
}

// ItemAlerts returns the alerts about an item, oldest first. Returns ErrUnavailable.
func (s *Store) ItemAlerts(ctx context.Context, tenant, key string) ([]items.Alert, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+alertColumns+` FROM alerts WHERE tenant = ? AND key = ?
		ORDER BY created_at, attempt, cause`, tenant, key)
	if err != nil {
		return nil, unavailable(err)
	}
	return scanAlerts(rows)
}

// MessageAlerts returns the alerts a message carried (as the first alert or as an escalation), ordered by
// key. Returns ErrUnavailable.
func (s *Store) MessageAlerts(ctx context.Context, channel, ts string) ([]items.Alert, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+alertColumns+` FROM alerts
		WHERE (channel = ? AND ts = ?) OR (escalation_channel = ? AND escalation_ts = ?)
		ORDER BY key, attempt, cause`, channel, ts, channel, ts)
	if err != nil {
		return nil, unavailable(err)
	}
	return scanAlerts(rows)
}

// SettledAlerts returns up to limit alerts that went out (sent or escalated) and are still open although
// their item no longer waits for a person in their attempt: settled, claimed again, or gone. Their messages
// may still carry live buttons. They are read from the open delivered alerts alone (alerts_delivered_open,
// about as many as the items waiting for a person), each item found by its key. Returns ErrUnavailable.
func (s *Store) SettledAlerts(ctx context.Context, limit int) ([]items.Alert, error) {
	rows, err := s.r.QueryContext(ctx, settledAlertsSQL, limit)
	if err != nil {
		return nil, unavailable(err)
	}
	return scanAlerts(rows)
}

// settledAlertsSQL is SettledAlerts' query.
var settledAlertsSQL = `SELECT ` + prefixed("a.", alertColumns) + ` FROM alerts AS a INDEXED BY alerts_delivered_open
	LEFT JOIN items AS i ON i.tenant = a.tenant AND i.key = a.key
	WHERE a.status IN ('sent', 'escalated') AND (i.id IS NULL OR i.needs_person = 0 OR i.attempt != a.attempt)
	ORDER BY a.tenant, a.key LIMIT ?`

// prefixed qualifies each of a comma-separated list of columns with prefix ("a.").
func prefixed(prefix, columns string) string {
	cols := strings.Split(columns, ",")
	for i, c := range cols {
		cols[i] = prefix + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

// ListItems returns one page of the tenant's items matching p, newest change first. Returns an
// invalid_request error for a cursor it did not make, ErrUnavailable.
func (s *Store) ListItems(ctx context.Context, p items.ListParams) (items.ItemPage, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = items.DefaultListLimit
	}
	limit = min(limit, items.MaxListLimit)
	where, args, err := listItemsWhere(p, limit+1)
	if err != nil {
		return items.ItemPage{}, err
	}
	if p.Order == items.ListByNeedsPersonSince {
		return s.listPageBySince(ctx, limit, where, args...)
	}
	return s.listPage(ctx, limit, where, args...)
}

// listPage reads up to limit+1 rows of the list and makes its page. A row whose document cannot be
// decoded does not fail the list (one corrupt item would hide every other from the operator): it is
// named in the page's Unreadable and keeps its place, so the cursor goes on past it, also when it is
// the page's last row; its columns, not its document, give that place.
func (s *Store) listPage(ctx context.Context, limit int, where string, args ...any) (items.ItemPage, error) {
	var last items.ListCursor
	return s.readPage(ctx, limit, "", nil, func(r *row) { last = items.ListCursor{UpdatedAt: time.Unix(0, r.updatedAt).UTC(), Key: r.key} },
		func() string { return last.Encode() }, where, args...)
}

// listPageBySince is listPage for the order by needs_person_since (items.ListByNeedsPersonSince): the
// rows also give the needs_person_since column, each row's place for the cursor.
func (s *Store) listPageBySince(ctx context.Context, limit int, where string, args ...any) (items.ItemPage, error) {
	var since sql.NullInt64
	var last items.SinceCursor
	return s.readPage(ctx, limit, ", needs_person_since", []any{&since}, func(r *row) {
		last = items.SinceCursor{Key: r.key}
		if since.Valid {
			t := time.Unix(0, since.Int64).UTC()
			last.Since = &t
		}
	}, func() string { return last.Encode() }, where, args...)
}

// readPage reads up to limit+1 rows of storedColumns and the columns more names (into dest) and makes the
// page of a list: at is told of each row read, and cursor then gives the place of the last one told.
func (s *Store) readPage(ctx context.Context, limit int, more string, dest []any, at func(r *row), cursor func() string, where string, args ...any) (items.ItemPage, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+storedColumns+more+` `+where, args...)
	if err != nil {
		return items.ItemPage{}, unavailable(err)
	}
	defer rows.Close()
	page := items.ItemPage{Items: []*items.Item{}}
	n := 0
	for rows.Next() {
		if n == limit {
			page.NextCursor = cursor()
			break
		}
		it, r, err, scanErr := scanItem(rows, dest...)
		if scanErr != nil {
			return items.ItemPage{}, unavailable(scanErr)
		}
		n++
		at(&r)
		if err != nil {
			page.Unreadable = append(page.Unreadable, r.key)
			continue
		}
		page.Items = append(page.Items, it)
	}
	if err := rows.Err(); err != nil {
		return items.ItemPage{}, unavailable(err)
	}
	return page, nil
}

// listItemsWhere returns the FROM, WHERE, ORDER BY and LIMIT clauses of ListItems, and their arguments.
func listItemsWhere(p items.ListParams, limit int) (string, []any, error) {
	if err := p.CheckOrder(); err != nil {
		return "", nil, err
	}
	var where []string
	args := []any{}
	add := func(cond string, a ...any) {
		where = append(where, cond)
		args = append(args, a...)
	}
	add("tenant = ?", p.Tenant)
	// The lists that no narrower index serves read items_state_changed, one state at a time (merged).
	merged := p.Reference == "" && p.ExecutionID == "" && p.BatchID == "" && p.Order != items.ListByNeedsPersonSince &&
		(p.NeedsPerson == nil || !*p.NeedsPerson) && len(p.States) != 1
	if len(p.States) > 0 && !merged {
		marks := strings.TrimSuffix(strings.Repeat("?, ", len(p.States)), ", ")
		vals := make([]any, len(p.States))
		for i, st := range p.States {
			vals[i] = string(st)
		}
		add("state IN ("+marks+")", vals...)
	}
	if p.NeedsPerson != nil {
		// A literal, not a parameter: only then may the planner use the partial index items_needs_person_changed.
		add(fmt.Sprintf("needs_person = %d", boolInt(*p.NeedsPerson)))
	}
	if p.Destination != "" {
		add("destination = ?", p.Destination)
	}
	if p.Workflow != "" {
		// NULL: the key's workflow (keyWorkflow), its first part: the keys from "workflow:" up to "workflow;".
		add("(workflow = ? OR (workflow IS NULL AND key >= ? AND key < ?))", p.Workflow, p.Workflow+":", p.Workflow+";")
	}
	if p.BatchID != "" {
		add("batch_id = ? AND batch_id != ''", p.BatchID) // the literal lets the partial index items_batch serve
	}
	if p.ExecutionID != "" {
		add("execution_id = ? AND execution_id != ''", p.ExecutionID)
	}
	if p.Reference != "" {
		add("reference = ? AND reference != ''", p.Reference)
	}
	if p.Owner != "" {
		add(`(owner = ? OR EXISTS (SELECT 1 FROM alerts a WHERE a.tenant = items.tenant AND a.key = items.key
			AND (a.owner = ? OR (a.escalate_to = ? AND a.status = 'escalated'))))`, p.Owner, p.Owner, p.Owner)
	}
	if p.ChangedBefore != nil {
		add("updated_at <= ?", nanos(*p.ChangedBefore))
	}
	order := " ORDER BY updated_at DESC, key DESC LIMIT ?"
	switch {
	case p.Order == items.ListByNeedsPersonSince:
		// Read in the order of items_needs_person_since, where NULL (no recorded since) sorts first.
		order = " ORDER BY needs_person_since, key LIMIT ?"
		if p.Cursor != "" {
			c, err := items.DecodeSinceCursor(p.Cursor)
			if err != nil {
				return "", nil, err
			}
			if c.Since == nil {
				add("(needs_person_since IS NOT NULL OR key > ?)", c.Key)
			} else {
				add("(needs_person_since, key) > (?, ?)", nanos(*c.Since), c.Key)
			}
		}
	case p.Cursor != "":
		c, err := items.DecodeListCursor(p.Cursor)
		if err != nil {
			return "", nil, err
		}
		add("(updated_at, key) < (?, ?)", nanos(c.UpdatedAt), c.Key)
	}
	if merged {
		q, all := mergedStates(p.States, where, args, order, limit)
		return q, all, nil
	}
	args = append(args, limit)
	from := "FROM items "
	switch {
	case p.Reference != "":
		// A reference names a handful of items: its index is the narrowest, though the planner (without
		// statistics) prefers the items needing a person's, which holds the list's order whole.
		from = "FROM items INDEXED BY items_of_reference "
	case p.ExecutionID != "":
		// An execution names its run's items, which are sorted; without statistics the planner would rather
		// walk one of the larger indexes that hold the list's order.
		from = "FROM items INDEXED BY items_of_execution "
	case p.Order == items.ListByNeedsPersonSince:
		// Without statistics the planner may take items_needs_person_changed, whose order is another.
		from = "FROM items INDEXED BY items_needs_person_since "
	}
	return from + "WHERE " + strings.Join(where, " AND ") + order, args, nil
}

// mergedStates returns the FROM, ORDER BY and LIMIT clauses of a list that no narrower index serves (no
// state, or several; no reference, execution or batch; not only the items needing a person), and their
// arguments: one page of each state's items from items_state_changed, in the list's order, merged. The
// ledger keeps no index of every item by updated_at alone, as each transition would rewrite it (schema's
// comment); a page reads at most one page per state (five) and sorts those rows.
func mergedStates(states []items.State, where []string, args []any, order string, limit int) (string, []any) {
	if len(states) == 0 {
		states = items.States
	}
	// Every state's arm is the same statement; the state is its last argument but one (the limit last).
	arm := "SELECT * FROM (SELECT " + storedColumns + " FROM items INDEXED BY items_state_changed WHERE " +
		strings.Join(append(where, "state = ?"), " AND ") + order + ")"
	all := make([]any, 0, len(states)*(len(args)+2)+1)
	for _, st := range states {
		all = append(append(all, args...), string(st), limit)
	}
	return "FROM (" + arm + strings.Repeat(" UNION ALL "+arm, len(states)-1) + ")" + order, append(all, limit)
}

// needsPersonCountSQL sums the kept counts of a tenant's items needing a person.
const needsPersonCountSQL = `SELECT coalesce(sum(items), 0) FROM item_counts WHERE tenant = ? AND needs_person = 1`

// NeedsPersonCount returns how many of the tenant's items need a person, from the kept counts (one row
// per destination and state): the console's queue counts its pages by it. Returns ErrUnavailable.
func (s *Store) NeedsPersonCount(ctx context.Context, tenant string) (int, error) {
	var n int
	if err := s.r.QueryRowContext(ctx, needsPersonCountSQL, tenant).Scan(&n); err != nil {
		return 0, unavailable(err)
	}
	return n, nil
}

// AddCounter adds delta to a named counter of a tenant and destination. Returns ErrUnavailable.
func (s *Store) AddCounter(ctx context.Context, tenant, destination, name string, delta int) error {
	_, err := s.w.ExecContext(ctx, addCounterSQL, tenant, destination, name, delta)
	return unavailable(err)
}

// addCounterSQL adds to a named counter of a tenant and destination.
const addCounterSQL = `INSERT INTO counters (tenant, destination, name, value) VALUES (?, ?, ?, ?)
	ON CONFLICT (tenant, destination, name) DO UPDATE SET value = value + excluded.value`
