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
	handlerstest.ExerciseOutage(t, store, time.Second, func() { p.SetDown(true) }, func() { p.SetDown(false) })
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
