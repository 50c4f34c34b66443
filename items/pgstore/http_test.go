package pgstore_test

import (
	"testing"

	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/pgstore/pgtest"
)

// TestHTTPContract runs the store-agnostic HTTP tests of the service on the PostgreSQL store, their
// concurrency tests included.
func TestHTTPContract(t *testing.T) {
	pgtest.URL(t)
	handlerstest.Exercise(t, func(t *testing.T) items.Store { return fresh.Take(t) }, handlerstest.Options{})
}

// TestHTTPBatches runs the HTTP tests of the batch endpoints on the PostgreSQL store.
func TestHTTPBatches(t *testing.T) {
	pgtest.URL(t)
	handlerstest.ExerciseBatches(t, func(t *testing.T) items.Store { return fresh.Take(t) }, handlerstest.Options{})
}

// TestHTTPRows proves the decision tables of API.md row by row through HTTP on the PostgreSQL store.
func TestHTTPRows(t *testing.T) {
	pgtest.URL(t)
	handlerstest.ExerciseRows(t, func(t *testing.T) items.Store { return fresh.Take(t) }, handlerstest.Options{})
}
