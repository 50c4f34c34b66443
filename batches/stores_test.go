package batches_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/replaysafe/companion/batches"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/mongostore"
	"github.com/replaysafe/companion/items/mongostore/mongotest"
	"github.com/replaysafe/companion/items/sqlitestore"
)

// store is what the batch service runs on: the ledger's store with the batch queries.
type store interface {
	items.Store
	batches.Store
}

// storeKind opens a fresh, empty store of one kind for a test.
type storeKind struct {
	name string
	open func(t testing.TB) store
}

// ferret is the FerretDB server the MongoDB store's tests share, each test on its own database; nil when
// the tests run against the real MongoDB named by mongotest.RealURIEnv.
var ferret *mongotest.Server

func TestMain(m *testing.M) {
	os.Exit(func() int {
		if os.Getenv(mongotest.RealURIEnv) == "" {
			dir, err := os.MkdirTemp("", "batches-test-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer os.RemoveAll(dir)
			if ferret, err = mongotest.StartIn(dir); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer ferret.Stop()
		}
		return m.Run()
	}())
}

func storeKinds() []storeKind {
	mongoKind := storeKind{name: "mongodb", open: func(t testing.TB) store {
		uri, db := os.Getenv(mongotest.RealURIEnv), fmt.Sprintf("batches_test_%d", time.Now().UnixNano())
		if ferret != nil {
			uri, db = ferret.URI(), ferret.Database()
		}
		s, err := mongostore.Open(context.Background(), uri, db, mongostore.WithTimeout(mongotest.StoreTimeout()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}}
	if ferret != nil {
		mongoKind.name = "ferretdb"
	}
	return []storeKind{
		{name: "sqlite", open: func(t testing.TB) store {
			s, err := sqlitestore.Open(context.Background(), t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}},
		mongoKind,
	}
}

// eachStore runs test once per store kind, each in its own subtest.
func eachStore(t *testing.T, test func(t *testing.T, k storeKind)) {
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) { test(t, k) })
	}
}

// clock is the fake clock of the store conformance suite.
type clock = itemstest.Clock

func newClock() *clock { return itemstest.NewClock() }

// fixture is a batch service over a fresh store with a fake clock.
type fixture struct {
	store  store
	ledger *items.Ledger
	svc    *batches.Service
	clock  *clock
}

func newFixture(t testing.TB, k storeKind) *fixture {
	t.Helper()
	st := k.open(t)
	c := newClock()
	l, err := items.NewLedger(context.Background(), st, items.Config{
		Defaults: items.Destination{Dedupe: items.DedupeKey},
		Now:      c.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{store: st, ledger: l, svc: batches.New(l, st), clock: c}
}
