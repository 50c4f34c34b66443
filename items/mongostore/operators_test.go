package mongostore_test

import (
	"testing"

	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/mongostore/mongotest"
)

// TestOperatorsConformance runs the operator part of the suite (lists, sweep queries, the alert outbox,
// stats) on a fresh database per subtest: on the in-process FerretDB, or on the real MongoDB named by
// COMPANION_TEST_MONGODB_URI.
func TestOperatorsConformance(t *testing.T) {
	opts := itemstest.Options{}
	if realURI() == "" {
		opts.SkipConcurrency = "needs a real MongoDB (set " + mongotest.RealURIEnv + "): FerretDB v1, the test server here, " +
			"does not apply concurrent conditional updates atomically"
	}
	itemstest.ExerciseOperators(t, func(t *testing.T) itemstest.OperatorStore { return newEnv(t).open() }, opts)
}
