package mongostore_test

import (
	"testing"

	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
)

// TestHTTPBatches runs the HTTP tests of the batch endpoints on the MongoDB store. Their concurrency test
// races batches of new keys, that is inserts, which FerretDB keeps atomic (the unique _id): it runs here
// too.
//
// Under -race two of them failed (issue 18), for two different reasons:
//   - StatusPagesPast500InIndexOrder (503 store_unavailable) was only slowness: FerretDB counts a
//     600-item batch in 0.5-4 s on the shared 2-core machine, and several times slower under the race
//     detector, past the 5 s default timeout. The store answered 503 in time, as it should. The tests'
//     stores now get a timeout that scales (mongotest.StoreTimeout).
//   - SameBatchTwiceAtOnceProceedsEachKeyOnce (client timeout after 30 s) was a real flaw: the batch that
//     lost the race for its 200 inserts decided each of them again after its own read, 200 round trips
//     each with its own timeout, so a batch had no bound at all (12 s on a loaded machine without -race).
//     TransitionMany now reads those items again in one query, and is bounded by the store's timeout as a
//     whole: against a slow server a batch answers 503 within the timeout (1.6 s here without -race).
func TestHTTPBatches(t *testing.T) {
	handlerstest.ExerciseBatches(t, func(t *testing.T) items.Store { return newEnv(t).open() }, handlerstest.Options{})
}
