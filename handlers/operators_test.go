package handlers_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/sqlitestore"
)

// operatorService is the service with the operator surface, over a fresh SQLite ledger.
func operatorService(t *testing.T, ledger items.Config, configure func(*handlers.Config)) (*handlerstest.Service, *sqlitestore.Store) {
	t.Helper()
	store := openSQLite(t).(*sqlitestore.Store)
	svc := handlerstest.NewService(t, store, handlerstest.ServiceConfig{Ledger: ledger, Configure: func(c *handlers.Config) {
		c.Operators = store
		if configure != nil {
			configure(c)
		}
	}})
	return svc, store
}

func keysIn(r handlerstest.Response) []string {
	var out []string
	list, _ := r.At("items").([]any)
	for _, it := range list {
		out = append(out, it.(map[string]any)["key"].(string))
	}
	return out
}

func TestListItemsFiltersAndPages(t *testing.T) {
	t.Parallel()
	svc, _ := operatorService(t, items.Config{}, nil)
	for i := range 5 {
		c := svc.Claim(fmt.Sprintf("inv-%d", i), map[string]any{"batch_id": "exec-1:Send", "destination": "billing"})
		if i < 2 {
			svc.AfterWrite(map[string]any{"key": fmt.Sprintf("inv-%d", i), "claim": c.Str("claim"), "outcome": "unknown"})
		}
		svc.Clock.Advance(time.Minute)
	}
	svc.Claim("other", nil)

	get := func(query string) handlerstest.Response {
		t.Helper()
		r := svc.Get(handlerstest.OperatorAcme, "/v1/items"+query)
		handlerstest.Expect(t, r, http.StatusOK, "", "")
		return r
	}
	if got := fmt.Sprint(keysIn(get(""))); got != "[other inv-4 inv-3 inv-2 inv-1 inv-0]" {
		t.Errorf("list = %s, want newest change first", got)
	}
	if got := fmt.Sprint(keysIn(get("?needs_person=true&batch_id=" + url.QueryEscape("exec-1:Send")))); got != "[inv-1 inv-0]" {
		t.Errorf("needs_person in the batch = %s", got)
	}
	if got := fmt.Sprint(keysIn(get("?state=in_flight&destination=billing&older_than=60"))); got != "[inv-4 inv-3 inv-2]" {
		t.Errorf("in flight at billing, unchanged for a minute = %s", got)
	}
	r := get("?needs_person=true")
	first := r.At("items").([]any)[0].(map[string]any)
	if first["needs_person_cause"] != items.CauseNoDedupe || !strings.HasPrefix(first["idempotency_key"].(string), "ik_") {
		t.Errorf("listed item %v lacks its cause or idempotency key", first)
	}

	var all []string
	cursor, pages := "", 0
	for {
		r := get("?limit=2&cursor=" + url.QueryEscape(cursor))
		all = append(all, keysIn(r)...)
		pages++
		if cursor = r.Str("next_cursor"); cursor == "" || pages > 5 {
			break
		}
	}
	if fmt.Sprint(all) != "[other inv-4 inv-3 inv-2 inv-1 inv-0]" || pages != 3 {
		t.Errorf("pages of 2 gave %v in %d pages", all, pages)
	}
	if got := svc.Get(handlerstest.OperatorGlobex, "/v1/items"); len(keysIn(got)) != 0 {
		t.Errorf("another tenant lists %v", keysIn(got))
	}
}

func TestListItemsByExecution(t *testing.T) {
	t.Parallel()
	svc, _ := operatorService(t, items.Config{}, nil)
	svc.Claim("inv-1", map[string]any{"execution_id": "41", "batch_id": "exec-41:Send"})
	svc.Claim("inv-2", map[string]any{"execution_id": "42"})
	svc.Claim("inv-3", map[string]any{"execution_id": "41"})
	r := svc.Get(handlerstest.OperatorAcme, "/v1/items?execution_id=41")
	handlerstest.Expect(t, r, http.StatusOK, "", "")
	if got := fmt.Sprint(keysIn(r)); got != "[inv-3 inv-1]" {
		t.Errorf("execution 41 lists %s, want [inv-3 inv-1]", got)
	}
	if first := r.At("items").([]any)[1].(map[string]any); first["execution_id"] != "41" || first["batch_id"] != "exec-41:Send" {
		t.Errorf("listed item %v lacks its execution_id or batch_id", first)
	}
	if got := svc.Get(handlerstest.OperatorGlobex, "/v1/items?execution_id=41"); len(keysIn(got)) != 0 {
		t.Errorf("another tenant lists %v", keysIn(got))
	}
}

// A workflow token lists one execution's items of its own tenant (an error workflow's call), and nothing
// else: every other filter, or none, is the operator's (403, before any parameter is read).
func TestListItemsByExecutionWithAWorkflowToken(t *testing.T) {
	t.Parallel()
	svc, _ := operatorService(t, items.Config{}, nil)
	for i := range 3 {
		svc.Claim(fmt.Sprintf("inv-%d", i), map[string]any{"execution_id": "41", "destination": "billing"})
	}
	svc.Claim("inv-9", map[string]any{"execution_id": "42"})
	r := svc.Get(handlerstest.WorkflowAcme, "/v1/items?execution_id=41")
	handlerstest.Expect(t, r, http.StatusOK, "", "")
	if got := fmt.Sprint(keysIn(r)); got != "[inv-2 inv-1 inv-0]" {
		t.Errorf("execution 41 lists %s for a workflow token, want [inv-2 inv-1 inv-0]", got)
	}
	var paged []string
	cursor := ""
	for range 4 {
		r := svc.Get(handlerstest.WorkflowAcme, "/v1/items?execution_id=41&limit=2&cursor="+url.QueryEscape(cursor))
		handlerstest.Expect(t, r, http.StatusOK, "", "")
		paged = append(paged, keysIn(r)...)
		if cursor = r.Str("next_cursor"); cursor == "" {
			break
		}
	}
	if fmt.Sprint(paged) != "[inv-2 inv-1 inv-0]" {
		t.Errorf("pages of 2 for a workflow token = %v", paged)
	}
	if got := svc.Get(handlerstest.WorkflowGlobex, "/v1/items?execution_id=41"); got.Status != http.StatusOK || len(keysIn(got)) != 0 {
		t.Errorf("another tenant's workflow token lists %d %v", got.Status, keysIn(got))
	}
	for _, q := range []string{"", "?limit=5", "?execution_id=", "?execution_id=41&state=in_flight", "?execution_id=41&destination=billing",
		"?execution_id=41&batch_id=x", "?execution_id=41&needs_person=true", "?execution_id=41&reference=QT", "?execution_id=41&owner=U1",
		"?execution_id=41&older_than=0", "?execution_id=41&workflow=inv", "?execution_id=41&bogus=1", "?state=lost"} {
		r := svc.Get(handlerstest.WorkflowAcme, "/v1/items"+q)
		handlerstest.Expect(t, r, http.StatusForbidden, handlers.CodeForbidden, "")
		if !strings.Contains(r.Str("error.message"), "execution_id") {
			t.Errorf("%s: the refusal does not say what a workflow token may list: %s", q, r.Body)
		}
	}
	// The list a workflow token may read is checked like an operator's.
	handlerstest.Expect(t, svc.Get(handlerstest.WorkflowAcme, "/v1/items?execution_id=41&limit=0"), http.StatusBadRequest, items.CodeInvalid, "limit")
	handlerstest.Expect(t, svc.Get(handlerstest.WorkflowAcme, "/v1/items?execution_id=41&execution_id=42"), http.StatusBadRequest, items.CodeInvalid, "execution_id")
	handlerstest.Expect(t, svc.Get(handlerstest.WorkflowAcme, "/v1/items?execution_id=41&cursor=abc"), http.StatusBadRequest, items.CodeInvalid, "cursor")
}

func TestListItemsByReference(t *testing.T) {
	t.Parallel()
	svc, _ := operatorService(t, items.Config{}, nil)
	svc.Claim("inv-1", map[string]any{"reference": "QT-2026-0417"})
	svc.Claim("inv-2", map[string]any{"reference": "QT-2026-0418"})
	svc.Claim("inv-3", map[string]any{"reference": "QT-2026-0417"})
	r := svc.Get(handlerstest.OperatorAcme, "/v1/items?reference=QT-2026-0417")
	handlerstest.Expect(t, r, http.StatusOK, "", "")
	if got := fmt.Sprint(keysIn(r)); got != "[inv-3 inv-1]" {
		t.Errorf("reference QT-2026-0417 lists %s, want [inv-3 inv-1]", got)
	}
	if first := r.At("items").([]any)[0].(map[string]any); first["reference"] != "QT-2026-0417" {
		t.Errorf("listed item %v lacks its reference", first)
	}
	if got := svc.Get(handlerstest.OperatorGlobex, "/v1/items?reference=QT-2026-0417"); len(keysIn(got)) != 0 {
		t.Errorf("another tenant lists %v", keysIn(got))
	}
}

func TestListItemsRefusals(t *testing.T) {
	t.Parallel()
	svc, _ := operatorService(t, items.Config{}, nil)
	for _, c := range []struct {
		token, query string
		status       int
		code         items.Code
		field        string
	}{
		{"", "", http.StatusUnauthorized, handlers.CodeUnauthorized, ""},
		{handlerstest.WorkflowAcme, "", http.StatusForbidden, handlers.CodeForbidden, ""},
		{handlerstest.OperatorAcme, "?needs-person=true", http.StatusBadRequest, items.CodeInvalid, "needs-person"},
		{handlerstest.OperatorAcme, "?state=lost", http.StatusBadRequest, items.CodeInvalid, "state"},
		{handlerstest.OperatorAcme, "?needs_person=maybe", http.StatusBadRequest, items.CodeInvalid, "needs_person"},
		{handlerstest.OperatorAcme, "?limit=0", http.StatusBadRequest, items.CodeInvalid, "limit"},
		{handlerstest.OperatorAcme, "?limit=501", http.StatusBadRequest, items.CodeInvalid, "limit"},
		{handlerstest.OperatorAcme, "?older_than=1h", http.StatusBadRequest, items.CodeInvalid, "older_than"},
		{handlerstest.OperatorAcme, "?cursor=abc", http.StatusBadRequest, items.CodeInvalid, "cursor"},
		{handlerstest.OperatorAcme, "?state=unknown&state=failed", http.StatusBadRequest, items.CodeInvalid, "state"},
		{handlerstest.OperatorAcme, "?execution_id=1&execution_id=2", http.StatusBadRequest, items.CodeInvalid, "execution_id"},
		{handlerstest.OperatorAcme, "?execution=1", http.StatusBadRequest, items.CodeInvalid, "execution"},
		{handlerstest.OperatorAcme, "?reference=a&reference=b", http.StatusBadRequest, items.CodeInvalid, "reference"},
		{handlerstest.WorkflowAcme, "/../stats", http.StatusForbidden, handlers.CodeForbidden, ""},
	} {
		path := "/v1/items" + c.query
		if strings.HasPrefix(c.query, "/") {
			path = "/v1/stats"
		}
		handlerstest.Expect(t, svc.Get(c.token, path), c.status, c.code, c.field)
	}
}

// metricValues parses a Prometheus text answer into "name{labels}" → value.
func metricValues(t *testing.T, body []byte) map[string]float64 {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("metrics are not in Prometheus text format: %v\n%s", err, body)
	}
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.Metric {
			var labels []string
			for _, l := range m.Label {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			key := name
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Histogram != nil:
				out[key+"_count"] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return out
}

func TestStatsAndMetricsMatchTheLedger(t *testing.T) {
	t.Parallel()
	svc, store := operatorService(t, items.Config{Destinations: map[string]items.Destination{"billing": {Dedupe: items.DedupeKey}}}, nil)
	aw := func(body map[string]any) {
		t.Helper()
		if r := svc.AfterWrite(body); r.Status != http.StatusOK {
			t.Fatalf("after-write %v: %d %s", body, r.Status, r.Body)
		}
	}
	// A scripted day: one plain success, one unknown nobody can check, one recovered by a same-key
	// retry, one duplicate effect, one key reused with another payload, one resolved by hand, one in flight.
	c := svc.Claim("ok", nil)
	aw(map[string]any{"key": "ok", "claim": c.Str("claim"), "outcome": "succeeded", "external_id": "x-1"})
	c = svc.Claim("lost", nil)
	aw(map[string]any{"key": "lost", "claim": c.Str("claim"), "outcome": "unknown", "error": map[string]any{"class": "timeout"}})
	c = svc.Claim("recovered", map[string]any{"destination": "billing"})
	aw(map[string]any{"key": "recovered", "claim": c.Str("claim"), "outcome": "failed", "http_status": 503})
	c = svc.Claim("recovered", map[string]any{"destination": "billing"})
	aw(map[string]any{"key": "recovered", "claim": c.Str("claim"), "outcome": "succeeded", "external_id": "x-2"})
	c = svc.Claim("twice", map[string]any{"destination": "billing"})
	aw(map[string]any{"key": "twice", "claim": c.Str("claim"), "outcome": "succeeded", "external_id": "x-3"})
	aw(map[string]any{"key": "twice", "claim": c.Str("claim"), "outcome": "succeeded", "external_id": "x-4"})
	if r := svc.BeforeWrite(map[string]any{"key": "ok", "payload": map[string]any{"invoice": "other"}}); r.Str("decision") != "conflict" {
		t.Fatalf("reused key: %s", r.Body)
	}
	if r := svc.BeforeWrite(map[string]any{"key": "ok", "payload": map[string]any{"invoice": "ok", "amount": 120.5}}); r.Str("reason") != "succeeded" {
		t.Fatalf("repeat of a success: %s", r.Body)
	}
	c = svc.Claim("resolved", nil)
	aw(map[string]any{"key": "resolved", "claim": c.Str("claim"), "outcome": "unknown"})
	r := svc.Post(handlerstest.OperatorAcme, "/v1/items/resolved/resolve", map[string]any{"outcome": "not_committed",
		"evidence": "nothing in the destination's log between 18:00 and 18:05"})
	handlerstest.Expect(t, r, http.StatusOK, "", "")
	svc.Claim("flying", nil)
	svc.Clock.Advance(90 * time.Second)

	stats := svc.Get(handlerstest.OperatorAcme, "/v1/stats")
	handlerstest.Expect(t, stats, http.StatusOK, "", "")
	want := map[string]float64{
		"items": 6, "states.succeeded": 3, "states.unknown": 1, "states.failed": 1, "states.in_flight": 1, "states.prepared": 0,
		"needs_person": 2, "oldest_unresolved_age_seconds": 90, "retries": 1, "fingerprint_conflicts": 1,
		"same_key_recoveries": 1, "manual_resolutions": 1, "duplicate_effects": 1, "entered_unknown": 3,
		"destinations.billing.items": 2, "destinations.billing.retries": 1, "destinations.default.fingerprint_conflicts": 1,
		"destinations.default.needs_person": 1,
	}
	for path, v := range want {
		if got := stats.Num(path); got != v {
			t.Errorf("stats %s = %v, want %v", path, got, v)
		}
	}
	// The store says the same as the API.
	direct, err := store.Stats(context.Background(), "acme", svc.Clock.Now())
	if err != nil || direct.Items != 6 || direct.NeedsPerson != 2 {
		t.Errorf("store stats %+v (%v)", direct, err)
	}

	mr := svc.Get(handlerstest.OperatorAcme, "/metrics")
	handlerstest.Expect(t, mr, http.StatusOK, "", "")
	if ct := mr.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("metrics content type %q", ct)
	}
	m := metricValues(t, mr.Body)
	for name, v := range map[string]float64{
		"companion_items{state=succeeded,tenant=acme}": 3, "companion_items{state=unknown,tenant=acme}": 1, "companion_items{state=failed,tenant=acme}": 1,
		"companion_items{state=in_flight,tenant=acme}": 1, "companion_items{state=prepared,tenant=acme}": 0,
		"companion_needs_person{tenant=acme}": 2, "companion_oldest_unresolved_age_seconds{tenant=acme}": 90, "companion_retries_total{tenant=acme}": 1,
		"companion_fingerprint_conflicts_total{tenant=acme}": 1, "companion_same_key_recoveries_total{tenant=acme}": 1,
		"companion_manual_resolutions_total{tenant=acme}": 1, "companion_duplicate_effects_total{tenant=acme}": 1, "companion_items_removed_total{tenant=acme}": 0,
		"companion_decisions_total{decision=proceed,reason=new,tenant=acme}":                           6,
		"companion_decisions_total{decision=proceed,reason=retry_same_key,tenant=acme}":                1,
		"companion_decisions_total{decision=conflict,reason=fingerprint_mismatch,tenant=acme}":         1,
		"companion_decisions_total{decision=skip,reason=succeeded,tenant=acme}":                        1,
		"companion_http_request_duration_seconds{method=POST,route=/v1/before-write,status=200}_count": 9,
	} {
		if got, ok := m[name]; !ok || got != v {
			t.Errorf("metric %s = %v (present %v), want %v", name, got, ok, v)
		}
	}
	for _, name := range []string{"companion_items", "companion_needs_person", "companion_retries_total"} {
		if !strings.Contains(string(mr.Body), "# HELP "+name+" ") {
			t.Errorf("metric %s has no help text", name)
		}
	}

	// Another tenant's operator sees its own (empty) ledger; a workflow token sees nothing.
	otherBody := svc.Get(handlerstest.OperatorGlobex, "/metrics").Body
	other := metricValues(t, otherBody)
	if other["companion_items{state=succeeded,tenant=globex}"] != 0 || other["companion_needs_person{tenant=globex}"] != 0 ||
		strings.Contains(string(otherBody), `tenant="acme"`) {
		t.Errorf("globex's metrics show acme's series:\n%s", otherBody)
	}
	if _, ok := other["companion_needs_person{tenant=globex}"]; !ok {
		t.Errorf("globex's metrics lack its own series:\n%s", otherBody)
	}
	handlerstest.Expect(t, svc.Get(handlerstest.WorkflowAcme, "/metrics"), http.StatusForbidden, handlers.CodeForbidden, "")
	handlerstest.Expect(t, svc.Get("", "/metrics"), http.StatusUnauthorized, handlers.CodeUnauthorized, "")
}

// Open metrics (--metrics-open) show every tenant's series, each with its tenant label.
func TestOpenMetricsShowEveryTenant(t *testing.T) {
	t.Parallel()
	svc, _ := operatorService(t, items.Config{}, func(c *handlers.Config) { c.MetricsOpen = true })
	svc.Claim("a", nil)
	r := svc.Get("", "/metrics")
	handlerstest.Expect(t, r, http.StatusOK, "", "")
	m := metricValues(t, r.Body)
	if got := m["companion_items{state=in_flight,tenant=acme}"]; got != 1 {
		t.Errorf("open metrics: acme's in_flight %v, want 1", got)
	}
	if got, ok := m["companion_items{state=in_flight,tenant=globex}"]; !ok || got != 0 {
		t.Errorf("open metrics: globex's in_flight %v (present %v), want 0", got, ok)
	}
	if got := m["companion_decisions_total{decision=proceed,reason=new,tenant=acme}"]; got != 1 {
		t.Errorf("open metrics: acme's decisions %v, want 1", got)
	}
}

func TestBatchDecisionsAreCounted(t *testing.T) {
	t.Parallel()
	svc, _ := operatorService(t, items.Config{}, nil)
	c := svc.Claim("ok", map[string]any{"destination": "crm"})
	svc.AfterWrite(map[string]any{"key": "ok", "claim": c.Str("claim"), "outcome": "succeeded"})
	r := svc.Post(handlerstest.WorkflowAcme, "/v1/batches/before-write", map[string]any{"batch_id": "exec-9", "items": []any{
		map[string]any{"key": "b-1", "payload": map[string]any{"n": 1}},
		map[string]any{"key": "b-2", "payload": map[string]any{"n": 2}},
		map[string]any{"key": "ok", "payload": map[string]any{"n": 3}, "destination": "crm"},
		map[string]any{"key": "ok", "payload": map[string]any{"n": 4}, "destination": "crm"},
	}})
	handlerstest.Expect(t, r, http.StatusOK, "", "")
	if r.Num("counts.conflict") != 2 || r.Num("counts.proceed") != 2 {
		t.Fatalf("batch counts: %s", r.Body)
	}
	m := metricValues(t, svc.Get(handlerstest.OperatorAcme, "/metrics").Body)
	for name, want := range map[string]float64{
		"companion_decisions_total{decision=proceed,reason=new,tenant=acme}":                   3,
		"companion_decisions_total{decision=conflict,reason=fingerprint_mismatch,tenant=acme}": 2,
		"companion_fingerprint_conflicts_total{tenant=acme}":                                   2,
	} {
		if m[name] != want {
			t.Errorf("%s = %v, want %v", name, m[name], want)
		}
	}
	if got := svc.Get(handlerstest.OperatorAcme, "/v1/stats").Num("destinations.crm.fingerprint_conflicts"); got != 2 {
		t.Errorf("crm's fingerprint conflicts = %v, want 2", got)
	}
}

// An acknowledgement is a manual resolution, and the item it settles stops counting in the oldest
// unresolved age: the duplicate effect is the only item waiting here, so the age drops to 0.
func TestAcknowledgedCountsInStatsAndMetrics(t *testing.T) {
	t.Parallel()
	svc, _ := operatorService(t, items.Config{}, nil)
	c := svc.Claim("twice", nil)
	for _, id := range []string{"x-3", "x-4"} {
		if r := svc.AfterWrite(map[string]any{"key": "twice", "claim": c.Str("claim"), "outcome": "succeeded", "external_id": id}); r.Status != http.StatusOK {
			t.Fatalf("after-write: %d %s", r.Status, r.Body)
		}
	}
	svc.Clock.Advance(time.Minute)
	measures := func(when string, needsPerson, age, resolutions float64) {
		t.Helper()
		stats := svc.Get(handlerstest.OperatorAcme, "/v1/stats")
		m := metricValues(t, svc.Get(handlerstest.OperatorAcme, "/metrics").Body)
		for name, got := range map[string][2]float64{
			"needs_person":       {stats.Num("needs_person"), m["companion_needs_person{tenant=acme}"]},
			"oldest unresolved":  {stats.Num("oldest_unresolved_age_seconds"), m["companion_oldest_unresolved_age_seconds{tenant=acme}"]},
			"manual resolutions": {stats.Num("manual_resolutions"), m["companion_manual_resolutions_total{tenant=acme}"]},
		} {
			want := map[string]float64{"needs_person": needsPerson, "oldest unresolved": age, "manual resolutions": resolutions}[name]
			if got[0] != want || got[1] != want {
				t.Errorf("%s: %s = %v in stats, %v in metrics; want %v", when, name, got[0], got[1], want)
			}
		}
	}
	measures("before", 1, 60, 0)
	r := svc.Post(handlerstest.OperatorAcme, "/v1/items/twice/resolve", map[string]any{"outcome": "acknowledged",
		"evidence": "x-4 voided in billing by hand"})
	handlerstest.Expect(t, r, http.StatusOK, "", "")
	measures("after acknowledged", 0, 0, 1)
}

// TestItemShowsHowManyRepeatsItsHistoryDropped: a workflow that replays a late report in a loop (each
// answered history_only) leaves a bounded history, and GET /v1/items/{key} says how many it dropped.
func TestItemShowsHowManyRepeatsItsHistoryDropped(t *testing.T) {
	t.Parallel()
	svc, _ := operatorService(t, items.Config{}, nil)
	first := svc.Claim("inv-1", nil).Str("claim")
	svc.AfterWrite(map[string]any{"key": "inv-1", "claim": first, "outcome": "failed", "http_status": 429, "retry_after": 1})
	svc.Clock.Advance(2 * time.Second)
	second := svc.Claim("inv-1", nil).Str("claim")
	svc.AfterWrite(map[string]any{"key": "inv-1", "claim": second, "outcome": "succeeded", "external_id": "r-1"})
	for i := range 40 {
		svc.Clock.Advance(3 * time.Second)
		r := svc.AfterWrite(map[string]any{"key": "inv-1", "claim": first, "outcome": "failed", "http_status": 503,
			"error": map[string]any{"message": fmt.Sprintf("late #%d", i)}})
		if r.Status != http.StatusOK || r.Str("reason") != "history_only" || r.Str("state") != "succeeded" {
			t.Fatalf("late report #%d: %d %s", i, r.Status, r.Body)
		}
	}
	r := svc.Get(handlerstest.OperatorAcme, "/v1/items/inv-1")
	handlerstest.Expect(t, r, http.StatusOK, "", "")
	history, _ := r.At("history").([]any)
	// claimed, failed, claimed, succeeded, the first late report, 5 + 10 repeats of it; 39 - 15 dropped.
	if r.Num("history_dropped") != 24 || len(history) != 20 || r.Str("state") != "succeeded" {
		t.Fatalf("history_dropped %v, %d events, state %s:\n%s", r.Num("history_dropped"), len(history), r.Str("state"), r.Body)
	}
	svc.Claim("inv-2", nil)
	if r := svc.Get(handlerstest.OperatorAcme, "/v1/items/inv-2"); !bytes.Contains(r.Body, []byte(`"history_dropped":0`)) {
		t.Errorf("an item with its whole history does not say history_dropped 0:\n%s", r.Body)
	}
}

// TestLoopsOfReportsShowInStatsAndMetrics: two workflows replaying late reports in a loop, on two
// destinations, show in GET /v1/stats (history_dropped, history_dropped_items, in total and per
// destination) and in /metrics, as many as the items themselves say they dropped.
func TestLoopsOfReportsShowInStatsAndMetrics(t *testing.T) {
	t.Parallel()
	svc, _ := operatorService(t, items.Config{}, nil)
	loop := func(key, dest string, n int) {
		t.Helper()
		c := svc.Claim(key, map[string]any{"destination": dest}).Str("claim")
		svc.AfterWrite(map[string]any{"key": key, "claim": c, "outcome": "succeeded", "external_id": "r-" + key})
		for i := range n {
			svc.Clock.Advance(3 * time.Second)
			r := svc.AfterWrite(map[string]any{"key": key, "claim": c, "outcome": "failed", "http_status": 503,
				"error": map[string]any{"message": fmt.Sprintf("late #%d", i)}})
			if r.Status != http.StatusOK || r.Str("reason") != "history_only" {
				t.Fatalf("late report #%d on %s: %d %s", i, key, r.Status, r.Body)
			}
		}
	}
	loop("inv-1", "billing", 40) // the first late report and 15 repeats kept: 24 dropped
	loop("inv-2", "crm", 20)     // 4 dropped
	svc.Claim("inv-3", map[string]any{"destination": "crm"})
	dropped := 0.0
	for _, key := range []string{"inv-1", "inv-2", "inv-3"} {
		dropped += svc.Get(handlerstest.OperatorAcme, "/v1/items/"+key).Num("history_dropped")
	}
	if dropped != 28 {
		t.Fatalf("the items dropped %v repeats in all, want 28", dropped)
	}
	stats := svc.Get(handlerstest.OperatorAcme, "/v1/stats")
	handlerstest.Expect(t, stats, http.StatusOK, "", "")
	for path, want := range map[string]float64{
		"history_dropped": 28, "history_dropped_items": 2,
		"destinations.billing.history_dropped": 24, "destinations.billing.history_dropped_items": 1,
		"destinations.crm.history_dropped": 4, "destinations.crm.history_dropped_items": 1,
	} {
		if got := stats.Num(path); got != want {
			t.Errorf("stats %s = %v, want %v", path, got, want)
		}
	}
	mr := svc.Get(handlerstest.OperatorAcme, "/metrics")
	m := metricValues(t, mr.Body)
	for name, want := range map[string]float64{"companion_history_repeats_dropped_total{tenant=acme}": 28, "companion_history_dropped_items_total{tenant=acme}": 2} {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("metric %s = %v (present %v), want %v", name, got, ok, want)
		}
		if family, _, _ := strings.Cut(name, "{"); !strings.Contains(string(mr.Body), "# TYPE "+family+" counter") {
			t.Errorf("metric %s is not a counter", name)
		}
	}
	if other := metricValues(t, svc.Get(handlerstest.OperatorGlobex, "/metrics").Body); other["companion_history_repeats_dropped_total{tenant=globex}"] != 0 {
		t.Errorf("globex's metrics show acme's dropped repeats: %v", other["companion_history_repeats_dropped_total{tenant=globex}"])
	}
}

func TestStatsSeries(t *testing.T) {
	handlerstest.ExerciseSeries(t, func(t *testing.T) items.Store { return openSQLite(t) })
}

// A service over a store that does not keep the measures over time (a real SQLite store, seen without
// them) says so in the series, naming the store.
func TestStatsSeriesOnAStoreWithoutThemSaysSo(t *testing.T) {
	handlerstest.ExpectNoSeries(t, handlerstest.WithoutSeries(openSQLite(t).(*sqlitestore.Store)), "sqlite-without-series")
}
