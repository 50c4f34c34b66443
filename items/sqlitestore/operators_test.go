package sqlitestore_test

import (
	"testing"

	"github.com/replaysafe/companion/items/itemstest"
)

func TestOperatorsConformance(t *testing.T) {
	itemstest.ExerciseOperators(t, func(t *testing.T) itemstest.OperatorStore {
		s := openIn(t, t.TempDir())
		t.Cleanup(func() { s.Close() })
		return s
	}, itemstest.Options{})
}
