// Package sqlitestore keeps the ledger in one SQLite file: the embedded store for a single instance.
//
// It uses modernc.org/sqlite (pure Go, no cgo) in WAL mode with synchronous=FULL, so an acknowledged claim
// survives power loss. Writes go through one connection, where one committer runs the transitions waiting
// at a moment in one BEGIN IMMEDIATE transaction (group commit, group.go), each against the state the
// earlier ones left; every write is guarded by the version the transaction read (UPDATE … WHERE version
// = ?), so two transitions on one item can never both act on the same state. The committer keeps the
// items it committed last (cache.go) and reads only the others.
package sqlitestore

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gojson "github.com/goccy/go-json"

	"github.com/replaysafe/companion/items"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// FileName is the database file inside the data directory.
const FileName = "companion.db"

// Store is the SQLite store. It is safe for concurrent use.
type Store struct {
	path string
	log  *slog.Logger
	// convertBatchSize is how many items a conversion copies per transaction (convert.go).
	convertBatchSize int
	w                *sql.DB // one connection: writes serialize here
	r                *sql.DB // readers
	// inserts (one per insertRows) and updates (one per set of changed columns, update.go) are prepared
	// on w's connection: parsing the SQL anew for every item cost a batch of 500 a quarter of its time.
	// unprepared are the sets of changed columns to prepare after the commit that ran them unprepared.
	inserts    []*sql.Stmt
	updates    map[uint32]*sql.Stmt
	unprepared map[uint32]bool
	addCounts  *sql.Stmt
	addSeries  *sql.Stmt
	reads      []*sql.Stmt // one per readSizes
	// rows and doc are write's buffers, used by one transaction at a time.
	rows []any
	doc  []byte
	// The committer (commitGroups) receives every TransitionMany until Close closes stop.
	transitions         chan *transition
	stop, committerDone chan struct{}
	closing             sync.Once
	// grown is how much the write-ahead log grew since the last checkpoint (estimated pages); the
	// committer's alone.
	grown   int
	commits atomic.Int64 // transactions committed
	// busy is how long the committer has spent on groups (reading, deciding, writing, committing), of
	// which committing how long, and decided the transitions it has taken: WriterTotals.
	busy, committing, decided atomic.Int64
	// groupReads counts the readMany calls of group commits, for tests.
	groupReads atomic.Int64
	// fault, set by tests, fails a transaction's statement after it ran, or its commit before it runs.
	fault func(op string) error
	// lock is the data dir's lock (lockDataDir), held until Close.
	lock *os.File
	// cache holds the items the committer committed last (cache.go); nil: none. cacheItems is its bound
	// as asked (WithItemCache); the cache is made only where the data dir's lock is held (cacheBound).
	cache      *itemCache
	cacheItems int
	// cacheHits and cacheMisses count the items the committer's groups looked up: found in the cache, or
	// read from the database (every lookup, when there is no cache): ItemCacheTotals.
	cacheHits, cacheMisses atomic.Int64
	// lastID is the id of the last item the committer inserted (nextItemID); -1: to be read. The
	// committer's alone.
	lastID int64
}

var (
	_ items.Store       = (*Store)(nil)
	_ items.WriteProber = (*Store)(nil)
)

// Open opens (creating if needed) the ledger in dataDir and migrates its schema; a ledger of an earlier
// layout is converted first (convert.go), which takes a while for a large one.
func Open(ctx context.Context, dataDir string, opts ...Option) (*Store, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("sqlitestore: data dir: %w", err)
	}
	lock, err := takeLock(dataDir)
	if err != nil {
		return nil, err
	}
	opened := false
	defer func() {
		if !opened && lock != nil {
			lock.Close() // a failure before the store held it
		}
	}()
	path := filepath.Join(dataDir, FileName)
	dsn := func(pragmas ...string) string {
		q := url.Values{}
		// temp_store(memory): statement journals (an UPDATE, or a trigger, inside a batch's transaction) stay
		// in memory instead of a temporary file written page by page, a third of a batch's time with triggers.
		for _, p := range append([]string{"journal_mode(WAL)", "synchronous(FULL)", "busy_timeout(10000)", "foreign_keys(on)", "temp_store(memory)"}, pragmas...) {
			q.Add("_pragma", p)
		}
		return "file:" + path + "?" + q.Encode()
	}
	// The writer checkpoints by itself only when the background checkpointer falls far behind.
	// auto_vacuum(incremental) takes effect in a new file only (retention.go).
	w, err := sql.Open("sqlite", dsn(fmt.Sprintf("wal_autocheckpoint(%d)", walSafetyPages), "auto_vacuum(incremental)")+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	r, err := sql.Open("sqlite", dsn())
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	r.SetMaxOpenConns(8)
	s := &Store{path: path, w: w, r: r, log: slog.Default(), convertBatchSize: convertBatchSize, lock: lock,
		cacheItems: DefaultItemCache, lastID: -1}
	opened = true // s holds the lock now: its Close releases it
	for _, o := range opts {
		o(s)
	}
	if err := s.migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	s.updates, s.unprepared = map[uint32]*sql.Stmt{}, map[uint32]bool{}
	s.addCounts, err = w.PrepareContext(ctx, addCountsSQL)
	if err == nil {
		s.addSeries, err = w.PrepareContext(ctx, addSeriesSQL)
	}
	for _, rows := range insertRows {
		if err != nil {
			break
		}
		var st *sql.Stmt
		st, err = w.PrepareContext(ctx, insertItemsSQL(rows))
		s.inserts = append(s.inserts, st)
	}
	for _, n := range readSizes {
		if err != nil {
			break
		}
		var st *sql.Stmt
		st, err = w.PrepareContext(ctx, readManySQL(n))
		s.reads = append(s.reads, st)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlitestore: prepare: %w", err)
	}
	// The cache starts empty after the migrations and conversions, the last writes of items outside the
	// committer and retention.
	if bound := cacheBound(s.cacheItems, lock != nil); bound > 0 {
		s.cache = newItemCache(bound)
	} else if s.cacheItems > 0 {
		s.log.Warn("the committer's item cache is off: no lock on the data dir is held on this platform, "+
			"so nothing keeps another process from writing the ledger, and the cache is sound only while this process alone writes it",
			"data_dir", dataDir, "item_cache", s.cacheItems)
	}
	s.transitions, s.stop, s.committerDone = make(chan *transition), make(chan struct{}), make(chan struct{})
	go s.commitGroups()
	return s, nil
}

// takeLock is lockDataDir; tests replace it to open a store as a build without a lock does.
var takeLock = lockDataDir

// cacheBound is the bound of the committer's item cache for the bound asked (0: none) and whether this
// process holds the data dir's lock. The cache is sound only while one process writes the ledger
// (cache.go), which only the lock makes sure of: where none is held (a build without flock, lock_other.go),
// there is no cache.
func cacheBound(asked int, locked bool) int {
	if !locked {
		return 0
	}
	return max(asked, 0)
}

// walSafetyPages is the size of the write-ahead log (in 4 KiB pages, 64 MiB) at which the writer
// checkpoints by itself, in the request that crosses it: only when the committer's checkpoints (see
// checkpointPages) cannot keep up.
const walSafetyPages = 16384

// checkpointPages is how much the write-ahead log grows (estimated, in pages) between two checkpoints:
// SQLite's own default, so that moving checkpoints out of the commits does not add any.
//
// SQLite would checkpoint inside the commit that crosses the mark, and that request would wait for the
// copy and an fsync of the database file: a third of a batch's commit. The committer checkpoints instead,
// once the group's callers have their answers, on the writer's connection between two transactions, as
// SQLite's own would: run beside the commits (on a reader connection), its fsyncs slowed every
// single-item commit by a tenth on a VM disk. A failed checkpoint is left to the next one, and to the
// writer's own at walSafetyPages.
const checkpointPages = 1000

// estimatedPages is what one commit of n items adds to the write-ahead log: a page for every two items'
// rows, and about one page per index and the table for the leaves the commit touches.
func estimatedPages(n int) int { return 8 + n/2 }

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// schema keeps items in a rowid table keyed by a number (id, the rowid), with a unique index on
// (tenant, key): every other index then carries the id, a few bytes, where it carried the key, 40 and
// more. Not WITHOUT ROWID: an item's row is larger than an index entry, and in a WITHOUT ROWID table every
// key comparison on the way down the primary key read the row's overflow pages.
//
// Beside the document (doc, the stored form: stored.go), a row holds the columns the queries select by,
// and the item's facts (items.Item.Facts), computed in Go as write stores the item, so that no query
// parses documents. The document does not repeat what the columns hold. The columns come before doc so
// that reading them never touches the document's bytes. The workflow column is NULL where the item's
// workflow is its key's first part (keyWorkflow), as it is for every key derived from its parts.
//
// Every index below is written by every claim, so each one is here for a query (TestQueryPlans checks
// with EXPLAIN QUERY PLAN that it serves it). The lists want the newest change first, yet their indexes
// ascend by updated_at and are read backwards: a new change then lands at the right-hand end of the
// b-tree, where SQLite appends to the last page, instead of at the left-hand end of a descending index,
// where every full page is split in two. The lists break ties of updated_at by key, which the large
// indexes do not hold: SQLite sorts the items of one change time (USE TEMP B-TREE FOR LAST TERM OF ORDER
// BY), usually a batch. (A sweep that marks thousands of items at one moment makes a page of the whole
// list cost a sort of those: 23 ms for 10,000, BenchmarkOperatorQueries/List100AllAtOneTime. The list of
// the items needing a person, where such a crowd lands, keeps the key in its small partial index.) The
// indexes of a column most items leave empty (reference, execution, batch) are partial: an item without
// one is not in them.
//
// The execution's and the reference's indexes do not hold updated_at, although their lists are ordered
// by it: an index that holds updated_at is rewritten by every transition (an UPDATE deletes and inserts
// the item's entry of each index whose column changes), and the items of the templates carry both, so
// each report paid two more index rewrites (6–7% of the service's CPU per batch item in one A/B with
// companion bench, about 3% in another). Those two lists read the items of one execution or one reference and sort them (USE
// TEMP B-TREE FOR ORDER BY): a handful, or a run's items, where a page costs a read of all of them (about
// 8 ms for the first page of a run of 1,000 on the 2-core development VM:
// BenchmarkOperatorQueries/ListExecution1000FirstPage). Ledgers of an earlier release had them as
// items_execution and items_reference, with updated_at: they are dropped, and the new ones built, at the
// first start (dropIndexesWithUpdatedAt).
//
// For the same reason there is no index of every item by updated_at alone (items_changed, until
// 2026-12-01): each transition rewrote its entry as well as items_state_changed's. A list without one
// state filter (the operator's list as it opens, or a filter of several states) reads each state's range
// of items_state_changed, newest first, one page from each, and SQLite merges them (mergedStates): five
// short range reads and a sort of at most five pages' rows instead of one range read
// (BenchmarkOperatorQueries/List100: about 3.8 ms against 2.5 ms for a page of 100 of 10,000 items).
//
//	items_key                (tenant, key)  UNIQUE: get, readMany (the UPDATE finds the row by its id)
//	items_lease              partial         ExpiredLeases: only in-flight items are in it
//	items_state_changed      (tenant, state, updated_at)
//	                                         ListItems, read backwards, filtering as it walks
//	                                         (needs_person = 0, …): with one state, its range; without
//	                                         one (or with several), each state's range, merged
//	                                         (mergedStates); retention
//	items_needs_person_changed partial (tenant, updated_at, key)
//	                                         ListItems with needs_person = 1 (the operator's own list):
//	                                         only the few items that need a person are in it
//	items_needs_person_since partial (tenant, needs_person_since, key)
//	                                         ListItems by needs_person_since (the console's queue, oldest
//	                                         first): the same few items, in the order a person takes them
//	items_batch              partial (tenant, batch_id, batch_index)
//	                                         BatchItems, BatchCounts
//	items_of_execution       partial (tenant, execution_id)
//	                                         ListItems with an execution_id (an error workflow finds its
//	                                         run's items), sorted: see below
//	items_of_reference       partial (tenant, reference)
//	                                         ListItems with a reference (the console's Find), sorted
//	items_sweep              partial         SweepCandidates
//	items_alert_pending      partial         PendingAlertItems
//
// Stats reads the counts kept in item_counts (counts.go), and the partial indexes of the unresolved
// items. A ledger of an earlier layout is converted at start (convert.go).
const schema = `
CREATE TABLE IF NOT EXISTS meta (
	name  TEXT PRIMARY KEY,
	value BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS items (` + itemsTable + `);
CREATE UNIQUE INDEX IF NOT EXISTS items_key ON items (tenant, key);
CREATE INDEX IF NOT EXISTS items_lease ON items (lease_expires_at) WHERE state = 'in_flight';
CREATE INDEX IF NOT EXISTS items_state_changed ON items (tenant, state, updated_at);
CREATE INDEX IF NOT EXISTS items_needs_person_changed ON items (tenant, updated_at, key) WHERE needs_person = 1;
CREATE INDEX IF NOT EXISTS items_needs_person_since ON items (tenant, needs_person_since, key) WHERE needs_person = 1;
CREATE INDEX IF NOT EXISTS items_of_reference ON items (tenant, reference) WHERE reference != '';
CREATE INDEX IF NOT EXISTS items_of_execution ON items (tenant, execution_id) WHERE execution_id != '';
CREATE INDEX IF NOT EXISTS items_batch ON items (tenant, batch_id, batch_index) WHERE batch_id != '';
CREATE INDEX IF NOT EXISTS items_sweep ON items (tenant, key) WHERE sweep_candidate = 1;
CREATE INDEX IF NOT EXISTS items_alert_pending ON items (tenant, key) WHERE alert_pending = 1;
`

// itemsTable is the items table's definition (also of the table a conversion fills).
const itemsTable = `
	id                 INTEGER PRIMARY KEY,
	tenant             TEXT NOT NULL,
	key                TEXT NOT NULL,
	version            INTEGER NOT NULL,
	state              TEXT NOT NULL,
	destination        TEXT NOT NULL,
	workflow           TEXT,
	owner              TEXT NOT NULL DEFAULT '',
	reference          TEXT NOT NULL DEFAULT '',
	batch_id           TEXT NOT NULL DEFAULT '',
	batch_index        INTEGER,
	execution_id       TEXT NOT NULL DEFAULT '',
	needs_person       INTEGER NOT NULL DEFAULT 0,
	lease_expires_at   INTEGER,
	created_at         INTEGER NOT NULL,
	updated_at         INTEGER NOT NULL,
	attempt            INTEGER NOT NULL DEFAULT 0,
	same_key_recovered INTEGER NOT NULL DEFAULT 0,
	resolutions        INTEGER NOT NULL DEFAULT 0,
	duplicate_effect   INTEGER NOT NULL DEFAULT 0,
	entered_unknown    INTEGER NOT NULL DEFAULT 0,
	needs_person_since INTEGER,
	sweep_candidate    INTEGER NOT NULL DEFAULT 0,
	alert_pending      INTEGER NOT NULL DEFAULT 0,
	doc                BLOB NOT NULL
`

func (s *Store) migrate(ctx context.Context) error {
	converted, err := s.convert(ctx)
	if err != nil {
		return fmt.Errorf("sqlitestore: convert %s to the compact layout: %w", s.path, err)
	}
	start := time.Now()
	dropped, err := s.dropIndexesWithUpdatedAt(ctx)
	if err != nil {
		return fmt.Errorf("sqlitestore: migrate %s: %w", s.path, err)
	}
	if _, err := s.w.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("sqlitestore: migrate %s: %w", s.path, err)
	}
	switch {
	case converted:
		s.log.Info("built the indexes of the converted ledger", "took", time.Since(start).Round(time.Millisecond).String())
	case dropped > 0:
		s.log.Info("replaced the indexes of an earlier release that held updated_at (once, at the first start of this release)",
			"dropped", dropped,
			"took", time.Since(start).Round(time.Millisecond).String())
	}
	if err := s.giveBackSpace(ctx); err != nil {
		return fmt.Errorf("sqlitestore: give back the space of %s's old layout: %w", s.path, err)
	}
	if _, err := s.w.ExecContext(ctx, `PRAGMA cache_size = -2000`); err != nil { // SQLite's default, after convert's
		return fmt.Errorf("sqlitestore: migrate %s: %w", s.path, err)
	}
	if err := s.migrateOperators(ctx); err != nil {
		return err
	}
	if err := s.migrateCounts(ctx); err != nil {
		return err
	}
	if err := s.migrateSeries(ctx); err != nil {
		return err
	}
	start = time.Now()
	refreshed, err := s.refreshSweepCandidates(ctx)
	if err != nil {
		return fmt.Errorf("sqlitestore: refresh the sweep candidates of %s: %w", s.path, err)
	}
	if refreshed > 0 {
		s.log.Info("items a person acknowledged are no sweep candidates any more, and settled (once, for the items an earlier build wrote)",
			"items", refreshed, "took", time.Since(start).Round(time.Millisecond).String())
	}
	return nil
}

// hasColumn reports whether the ledger's table has the column: the migrations of earlier layouts ask it.
func (s *Store) hasColumn(ctx context.Context, table, column string) (bool, error) {
	var n int
	err := s.w.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info(?) WHERE name = ?`, table, column).Scan(&n)
	return n > 0, err
}

// hasSchemaObject reports whether the ledger's schema holds a table or an index (kind) of that name.
func (s *Store) hasSchemaObject(ctx context.Context, kind, name string) (bool, error) {
	var n int
	err := s.w.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = ? AND name = ?`, kind, name).Scan(&n)
	return n > 0, err
}

// dropIndexesWithUpdatedAt drops the indexes of an earlier release that held updated_at (see schema) and
// returns how many it dropped: those of executions and references, which schema then builds again
// without it, and items_changed, whose lists read items_state_changed now (mergedStates). The pages they
// held are reused as the ledger grows.
func (s *Store) dropIndexesWithUpdatedAt(ctx context.Context) (int, error) {
	var n int
	for _, name := range [...]string{"items_execution", "items_reference", "items_changed"} {
		have, err := s.hasSchemaObject(ctx, "index", name)
		if err != nil {
			return n, err
		}
		if !have {
			continue
		}
		if _, err := s.w.ExecContext(ctx, `DROP INDEX `+name); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// migrateExecutionID gives a ledger of an earlier layout the execution_id column, before it is converted. An item
// stored before has the execution of its latest claim only inside its document, in its last attempt: the
// column (and the document's top-level field) is filled from there, so a run's items are listed also when
// they were claimed before the upgrade.
func (s *Store) migrateExecutionID(ctx context.Context) error {
	have, err := s.hasColumn(ctx, "items", "execution_id")
	if err != nil {
		return err
	}
	if !have {
		tx, err := s.w.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `ALTER TABLE items ADD COLUMN execution_id TEXT NOT NULL DEFAULT ''`); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE items SET execution_id = latest, doc = json_set(doc, '$.execution_id', latest)
			FROM (SELECT rowid AS id, json_extract(doc, '$.attempts[#-1].execution_id') AS latest FROM items) AS l
			WHERE items.rowid = l.id AND latest IS NOT NULL AND latest != ''`); err != nil {
			return err
		}
		return tx.Commit()
	}
	return nil
}

// unavailable translates a database error into the domain's ErrUnavailable, keeping the cause for logs.
func unavailable(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: sqlite: %v", items.ErrUnavailable, err)
}

// storedColumns are the columns an item is read from, in scanItem's order.
const storedColumns = `tenant, key, version, state, destination, workflow, owner, reference, batch_id, batch_index,
	execution_id, needs_person, created_at, updated_at, doc`

type rowScanner interface {
	Scan(dest ...any) error
}

// scanItem reads a row of storedColumns, and into more the columns the query selects after them: the
// item and the row, or errCorrupt (wrapped) as decodeErr when its document cannot be read. A failure to
// read the row itself is returned as scanErr.
func scanItem(sc rowScanner, more ...any) (it *items.Item, r row, decodeErr, scanErr error) {
	var batchIndex sql.NullInt64
	var workflow sql.NullString
	var doc sql.RawBytes
	if err := sc.Scan(append([]any{&r.tenant, &r.key, &r.version, &r.state, &r.destination, &workflow, &r.owner, &r.reference,
		&r.batchID, &batchIndex, &r.executionID, &r.needsPerson, &r.createdAt, &r.updatedAt, &doc}, more...)...); err != nil {
		return nil, r, nil, err
	}
	r.workflow = workflow.String
	if !workflow.Valid {
		r.workflow = keyWorkflow(r.key)
	}
	if batchIndex.Valid {
		i := int(batchIndex.Int64)
		r.batchIndex = &i
	}
	it, err := decodeStored(doc, &r)
	if err == nil && (it.Tenant != r.tenant || it.Key != r.key) {
		err = fmt.Errorf("%w: stored under another key", errCorrupt)
	}
	return it, r, err, nil
}

func get(ctx context.Context, q *sql.DB, tenant, key string) (*items.Item, error) {
	return oneItem(q.QueryContext(ctx, `SELECT `+storedColumns+` FROM items WHERE tenant = ? AND key = ?`, tenant, key))
}

// oneItem reads the item of a query's first row (storedColumns): ErrNotFound when there is none,
// ErrUnavailable, or the stored document's error.
func oneItem(rows *sql.Rows, err error) (*items.Item, error) {
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, unavailable(err)
		}
		return nil, items.ErrNotFound
	}
	it, _, decodeErr, err := scanItem(rows)
	if err != nil {
		return nil, unavailable(err)
	}
	return it, decodeErr
}

// decodeJSON reads a document of an earlier build, JSON. It uses goccy/go-json, which decodes what
// encoding/json decodes into the same item (TestDecodeMatchesEncodingJSON) three times as fast.
func decodeJSON(doc []byte) (*items.Item, error) {
	var it items.Item
	if err := gojson.Unmarshal(doc, &it); err != nil {
		return nil, fmt.Errorf("%w: %w", errCorrupt, err)
	}
	return &it, nil
}

// Get implements items.Store.
func (s *Store) Get(ctx context.Context, tenant, key string) (*items.Item, error) {
	return get(ctx, s.r, tenant, key)
}

// Transition implements items.Store: one BEGIN IMMEDIATE transaction, the write guarded by version.
func (s *Store) Transition(ctx context.Context, tenant, key string, fn items.TransitionFunc) (*items.Item, error) {
	out, err := s.TransitionMany(ctx, tenant, []string{key}, func(_ int, cur *items.Item) (*items.Item, error) { return fn(cur) })
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// advance stamps next, the state fn made of cur (nil: a new item), with the version and times it is
// stored with.
func advance(cur, next *items.Item) error {
	if next.Tenant == "" || next.Key == "" {
		return fmt.Errorf("sqlitestore: item without tenant or key")
	}
	next.Version = 1
	if next.CreatedAt.IsZero() {
		next.CreatedAt = time.Now().UTC()
	}
	if cur != nil {
		next.Version = cur.Version + 1
		// updated_at orders the operator's list; it must move forward even when the clock stands still.
		next.UpdatedAt = laterOf(next.UpdatedAt, cur.UpdatedAt)
	}
	return nil
}

// insertRows are the sizes of the INSERT statements, largest first: a batch's new items go in as many of
// the largest as fit, the rest in smaller ones, a power of two each, so that a group commit's handful of
// new items (about eight at 32 callers) is a statement or two rather than one each: every statement opens
// a cursor on the table and each index. 24 parameters a row keep 100 rows far below SQLite's limit of
// 32766 bound parameters.
var insertRows = []int{100, 32, 16, 8, 4, 2, 1}

// write stores the final state (in last) of every changed item (ids, see itemID), inserting the items that did not exist
// when the transaction started (found) and updating the others guarded by the version found (and their
// tenant and key: updateSQL).
//
// With the cache on, it returns the row of each changed item as it is now stored, in changed's order.
func (s *Store) write(ctx context.Context, tx *sql.Tx, found map[string]*items.Item, stored map[string]*written, last map[string]*items.Item, changed []string) ([]*written, error) {
	// The transaction's statements need no cancellation of their own: a cancelled request still rolls
	// back, at BeginTx or Commit, and a watcher per statement cost a goroutine each.
	ctx = context.WithoutCancel(ctx)
	// The rows of the new items, written at the end, and the buffer documents are encoded in: kept from one
	// transaction to the next (a batch's rows are 180 KB), never shared, as one transaction at a time
	// holds the writer's connection.
	fresh, buf := s.rows[:0], s.doc
	defer func() {
		clear(fresh) // the values of this batch's rows are garbage now
		s.rows, s.doc = fresh[:0], buf
	}()
	update := updates{s: s, tx: tx}
	var now []*written // the rows as stored after the transaction, for the cache
	var freshAt []int  // the places in now of the rows in fresh
	if s.cache != nil {
		now = make([]*written, len(changed))
	}
	var args []any
	counts, series := items.CountChanges{}, items.SeriesChanges{}
	for at, id := range changed {
		cur, next := found[id], last[id]
		counts.Move(cur, next)
		series.Move(cur, next)
		var doc []byte
		var err error
		if doc, buf, err = document(buf, next); err != nil {
			return nil, &itemFault{id: id, err: err}
		}
		if cur == nil {
			id, err := s.nextItemID(ctx, tx)
			if err != nil {
				return nil, err
			}
			fresh = append(appendColumns(fresh, next, doc), id)
			if now != nil {
				freshAt = append(freshAt, at)
			}
			continue
		}
		row := stored[id]
		if row == nil { // cannot happen: every item found was read with its row
			return nil, unavailable(fmt.Errorf("sqlitestore: the row of a changed item was not read"))
		}
		args = appendColumns(args[:0], next, doc)
		mask := row.changedColumns(args)
		if now != nil {
			now[at] = &written{id: row.id, cols: slices.Clone(args[:len(setColumns)])}
		}
		set := args[:0] // the values of the columns of mask, moved to the front of args
		for c := range setColumns {
			if mask&(1<<c) != 0 {
				set = append(set, args[c])
			}
		}
		res, err := update.exec(ctx, mask, append(set, doc, row.id, cur.Version, cur.Tenant, cur.Key))
		if err := wroteRows(res, err, 1); err != nil {
			return nil, err
		}
		if err := s.injected("update"); err != nil {
			return nil, unavailable(err)
		}
	}
	rows := fresh
	for i, size := range insertRows {
		width := size * len(insertColumns)
		for len(rows) >= width {
			res, err := tx.StmtContext(ctx, s.inserts[i]).ExecContext(ctx, rows[:width]...)
			if err := wroteRows(res, err, size); err != nil {
				return nil, err
			}
			if err := s.injected("insert"); err != nil {
				return nil, unavailable(err)
			}
			rows = rows[width:]
		}
	}
	for j, at := range freshAt {
		r := fresh[j*len(insertColumns) : (j+1)*len(insertColumns)]
		now[at] = &written{id: r[len(insertColumns)-1].(int64), cols: slices.Clone(r[:len(setColumns)])}
	}
	if err := s.writeCounts(ctx, tx, counts); err != nil {
		return nil, err
	}
	return now, s.writeSeries(ctx, tx, series)
}

// wroteRows checks that a write statement changed the rows it was meant to.
func wroteRows(res sql.Result, err error, want int) error {
	if err != nil {
		return unavailable(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return unavailable(err)
	}
	if n != int64(want) {
		// Cannot happen inside BEGIN IMMEDIATE with one writer; refuse rather than act on a stale read.
		return fmt.Errorf("%w: sqlite: %d of %d items changed under the transaction", items.ErrUnavailable, int64(want)-n, want)
	}
	return nil
}

// itemColumns are the columns write stores, in the order appendColumns gives their values: those an
// UPDATE may set (setColumns), then doc, tenant and key.
var itemColumns = []string{"version", "state", "destination", "workflow", "owner", "reference", "batch_id",
	"batch_index", "execution_id", "needs_person", "lease_expires_at", "created_at", "updated_at", "attempt", "same_key_recovered",
	"resolutions", "duplicate_effect", "entered_unknown", "needs_person_since", "sweep_candidate", "alert_pending",
	"doc", "tenant", "key"}

// insertItemsSQL inserts rows new items. ON CONFLICT DO NOTHING turns an item that exists after all into
// a changed-row count that wroteRows refuses, rather than a constraint error.
//
// The rows carry their ids (insertColumns): the committer gives them (nextItemID), so that the cache knows
// a new item's row without reading it back. (INSERT … RETURNING id, the other way, cost a claim 10 µs of
// CPU more than it saved: a result row per item through database/sql.)
func insertItemsSQL(rows int) string {
	row := "(?" + strings.Repeat(", ?", len(insertColumns)-1) + ")"
	return "INSERT INTO items (" + strings.Join(insertColumns, ", ") + ") VALUES " + row +
		strings.Repeat(", "+row, rows-1) + " ON CONFLICT DO NOTHING"
}

// insertColumns are the columns of a new item's row: itemColumns, then its id.
var insertColumns = append(slices.Clip(itemColumns), "id")

// nextItemID returns the id of the transaction's next new item: one more than the largest id when the
// committer last looked (maxIDSQL, once after Open and after every failed group), counting up from there.
// The committer is the only writer of new items (one process holds the data dir's lock, and the migrations
// and conversions that write items are done before the committer starts), so that id is free; were it not,
// the INSERT's ON CONFLICT DO NOTHING would insert fewer rows than asked, which wroteRows refuses (the
// group fails, and the next one looks again).
func (s *Store) nextItemID(ctx context.Context, tx *sql.Tx) (int64, error) {
	if s.lastID < 0 {
		if err := tx.QueryRowContext(ctx, maxIDSQL).Scan(&s.lastID); err != nil {
			s.lastID = -1
			return 0, unavailable(err)
		}
	}
	s.lastID++
	return s.lastID, nil
}

// maxIDSQL reads the largest id of the items (the last entry of the table's b-tree).
const maxIDSQL = `SELECT coalesce(max(id), 0) FROM items`

// document encodes next for the doc column (stored.go), returning a copy the statement may keep. buf is
// reused across a transaction's items.
//
// A state that cannot be encoded (or whose encoding panics) is an error of the transition that made it.
func document(buf []byte, next *items.Item) (doc, _ []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			doc, err = nil, fmt.Errorf("sqlitestore: encode item: panicked: %v", r)
		}
	}()
	buf, err = appendStored(buf[:0], next)
	if err != nil {
		return nil, buf, err
	}
	return bytes.Clone(buf), buf, nil
}

// appendColumns appends the values of itemColumns for it, whose document is doc.
func appendColumns(args []any, it *items.Item, doc []byte) []any {
	var lease any
	if it.State == items.StateInFlight && it.LeaseExpiresAt != nil {
		lease = it.LeaseExpiresAt.UnixMilli()
	}
	var batchIndex any
	if it.BatchIndex != nil {
		batchIndex = *it.BatchIndex
	}
	f := it.Facts()
	var needsPersonSince any
	if f.NeedsPersonSince != nil {
		needsPersonSince = f.NeedsPersonSince.UnixNano()
	}
	var workflow any = it.Workflow
	if it.Workflow != "" && keyWorkflow(it.Key) == it.Workflow {
		workflow = nil // the key's: scanItem derives it
	}
	return append(args, it.Version, string(it.State), it.Destination, workflow, it.Owner, it.Reference,
		it.BatchID, batchIndex, it.ExecutionID, boolInt(it.NeedsPerson), lease, it.CreatedAt.UnixNano(), it.UpdatedAt.UnixNano(),
		f.Attempt, boolInt(f.SameKeyRecovered), f.Resolutions, boolInt(f.DuplicateEffect), boolInt(f.EnteredUnknown),
		needsPersonSince, boolInt(f.SweepCandidate), boolInt(f.AlertPending), doc, it.Tenant, it.Key)
}

// keyWorkflow returns the workflow part of a key of four parts (items.SplitKey), else "". The workflow
// column is NULL where the item's workflow is its key's: most items' keys are derived from their parts.
func keyWorkflow(key string) string {
	parts, _ := splitKey(key)
	return parts.Workflow
}

// injected returns the failure a test's fault hook gives for op.
func (s *Store) injected(op string) error {
	if s.fault == nil {
		return nil
	}
	return s.fault(op)
}

func laterOf(a, b time.Time) time.Time {
	if !a.After(b) {
		return b.Add(time.Nanosecond)
	}
	return a
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// LedgerSecret implements items.Store.
func (s *Store) LedgerSecret(ctx context.Context) ([]byte, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	if _, err := s.w.ExecContext(ctx, `INSERT INTO meta (name, value) VALUES ('ledger_secret', ?) ON CONFLICT DO NOTHING`, secret); err != nil {
		return nil, unavailable(err)
	}
	var stored []byte
	if err := s.r.QueryRowContext(ctx, `SELECT value FROM meta WHERE name = 'ledger_secret'`).Scan(&stored); err != nil {
		return nil, unavailable(err)
	}
	return stored, nil
}

// Ping implements items.Store: it reads from and checks that it can write to the database.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	if err := s.r.QueryRowContext(ctx, `SELECT 1 FROM meta LIMIT 1`).Scan(&one); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return unavailable(err)
	}
	if _, err := s.w.ExecContext(ctx, `INSERT INTO meta (name, value) VALUES ('ping', 1) ON CONFLICT (name) DO UPDATE SET value = excluded.value`); err != nil {
		return unavailable(err)
	}
	return nil
}

// probeWriteBytes is what ProbeWrite writes: more pages than a group of item writes appends to the
// write-ahead log, so that where they cannot grow it, it cannot either. A ping rewrites one page, which a
// log that a failed write has just extended still holds room for, on a disk with no room left.
const probeWriteBytes = 64 << 10

// ProbeWrite implements items.WriteProber: it replaces one row of random bytes (probeWriteBytes) in the
// meta table through the writer's connection, as durably as an item's write.
func (s *Store) ProbeWrite(ctx context.Context) error {
	_, err := s.w.ExecContext(ctx, `INSERT INTO meta (name, value) VALUES ('write_probe', randomblob(?))
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`, probeWriteBytes)
	return unavailable(err)
}

// Close implements items.Store. A WAL checkpoint runs as the last connection closes.
func (s *Store) Close() error {
	if s.stop != nil {
		s.closing.Do(func() { close(s.stop) }) // Close may be called again
		<-s.committerDone
	}
	// Prepared statements are finalized first: a connection with live statements would not close, and
	// would not checkpoint.
	for _, st := range append(append(slices.Collect(maps.Values(s.updates)), s.addCounts, s.addSeries), append(s.inserts, s.reads...)...) {
		if st != nil {
			_ = st.Close()
		}
	}
	err := errors.Join(s.r.Close(), s.w.Close())
	if s.lock != nil {
		s.lock.Close() // after the connections: their last close checkpoints the ledger
		s.lock = nil
	}
	return err
}
