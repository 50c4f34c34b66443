package mongostore_test

import (
	"testing"

	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/mongostore/mongotest"
)

// TestHTTPRows proves the decision tables of API.md row by row through HTTP on the MongoDB store (the
// FerretDB test server here), as TestRowsSQLite does on SQLite. The concurrency test among them races
// conditional updates, which FerretDB does not apply atomically: it runs only against a real MongoDB.
func TestHTTPRows(t *testing.T) {
	opts := handlerstest.Options{}
	if realURI() == "" {
		opts.SkipConcurrency = "needs a real MongoDB (set " + mongotest.RealURIEnv + "): FerretDB v1, the test server here, " +
			"does not apply concurrent conditional updates atomically"
	}
	handlerstest.ExerciseRows(t, func(t *testing.T) items.Store { return newEnv(t).open() }, opts)
}
