package mongostore_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/mongostore"
)

// TestHTTPRefusedBeforeWriteLeavesNoClaim (API.md additions, "A refused request leaves nothing behind"),
// through HTTP: a before-write, single or batch, whose k-th write the server applies but whose
// acknowledgement is lost is answered 503 store_unavailable, and the store takes back what it wrote: a new
// key does not exist, a prepared one is prepared again, and the same request then proceeds at attempt 1.
func TestHTTPRefusedBeforeWriteLeavesNoClaim(t *testing.T) {
	s, _ := openStore(t)
	svc := handlerstest.NewService(t, s, handlerstest.ServiceConfig{})
	body := func(key string) map[string]any { return handlerstest.BatchItem(key, nil) }

	svc.Prepare("one-prepared")
	for _, key := range []string{"one-new", "one-prepared"} {
		mongostore.FailAfterWrite(s, 1, errLost)
		r := svc.BeforeWrite(body(key))
		mongostore.FailAfterWrite(s, 0, nil)
		handlerstest.Expect(t, r, http.StatusServiceUnavailable, items.CodeUnavailable, "")
		svc.ExpectNoClaim(key, key == "one-prepared")
		if a := svc.BeforeWrite(body(key)); a.Str("decision") != "proceed" || a.Num("attempt") != 1 {
			t.Fatalf("%s after the refusal: %s", key, a.Body)
		}
	}

	// A batch of two new keys (one insert of many) and two prepared ones (one bulk write of updates): the
	// k-th write fails.
	for k := 1; k <= 2; k++ {
		keys := []string{fmt.Sprintf("k%d-new-1", k), fmt.Sprintf("k%d-new-2", k), fmt.Sprintf("k%d-prepared-1", k), fmt.Sprintf("k%d-prepared-2", k)}
		svc.Prepare(keys[2:]...)
		writes := mongostore.FailAfterWrite(s, k, errLost)
		r := svc.BatchBeforeWrite(fmt.Sprintf("exec-503-%d", k), handlerstest.BatchItems(keys...))
		n := writes()
		mongostore.FailAfterWrite(s, 0, nil)
		handlerstest.Expect(t, r, http.StatusServiceUnavailable, items.CodeUnavailable, "")
		if n < k {
			t.Fatalf("write %d: the batch made only %d writes", k, n)
		}
		for i, key := range keys {
			svc.ExpectNoClaim(key, i >= 2)
		}
		again := svc.BatchBeforeWrite(fmt.Sprintf("exec-503-%d", k), handlerstest.BatchItems(keys...))
		for i := range keys {
			if a := again.ItemAt(i); a.Str("decision") != "proceed" || a.Num("attempt") != 1 {
				t.Fatalf("write %d, item %d after the refusal: %v", k, i, a.JSON)
			}
		}
	}
}
