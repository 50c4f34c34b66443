// Package mongostore keeps the ledger in MongoDB: the store for teams that run several stateless companion
// replicas against one replica set or Atlas cluster.
//
// Each item is one document in the items collection, with _id "tenant\x00key". Atomicity rests on MongoDB's
// single-document guarantee, and on nothing else: a new item is one InsertOne (the unique _id index lets
// exactly one concurrent creator win), and every change to an existing item is one FindOneAndUpdate whose
// filter holds the version (and state) the change was decided on, so a change decided on a stale read
// matches nothing and is decided again on a fresh one. There are no multi-document transactions.
//
// Writes use write concern majority with journaling, and reads go to the primary, so a decision is made on
// the newest state and an acknowledged claim survives the loss of a member. Leases are stamped and judged
// on the primary's clock (ClockOffset), so replicas whose clocks differ agree on them; a call that fails
// after writing takes its claims back before it answers (undo.go). Every operation has a
// client-side timeout: a hung server turns into items.ErrUnavailable, never into a hung request.
//
// This is the only package that imports the MongoDB driver.
package mongostore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/replaysafe/companion/items"
)

// DefaultDatabase is the database the ledger uses when none is named (MONGODB_DATABASE).
const DefaultDatabase = "companion"

// DefaultTimeout bounds every operation on the server, including finding a usable primary, when the
// caller's context has no earlier deadline.
const DefaultTimeout = 5 * time.Second

// Collection names.
const (
	ItemsCollection = "items"
	// MetaCollection holds the ledger's own documents: the ledger secret and the readiness probe's marker.
	MetaCollection = "meta"
)

// maxRaces bounds how often one transition decides again after losing a compare-and-set to another
// writer. Every lost race means another writer succeeded, so the ledger as a whole always progresses;
// the bound only stops one caller from spinning on a hot item for ever.
const maxRaces = 100

// Store is the MongoDB store. It is safe for concurrent use, by any number of processes.
type Store struct {
	client *mongo.Client
	items  *mongo.Collection
	meta   *mongo.Collection
	// committedMeta is meta read with read concern majority: what it returns cannot be rolled back.
	committedMeta *mongo.Collection
	// clock is this process's clock, which ClockOffset compares with the server's; serverClock is
	// whether the server reports its clock (localTime in hello).
	clock       func() time.Time
	serverClock bool
	// fault, set by tests, fails a write the server applied (as a lost acknowledgement): see undo.go.
	fault func(op string) error
	// timeout bounds every operation on the server (WithTimeout), a whole batch (TransitionMany), and an
	// undo as a whole.
	timeout time.Duration
	// log is where Open says what it changed in the ledger's indexes (WithLogger).
	log *slog.Logger
	// stopRefresh cancels the start's background pass over the documents of an earlier build
	// (refreshSweepCandidates), and refreshed is closed when that pass has ended: Close waits for it.
	stopRefresh context.CancelFunc
	refreshed   chan struct{}
}

var _ items.SharedStore = (*Store)(nil)

type settings struct {
	timeout time.Duration
	// monitor, when set, sees every command the client sends (tests).
	monitor *event.CommandMonitor
	clock   func() time.Time
	// noServerClock makes the store not read the server's clock.
	noServerClock bool
	log           *slog.Logger
}

// Option changes how Open connects.
type Option func(*settings)

// WithTimeout sets the client-side timeout of every operation (DefaultTimeout when not given).
func WithTimeout(d time.Duration) Option {
	return func(s *settings) { s.timeout = d }
}

// WithClock sets the process clock the store compares with the server's clock (time.Now when not
// given): a test gives two stores clocks that differ, as two replicas' clocks do.
func WithClock(now func() time.Time) Option {
	return func(s *settings) { s.clock = now }
}

// WithLogger names where Open logs what it changes in the ledger's indexes, such as an index of an earlier
// build it drops (slog.Default() otherwise).
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) { s.log = l }
}

// WithoutServerClock makes the store not read the server's clock, as if the server did not report it:
// the ledger then judges leases on this process's clock with its max_clock_skew margin.
func WithoutServerClock() Option {
	return func(s *settings) { s.noServerClock = true }
}

// Open connects to the MongoDB deployment at uri, checks that its primary answers, and creates the
// ledger's indexes in database (DefaultDatabase when empty) if they do not exist. Whatever the URI says,
// writes use write concern majority with journaling and reads go to the primary. It waits for the primary
// for the URI's serverSelectionTimeoutMS, else DefaultStartWait; every operation after that has the
// store's own timeout (WithTimeout). Returns a *ConnectError (which is items.ErrUnavailable) when no
// primary answered in that time, items.ErrUnavailable (with the cause) when the deployment cannot be used
// otherwise; no error carries the URI's password.
func Open(ctx context.Context, uri, database string, opts ...Option) (*Store, error) {
	if uri == "" {
		return nil, errors.New("mongostore: no MongoDB URI")
	}
	if database == "" {
		database = DefaultDatabase
	}
	set := settings{timeout: DefaultTimeout, clock: time.Now, log: slog.Default()}
	for _, o := range opts {
		o(&set)
	}
	journal := true
	copts := options.Client().ApplyURI(uri)
	wait := startWait(copts)
	copts.SetAppName("companion").
		SetTimeout(set.timeout).
		SetServerSelectionTimeout(set.timeout).
		SetConnectTimeout(set.timeout).
		SetWriteConcern(&writeconcern.WriteConcern{W: writeconcern.WCMajority, Journal: &journal}).
		SetReadPreference(readpref.Primary())
	if set.monitor != nil {
		copts.SetMonitor(set.monitor)
	}
	client, err := mongo.Connect(copts)
	if err != nil {
		// The URI itself is wrong: say so, without echoing credentials.
		return nil, uriError(err, secrets(copts))
	}
	db := client.Database(database)
	s := &Store{client: client, items: db.Collection(ItemsCollection), meta: db.Collection(MetaCollection),
		committedMeta: db.Collection(MetaCollection, options.Collection().SetReadConcern(readconcern.Majority())),
		clock:         set.clock, timeout: set.timeout, log: set.log}
	if err := s.awaitPrimary(ctx, wait); err != nil {
		s.Close()
		return nil, connectError(uri, copts, wait, err)
	}
	if !set.noServerClock {
		// A server that refuses hello (older than MongoDB 4.4.2) or does not report its clock leaves the
		// ledger on this process's clock, with its max_clock_skew margin.
		at, err := s.serverTime(ctx)
		if err != nil && !isServerError(err) {
			s.Close()
			return nil, unavailable("connect to "+Redacted(uri), err)
		}
		s.serverClock = err == nil && !at.IsZero()
	}
	if err := s.ensureIndexes(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.ensureOperatorIndexes(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.buildCounts(ctx); err != nil {
		s.Close()
		return nil, err
	}
	s.refreshInBackground(ctx)
	return s, nil
}

// refreshInBackground runs refreshSweepCandidates beside the service rather than before it: on a ledger
// of an earlier build its first run reads every item whose last resolution was acknowledged, with no
// index to find them (one pass over the collection, once), and a start must not wait for that. Until it
// has run, those items are read by the sweeper as before (it finds nothing to flag on them), and retention
// removes them once the pass has marked them (its next run, every 10 minutes). A pass cut short (Close, the server
// gone) leaves no marker, and the next start goes on where it is still needed.
func (s *Store) refreshInBackground(ctx context.Context) {
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stopRefresh, s.refreshed = stop, make(chan struct{})
	go func() {
		defer close(s.refreshed)
		n, err := s.refreshSweepCandidates(bg)
		switch {
		case err != nil && bg.Err() == nil:
			s.log.Warn("could not mark the items a person acknowledged as settled; the next start tries again", "error", err)
		case n > 0:
			s.log.Info("items a person acknowledged are no sweep candidates any more, and settled (once, for the items an earlier build wrote)",
				"items", n)
		}
	}()
}

// indexes returns the ledger's secondary indexes. Creating an index that exists with the same keys and
// options is a no-op, so every replica creates them at every start.
//
// The models are built afresh at every call: creating an index writes to its model's options (the
// driver's IndexView.CreateMany appends a SetName to the options builder every time, even when the model
// names its index), so models shared by stores opened at once in one process were a data race, and every
// start grew their option lists.
//
// needs_person_tenant_since and tenant_execution are plain indexes rather than partial ones
// ({needs_person: true}, {execution_id: {$gt: ""}}): FerretDB v1, the test server, refuses
// partialFilterExpression ("Index option \"partialFilterExpression\" is not implemented yet"), and an index
// the tests cannot build is one they do not check. The items a person must look at are a small range of
// the first either way; the second holds the items without an execution too, under null: an entry written
// when the item is created, and moved only by a claim of another execution, as every entry of it is.
//
// The execution's index does not hold updated_at, although its list is ordered by it, as the SQLite
// store's does not (sqlitestore's schema): an index entry is rewritten whenever one of its fields changes,
// so an index holding updated_at is rewritten by every transition, and the items of the templates all
// carry an execution. The list by execution reads the run's items through it and sorts them, a run at a
// time (the reference's list does the same with tenant_reference). Ledgers of an earlier build had
// tenant_execution_changed, with updated_at: it is dropped at the start (retiredIndexes).
func indexes() []mongo.IndexModel {
	return []mongo.IndexModel{
		// The sweeper: in-flight items whose lease has run out.
		{Keys: bson.D{{Key: "state", Value: 1}, {Key: "lease_expires_at", Value: 1}}, Options: options.Index().SetName("state_lease")},
		// The operator's lists, newest change first (key breaking ties, also descending), with and without a
		// state.
		{Keys: bson.D{{Key: "tenant", Value: 1}, {Key: "updated_at", Value: -1}, {Key: "key", Value: -1}}, Options: options.Index().SetName("tenant_changed")},
		{Keys: bson.D{{Key: "tenant", Value: 1}, {Key: "state", Value: 1}, {Key: "updated_at", Value: -1}, {Key: "key", Value: -1}}, Options: options.Index().SetName("tenant_state_changed")},
		// A batch's items in batch order, key breaking ties, so that a page of the batch status is read in index
		// order without sorting the whole batch.
		{Keys: bson.D{{Key: "tenant", Value: 1}, {Key: "batch_id", Value: 1}, {Key: "batch_index", Value: 1}, {Key: "key", Value: 1}}, Options: options.Index().SetName("tenant_batch")},
		// A run's items (the operator list by execution_id), sorted newest change first by the list: see above.
		{Keys: bson.D{{Key: "tenant", Value: 1}, {Key: "execution_id", Value: 1}}, Options: options.Index().SetName("tenant_execution")},
		// Items waiting for a person (alerts, stats, the console's queue). needs_person and tenant first, so
		// that the same index finds every tenant's items waiting for a person; then the console queue's order,
		// the one waiting longest first (an item without a needs_person_since, null, sorts first), key
		// breaking ties, read in index order.
		{Keys: bson.D{{Key: "needs_person", Value: 1}, {Key: "tenant", Value: 1}, {Key: "needs_person_since", Value: 1}, {Key: "key", Value: 1}},
			Options: options.Index().SetName("needs_person_tenant_since")},
		// Lookups by business reference (the operator list by reference, the console's Find). A reference names
		// one or a few items, so the list sorts those few by last change without an index for the order.
		{Keys: bson.D{{Key: "tenant", Value: 1}, {Key: "reference", Value: 1}}, Options: options.Index().SetName("tenant_reference")},
	}
}

// retiredIndexes are indexes of earlier builds that indexes() replaced, with why; they only cost writes now.
var retiredIndexes = []struct{ name, why string }{
	{"tenant_updated", "replaced by tenant_changed, which breaks ties by key descending"},
	{"tenant_state_updated", "replaced by tenant_state_changed, which breaks ties by key descending"},
	{"needs_person_tenant", "the start of needs_person_tenant_since"},
	{"tenant_execution_changed", "replaced by tenant_execution, without updated_at: every transition rewrote it"},
}

// ensureIndexes creates the indexes one command each: FerretDB v1 (the test server) fails a createIndexes
// that names more than one existing index, and six commands once per start cost nothing.
func (s *Store) ensureIndexes(ctx context.Context) error {
	for _, ix := range indexes() {
		if _, err := s.items.Indexes().CreateOne(ctx, ix); err != nil {
			if isServerError(err) {
				// The server refused the index (e.g. one of the same name with other keys): not an outage.
				return fmt.Errorf("mongostore: create index: %w", err)
			}
			return unavailable("create index", err)
		}
	}
	for _, ix := range retiredIndexes {
		err := s.items.Indexes().DropOne(ctx, ix.name)
		switch {
		case err == nil:
			s.log.Info("dropped an index of an earlier build (once, at the first start of this release)", "index", ix.name, "why", ix.why)
		case !isServerError(err): // a server error is the index not existing, the usual case
			return unavailable("drop index", err)
		}
	}
	return s.fillExecutionIDs(ctx)
}

// fillExecutionIDs gives the items stored by an earlier build their top-level execution_id, the
// execution of their latest claim, which they hold only in their last attempt. It runs at every start
// and finds nothing to do once every item has the field. Each item is set only if it still lacks the
// field, so a replica that claimed it meanwhile keeps its value.
func (s *Store) fillExecutionIDs(ctx context.Context) error {
	cur, err := s.items.Find(ctx, bson.D{{Key: "execution_id", Value: bson.D{{Key: "$exists", Value: false}}}},
		options.Find().SetProjection(bson.D{{Key: "attempts.execution_id", Value: 1}}))
	if err != nil {
		return unavailable("fill execution ids", err)
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		var d struct {
			ID       string `bson:"_id"`
			Attempts []struct {
				ExecutionID string `bson:"execution_id"`
			} `bson:"attempts"`
		}
		if err := cur.Decode(&d); err != nil {
			return fmt.Errorf("mongostore: fill execution ids: %w", err)
		}
		latest := ""
		if n := len(d.Attempts); n > 0 {
			latest = d.Attempts[n-1].ExecutionID
		}
		if _, err := s.items.UpdateOne(ctx, bson.D{{Key: "_id", Value: d.ID}, {Key: "execution_id", Value: bson.D{{Key: "$exists", Value: false}}}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "execution_id", Value: latest}}}}); err != nil {
			return unavailable("fill execution ids", err)
		}
	}
	if err := cur.Err(); err != nil {
		return unavailable("fill execution ids", err)
	}
	return nil
}

// isServerError reports whether the server answered with a command error (rather than not answering).
func isServerError(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && !mongo.IsNetworkError(err) && !mongo.IsTimeout(err)
}

// unavailable translates a driver error into the domain's ErrUnavailable, keeping the cause for logs.
// Every driver error that reaches a caller passes through here (or becomes ErrNotFound at Get).
func unavailable(op string, err error) error {
	return fmt.Errorf("%w: mongodb %s: %w", items.ErrUnavailable, op, err)
}

// read returns the stored document, or nil when there is none. It reads from the primary (the client's
// read preference), so it sees every acknowledged write.
func (s *Store) read(ctx context.Context, tenant, key string) (*itemDoc, error) {
	if err := checkID(tenant, key); err != nil {
		return nil, err
	}
	var d itemDoc
	err := s.items.FindOne(ctx, bson.D{{Key: "_id", Value: itemID(tenant, key)}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, unavailable("read item", err)
	}
	return &d, nil
}

// Get implements items.Store.
func (s *Store) Get(ctx context.Context, tenant, key string) (*items.Item, error) {
	d, err := s.read(ctx, tenant, key)
	if err != nil {
		return nil, err
	}
	if d == nil {
		return nil, items.ErrNotFound
	}
	return d.item(), nil
}

// Transition implements items.Store: read, decide, then one conditional single-document write; a write
// that finds the item changed since the read decides again on a fresh read.
// If the write fails, a claim it may have made is taken back (undo.go).
func (s *Store) Transition(ctx context.Context, tenant, key string, fn items.TransitionFunc) (*items.Item, error) {
	log := undoLog{}
	it, err := s.transition(ctx, log, tenant, key, nil, fn)
	if err != nil {
		return nil, s.undo(ctx, log, err)
	}
	return it, nil
}

// seen is what a transition already knows of an item: the document last read or written (nil: none
// exists). It saves TransitionMany a read when it decides a repeated key again; it is only a first guess,
// since the write's version guard refuses it when another writer came in between.
type seen struct {
	doc *itemDoc
}

// transition records its writes in log.
func (s *Store) transition(ctx context.Context, log undoLog, tenant, key string, hint *seen, fn items.TransitionFunc) (*items.Item, error) {
	for race := 0; ; race++ {
		if race == maxRaces {
			return nil, fmt.Errorf("%w: mongodb: item %q changed under %d attempts to change it", items.ErrUnavailable, key, maxRaces)
		}
		if err := ctx.Err(); err != nil {
			return nil, unavailable("transition", err)
		}
		var cur *itemDoc
		if hint != nil {
			cur, hint = hint.doc, nil
		} else {
			var err error
			if cur, err = s.read(ctx, tenant, key); err != nil {
				return nil, err
			}
		}
		// fn gets its own copy: the item as read stays intact if fn changes it and then writes nothing.
		var arg *items.Item
		if cur != nil {
			arg = cur.item()
		}
		next, err := fn(arg)
		if err != nil {
			return nil, err
		}
		if next == nil {
			if cur == nil {
				return nil, nil
			}
			return cur.item(), nil
		}
		if err := checkReturned(tenant, key, next); err != nil {
			return nil, err
		}
		w := decided(next)
		stored, err := s.write(ctx, log, cur, prepare(cur, w))
		if err != nil {
			return nil, err
		}
		if stored == nil {
			continue // another writer created or changed the item since the read: decide again
		}
		s.countWrite(ctx, cur, w)
		return stored.item(), nil
	}
}

// checkReturned refuses an item fn returned for another tenant or key than the one it was called for.
func checkReturned(tenant, key string, next *items.Item) error {
	if next.Tenant != tenant || next.Key != key {
		return fmt.Errorf("mongostore: transition of %q returned item %q of tenant %q", key, next.Key, next.Tenant)
	}
	return nil
}

// write stores d, decided on cur (nil: the item did not exist): an insert, or a conditional update, first
// recorded in log. It returns the stored document, or nil when another writer created or changed the item
// since cur was read.
func (s *Store) write(ctx context.Context, log undoLog, cur *itemDoc, d itemDoc) (*itemDoc, error) {
	forget := log.wrote(cur, d)
	var stored *itemDoc
	var err error
	if cur == nil {
		stored, err = s.insert(ctx, d)
	} else {
		stored, err = s.update(ctx, cur, d)
	}
	switch {
	case err == nil && stored == nil:
		forget() // certainly not written: another writer came first
	case err == nil:
		log.acked(stored) // and counted by the caller
	}
	return stored, err
}

// prepare returns the document to write for next, decided on cur (nil for a new item): one version more
// than cur, created_at kept, updated_at strictly later than cur's even when the clock stands still or
// steps back, because the operator's list is ordered by it.
func prepare(cur *itemDoc, next written) itemDoc {
	d := toDoc(next.it, next.facts)
	if d.CreatedAt.IsZero() {
		d.CreatedAt = msTime(time.Now())
	}
	if d.UpdatedAt.IsZero() {
		d.UpdatedAt = msTime(time.Now())
	}
	d.Version = 1
	if cur != nil {
		d.Version = cur.Version + 1
		if !d.UpdatedAt.After(cur.UpdatedAt) {
			d.UpdatedAt = cur.UpdatedAt.Add(time.Millisecond)
		}
	}
	return d
}

// insert creates the item. It returns nil, and writes nothing, when the item already exists.
//
// ATOMICITY: the unique _id index makes an insert of an existing _id fail as a whole, so of any number of
// concurrent creators exactly one inserts.
func (s *Store) insert(ctx context.Context, d itemDoc) (*itemDoc, error) {
	d.ID = itemID(d.Tenant, d.Key)
	_, err := s.items.InsertOne(ctx, d)
	if err == nil {
		err = s.injected("insert")
	}
	if err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return nil, nil
		}
		return nil, unavailable("insert item", err)
	}
	return &d, nil
}

// update replaces the stored fields of the item with d, if the item is still at the version (and in the
// state) cur was read at. It returns the stored document afterwards, or nil when the guard matched
// nothing (another writer changed the item since the read).
//
// ATOMICITY: one FindOneAndUpdate on one document. MongoDB evaluates the filter and applies the $set
// atomically for a single document, so two writers that read the same version cannot both match: the
// second finds the version moved and matches nothing.
func (s *Store) update(ctx context.Context, cur *itemDoc, d itemDoc) (*itemDoc, error) {
	d.ID = "" // _id is immutable; the filter names it
	filter := bson.D{
		{Key: "_id", Value: itemID(cur.Tenant, cur.Key)},
		{Key: "version", Value: cur.Version},
		{Key: "state", Value: cur.State},
	}
	var stored itemDoc
	err := s.items.FindOneAndUpdate(ctx, filter, bson.D{{Key: "$set", Value: d}},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&stored)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err == nil {
		err = s.injected("update")
	}
	if err != nil {
		return nil, unavailable("update item", err)
	}
	return &stored, nil
}

// TransitionMany implements items.Store without a transaction (the ledger uses none), in two passes.
// First it reads all keys in one query and runs fn for every key in order, each call on what the earlier
// calls left (a key may repeat); if fn fails, nothing has been written. Then it writes the changes: the new
// items in one unordered insert (each insert atomic on its own), then the changes to existing items in
// order, each one conditional single-document write guarded by the version its call saw, as Transition
// does.
//
// Only the first pass is all or nothing. If another writer changes an item between the two passes, that
// item's calls are decided again, on a fresh read, as Transition decides them; should fn fail then, the
// items written before it stay written (each of them atomic and correct on its own), except their claims:
// when the second pass fails, the claims it wrote (or may have written) are taken back before it answers
// (undo.go), so that a batch answered 503 leaves no claim held by nobody. The items another writer created
// in between are read again in one query, not one round trip each.
//
// The whole call is bounded by the store's timeout, as one operation is: a batch against a slow server
// answers ErrUnavailable within the timeout instead of taking a round trip's timeout per item (the undo
// has a timeout of its own).
func (s *Store) TransitionMany(ctx context.Context, tenant string, keys []string, fn func(i int, cur *items.Item) (*items.Item, error)) ([]*items.Item, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	log := undoLog{}
	out, err := s.transitionMany(ctx, log, tenant, keys, fn)
	if err != nil {
		return nil, s.undo(ctx, log, err)
	}
	return out, nil
}

// transitionMany is TransitionMany, recording its writes in log.
func (s *Store) transitionMany(ctx context.Context, log undoLog, tenant string, keys []string, fn func(i int, cur *items.Item) (*items.Item, error)) ([]*items.Item, error) {
	// step is one call's decision: the document it saw (nil: none) and the one to write (nil: no change).
	type step struct {
		seen, next *itemDoc
		decided    written // what next was made of
	}
	steps := make([]step, len(keys))
	view, err := s.readMany(ctx, tenant, keys)
	if err != nil {
		return nil, err
	}
	for i, key := range keys {
		cur, ok := view[key]
		if !ok {
			var err error
			if cur, err = s.read(ctx, tenant, key); err != nil {
				return nil, err
			}
		}
		var arg *items.Item
		if cur != nil {
			arg = cur.item()
		}
		next, err := fn(i, arg)
		if err != nil {
			return nil, err
		}
		steps[i].seen = cur
		view[key] = cur
		if next != nil {
			if err := checkReturned(tenant, key, next); err != nil {
				return nil, err
			}
			w := decided(next)
			d := prepare(cur, w)
			steps[i].next, steps[i].decided = &d, w
			view[key] = &d
		}
	}

	// The items that did not exist are created first, in one round trip; created[i] is nil for one that
	// another writer created since the read, and that call is decided again below.
	var newDocs []itemDoc
	var newAt []int
	for i, st := range steps {
		if st.seen == nil && st.next != nil {
			newDocs, newAt = append(newDocs, *st.next), append(newAt, i)
		}
	}
	// The counts of the items written here go in one upsert per group, once the writes are done or one
	// fails (those before it are recorded); those decided again are counted by transition. See CONSISTENCY
	// in counts.go.
	counts := items.CountChanges{}
	defer func() { _ = s.addCounts(context.WithoutCancel(ctx), counts) }()
	forget := make([]func(), len(newDocs))
	for j, d := range newDocs {
		forget[j] = log.wrote(nil, d)
	}
	inserted, err := s.insertMany(ctx, newDocs)
	if err != nil {
		return nil, err
	}
	for j, d := range inserted {
		if d == nil {
			forget[j]() // certainly not written: another writer created the item first
		}
	}
	created := make(map[int]*itemDoc, len(newAt))
	var lost []string
	for j, i := range newAt {
		created[i] = inserted[j]
		if inserted[j] == nil {
			lost = append(lost, keys[i])
		} else {
			steps[i].decided.move(counts, nil)
			log.acked(inserted[j])
		}
	}
	// The items another writer created since the first read (a batch racing the same batch: all of them)
	// are read again at once; each one's calls are then decided on what was read, without a round trip
	// unless they change it.
	var fresh map[string]*itemDoc
	if len(lost) > 0 {
		if fresh, err = s.readMany(ctx, tenant, lost); err != nil {
			return nil, err
		}
	}

	out := make([]*items.Item, len(keys))
	// redecided holds the keys that lost a race in the second pass, with what was stored for them last:
	// their remaining calls are decided again, one by one, on the stored state.
	redecided := make(map[string]*seen)
	for i, key := range keys {
		if last, ok := redecided[key]; ok {
			stored, err := s.transition(ctx, log, tenant, key, last, func(cur *items.Item) (*items.Item, error) { return fn(i, cur) })
			if err != nil {
				return nil, err
			}
			redecided[key] = seenOf(stored)
			out[i] = stored
			continue
		}
		st := steps[i]
		if st.next == nil {
			if st.seen != nil {
				out[i] = st.seen.item()
			}
			continue
		}
		stored, ok := created[i]
		if !ok {
			if stored, err = s.write(ctx, log, st.seen, *st.next); err != nil {
				return nil, err
			}
			if stored != nil {
				st.decided.move(counts, st.seen)
			}
		}
		if stored == nil {
			// Another writer came first: decide this call again, and the later ones on this key. For an item
			// another writer created, on the document read above (a first guess, as hints are).
			var hint *seen
			if doc, ok := fresh[key]; ok && st.seen == nil {
				hint = &seen{doc: doc}
			}
			stored, err := s.transition(ctx, log, tenant, key, hint, func(cur *items.Item) (*items.Item, error) { return fn(i, cur) })
			if err != nil {
				return nil, err
			}
			redecided[key] = seenOf(stored)
			out[i] = stored
			continue
		}
		out[i] = stored.item()
	}
	return out, nil
}

func seenOf(it *items.Item) *seen {
	if it == nil {
		return &seen{}
	}
	d := toDoc(it, it.Facts())
	return &seen{doc: &d}
}

const ledgerSecretID = "ledger_secret"

// LedgerSecret implements items.Store: the first replica to start inserts a random secret; every replica
// then reads the one that won, with read concern majority.
//
// ATOMICITY: the unique _id index of the meta collection lets exactly one insert of the secret succeed.
// The insert is acknowledged by a majority, and the read sees only what a majority holds: a replica that
// starts during a failover cannot read a secret that a deposed primary accepted alone and that is rolled
// back later (the next replica would create another one, and the two would derive different idempotency
// keys for the same item).
func (s *Store) LedgerSecret(ctx context.Context) ([]byte, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	_, err := s.meta.InsertOne(ctx, bson.D{{Key: "_id", Value: ledgerSecretID}, {Key: "value", Value: secret}})
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return nil, unavailable("insert ledger secret", err)
	}
	var stored struct {
		Value []byte `bson:"value"`
	}
	if err := s.committedMeta.FindOne(ctx, bson.D{{Key: "_id", Value: ledgerSecretID}}).Decode(&stored); err != nil {
		return nil, unavailable("read ledger secret", err)
	}
	if len(stored.Value) == 0 {
		return nil, errors.New("mongostore: the stored ledger secret is empty")
	}
	return stored.Value, nil
}

// HasClock implements items.SharedStore: whether the server reports its clock (every MongoDB does; see
// WithoutServerClock).
func (s *Store) HasClock() bool { return s.serverClock }

// ClockOffset implements items.SharedStore: how far the primary's clock is ahead of this process's,
// read with one hello command (its localTime), which MongoDB and FerretDB both answer.
//
// The ledger reads it inside a transition, between the read and the guarded write, and decides and stamps
// leases on this process's clock moved by it: on the primary's clock, the one clock every replica shares.
// A lease the primary's clock shows expired when the offset is read is still expired when the write
// lands, since that clock only moves forward. (MongoDB could also compare with $$NOW inside the guarded
// update; FerretDB v1, the test server, does not know $$NOW, so the store reads the clock instead, and the
// same code runs on both.)
//
// The server's clock is known to within half the round trip (and its millisecond). An offset no larger, or
// smaller than clockResolution, is returned as zero: it is below what a lease (5 s at least) can tell,
// and a test's fake clock stays exact against a MongoDB on another host.
func (s *Store) ClockOffset(ctx context.Context) (time.Duration, error) {
	before := s.clock()
	at, err := s.serverTime(ctx)
	after := s.clock()
	if err != nil {
		return 0, unavailable("read the server's clock", err)
	}
	if at.IsZero() {
		return 0, fmt.Errorf("%w: mongodb: the server no longer reports its clock", items.ErrUnavailable)
	}
	half := after.Sub(before) / 2
	off := at.Sub(before.Add(half))
	if off.Abs() <= max(half+time.Millisecond, clockResolution) {
		return 0, nil
	}
	return off, nil
}

// clockResolution is the smallest difference between the server's clock and this process's that
// ClockOffset reports.
const clockResolution = 100 * time.Millisecond

// serverTime returns the primary's clock (hello's localTime), or the zero time when it reports none.
func (s *Store) serverTime(ctx context.Context) (time.Time, error) {
	var hello struct {
		LocalTime time.Time `bson:"localTime"`
	}
	if err := s.items.Database().RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		return time.Time{}, err
	}
	return hello.LocalTime, nil
}

// Ping implements items.Store: the primary must answer, and accept a write with the store's write
// concern (a primary that lost its majority answers pings but cannot acknowledge claims).
func (s *Store) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx, readpref.Primary()); err != nil {
		return unavailable("ping", err)
	}
	_, err := s.meta.UpdateOne(ctx, bson.D{{Key: "_id", Value: "ping"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "at", Value: time.Now().UTC()}}}}, options.UpdateOne().SetUpsert(true))
	// Two replicas probing at once may both try the upsert; the loser's duplicate-key error still
	// proves the primary accepted a write.
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return unavailable("ping write", err)
	}
	return nil
}

// Close implements items.Store: it closes the client's connections.
func (s *Store) Close() error {
	if s.stopRefresh != nil {
		s.stopRefresh()
		<-s.refreshed
	}
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	return s.client.Disconnect(ctx)
}
