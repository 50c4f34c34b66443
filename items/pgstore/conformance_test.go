package pgstore_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/pgstore"
	"github.com/replaysafe/companion/items/pgstore/pgtest"
)

// open opens a store in a schema of the test's own, closed and dropped when the test ends.
func open(t testing.TB, opts ...pgstore.Option) *pgstore.Store {
	t.Helper()
	url, schema := pgtest.Schema(t)
	s, err := pgstore.Open(context.Background(), url, schema, append([]pgstore.Option{pgstore.WithLogger(quiet)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fresh are the suites' stores, each in a schema of its own, opened ahead of the subtests that take them.
var fresh = pgtest.NewAhead(func(ctx context.Context, url, schema string) (*pgstore.Store, error) {
	return pgstore.Open(ctx, url, schema, pgstore.WithLogger(quiet))
}, func(s *pgstore.Store) { s.Close() })

func TestMain(m *testing.M) {
	code := m.Run()
	fresh.Wait()
	os.Exit(code)
}

// TestConformance runs the suite every store passes, its concurrency subtests included, each subtest on a
// store of its own in a schema of its own.
func TestConformance(t *testing.T) {
	pgtest.URL(t)
	itemstest.Exercise(t, func(t *testing.T) items.Store { return fresh.Take(t) }, itemstest.Options{DocumentBytes: docSize})
}

// TestOperators runs the operator part of the suite (lists, sweeps, the alert outbox, stats, kept counts,
// retention, probes).
func TestOperators(t *testing.T) {
	pgtest.URL(t)
	itemstest.ExerciseOperators(t, func(t *testing.T) itemstest.OperatorStore { return fresh.Take(t) }, itemstest.Options{})
}

// docSize returns the size in bytes of the JSON the item's row holds (compressed, its size would hide a
// history that grows by repeats).
func docSize(t *testing.T, s items.Store, tenant, key string) int {
	t.Helper()
	ps := s.(*pgstore.Store)
	var doc []byte
	if err := ps.Pool().QueryRow(context.Background(), `SELECT doc FROM `+ps.Schema()+`.items WHERE tenant = $1 AND key = $2`,
		tenant, key).Scan(&doc); err != nil {
		t.Fatalf("the document of %s/%s: %v", tenant, key, err)
	}
	js, err := pgstore.DocumentJSON(doc)
	if err != nil {
		t.Fatalf("the document of %s/%s: %v", tenant, key, err)
	}
	return len(js)
}
