package mongostore_test

import (
	"testing"

	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
)

// TestHTTPRows proves the decision tables of API.md row by row through HTTP on the MongoDB store (the
// FerretDB test server here), as TestRowsSQLite does on SQLite. None of them races callers.
func TestHTTPRows(t *testing.T) {
	handlerstest.ExerciseRows(t, func(t *testing.T) items.Store { return newEnv(t).open() })
}
