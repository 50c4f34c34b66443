package handlerstest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/items"
)

// Destinations the row tests configure (items.Config.Destinations).
var rowDestinations = map[string]items.Destination{
	// one attempt only: row 5 against row 6, row 6 against row 7, the extra attempts of absent/not_committed
	"once": {MaxAttempts: 1},
	// the receiver keeps idempotency keys for a minute: row 10's retention
	"short-keys": {Dedupe: items.DedupeKey, KeyRetentionSeconds: 60, Retention: time.Hour},
	// a destination whose configured dedupe applies when the request names none
	"keyed":  {Dedupe: items.DedupeKey},
	"lookup": {Dedupe: items.DedupeLookup},
	// unresolved for ten minutes: the sweeper's unresolved_too_long, which acknowledged settles
	"slow": {EscalateAfter: 10 * time.Minute},
}

// rows is a Service with helpers for the row tests: every request is tenant acme's.
type rows struct {
	*Service
	t *testing.T
}

func newRows(t *testing.T, open func(t *testing.T) items.Store) *rows {
	s := NewService(t, open(t), ServiceConfig{Ledger: items.Config{Destinations: rowDestinations}})
	return &rows{Service: s, t: t}
}

// payload is the default payload of key (the one Claim sends).
func payload(key string) map[string]any { return map[string]any{"invoice": key, "amount": 120.5} }

// bw asks before a write for key with its default payload and the extra fields.
func (r *rows) bw(key string, extra map[string]any) Response {
	r.t.Helper()
	body := map[string]any{"key": key, "payload": payload(key)}
	for k, v := range extra {
		body[k] = v
	}
	a := r.BeforeWrite(body)
	if a.Status != http.StatusOK {
		r.t.Fatalf("before-write %s: %d %s", key, a.Status, a.Body)
	}
	return a
}

// report sends an after-write for key under claim with the given fields and fails unless it is a 200.
func (r *rows) report(key, claim string, fields map[string]any) Response {
	r.t.Helper()
	body := map[string]any{"key": key, "claim": claim}
	for k, v := range fields {
		body[k] = v
	}
	a := r.AfterWrite(body)
	if a.Status != http.StatusOK {
		r.t.Fatalf("after-write %s %v: %d %s", key, fields, a.Status, a.Body)
	}
	return a
}

// unknown claims key (with extra) and reports a timeout: the item is unknown at attempt 1. It returns the claim.
func (r *rows) unknown(key string, extra map[string]any) string {
	r.t.Helper()
	c := r.Claim(key, extra).Str("claim")
	r.report(key, c, map[string]any{"outcome": "failed", "error": map[string]any{"class": "timeout"}})
	return c
}

// item reads the stored item and fails when there is none.
func (r *rows) item(key string) *items.Item {
	r.t.Helper()
	it := r.Item("acme", key)
	if it == nil {
		r.t.Fatalf("%s is not stored", key)
	}
	return it
}

// same fails unless key's stored item is still at version: the request wrote nothing.
func (r *rows) same(key string, version int64, what string) {
	r.t.Helper()
	if it := r.item(key); it.Version != version {
		r.t.Fatalf("%s: %s wrote to the item (version %d, was %d): %+v", key, what, it.Version, version, it.History[len(it.History)-1])
	}
}

// resolve sends an operator's resolution of key.
func (r *rows) resolve(key string, body map[string]any) Response {
	r.t.Helper()
	return r.Post(OperatorAcme, "/v1/items/"+key+"/resolve", body)
}

// reconcile sends the workflow's finding for key.
func (r *rows) reconcile(key string, body map[string]any) Response {
	r.t.Helper()
	body["key"] = key
	return r.Post(WorkflowAcme, "/v1/reconcile", body)
}

// dr is an answer's "decision/reason".
func dr(a Response) string { return a.Str("decision") + "/" + a.Str("reason") }

// ExerciseRows proves the decision tables of API.md row by row, through HTTP, on stores from open: for
// each row the request that matches it (and, where two rows could match, the first), the decision,
// reason and status, and the stored effect (state, attempt, needs_person, history). The names say the
// table and the row: BeforeWrite/Row02…, AfterWrite/Classify…, Reconcile…, Resolve…, Additions….
func ExerciseRows(t *testing.T, open func(t *testing.T) items.Store, opts Options) {
	t.Run("BeforeWrite", func(t *testing.T) { beforeWriteRows(t, open) })
	t.Run("Concurrency", func(t *testing.T) { concurrentRows(t, open, opts) })
	t.Run("AfterWrite", func(t *testing.T) { afterWriteRows(t, open) })
	t.Run("Reconcile", func(t *testing.T) { reconcileRows(t, open) })
	t.Run("Resolve", func(t *testing.T) { resolveRows(t, open) })
	t.Run("Batches", func(t *testing.T) { batchRows(t, open); batchAfterWriteRows(t, open) })
}

func beforeWriteRows(t *testing.T, open func(t *testing.T) items.Store) {
	t.Run("Row01NewAndPreparedProceedAtAttempt1", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		a := r.bw("r1-new", nil)
		if dr(a) != "proceed/new" || a.Str("state") != "in_flight" || a.Num("attempt") != 1 {
			t.Fatalf("new key: %s", a.Body)
		}
		if it := r.item("r1-new"); it.State != items.StateInFlight || it.Attempt != 1 || len(it.History) != 1 || it.History[0].Kind != items.EventClaimed {
			t.Fatalf("stored: %s attempt %d, %d events", it.State, it.Attempt, len(it.History))
		} else if it.LeaseExpiresAt == nil || it.LeaseExpiresAt.UTC().Format(time.RFC3339) != a.Str("lease_expires_at") || it.Claim != a.Str("claim") {
			// API.md additions: the lease_expires_at a caller receives is the one stored with its claim
			t.Fatalf("stored lease %v and claim %s, answered %s and %s", it.LeaseExpiresAt, it.Claim, a.Str("lease_expires_at"), a.Str("claim"))
		}
		// prepared, then a before-write with another payload: row 1 comes before row 2 (nothing was dispatched)
		p := r.Post(WorkflowAcme, "/v1/batches/prepare", map[string]any{"batch_id": "prep", "items": []any{map[string]any{"key": "r1-prep", "payload": map[string]any{"x": 1}}}})
		Expect(t, p, http.StatusOK, "", "")
		a = r.bw("r1-prep", nil)
		if dr(a) != "proceed/new" || a.Num("attempt") != 1 || a.Str("state") != "in_flight" {
			t.Fatalf("prepared item, changed payload: %s", a.Body)
		}
		it := r.item("r1-prep")
		if want, _ := r.Ledger.Fingerprint([]byte(`{"amount":120.5,"invoice":"r1-prep"}`)); it.Fingerprint != want || it.Attempt != 1 {
			t.Fatalf("the claim of a prepared item keeps fingerprint %s (want the claim's %s), attempt %d", it.Fingerprint, want, it.Attempt)
		}
	})

	// Row 2 comes before every row but 1: a changed payload after a possible dispatch is a conflict
	// whatever the state, and changes nothing (but an expired lease, recorded).
	t.Run("Row02ConflictComesBeforeRows3To11", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		setups := map[string]func(key string){
			"succeeded": func(k string) {
				c := r.Claim(k, nil).Str("claim")
				r.report(k, c, map[string]any{"outcome": "succeeded", "external_id": "x-1", "result": map[string]any{"id": 1}})
			},
			"in_flight": func(k string) { r.Claim(k, nil) },
			"failed_permanent": func(k string) {
				r.report(k, r.Claim(k, nil).Str("claim"), map[string]any{"outcome": "failed", "http_status": 404})
			},
			"failed_exhausted": func(k string) {
				r.report(k, r.Claim(k, map[string]any{"destination": "once"}).Str("claim"), map[string]any{"outcome": "failed", "http_status": 429})
			},
			"failed_retry_wait": func(k string) {
				r.report(k, r.Claim(k, nil).Str("claim"), map[string]any{"outcome": "failed", "http_status": 429, "retry_after": 600})
			},
			"failed_retry_due": func(k string) {
				r.report(k, r.Claim(k, nil).Str("claim"), map[string]any{"outcome": "failed", "http_status": 429, "retry_after": 0})
			},
			"unknown_lookup": func(k string) { r.unknown(k, map[string]any{"dedupe": "lookup"}) },
			"unknown_key":    func(k string) { r.unknown(k, map[string]any{"dedupe": "key"}) },
			"unknown_none":   func(k string) { r.unknown(k, nil) },
		}
		for name, setup := range setups {
			key := "r2-" + strings.ReplaceAll(name, "_", "-")
			setup(key)
			before := r.item(key)
			a := r.BeforeWrite(map[string]any{"key": key, "payload": map[string]any{"invoice": key, "amount": 999}, "dedupe": "key"})
			if a.Status != http.StatusOK || dr(a) != "conflict/fingerprint_mismatch" || a.Str("state") != string(before.State) ||
				a.Num("attempt") != float64(before.Attempt) || a.At("claim") != nil || a.At("external_id") != nil || a.At("result") != nil || a.At("retry_after") != nil {
				t.Fatalf("%s with a changed payload: %d %s", name, a.Status, a.Body)
			}
			r.same(key, before.Version, "a conflict")
		}
		// In flight past its lease: the expiry is recorded (the only change a conflict makes), nothing else.
		r.Claim("r2-expired", map[string]any{"lease_seconds": 5, "dedupe": "key"})
		r.Clock.Advance(5 * time.Second)
		a := r.bw("r2-expired", map[string]any{"payload": map[string]any{"other": true}})
		if dr(a) != "conflict/fingerprint_mismatch" || a.Str("state") != "unknown" {
			t.Fatalf("expired lease, changed payload: %s", a.Body)
		}
		it := r.item("r2-expired")
		if it.State != items.StateUnknown || it.Attempt != 1 || len(it.History) != 2 || it.History[1].Kind != items.EventLeaseExpired || it.Cause != items.CauseLeaseExpired {
			t.Fatalf("stored after the conflict: %s attempt %d, history %+v", it.State, it.Attempt, it.History)
		}
	})

	// Row 2 needs a possible dispatch: after a failure whose class proves nothing was sent, a changed
	// payload falls through to rows 7 and 8, and the retry's fingerprint replaces the old one.
	t.Run("Row02NeedsAPossibleDispatchRow08TakesTheNewPayload", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		first := r.Claim("r8", nil)
		r.report("r8", first.Str("claim"), map[string]any{"outcome": "failed", "error": map[string]any{"class": "dns"}})
		changed := map[string]any{"payload": map[string]any{"invoice": "r8", "amount": 121}}
		if wait := r.item("r8").RetryAt.Sub(r.Clock.Now()); wait > 0 {
			a := r.bw("r8", changed)
			if dr(a) != "skip/retry_later" || a.Num("retry_after") < 1 {
				t.Fatalf("dns failure, changed payload, before the retry time: %s", a.Body)
			}
			r.Clock.Advance(wait)
		}
		a := r.bw("r8", changed)
		if dr(a) != "proceed/retry" || a.Num("attempt") != 2 || a.Str("idempotency_key") != first.Str("idempotency_key") || a.Str("claim") == first.Str("claim") {
			t.Fatalf("retry with a changed payload: %s", a.Body)
		}
		it := r.item("r8")
		want, _ := r.Ledger.Fingerprint([]byte(`{"amount":121,"invoice":"r8"}`))
		old, _ := r.Ledger.Fingerprint([]byte(`{"amount":120.5,"invoice":"r8"}`))
		var claimed []string
		for _, e := range it.History {
			if e.Kind == items.EventClaimed {
				claimed = append(claimed, e.Fingerprint)
			}
		}
		if it.Fingerprint != want || fmt.Sprint(claimed) != fmt.Sprint([]string{old, want}) {
			t.Fatalf("fingerprint %s, claims' fingerprints %v; want %s replacing %s, both in the history", it.Fingerprint, claimed, want, old)
		}
		// The new payload is now the item's: the old one is the changed one.
		if a := r.bw("r8", nil); dr(a) != "conflict/fingerprint_mismatch" {
			t.Fatalf("the old payload after the retry: %s", a.Body)
		}
	})

	t.Run("Row03SucceededSkipsWithTheStoredResult", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		c := r.Claim("r3", nil).Str("claim")
		r.report("r3", c, map[string]any{"outcome": "succeeded", "external_id": "x-3", "result": map[string]any{"n": 3}})
		v := r.item("r3").Version
		a := r.bw("r3", nil)
		if dr(a) != "skip/succeeded" || a.Str("state") != "succeeded" || a.Str("external_id") != "x-3" || a.Num("result.n") != 3 ||
			a.At("retry_after") != nil || a.At("claim") != nil || a.Num("attempt") != 1 {
			t.Fatalf("succeeded: %s", a.Body)
		}
		r.same("r3", v, "skip/succeeded")
	})

	t.Run("Row04InFlightSkipsUntilTheLeaseEnds", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		r.Claim("r4", map[string]any{"lease_seconds": 30})
		v := r.item("r4").Version
		r.Clock.Advance(10*time.Second + 500*time.Millisecond)
		a := r.bw("r4", nil)
		if dr(a) != "skip/in_progress" || a.Str("state") != "in_flight" || a.Num("retry_after") != 20 || a.At("claim") != nil {
			t.Fatalf("in flight: %s", a.Body)
		}
		r.same("r4", v, "skip/in_progress")
	})

	t.Run("Row05PermanentFailureComesBeforeAttemptsExhausted", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		for _, dest := range []string{"default", "once"} {
			key := "r5-" + dest
			c := r.Claim(key, map[string]any{"destination": dest}).Str("claim")
			if rep := r.report(key, c, map[string]any{"outcome": "failed", "http_status": 422}); rep.Str("state") != "failed" {
				t.Fatalf("422: %s", rep.Body)
			}
			it := r.item(key)
			if it.Retryable || it.NeedsPerson {
				t.Fatalf("%s: a 422 is retryable %v, needs a person %v", dest, it.Retryable, it.NeedsPerson)
			}
			a := r.bw(key, nil)
			if dr(a) != "skip/failed_permanent" || a.Str("state") != "failed" || a.At("retry_after") != nil || a.At("needs_person") != nil {
				t.Fatalf("%s: permanent failure: %s", dest, a.Body)
			}
			r.same(key, it.Version, "skip/failed_permanent")
		}
	})

	t.Run("Row06AttemptsExhaustedComesBeforeRetryLater", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		c := r.Claim("r6", map[string]any{"destination": "once"}).Str("claim")
		r.report("r6", c, map[string]any{"outcome": "failed", "http_status": 429, "retry_after": 600})
		a := r.bw("r6", nil)
		if dr(a) != "skip/attempts_exhausted" || a.Str("state") != "failed" || a.At("retry_after") != nil || a.At("needs_person") != true {
			t.Fatalf("no attempts left, retry time not reached: %s", a.Body)
		}
		if it := r.item("r6"); !it.NeedsPerson || it.NeedsPersonCause != items.CauseAttemptsExhausted || it.Attempt != 1 {
			t.Fatalf("stored: needs_person %v (%s), attempt %d", it.NeedsPerson, it.NeedsPersonCause, it.Attempt)
		}
		// The budget of the default destination: three attempts, each refused locally (retryable at once).
		for n := 1; n <= 3; n++ {
			a := r.bw("r6-budget", nil)
			if a.Str("decision") != "proceed" || a.Num("attempt") != float64(n) {
				t.Fatalf("attempt %d: %s", n, a.Body)
			}
			r.report("r6-budget", a.Str("claim"), map[string]any{"outcome": "failed", "error": map[string]any{"class": "validation"}})
		}
		if a := r.bw("r6-budget", nil); dr(a) != "skip/attempts_exhausted" || a.Num("attempt") != 3 {
			t.Fatalf("after three attempts: %s", a.Body)
		}
		if it := r.item("r6-budget"); !it.NeedsPerson || it.Attempt != 3 || it.State != items.StateFailed {
			t.Fatalf("stored after three attempts: %s attempt %d needs_person %v", it.State, it.Attempt, it.NeedsPerson)
		}
	})

	t.Run("Row07RetryLaterThenRow08Retry", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		first := r.Claim("r7", nil)
		r.report("r7", first.Str("claim"), map[string]any{"outcome": "failed", "http_status": 503, "retry_after": 30})
		v := r.item("r7").Version
		r.Clock.Advance(10 * time.Second)
		a := r.bw("r7", nil)
		if dr(a) != "skip/retry_later" || a.Num("retry_after") != 20 || a.Str("state") != "failed" || a.At("needs_person") != nil {
			t.Fatalf("before the retry time: %s", a.Body)
		}
		r.same("r7", v, "skip/retry_later")
		r.Clock.Advance(20 * time.Second)
		a = r.bw("r7", nil)
		if dr(a) != "proceed/retry" || a.Num("attempt") != 2 || a.Str("state") != "in_flight" ||
			a.Str("idempotency_key") != first.Str("idempotency_key") || a.Str("claim") == first.Str("claim") {
			t.Fatalf("at the retry time: %s", a.Body)
		}
		if it := r.item("r7"); it.Attempt != 2 || it.Claim != a.Str("claim") || len(it.Attempts) != 2 || it.RetryAt != nil {
			t.Fatalf("stored retry: attempt %d, %d attempts, retry_at %v", it.Attempt, len(it.Attempts), it.RetryAt)
		}
	})

	// Row 9 comes before rows 10 and 11, and uses the mode recorded for the attempt, not the request's.
	t.Run("Row09LookupRequiredUsesTheRecordedMode", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		r.unknown("r9", map[string]any{"dedupe": "lookup", "reference": "QT-9", "destination": "once"})
		v := r.item("r9").Version
		a := r.bw("r9", map[string]any{"dedupe": "key"})
		if dr(a) != "reconcile/lookup_required" || a.Str("state") != "unknown" || a.Str("reference") != "QT-9" || a.At("claim") != nil || a.At("needs_person") != nil {
			t.Fatalf("unknown, recorded dedupe lookup, no attempts left, asked with dedupe key: %s", a.Body)
		}
		r.same("r9", v, "reconcile/lookup_required")
		// The destination's configured mode applies when the request names none.
		r.unknown("r9-dest", map[string]any{"destination": "lookup"})
		if a := r.bw("r9-dest", nil); dr(a) != "reconcile/lookup_required" {
			t.Fatalf("destination with dedupe lookup: %s", a.Body)
		}
		// After a failed lookup, row 9 no longer matches: row 11.
		Expect(t, r.reconcile("r9", map[string]any{"finding": "lookup_failed", "evidence": "the search API answered 500"}), http.StatusOK, "", "")
		if a := r.bw("r9", nil); dr(a) != "skip/awaiting_owner" || a.At("needs_person") != true {
			t.Fatalf("after a failed lookup: %s", a.Body)
		}
	})

	t.Run("Row10RetrySameKeyOnlyWithinTheRecordedModeAttemptsAndRetention", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		// The recorded mode decides, not the request's: none recorded, key asked.
		r.unknown("r10-none", nil)
		if a := r.bw("r10-none", map[string]any{"dedupe": "key"}); dr(a) != "skip/awaiting_owner" || a.At("needs_person") != true {
			t.Fatalf("recorded dedupe none, asked with key: %s", a.Body)
		}
		// The destination's configured key dedupe applies when the request names none.
		first := r.Claim("r10-dest", map[string]any{"destination": "keyed"})
		r.report("r10-dest", first.Str("claim"), map[string]any{"outcome": "failed", "http_status": 504})
		a := r.bw("r10-dest", nil)
		if dr(a) != "proceed/retry_same_key" || a.Num("attempt") != 2 || a.Str("idempotency_key") != first.Str("idempotency_key") || a.Str("state") != "in_flight" {
			t.Fatalf("destination with dedupe key: %s", a.Body)
		}
		// Attempts: the third unknown attempt leaves none.
		r.report("r10-dest", a.Str("claim"), map[string]any{"outcome": "unknown"})
		a = r.bw("r10-dest", nil)
		if dr(a) != "proceed/retry_same_key" || a.Num("attempt") != 3 {
			t.Fatalf("third attempt: %s", a.Body)
		}
		r.report("r10-dest", a.Str("claim"), map[string]any{"outcome": "unknown"})
		if a := r.bw("r10-dest", nil); dr(a) != "skip/awaiting_owner" || a.At("needs_person") != true {
			t.Fatalf("no attempts left: %s", a.Body)
		}
		if it := r.item("r10-dest"); it.Attempt != 3 || !it.NeedsPerson || it.NeedsPersonCause != items.CauseAwaitingOwner {
			t.Fatalf("stored: attempt %d, needs_person %v (%s)", it.Attempt, it.NeedsPerson, it.NeedsPersonCause)
		}
		// Retention counts from the first dispatch under the key, not the latest.
		r.unknown("r10-ret", map[string]any{"destination": "short-keys"})
		r.Clock.Advance(59 * time.Second)
		a = r.bw("r10-ret", nil)
		if dr(a) != "proceed/retry_same_key" {
			t.Fatalf("59 s after the first dispatch, retention 60 s: %s", a.Body)
		}
		r.report("r10-ret", a.Str("claim"), map[string]any{"outcome": "failed", "error": map[string]any{"class": "connection_reset"}})
		r.Clock.Advance(time.Second)
		if a := r.bw("r10-ret", nil); dr(a) != "skip/awaiting_owner" {
			t.Fatalf("60 s after the first dispatch (1 s after the second): %s", a.Body)
		}
	})

	// Nothing turns unknown into "not sent" by itself: an expired lease is unknown, and neither time nor
	// repeated before-writes make it proceed without a same-key retry or a lookup.
	t.Run("Row11LeaseExpiryIsUnknownAndStaysSo", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		r.Claim("r11", map[string]any{"lease_seconds": 5})
		r.Claim("r11-lookup", map[string]any{"lease_seconds": 5, "dedupe": "lookup"})
		r.Clock.Advance(5 * time.Second)
		a := r.bw("r11", nil)
		if dr(a) != "skip/awaiting_owner" || a.Str("state") != "unknown" || a.At("needs_person") != true {
			t.Fatalf("expired lease, dedupe none: %s", a.Body)
		}
		it := r.item("r11")
		if it.State != items.StateUnknown || it.Cause != items.CauseLeaseExpired || !it.NeedsPerson || it.History[1].Kind != items.EventLeaseExpired {
			t.Fatalf("stored: %s cause %s needs_person %v", it.State, it.Cause, it.NeedsPerson)
		}
		if a := r.bw("r11-lookup", nil); dr(a) != "reconcile/lookup_required" || a.Str("state") != "unknown" {
			t.Fatalf("expired lease, dedupe lookup: %s", a.Body)
		}
		v := r.item("r11").Version
		r.Clock.Advance(72 * time.Hour)
		for range 3 {
			if a := r.bw("r11", nil); dr(a) != "skip/awaiting_owner" {
				t.Fatalf("three days later: %s", a.Body)
			}
		}
		if g := r.Get(WorkflowAcme, "/v1/items/r11"); g.Str("state") != "unknown" || g.Num("attempt") != 1 {
			t.Fatalf("GET three days later: %s", g.Body)
		}
		r.same("r11", v, "waiting")
		// nor does the sweeper: it records expiries and asks for a person, nothing else
		r.Claim("r11-swept", map[string]any{"lease_seconds": 5, "dedupe": "key"})
		r.Clock.Advance(5 * time.Second)
		if changed, err := r.Ledger.ExpireLease(context.Background(), "acme", "r11-swept"); err != nil || !changed {
			t.Fatalf("the sweeper's expiry: %v, %v", changed, err)
		}
		r.Clock.Advance(72 * time.Hour)
		if _, err := r.Ledger.MarkNeedsPerson(context.Background(), "acme", "r11-swept"); err != nil {
			t.Fatal(err)
		}
		if it := r.item("r11-swept"); it.State != items.StateUnknown || it.Attempt != 1 || !it.NeedsPerson || it.NeedsPersonCause != items.CauseAwaitingOwner {
			t.Fatalf("swept three days later: %s attempt %d needs_person %v (%s)", it.State, it.Attempt, it.NeedsPerson, it.NeedsPersonCause)
		}
		if a := r.bw("r11-swept", nil); dr(a) != "skip/awaiting_owner" {
			t.Fatalf("past the key retention: %s", a.Body)
		}
	})
}

func afterWriteRows(t *testing.T, open func(t *testing.T) items.Store) {
	// The classification table, row by row, each report the first of a fresh in-flight item.
	t.Run("ClassifyEachRow", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		type want struct {
			state     items.State
			retryable bool
			// retryAt is the delay of retry_at from now: exact when min == max, else the backoff's range
			min, max time.Duration
		}
		failed := func(f map[string]any) map[string]any { f["outcome"] = "failed"; return f }
		class := func(c string) map[string]any { return failed(map[string]any{"error": map[string]any{"class": c}}) }
		status := func(s int) map[string]any { return failed(map[string]any{"http_status": s}) }
		backoff := want{items.StateFailed, true, 800 * time.Millisecond, 1200 * time.Millisecond}
		unknown := want{state: items.StateUnknown}
		permanent := want{state: items.StateFailed}
		cases := []struct {
			name   string
			report map[string]any
			want   want
		}{
			{"succeeded", map[string]any{"outcome": "succeeded", "external_id": "x"}, want{state: items.StateSucceeded}},
			{"429 retry_after", failed(map[string]any{"http_status": 429, "retry_after": 30}), want{items.StateFailed, true, 30 * time.Second, 30 * time.Second}},
			{"429", status(429), backoff},
			{"503 retry_after", failed(map[string]any{"http_status": 503, "retry_after": 45}), want{items.StateFailed, true, 45 * time.Second, 45 * time.Second}},
			{"503 retry_after 0", failed(map[string]any{"http_status": 503, "retry_after": 0}), want{items.StateFailed, true, 0, 0}},
			{"400", status(400), permanent},
			{"401", status(401), permanent},
			{"404", status(404), permanent},
			{"410", status(410), permanent},
			{"422", status(422), permanent},
			{"408", status(408), unknown},
			{"409", status(409), unknown},
			{"425", status(425), unknown},
			{"500", status(500), unknown},
			{"502", status(502), unknown},
			{"503 without retry_after", status(503), unknown},
			{"504", status(504), unknown},
			{"validation", class("validation"), want{items.StateFailed, true, 0, 0}},
			{"dns", class("dns"), backoff},
			{"connection_refused", class("connection_refused"), backoff},
			{"tls", class("tls"), unknown},
			{"timeout", class("timeout"), unknown},
			{"connection_reset", class("connection_reset"), unknown},
			{"other", class("other"), unknown},
			{"rejected", class("rejected"), permanent},
			{"outcome unknown", map[string]any{"outcome": "unknown"}, unknown},
			// http_status decides over error.class
			{"404 with class timeout", failed(map[string]any{"http_status": 404, "error": map[string]any{"class": "timeout"}}), permanent},
			{"502 with class validation", failed(map[string]any{"http_status": 502, "error": map[string]any{"class": "validation"}}), unknown},
			{"429 with class http", failed(map[string]any{"http_status": 429, "error": map[string]any{"class": "http"}}), backoff},
			{"502 with class rejected", failed(map[string]any{"http_status": 502, "error": map[string]any{"class": "rejected"}}), unknown},
		}
		for i, tc := range cases {
			key := fmt.Sprintf("cls-%d", i)
			c := r.Claim(key, nil).Str("claim")
			rep := r.report(key, c, tc.report)
			if rep.Str("state") != string(tc.want.state) || rep.Str("reason") != "recorded" || rep.Num("attempt") != 1 || rep.Str("key") != key {
				t.Errorf("%s: %s, want %s/recorded", tc.name, rep.Body, tc.want.state)
				continue
			}
			it := r.item(key)
			if it.State != tc.want.state || it.Retryable != tc.want.retryable {
				t.Errorf("%s: stored %s retryable %v, want %s retryable %v", tc.name, it.State, it.Retryable, tc.want.state, tc.want.retryable)
				continue
			}
			if tc.want.retryable {
				if it.RetryAt == nil {
					t.Errorf("%s: no retry_at", tc.name)
					continue
				}
				if d := it.RetryAt.Sub(r.Clock.Now()); d < tc.want.min || d > tc.want.max {
					t.Errorf("%s: retry in %s, want %s-%s", tc.name, d, tc.want.min, tc.want.max)
				}
			}
		}
	})

	t.Run("ContradictoryOrMissingEvidenceIs400AndWritesNothing", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		c := r.Claim("bad-ev", nil).Str("claim")
		v := r.item("bad-ev").Version
		for _, tc := range []struct {
			fields map[string]any
			field  string
		}{
			{map[string]any{"http_status": 100}, "http_status"},
			{map[string]any{"http_status": 200}, "http_status"},
			{map[string]any{"http_status": 304}, "http_status"},
			{map[string]any{"http_status": 399, "error": map[string]any{"class": "timeout"}}, "http_status"},
			{map[string]any{"error": map[string]any{"class": "http"}}, "http_status"},
			{map[string]any{"error": map[string]any{"message": "boom"}}, "error"},
			{map[string]any{}, "error"},
		} {
			body := map[string]any{"key": "bad-ev", "claim": c, "outcome": "failed"}
			for k, v := range tc.fields {
				body[k] = v
			}
			Expect(t, r.AfterWrite(body), http.StatusBadRequest, items.CodeInvalid, tc.field)
		}
		r.same("bad-ev", v, "a refused report")
	})

	t.Run("SucceededIsRecordedOrLateFromAnyState", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		// from in flight, the current attempt: recorded; the result is stored, the claim's attempt answered
		c := r.Claim("aw-ok", nil).Str("claim")
		rep := r.report("aw-ok", c, map[string]any{"outcome": "succeeded", "external_id": "x", "result": map[string]any{"a": 1}})
		if rep.Str("reason") != "recorded" || rep.At("result_dropped") != nil {
			t.Fatalf("success: %s", rep.Body)
		}
		if it := r.item("aw-ok"); string(it.Result) != `{"a":1}` || it.ExternalID != "x" {
			t.Fatalf("stored result %s, external_id %s", it.Result, it.ExternalID)
		}
		// from unknown (the current attempt): late_success, and the person is no longer needed
		c = r.unknown("aw-unknown", nil)
		r.bw("aw-unknown", nil) // awaiting_owner: needs a person
		rep = r.report("aw-unknown", c, map[string]any{"outcome": "succeeded", "external_id": "u"})
		if rep.Str("state") != "succeeded" || rep.Str("reason") != "late_success" || rep.Num("attempt") != 1 {
			t.Fatalf("success on unknown: %s", rep.Body)
		}
		if it := r.item("aw-unknown"); it.NeedsPerson || it.ExternalID != "u" {
			t.Fatalf("after a late success: needs_person %v external_id %q", it.NeedsPerson, it.ExternalID)
		}
		// from failed permanent and failed retryable (the current attempt): recorded, knowledge only grows
		for i, f := range []map[string]any{{"http_status": 404}, {"http_status": 429}, {"error": map[string]any{"class": "dns"}}} {
			key := fmt.Sprintf("aw-failed-%d", i)
			c := r.Claim(key, nil).Str("claim")
			f["outcome"] = "failed"
			r.report(key, c, f)
			rep := r.report(key, c, map[string]any{"outcome": "succeeded", "external_id": "f"})
			if rep.Str("state") != "succeeded" || rep.Str("reason") != "recorded" {
				t.Fatalf("success after %v: %s", f, rep.Body)
			}
			if it := r.item(key); it.Retryable || it.RetryAt != nil || it.State != items.StateSucceeded {
				t.Fatalf("after %v then success: retryable %v retry_at %v", f, it.Retryable, it.RetryAt)
			}
		}
		// from an older attempt's claim while the current one is in flight: late_success, the older attempt
		first := r.Claim("aw-old", nil).Str("claim")
		r.report("aw-old", first, map[string]any{"outcome": "failed", "error": map[string]any{"class": "validation"}})
		second := r.bw("aw-old", nil)
		rep = r.report("aw-old", first, map[string]any{"outcome": "succeeded", "external_id": "o"})
		if rep.Str("state") != "succeeded" || rep.Str("reason") != "late_success" || rep.Num("attempt") != 1 {
			t.Fatalf("older claim's success: %s", rep.Body)
		}
		if rep := r.report("aw-old", second.Str("claim"), map[string]any{"outcome": "failed", "http_status": 500}); rep.Str("reason") != "history_only" || rep.Num("attempt") != 2 {
			t.Fatalf("the current attempt's failure after the success: %s", rep.Body)
		}
		// a result over 4 KiB is dropped, never the success
		c = r.Claim("aw-big", nil).Str("claim")
		rep = r.report("aw-big", c, map[string]any{"outcome": "succeeded", "external_id": "b", "result": map[string]any{"blob": strings.Repeat("x", items.MaxResultBytes)}})
		if rep.Str("state") != "succeeded" || rep.At("result_dropped") != true {
			t.Fatalf("big result: %s", rep.Body)
		}
		if it := r.item("aw-big"); it.State != items.StateSucceeded || len(it.Result) != 0 || it.ExternalID != "b" {
			t.Fatalf("stored after a big result: %s, %d bytes of result", it.State, len(it.Result))
		}
	})

	t.Run("DuplicateEffectOnlyWithAnotherNonEmptyExternalID", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		c := r.Claim("dup", nil).Str("claim")
		r.report("dup", c, map[string]any{"outcome": "succeeded", "external_id": "x-1"})
		// no external id, or the same one with another result: history only
		for _, f := range []map[string]any{{}, {"external_id": "x-1", "result": map[string]any{"other": true}}} {
			f["outcome"] = "succeeded"
			if rep := r.report("dup", c, f); rep.Str("reason") != "history_only" || rep.Str("state") != "succeeded" {
				t.Fatalf("success again %v: %s", f, rep.Body)
			}
		}
		if it := r.item("dup"); it.NeedsPerson || it.DuplicateEffect {
			t.Fatal("a success without another external id flagged a duplicate effect")
		}
		rep := r.report("dup", c, map[string]any{"outcome": "succeeded", "external_id": "x-2"})
		if rep.Str("reason") != "duplicate_effect" || rep.Str("state") != "succeeded" {
			t.Fatalf("another external id: %s", rep.Body)
		}
		it := r.item("dup")
		if !it.DuplicateEffect || !it.NeedsPerson || it.NeedsPersonCause != items.CauseDuplicateEffect || it.ExternalID != "x-1" {
			t.Fatalf("stored: duplicate %v needs_person %v (%s) external_id %s", it.DuplicateEffect, it.NeedsPerson, it.NeedsPersonCause, it.ExternalID)
		}
		// its identical repeat answers duplicate_effect again and writes nothing
		if rep := r.report("dup", c, map[string]any{"outcome": "succeeded", "external_id": "x-2"}); rep.Str("reason") != "duplicate_effect" {
			t.Fatalf("repeated duplicate: %s", rep.Body)
		}
		r.same("dup", it.Version, "a repeated duplicate-effect report")
	})

	// An unknown item becomes failed only on definitive evidence from its current attempt.
	t.Run("UnknownBecomesFailedOnlyOnDefinitiveEvidence", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		cases := []struct {
			report    map[string]any
			state     items.State
			retryable bool
		}{
			{map[string]any{"http_status": 404}, items.StateFailed, false},
			{map[string]any{"http_status": 429}, items.StateFailed, true},
			{map[string]any{"error": map[string]any{"class": "validation"}}, items.StateFailed, true},
			{map[string]any{"error": map[string]any{"class": "connection_refused"}}, items.StateFailed, true},
			{map[string]any{"error": map[string]any{"class": "rejected"}}, items.StateFailed, false},
			{map[string]any{"http_status": 503, "retry_after": 5}, items.StateUnknown, false},
			{map[string]any{"http_status": 500}, items.StateUnknown, false},
			{map[string]any{"http_status": 408}, items.StateUnknown, false},
			{map[string]any{"error": map[string]any{"class": "tls"}}, items.StateUnknown, false},
		}
		for i, tc := range cases {
			key := fmt.Sprintf("def-%d", i)
			c := r.unknown(key, nil)
			r.bw(key, nil) // awaiting_owner: needs a person
			tc.report["outcome"] = "failed"
			rep := r.report(key, c, tc.report)
			if rep.Str("state") != string(tc.state) || rep.Str("reason") != "recorded" {
				t.Fatalf("unknown, then %v: %s", tc.report, rep.Body)
			}
			it := r.item(key)
			if it.State != tc.state || it.Retryable != tc.retryable || it.NeedsPerson != (tc.state == items.StateUnknown) {
				t.Fatalf("unknown, then %v: stored %s retryable %v needs_person %v", tc.report, it.State, it.Retryable, it.NeedsPerson)
			}
		}
	})

	// API.md additions: a repeat is identical only for the item's current attempt.
	t.Run("AdditionsRepeatsArePerAttempt", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		c := r.Claim("rep", nil).Str("claim")
		f := map[string]any{"outcome": "failed", "http_status": 429, "retry_after": 30}
		r.report("rep", c, f)
		it := r.item("rep")
		r.Clock.Advance(10 * time.Second)
		// the same 429 again: unchanged, and the retry time does not move
		if rep := r.report("rep", c, f); rep.Str("reason") != "unchanged" || rep.Str("state") != "failed" || rep.Num("attempt") != 1 {
			t.Fatalf("identical repeat: %s", rep.Body)
		}
		r.same("rep", it.Version, "an identical repeat")
		// the same timeout twice on an unknown item: unchanged
		u := r.unknown("rep-u", nil)
		v := r.item("rep-u").Version
		if rep := r.report("rep-u", u, map[string]any{"outcome": "failed", "error": map[string]any{"class": "timeout"}}); rep.Str("reason") != "unchanged" {
			t.Fatalf("identical repeat of a timeout: %s", rep.Body)
		}
		r.same("rep-u", v, "an identical repeat")
		// a different report of the same attempt is not a repeat: a 404 after the 429 goes to the history
		if rep := r.report("rep", c, map[string]any{"outcome": "failed", "http_status": 404}); rep.Str("reason") != "history_only" || rep.Str("state") != "failed" {
			t.Fatalf("another report of the same attempt after failed: %s", rep.Body)
		}
		// an older attempt's report repeated is history, not unchanged
		r.Clock.Advance(20 * time.Second)
		next := r.bw("rep", nil)
		if dr(next) != "proceed/retry" {
			t.Fatalf("retry: %s", next.Body)
		}
		if rep := r.report("rep", c, f); rep.Str("reason") != "history_only" || rep.Str("state") != "in_flight" || rep.Num("attempt") != 1 {
			t.Fatalf("attempt 1's report repeated during attempt 2: %s", rep.Body)
		}
		// the same evidence for the new attempt is new evidence
		if rep := r.report("rep", next.Str("claim"), f); rep.Str("reason") != "recorded" || rep.Str("state") != "failed" || rep.Num("attempt") != 2 {
			t.Fatalf("attempt 2's own 429: %s", rep.Body)
		}
	})

	// The report table's third row: the current attempt's report while in flight, "lease live or expired",
	// is classified; nothing else turns the expired claim into "not sent".
	t.Run("CurrentAttemptReportsAfterItsLeaseEnded", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		for i, tc := range []struct {
			report map[string]any
			state  items.State
			reason string
		}{
			{map[string]any{"outcome": "succeeded", "external_id": "x"}, items.StateSucceeded, "recorded"},
			{map[string]any{"outcome": "failed", "http_status": 404}, items.StateFailed, "recorded"},
			{map[string]any{"outcome": "failed", "error": map[string]any{"class": "timeout"}}, items.StateUnknown, "recorded"},
			{map[string]any{"outcome": "unknown"}, items.StateUnknown, "recorded"},
		} {
			key := fmt.Sprintf("late-%d", i)
			c := r.Claim(key, map[string]any{"lease_seconds": 5}).Str("claim")
			r.Clock.Advance(6 * time.Second)
			rep := r.report(key, c, tc.report)
			if rep.Str("state") != string(tc.state) || rep.Str("reason") != tc.reason || rep.Num("attempt") != 1 {
				t.Fatalf("%v after the lease ended: %s", tc.report, rep.Body)
			}
		}
	})

	t.Run("ClaimsAreOfTheItemAndTenant", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		a := r.Claim("cl-a", nil).Str("claim")
		r.Claim("cl-b", nil)
		v := r.item("cl-b").Version
		// another item's claim: 409, nothing written
		Expect(t, r.AfterWrite(map[string]any{"key": "cl-b", "claim": a, "outcome": "succeeded"}), http.StatusConflict, items.CodeConflict, "")
		r.same("cl-b", v, "another item's claim")
		Expect(t, r.Post(WorkflowGlobex, "/v1/after-write", map[string]any{"key": "cl-a", "claim": a, "outcome": "succeeded"}), http.StatusNotFound, items.CodeNotFound, "")
	})
}

func reconcileRows(t *testing.T, open func(t *testing.T) items.Store) {
	t.Run("FoundAbsentLookupFailed", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		lookup := map[string]any{"dedupe": "lookup", "reference": "QT-1"}
		r.unknown("rc-found", lookup)
		r.bw("rc-found", nil)
		rep := r.reconcile("rc-found", map[string]any{"finding": "found", "external_id": "inv-1", "evidence": "found QT-1 as inv-1"})
		Expect(t, rep, http.StatusOK, "", "")
		if rep.Str("state") != "succeeded" || rep.Str("reason") != "recorded" || rep.Num("attempt") != 1 || rep.Str("key") != "rc-found" {
			t.Fatalf("found: %s", rep.Body)
		}
		if it := r.item("rc-found"); it.ExternalID != "inv-1" || it.NeedsPerson {
			t.Fatalf("found stored external_id %q, needs_person %v", it.ExternalID, it.NeedsPerson)
		}
		if a := r.bw("rc-found", nil); dr(a) != "skip/succeeded" || a.Str("external_id") != "inv-1" {
			t.Fatalf("before-write after found: %s", a.Body)
		}

		// absent on the destination with one attempt: failed, retryable at once, one more attempt
		first := r.unknown("rc-absent", map[string]any{"dedupe": "lookup", "destination": "once"})
		rep = r.reconcile("rc-absent", map[string]any{"finding": "absent", "evidence": "no QT in the destination"})
		if rep.Str("state") != "failed" || rep.Str("reason") != "recorded" {
			t.Fatalf("absent: %s", rep.Body)
		}
		it := r.item("rc-absent")
		if !it.Retryable || it.RetryAt == nil || !it.RetryAt.Equal(r.Clock.Now()) || it.ExtraAttempts != 1 {
			t.Fatalf("absent stored retryable %v retry_at %v extra %d", it.Retryable, it.RetryAt, it.ExtraAttempts)
		}
		a := r.bw("rc-absent", nil)
		if dr(a) != "proceed/retry" || a.Num("attempt") != 2 || a.Str("claim") == first {
			t.Fatalf("before-write after absent, beyond the budget: %s", a.Body)
		}
		r.report("rc-absent", a.Str("claim"), map[string]any{"outcome": "failed", "error": map[string]any{"class": "validation"}})
		if a := r.bw("rc-absent", nil); dr(a) != "skip/attempts_exhausted" {
			t.Fatalf("the extra attempt is one: %s", a.Body)
		}

		// lookup_failed: stays unknown, needs a person, and no second lookup
		r.unknown("rc-failed", lookup)
		rep = r.reconcile("rc-failed", map[string]any{"finding": "lookup_failed", "evidence": "search API answered 500"})
		if rep.Str("state") != "unknown" || rep.Str("reason") != "recorded" {
			t.Fatalf("lookup_failed: %s", rep.Body)
		}
		if it := r.item("rc-failed"); !it.NeedsPerson || !it.LookupFailed || it.NeedsPersonCause != items.CauseLookupFailed {
			t.Fatalf("lookup_failed stored needs_person %v lookup_failed %v", it.NeedsPerson, it.LookupFailed)
		}
		Expect(t, r.reconcile("rc-failed", map[string]any{"finding": "found", "external_id": "x", "evidence": "found it on a second try"}), http.StatusConflict, items.CodeConflict, "")
		if res := r.resolve("rc-failed", map[string]any{"outcome": "succeeded", "evidence": "found by hand in the UI", "external_id": "x"}); res.Status != http.StatusOK || res.Str("state") != "succeeded" {
			t.Fatalf("resolve after lookup_failed: %d %s", res.Status, res.Body)
		}
	})

	t.Run("OnlyForAnUnknownLookupItem", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		body := func() map[string]any {
			return map[string]any{"finding": "found", "external_id": "x", "evidence": "found it in the destination"}
		}
		r.Claim("rc-live", map[string]any{"dedupe": "lookup", "lease_seconds": 60})
		r.unknown("rc-key", map[string]any{"dedupe": "key"})
		r.unknown("rc-none", nil)
		c := r.Claim("rc-failed", map[string]any{"dedupe": "lookup"}).Str("claim")
		r.report("rc-failed", c, map[string]any{"outcome": "failed", "http_status": 404})
		for _, key := range []string{"rc-live", "rc-key", "rc-none", "rc-failed"} {
			v := r.item(key).Version
			Expect(t, r.reconcile(key, body()), http.StatusConflict, items.CodeConflict, "")
			r.same(key, v, "a refused reconcile")
		}
		Expect(t, r.reconcile("rc-missing", body()), http.StatusNotFound, items.CodeNotFound, "")
		// in flight past its lease counts as unknown: the expiry is recorded, then the finding
		r.Clock.Advance(60 * time.Second)
		rep := r.reconcile("rc-live", body())
		if rep.Status != http.StatusOK || rep.Str("state") != "succeeded" {
			t.Fatalf("reconcile past the lease: %d %s", rep.Status, rep.Body)
		}
		var kinds []string
		for _, e := range r.item("rc-live").History {
			kinds = append(kinds, e.Kind)
		}
		if fmt.Sprint(kinds) != fmt.Sprint([]string{items.EventClaimed, items.EventLeaseExpired, items.EventReconcile}) {
			t.Fatalf("history %v", kinds)
		}
	})

	// API.md additions: the same finding is unchanged only for the current attempt, and no item waits for a
	// lookup while a reconcile answers unchanged.
	t.Run("AdditionsRepeatsArePerAttempt", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		r.unknown("rc-rep", map[string]any{"dedupe": "lookup"})
		absent := func() map[string]any {
			return map[string]any{"finding": "absent", "evidence": "searched: nothing there"}
		}
		Expect(t, r.reconcile("rc-rep", absent()), http.StatusOK, "", "")
		v := r.item("rc-rep").Version
		if rep := r.reconcile("rc-rep", absent()); rep.Status != http.StatusOK || rep.Str("reason") != "unchanged" || rep.Str("state") != "failed" {
			t.Fatalf("identical repeat: %d %s", rep.Status, rep.Body)
		}
		r.same("rc-rep", v, "an identical reconcile")
		// a different finding now: 409 (the item is failed)
		Expect(t, r.reconcile("rc-rep", map[string]any{"finding": "lookup_failed", "evidence": "searched: nothing there"}), http.StatusConflict, items.CodeConflict, "")
		// attempt 2 in flight: the same finding is no repeat, and the item is not unknown: 409
		a := r.bw("rc-rep", map[string]any{"dedupe": "lookup"})
		Expect(t, r.reconcile("rc-rep", absent()), http.StatusConflict, items.CodeConflict, "")
		// attempt 2, unknown again: the same finding and evidence are new evidence
		r.report("rc-rep", a.Str("claim"), map[string]any{"outcome": "unknown"})
		if a := r.bw("rc-rep", nil); dr(a) != "reconcile/lookup_required" || a.Num("attempt") != 2 {
			t.Fatalf("attempt 2 unknown: %s", a.Body)
		}
		rep := r.reconcile("rc-rep", absent())
		if rep.Str("reason") != "recorded" || rep.Str("state") != "failed" || rep.Num("attempt") != 2 {
			t.Fatalf("the same finding on attempt 2: %s", rep.Body)
		}
		if it := r.item("rc-rep"); it.ExtraAttempts != 2 {
			t.Fatalf("extra attempts %d, want 2", it.ExtraAttempts)
		}
	})
}

func resolveRows(t *testing.T, open func(t *testing.T) items.Store) {
	t.Run("ChecksInOrderRoleBodyKeyState", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		r.Claim("rs-live", nil)
		good := map[string]any{"outcome": "succeeded", "evidence": "seen in the destination"}
		Expect(t, r.Post(WorkflowAcme, "/v1/items/rs-missing/resolve", map[string]any{"outcome": "nope"}), http.StatusForbidden, handlers.CodeForbidden, "")
		Expect(t, r.resolve("rs-missing", map[string]any{"outcome": "nope", "evidence": "seen in the destination"}), http.StatusBadRequest, items.CodeInvalid, "outcome")
		Expect(t, r.resolve("rs-missing", map[string]any{"outcome": "succeeded", "evidence": "short"}), http.StatusBadRequest, items.CodeInvalid, "evidence")
		Expect(t, r.resolve("rs-live", map[string]any{"outcome": "succeeded", "evidence": "   short   "}), http.StatusBadRequest, items.CodeInvalid, "evidence")
		Expect(t, r.resolve("rs-missing", good), http.StatusNotFound, items.CodeNotFound, "")
		Expect(t, r.resolve("rs-live", good), http.StatusConflict, items.CodeConflict, "")
	})

	t.Run("OnlyUnknownOrFailedWithNoAttemptsLeft", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		good := func() map[string]any {
			return map[string]any{"outcome": "not_committed", "evidence": "not in the destination"}
		}
		// 409: in flight (lease live), succeeded, failed with attempts left (retryable, permanent)
		r.Claim("rs-live", nil)
		c := r.Claim("rs-done", nil).Str("claim")
		r.report("rs-done", c, map[string]any{"outcome": "succeeded", "external_id": "d"})
		c = r.Claim("rs-429", nil).Str("claim")
		r.report("rs-429", c, map[string]any{"outcome": "failed", "http_status": 429})
		c = r.Claim("rs-404", nil).Str("claim")
		r.report("rs-404", c, map[string]any{"outcome": "failed", "http_status": 404})
		for _, key := range []string{"rs-live", "rs-done", "rs-429", "rs-404"} {
			v := r.item(key).Version
			Expect(t, r.resolve(key, good()), http.StatusConflict, items.CodeConflict, "")
			r.same(key, v, "a refused resolution")
		}
		// unknown → succeeded, with who, when, outcome, evidence
		r.unknown("rs-unknown", nil)
		res := r.resolve("rs-unknown", map[string]any{"outcome": "succeeded", "evidence": "  seen in the CRM as 77  ", "external_id": "77"})
		if res.Status != http.StatusOK || res.Str("state") != "succeeded" || res.Str("reason") != "recorded" || res.Str("external_id") != "77" ||
			res.Str("resolution.by") != "op-acme" || res.Str("resolution.evidence") != "seen in the CRM as 77" || res.Str("resolution.outcome") != "succeeded" ||
			res.Str("resolution.at") != r.Clock.Now().UTC().Format(time.RFC3339) || res.At("needs_person") != false {
			t.Fatalf("resolve unknown as succeeded: %d %s", res.Status, res.Body)
		}
		// failed with no attempts left → not_committed: failed, retryable at once, one more attempt
		c = r.Claim("rs-once", map[string]any{"destination": "once"}).Str("claim")
		r.report("rs-once", c, map[string]any{"outcome": "failed", "http_status": 429, "retry_after": 600})
		res = r.resolve("rs-once", good())
		if res.Status != http.StatusOK || res.Str("state") != "failed" || res.At("needs_person") != false {
			t.Fatalf("resolve exhausted as not_committed: %d %s", res.Status, res.Body)
		}
		if it := r.item("rs-once"); !it.Retryable || it.RetryAt == nil || !it.RetryAt.Equal(r.Clock.Now()) || it.ExtraAttempts != 1 {
			t.Fatalf("stored retryable %v retry_at %v extra %d", it.Retryable, it.RetryAt, it.ExtraAttempts)
		}
		if a := r.bw("rs-once", nil); dr(a) != "proceed/retry" || a.Num("attempt") != 2 {
			t.Fatalf("before-write after not_committed: %s", a.Body)
		}
		// a failed permanent item with no attempts left is settleable too
		c = r.Claim("rs-once-404", map[string]any{"destination": "once"}).Str("claim")
		r.report("rs-once-404", c, map[string]any{"outcome": "failed", "http_status": 404})
		if res := r.resolve("rs-once-404", map[string]any{"outcome": "succeeded", "evidence": "it was there after all"}); res.Status != http.StatusOK || res.Str("state") != "succeeded" {
			t.Fatalf("resolve a permanent failure with no attempts left: %d %s", res.Status, res.Body)
		}
		// in flight past its lease counts as unknown
		r.Claim("rs-expired", map[string]any{"lease_seconds": 5})
		r.Clock.Advance(5 * time.Second)
		res = r.resolve("rs-expired", good())
		if res.Status != http.StatusOK || res.Str("state") != "failed" {
			t.Fatalf("resolve past the lease: %d %s", res.Status, res.Body)
		}
		if h := r.item("rs-expired").History; h[1].Kind != items.EventLeaseExpired || h[len(h)-1].Kind != items.EventResolve {
			t.Fatalf("history: %+v", h)
		}
	})

	// API.md additions: acknowledged clears needs_person of a succeeded duplicate effect or of a retryable
	// failure flagged unresolved_too_long, and nothing else; any other item is 409.
	t.Run("AdditionsAcknowledged", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		ack := func() map[string]any {
			return map[string]any{"outcome": "acknowledged", "evidence": "seen; the owner takes it from here"}
		}
		c := r.Claim("ak-stale", map[string]any{"destination": "slow"}).Str("claim")
		r.report("ak-stale", c, map[string]any{"outcome": "failed", "http_status": 429, "retry_after": 3600})
		r.Clock.Advance(10*time.Minute + time.Second)
		if cause, err := r.Ledger.MarkNeedsPerson(context.Background(), "acme", "ak-stale"); err != nil || cause != items.CauseStale {
			t.Fatalf("the sweeper's mark: %q, %v", cause, err)
		}
		// the alert about it went out (as the dispatcher records it)
		if n, err := r.Ledger.RecordAlerts(context.Background(), "acme", []items.AlertMark{{Key: "ak-stale", Attempt: 1, Cause: items.CauseStale}},
			items.AlertSent, "U024BE7LH"); err != nil || n != 1 {
			t.Fatalf("record the alert: %d, %v", n, err)
		}
		before := r.item("ak-stale")
		if before.AlertStatus != items.AlertSent {
			t.Fatalf("alert status %q before the acknowledgement", before.AlertStatus)
		}
		res := r.resolve("ak-stale", ack())
		if res.Status != http.StatusOK || res.Str("reason") != "recorded" || res.Str("state") != "failed" || res.Num("attempt") != 1 ||
			res.At("needs_person") != false || res.Str("resolution.outcome") != "acknowledged" || res.Str("resolution.by") != "op-acme" {
			t.Fatalf("acknowledge a stale failure: %d %s", res.Status, res.Body)
		}
		after := r.item("ak-stale")
		if after.State != before.State || after.Attempt != before.Attempt || !after.Retryable || !after.RetryAt.Equal(*before.RetryAt) ||
			after.NeedsPerson || after.AlertStatus != "" || after.ExtraAttempts != before.ExtraAttempts {
			t.Fatalf("acknowledged changed more than needs_person: %+v", after)
		}
		if cause, _ := r.Ledger.MarkNeedsPerson(context.Background(), "acme", "ak-stale"); cause != "" {
			t.Fatalf("the sweeper flags an acknowledged item again: %s", cause)
		}
		v := after.Version
		if res := r.resolve("ak-stale", ack()); res.Status != http.StatusOK || res.Str("reason") != "unchanged" {
			t.Fatalf("repeat: %d %s", res.Status, res.Body)
		}
		r.same("ak-stale", v, "a repeated acknowledgement")
		// 409: unknown needing a person, failed with no attempts left, a plain failure, in flight
		r.unknown("ak-unknown", nil)
		r.bw("ak-unknown", nil)
		c = r.Claim("ak-exhausted", map[string]any{"destination": "once"}).Str("claim")
		r.report("ak-exhausted", c, map[string]any{"outcome": "failed", "http_status": 429})
		c = r.Claim("ak-plain", nil).Str("claim")
		r.report("ak-plain", c, map[string]any{"outcome": "failed", "http_status": 429})
		r.Claim("ak-live", nil)
		for _, key := range []string{"ak-unknown", "ak-exhausted", "ak-plain", "ak-live"} {
			v := r.item(key).Version
			Expect(t, r.resolve(key, ack()), http.StatusConflict, items.CodeConflict, "")
			r.same(key, v, "a refused acknowledgement")
		}
	})

	// API.md additions: the same resolution is unchanged only for the current attempt.
	t.Run("AdditionsRepeatsArePerAttempt", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		nc := func() map[string]any {
			return map[string]any{"outcome": "not_committed", "evidence": "checked: not there"}
		}
		// dedupe key: an unknown attempt needs no person by itself, so only the attempt tells the repeat apart
		r.unknown("rs-rep", map[string]any{"dedupe": "key"})
		Expect(t, r.resolve("rs-rep", nc()), http.StatusOK, "", "")
		v := r.item("rs-rep").Version
		if res := r.resolve("rs-rep", nc()); res.Str("reason") != "unchanged" {
			t.Fatalf("identical repeat: %s", res.Body)
		}
		r.same("rs-rep", v, "an identical resolution")
		a := r.bw("rs-rep", map[string]any{"dedupe": "key"})
		r.report("rs-rep", a.Str("claim"), map[string]any{"outcome": "unknown"})
		if it := r.item("rs-rep"); it.NeedsPerson || it.State != items.StateUnknown {
			t.Fatalf("attempt 2 unknown: %s needs_person %v", it.State, it.NeedsPerson)
		}
		res := r.resolve("rs-rep", nc())
		if res.Status != http.StatusOK || res.Str("reason") != "recorded" || res.Str("state") != "failed" || res.Num("attempt") != 2 {
			t.Fatalf("the same resolution on attempt 2: %d %s", res.Status, res.Body)
		}
		if it := r.item("rs-rep"); it.ExtraAttempts != 2 {
			t.Fatalf("extra attempts %d, want 2", it.ExtraAttempts)
		}
	})
}

func batchRows(t *testing.T, open func(t *testing.T) items.Store) {
	// One batch whose items match different rows: each is decided by its own row, in order, against the
	// state the earlier items left.
	t.Run("MixedRowsInOneBatch", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		c := r.Claim("b-done", nil).Str("claim")
		r.report("b-done", c, map[string]any{"outcome": "succeeded", "external_id": "d", "result": map[string]any{"n": 1}})
		r.Claim("b-live", nil)
		r.unknown("b-lookup", map[string]any{"dedupe": "lookup"})
		r.unknown("b-key", map[string]any{"dedupe": "key"})
		r.unknown("b-owner", nil)
		c = r.Claim("b-retry", nil).Str("claim")
		r.report("b-retry", c, map[string]any{"outcome": "failed", "error": map[string]any{"class": "validation"}})
		c = r.Claim("b-later", nil).Str("claim")
		r.report("b-later", c, map[string]any{"outcome": "failed", "http_status": 429, "retry_after": 60})
		c = r.Claim("b-perm", nil).Str("claim")
		r.report("b-perm", c, map[string]any{"outcome": "failed", "http_status": 400})
		c = r.Claim("b-out", map[string]any{"destination": "once"}).Str("claim")
		r.report("b-out", c, map[string]any{"outcome": "failed", "http_status": 429})
		item := func(key string, extra map[string]any) map[string]any {
			m := map[string]any{"key": key, "payload": payload(key)}
			for k, v := range extra {
				m[k] = v
			}
			return m
		}
		list := []any{
			item("b-new", nil), item("b-done", nil), item("b-live", nil), item("b-done", map[string]any{"payload": map[string]any{"x": 1}}),
			item("b-lookup", nil), item("b-key", nil), item("b-owner", nil), item("b-retry", nil), item("b-later", nil), item("b-perm", nil),
			item("b-out", nil), item("b-new", nil), item("b-new", map[string]any{"payload": map[string]any{"x": 2}}), item("b-key", nil),
		}
		want := []string{
			"proceed/new", "skip/succeeded", "skip/in_progress", "conflict/fingerprint_mismatch",
			"reconcile/lookup_required", "proceed/retry_same_key", "skip/awaiting_owner", "proceed/retry", "skip/retry_later", "skip/failed_permanent",
			"skip/attempts_exhausted", "skip/in_progress", "conflict/fingerprint_mismatch", "skip/in_progress",
		}
		a := r.BatchBeforeWrite("mixed", list)
		Expect(t, a, http.StatusOK, "", "")
		for i, w := range want {
			got := a.ItemAt(i)
			if dr(got) != w || got.Num("batch_index") != float64(i) {
				t.Errorf("item %d (%s): %s at %v, want %s", i, got.Str("key"), dr(got), got.At("batch_index"), w)
			}
		}
		if a.Num("counts.proceed") != 3 || a.Num("counts.skip") != 8 || a.Num("counts.conflict") != 2 || a.Num("counts.reconcile") != 1 {
			t.Fatalf("counts: %v", a.At("counts"))
		}
		if d := a.ItemAt(1); d.Str("external_id") != "d" || d.Num("result.n") != 1 {
			t.Fatalf("skip/succeeded in a batch: %v", d.JSON)
		}
		for key, w := range map[string]items.State{"b-new": items.StateInFlight, "b-key": items.StateInFlight, "b-retry": items.StateInFlight,
			"b-owner": items.StateUnknown, "b-done": items.StateSucceeded, "b-lookup": items.StateUnknown} {
			if it := r.item(key); it.State != w {
				t.Errorf("%s stored %s, want %s", key, it.State, w)
			}
		}
		if it := r.item("b-owner"); !it.NeedsPerson {
			t.Error("awaiting_owner in a batch does not mark the item as needing a person")
		}
		if it := r.item("b-out"); !it.NeedsPerson || it.NeedsPersonCause != items.CauseAttemptsExhausted {
			t.Errorf("attempts_exhausted in a batch: needs_person %v (%s)", it.NeedsPerson, it.NeedsPersonCause)
		}
		// prepare leaves existing items alone, whatever their state
		versions := map[string]int64{}
		for _, key := range []string{"b-new", "b-done", "b-owner", "b-retry"} {
			versions[key] = r.item(key).Version
		}
		p := r.Post(WorkflowAcme, "/v1/batches/prepare", map[string]any{"batch_id": "mixed-2", "items": BatchItems("b-new", "b-done", "b-owner", "b-retry", "b-fresh")})
		if p.Status != http.StatusOK || p.Num("counts.prepared") != 1 || p.Num("counts.existing") != 4 {
			t.Fatalf("prepare over existing items: %d %s", p.Status, p.Body)
		}
		for key, v := range versions {
			r.same(key, v, "a batch preparation")
		}
		if it := r.item("b-fresh"); it.State != items.StatePrepared || it.Attempt != 0 || it.Claim != "" {
			t.Fatalf("prepared: %s attempt %d claim %q", it.State, it.Attempt, it.Claim)
		}
	})
}

// batchAfterWriteRows: one batch of reports, each matching another row of the report table, decided in
// order (a report sees what the earlier ones in the batch recorded).
func batchAfterWriteRows(t *testing.T, open func(t *testing.T) items.Store) {
	t.Run("MixedReportRowsInOneBatch", func(t *testing.T) {
		t.Parallel()
		r := newRows(t, open)
		fresh := r.Claim("ba-fresh", nil).Str("claim")
		done := r.Claim("ba-done", nil).Str("claim")
		r.report("ba-done", done, map[string]any{"outcome": "succeeded", "external_id": "d-1"})
		old := r.Claim("ba-old", map[string]any{"dedupe": "key"}).Str("claim")
		r.report("ba-old", old, map[string]any{"outcome": "failed", "error": map[string]any{"class": "timeout"}})
		cur := r.bw("ba-old", nil).Str("claim")
		unknown := r.unknown("ba-unknown", nil)
		report := func(key, claim string, f map[string]any) map[string]any {
			f["key"], f["claim"] = key, claim
			return f
		}
		a := r.BatchAfterWrite(
			report("ba-fresh", fresh, map[string]any{"outcome": "failed", "http_status": 429, "retry_after": 30}),
			report("ba-fresh", fresh, map[string]any{"outcome": "failed", "http_status": 429, "retry_after": 30}),
			report("ba-done", done, map[string]any{"outcome": "succeeded", "external_id": "d-2"}),
			report("ba-done", done, map[string]any{"outcome": "failed", "http_status": 500}),
			report("ba-old", old, map[string]any{"outcome": "failed", "http_status": 500}),
			report("ba-old", cur, map[string]any{"outcome": "failed", "http_status": 404}),
			report("ba-old", old, map[string]any{"outcome": "succeeded", "external_id": "o-1"}),
			report("ba-unknown", unknown, map[string]any{"outcome": "failed", "http_status": 503, "retry_after": 5}),
			report("ba-unknown", unknown, map[string]any{"outcome": "succeeded", "external_id": "u-1"}),
		)
		Expect(t, a, http.StatusOK, "", "")
		want := []string{
			"failed recorded 1", "failed unchanged 1", "succeeded duplicate_effect 1", "succeeded history_only 1",
			// attempt 2's 404 settles only attempt 2: attempt 1's outcome is unknown, so the item stays unknown
			"in_flight history_only 1", "unknown recorded 2", "succeeded late_success 1",
			"unknown recorded 1", "succeeded late_success 1",
		}
		for i, w := range want {
			it := a.ItemAt(i)
			if got := fmt.Sprintf("%s %s %v", it.Str("state"), it.Str("reason"), it.At("attempt")); got != w {
				t.Errorf("report %d (%s): %s, want %s", i, it.Str("key"), got, w)
			}
		}
		if it := r.item("ba-done"); !it.DuplicateEffect || !it.NeedsPerson || it.ExternalID != "d-1" {
			t.Errorf("ba-done: duplicate %v needs_person %v external_id %s", it.DuplicateEffect, it.NeedsPerson, it.ExternalID)
		}
		if it := r.item("ba-old"); it.State != items.StateSucceeded || it.ExternalID != "o-1" || it.Attempt != 2 {
			t.Errorf("ba-old: %s %s attempt %d", it.State, it.ExternalID, it.Attempt)
		}
	})
}

// concurrentRows: "of any number of simultaneous before-writes for one tenant and key, exactly one gets
// proceed" holds for every row that proceeds (1 from prepared, 8, 10), not only for a new key; the others
// are told skip/in_progress.
func concurrentRows(t *testing.T, open func(t *testing.T) items.Store, opts Options) {
	t.Run("EveryProceedingRowHasOneWinner", func(t *testing.T) {
		if opts.SkipConcurrency != "" {
			t.Skip(opts.SkipConcurrency)
		}
		t.Parallel()
		r := newRows(t, open)
		const callers = 16
		for round := range 5 {
			prepared, retry, sameKey := fmt.Sprintf("c-prep-%d", round), fmt.Sprintf("c-retry-%d", round), fmt.Sprintf("c-key-%d", round)
			Expect(t, r.Post(WorkflowAcme, "/v1/batches/prepare", map[string]any{"batch_id": "c", "items": []any{
				map[string]any{"key": prepared, "payload": payload(prepared)}}}), http.StatusOK, "", "")
			c := r.Claim(retry, nil).Str("claim")
			r.report(retry, c, map[string]any{"outcome": "failed", "error": map[string]any{"class": "validation"}})
			r.unknown(sameKey, map[string]any{"dedupe": "key"})
			for key, want := range map[string]string{prepared: "proceed/new", retry: "proceed/retry", sameKey: "proceed/retry_same_key"} {
				answers := make([]Response, callers)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i := range callers {
					wg.Go(func() {
						<-start
						answers[i] = r.BeforeWrite(map[string]any{"key": key, "payload": payload(key)})
					})
				}
				close(start)
				wg.Wait()
				winners := 0
				for _, a := range answers {
					switch {
					case a.Status != http.StatusOK:
						t.Fatalf("%s: %d %s", key, a.Status, a.Body)
					case dr(a) == want:
						winners++
					case dr(a) != "skip/in_progress":
						t.Fatalf("%s: a loser got %s", key, dr(a))
					}
				}
				if it := r.item(key); winners != 1 || len(it.Attempts) != it.Attempt || it.State != items.StateInFlight {
					t.Fatalf("%s: %d callers got %s, %d attempts stored at attempt %d", key, winners, want, len(it.Attempts), it.Attempt)
				}
			}
		}
	})
}
