// Package pgstore keeps the ledger in PostgreSQL: the store for several companion replicas where a
// PostgreSQL already runs (the database of most n8n installations), in a schema of its own.
//
// Each item is one row of the items table, keyed by (tenant, key). Every transition runs in a
// transaction of READ COMMITTED that reads its items with SELECT … FOR UPDATE, in key order, decides them
// in Go (the ledger's tables), and writes them with statements guarded by what it read: an UPDATE that
// must match each item at the version it read (expect_rows aborts the transaction when one does not), an
// INSERT that a concurrent creator of the same key makes fail on the primary key. The row locks hold the
// items from the read to the commit, so no other replica decides on them in between; a creator that lost
// the race for a new key, a deadlock, or a connection lost before the commit was sent make the store
// decide the transaction again, on a fresh read. The kept counts (counts.go) and the measures over time
// (series.go) are written in the same transaction as the items.
//
// Transitions that arrive together share one transaction (group.go): one commit, one WAL flush, for as
// many callers as arrived while the last commit was on disk. A caller alone waits for nothing more.
//
// Leases are stamped and judged on the database's clock (ClockOffset): the group's read also reads
// clock_timestamp(), so every replica decides on the one clock they share, whatever its own says.
//
// This is the only package that imports pgx. Every SQL statement is in queries.go; every error of pgx or
// the server is translated once, in interpretError (errors.go).
package pgstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/replaysafe/companion/items"
)

// DefaultSchema is the schema the ledger lives in when none is named (POSTGRES_SCHEMA).
const DefaultSchema = "companion"

// DefaultTimeout bounds every transaction and query when the caller's context has no earlier deadline:
// a server that does not answer turns into items.ErrUnavailable within it, never into a hung request.
const DefaultTimeout = 5 * time.Second

// DefaultCommitters is how many transactions of grouped transitions run at once (WithCommitters). One, as
// measured: with two, each group is half as large and the two transactions contend for the same index
// pages and the WAL, and the server spent 1.6–2.2× the CPU per item (the service 1.2×) at 32 callers
// through HTTP; with three, 2.5–3×. With the item cache (a group in one round trip), two committers still
// gave 0.7× the items/s of one at 32 callers, and three 0.55×.
const DefaultCommitters = 1

// Store is the PostgreSQL store. It is safe for concurrent use, by any number of processes.
type Store struct {
	pool *pgxpool.Pool
	// ownsPool: Open made the pool, and Close closes it; a pool handed to New is its owner's.
	ownsPool bool
	schema   string
	quoted   string // schema as an SQL identifier
	q        queries
	log      *slog.Logger
	timeout  time.Duration
	// settleWait bounds the wait for the outcome of a COMMIT whose answer was lost (group.go).
	settleWait time.Duration
	// clock is this process's clock, which the database's is compared with (ClockOffset); reading is the
	// latest reading of the database's clock.
	clock   func() time.Time
	reading atomic.Pointer[clockReading]
	// The committers (group.go) take the transitions sent on transitions until Close closes stop;
	// committers 0 runs each transition in its caller's goroutine instead.
	committers    int
	cacheItems    int
	transitions   chan *transition
	stop          chan struct{}
	committerDone sync.WaitGroup
	closing       sync.Once
	// mature is set once the items table is no longer young, youngAt is when its size was last read,
	// readingAge is set while a read of its size is under way (customPlans).
	mature, readingAge atomic.Bool
	youngAt            atomic.Int64
	// fault, set by tests, fails a step of a group's transaction (see injected).
	fault func(step string) error
	// commits counts the transactions of transitions committed, decided the transitions taken, unread the
	// transactions committed without reading their items, carried the groups given a transaction begun
	// with the previous group's COMMIT (group.go).
	commits, decided, unread, carried atomic.Int64
	// waiting counts the transitions waiting for a committer; guessNew, when positive, counts down the
	// groups that are read whole rather than take the items the cache does not hold as new (group.go).
	waiting, guessNew atomic.Int32
	// cache holds the items this process committed lately (cache.go); nil: none.
	cache *itemCache
}

var _ items.SharedStore = (*Store)(nil)

// Option changes how New and Open set the store up.
type Option func(*Store)

// WithTimeout sets the bound of every transaction and query (DefaultTimeout when not given).
func WithTimeout(d time.Duration) Option { return func(s *Store) { s.timeout = d } }

// WithLogger names where the store says what it changed in the schema (slog.Default() otherwise).
func WithLogger(l *slog.Logger) Option { return func(s *Store) { s.log = l } }

// WithClock sets the process clock the database's clock is compared with (time.Now when not given): a
// test gives two stores clocks that differ, as two replicas' clocks do.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.clock = now } }

// WithCommitters sets how many transactions of grouped transitions run at once (DefaultCommitters); 0
// runs every transition in a transaction of its own, in its caller's goroutine, without grouping.
func WithCommitters(n int) Option { return func(s *Store) { s.committers = max(n, 0) } }

// WithItemCache bounds the items the store keeps of those it committed (DefaultItemCache when not given),
// so that a group of them is written without reading them again; 0 keeps none.
func WithItemCache(n int) Option { return func(s *Store) { s.cacheItems = max(n, 0) } }

// New returns a store over pool in schema (DefaultSchema when empty), after migrating the schema to this
// build's version (schema.go). The pool stays its owner's: Close does not close it. Returns
// items.ErrUnavailable (with the cause) when the database cannot be used.
func New(ctx context.Context, pool *pgxpool.Pool, schema string, opts ...Option) (*Store, error) {
	if schema == "" {
		schema = DefaultSchema
	}
	s := &Store{pool: pool, schema: schema, quoted: quoteSchema(schema), log: slog.Default(), timeout: DefaultTimeout,
		clock: time.Now, committers: DefaultCommitters, settleWait: DefaultSettleWait, cacheItems: DefaultItemCache}
	for _, o := range opts {
		o(s)
	}
	s.q = newQueries(s.quoted)
	ctx, cancel := context.WithTimeout(ctx, max(s.timeout, 30*time.Second)) // a first migration may take a while
	defer cancel()
	if err := checkServer(ctx, pool); err != nil {
		return nil, err
	}
	if _, err := s.migrate(ctx); err != nil {
		return nil, fmt.Errorf("%w: postgres: migrate schema %s: %w", items.ErrUnavailable, schema, interpretError(err))
	}
	s.readAge(ctx) // a ledger in use is planned with generic plans from its first group
	s.youngAt.Store(time.Now().UnixNano())
	if s.cacheItems > 0 {
		s.cache = newItemCache(s.cacheItems)
	}
	s.transitions, s.stop = make(chan *transition), make(chan struct{})
	for range s.committers {
		s.committerDone.Add(1)
		go s.commitGroups()
	}
	return s, nil
}

// minServerVersion is the oldest PostgreSQL the store runs on: pg_current_xact_id and pg_xact_status
// (group.go) came with 13.
const minServerVersion = 130000

// checkServer refuses a server older than minServerVersion, and a standby (it cannot record a claim).
func checkServer(ctx context.Context, pool *pgxpool.Pool) error {
	var version int
	var standby bool
	if err := pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, pg_is_in_recovery()`).Scan(&version, &standby); err != nil {
		return fmt.Errorf("%w: postgres: %w", items.ErrUnavailable, interpretError(err))
	}
	switch {
	case version < minServerVersion:
		return fmt.Errorf("postgres: the server is PostgreSQL %d.%d; the ledger needs 13 or later", version/10000, version%10000)
	case standby:
		return fmt.Errorf("%w: postgres: the server is a standby (read-only, in recovery): name the primary", items.ErrUnavailable)
	}
	return nil
}

// Schema returns the schema the ledger lives in.
func (s *Store) Schema() string { return s.schema }

// Pool returns the store's connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// bounded returns ctx with the store's timeout, unless it ends earlier already.
func (s *Store) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// Get implements items.Store.
func (s *Store) Get(ctx context.Context, tenant, key string) (*items.Item, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	var doc []byte
	if err := s.pool.QueryRow(ctx, s.q.GetItem, tenant, key).Scan(&doc); err != nil {
		return nil, interpretError(err)
	}
	return decodeItem(doc, tenant, key)
}

// Transition implements items.Store: a TransitionMany of one key.
func (s *Store) Transition(ctx context.Context, tenant, key string, fn items.TransitionFunc) (*items.Item, error) {
	out, err := s.TransitionMany(ctx, tenant, []string{key}, func(_ int, cur *items.Item) (*items.Item, error) { return fn(cur) })
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// LedgerSecret implements items.Store: the first replica to start inserts a random secret; every replica
// then reads the one that was committed.
func (s *Store) LedgerSecret(ctx context.Context) ([]byte, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	if _, err := s.pool.Exec(ctx, s.q.InsertSecret, secret); err != nil {
		return nil, interpretError(err)
	}
	var stored []byte
	if err := s.pool.QueryRow(ctx, s.q.ReadSecret).Scan(&stored); err != nil {
		return nil, interpretError(err)
	}
	if len(stored) == 0 {
		return nil, errors.New("pgstore: the stored ledger secret is empty")
	}
	return stored, nil
}

// Ping implements items.Store: the server must commit a write (a standby, a read-only server or a full
// disk answers reads, but cannot record a claim).
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	_, err := s.pool.Exec(ctx, s.q.Ping)
	return interpretError(err)
}

// Close implements items.Store: the committers finish the transitions they took, then the pool closes
// (if Open made it).
func (s *Store) Close() error {
	s.closing.Do(func() {
		if s.stop != nil {
			close(s.stop)
		}
		s.committerDone.Wait()
		if s.ownsPool {
			s.pool.Close()
		}
	})
	return nil
}

// injected returns the failure a test's fault hook gives for step.
func (s *Store) injected(step string) error {
	if s.fault == nil {
		return nil
	}
	return s.fault(step)
}

// execRetrying runs a statement that changes rows (the outbox's, the probes', the counters'), again when
// the server broke a deadlock by aborting it: the statement had no effect then. It returns the rows it
// changed.
func (s *Store) execRetrying(ctx context.Context, sql string, args ...any) (int64, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	for try := 0; ; try++ {
		tag, err := s.pool.Exec(ctx, sql, args...)
		if err != nil && retryInside(err) && try < maxRaces && ctx.Err() == nil {
			continue
		}
		if err != nil {
			return 0, interpretError(err)
		}
		return tag.RowsAffected(), nil
	}
}

// collect runs a query and scans each row with scan. Returns ErrUnavailable.
func collect[T any](ctx context.Context, s *Store, scan func(pgx.Rows) (T, error), sql string, args ...any) ([]T, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, interpretError(err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError(err)
	}
	return out, nil
}
