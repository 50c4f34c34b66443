// Package mongostore keeps the ledger in MongoDB: the store for teams that run several stateless companion
// replicas against one replica set or Atlas cluster.
//
// Each item is one document in the items collection, with _id "tenant\x00key". Atomicity rests on MongoDB's
// single-document guarantee, and on nothing else: a new item is one insert (the unique _id index lets
// exactly one concurrent creator win), and every change to an existing item is one conditional update whose
// filter holds the version and the revision token (rev) the change was decided on, so a change decided on a
// stale read matches nothing and is decided again on a fresh one. There are no multi-document transactions:
// the kept counts ride in each item's own write and are applied after it (counts.go).
//
// Writes use write concern majority with journaling and retryable writes, and reads go to the primary, so
// a decision is made on the newest state and an acknowledged claim survives the loss of a member; an answer
// that writes nothing is confirmed by a linearizable read first (confirm). Leases are stamped and judged on
// the primary's clock (clock.go), so replicas whose clocks differ agree on them; a call that fails after
// writing takes its claims back before it answers (undo.go). Every operation has a client-side timeout: a
// hung server turns into items.ErrUnavailable, never into a hung request.
//
// This is the only package that imports the MongoDB driver.
package mongostore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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
	// confirmed is items read with read concern linearizable: a document it returns was the newest
	// majority-committed one when read, on a primary that was still the primary (see confirm).
	confirmed *mongo.Collection
	meta      *mongo.Collection
	// committedMeta is meta read with read concern majority: what it returns cannot be rolled back.
	committedMeta *mongo.Collection
	// clock is this process's clock, which ClockOffset compares with the server's; serverClock is
	// whether the server reports its clock (localTime in hello). offset is the last reading (clock.go).
	clock       func() time.Time
	serverClock bool
	offset      clockReading
	// owner names this store in the lock documents it takes (counts.go).
	owner string
	// fault, set by tests, fails a write the server applied (as a lost acknowledgement): see undo.go.
	fault func(op string) error
	// dropCounts, set by tests, drops the counts of acknowledged writes as a replica stopped right after
	// its write would; countFault, set by tests, fails step 1 or 2 of applying them after the server
	// applied it (counts.go).
	dropCounts func() bool
	countFault func(step int) error
	// repairAge is how old an entry of the kept counts must be before the repair pass applies it
	// (repairAge, shorter in tests).
	repairAge time.Duration
	// timeout bounds every operation on the server (WithTimeout), and an undo as a whole; a batch
	// (TransitionMany) gets batchTimeout.
	timeout time.Duration
	// log is where Open says what it changed in the ledger's indexes (WithLogger).
	log *slog.Logger
	// unmarked holds the marks of applied kept counts to remove with the group's next write (counts.go),
	// unmarkedRows those of the series' rows, removed with the next call's (series.go); stopRepair stops
	// the repair pass's loop.
	unmarked, unmarkedRows unmarked
	stopRepair             func()
	// background runs the start's passes over the documents of an earlier build (refreshSweepCandidates,
	// fillExecutionIDs), beside the service; Close cancels them and waits.
	background background
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
// writes use write concern majority with journaling and are retried once after a network error (retryable
// writes: the server recognises the repeat), and reads go to the primary. It waits for the primary for the
// URI's serverSelectionTimeoutMS, else DefaultStartWait; every operation after that has the store's own
// timeout (WithTimeout). Returns a *ConnectError (which is items.ErrUnavailable) when no primary answered
// in that time, items.ErrUnavailable (with the cause) when the deployment cannot be used otherwise; no
// error carries the URI's password.
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
	s := &Store{clock: set.clock, timeout: set.timeout, log: set.log, owner: newToken(), repairAge: repairAge}
	copts := clientOptions(uri, set.timeout)
	wait := startWait(options.Client().ApplyURI(uri))
	copts.SetServerMonitor(&event.ServerMonitor{TopologyDescriptionChanged: s.offset.topologyChanged})
	if set.monitor != nil {
		copts.SetMonitor(set.monitor)
	}
	client, err := mongo.Connect(copts)
	if err != nil {
		// The URI itself is wrong: say so, without echoing credentials.
		return nil, uriError(err, secrets(copts))
	}
	db := client.Database(database)
	s.client, s.items, s.meta = client, db.Collection(ItemsCollection), db.Collection(MetaCollection)
	s.confirmed = db.Collection(ItemsCollection, options.Collection().SetReadConcern(readconcern.Linearizable()))
	s.committedMeta = db.Collection(MetaCollection, options.Collection().SetReadConcern(readconcern.Majority()))
	if err := s.awaitPrimary(ctx, wait); err != nil {
		s.Close()
		return nil, connectError(uri, copts, wait, err)
	}
	if !set.noServerClock {
		// A server that refuses hello (older than MongoDB 4.4.2) or does not report its clock leaves the
		// ledger on this process's clock, with its max_clock_skew margin.
		_, err := s.readClock(ctx)
		if err != nil && !isServerError(err) && !errors.Is(err, errNoServerClock) {
			s.Close()
			return nil, unavailable("connect to "+Redacted(uri), err)
		}
		s.serverClock = err == nil
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
	s.repairInBackground()
	s.background.start(ctx)
	s.background.run(s.refreshed(), func(ctx context.Context) {
		n, err := s.refreshSweepCandidates(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("could not mark the items a person acknowledged as settled; the next start tries again", "error", err)
		case n > 0:
			s.log.Info("items a person acknowledged are no sweep candidates any more, and settled (once, for the items an earlier build wrote)",
				"items", n)
		}
	})
	s.background.run(s.filled(), func(ctx context.Context) {
		n, err := s.fillExecutionIDs(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("could not give the items of an earlier build their execution_id; the next start tries again", "error", err)
		case n > 0:
			s.log.Info("items of an earlier build have their execution_id (once)", "items", n)
		}
	})
	return s, nil
}

// clientOptions are the driver's options for uri: what the URI says, but the store's timeout, write
// concern majority with journaling, primary reads and retryable writes whatever it says (a URI's
// retryWrites=false would turn off what an acknowledged claim relies on in a failover: the driver sends a
// write again once after a network error, and the server recognises the repeat).
func clientOptions(uri string, timeout time.Duration) *options.ClientOptions {
	journal := true
	return options.Client().ApplyURI(uri).SetAppName("companion").
		SetTimeout(timeout).
		SetServerSelectionTimeout(timeout).
		SetConnectTimeout(timeout).
		SetWriteConcern(&writeconcern.WriteConcern{W: writeconcern.WCMajority, Journal: &journal}).
		SetReadPreference(readpref.Primary()).
		SetRetryWrites(true)
}

// background runs the start's passes over the documents of an earlier build beside the service rather
// than before it: a pass may read every item, with no index to find the few it changes (once per ledger,
// behind a marker in meta), and a start must not wait for that, nor fail when it takes longer than one
// operation's timeout. A pass cut short (Close, the server gone) leaves no marker, and the next start goes
// on where it is still needed.
type background struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// done holds a channel per pass, closed when it has ended (tests wait for them).
	done map[string]chan struct{}
}

func (b *background) start(ctx context.Context) {
	b.ctx, b.cancel = context.WithCancel(context.WithoutCancel(ctx))
}

// run runs pass in the background, and closes done when it has ended.
func (b *background) run(done chan struct{}, pass func(ctx context.Context)) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer close(done)
		pass(b.ctx)
	}()
}

// stop cancels the passes and waits for them.
func (b *background) stop() {
	if b.cancel != nil {
		b.cancel()
		b.wg.Wait()
	}
}

// pass returns the channel closed when the background pass name has ended.
func (b *background) pass(name string) chan struct{} {
	if b.done == nil {
		b.done = map[string]chan struct{}{}
	}
	if b.done[name] == nil {
		b.done[name] = make(chan struct{})
	}
	return b.done[name]
}

func (s *Store) refreshed() chan struct{} { return s.background.pass("refresh") }
func (s *Store) filled() chan struct{}    { return s.background.pass("fill") }
func (s *Store) repaired() chan struct{}  { return s.background.pass("repair") }

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
		// The kept counts' entries still due, oldest first (the repair pass, counts.go): only the few items
		// whose counts are being applied have entries in it, as the entries leave the item once applied.
		{Keys: bson.D{{Key: "count_due.at", Value: 1}}, Options: options.Index().SetName("count_due_at")},
		// Tombstones (itemDoc.Tombstone), which the repair pass removes: the items are in it under null, an
		// entry no transition rewrites.
		{Keys: bson.D{{Key: "tombstone", Value: 1}}, Options: options.Index().SetName("tombstone")},
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
	return nil
}

// executionIDsFilledID marks, in meta, a ledger whose items all have their top-level execution_id
// (fillExecutionIDs).
const executionIDsFilledID = "execution_ids_filled"

// fillExecutionIDs gives the items stored by an earlier build their top-level execution_id, the execution
// of their latest claim, which they hold only in their last attempt, once per ledger (a marker in meta). It
// reads the items that lack the field, with no index to find them (one pass over the collection, beside the
// service: background), and sets each one only if it still lacks the field, so a replica that claimed it
// meanwhile keeps its value. It returns how many it set.
func (s *Store) fillExecutionIDs(ctx context.Context) (int, error) {
	err := s.meta.FindOne(ctx, bson.D{{Key: "_id", Value: executionIDsFilledID}}).Err()
	if err == nil {
		return 0, nil
	}
	if !errors.Is(err, mongo.ErrNoDocuments) {
		return 0, unavailable("read meta", err)
	}
	lacking := bson.D{{Key: "execution_id", Value: bson.D{{Key: "$exists", Value: false}}}, {Key: "tombstone", Value: bson.D{{Key: "$exists", Value: false}}}}
	cur, err := s.items.Find(ctx, lacking, options.Find().SetProjection(bson.D{{Key: "attempts.execution_id", Value: 1}}))
	if err != nil {
		return 0, unavailable("fill execution ids", err)
	}
	// The documents' _ids are read before the first write, grouped by the value to write, so that no cursor
	// stays open while the pass writes and each update carries up to refreshBatch documents (as
	// refreshSweepCandidates does).
	latest := map[string][]string{}
	for cur.Next(ctx) {
		var d struct {
			ID       string `bson:"_id"`
			Attempts []struct {
				ExecutionID string `bson:"execution_id"`
			} `bson:"attempts"`
		}
		if err := cur.Decode(&d); err != nil {
			continue // a document that no longer decodes is left as it is: Get names it
		}
		exec := ""
		if n := len(d.Attempts); n > 0 {
			exec = d.Attempts[n-1].ExecutionID
		}
		latest[exec] = append(latest[exec], d.ID)
	}
	err = cur.Err()
	cur.Close(ctx)
	if err != nil {
		return 0, unavailable("fill execution ids", err)
	}
	n := 0
	for exec, ids := range latest {
		for len(ids) > 0 {
			some := ids[:min(len(ids), refreshBatch)]
			ids = ids[len(some):]
			res, err := s.items.UpdateMany(ctx, append(bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: some}}}}, lacking...),
				bson.D{{Key: "$set", Value: bson.D{{Key: "execution_id", Value: exec}}}})
			if err != nil {
				return n, unavailable("fill execution ids", err)
			}
			n += int(res.ModifiedCount)
		}
	}
	if _, err := s.meta.InsertOne(ctx, bson.D{{Key: "_id", Value: executionIDsFilledID}}); err != nil && !mongo.IsDuplicateKeyError(err) {
		return n, unavailable("write meta", err)
	}
	return n, nil
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

// read returns the stored document (a tombstone too), or nil when there is none. It reads from the primary
// (the client's read preference), so it sees every acknowledged write.
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
	if live(d) == nil {
		return nil, items.ErrNotFound
	}
	return d.item(), nil
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

// Close implements items.Store: it stops the background passes and closes the client's connections.
func (s *Store) Close() error {
	s.background.stop()
	if s.stopRepair != nil {
		s.stopRepair()
	}
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	return s.client.Disconnect(ctx)
}
