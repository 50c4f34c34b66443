package handlerstest

import (
	"net/http"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// ExerciseOutage checks the service over a store whose server goes away and comes back: while stop has
// it down, every before-write and after-write is answered 503 store_unavailable within about the store's
// timeout (given), never with a decision, and /readyz says so; once restart brought it back, /readyz turns
// ready within 10 s, a new key proceeds, the key claimed before the outage is still claimed, and the
// report the outage refused is taken.
func ExerciseOutage(t *testing.T, store items.Store, timeout time.Duration, stop, restart func()) {
	t.Helper()
	s := NewService(t, store, ServiceConfig{})
	body := func(key string) map[string]any {
		return map[string]any{"key": key, "payload": map[string]any{"invoice": key}, "dedupe": "key"}
	}
	before := s.BeforeWrite(body("inv-1"))
	if before.Status != http.StatusOK || before.Str("decision") != "proceed" {
		t.Fatalf("before the outage: %d %s", before.Status, before.Body)
	}
	Expect(t, s.Get("", "/readyz"), http.StatusOK, "", "")
	report := map[string]any{"key": "inv-1", "claim": before.Str("claim"), "outcome": "succeeded", "external_id": "x"}

	stop()
	for _, key := range []string{"inv-2", "inv-1"} {
		began := time.Now()
		r := s.BeforeWrite(body(key))
		Expect(t, r, http.StatusServiceUnavailable, items.CodeUnavailable, "")
		if r.At("decision") != nil {
			t.Errorf("before-write %s during the outage carries a decision: %s", key, r.Body)
		}
		if took := time.Since(began); took > 3*timeout {
			t.Errorf("before-write %s during the outage took %s, want about the store's timeout of %s", key, took, timeout)
		}
	}
	Expect(t, s.AfterWrite(report), http.StatusServiceUnavailable, items.CodeUnavailable, "")
	Expect(t, s.Get("", "/readyz"), http.StatusServiceUnavailable, items.CodeUnavailable, "")

	restart()
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
	if r := s.AfterWrite(report); r.Str("state") != "succeeded" {
		t.Fatalf("the report the outage refused, repeated: %d %s", r.Status, r.Body)
	}
}
