package sqlitestore_test

import (
	"sync"
	"testing"

	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/sqlitestore"
)

func TestSeriesConformance(t *testing.T) {
	var dirs sync.Map // *sqlitestore.Store → its directory
	itemstest.ExerciseSeries(t, func(t *testing.T) itemstest.SeriesStore {
		dir := t.TempDir()
		s := openIn(t, dir)
		dirs.Store(s, dir)
		t.Cleanup(func() { s.Close() })
		return s
	}, itemstest.SeriesOptions{Reopen: func(t *testing.T, s itemstest.SeriesStore) itemstest.SeriesStore {
		dir, _ := dirs.Load(s)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		again := openIn(t, dir.(string))
		t.Cleanup(func() { again.Close() })
		return again
	}})
}

var _ itemstest.SeriesStore = (*sqlitestore.Store)(nil)
