package mongostore_test

import (
	"sync"
	"testing"

	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/mongostore"
)

// TestSeriesConformance runs the measures-over-time suite on the MongoDB store, each subtest on a fresh
// database (the suite has no concurrent subtests); Reopen closes the store and opens its database again,
// as a restarted replica does.
func TestSeriesConformance(t *testing.T) {
	var envs sync.Map // *mongostore.Store → its env
	itemstest.ExerciseSeries(t, func(t *testing.T) itemstest.SeriesStore {
		e := newEnv(t)
		s := e.open()
		envs.Store(s, e)
		return s
	}, itemstest.SeriesOptions{Reopen: func(t *testing.T, s itemstest.SeriesStore) itemstest.SeriesStore {
		e, _ := envs.Load(s)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		again := e.(env)
		again.t = t
		return again.open()
	}})
}

// TestHTTPSeries runs the HTTP tests of GET /v1/stats/series on the MongoDB store.
func TestHTTPSeries(t *testing.T) {
	handlerstest.ExerciseSeries(t, func(t *testing.T) items.Store { return newEnv(t).open() })
}

var _ itemstest.SeriesStore = (*mongostore.Store)(nil)
