package pgstore_test

import (
	"context"
	"github.com/replaysafe/companion/internal/tcpproxy"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/pgstore"
	"github.com/replaysafe/companion/items/pgstore/pgtest"
)

// throughProxy opens a store whose connections go through a proxy to the test server, with the timeout given.
func throughProxy(t *testing.T, timeout time.Duration) (*pgstore.Store, *tcpproxy.Proxy) {
	t.Helper()
	raw, schema := pgtest.Schema(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	p := tcpproxy.Start(t, u.Host)
	u.Host = p.Addr
	s, err := pgstore.Open(context.Background(), u.String(), schema, pgstore.WithLogger(quiet), pgstore.WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, p
}

func body(key string) map[string]any {
	return map[string]any{"key": key, "payload": map[string]any{"invoice": key}, "dedupe": "key"}
}

// The HTTP answer while the server is down is 503 store_unavailable, within the store's timeout, never
// proceed, and /readyz says so; when the server is back the same requests are answered again (the pool's
// dead connections are replaced), and what was claimed before the outage is still claimed.
func TestHTTPOutageAnswers503AndRecovers(t *testing.T) {
	store, p := throughProxy(t, time.Second)
	s := handlerstest.NewService(t, store, handlerstest.ServiceConfig{})
	before := s.BeforeWrite(body("inv-1"))
	if before.Status != http.StatusOK || before.Str("decision") != "proceed" {
		t.Fatalf("before the outage: %d %s", before.Status, before.Body)
	}
	handlerstest.Expect(t, s.Get("", "/readyz"), http.StatusOK, "", "")

	p.SetDown(true)
	for _, key := range []string{"inv-2", "inv-1"} {
		began := time.Now()
		r := s.BeforeWrite(body(key))
		handlerstest.Expect(t, r, http.StatusServiceUnavailable, items.CodeUnavailable, "")
		if r.At("decision") != nil {
			t.Errorf("before-write %s during the outage carries a decision: %s", key, r.Body)
		}
		if took := time.Since(began); took > 3*time.Second {
			t.Errorf("before-write %s during the outage took %s, want about the store's timeout of 1s", key, took)
		}
	}
	handlerstest.Expect(t, s.AfterWrite(map[string]any{"key": "inv-1", "claim": before.Str("claim"), "outcome": "succeeded", "external_id": "x"}),
		http.StatusServiceUnavailable, items.CodeUnavailable, "")
	handlerstest.Expect(t, s.Get("", "/readyz"), http.StatusServiceUnavailable, items.CodeUnavailable, "")

	p.SetDown(false)
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

// A server that hangs (accepts, answers nothing) is answered 503 within the store's timeout, not a hung
// request, and nothing is claimed: after it thaws, the key proceeds.
func TestHTTPHungServerAnswers503InTime(t *testing.T) {
	store, p := throughProxy(t, time.Second)
	s := handlerstest.NewService(t, store, handlerstest.ServiceConfig{})
	handlerstest.Expect(t, s.Get("", "/readyz"), http.StatusOK, "", "")
	p.Freeze()
	began := time.Now()
	handlerstest.Expect(t, s.BeforeWrite(body("inv-1")), http.StatusServiceUnavailable, items.CodeUnavailable, "")
	if took := time.Since(began); took > 4*time.Second {
		t.Errorf("the before-write took %s against a hung server, want about the store's timeout of 1s", took)
	}
	p.Thaw()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := s.BeforeWrite(body("inv-1"))
		if r.Status == http.StatusOK {
			if r.Str("decision") != "proceed" {
				t.Fatalf("after the thaw: %s (the refused claim was left behind)", r.Body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d 10s after the thaw: %s", r.Status, r.Body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
