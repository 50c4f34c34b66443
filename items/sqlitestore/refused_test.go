package sqlitestore

import (
	"errors"
	"net/http"
	"testing"

	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
)

// TestHTTPRefusedBeforeWriteLeavesNoClaim (API.md additions, "A refused request leaves nothing behind"):
// a before-write, single or batch, whose transaction fails at its commit is answered 503
// store_unavailable, and leaves no claim: a new key does not exist, a prepared one is prepared again, and
// the same request then proceeds at attempt 1.
func TestHTTPRefusedBeforeWriteLeavesNoClaim(t *testing.T) {
	store := openTemp(t)
	svc := handlerstest.NewService(t, store, handlerstest.ServiceConfig{})
	failCommit := func() {
		store.fault = func(op string) error {
			if op == "commit" {
				return errors.New("injected: the commit failed")
			}
			return nil
		}
	}

	svc.Prepare("one-prepared")
	for _, key := range []string{"one-new", "one-prepared"} {
		failCommit()
		r := svc.BeforeWrite(map[string]any{"key": key, "payload": map[string]any{"row": key, "amount": "10.00"}})
		store.fault = nil
		handlerstest.Expect(t, r, http.StatusServiceUnavailable, items.CodeUnavailable, "")
		svc.ExpectNoClaim(key, key == "one-prepared")
		if a := svc.BeforeWrite(map[string]any{"key": key, "payload": map[string]any{"row": key, "amount": "10.00"}}); a.Str("decision") != "proceed" || a.Num("attempt") != 1 {
			t.Fatalf("%s after the refusal: %s", key, a.Body)
		}
	}

	keys := []string{"b-new-1", "b-new-2", "b-prepared-1", "b-prepared-2"}
	svc.Prepare(keys[2:]...)
	failCommit()
	r := svc.BatchBeforeWrite("exec-503", handlerstest.BatchItems(keys...))
	store.fault = nil
	handlerstest.Expect(t, r, http.StatusServiceUnavailable, items.CodeUnavailable, "")
	for i, key := range keys {
		svc.ExpectNoClaim(key, i >= 2)
	}
	handlerstest.Expect(t, svc.BatchStatus("exec-503", ""), http.StatusNotFound, items.CodeNotFound, "")
	again := svc.BatchBeforeWrite("exec-503", handlerstest.BatchItems(keys...))
	for i := range keys {
		if a := again.ItemAt(i); a.Str("decision") != "proceed" || a.Num("attempt") != 1 {
			t.Fatalf("item %d after the refusal: %v", i, a.JSON)
		}
	}
}
