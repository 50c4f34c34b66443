package pgstore_test

import (
	"context"
	"testing"

	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/pgstore"
	"github.com/replaysafe/companion/items/pgstore/pgtest"
)

// TestSeriesConformance runs the measures-over-time suite on the PostgreSQL store, each subtest on a store
// of its own; Reopen closes the store and opens its schema again, as a restarted replica does.
func TestSeriesConformance(t *testing.T) {
	url := pgtest.URL(t)
	itemstest.ExerciseSeries(t, func(t *testing.T) itemstest.SeriesStore { return fresh.Take(t) },
		itemstest.SeriesOptions{Reopen: func(t *testing.T, s itemstest.SeriesStore) itemstest.SeriesStore {
			schema := s.(*pgstore.Store).Schema()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			again, err := pgstore.Open(context.Background(), url, schema, pgstore.WithLogger(quiet))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { again.Close() })
			return again
		}})
}

// TestHTTPSeries runs the HTTP tests of GET /v1/stats/series on the PostgreSQL store.
func TestHTTPSeries(t *testing.T) {
	pgtest.URL(t)
	handlerstest.ExerciseSeries(t, func(t *testing.T) items.Store { return fresh.Take(t) })
}

var _ itemstest.SeriesStore = (*pgstore.Store)(nil)
