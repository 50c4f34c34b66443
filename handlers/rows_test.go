package handlers_test

import (
	"testing"

	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
)

// TestRowsSQLite proves the decision tables of API.md row by row through HTTP on the SQLite store
// (handlerstest.ExerciseRows; the MongoDB store runs them in its TestHTTPRows).
func TestRowsSQLite(t *testing.T) {
	handlerstest.ExerciseRows(t, func(t *testing.T) items.Store { return openSQLite(t) }, handlerstest.Options{})
}
