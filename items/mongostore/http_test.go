package mongostore_test

import (
	"net/http"
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
	s := handlerstest.NewService(t, store, handlerstest.ServiceConfig{})
	body := func(key string) map[string]any {
		return map[string]any{"key": key, "payload": map[string]any{"invoice": key}, "dedupe": "key"}
	}
	before := s.BeforeWrite(body("inv-1"))
	if before.Status != http.StatusOK || before.Str("decision") != "proceed" {
		t.Fatalf("before the outage: %d %s", before.Status, before.Body)
	}
	handlerstest.Expect(t, s.Get("", "/readyz"), http.StatusOK, "", "")

	srv.Stop()
	for _, key := range []string{"inv-2", "inv-1"} {
		r := s.BeforeWrite(body(key))
		handlerstest.Expect(t, r, http.StatusServiceUnavailable, items.CodeUnavailable, "")
		if r.At("decision") != nil {
			t.Errorf("before-write %s during the outage carries a decision: %s", key, r.Body)
		}
	}
	handlerstest.Expect(t, s.AfterWrite(map[string]any{"key": "inv-1", "claim": before.Str("claim"), "outcome": "succeeded", "external_id": "x"}),
		http.StatusServiceUnavailable, items.CodeUnavailable, "")
	handlerstest.Expect(t, s.Get("", "/readyz"), http.StatusServiceUnavailable, items.CodeUnavailable, "")

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Get("", "/readyz").Status != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("/readyz still down 10s after the server came back")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r := s.BeforeWrite(body("inv-2")); r.Status != http.StatusOK || r.Str("decision") != "proceed" {
		t.Fatalf("a new key after the outage: %d %s", r.Status, r.Body)
	}
	again := s.BeforeWrite(body("inv-1"))
	if again.Str("decision") != "skip" || again.Str("reason") != "in_progress" || again.Str("idempotency_key") != before.Str("idempotency_key") {
		t.Fatalf("the key claimed before the outage: %s", again.Body)
	}
	if r := s.AfterWrite(map[string]any{"key": "inv-1", "claim": before.Str("claim"), "outcome": "succeeded", "external_id": "x"}); r.Str("state") != "succeeded" {
		t.Fatalf("the report the outage refused, repeated: %d %s", r.Status, r.Body)
	}
}
