package mongostore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/replaysafe/companion/internal/tcpproxy"
	"net"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/mongostore"
	"github.com/replaysafe/companion/items/mongostore/mongotest"
)

// sharedSrv is one FerretDB for the tests that do not stop their server; each test gets its own
// database on it. It is nil when the tests run against a real MongoDB.
var sharedSrv *mongotest.Server

func TestMain(m *testing.M) {
	code := func() int {
		if realURI() != "" {
			return m.Run()
		}
		dir, err := os.MkdirTemp("", "mongostore-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if sharedSrv, err = mongotest.StartIn(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer sharedSrv.Stop()
		return m.Run()
	}()
	os.Exit(code)
}

func realURI() string { return os.Getenv(mongotest.RealURIEnv) }

// env is one test's database: on the shared FerretDB, or on the real MongoDB named by
// COMPANION_TEST_MONGODB_URI when it is set.
type env struct {
	t       *testing.T
	uri, db string
}

func newEnv(t *testing.T) env {
	t.Helper()
	if uri := realURI(); uri != "" {
		db := fmt.Sprintf("companion_test_%d", time.Now().UnixNano())
		t.Cleanup(func() { dropDatabase(uri, db) })
		return env{t: t, uri: uri, db: db}
	}
	return env{t: t, uri: sharedSrv.URI(), db: sharedSrv.Database()}
}

// open opens a store on the env's database, as one more replica would: its own client, its own pool.
func (e env) open() *mongostore.Store {
	e.t.Helper()
	s, err := mongostore.Open(e.t.Context(), e.uri, e.db, mongostore.WithTimeout(mongotest.StoreTimeout()))
	if err != nil {
		e.t.Fatalf("Open: %v", err)
	}
	e.t.Cleanup(func() { s.Close() })
	return s
}

// collection returns a driver handle on one of the env's collections, to look at what the store wrote.
func (e env) collection(name string) *mongo.Collection {
	e.t.Helper()
	c, err := mongo.Connect(options.Client().ApplyURI(e.uri))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Disconnect(context.Background()) })
	return c.Database(e.db).Collection(name)
}

// openStore opens a store on a fresh database, and returns a function opening another replica on it.
func openStore(t *testing.T) (*mongostore.Store, func() *mongostore.Store) {
	t.Helper()
	e := newEnv(t)
	return e.open(), e.open
}

func dropDatabase(uri, db string) {
	c, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.Database(db).Drop(ctx)
	_ = c.Disconnect(ctx)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

var fp1 = strings.Repeat("a", 64)

func newLedger(t *testing.T, s items.Store, now func() time.Time) *items.Ledger {
	t.Helper()
	l, err := items.NewLedger(t.Context(), s, items.Config{Now: now})
	if err != nil {
		t.Fatalf("NewLedger: %v", err)
	}
	return l
}

func claimParams(key string) items.BeforeWriteParams {
	return items.BeforeWriteParams{Tenant: "acme", Key: key, Fingerprint: fp1, Destination: "billing", Dedupe: items.DedupeKey}
}

// create stores a new prepared item through the store's Transition.
func create(t *testing.T, s items.Store, key string) *items.Item {
	t.Helper()
	it, err := s.Transition(t.Context(), "acme", key, func(cur *items.Item) (*items.Item, error) {
		if cur != nil {
			t.Fatalf("item %s exists already", key)
		}
		return &items.Item{Tenant: "acme", Key: key, State: items.StatePrepared, Fingerprint: fp1,
			Attempts: []items.Attempt{}, History: []items.Event{{At: time.Now(), Kind: items.EventPrepared}}}, nil
	})
	if err != nil {
		t.Fatalf("create %s: %v", key, err)
	}
	return it
}

// note appends a history event: a change a test can find afterwards.
func note(text string) items.TransitionFunc {
	return func(cur *items.Item) (*items.Item, error) {
		cur.History = append(cur.History, items.Event{At: time.Now(), Kind: "test", Note: text})
		return cur, nil
	}
}

func notes(it *items.Item) []string {
	var out []string
	for _, e := range it.History {
		if e.Kind == "test" {
			out = append(out, e.Note)
		}
	}
	return out
}

func TestEveryFieldSurvivesTheStore(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	var want items.Item
	n := 0
	fill(reflect.ValueOf(&want).Elem(), &n)
	want.Tenant, want.Key = "acme", "every-field"
	got, err := s.Transition(t.Context(), "acme", "every-field", func(*items.Item) (*items.Item, error) {
		c := want
		return &c, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	read, err := s.Get(t.Context(), "acme", "every-field")
	if err != nil {
		t.Fatal(err)
	}
	// The store owns the version; everything else must come back as it was given.
	want.Version = 1
	for name, it := range map[string]*items.Item{"Transition": got, "Get": read} {
		if !reflect.DeepEqual(it, &want) {
			a, _ := json.MarshalIndent(it, "", " ")
			b, _ := json.MarshalIndent(&want, "", " ")
			t.Errorf("%s returned an item that differs from the one written:\n%s\nwant\n%s", name, a, b)
		}
	}
}

// fill gives every field of v a distinct non-zero value, so a field the store's document forgets shows.
// Times are whole milliseconds (MongoDB's precision) and UTC.
func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Date(2025, 3, 1, 12, 0, *n, 7_000_000, time.UTC)))
			return
		}
		for i := 0; i < v.NumField(); i++ {
			fill(v.Field(i), n)
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Slice:
		if v.Type() == reflect.TypeOf(json.RawMessage{}) {
			v.SetBytes([]byte(`{"invoice": "INV-7", "total": 12.50}`))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := 0; i < 2; i++ {
			fill(v.Index(i), n)
		}
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Bool:
		v.SetBool(true)
	default:
		panic("fill: no value for " + v.Type().String())
	}
}

// tenant+"\x00"+key is the _id; a NUL inside either would let two pairs share one document.
func TestNULInTenantOrKeyIsRefused(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	for _, id := range [][2]string{{"acme\x00b", "c"}, {"acme", "b\x00c"}} {
		_, err := s.Transition(t.Context(), id[0], id[1], func(*items.Item) (*items.Item, error) {
			return &items.Item{Tenant: id[0], Key: id[1], State: items.StatePrepared}, nil
		})
		if err == nil {
			t.Errorf("Transition(%q, %q) wrote an item", id[0], id[1])
		}
		if _, err := s.Get(t.Context(), id[0], id[1]); err == nil || errors.Is(err, items.ErrNotFound) {
			t.Errorf("Get(%q, %q): %v, want a refusal", id[0], id[1], err)
		}
	}
}

func TestVersionGrowsByOneAndUpdatedAtMovesForward(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	first := create(t, s, "versions")
	prev := first
	for i := 0; i < 3; i++ {
		it, err := s.Transition(t.Context(), "acme", "versions", func(cur *items.Item) (*items.Item, error) {
			cur.UpdatedAt = first.UpdatedAt // a clock that stands still
			return cur, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if it.Version != prev.Version+1 {
			t.Errorf("version %d after %d, want one more", it.Version, prev.Version)
		}
		if !it.UpdatedAt.After(prev.UpdatedAt) {
			t.Errorf("updated_at %v did not move past %v", it.UpdatedAt, prev.UpdatedAt)
		}
		if !it.CreatedAt.Equal(first.CreatedAt) {
			t.Errorf("created_at changed from %v to %v", first.CreatedAt, it.CreatedAt)
		}
		prev = it
	}
}

// A creator that loses the insert to another replica decides again on what the other one wrote.
func TestCreateRaceDecidesAgainOnTheWinner(t *testing.T) {
	t.Parallel()
	s, openReplica := openStore(t)
	other := openReplica()
	var seen []*items.Item
	it, err := s.Transition(t.Context(), "acme", "created-twice", func(cur *items.Item) (*items.Item, error) {
		seen = append(seen, cur)
		if cur == nil && len(seen) == 1 {
			// The other replica creates the item between this read and this insert.
			create(t, other, "created-twice")
			return &items.Item{Tenant: "acme", Key: "created-twice", State: items.StatePrepared, History: []items.Event{}}, nil
		}
		return note("second decision")(cur)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[0] != nil || seen[1] == nil || seen[1].Version != 1 {
		t.Fatalf("fn saw %v; want nil, then the other replica's item at version 1", seen)
	}
	if it.Version != 2 || len(it.History) != 2 || !slices.Equal(notes(it), []string{"second decision"}) {
		t.Fatalf("stored version %d with history %+v; want version 2: the winner's event plus this change", it.Version, it.History)
	}
}

// A change decided on a version another replica has since replaced is refused by the version guard and
// decided again: neither change is lost.
func TestStaleVersionIsRefusedAndDecidedAgain(t *testing.T) {
	t.Parallel()
	s, openReplica := openStore(t)
	other := openReplica()
	create(t, s, "contended")
	calls := 0
	it, err := s.Transition(t.Context(), "acme", "contended", func(cur *items.Item) (*items.Item, error) {
		calls++
		if calls == 1 {
			if _, err := other.Transition(t.Context(), "acme", "contended", note("other replica")); err != nil {
				t.Fatal(err)
			}
		}
		return note(fmt.Sprintf("this replica, call %d", calls))(cur)
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Fatalf("fn called %d times, want 2 (once more after losing to the other replica)", calls)
	}
	if want := []string{"other replica", "this replica, call 2"}; !slices.Equal(notes(it), want) || it.Version != 3 {
		t.Fatalf("stored version %d with notes %q; want version 3 with %q", it.Version, notes(it), want)
	}
}

// TransitionMany decides the whole batch before it writes; when another replica changes an item in
// between, that item's calls are decided again on what the other replica wrote: no change is lost.
func TestTransitionManyDecidesAgainWhenAnotherReplicaCameBetween(t *testing.T) {
	t.Parallel()
	s, openReplica := openStore(t)
	other := openReplica()
	create(t, s, "r1")
	keys := []string{"r1", "r2", "r1"}
	calls := make([]int, len(keys))
	out, err := s.TransitionMany(t.Context(), "acme", keys, func(i int, cur *items.Item) (*items.Item, error) {
		calls[i]++
		if i == 1 && calls[i] == 1 {
			// After the batch read r1, before it writes it.
			if _, err := other.Transition(t.Context(), "acme", "r1", note("other replica")); err != nil {
				t.Fatal(err)
			}
		}
		if cur == nil {
			return &items.Item{Tenant: "acme", Key: keys[i], State: items.StatePrepared, History: []items.Event{}}, nil
		}
		return note(fmt.Sprintf("call %d", i))(cur)
	})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := s.Get(t.Context(), "acme", "r1")
	if want := []string{"other replica", "call 0", "call 2"}; !slices.Equal(notes(got), want) || got.Version != 4 {
		t.Fatalf("r1 at version %d with notes %q, want version 4 with %q", got.Version, notes(got), want)
	}
	if !slices.Equal(notes(out[0]), []string{"other replica", "call 0"}) || out[2].Version != 4 || out[1].Version != 1 {
		t.Fatalf("returned %q (v%d), r2 v%d, %q (v%d)", notes(out[0]), out[0].Version, out[1].Version, notes(out[2]), out[2].Version)
	}
	if calls[0] != 2 || calls[2] != 2 {
		t.Errorf("calls per index %v: the calls on r1 should each have been decided twice", calls)
	}
}

func TestLedgerSecretIsOneForAllReplicas(t *testing.T) {
	t.Parallel()
	s, openReplica := openStore(t)
	a, err := s.LedgerSecret(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	b, err := openReplica().LedgerSecret(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 32 || string(a) != string(b) {
		t.Fatalf("secrets %x and %x; want one 32-byte secret", a, b)
	}
}

func TestOpenCreatesTheIndexesOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.open()
	e.open() // a second start: creating the same indexes again is no error
	cur, err := e.collection(mongostore.ItemsCollection).Indexes().List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var specs []struct {
		Name string `bson:"name"`
	}
	if err := cur.All(t.Context(), &specs); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	for _, want := range []string{"state_lease", "tenant_changed", "tenant_state_changed", "tenant_batch", "needs_person_tenant_since", "tenant_reference", "tenant_execution"} {
		if !slices.Contains(names, want) {
			t.Errorf("index %s missing; have %q", want, names)
		}
	}
}

func TestPingAnswers(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

// TestOpenWithoutAServerIsUnavailable: a URI where nothing listens fails Open within the URI's
// serverSelectionTimeoutMS with one line that names each host tried and what it said, and what to check,
// without the URI's password or the driver's topology dump.
func TestOpenWithoutAServerIsUnavailable(t *testing.T) {
	t.Parallel()
	// A port nobody listens on: bind one, then close it.
	addr := freeAddr(t)
	start := time.Now()
	_, err := mongostore.Open(t.Context(), "mongodb://user:hunter2@"+addr+",nohost.invalid:27017/?serverSelectionTimeoutMS=700", "x")
	if !errors.Is(err, items.ErrUnavailable) {
		t.Fatalf("Open without a server: %v, want ErrUnavailable", err)
	}
	var ce *mongostore.ConnectError
	if !errors.As(err, &ce) {
		t.Fatalf("Open without a server: %T %v, want a *ConnectError", err, err)
	}
	msg := err.Error()
	for _, want := range []string{"within 700ms", addr + ": connection refused", "nohost.invalid:27017: ", "check that MongoDB runs", "serverSelectionTimeoutMS"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not say %q: %s", want, msg)
		}
	}
	for _, not := range []string{"hunter2", "topology", "\n", "server selection error"} {
		if strings.Contains(msg, not) {
			t.Errorf("the error says %q: %s", not, msg)
		}
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("Open took %v to give up, want about the URI's 700ms", d)
	}
	if got := mongostore.StartWait("mongodb://" + addr + "/"); got != mongostore.DefaultStartWait {
		t.Errorf("a URI without serverSelectionTimeoutMS waits %v at the start, want DefaultStartWait (%v)", got, mongostore.DefaultStartWait)
	}
}

func TestOpenWithABadURIHidesTheCredentials(t *testing.T) {
	t.Parallel()
	for _, uri := range []string{"mongodb://app:hunter2@db1:notaport/", "mongodb://app:hunter2@db1/?w=lots&journal=maybe", "postgres://app:hunter2@db1/"} {
		_, err := mongostore.Open(t.Context(), uri, "x", mongostore.WithTimeout(200*time.Millisecond))
		if err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%s): %v; want an error that does not show the password", mongostore.Redacted(uri), err)
		}
	}
}

// A URI the driver refuses as written gets one sentence saying what is wrong and what to check, with no
// package prefix, no second copy of the URI (the caller names it, redacted) and no piece of the user name
// or password: the driver's own words for a password that is not percent-encoded quote its bad escape.
func TestOpenWithAnUnusableURISaysWhatIsWrong(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ uri, want string }{
		{"mongodb://app:hun%ter2@db1/", "its password is not written as a URI needs: percent-encode it"},
		{"mongodb://app:hun:ter2@db1/", "its password is not written as a URI needs"},
		{"mongodb://a%zzpp:hunter2@db1/", "its user name is not written as a URI needs"},
		{"mongodb://app:hunter2@db1/?replicaSet=rs0&tls=maybe", `invalid value for "tls": "maybe"`},
		{"mongodb://app:hunter2@db1:notaport/", `port must be an integer`},
		{"postgres://app:hunter2@db1/", `scheme must be "mongodb" or "mongodb+srv"`},
	} {
		_, err := mongostore.Open(t.Context(), tc.uri, "x", mongostore.WithTimeout(200*time.Millisecond))
		if err == nil {
			t.Fatalf("Open(%s) opened", mongostore.Redacted(tc.uri))
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "the MongoDB URI cannot be used: ") || !strings.Contains(msg, tc.want) || !strings.Contains(msg, "check MONGODB_URI") {
			t.Errorf("Open(%s): %q; want it to say %q and to check MONGODB_URI", mongostore.Redacted(tc.uri), msg, tc.want)
		}
		for _, not := range []string{"hunter2", "hun", "ter2", "%te", "zz", "mongostore", "error parsing uri", "db1"} {
			if strings.Contains(msg, not) {
				t.Errorf("Open(%s): %q says %q", mongostore.Redacted(tc.uri), msg, not)
			}
		}
	}
}

// A batch against a slow server answers ErrUnavailable within the store's timeout: the whole batch is
// bounded by it, not each of its round trips (60 updates of 200 ms each took 12 s before).
func TestSlowServerBatchAnswersWithinTheTimeout(t *testing.T) {
	t.Parallel()
	if realURI() != "" {
		t.Skip("runs on the in-process FerretDB only (it needs the server's address to put a proxy before it)")
	}
	e := newEnv(t)
	direct := e.open()
	keys := make([]string, 60)
	for i := range keys {
		keys[i] = fmt.Sprintf("slow-%02d", i)
		create(t, direct, keys[i])
	}
	proxy := tcpproxy.Start(t, sharedSrv.Addr())
	const timeout = time.Second
	s, err := mongostore.Open(t.Context(), "mongodb://"+proxy.Addr+"/", e.db, mongostore.WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	proxy.Slow(100 * time.Millisecond) // each round trip: 200 ms or more
	start := time.Now()
	_, err = s.TransitionMany(t.Context(), "acme", keys, func(i int, cur *items.Item) (*items.Item, error) {
		cur.Owner = "ops-anna"
		return cur, nil
	})
	took := time.Since(start)
	if !errors.Is(err, items.ErrUnavailable) {
		t.Fatalf("a 60-item batch on a server 200 ms away with a 1 s timeout: %v, want ErrUnavailable", err)
	}
	if took > 4*timeout {
		t.Errorf("the batch answered after %v, want about the %v timeout", took, timeout)
	}
}

// A server that accepts connections and then stops answering must not hang a request: the client-side
// timeout turns it into ErrUnavailable, and nothing is claimed.
func TestHungServerTimesOut(t *testing.T) {
	t.Parallel()
	if realURI() != "" {
		t.Skip("runs on the in-process FerretDB only (it needs the server's address to put a proxy before it)")
	}
	srv := sharedSrv
	proxy := tcpproxy.Start(t, srv.Addr())
	db := srv.Database()
	s, err := mongostore.Open(t.Context(), "mongodb://"+proxy.Addr+"/", db, mongostore.WithTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ledger := newLedger(t, s, nil)

	proxy.Freeze()
	start := time.Now()
	ans, err := ledger.BeforeWrite(t.Context(), claimParams("hung"))
	if !errors.Is(err, items.ErrUnavailable) || ans.Decision == items.Proceed {
		t.Fatalf("before-write on a hung server: %+v, %v; want ErrUnavailable", ans, err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("before-write took %v on a hung server, want about the 500ms timeout", d)
	}
	proxy.Thaw()

	direct, err := mongostore.Open(t.Context(), srv.URI(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if it, err := direct.Get(t.Context(), "acme", "hung"); !errors.Is(err, items.ErrNotFound) {
		t.Fatalf("after a timed-out before-write the item is %+v (%v), want none", it, err)
	}
}

// Three replicas (three clients) race for one item: on a new item through the insert, on a prepared one
// through the conditional update. The conformance suite races one store; this races several. It needs a
// server whose conditional updates are atomic: FerretDB v1's are not (docs/mongodb.md).
func TestReplicasRacingForOneItemHaveOneWinner(t *testing.T) {
	if realURI() == "" {
		t.Skipf("needs a real MongoDB (set %s): FerretDB v1, the test server here, does not apply concurrent conditional updates atomically", mongotest.RealURIEnv)
	}
	s, openReplica := openStore(t)
	ledgers := []*items.Ledger{newLedger(t, s, nil), newLedger(t, openReplica(), nil), newLedger(t, openReplica(), nil)}
	const callers = 50
	for round := 0; round < 20; round++ {
		p := claimParams(fmt.Sprintf("race-%d", round))
		if round%2 == 1 {
			if _, err := s.Transition(t.Context(), p.Tenant, p.Key, func(*items.Item) (*items.Item, error) {
				return items.NewPrepared(p, time.Now())
			}); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		answers := make([]items.Answer, callers)
		errs := make([]error, callers)
		for i := 0; i < callers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[i], errs[i] = ledgers[i%len(ledgers)].BeforeWrite(context.Background(), p)
			}()
		}
		wg.Wait()
		proceeds := 0
		for i := range answers {
			if errs[i] != nil {
				t.Fatalf("round %d caller %d: %v", round, i, errs[i])
			}
			if answers[i].Decision == items.Proceed {
				proceeds++
			}
		}
		if proceeds != 1 {
			t.Fatalf("round %d (prepared: %v): %d callers got proceed, want exactly 1", round, round%2 == 1, proceeds)
		}
	}
}

func TestRedactedHidesCredentials(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ uri, want string }{
		{"mongodb://127.0.0.1:27017/", "mongodb://127.0.0.1:27017/"},
		{"mongodb://app:s3cret@db1:27017,db2:27017/companion?replicaSet=rs0&w=majority",
			"mongodb://xxxxx@db1:27017,db2:27017/companion?replicaSet=rs0&w=majority"},
		{"mongodb+srv://app:p%40ss@cluster0.example.mongodb.net/?retryWrites=true",
			"mongodb+srv://xxxxx@cluster0.example.mongodb.net/?retryWrites=true"},
		{"mongodb://h/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:abc&tlsCertificateKeyFilePassword=pw",
			"mongodb://h/?authMechanism=MONGODB-AWS&authMechanismProperties=xxxxx&tlsCertificateKeyFilePassword=xxxxx"},
		{"mongodb://user:pw@h", "mongodb://xxxxx@h"},
		{"user:pw@h", "(unparsable MongoDB URI)"},
	} {
		if got := mongostore.Redacted(tc.uri); got != tc.want {
			t.Errorf("Redacted(%q) = %q, want %q", tc.uri, got, tc.want)
		}
	}
}

// The companion binary must not link FerretDB: only tests import mongotest.
func TestStoreDoesNotLinkFerretDB(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/replaysafe/companion/items/mongostore").CombinedOutput()
	if err != nil {
		t.Skipf("go list: %v: %s", err, out)
	}
	if strings.Contains(string(out), "FerretDB") {
		t.Fatal("items/mongostore depends on FerretDB; only its tests may")
	}
}

// TestLedgerSecretIsReadWithMajority shows that the ledger secret is read with read concern majority (the
// test server accepts the read concern; only a real replica set can show what it changes during a
// failover), and that the secret read so is the one every replica gets.
func TestLedgerSecretIsReadWithMajority(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var reads []bson.Raw
	mon := &event.CommandMonitor{Started: func(_ context.Context, ev *event.CommandStartedEvent) {
		if ev.CommandName == "find" {
			coll, _ := ev.Command.Lookup("find").StringValueOK()
			if id, _ := ev.Command.Lookup("filter", "_id").StringValueOK(); coll == mongostore.MetaCollection && id == "ledger_secret" {
				mu.Lock()
				reads = append(reads, slices.Clone(ev.Command))
				mu.Unlock()
			}
		}
	}}
	s, err := mongostore.Open(t.Context(), e.uri, e.db, mongostore.WithCommandMonitor(mon))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	a, err := s.LedgerSecret(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.open().LedgerSecret(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("two replicas read different ledger secrets")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reads) != 1 {
		t.Fatalf("LedgerSecret read the secret %d times, want once", len(reads))
	}
	level, _ := reads[0].Lookup("readConcern", "level").StringValueOK()
	if level != "majority" {
		t.Fatalf("the ledger secret was read with read concern %q, want majority (command %s)", level, reads[0])
	}
}

// TestOpenFillsExecutionIDsOfEarlierItems starts on an item stored by a build without the top-level
// execution_id (made here by unsetting it, and the marker of the fill, which such a ledger lacks): the
// start's background pass fills it from the item's last attempt.
func TestOpenFillsExecutionIDsOfEarlierItems(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open()
	ctx := t.Context()
	l, err := items.NewLedger(ctx, s, items.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tenant := fmt.Sprintf("upgrade-%d", time.Now().UnixNano())
	fp, err := items.Fingerprint([]byte(`{"invoice":"742"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.BeforeWrite(ctx, items.BeforeWriteParams{Tenant: tenant, Key: "a", Fingerprint: fp, ExecutionID: "run-7"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.collection(mongostore.ItemsCollection).UpdateMany(ctx, bson.D{{Key: "tenant", Value: tenant}},
		bson.D{{Key: "$unset", Value: bson.D{{Key: "execution_id", Value: ""}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.collection(mongostore.MetaCollection).DeleteOne(ctx, bson.D{{Key: "_id", Value: "execution_ids_filled"}}); err != nil {
		t.Fatal(err)
	}
	again := e.open()
	mongostore.WaitExecutionIDsFilled(again)
	page, err := again.ListItems(ctx, items.ListParams{Tenant: tenant, ExecutionID: "run-7"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 1 || page.Items[0].ExecutionID != "run-7" {
		t.Fatalf("after a restart, execution run-7 lists %+v, want item a with its execution_id", page.Items)
	}
}

// Stores opened at once in one process (replicas embedded in one program; the conformance suite opens
// one per subtest) each create the indexes. They used to share the index models, whose options the
// driver writes to while creating an index: run with -race, this test found that data race.
func TestOpenSeveralStoresAtOnce(t *testing.T) {
	t.Parallel()
	envs := []env{newEnv(t), newEnv(t)}
	const perEnv = 3
	stores := make([]*mongostore.Store, len(envs)*perEnv)
	errs := make([]error, len(stores))
	var wg sync.WaitGroup
	for i := range stores {
		e := envs[i%len(envs)]
		wg.Go(func() { stores[i], errs[i] = mongostore.Open(t.Context(), e.uri, e.db) })
	}
	wg.Wait()
	for i, s := range stores {
		if errs[i] != nil {
			t.Fatalf("Open %d: %v", i, errs[i])
		}
		t.Cleanup(func() { s.Close() })
	}
	// Every store works, and the replicas of one database share its ledger.
	for i, s := range stores {
		if err := s.Ping(t.Context()); err != nil {
			t.Errorf("store %d: %v", i, err)
		}
	}
	secrets := map[string]string{}
	for i, s := range stores {
		secret, err := s.LedgerSecret(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		db := envs[i%len(envs)].db
		if prev, ok := secrets[db]; ok && prev != string(secret) {
			t.Errorf("store %d: another ledger secret than the other replicas of its database", i)
		}
		secrets[db] = string(secret)
	}
}

// The stored fingerprint is keyed with the ledger secret, which lives in the database: two stores sharing
// one database, and a store opened again after the others closed, keep and recognise the same one.
func TestFingerprintSharedByReplicasAndRestarts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const payload = `{"card":"4111111111111111"}`
	a, b := e.open(), e.open()
	fa := itemstest.KeyedFingerprint(t, a, "card", payload)
	fb := itemstest.KeyedFingerprint(t, b, "card", payload)
	a.Close()
	b.Close()
	fc := itemstest.KeyedFingerprint(t, e.open(), "card", payload)
	if fa != fb || fb != fc {
		t.Fatalf("fingerprints %s (first replica), %s (second), %s (after a restart): want one", fa, fb, fc)
	}
}

// TestURICannotWeakenWrites: whatever the URI says, writes are retried once after a network error
// (retryable writes: an acknowledged claim survives a failover, the server recognising the repeat) and use
// write concern majority with journaling.
func TestURICannotWeakenWrites(t *testing.T) {
	t.Parallel()
	o := mongostore.ClientOptions("mongodb://db1:27017,db2:27017/?replicaSet=rs0&retryWrites=false&w=1&journal=false")
	if o.RetryWrites == nil || !*o.RetryWrites {
		t.Error("retryWrites=false in the URI turned retryable writes off")
	}
	if wc := o.WriteConcern; wc == nil || wc.W != "majority" || wc.Journal == nil || !*wc.Journal {
		t.Errorf("write concern %+v, want majority with journaling", wc)
	}
}
