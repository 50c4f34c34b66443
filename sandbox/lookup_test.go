package sandbox_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/sandbox"
)

// TestLookupLag: a record created with a lookup lag shows in GET /records only once the lag has passed,
// while /effects counts it at once; PUT /control/mode changes the lag.
func TestLookupLag(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s := startReceiver(t, sandbox.Config{LookupLag: 60 * time.Second, Now: clock.Now})
	wantStatus(t, s.post(`{"reference":"QT-1"}`, nil), http.StatusCreated)
	wantTotal(t, s, 1)
	lookup := func() string { return string(s.send(http.MethodGet, "/records?reference=QT-1", "", nil).body) }
	clock.Advance(59 * time.Second)
	if got := lookup(); !strings.Contains(got, `"records":[]`) {
		t.Errorf("59 s after the write, with a 60 s lag, the lookup shows %s", got)
	}
	clock.Advance(time.Second)
	if got := lookup(); !strings.Contains(got, `"reference":"QT-1"`) {
		t.Errorf("60 s after the write the lookup shows %s", got)
	}
	if resp := s.control(http.MethodPut, "/control/mode", `{"lookup_lag_seconds":3600}`); !strings.Contains(string(resp.body), `"lookup_lag_seconds":3600`) {
		t.Errorf("PUT /control/mode answered %s", resp.body)
	}
	if got := lookup(); !strings.Contains(got, `"records":[]`) {
		t.Errorf("with the lag raised to an hour the lookup shows %s", got)
	}
	if resp := s.send(http.MethodPut, "/control/mode", `{"lookup_lag_seconds":-1}`, nil); resp.status != http.StatusBadRequest {
		t.Errorf("a negative lag: %d", resp.status)
	}
}

// TestLookup500: lookup_500 makes GET /records answer 500, from the header or the queue, and applies to
// lookups only.
func TestLookup500(t *testing.T) {
	t.Parallel()
	s := startReceiver(t, sandbox.Config{})
	wantStatus(t, s.send(http.MethodGet, "/records?reference=QT-1", "", fault("lookup_500")), http.StatusInternalServerError)
	s.control(http.MethodPost, "/control/faults", `{"fault":"lookup_500","count":2,"reference":"QT-1"}`)
	wantStatus(t, s.send(http.MethodGet, "/records?reference=QT-2", "", nil), http.StatusOK)
	wantStatus(t, s.send(http.MethodGet, "/records?reference=QT-1", "", nil), http.StatusInternalServerError)
	wantStatus(t, s.send(http.MethodGet, "/records?reference=QT-1", "", nil), http.StatusInternalServerError)
	wantStatus(t, s.send(http.MethodGet, "/records?reference=QT-1", "", nil), http.StatusOK)
	if resp := s.post(`{}`, fault("lookup_500")); resp.errorCode(t) != "fault_not_applicable" {
		t.Errorf("lookup_500 on a write: %d %s", resp.status, resp.body)
	}
}
