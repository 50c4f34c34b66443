package pgstore

import (
	"reflect"
	"strconv"
	"strings"

	"github.com/replaysafe/companion/items"
)

// Every SQL statement of the store, by name. Each is written with {schema} where the ledger's schema goes
// (schema.go) and made into the store's queries at New. Literal predicates (state = 'in_flight',
// needs_person, batch_id <> '') stay literals, not parameters: a prepared statement's generic plan may
// use a partial index only when the query itself implies the index's predicate. TestQueryPlans pins
// each query to its index.

// queries are the store's statements, with its schema in them (the fields are exported for newQueries's reflection only).
type queries struct {
	GetItem, ReadGroup, ReadClock, XactStatus, WrittenStates, ItemsPages, InsertItems, UpdateItems, AddCounts string
	InsertSecret, ReadSecret, Ping                                                                            string

	Counts, Unresolved, Conflicts, NeedsPersonCount, AddCounter string

	ExpiredLeases, SweepCandidates, PendingAlertItems string
	AddAlerts, AlertGroups, ClaimAlerts, ClaimEscalations, FinishAlerts, FinishEscalations, RenewAlertClaim, MarkAlertPost,
	NoteAlertMessage, NoteEscalationMessage, ReleaseAlerts, CloseAlert, CloseItemAlerts, RequestEscalation,
	ItemAlerts, MessageAlerts, SettledAlerts string

	ClaimProbe, ReleaseProbe string

	SettledDestinations, SettledItems, RemoveItems, RemoveAlerts, RemoveProbes string

	BatchCounts string

	AddSeries, SeriesRows, RemoveSeries, CountConflicts, RecordRelease, Releases string
}

// newQueries returns the queries with the quoted schema in them.
func newQueries(quoted string) queries {
	q := sqlText
	v := reflect.ValueOf(&q).Elem()
	for i := range v.NumField() {
		v.Field(i).SetString(withSchema(v.Field(i).String(), quoted))
	}
	return q
}

// itemWriteColumns are the columns a write of an item sets, in the order of the arrays of insertItems and
// updateItems (rows.go appends them in this order).
const itemWriteColumns = `tenant, key, version, updated_at, needs_person_since, lease_expires_at, batch_index, attempt,
	needs_person, sweep_candidate, alert_pending, state, destination, workflow, owner, reference, batch_id, execution_id, doc`

// itemArrays unnests the arrays of itemWriteColumns, $1 to $19.
const itemArrays = `unnest($1::text[], $2::text[], $3::bigint[], $4::timestamptz[], $5::timestamptz[], $6::timestamptz[],
	$7::integer[], $8::integer[], $9::boolean[], $10::boolean[], $11::boolean[], $12::text[], $13::text[], $14::text[], $15::text[],
	$16::text[], $17::text[], $18::text[], $19::bytea[]`

// alertColumns are the columns an alert is read from, in scanAlert's order.
const alertColumns = `tenant, key, attempt, cause, owner, escalate_to, escalate_after, batch_id, destination, status,
	channel, ts, escalate_at, escalated_by, escalation_channel, escalation_ts, created_at, sent_at, escalated_at, closed_at, post_attempt_at`

// countColumns are the sums of item_counts, in the order of items.Counts' fields.
const countColumns = `items, retries, attempted, recoveries, resolutions, duplicates, entered_unknown, history_dropped, history_dropped_items`

// countSlots is how many rows of item_counts one group of the counts is spread over (counts.go).
const countSlots = 64

var sqlText = queries{
	GetItem: `SELECT doc FROM {schema}.items WHERE tenant = $1 AND key = $2`,

	// The group's read: its items, locked in key order (the LockRows above the Sort), so that two
	// transactions locking the same items never wait for each other in a circle. A group decided without
	// a read locks them by its writes, whose rows are in key order too (tryGroup).
	ReadGroup: `SELECT tenant, key, doc, xmin::text::bigint FROM {schema}.items
		WHERE (tenant, key) IN (SELECT * FROM unnest($1::text[], $2::text[]))
		ORDER BY tenant, key FOR UPDATE`,
	// The transaction's id, for settling a commit whose answer was lost, and the database's clock; and
	// the transaction's settings: lock waits bounded ($1, lockTimeout), and single items found by index scans
	// rather than bitmaps (a nested loop of bitmap heap scans made the guarded UPDATE of a group about a
	// tenth slower).
	ReadClock: `SELECT pg_current_xact_id()::text, clock_timestamp(), set_config('lock_timeout', $1, true),
		set_config('enable_bitmapscan', 'off', true)`,
	XactStatus: `SELECT pg_xact_status($1::text::xid8)`,
	// The version and time of change of items, to check a settled COMMIT against (settle).
	WrittenStates: `SELECT tenant, key, version, updated_at FROM {schema}.items
		WHERE (tenant, key) IN (SELECT * FROM unnest($1::text[], $2::text[]))`,
	// The items table's size in pages (customPlans).
	ItemsPages: `SELECT pg_relation_size(($1 || '.items')::regclass) / current_setting('block_size')::bigint`,

	// A new item: another writer that created it (since the read, or before a write that took it as new)
	// makes this fail on the primary key.
	InsertItems: `INSERT INTO {schema}.items (` + itemWriteColumns + `) SELECT * FROM ` + itemArrays + `)`,
	// The items that existed, each guarded by the version, the time of change and the row version (xmin,
	// the transaction that wrote it) it was decided on ($20 to $22: a version alone could be a later
	// item's of the same key, made after retention removed the first; xmin catches any other writer, one
	// that changed the row by hand without moving its version): expect_rows aborts the transaction when
	// one was changed under it.
	UpdateItems: `WITH changed AS (
		UPDATE {schema}.items AS i SET version = w.version, updated_at = w.updated_at, needs_person_since = w.needs_person_since,
			lease_expires_at = w.lease_expires_at, batch_index = w.batch_index, attempt = w.attempt, needs_person = w.needs_person,
			sweep_candidate = w.sweep_candidate, alert_pending = w.alert_pending, state = w.state, destination = w.destination,
			workflow = w.workflow, owner = w.owner, reference = w.reference, batch_id = w.batch_id, execution_id = w.execution_id,
			doc = w.doc
		FROM ` + itemArrays + `, $20::bigint[], $21::timestamptz[], $22::bigint[]) AS w(` + itemWriteColumns + `, seen_version, seen_updated_at, seen_xmin)
		WHERE i.tenant = w.tenant AND i.key = w.key AND i.version = w.seen_version AND i.updated_at = w.seen_updated_at
			AND i.xmin::text::bigint = w.seen_xmin
		RETURNING 1)
		SELECT {schema}.expect_rows(count(*), cardinality($1::text[])) FROM changed`,
	// The changes of the kept counts, into the slot of the server process that runs the transaction.
	AddCounts: `INSERT INTO {schema}.item_counts (tenant, destination, state, needs_person, slot, ` + countColumns + `)
		SELECT w.tenant, w.destination, w.state, w.needs_person, pg_backend_pid() % ` + strconv.Itoa(countSlots) + `, w.items, w.retries, w.attempted, w.recoveries,
			w.resolutions, w.duplicates, w.entered_unknown, w.history_dropped, w.history_dropped_items
		FROM unnest($1::text[], $2::text[], $3::text[], $4::boolean[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[],
			$9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[])
			AS w(tenant, destination, state, needs_person, ` + countColumns + `)
		ON CONFLICT (tenant, destination, state, needs_person, slot) DO UPDATE SET items = item_counts.items + excluded.items,
			retries = item_counts.retries + excluded.retries, attempted = item_counts.attempted + excluded.attempted,
			recoveries = item_counts.recoveries + excluded.recoveries, resolutions = item_counts.resolutions + excluded.resolutions,
			duplicates = item_counts.duplicates + excluded.duplicates,
			entered_unknown = item_counts.entered_unknown + excluded.entered_unknown,
			history_dropped = item_counts.history_dropped + excluded.history_dropped,
			history_dropped_items = item_counts.history_dropped_items + excluded.history_dropped_items`,

	InsertSecret: `INSERT INTO {schema}.meta (name, value) VALUES ('ledger_secret', $1) ON CONFLICT DO NOTHING`,
	ReadSecret:   `SELECT value FROM {schema}.meta WHERE name = 'ledger_secret'`,
	Ping:         `INSERT INTO {schema}.meta (name, value) VALUES ('ping', '\x01') ON CONFLICT (name) DO UPDATE SET value = excluded.value`,

	// The kept counts of one tenant (or of every tenant: $1 empty), their slots summed.
	Counts: `SELECT tenant, destination, state, needs_person, ` + sums(countColumns) + `
		FROM {schema}.item_counts WHERE ($1 = '' OR tenant = $1)
		GROUP BY tenant, destination, state, needs_person HAVING sum(items) <> 0`,
	// Per destination, since when its oldest unresolved item is unresolved (items.Item.UnresolvedSince),
	// from the partial indexes of the unresolved items alone: those needing a person, the leases, and the
	// sweep candidates (an unknown item not needing a person is one).
	Unresolved: `
		SELECT destination, min(CASE WHEN needs_person_since IS NOT NULL THEN needs_person_since
			WHEN state = 'in_flight' AND lease_expires_at <= $1 THEN lease_expires_at ELSE updated_at END)
			FROM {schema}.items WHERE needs_person AND ($2 = '' OR tenant = $2) GROUP BY destination
		UNION ALL
		SELECT destination, min(lease_expires_at) FROM {schema}.items
			WHERE state = 'in_flight' AND lease_expires_at <= $1 AND NOT needs_person AND ($2 = '' OR tenant = $2) GROUP BY destination
		UNION ALL
		SELECT destination, min(updated_at) FROM {schema}.items
			WHERE sweep_candidate AND state = 'unknown' AND NOT needs_person AND ($2 = '' OR tenant = $2) GROUP BY destination`,
	Conflicts:        `SELECT destination, sum(value)::bigint FROM {schema}.counters WHERE ($1 = '' OR tenant = $1) AND name = $2 GROUP BY destination`,
	NeedsPersonCount: `SELECT coalesce(sum(items), 0)::bigint FROM {schema}.item_counts WHERE tenant = $1 AND needs_person`,
	AddCounter: `INSERT INTO {schema}.counters (tenant, destination, name, value) VALUES ($1, $2, $3, $4)
		ON CONFLICT (tenant, destination, name) DO UPDATE SET value = counters.value + excluded.value`,

	ExpiredLeases: `SELECT tenant, key FROM {schema}.items WHERE state = 'in_flight' AND lease_expires_at <= $1
		AND (tenant, key) > ($2, $3) ORDER BY tenant, key LIMIT $4`,
	SweepCandidates: `SELECT tenant, key, doc FROM {schema}.items WHERE sweep_candidate AND (tenant, key) > ($1, $2)
		ORDER BY tenant, key LIMIT $3`,
	PendingAlertItems: `SELECT tenant, key, doc FROM {schema}.items WHERE alert_pending AND (tenant, key) > ($1, $2)
		ORDER BY tenant, key LIMIT $3`,

	AddAlerts: `INSERT INTO {schema}.alerts (tenant, key, attempt, cause, owner, escalate_to, escalate_after, batch_id, destination,
			created_at, status)
		SELECT w.*, 'pending' FROM unnest($1::text[], $2::text[], $3::integer[], $4::text[], $5::text[], $6::text[],
			$7::interval[], $8::text[], $9::text[], $10::timestamptz[]) AS w
		ON CONFLICT (tenant, key, attempt, cause) DO NOTHING`,
	AlertGroups: `
		(SELECT tenant, owner, batch_id, false FROM {schema}.alerts
			WHERE status = 'pending' AND (claim IS NULL OR claimed_until <= $1) GROUP BY tenant, owner, batch_id)
		UNION ALL
		(SELECT tenant, escalate_to, batch_id, true FROM {schema}.alerts
			WHERE status = 'sent' AND escalate_at IS NOT NULL AND escalate_at <= $1 AND escalate_to <> ''
			AND (claim IS NULL OR claimed_until <= $1) GROUP BY tenant, escalate_to, batch_id)
		LIMIT $2`,
	// The alerts of a group, locked in key order before they are claimed: of two dispatchers claiming one
	// group at once, the second waits for the first, then finds them claimed.
	ClaimAlerts: `WITH taken AS (
		SELECT tenant, key, attempt, cause FROM {schema}.alerts
		WHERE tenant = $3 AND owner = $4 AND batch_id = $5 AND status = 'pending' AND (claim IS NULL OR claimed_until <= $6)
		ORDER BY key, attempt, cause FOR UPDATE)
		UPDATE {schema}.alerts AS a SET claim = $1, claimed_until = $2 FROM taken
		WHERE (a.tenant, a.key, a.attempt, a.cause) = (taken.tenant, taken.key, taken.attempt, taken.cause)
		RETURNING ` + prefixed("a.", alertColumns),
	// The same for a group of sent alerts whose escalation is due.
	ClaimEscalations: `WITH taken AS (
		SELECT tenant, key, attempt, cause FROM {schema}.alerts
		WHERE status = 'sent' AND escalate_at IS NOT NULL AND escalate_at <= $6 AND tenant = $3 AND escalate_to = $4 AND batch_id = $5
			AND (claim IS NULL OR claimed_until <= $6)
		ORDER BY key, attempt, cause FOR UPDATE)
		UPDATE {schema}.alerts AS a SET claim = $1, claimed_until = $2 FROM taken
		WHERE (a.tenant, a.key, a.attempt, a.cause) = (taken.tenant, taken.key, taken.attempt, taken.cause)
		RETURNING ` + prefixed("a.", alertColumns),
	FinishAlerts: `UPDATE {schema}.alerts SET status = 'sent', channel = $1, ts = $2, sent_at = $3::timestamptz,
		escalate_at = CASE WHEN escalate_to <> '' AND escalate_after > '0' THEN $3::timestamptz + escalate_after END,
		claim = NULL, claimed_until = NULL, post_attempt_at = NULL WHERE claim = $4 AND status = 'pending'`,
	FinishEscalations: `UPDATE {schema}.alerts SET status = 'escalated', escalation_channel = $1, escalation_ts = $2,
		escalated_at = $3, claim = NULL, claimed_until = NULL, post_attempt_at = NULL WHERE claim = $4 AND status = 'sent'`,
	RenewAlertClaim: `UPDATE {schema}.alerts SET claimed_until = $2 WHERE claim = $1`,
	MarkAlertPost:   `UPDATE {schema}.alerts SET post_attempt_at = $2 WHERE claim = $1`,
	NoteAlertMessage: `UPDATE {schema}.alerts AS a SET channel = $1, ts = $2
		FROM unnest($3::text[], $4::text[], $5::integer[], $6::text[]) AS w(tenant, key, attempt, cause)
		WHERE (a.tenant, a.key, a.attempt, a.cause) = (w.tenant, w.key, w.attempt, w.cause) AND a.status = 'pending' AND a.ts = ''`,
	NoteEscalationMessage: `UPDATE {schema}.alerts AS a SET escalation_channel = $1, escalation_ts = $2
		FROM unnest($3::text[], $4::text[], $5::integer[], $6::text[]) AS w(tenant, key, attempt, cause)
		WHERE (a.tenant, a.key, a.attempt, a.cause) = (w.tenant, w.key, w.attempt, w.cause) AND a.status = 'sent' AND a.escalation_ts = ''`,
	ReleaseAlerts: `UPDATE {schema}.alerts SET claim = NULL, claimed_until = NULL WHERE claim = $1`,
	CloseAlert: `UPDATE {schema}.alerts SET status = 'closed', closed_at = $5, claim = NULL, claimed_until = NULL
		WHERE tenant = $1 AND key = $2 AND attempt = $3 AND cause = $4 AND status <> 'closed'`,
	CloseItemAlerts: `UPDATE {schema}.alerts SET status = 'closed', closed_at = $3, claim = NULL, claimed_until = NULL
		WHERE tenant = $1 AND key = $2 AND status <> 'closed'`,
	RequestEscalation: `UPDATE {schema}.alerts SET escalate_at = $4, escalated_by = $3
		WHERE tenant = $1 AND key = $2 AND status = 'sent' AND escalate_to <> '' AND escalated_by = ''`,
	ItemAlerts: `SELECT ` + alertColumns + ` FROM {schema}.alerts WHERE tenant = $1 AND key = $2 ORDER BY created_at, attempt, cause`,
	MessageAlerts: `SELECT ` + alertColumns + ` FROM {schema}.alerts
		WHERE (channel = $1 AND ts = $2 AND ts <> '') OR (escalation_channel = $1 AND escalation_ts = $2 AND escalation_ts <> '')
		ORDER BY key, attempt, cause`,
	// The delivered alerts still open (few: those whose message may carry live buttons), each joined to its
	// item by the primary key; kept when the item is gone, no longer needs a person, or is at another attempt.
	// closed_at IS NULL holds for every alert not closed: it is in the index's predicate so that only this
	// query, which says it, reads that index (the statements of sent alerts keep theirs).
	SettledAlerts: `SELECT ` + prefixed("a.", alertColumns) + ` FROM {schema}.alerts AS a
		LEFT JOIN {schema}.items AS i ON i.tenant = a.tenant AND i.key = a.key
		WHERE a.status IN ('sent', 'escalated') AND a.closed_at IS NULL AND (i.key IS NULL OR NOT i.needs_person OR i.attempt <> a.attempt)
		ORDER BY a.tenant, a.key LIMIT $1`,

	// A read's claim while the item is unknown at the attempt, or a claim that has ended taken over: one
	// statement, so the item's state and the claim are checked together.
	ClaimProbe: `INSERT INTO {schema}.probes (tenant, key, attempt, read, claim, claimed_until)
		SELECT $1, $2, $3, $4, $5, $6 WHERE EXISTS (SELECT 1 FROM {schema}.items
			WHERE tenant = $1 AND key = $2 AND attempt = $3 AND state = 'unknown')
		ON CONFLICT (tenant, key, attempt, read) DO UPDATE SET claim = excluded.claim, claimed_until = excluded.claimed_until
		WHERE probes.claimed_until <= $7`,
	ReleaseProbe: `DELETE FROM {schema}.probes WHERE tenant = $1 AND key = $2 AND attempt = $3 AND read = $4 AND claim = $5`,

	SettledDestinations: `SELECT tenant, destination FROM {schema}.item_counts
		WHERE NOT needs_person AND state IN ('succeeded', 'failed')
		GROUP BY tenant, destination HAVING sum(items) > 0`,
	// The settled items of one tenant, destination and state after a position, oldest change first:
	// items.Item.Settled in the columns (not needing a person, nothing for the sweeper).
	SettledItems: `SELECT key, version, updated_at FROM {schema}.items
		WHERE tenant = $1 AND state = $2 AND (updated_at, key) > ($3, $4) AND updated_at <= $5 AND destination = $6
		AND NOT needs_person AND NOT sweep_candidate ORDER BY updated_at, key LIMIT $7`,
	RemoveItems: `DELETE FROM {schema}.items AS i USING unnest($2::text[], $3::bigint[]) AS w(key, version)
		WHERE i.tenant = $1 AND i.key = w.key AND i.version = w.version RETURNING i.key, i.doc`,
	RemoveAlerts: `DELETE FROM {schema}.alerts WHERE tenant = $1 AND key = ANY($2::text[])`,
	RemoveProbes: `DELETE FROM {schema}.probes WHERE tenant = $1 AND key = ANY($2::text[])`,

	BatchCounts: `SELECT CASE WHEN state = 'in_flight' AND lease_expires_at <= $3 THEN 'unknown' ELSE state END AS st, count(*)
		FROM {schema}.items WHERE tenant = $1 AND batch_id = $2 AND batch_id <> '' GROUP BY st`,

	// The changes of the series, a row per tenant, step, bucket and destination in key order, into the slot
	// of the server process that runs the transaction (as AddCounts).
	AddSeries: `INSERT INTO {schema}.series (tenant, step, start, destination, slot, ` + seriesColumns + `)
		SELECT w.tenant, w.step, w.start, w.destination, pg_backend_pid() % ` + strconv.Itoa(countSlots) + `, ` + prefixed("w.", seriesColumns) + `
		FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], ` + seriesArrays(5) + `)
			AS w(tenant, step, start, destination, ` + seriesColumns + `)
		ON CONFLICT (tenant, step, start, destination, slot) DO UPDATE SET ` + seriesAdded(),
	// A tenant's buckets of a step in a range of starts, of one destination ($5) or of all, slots summed.
	SeriesRows: `SELECT start, ` + sums(seriesColumns) + ` FROM {schema}.series
		WHERE tenant = $1 AND step = $2 AND start >= $3 AND start < $4 AND ($5 = '' OR destination = $5) GROUP BY start`,
	RemoveSeries: `DELETE FROM {schema}.series WHERE step = $1 AND start < $2`,
	// A tenant's destination's conflicts ($4), to the named counter and to the series' day ($5) and hour
	// ($6), in one statement (the rows in key order: '1d' before '1h').
	CountConflicts: `WITH counted AS (
		INSERT INTO {schema}.counters (tenant, destination, name, value) VALUES ($1, $2, $3, $4)
		ON CONFLICT (tenant, destination, name) DO UPDATE SET value = counters.value + excluded.value)
		INSERT INTO {schema}.series (tenant, step, start, destination, slot, conflicts)
		VALUES ($1, '1d', $5, $2, pg_backend_pid() % ` + strconv.Itoa(countSlots) + `, $4), ($1, '1h', $6, $2, pg_backend_pid() % ` + strconv.Itoa(countSlots) + `, $4)
		ON CONFLICT (tenant, step, start, destination, slot) DO UPDATE SET conflicts = series.conflicts + excluded.conflicts`,
	// A version, unless it is the one recorded last (under the releases' lock: releaseLock).
	RecordRelease: `INSERT INTO {schema}.releases (at, version) SELECT $1, $2::text
		WHERE $2::text IS DISTINCT FROM (SELECT version FROM {schema}.releases ORDER BY id DESC LIMIT 1)`,
	Releases: `SELECT version, at FROM {schema}.releases WHERE at >= $1 AND at < $2 ORDER BY at`,
}

// seriesColumns are the counts of a row of series, in the order of items.TallyColumns.
var seriesColumns = strings.Join(items.TallyColumns, ", ")

// seriesArrays returns the bigint arrays of the series' counts from $from on.
func seriesArrays(from int) string {
	out := make([]string, len(items.TallyColumns))
	for i := range out {
		out[i] = "$" + strconv.Itoa(from+i) + "::bigint[]"
	}
	return strings.Join(out, ", ")
}

// seriesAdded returns the SET of an upsert of series that adds the new counts to the row's.
func seriesAdded() string {
	out := make([]string, len(items.TallyColumns))
	for i, c := range items.TallyColumns {
		out[i] = c + " = series." + c + " + excluded." + c
	}
	return strings.Join(out, ", ")
}

// sums returns "sum(a)::bigint, sum(b)::bigint, …" for the comma-separated columns.
func sums(columns string) string {
	var out []string
	for _, c := range strings.Split(columns, ",") {
		c = strings.TrimSpace(c)
		out = append(out, "sum("+c+")::bigint")
	}
	return strings.Join(out, ", ")
}

// prefixed returns the comma-separated columns each with prefix.
func prefixed(prefix, columns string) string {
	var out []string
	for _, c := range strings.Split(columns, ",") {
		out = append(out, prefix+strings.TrimSpace(c))
	}
	return strings.Join(out, ", ")
}

// listItems returns the statement of one page of ListItems (up to limit rows: a page and one more) and
// its arguments. It reads, besides the document, updated_at, needs_person_since and key: the place of
// each row in its order, for the cursor. The lists that no narrower index serves (no state or several;
// no reference, execution or batch; not only the items needing a person) read each state's range of
// items_state_changed, newest first, a page from each, and merge them: there is no index of every item
// by updated_at alone (schema.go).
func listItems(quoted string, p items.ListParams, limit int) (string, []any, error) {
	if err := p.CheckOrder(); err != nil {
		return "", nil, err
	}
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	where = append(where, "tenant = "+arg(p.Tenant))
	merged := p.Reference == "" && p.ExecutionID == "" && p.BatchID == "" && p.Order != items.ListByNeedsPersonSince &&
		(p.NeedsPerson == nil || !*p.NeedsPerson) && len(p.States) != 1
	if len(p.States) == 1 {
		where = append(where, "state = "+arg(string(p.States[0]))) // a range of items_state_changed
	} else if len(p.States) > 0 && !merged {
		states := make([]string, len(p.States))
		for i, st := range p.States {
			states[i] = string(st)
		}
		where = append(where, "state = ANY("+arg(states)+"::text[])")
	}
	switch {
	case p.NeedsPerson == nil:
	case *p.NeedsPerson:
		where = append(where, "needs_person") // literals: only then may a generic plan use the partial indexes
	default:
		where = append(where, "NOT needs_person")
	}
	if p.Destination != "" {
		where = append(where, "destination = "+arg(p.Destination))
	}
	if p.Workflow != "" {
		where = append(where, "workflow = "+arg(p.Workflow))
	}
	if p.BatchID != "" {
		where = append(where, "batch_id = "+arg(p.BatchID)+" AND batch_id <> ''")
	}
	if p.ExecutionID != "" {
		where = append(where, "execution_id = "+arg(p.ExecutionID)+" AND execution_id <> ''")
	}
	if p.Reference != "" {
		where = append(where, "reference = "+arg(p.Reference)+" AND reference <> ''")
	}
	if p.Owner != "" {
		o := arg(p.Owner)
		where = append(where, `(owner = `+o+` OR EXISTS (SELECT 1 FROM `+quoted+`.alerts a WHERE a.tenant = items.tenant AND a.key = items.key
			AND (a.owner = `+o+` OR (a.escalate_to = `+o+` AND a.status = 'escalated'))))`)
	}
	if p.ChangedBefore != nil {
		where = append(where, "updated_at <= "+arg(*p.ChangedBefore))
	}
	order := " ORDER BY updated_at DESC, key DESC LIMIT "
	switch {
	case p.Order == items.ListByNeedsPersonSince:
		order = " ORDER BY needs_person_since NULLS FIRST, key LIMIT "
		if p.Cursor != "" {
			c, err := items.DecodeSinceCursor(p.Cursor)
			if err != nil {
				return "", nil, err
			}
			if c.Since == nil {
				where = append(where, "(needs_person_since IS NOT NULL OR key > "+arg(c.Key)+")")
			} else {
				where = append(where, "(needs_person_since, key) > ("+arg(*c.Since)+", "+arg(c.Key)+")")
			}
		}
	case p.Cursor != "":
		c, err := items.DecodeListCursor(p.Cursor)
		if err != nil {
			return "", nil, err
		}
		where = append(where, "(updated_at, key) < ("+arg(c.UpdatedAt)+", "+arg(c.Key)+")")
	}
	const columns = "SELECT updated_at, needs_person_since, key, doc FROM "
	if !merged {
		return columns + quoted + ".items WHERE " + strings.Join(where, " AND ") + order + arg(limit), args, nil
	}
	states := p.States
	if len(states) == 0 {
		states = items.States
	}
	lim := arg(limit)
	arms := make([]string, len(states))
	for i, st := range states {
		arms[i] = "(" + columns + quoted + ".items WHERE " + strings.Join(append(where, "state = "+arg(string(st))), " AND ") + order + lim + ")"
	}
	return strings.Join(arms, " UNION ALL ") + order + lim, args, nil
}

// batchItems returns the statement of a page of BatchItems and its arguments: a batch's items in
// (batch_index, key) order, those without an index first, after the position (afterIndex, afterKey) when
// afterKey is set.
func batchItems(quoted, tenant, batchID string, afterIndex *int, afterKey string, limit int) (string, []any) {
	q := `SELECT tenant, key, doc FROM ` + quoted + `.items WHERE tenant = $1 AND batch_id = $2 AND batch_id <> ''`
	args := []any{tenant, batchID}
	switch {
	case afterKey == "":
	case afterIndex == nil:
		q += ` AND (batch_index IS NOT NULL OR key > $3)`
		args = append(args, afterKey)
	default:
		q += ` AND (batch_index, key) > ($3, $4)`
		args = append(args, *afterIndex, afterKey)
	}
	args = append(args, limit)
	return q + ` ORDER BY batch_index NULLS FIRST, key LIMIT $` + strconv.Itoa(len(args)), args
}
