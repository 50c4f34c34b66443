package handlers_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
)

// /metrics serves, beside the ledger's totals, the measures the alert rules and the dashboard of deploy/
// read: whether the store is ready, and per destination the items waiting for a person, the oldest
// unresolved age, the items that entered unknown, and the destination's escalate_after. When the store
// cannot be read, it still answers 200 with the process's measures and companion_store_ready 0 (the
// ledger's left out), so that an alert sees a store down rather than a scrape failing like a process down.
func TestMetricsServeTheStoresReadinessAndEachDestination(t *testing.T) {
	t.Parallel()
	svc, store := operatorService(t, items.Config{Destinations: map[string]items.Destination{"billing": {EscalateAfter: time.Hour}}}, nil)
	for _, key := range []string{"inv-1", "inv-2"} {
		c := svc.Claim(key, map[string]any{"destination": "billing", "dedupe": "none"})
		svc.AfterWrite(map[string]any{"key": key, "claim": c.Str("claim"), "outcome": "unknown"})
	}
	svc.Claim("crm-1", map[string]any{"destination": "crm"})
	svc.Clock.Advance(90 * time.Second)
	m := metricValues(t, svc.Get(handlerstest.OperatorAcme, "/metrics").Body)
	for name, want := range map[string]float64{
		"companion_store_ready": 1,
		"companion_destination_needs_person{destination=billing,tenant=acme}":                  2,
		"companion_destination_oldest_unresolved_age_seconds{destination=billing,tenant=acme}": 90,
		"companion_destination_entered_unknown_total{destination=billing,tenant=acme}":         2,
		"companion_destination_escalate_after_seconds{destination=billing,tenant=acme}":        3600,
		"companion_destination_needs_person{destination=crm,tenant=acme}":                      0,
		"companion_destination_escalate_after_seconds{destination=crm,tenant=acme}":            0,
	} {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}

	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	r := svc.Get(handlerstest.OperatorAcme, "/metrics")
	handlerstest.Expect(t, r, http.StatusOK, "", "")
	m = metricValues(t, r.Body)
	if got, ok := m["companion_store_ready"]; !ok || got != 0 {
		t.Errorf("with the store closed, companion_store_ready = %v (present %v), want 0", got, ok)
	}
	if _, ok := m["companion_http_request_duration_seconds{method=GET,route=/metrics,status=200}_count"]; !ok {
		t.Errorf("with the store closed, the process's measures are not served:\n%s", r.Body)
	}
	for name := range m {
		if strings.HasPrefix(name, "companion_items") || strings.HasPrefix(name, "companion_destination_") || strings.HasPrefix(name, "companion_needs_person") {
			t.Errorf("with the store closed, %s is served", name)
		}
	}
	handlerstest.Expect(t, svc.Get("", "/readyz"), http.StatusServiceUnavailable, items.CodeUnavailable, "")
}
