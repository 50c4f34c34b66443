package handlerstest

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/items"
)

// Exercise runs the HTTP contract tests against stores from open. open must return a new, empty store
// for each call; the tests may close it (the store-unavailable test does).
func Exercise(t *testing.T, open func(t *testing.T) items.Store, opts Options) {
	newService := func(t *testing.T, cfg ServiceConfig) *Service {
		return NewService(t, open(t), cfg)
	}

	t.Run("ProceedThenAfterWriteThenReplaySkipsWithStoredResult", func(t *testing.T) {
		t.Parallel()
		s := newService(t, ServiceConfig{})
		body := map[string]any{
			"key": "invoice-742:reminder:2", "payload": map[string]any{"invoice": "742", "recipient": "c-19", "amount": 120.5},
			"destination": "billing", "dedupe": "key", "reference": "QT-2026-0417", "execution_id": "1234",
		}
		first := s.BeforeWrite(body)
		Expect(t, first, http.StatusOK, "", "")
		if first.Str("decision") != "proceed" || first.Str("reason") != "new" || first.Str("state") != "in_flight" || first.Num("attempt") != 1 {
			t.Fatalf("first before-write: %s", first.Body)
		}
		if !regexp.MustCompile(`^ik_[0-9a-f]{32}$`).MatchString(first.Str("idempotency_key")) {
			t.Fatalf("idempotency_key %q is not ik_ and 32 hex characters", first.Str("idempotency_key"))
		}
		if !strings.HasPrefix(first.Str("claim"), "c_") || first.Str("lease_expires_at") != "2026-11-29T18:05:00Z" ||
			first.Str("reference") != "QT-2026-0417" || first.At("retry_after") != nil {
			t.Fatalf("first before-write fields: %s", first.Body)
		}

		after := s.AfterWrite(map[string]any{"key": "invoice-742:reminder:2", "claim": first.Str("claim"), "outcome": "succeeded",
			"external_id": "inv_9", "receiver_request_id": "req_81", "result": map[string]any{"reminder_id": "r-55"}})
		Expect(t, after, http.StatusOK, "", "")
		if after.Str("state") != "succeeded" || after.Str("reason") != "recorded" || after.Num("attempt") != 1 || after.Str("key") != "invoice-742:reminder:2" {
			t.Fatalf("after-write: %s", after.Body)
		}

		replay := s.BeforeWrite(body)
		if replay.Str("decision") != "skip" || replay.Str("reason") != "succeeded" || replay.Str("state") != "succeeded" ||
			replay.Str("external_id") != "inv_9" || replay.Str("result.reminder_id") != "r-55" {
			t.Fatalf("replay: %s", replay.Body)
		}
		if replay.Str("idempotency_key") != first.Str("idempotency_key") || replay.At("claim") != nil || replay.At("lease_expires_at") != nil {
			t.Fatalf("replay carries claim fields or another idempotency key: %s", replay.Body)
		}

		again := s.AfterWrite(map[string]any{"key": "invoice-742:reminder:2", "claim": first.Str("claim"), "outcome": "succeeded",
			"external_id": "inv_9", "receiver_request_id": "req_81", "result": map[string]any{"reminder_id": "r-55"}})
		if again.Str("reason") != "unchanged" || again.Str("state") != "succeeded" {
			t.Fatalf("identical repeat of after-write: %s", again.Body)
		}

		got := s.Get(WorkflowAcme, "/v1/items/invoice-742:reminder:2")
		Expect(t, got, http.StatusOK, "", "")
		if got.Str("state") != "succeeded" || got.Str("external_id") != "inv_9" || got.Str("idempotency_key") != first.Str("idempotency_key") ||
			got.Str("destination") != "billing" || got.Str("reference") != "QT-2026-0417" {
			t.Fatalf("GET item: %s", got.Body)
		}
		h, _ := got.At("history").([]any)
		if len(h) < 2 {
			t.Fatalf("GET item history has %d events, want the claim and the report: %s", len(h), got.Body)
		}
		if claimed, _ := h[0].(map[string]any); claimed["kind"] != items.EventClaimed || claimed["from"] != nil || claimed["to"] != "in_flight" {
			t.Fatalf("the first event of a new item is not a claim from nothing: %v", h[0])
		}
		if strings.Contains(string(got.Body), "c-19") {
			t.Fatalf("the item shows the payload: %s", got.Body)
		}
		if op := s.Get(OperatorAcme, "/v1/items/invoice-742:reminder:2"); string(op.Body) != string(got.Body) {
			t.Fatalf("operator and workflow see different bodies:\n%s\n%s", op.Body, got.Body)
		}
	})

	t.Run("TimeoutMakesUnknownAndReplayWaitsForOwner", func(t *testing.T) {
		t.Parallel()
		s := newService(t, ServiceConfig{})
		claim := s.Claim("crm:contact-7:create:1", nil)
		r := s.AfterWrite(map[string]any{"key": "crm:contact-7:create:1", "claim": claim.Str("claim"), "outcome": "failed",
			"error": map[string]any{"class": "timeout", "message": "ETIMEDOUT after 30000 ms", "stack": "whatever the tool adds"}})
		Expect(t, r, http.StatusOK, "", "")
		if r.Str("state") != "unknown" || r.Str("reason") != "recorded" {
			t.Fatalf("timeout report: %s", r.Body)
		}
		replay := s.BeforeWrite(map[string]any{"key": "crm:contact-7:create:1", "payload": map[string]any{"invoice": "crm:contact-7:create:1", "amount": 120.5}})
		if replay.Str("decision") != "skip" || replay.Str("reason") != "awaiting_owner" || replay.Str("state") != "unknown" {
			t.Fatalf("replay of an unknown item without dedupe: %s", replay.Body)
		}
		if it := s.Item("acme", "crm:contact-7:create:1"); !it.NeedsPerson || it.Attempt != 1 {
			t.Fatalf("item after replay: needs_person %v attempt %d", it.NeedsPerson, it.Attempt)
		}
	})

	t.Run("UnknownWithKeyDedupeRetriesWithSameKey", func(t *testing.T) {
		t.Parallel()
		s := newService(t, ServiceConfig{})
		claim := s.Claim("k-dedupe", map[string]any{"dedupe": "key"})
		s.AfterWrite(map[string]any{"key": "k-dedupe", "claim": claim.Str("claim"), "outcome": "failed", "http_status": 502})
		retry := s.BeforeWrite(map[string]any{"key": "k-dedupe", "payload": map[string]any{"invoice": "k-dedupe", "amount": 120.5}})
		if retry.Str("decision") != "proceed" || retry.Str("reason") != "retry_same_key" || retry.Num("attempt") != 2 ||
			retry.Str("idempotency_key") != claim.Str("idempotency_key") || retry.Str("claim") == claim.Str("claim") {
			t.Fatalf("retry after 502 with key dedupe: %s", retry.Body)
		}
	})

	t.Run("UnknownWithLookupDedupeReconciles", func(t *testing.T) {
		t.Parallel()
		s := newService(t, ServiceConfig{})
		claim := s.Claim("k-lookup", map[string]any{"dedupe": "lookup", "reference": "QT-1"})
		s.AfterWrite(map[string]any{"key": "k-lookup", "claim": claim.Str("claim"), "outcome": "unknown"})
		ask := s.BeforeWrite(map[string]any{"key": "k-lookup", "payload": map[string]any{"invoice": "k-lookup", "amount": 120.5}})
		if ask.Str("decision") != "reconcile" || ask.Str("reason") != "lookup_required" || ask.Str("reference") != "QT-1" {
			t.Fatalf("before-write on unknown lookup item: %s", ask.Body)
		}
		short := s.Post(WorkflowAcme, "/v1/reconcile", map[string]any{"key": "k-lookup", "finding": "absent", "evidence": "  no  "})
		Expect(t, short, http.StatusBadRequest, items.CodeInvalid, "evidence")
		absent := s.Post(WorkflowAcme, "/v1/reconcile", map[string]any{"key": "k-lookup", "finding": "absent", "evidence": "searched QT-1 in billing: no record"})
		Expect(t, absent, http.StatusOK, "", "")
		if absent.Str("state") != "failed" || absent.Str("reason") != "recorded" {
			t.Fatalf("reconcile absent: %s", absent.Body)
		}
		repeat := s.Post(WorkflowAcme, "/v1/reconcile", map[string]any{"key": "k-lookup", "finding": "absent", "evidence": "searched QT-1 in billing: no record"})
		if repeat.Status != http.StatusOK || repeat.Str("reason") != "unchanged" {
			t.Fatalf("identical repeat of reconcile: %d %s", repeat.Status, repeat.Body)
		}
		again := s.BeforeWrite(map[string]any{"key": "k-lookup", "payload": map[string]any{"invoice": "k-lookup", "amount": 120.5}})
		if again.Str("decision") != "proceed" || again.Str("reason") != "retry" || again.Num("attempt") != 2 {
			t.Fatalf("before-write after absent: %s", again.Body)
		}
		notUnknown := s.Post(WorkflowAcme, "/v1/reconcile", map[string]any{"key": "k-lookup", "finding": "found", "external_id": "x", "evidence": "found it in billing"})
		Expect(t, notUnknown, http.StatusConflict, items.CodeConflict, "")
	})

	t.Run("ExpiredLeaseIsUnknownAndNeverClaimedBlindly", func(t *testing.T) {
		t.Parallel()
		s := newService(t, ServiceConfig{})
		s.Claim("lease-none", map[string]any{"lease_seconds": 30})
		s.Claim("lease-key", map[string]any{"lease_seconds": 30, "dedupe": "key"})
		live := s.BeforeWrite(map[string]any{"key": "lease-none", "payload": map[string]any{"invoice": "lease-none", "amount": 120.5}})
		if live.Str("decision") != "skip" || live.Str("reason") != "in_progress" || live.Num("retry_after") != 30 {
			t.Fatalf("before-write while the lease lives: %s", live.Body)
		}
		s.Clock.Advance(30 * time.Second)

		got := s.Get(WorkflowAcme, "/v1/items/lease-none")
		if got.Str("state") != "unknown" || got.Str("cause") != items.CauseLeaseExpired {
			t.Fatalf("GET after the lease ended: %s", got.Body)
		}
		none := s.BeforeWrite(map[string]any{"key": "lease-none", "payload": map[string]any{"invoice": "lease-none", "amount": 120.5}})
		if none.Str("decision") != "skip" || none.Str("reason") != "awaiting_owner" || none.Str("state") != "unknown" {
			t.Fatalf("before-write after the lease ended, dedupe none: %s", none.Body)
		}
		key := s.BeforeWrite(map[string]any{"key": "lease-key", "payload": map[string]any{"invoice": "lease-key", "amount": 120.5}})
		if key.Str("decision") != "proceed" || key.Str("reason") != "retry_same_key" || key.Num("attempt") != 2 {
			t.Fatalf("before-write after the lease ended, dedupe key: %s", key.Body)
		}
		if it := s.Item("acme", "lease-key"); it.History[1].Kind != items.EventLeaseExpired {
			t.Fatalf("the expiry is not in the history before the new claim: %+v", it.History)
		}
	})

	t.Run("LateSuccessFromOlderClaimWins", func(t *testing.T) {
		t.Parallel()
		s := newService(t, ServiceConfig{})
		first := s.Claim("late", map[string]any{"dedupe": "key"})
		s.AfterWrite(map[string]any{"key": "late", "claim": first.Str("claim"), "outcome": "failed", "error": map[string]any{"class": "connection_reset"}})
		second := s.Claim("late", nil)
		if second.Str("reason") != "retry_same_key" {
			t.Fatalf("second claim: %s", second.Body)
		}
		s.AfterWrite(map[string]any{"key": "late", "claim": second.Str("claim"), "outcome": "unknown"})
		if st := s.Item("acme", "late").State; st != items.StateUnknown {
			t.Fatalf("state after two unknown attempts: %s", st)
		}
		late := s.AfterWrite(map[string]any{"key": "late", "claim": first.Str("claim"), "outcome": "succeeded", "external_id": "rec_1"})
		Expect(t, late, http.StatusOK, "", "")
		if late.Str("state") != "succeeded" || late.Str("reason") != "late_success" || late.Num("attempt") != 1 {
			t.Fatalf("late success from attempt 1: %s", late.Body)
		}
		stale := s.AfterWrite(map[string]any{"key": "late", "claim": second.Str("claim"), "outcome": "failed", "http_status": 400})
		if stale.Str("state") != "succeeded" || stale.Str("reason") != "history_only" {
			t.Fatalf("a failure after success: %s", stale.Body)
		}
	})

	t.Run("UnknownBecomesNotSentOnlyOnEvidence", func(t *testing.T) {
		t.Parallel()
		s := newService(t, ServiceConfig{})
		c := s.Claim("grow", nil)
		s.AfterWrite(map[string]any{"key": "grow", "claim": c.Str("claim"), "outcome": "failed", "error": map[string]any{"class": "tls"}})
		for _, report := range []map[string]any{
			{"outcome": "failed", "http_status": 500},
			{"outcome": "failed", "http_status": 503, "retry_after": 5},
			{"outcome": "unknown"},
			{"outcome": "failed", "error": map[string]any{"class": "other"}},
		} {
			report["key"], report["claim"] = "grow", c.Str("claim")
			r := s.AfterWrite(report)
			if r.Str("state") != "unknown" {
				t.Fatalf("report %v moved unknown to %s: %s", report, r.Str("state"), r.Body)
			}
		}
		forbidden := s.Post(WorkflowAcme, "/v1/items/grow/resolve", map[string]any{"outcome": "not_committed", "evidence": "checked the CRM: nothing there"})
		Expect(t, forbidden, http.StatusForbidden, handlers.CodeForbidden, "")
		resolved := s.Post(OperatorAcme, "/v1/items/grow/resolve", map[string]any{"outcome": "not_committed", "evidence": "checked the CRM: nothing there"})
		Expect(t, resolved, http.StatusOK, "", "")
		if resolved.Str("state") != "failed" || resolved.Str("resolution.by") != "op-acme" || resolved.Str("reason") != "recorded" ||
			resolved.Str("resolution.evidence") != "checked the CRM: nothing there" {
			t.Fatalf("resolve not_committed: %s", resolved.Body)
		}
		repeat := s.Post(OperatorAcme, "/v1/items/grow/resolve", map[string]any{"outcome": "not_committed", "evidence": "checked the CRM: nothing there"})
		if repeat.Status != http.StatusOK || repeat.Str("reason") != "unchanged" {
			t.Fatalf("identical repeat of resolve: %d %s", repeat.Status, repeat.Body)
		}
		retry := s.BeforeWrite(map[string]any{"key": "grow", "payload": map[string]any{"invoice": "grow", "amount": 120.5}})
		if retry.Str("decision") != "proceed" || retry.Str("reason") != "retry" {
			t.Fatalf("before-write after not_committed: %s", retry.Body)
		}
		busy := s.Post(OperatorAcme, "/v1/items/grow/resolve", map[string]any{"outcome": "succeeded", "evidence": "saw it in the CRM, id 77"})
		Expect(t, busy, http.StatusConflict, items.CodeConflict, "")
	})

	t.Run("AcknowledgedClearsADuplicateEffectOnly", func(t *testing.T) {
		t.Parallel()
		s := newService(t, ServiceConfig{})
		c := s.Claim("dup", nil)
		s.AfterWrite(map[string]any{"key": "dup", "claim": c.Str("claim"), "outcome": "succeeded", "external_id": "x-1", "result": map[string]any{"id": 1}})
		plain := s.Post(OperatorAcme, "/v1/items/dup/resolve", map[string]any{"outcome": "acknowledged", "evidence": "seen it, nothing to do"})
		Expect(t, plain, http.StatusConflict, items.CodeConflict, "")
		dup := s.AfterWrite(map[string]any{"key": "dup", "claim": c.Str("claim"), "outcome": "succeeded", "external_id": "x-2"})
		if dup.Str("reason") != "duplicate_effect" {
			t.Fatalf("second success with another external id: %s", dup.Body)
		}
		withID := s.Post(OperatorAcme, "/v1/items/dup/resolve", map[string]any{"outcome": "acknowledged", "evidence": "seen it, nothing to do", "external_id": "x-2"})
		Expect(t, withID, http.StatusBadRequest, items.CodeInvalid, "external_id")
		ack := s.Post(OperatorAcme, "/v1/items/dup/resolve", map[string]any{"outcome": "acknowledged", "evidence": "two invoices; refunded x-2 by hand"})
		Expect(t, ack, http.StatusOK, "", "")
		if ack.Str("reason") != "recorded" || ack.Str("state") != "succeeded" || ack.Num("attempt") != 1 || ack.Str("external_id") != "x-1" ||
			ack.At("needs_person") != false || ack.At("duplicate_effect") != true || ack.Str("resolution.outcome") != "acknowledged" ||
			ack.Str("resolution.by") != "op-acme" || ack.Str("resolution.evidence") != "two invoices; refunded x-2 by hand" || ack.Num("result.id") != 1 {
			t.Fatalf("resolve acknowledged: %s", ack.Body)
		}
		repeat := s.Post(OperatorAcme, "/v1/items/dup/resolve", map[string]any{"outcome": "acknowledged", "evidence": "two invoices; refunded x-2 by hand"})
		if repeat.Status != http.StatusOK || repeat.Str("reason") != "unchanged" {
			t.Fatalf("identical repeat of acknowledged: %d %s", repeat.Status, repeat.Body)
		}
		replay := s.BeforeWrite(map[string]any{"key": "dup", "payload": map[string]any{"invoice": "dup", "amount": 120.5}})
		if replay.Str("decision") != "skip" || replay.Str("reason") != "succeeded" || replay.Str("external_id") != "x-1" {
			t.Fatalf("before-write after acknowledged: %s", replay.Body)
		}
	})

	t.Run("KeyFromFourParts", func(t *testing.T) {
		t.Parallel()
		s := newService(t, ServiceConfig{})
		r := s.BeforeWrite(map[string]any{"workflow": "invoices", "object": "inv-742", "action": "remind", "sequence": 2, "payload": map[string]any{}})
		if r.Status != http.StatusOK || r.Str("key") != "invoices:inv-742:remind:2" || r.Str("decision") != "proceed" {
			t.Fatalf("before-write with parts: %d %s", r.Status, r.Body)
		}
		str := s.BeforeWrite(map[string]any{"workflow": "invoices", "object": "inv-742", "action": "remind", "sequence": "2", "payload": map[string]any{}})
		if str.Str("key") != "invoices:inv-742:remind:2" || str.Str("reason") != "in_progress" {
			t.Fatalf("a string sequence names the same key: %s", str.Body)
		}
		got := s.Get(WorkflowAcme, "/v1/items/invoices%3Ainv-742%3Aremind%3A2")
		if got.Status != http.StatusOK || got.Str("workflow") != "invoices" || got.Str("sequence") != "2" {
			t.Fatalf("GET with a percent-encoded key: %d %s", got.Status, got.Body)
		}
		plus := s.Claim("a+b=c~d@e", nil)
		if g := s.Get(WorkflowAcme, "/v1/items/a%2Bb%3Dc~d%40e"); g.Status != http.StatusOK || g.Str("claim") != plus.Str("claim") {
			t.Fatalf("GET a key with + = ~ @, percent-encoded: %d %s", g.Status, g.Body)
		}
	})

	t.Run("TenantsAreSeparate", func(t *testing.T) {
		t.Parallel()
		s := newService(t, ServiceConfig{})
		acme := s.Claim("shared-key", nil)
		Expect(t, s.Get(WorkflowGlobex, "/v1/items/shared-key"), http.StatusNotFound, items.CodeNotFound, "")
		Expect(t, s.Post(WorkflowGlobex, "/v1/after-write", map[string]any{"key": "shared-key", "claim": acme.Str("claim"), "outcome": "succeeded"}),
			http.StatusNotFound, items.CodeNotFound, "")
		globex := s.Post(WorkflowGlobex, "/v1/before-write", map[string]any{"key": "shared-key", "payload": map[string]any{"other": true}})
		if globex.Str("decision") != "proceed" || globex.Str("reason") != "new" || globex.Str("idempotency_key") == acme.Str("idempotency_key") {
			t.Fatalf("globex's own item with the same key: %s", globex.Body)
		}
		if it := s.Item("acme", "shared-key"); it.Attempt != 1 || it.Claim != acme.Str("claim") {
			t.Fatalf("acme's item changed: %+v", it)
		}
	})

	t.Run("AcceptsJSONContentTypes", func(t *testing.T) {
		t.Parallel()
		s := newService(t, ServiceConfig{})
		for i, ct := range []string{"application/json", "application/json; charset=utf-8", "application/JSON;charset=UTF-8", "application/vnd.api+json"} {
			r := s.Do(Request{Method: http.MethodPost, Path: "/v1/before-write", Token: WorkflowAcme, ContentType: ct,
				Body: fmt.Sprintf(`{"key": "ct-%d", "payload": {"a": 1}}`, i)})
			if r.Status != http.StatusOK {
				t.Fatalf("Content-Type %q: %d %s", ct, r.Status, r.Body)
			}
		}
	})

	t.Run("NullMeansAbsentAndErrorObjectsAreLenient", func(t *testing.T) {
		t.Parallel()
		s := newService(t, ServiceConfig{})
		r := s.Do(Request{Method: http.MethodPost, Path: "/v1/before-write", Token: WorkflowAcme,
			Body: `{"key":"nulls","payload":{"n":1},"dedupe":null,"lease_seconds":null,"reference":null,"batch_index":null,"workflow":null}`})
		if r.Status != http.StatusOK || r.Str("decision") != "proceed" {
			t.Fatalf("nulls: %d %s", r.Status, r.Body)
		}
		a := s.Do(Request{Method: http.MethodPost, Path: "/v1/after-write", Token: WorkflowAcme, Body: fmt.Sprintf(
			`{"key":"nulls","claim":%q,"outcome":"failed","external_id":null,"http_status":429,"retry_after":7,`+
				`"error":{"class":"http","code":429,"message":"Too Many Requests","name":"NodeApiError","context":{"x":[1]}}}`, r.Str("claim"))})
		if a.Status != http.StatusOK || a.Str("state") != "failed" {
			t.Fatalf("after-write with a whole error object: %d %s", a.Status, a.Body)
		}
		later := s.BeforeWrite(map[string]any{"key": "nulls", "payload": map[string]any{"n": 1}})
		if later.Str("decision") != "skip" || later.Str("reason") != "retry_later" || later.Num("retry_after") != 7 {
			t.Fatalf("before-write during the destination's Retry-After: %s", later.Body)
		}
	})

	t.Run("FingerprintKeepsNumbersAsSent", func(t *testing.T) {
		t.Parallel()
		s := newService(t, ServiceConfig{})
		raw := func(payload string) Response {
			return s.Do(Request{Method: http.MethodPost, Path: "/v1/before-write", Token: WorkflowAcme,
				Body: `{"key":"fp","payload":` + payload + `}`})
		}
		if r := raw(`{"amount": 1, "to": "c-19"}`); r.Str("decision") != "proceed" {
			t.Fatalf("first: %s", r.Body)
		}
		if r := raw(`{ "to":"c-19",  "amount":1 }`); r.Str("reason") != "in_progress" {
			t.Fatalf("same payload, other order and spacing: %s", r.Body)
		}
		if r := raw(`{"amount": 1.0, "to": "c-19"}`); r.Str("decision") != "conflict" || r.Str("reason") != "fingerprint_mismatch" || r.Str("state") != "in_flight" {
			t.Fatalf("1.0 is not 1: %s", r.Body)
		}
	})

	t.Run("RoutesMethodsAndHealth", func(t *testing.T) {
		t.Parallel()
		s := newService(t, ServiceConfig{})
		Expect(t, s.Get("", "/healthz"), http.StatusOK, "", "")
		Expect(t, s.Get("", "/readyz"), http.StatusOK, "", "")
		Expect(t, s.Get(WorkflowAcme, "/v1/nothing-here"), http.StatusNotFound, items.CodeNotFound, "")
		Expect(t, s.Get(WorkflowAcme, "/v1/before-write/"), http.StatusNotFound, items.CodeNotFound, "")
		r := s.Get(WorkflowAcme, "/v1/before-write")
		Expect(t, r, http.StatusMethodNotAllowed, handlers.CodeMethodNotAllowed, "")
		if r.Header.Get("Allow") != "POST" {
			t.Fatalf("Allow header %q, want POST", r.Header.Get("Allow"))
		}
		Expect(t, s.Do(Request{Method: http.MethodDelete, Path: "/v1/items/x", Token: OperatorAcme}), http.StatusMethodNotAllowed, handlers.CodeMethodNotAllowed, "")
	})

	t.Run("OpenModeIsTenantDefaultOperatorLocal", func(t *testing.T) {
		t.Parallel()
		s := newService(t, ServiceConfig{Open: true})
		c := s.Claim("open-1", nil)
		if it := s.Item("default", "open-1"); it == nil || it.Claim != c.Str("claim") {
			t.Fatalf("open mode did not write tenant default")
		}
		s.Post("", "/v1/after-write", map[string]any{"key": "open-1", "claim": c.Str("claim"), "outcome": "unknown"})
		r := s.Post("", "/v1/items/open-1/resolve", map[string]any{"outcome": "succeeded", "evidence": "seen in the destination", "external_id": 4711})
		if r.Status != http.StatusOK || r.Str("resolution.by") != "local" || r.Str("external_id") != "4711" {
			t.Fatalf("resolve in open mode: %d %s", r.Status, r.Body)
		}
	})

	t.Run("BadInputIsRefusedAndChangesNothing", func(t *testing.T) {
		t.Parallel()
		badInput(t, newService(t, ServiceConfig{}))
	})

	t.Run("StoreUnavailableNeverProceeds", func(t *testing.T) {
		t.Parallel()
		s := newService(t, ServiceConfig{})
		c := s.Claim("before-close", nil)
		if err := s.Store.Close(); err != nil {
			t.Fatalf("close store: %v", err)
		}
		for _, key := range []string{"after-close", "before-close"} {
			r := s.BeforeWrite(map[string]any{"key": key, "payload": map[string]any{"invoice": key, "amount": 120.5}})
			Expect(t, r, http.StatusServiceUnavailable, items.CodeUnavailable, "")
			if strings.Contains(strings.ToLower(string(r.Body)), "sql") || strings.Contains(strings.ToLower(string(r.Body)), "closed") {
				t.Fatalf("503 shows internals: %s", r.Body)
			}
		}
		Expect(t, s.AfterWrite(map[string]any{"key": "before-close", "claim": c.Str("claim"), "outcome": "succeeded"}),
			http.StatusServiceUnavailable, items.CodeUnavailable, "")
		Expect(t, s.Get("", "/readyz"), http.StatusServiceUnavailable, items.CodeUnavailable, "")
		Expect(t, s.Get("", "/healthz"), http.StatusOK, "", "")
	})

	t.Run("ConcurrentBeforeWritesProceedOnce", func(t *testing.T) {
		if opts.SkipConcurrency != "" {
			t.Skip(opts.SkipConcurrency)
		}
		t.Parallel()
		raceRounds(t, newService(t, ServiceConfig{}), 50, 200)
	})
}

// raceRounds sends callers simultaneous before-writes for one fresh key, rounds times, and fails unless
// exactly one proceeds each round and every other caller is told skip/in_progress.
func raceRounds(t *testing.T, s *Service, callers, rounds int) {
	body := func(key string) map[string]any {
		return map[string]any{"key": key, "payload": map[string]any{"invoice": key}, "lease_seconds": 300}
	}
	for round := range rounds {
		key := fmt.Sprintf("race-%d", round)
		answers := make([]Response, callers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				<-start
				answers[i] = s.BeforeWrite(body(key))
			})
		}
		close(start)
		wg.Wait()
		proceeds := 0
		for _, a := range answers {
			switch {
			case a.Status != http.StatusOK:
				t.Fatalf("round %d: %d %s", round, a.Status, a.Body)
			case a.Str("decision") == "proceed":
				proceeds++
			case a.Str("decision") != "skip" || a.Str("reason") != "in_progress":
				t.Fatalf("round %d: a loser got %s/%s", round, a.Str("decision"), a.Str("reason"))
			}
		}
		if proceeds != 1 {
			t.Fatalf("round %d: %d callers got proceed, want exactly 1", round, proceeds)
		}
	}
}

// RaceRounds is raceRounds for a store's own tests (for example against a real MongoDB).
func RaceRounds(t *testing.T, store items.Store, callers, rounds int) {
	raceRounds(t, NewService(t, store, ServiceConfig{}), callers, rounds)
}
