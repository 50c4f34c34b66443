package mongostore_test

import (
	"testing"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/mongostore/mongotest"
)

// TestConformance runs the suite every store passes, each subtest on a fresh database: on the in-process
// FerretDB, or on the real MongoDB named by COMPANION_TEST_MONGODB_URI.
func TestConformance(t *testing.T) {
	opts := itemstest.Options{}
	if realURI() == "" {
		opts.SkipConcurrency = "needs a real MongoDB (set " + mongotest.RealURIEnv + "): FerretDB v1, the test server here, " +
			"does not apply concurrent conditional updates atomically (more than one winner in 19 of 20 rounds of 50 callers)"
	}
	itemstest.Exercise(t, func(t *testing.T) items.Store { return newEnv(t).open() }, opts)
}
