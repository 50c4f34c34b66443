package mongostore_test

import (
	"testing"
	"time"

	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/mongostore"
	"github.com/replaysafe/companion/items/mongostore/mongotest"
)

// TestHTTPContract runs the store-agnostic HTTP tests of the service on the MongoDB store.
func TestHTTPContract(t *testing.T) {
	opts := handlerstest.Options{}
	if realURI() == "" {
		opts.SkipConcurrency = "needs a real MongoDB (set " + mongotest.RealURIEnv + "): FerretDB v1, the test server here, " +
			"does not apply concurrent conditional updates atomically"
	}
	handlerstest.Exercise(t, func(t *testing.T) items.Store { return newEnv(t).open() }, opts)
}

// The HTTP answer while the MongoDB server is down is 503 store_unavailable, never proceed, and /readyz
// says so; when the server is back (same files, same port) the same requests are answered again, and
// what was claimed before the outage is still claimed.
func TestHTTPOutageAnswers503AndRecovers(t *testing.T) {
	t.Parallel()
	srv := mongotest.Start(t)
	store, err := mongostore.Open(t.Context(), srv.URI(), "outage", mongostore.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	handlerstest.ExerciseOutage(t, store, time.Second, srv.Stop, func() {
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
	})
}
