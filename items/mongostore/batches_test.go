package mongostore_test

import (
	"testing"

	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
)

// TestHTTPBatches runs the HTTP tests of the batch endpoints on the MongoDB store. Their concurrency test
// races batches of new keys, that is inserts, which FerretDB keeps atomic (the unique _id): it runs here
// too.
func TestHTTPBatches(t *testing.T) {
	handlerstest.ExerciseBatches(t, func(t *testing.T) items.Store { return newEnv(t).open() }, handlerstest.Options{})
}
