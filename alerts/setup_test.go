package alerts_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/alerts"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/mongostore"
	"github.com/replaysafe/companion/items/mongostore/mongotest"
	"github.com/replaysafe/companion/items/sqlitestore"
)

// testStore is what the tests need of a store: the ledger's, the alert outbox's and the sweeper's.
type testStore interface {
	items.Store
	alerts.Outbox
	alerts.SweepStore
}

// openStore opens a fresh store of one kind for a test; it is closed when the test ends.
type openStore func(t testing.TB) testStore

// openSQLite opens the SQLite store in the test's temporary directory.
func openSQLite(t testing.TB) testStore {
	t.Helper()
	s, err := sqlitestore.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openMongo opens the MongoDB store on an in-process FerretDB of the test's own.
func openMongo(t testing.TB) testStore {
	t.Helper()
	srv := mongotest.Start(t)
	s, err := mongostore.Open(context.Background(), srv.URI(), srv.Database())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// stores are the store kinds a test runs on, by name.
var stores = []struct {
	name string
	open openStore
}{{"sqlite", openSQLite}, {"mongodb", openMongo}}

// clock is the fake clock of the store conformance suite.
type clock = itemstest.Clock

func newClock() *clock { return itemstest.NewClock() }

// env is a ledger on a fresh SQLite store with a fake clock.
type env struct {
	t      testing.TB
	ctx    context.Context
	clock  *clock
	store  testStore
	ledger *items.Ledger
	cfg    items.Config
	logs   *syncBuffer
	logger *slog.Logger
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

func newEnv(t testing.TB, cfg items.Config) *env {
	t.Helper()
	return newEnvOn(t, openSQLite, cfg)
}

// newEnvOn is newEnv on a store of the kind open opens.
func newEnvOn(t testing.TB, open openStore, cfg items.Config) *env {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), clock: newClock(), store: open(t), logs: &syncBuffer{}}
	e.logger = slog.New(slog.NewTextHandler(e.logs, nil))
	cfg.Now = e.clock.Now
	e.cfg = cfg
	e.ledger = e.newLedger(cfg)
	return e
}

// newLedger returns another ledger over the same store (another replica, or a changed configuration).
func (e *env) newLedger(cfg items.Config) *items.Ledger {
	e.t.Helper()
	cfg.Now = e.clock.Now
	l, err := items.NewLedger(e.ctx, e.store, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

var fingerprint = func() string {
	f, err := items.Fingerprint([]byte(`{"invoice":"742","amount":120.5}`))
	if err != nil {
		panic(err)
	}
	return f
}()

type claimOpt func(*items.BeforeWriteParams)

func withDest(d string) claimOpt         { return func(p *items.BeforeWriteParams) { p.Destination = d } }
func withDedupe(d items.Dedupe) claimOpt { return func(p *items.BeforeWriteParams) { p.Dedupe = d } }
func withLease(s int) claimOpt           { return func(p *items.BeforeWriteParams) { p.LeaseSeconds = s } }
func withOwner(o string) claimOpt        { return func(p *items.BeforeWriteParams) { p.Owner = o } }
func withRef(r string) claimOpt          { return func(p *items.BeforeWriteParams) { p.Reference = r } }
func inBatch(id string, i int) claimOpt {
	return func(p *items.BeforeWriteParams) { p.BatchID, p.BatchIndex = id, &i }
}
func withWorkflow(w string) claimOpt      { return func(p *items.BeforeWriteParams) { p.Workflow = w } }
func keyOf(prefix string, i int) string   { return fmt.Sprintf("%s-%03d", prefix, i) }
func ptr[T any](v T) *T                   { return &v }
func (e *env) advance(d time.Duration)    { e.clock.Advance(d) }
func (e *env) now() time.Time             { return e.clock.Now() }
func (e *env) get(key string) *items.Item { return e.getIn("default", key) }
func (e *env) claim(key string, opts ...claimOpt) items.Answer {
	return e.claimWith(e.ledger, key, opts...)
}

func (e *env) getIn(tenant, key string) *items.Item {
	e.t.Helper()
	it, err := e.store.Get(e.ctx, tenant, key)
	if err != nil {
		e.t.Fatalf("get %s: %v", key, err)
	}
	return it
}

// claimWith asks before-write for key and expects proceed.
func (e *env) claimWith(l *items.Ledger, key string, opts ...claimOpt) items.Answer {
	e.t.Helper()
	p := items.BeforeWriteParams{Tenant: "default", Key: key, Fingerprint: fingerprint, Destination: "billing"}
	for _, o := range opts {
		o(&p)
	}
	a, err := l.BeforeWrite(e.ctx, p)
	if err != nil {
		e.t.Fatalf("before-write %s: %v", key, err)
	}
	if a.Decision != items.Proceed {
		e.t.Fatalf("before-write %s: %s/%s, want proceed", key, a.Decision, a.Reason)
	}
	return a
}

// report sends an after-write for the claim.
func (e *env) report(key, claim string, ev items.Evidence, opts ...func(*items.AfterWriteParams)) items.Report {
	e.t.Helper()
	p := items.AfterWriteParams{Tenant: "default", Key: key, Claim: claim, Evidence: ev}
	for _, o := range opts {
		o(&p)
	}
	r, err := e.ledger.AfterWrite(e.ctx, p)
	if err != nil {
		e.t.Fatalf("after-write %s: %v", key, err)
	}
	return r
}

var (
	timeout   = items.Evidence{Outcome: items.OutcomeUnknown, Class: items.ClassTimeout}
	succeeded = items.Evidence{Outcome: items.OutcomeSucceeded}
	refused   = items.Evidence{Outcome: items.OutcomeFailed, Class: items.ClassConnectionRefused}
)

// unknownItem claims key and reports a timeout: the item's outcome is unknown.
func (e *env) unknownItem(key string, opts ...claimOpt) *items.Item {
	e.t.Helper()
	a := e.claim(key, opts...)
	e.report(key, a.Claim, timeout, func(p *items.AfterWriteParams) { p.Tenant = e.tenantOf(opts) })
	return e.getIn(e.tenantOf(opts), key)
}

func (e *env) tenantOf(opts []claimOpt) string {
	p := items.BeforeWriteParams{Tenant: "default"}
	for _, o := range opts {
		o(&p)
	}
	return p.Tenant
}
