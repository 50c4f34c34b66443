package pgstore

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The schema is versioned in the code: migrations are numbered, applied in order, each once, and
// recorded in schema_migrations. Open applies the ones the schema lacks in one transaction that holds an
// advisory lock of the schema's own (pg_advisory_xact_lock), so that replicas starting together migrate
// once: the first takes the lock and migrates, the others wait for its commit and find nothing left to
// do. A transaction's lock, not a session's: it is released by the commit (or by the server when the
// process dies), and it works behind PgBouncer in transaction mode, where a session's lock could be held
// by a server connection another client gets next. PostgreSQL's DDL is transactional, so a start that
// fails halfway leaves the schema as it was.
//
// Every object lives in the schema (POSTGRES_SCHEMA, DefaultSchema by default), so that the ledger can
// share a database with n8n's tables without touching them.

// migration is one step of the schema. Its SQL names the schema as {schema}.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations are the schema's steps, in order. A released step is never changed: a later one alters what
// it made.
var migrations = []migration{
	{1, "items, counts, series, alerts, probes", schemaV1},
	// The documents' compressed form (doc.go): nothing to change in the tables, but a build without it
	// would read every compressed document as corrupt, and refuses a schema at version 2.
	{2, "item documents compressed", `COMMENT ON COLUMN {schema}.items.doc IS
		'the item''s JSON: compressed by companion (S2, dictionary 1) when its first byte is 0x01, plain when it is {'`},
}

// schemaV1 creates the ledger.
//
// items holds one row per item, keyed by (tenant, key). Beside the item's document (doc: the item's
// JSON, items.Item.AppendJSON, compressed by the store: doc.go), a row holds the columns the queries
// select and order by, and the facts the sweeper and the alerts select by (items.Facts), written with
// every change of the item, so that no query reads a document to filter. The document is bytea, not
// jsonb: jsonb would reorder the members of the stored result (the contract returns it as the workflow
// sent it), costs the server a parse on every write and a print on every read, and would be stored whole
// (PostgreSQL compresses no value of a row under about 2 kB).
//
// Every transition changes updated_at, which items_state_changed holds, so no update of an item is a
// HOT update: each writes a new entry into every index whose predicate the row meets. Each index is
// therefore here for a query (TestQueryPlans checks which), and those of a column most items leave empty,
// or of the few items in a state (in flight, needing a person, a sweep candidate), are partial. There is
// no index of every item by updated_at alone: the operator's list without a state reads each state's
// range of items_state_changed and merges them (a Merge Append of five index scans).
//
//	items_pkey               (tenant, key)  Get, the group's read (FOR UPDATE), its UPDATE
//	items_state_changed      (tenant, state, updated_at, key)
//	                                         ListItems by state, or each state's range merged; retention
//	items_lease              partial (lease_expires_at) of the items in flight
//	                                         ExpiredLeases, the oldest unresolved age
//	items_needs_person_changed partial (tenant, updated_at, key) of the items needing a person
//	                                         ListItems needs_person=true, the oldest unresolved age
//	items_needs_person_since partial (tenant, needs_person_since NULLS FIRST, key), the same items
//	                                         ListItems by needs_person_since (the console's queue)
//	items_batch              partial (tenant, batch_id, batch_index NULLS FIRST, key)
//	                                         BatchItems, BatchCounts, ListItems by batch_id
//	items_of_execution       partial (tenant, execution_id)  ListItems by execution_id, sorted
//	items_of_reference       partial (tenant, reference)     ListItems by reference, sorted
//	items_sweep              partial (tenant, key) of the sweep candidates
//	                                         SweepCandidates, the oldest unresolved age
//	items_alert_pending      partial (tenant, key) of the items whose alert is due
//	                                         PendingAlertItems
//
// item_counts keeps the counts Stats reads (counts.go), a row per group and slot; series the measures
// over time (series.go), a row per tenant, step, bucket, destination and slot, and releases the versions
// of the service as they started; alerts is the alert outbox, counters the named counters, probes the
// probes' claims of reads, meta the ledger secret.
//
//	series_pkey   (tenant, step, start, destination, slot)  SeriesRows, the groups' upserts
//	series_start  (step, start)                             RemoveSeriesRows: every tenant's old rows
//	releases_pkey (id)                                      RecordRelease: the last one recorded
//	releases_at   (at)                                      Releases, in a range of times
//
// expect_rows is the guard of a statement that must change a number of rows (group.go).
const schemaV1 = `
CREATE TABLE {schema}.meta (
	name  text PRIMARY KEY,
	value bytea NOT NULL
);

CREATE TABLE {schema}.items (
	tenant             text NOT NULL,
	key                text NOT NULL,
	version            bigint NOT NULL,
	updated_at         timestamptz NOT NULL,
	needs_person_since timestamptz,
	lease_expires_at   timestamptz,
	batch_index        integer,
	attempt            integer NOT NULL,
	needs_person       boolean NOT NULL,
	sweep_candidate    boolean NOT NULL,
	alert_pending      boolean NOT NULL,
	state              text NOT NULL CHECK (state IN ('prepared', 'in_flight', 'succeeded', 'failed', 'unknown')),
	destination        text NOT NULL,
	workflow           text NOT NULL,
	owner              text NOT NULL,
	reference          text NOT NULL,
	batch_id           text NOT NULL,
	execution_id       text NOT NULL,
	doc                bytea NOT NULL,
	PRIMARY KEY (tenant, key)
);
CREATE INDEX items_state_changed ON {schema}.items (tenant, state, updated_at, key);
CREATE INDEX items_lease ON {schema}.items (lease_expires_at) WHERE state = 'in_flight';
CREATE INDEX items_needs_person_changed ON {schema}.items (tenant, updated_at, key) WHERE needs_person;
CREATE INDEX items_needs_person_since ON {schema}.items (tenant, needs_person_since NULLS FIRST, key) WHERE needs_person;
CREATE INDEX items_batch ON {schema}.items (tenant, batch_id, batch_index NULLS FIRST, key) WHERE batch_id <> '';
CREATE INDEX items_of_execution ON {schema}.items (tenant, execution_id) WHERE execution_id <> '';
CREATE INDEX items_of_reference ON {schema}.items (tenant, reference) WHERE reference <> '';
CREATE INDEX items_sweep ON {schema}.items (tenant, key) WHERE sweep_candidate;
CREATE INDEX items_alert_pending ON {schema}.items (tenant, key) WHERE alert_pending;

CREATE TABLE {schema}.item_counts (
	tenant                text NOT NULL,
	destination           text NOT NULL,
	state                 text NOT NULL,
	needs_person          boolean NOT NULL,
	slot                  integer NOT NULL,
	items                 bigint NOT NULL,
	retries               bigint NOT NULL,
	attempted             bigint NOT NULL,
	recoveries            bigint NOT NULL,
	resolutions           bigint NOT NULL,
	duplicates            bigint NOT NULL,
	entered_unknown       bigint NOT NULL,
	history_dropped       bigint NOT NULL,
	history_dropped_items bigint NOT NULL,
	PRIMARY KEY (tenant, destination, state, needs_person, slot)
);

CREATE TABLE {schema}.alerts (
	tenant             text NOT NULL,
	key                text NOT NULL,
	attempt            integer NOT NULL,
	cause              text NOT NULL,
	owner              text NOT NULL,
	escalate_to        text NOT NULL DEFAULT '',
	escalate_after     interval NOT NULL DEFAULT '0',
	batch_id           text NOT NULL DEFAULT '',
	destination        text NOT NULL DEFAULT '',
	status             text NOT NULL,
	claim              text,
	claimed_until      timestamptz,
	channel            text NOT NULL DEFAULT '',
	ts                 text NOT NULL DEFAULT '',
	escalate_at        timestamptz,
	escalated_by       text NOT NULL DEFAULT '',
	escalation_channel text NOT NULL DEFAULT '',
	escalation_ts      text NOT NULL DEFAULT '',
	created_at         timestamptz NOT NULL,
	sent_at            timestamptz,
	escalated_at       timestamptz,
	closed_at          timestamptz,
	post_attempt_at    timestamptz,
	PRIMARY KEY (tenant, key, attempt, cause)
);
CREATE INDEX alerts_pending ON {schema}.alerts (tenant, owner, batch_id) WHERE status = 'pending';
CREATE INDEX alerts_escalate ON {schema}.alerts (escalate_at) WHERE status = 'sent' AND escalate_at IS NOT NULL;
CREATE INDEX alerts_message ON {schema}.alerts (channel, ts) WHERE ts <> '';
CREATE INDEX alerts_escalation_message ON {schema}.alerts (escalation_channel, escalation_ts) WHERE escalation_ts <> '';
CREATE INDEX alerts_claim ON {schema}.alerts (claim) WHERE claim IS NOT NULL;
CREATE INDEX alerts_delivered_open ON {schema}.alerts (tenant, key) WHERE status IN ('sent', 'escalated') AND closed_at IS NULL;

CREATE TABLE {schema}.counters (
	tenant      text NOT NULL,
	destination text NOT NULL,
	name        text NOT NULL,
	value       bigint NOT NULL,
	PRIMARY KEY (tenant, destination, name)
);

CREATE TABLE {schema}.probes (
	tenant        text NOT NULL,
	key           text NOT NULL,
	attempt       integer NOT NULL,
	read          integer NOT NULL,
	claim         text NOT NULL,
	claimed_until timestamptz NOT NULL,
	PRIMARY KEY (tenant, key, attempt, read)
);

CREATE TABLE {schema}.series (
	tenant              text NOT NULL,
	step                text NOT NULL CHECK (step IN ('1h', '1d')),
	start               timestamptz NOT NULL,
	destination         text NOT NULL,
	slot                integer NOT NULL,
	proceeds            bigint NOT NULL DEFAULT 0,
	succeeded           bigint NOT NULL DEFAULT 0,
	failed              bigint NOT NULL DEFAULT 0,
	unknown             bigint NOT NULL DEFAULT 0,
	needs_person        bigint NOT NULL DEFAULT 0,
	resolved_by_person  bigint NOT NULL DEFAULT 0,
	settled_by_lookup   bigint NOT NULL DEFAULT 0,
	same_key_recoveries bigint NOT NULL DEFAULT 0,
	conflicts           bigint NOT NULL DEFAULT 0,
	duplicate_effects   bigint NOT NULL DEFAULT 0,
	resolutions         bigint NOT NULL DEFAULT 0,
	resolution_ms       bigint NOT NULL DEFAULT 0,
	r_1m                bigint NOT NULL DEFAULT 0,
	r_5m                bigint NOT NULL DEFAULT 0,
	r_15m               bigint NOT NULL DEFAULT 0,
	r_1h                bigint NOT NULL DEFAULT 0,
	r_4h                bigint NOT NULL DEFAULT 0,
	r_12h               bigint NOT NULL DEFAULT 0,
	r_24h               bigint NOT NULL DEFAULT 0,
	r_72h               bigint NOT NULL DEFAULT 0,
	r_168h              bigint NOT NULL DEFAULT 0,
	r_more              bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (tenant, step, start, destination, slot)
);
CREATE INDEX series_start ON {schema}.series (step, start);

CREATE TABLE {schema}.releases (
	id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	at      timestamptz NOT NULL,
	version text NOT NULL
);
CREATE INDEX releases_at ON {schema}.releases (at);

CREATE FUNCTION {schema}.expect_rows(got bigint, want bigint) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
	IF got <> want THEN
		RAISE EXCEPTION 'companion: % of % items changed under the transaction', want - got, want USING ERRCODE = 'CP001';
	END IF;
	RETURN got;
END
$$;
`

// lostRace is the SQLSTATE expect_rows raises: another writer changed an item since the state the write
// was decided on (read, or held in the item cache). The transaction is then decided again.
const lostRace = "CP001"

// quoteSchema returns the schema's name as an SQL identifier.
func quoteSchema(schema string) string { return pgx.Identifier{schema}.Sanitize() }

// withSchema puts the quoted schema's name where sql says {schema}.
func withSchema(sql, quoted string) string { return strings.ReplaceAll(sql, "{schema}", quoted) }

// migrationLock is the key of the advisory lock that migrations of schema hold: a hash of the schema's
// name, so that the ledgers of two schemas in one database migrate independently.
func migrationLock(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("companion schema migrations\x00" + schema))
	return int64(h.Sum64())
}

// migrate brings the schema to the latest version, in one transaction under the schema's advisory lock.
// It returns the versions it applied (none when the schema was current).
func (s *Store) migrate(ctx context.Context) ([]int, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock(s.schema)); err != nil {
		return nil, err
	}
	// CREATE SCHEMA IF NOT EXISTS needs the right to create schemas in the database even when the schema
	// exists: a role that was given a schema (docs/deploying.md) needs none, so the schema is created only
	// when it is missing.
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, s.schema).Scan(&exists); err != nil {
		return nil, err
	}
	if !exists {
		if _, err := tx.Exec(ctx, `CREATE SCHEMA `+s.quoted); err != nil {
			return nil, fmt.Errorf("create schema %s: %w", s.schema, err)
		}
	}
	if _, err := tx.Exec(ctx, withSchema(`CREATE TABLE IF NOT EXISTS {schema}.schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`, s.quoted)); err != nil {
		return nil, err
	}
	var current int
	if err := tx.QueryRow(ctx, withSchema(`SELECT coalesce(max(version), 0) FROM {schema}.schema_migrations`, s.quoted)).Scan(&current); err != nil {
		return nil, err
	}
	if latest := migrations[len(migrations)-1].version; current > latest {
		return nil, fmt.Errorf("schema %s is at version %d, which a later build of companion made; this build knows versions up to %d: "+
			"run the later build, or a schema of its own (POSTGRES_SCHEMA)", s.schema, current, latest)
	}
	var applied []int
	for _, m := range migrations {
		if m.version <= current {
			continue
		}
		start := time.Now()
		if _, err := tx.Exec(ctx, withSchema(m.sql, s.quoted)); err != nil {
			return nil, fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
		}
		if _, err := tx.Exec(ctx, withSchema(`INSERT INTO {schema}.schema_migrations (version, name) VALUES ($1, $2)`, s.quoted), m.version, m.name); err != nil {
			return nil, err
		}
		s.log.Info("migrated the ledger's schema", "schema", s.schema, "version", m.version, "name", m.name,
			"took", time.Since(start).Round(time.Millisecond).String())
		applied = append(applied, m.version)
	}
	return applied, tx.Commit(ctx)
}
