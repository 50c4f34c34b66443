package itemstest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// checkBackoff checks that key is failed and retryable after the default backoff of attempt: 1 s doubling
// per attempt, capped at 300 s, ±20 %. It returns the delay.
func (h *harness) checkBackoff(key string, attempt int) time.Duration {
	h.t.Helper()
	it := h.item(key)
	if it.State != items.StateFailed || !it.Retryable || it.RetryAt == nil {
		h.t.Errorf("%s is %s retryable=%v retry_at=%v, want failed and retryable", key, it.State, it.Retryable, it.RetryAt)
		return 0
	}
	delay := it.RetryAt.Sub(h.now())
	checkBackoffRange(h.t, delay, attempt)
	return delay
}

func checkBackoffRange(t *testing.T, delay time.Duration, attempt int) {
	t.Helper()
	base := min(time.Second<<min(attempt-1, 10), 300*time.Second)
	lo, hi := base*8/10, base*12/10
	if delay < lo || delay > hi {
		t.Errorf("backoff of attempt %d = %v, want %v–%v", attempt, delay, lo, hi)
	}
}

// exerciseClassification covers every row of the after-write classification table (API.md).
func exerciseClassification(t *testing.T, open func(t *testing.T) items.Store) {
	t.Run("Classify01_SucceededStoresExternalIDAndResult", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		a := h.claim("k", payloadA)
		h.advance(3 * time.Second)
		r := succeeded(a.Claim, "r-55")
		r.ReceiverRequestID = "req_81"
		r.Result = json.RawMessage(`{"reminder_id": "r-55"}`)
		h.checkReport("k", h.aw("k", r), wantReport{State: items.StateSucceeded, Reason: items.ReasonRecorded, Attempt: 1})
		it := h.checkHistory("k", items.EventClaimed, items.EventAfterWrite)
		if it.ExternalID != "r-55" || it.ReceiverRequestID != "req_81" || !jsonEqual(t, it.Result, r.Result) || it.LeaseExpiresAt != nil {
			t.Errorf("stored external_id %q receiver_request_id %q result %s lease %v", it.ExternalID, it.ReceiverRequestID, it.Result, it.LeaseExpiresAt)
		}
		if at := it.Attempts[0]; at.Outcome != items.StateSucceeded || at.EndedAt == nil || !at.EndedAt.Equal(h.now()) {
			t.Errorf("attempt 1 = %+v", at)
		}
		if e := lastEvent(it); e.Outcome != string(items.OutcomeSucceeded) || e.Reason != items.ReasonRecorded ||
			e.From != items.StateInFlight || e.To != items.StateSucceeded || e.ExternalID != "r-55" || e.Attempt != 1 {
			t.Errorf("after_write event %+v", e)
		}
	})

	t.Run("Classify02_ContradictoryOrMissingEvidenceIsRefused", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		a := h.claim("k", payloadA)
		before := h.item("k")
		negative := -1
		for _, c := range []struct {
			name  string
			p     items.AfterWriteParams
			field string
		}{
			{"failed_with_200", failedStatus(a.Claim, 200), "http_status"},
			{"failed_with_302", failedStatus(a.Claim, 302), "http_status"},
			{"failed_with_101", failedStatus(a.Claim, 101), "http_status"},
			{"failed_class_http_without_status", failedClass(a.Claim, items.ClassHTTP), "http_status"},
			{"failed_without_status_or_class", items.AfterWriteParams{Claim: a.Claim, Evidence: items.Evidence{Outcome: items.OutcomeFailed}}, "error"},
			{"unknown_outcome_word", items.AfterWriteParams{Claim: a.Claim, Evidence: items.Evidence{Outcome: "done"}}, "outcome"},
			{"unknown_class_word", failedClass(a.Claim, "bogus"), "error.class"},
			{"status_out_of_range", failedStatus(a.Claim, 600), "http_status"},
			{"negative_retry_after", failedStatusRetryAfter(a.Claim, 429, negative), "retry_after"},
			{"no_claim", failedStatus("", 429), "claim"},
		} {
			_, err := h.awErr("k", c.p)
			checkCode(t, err, items.CodeInvalid)
			var e *items.Error
			if !errors.As(err, &e) || len(e.Fields) == 0 || e.Fields[0].Field != c.field {
				t.Errorf("%s: error %v, want one naming %s", c.name, err, c.field)
			}
		}
		h.checkUnchanged("k", before)
	})

	t.Run("Classify03_429WithRetryAfterRetriesAtThatTime", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		for _, ra := range []int{0, 30, 3600} {
			key := fmt.Sprintf("k-%d", ra)
			a := h.claim(key, payloadA)
			h.checkReport(key, h.aw(key, failedStatusRetryAfter(a.Claim, 429, ra)), wantReport{State: items.StateFailed, Reason: items.ReasonRecorded, Attempt: 1})
			h.checkFailed(key, true, h.now().Add(time.Duration(ra)*time.Second))
			it := h.item(key)
			if it.HTTPStatus != 429 || it.FailureClass != items.ClassHTTP || it.Attempts[0].Outcome != items.StateFailed ||
				it.Attempts[0].HTTPStatus != 429 || it.NeedsPerson || it.Cause != "" {
				t.Errorf("%s: http_status %d class %q attempt %+v needs_person %v cause %q", key, it.HTTPStatus, it.FailureClass,
					it.Attempts[0], it.NeedsPerson, it.Cause)
			}
			if e := lastEvent(it); e.HTTPStatus != 429 || e.ErrorClass != items.ClassHTTP || e.To != items.StateFailed || e.Reason != items.ReasonRecorded {
				t.Errorf("%s: after_write event %+v", key, e)
			}
		}
	})

	t.Run("Classify03_429WithoutRetryAfterBacksOff", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		delays := map[time.Duration]bool{}
		for i := range 12 {
			key := fmt.Sprintf("k-%d", i)
			h.aw(key, failedStatus(h.claim(key, payloadA).Claim, 429))
			delays[h.checkBackoff(key, 1)] = true
		}
		if len(delays) < 2 {
			t.Errorf("12 backoffs all took %v: no jitter", delays)
		}
		// Attempt 2 doubles, attempt 3 doubles again.
		h.aw("k", failedClass(h.claim("k", payloadA).Claim, items.ClassValidation))
		for attempt := 2; attempt <= 3; attempt++ {
			a := h.claim("k", payloadA)
			h.aw("k", failedStatus(a.Claim, 429))
			h.checkBackoff("k", attempt)
			h.advance(5 * time.Second)
		}
		// The cap: 300 s from attempt 10 on, still with jitter.
		for _, attempt := range []int{9, 10, 30} {
			c := items.Classify(items.Evidence{Outcome: items.OutcomeFailed, HTTPStatus: 429}, attempt, items.Destination{}, epoch)
			if c.State != items.StateFailed || !c.Retryable {
				t.Errorf("429 on attempt %d classified %+v", attempt, c)
			}
			checkBackoffRange(t, c.RetryAt.Sub(epoch), attempt)
		}
	})

	t.Run("Classify03_503WithRetryAfterRetriesAtThatTime", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.checkReport("k", h.aw("k", failedStatusRetryAfter(h.claim("k", payloadA).Claim, 503, 120)),
			wantReport{State: items.StateFailed, Reason: items.ReasonRecorded, Attempt: 1})
		h.checkFailed("k", true, h.now().Add(120*time.Second))
	})

	t.Run("Classify04_OtherClientErrorsArePermanent", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		for _, status := range []int{400, 401, 403, 404, 405, 410, 413, 422, 451, 499} {
			key := fmt.Sprintf("k-%d", status)
			h.checkReport(key, h.aw(key, failedStatus(h.claim(key, payloadA).Claim, status)),
				wantReport{State: items.StateFailed, Reason: items.ReasonRecorded, Attempt: 1})
			h.checkFailed(key, false, time.Time{})
			if it := h.item(key); it.HTTPStatus != status || it.NeedsPerson {
				t.Errorf("%d: stored http_status %d needs_person %v", status, it.HTTPStatus, it.NeedsPerson)
			}
		}
	})

	t.Run("Classify05_408_409_425_5xxAreUnknown", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		for _, status := range []int{408, 409, 425, 500, 502, 503, 504, 599} {
			key := fmt.Sprintf("k-%d", status)
			h.checkReport(key, h.aw(key, failedStatus(h.claim(key, payloadA, dest(destKeyed)).Claim, status)),
				wantReport{State: items.StateUnknown, Reason: items.ReasonRecorded, Attempt: 1})
			it := h.item(key)
			if it.Cause != fmt.Sprintf("http_%d", status) || it.HTTPStatus != status || it.Retryable || it.RetryAt != nil ||
				it.LeaseExpiresAt != nil || it.Attempts[0].Outcome != items.StateUnknown || it.NeedsPerson {
				t.Errorf("%d: cause %q http_status %d retryable %v lease %v outcome %q needs_person %v", status, it.Cause,
					it.HTTPStatus, it.Retryable, it.LeaseExpiresAt, it.Attempts[0].Outcome, it.NeedsPerson)
			}
		}
	})

	t.Run("Classify06_ValidationRetryableAtOnce", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.checkReport("k", h.aw("k", failedClass(h.claim("k", payloadA).Claim, items.ClassValidation)),
			wantReport{State: items.StateFailed, Reason: items.ReasonRecorded, Attempt: 1})
		h.checkFailed("k", true, h.now())
		if it := h.item("k"); it.FailureClass != items.ClassValidation || it.HTTPStatus != 0 {
			t.Errorf("failure_class %q http_status %d", it.FailureClass, it.HTTPStatus)
		}
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Proceed, Reason: items.ReasonRetry, State: items.StateInFlight, Attempt: 2})
	})

	t.Run("Classify07_DNSAndConnectionRefusedBackOff", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		for _, class := range []items.ErrorClass{items.ClassDNS, items.ClassConnectionRefused} {
			key := "k-" + string(class)
			h.checkReport(key, h.aw(key, failedClass(h.claim(key, payloadA).Claim, class)),
				wantReport{State: items.StateFailed, Reason: items.ReasonRecorded, Attempt: 1})
			h.checkBackoff(key, 1)
			if it := h.item(key); it.FailureClass != class || it.Attempts[0].FailureClass != class {
				t.Errorf("%s: failure_class %q", class, it.FailureClass)
			}
		}
	})

	t.Run("Classify07_RejectedIsPermanentAndPossiblyDispatched", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		// An SMTP 5xx (the server refused the message for good): failed, not retried, nobody needed; the
		// stored class is rejected, kept through a reload of the item.
		h.checkReport("k", h.aw("k", failedClass(h.claim("k", payloadA).Claim, items.ClassRejected)),
			wantReport{State: items.StateFailed, Reason: items.ReasonRecorded, Attempt: 1})
		h.checkFailed("k", false, time.Time{})
		if it := h.item("k"); it.FailureClass != items.ClassRejected || it.Attempts[0].FailureClass != items.ClassRejected || it.NeedsPerson {
			t.Errorf("failure_class %q, attempt's %q, needs_person %v", it.FailureClass, it.Attempts[0].FailureClass, it.NeedsPerson)
		}
		h.advance(time.Hour)
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonFailedPermanent, State: items.StateFailed, Attempt: 1})
		// The destination received the write: another payload under the key is a conflict, never a retry.
		h.checkAnswer("k", h.bw("k", payloadB), want{Decision: items.Conflict, Reason: items.ReasonFingerprintMismatch, State: items.StateFailed, Attempt: 1})
		// It is definitive: an unknown item becomes failed on it.
		u := h.claim("u", payloadA, dest(destSearchable)).Claim
		h.aw("u", unknownOutcome(u))
		h.checkReport("u", h.aw("u", failedClass(u, items.ClassRejected)),
			wantReport{State: items.StateFailed, Reason: items.ReasonRecorded, Attempt: 1})
		h.checkFailed("u", false, time.Time{})
	})

	t.Run("Classify08_TransportClassesAndUnknownOutcomeAreUnknown", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		for _, c := range []struct {
			name  string
			p     func(claim string) items.AfterWriteParams
			cause string
		}{
			{"tls", func(c string) items.AfterWriteParams { return failedClass(c, items.ClassTLS) }, "tls"},
			{"timeout", func(c string) items.AfterWriteParams { return failedClass(c, items.ClassTimeout) }, "timeout"},
			{"connection_reset", func(c string) items.AfterWriteParams { return failedClass(c, items.ClassConnectionReset) }, "connection_reset"},
			{"other", func(c string) items.AfterWriteParams { return failedClass(c, items.ClassOther) }, "other"},
			{"outcome_unknown", unknownOutcome, items.CauseUnknownOutcome},
			{"outcome_unknown_with_timeout", func(c string) items.AfterWriteParams {
				p := unknownOutcome(c)
				p.Class = items.ClassTimeout
				return p
			}, "timeout"},
			{"outcome_unknown_with_2xx", func(c string) items.AfterWriteParams {
				p := unknownOutcome(c)
				p.HTTPStatus = 200
				return p
			}, "http_200"},
		} {
			key := "k-" + c.name
			h.checkReport(key, h.aw(key, c.p(h.claim(key, payloadA, dest(destSearchable)).Claim)),
				wantReport{State: items.StateUnknown, Reason: items.ReasonRecorded, Attempt: 1})
			if it := h.item(key); it.Cause != c.cause || it.Attempts[0].Outcome != items.StateUnknown {
				t.Errorf("%s: cause %q outcome %q", c.name, it.Cause, it.Attempts[0].Outcome)
			}
		}
	})

	t.Run("Classify_StatusDecidesOverClassAndOutcome", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		// 404 with class timeout: the status decides (permanent).
		p := failedStatus(h.claim("404-timeout", payloadA).Claim, 404)
		p.Class = items.ClassTimeout
		h.checkReport("404-timeout", h.aw("404-timeout", p), wantReport{State: items.StateFailed, Reason: items.ReasonRecorded, Attempt: 1})
		h.checkFailed("404-timeout", false, time.Time{})
		// 500 with class dns: the status decides, and a 500 proves nothing.
		p = failedStatus(h.claim("500-dns", payloadA).Claim, 500)
		p.Class = items.ClassDNS
		h.checkReport("500-dns", h.aw("500-dns", p), wantReport{State: items.StateUnknown, Reason: items.ReasonRecorded, Attempt: 1})
		if it := h.item("500-dns"); it.Attempts[0].FailureClass.NotDispatched() {
			t.Errorf("a 500 was recorded as a pre-dispatch class %q", it.Attempts[0].FailureClass)
		}
		// Outcome unknown with a 404: the status decides.
		p = unknownOutcome(h.claim("unknown-404", payloadA).Claim)
		p.HTTPStatus = 404
		h.checkReport("unknown-404", h.aw("unknown-404", p), wantReport{State: items.StateFailed, Reason: items.ReasonRecorded, Attempt: 1})
		h.checkFailed("unknown-404", false, time.Time{})
	})

	t.Run("Classify_ServerErrorsNotCommitted", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		for _, status := range []int{500, 502, 503, 504} {
			key := fmt.Sprintf("k-%d", status)
			h.checkReport(key, h.aw(key, failedStatus(h.claim(key, payloadA, dest(destServerErrorsSafe)).Claim, status)),
				wantReport{State: items.StateFailed, Reason: items.ReasonRecorded, Attempt: 1})
			h.checkBackoff(key, 1)
		}
		h.aw("503-ra", failedStatusRetryAfter(h.claim("503-ra", payloadA, dest(destServerErrorsSafe)).Claim, 503, 60))
		h.checkFailed("503-ra", true, h.now().Add(time.Minute))
		// The contract speaks of 5xx only: 408, 409 and 425 stay unknown.
		for _, status := range []int{408, 409, 425} {
			key := fmt.Sprintf("k-%d", status)
			h.checkReport(key, h.aw(key, failedStatus(h.claim(key, payloadA, dest(destServerErrorsSafe)).Claim, status)),
				wantReport{State: items.StateUnknown, Reason: items.ReasonRecorded, Attempt: 1})
		}
		// Without the contract a 500 is unknown.
		h.checkReport("plain-500", h.aw("plain-500", failedStatus(h.claim("plain-500", payloadA).Claim, 500)),
			wantReport{State: items.StateUnknown, Reason: items.ReasonRecorded, Attempt: 1})
	})
}

// exerciseReports covers the table of which after-write reports change the item (API.md).
func exerciseReports(t *testing.T, open func(t *testing.T) items.Store) {
	t.Run("SucceededFromCurrentClaimIsRecorded", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		a := h.claim("k", payloadA)
		h.checkReport("k", h.aw("k", succeeded(a.Claim, "r-1")), wantReport{State: items.StateSucceeded, Reason: items.ReasonRecorded, Attempt: 1})
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonSucceeded, State: items.StateSucceeded, Attempt: 1})
	})

	t.Run("LateSuccessFromOlderClaim", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		first := h.claim("k", payloadA)
		h.aw("k", failedStatusRetryAfter(first.Claim, 429, 0))
		second := h.claim("k", payloadA)
		h.advance(10 * time.Second)
		h.checkReport("k", h.aw("k", succeeded(first.Claim, "r-1")), wantReport{State: items.StateSucceeded, Reason: items.ReasonLateSuccess, Attempt: 1})
		it := h.item("k")
		if it.ExternalID != "r-1" || it.Attempt != 2 || it.LeaseExpiresAt != nil || it.Attempts[0].Outcome != items.StateSucceeded {
			t.Errorf("after the late success: external_id %q attempt %d lease %v attempt 1 outcome %q", it.ExternalID, it.Attempt,
				it.LeaseExpiresAt, it.Attempts[0].Outcome)
		}
		// The current attempt's later timeout does not undo it.
		h.checkReport("k", h.aw("k", failedClass(second.Claim, items.ClassTimeout)), wantReport{State: items.StateSucceeded, Reason: items.ReasonHistoryOnly, Attempt: 2})
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonSucceeded, State: items.StateSucceeded, Attempt: 2})
	})

	t.Run("LateSuccessFromUnknown", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		a := h.unknownAfterTimeout("k")
		if !h.item("k").NeedsPerson {
			t.Fatal("an unknown item without dedupe does not need a person")
		}
		h.advance(time.Hour)
		h.checkReport("k", h.aw("k", succeeded(a.Claim, "r-1")), wantReport{State: items.StateSucceeded, Reason: items.ReasonLateSuccess, Attempt: 1})
		it := h.item("k")
		if it.NeedsPerson || it.NeedsPersonCause != "" || it.Cause != "" || it.ExternalID != "r-1" {
			t.Errorf("after the late success: needs_person %v (%q) cause %q external_id %q", it.NeedsPerson, it.NeedsPersonCause, it.Cause, it.ExternalID)
		}
	})

	t.Run("LateSuccessAfterLeaseExpiry", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		a := h.claim("k", payloadA, lease(60), dest(destKeyed))
		h.advance(61 * time.Second)
		if changed, err := h.ledger.ExpireLease(h.ctx, tenantA, "k"); err != nil || !changed {
			t.Fatalf("ExpireLease = %v, %v; want true", changed, err)
		}
		h.checkReport("k", h.aw("k", succeeded(a.Claim, "r-1")), wantReport{State: items.StateSucceeded, Reason: items.ReasonLateSuccess, Attempt: 1})
		h.checkHistory("k", items.EventClaimed, items.EventLeaseExpired, items.EventAfterWrite)
	})

	t.Run("SucceededAfterFailureWins", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		a := h.claim("k", payloadA)
		h.aw("k", failedStatus(a.Claim, 422))
		h.checkReport("k", h.aw("k", succeeded(a.Claim, "r-1")), wantReport{State: items.StateSucceeded, Reason: items.ReasonRecorded, Attempt: 1})
		if it := h.item("k"); it.Retryable || it.RetryAt != nil || it.FailureClass != "" || it.HTTPStatus != 0 {
			t.Errorf("a succeeded item keeps failure details: retryable %v class %q status %d", it.Retryable, it.FailureClass, it.HTTPStatus)
		}
		// An older attempt's success while the item is failed and retryable is late.
		first := h.claim("k2", payloadA)
		h.aw("k2", failedStatusRetryAfter(first.Claim, 429, 0))
		second := h.claim("k2", payloadA)
		h.aw("k2", failedStatusRetryAfter(second.Claim, 429, 60))
		h.checkReport("k2", h.aw("k2", succeeded(first.Claim, "r-2")), wantReport{State: items.StateSucceeded, Reason: items.ReasonLateSuccess, Attempt: 1})
	})

	t.Run("DuplicateEffectNeedsPerson", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		first := h.claim("k", payloadA)
		h.aw("k", failedStatusRetryAfter(first.Claim, 429, 0))
		second := h.claim("k", payloadA)
		h.aw("k", succeeded(second.Claim, "r-2"))
		h.advance(time.Minute)
		dup := succeeded(first.Claim, "r-1")
		h.checkReport("k", h.aw("k", dup), wantReport{State: items.StateSucceeded, Reason: items.ReasonDuplicateEffect, Attempt: 1})
		it := h.item("k")
		if it.ExternalID != "r-2" || !it.DuplicateEffect || !it.NeedsPerson || it.NeedsPersonCause != items.CauseDuplicateEffect {
			t.Errorf("after a duplicate effect: external_id %q duplicate_effect %v needs_person %v (%q)", it.ExternalID,
				it.DuplicateEffect, it.NeedsPerson, it.NeedsPersonCause)
		}
		if e := lastEvent(it); e.Kind != items.EventAfterWrite || e.Reason != items.ReasonDuplicateEffect || e.ExternalID != "r-1" {
			t.Errorf("last event %+v", e)
		}
		// Repeating it changes nothing and says the same.
		h.checkReport("k", h.aw("k", dup), wantReport{State: items.StateSucceeded, Reason: items.ReasonDuplicateEffect, Attempt: 1})
		h.checkUnchanged("k", it)
		// The same external id, or none, is no duplicate: history only.
		h.checkReport("k", h.aw("k", succeeded(second.Claim, "")), wantReport{State: items.StateSucceeded, Reason: items.ReasonHistoryOnly, Attempt: 2})
		same := succeeded(first.Claim, "r-2")
		same.ReceiverRequestID = "req-9"
		h.checkReport("k", h.aw("k", same), wantReport{State: items.StateSucceeded, Reason: items.ReasonHistoryOnly, Attempt: 1})
	})

	t.Run("IdenticalRepeatIsUnchanged", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		for _, c := range []struct {
			name  string
			p     func(claim string) items.AfterWriteParams
			state items.State
		}{
			{"succeeded", func(c string) items.AfterWriteParams { return succeeded(c, "r-1") }, items.StateSucceeded},
			{"429", func(c string) items.AfterWriteParams { return failedStatusRetryAfter(c, 429, 30) }, items.StateFailed},
			{"422", func(c string) items.AfterWriteParams { return failedStatus(c, 422) }, items.StateFailed},
			{"timeout", func(c string) items.AfterWriteParams { return failedClass(c, items.ClassTimeout) }, items.StateUnknown},
		} {
			key := "k-" + c.name
			p := c.p(h.claim(key, payloadA).Claim)
			h.checkReport(key, h.aw(key, p), wantReport{State: c.state, Reason: items.ReasonRecorded, Attempt: 1})
			before := h.item(key)
			h.advance(time.Second)
			h.checkReport(key, h.aw(key, p), wantReport{State: c.state, Reason: items.ReasonUnchanged, Attempt: 1})
			h.checkUnchanged(key, before)
		}
	})

	t.Run("HistoryOnly", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		// An older attempt's failure does not touch the current attempt.
		first := h.claim("older", payloadA)
		h.aw("older", failedClass(first.Claim, items.ClassValidation))
		second := h.claim("older", payloadA)
		h.checkReport("older", h.aw("older", failedStatus(first.Claim, 404)), wantReport{State: items.StateInFlight, Reason: items.ReasonHistoryOnly, Attempt: 1})
		it := h.item("older")
		if it.Claim != second.Claim || it.Attempt != 2 || it.FailureClass != "" {
			t.Errorf("an older failure changed the item: claim %q attempt %d failure_class %q", it.Claim, it.Attempt, it.FailureClass)
		}
		if e := lastEvent(it); e.Kind != items.EventAfterWrite || e.Reason != items.ReasonHistoryOnly || e.HTTPStatus != 404 || e.Attempt != 1 {
			t.Errorf("history_only event %+v", e)
		}
		// A failure after success.
		a := h.claim("after-success", payloadA)
		h.aw("after-success", succeeded(a.Claim, "r-1"))
		h.checkReport("after-success", h.aw("after-success", failedStatus(a.Claim, 500)), wantReport{State: items.StateSucceeded, Reason: items.ReasonHistoryOnly, Attempt: 1})
		// A second, different report about an attempt already recorded as failed.
		a = h.claim("twice", payloadA)
		h.aw("twice", failedStatus(a.Claim, 422))
		h.checkReport("twice", h.aw("twice", failedClass(a.Claim, items.ClassTimeout)), wantReport{State: items.StateFailed, Reason: items.ReasonHistoryOnly, Attempt: 1})
		h.checkFailed("twice", false, time.Time{})
	})

	t.Run("UnknownClaimConflicts", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.claim("k", payloadA)
		other := h.claim("other", payloadA)
		before := h.item("k")
		for _, claim := range []string{"c_000000000000000000000000", other.Claim} {
			_, err := h.awErr("k", succeeded(claim, "r-1"))
			checkCode(t, err, items.CodeConflict)
		}
		h.checkUnchanged("k", before)
	})

	t.Run("MissingItemIsNotFound", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		_, err := h.awErr("missing", succeeded("c_1", "r-1"))
		if !errors.Is(err, items.ErrNotFound) {
			t.Errorf("after-write on a missing key: %v, want ErrNotFound", err)
		}
		if _, err := h.store.Get(h.ctx, tenantA, "missing"); !errors.Is(err, items.ErrNotFound) {
			t.Errorf("after-write on a missing key created it: %v", err)
		}
	})

	t.Run("AnotherTenantIsNotFound", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		a := h.claim("k", payloadA)
		before := h.item("k")
		_, err := h.as(tenantB).awErr("k", succeeded(a.Claim, "r-1"))
		if !errors.Is(err, items.ErrNotFound) {
			t.Errorf("another tenant's after-write: %v, want ErrNotFound", err)
		}
		h.checkUnchanged("k", before)
	})

	t.Run("UnknownBecomesFailedOnlyOnDefinitiveEvidence", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		a := h.unknownAfterTimeout("k", dest(destKeyed))
		for _, p := range []items.AfterWriteParams{
			failedStatus(a.Claim, 503),
			failedStatusRetryAfter(a.Claim, 503, 10),
			failedStatus(a.Claim, 408),
			failedStatus(a.Claim, 500),
			failedClass(a.Claim, items.ClassTLS),
			failedClass(a.Claim, items.ClassConnectionReset),
			unknownOutcome(a.Claim),
		} {
			h.advance(time.Second)
			h.checkReport("k", h.aw("k", p), wantReport{State: items.StateUnknown, Reason: items.ReasonRecorded, Attempt: 1})
		}
		h.checkReport("k", h.aw("k", failedStatus(a.Claim, 404)), wantReport{State: items.StateFailed, Reason: items.ReasonRecorded, Attempt: 1})
		h.checkFailed("k", false, time.Time{})

		for _, c := range []struct {
			name    string
			p       func(claim string) items.AfterWriteParams
			retryAt time.Duration
		}{
			{"validation", func(c string) items.AfterWriteParams { return failedClass(c, items.ClassValidation) }, 0},
			{"429", func(c string) items.AfterWriteParams { return failedStatusRetryAfter(c, 429, 5) }, 5 * time.Second},
		} {
			key := "k-" + c.name
			a := h.unknownAfterTimeout(key)
			h.checkReport(key, h.aw(key, c.p(a.Claim)), wantReport{State: items.StateFailed, Reason: items.ReasonRecorded, Attempt: 1})
			h.checkFailed(key, true, h.now().Add(c.retryAt))
		}
		a = h.unknownAfterTimeout("k-dns")
		h.checkReport("k-dns", h.aw("k-dns", failedClass(a.Claim, items.ClassDNS)), wantReport{State: items.StateFailed, Reason: items.ReasonRecorded, Attempt: 1})
		h.checkBackoff("k-dns", 1)
	})

	t.Run("InFlightPastLeaseIsClassified", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		// The current attempt's own report is classified as for a live lease ("lease live or expired").
		a := h.claim("k", payloadA, lease(60))
		h.advance(90 * time.Second)
		h.checkReport("k", h.aw("k", failedStatusRetryAfter(a.Claim, 503, 30)), wantReport{State: items.StateFailed, Reason: items.ReasonRecorded, Attempt: 1})
		h.checkFailed("k", true, h.now().Add(30*time.Second))
		if it := h.item("k"); it.LeaseExpiresAt != nil {
			t.Errorf("a failed item keeps its lease %v", it.LeaseExpiresAt)
		}
	})

	t.Run("ResultOver4KiBIsDroppedNotTheSuccess", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		result := func(size int) json.RawMessage {
			return json.RawMessage(`{"d":"` + strings.Repeat("x", size-8) + `"}`)
		}
		fits := succeeded(h.claim("fits", payloadA).Claim, "r-1")
		fits.Result = result(items.MaxResultBytes)
		h.checkReport("fits", h.aw("fits", fits), wantReport{State: items.StateSucceeded, Reason: items.ReasonRecorded, Attempt: 1})
		if it := h.item("fits"); len(it.Result) != items.MaxResultBytes {
			t.Errorf("a 4096-byte result was stored as %d bytes", len(it.Result))
		}
		big := succeeded(h.claim("big", payloadA).Claim, "r-2")
		big.Result = result(items.MaxResultBytes + 1)
		h.checkReport("big", h.aw("big", big), wantReport{State: items.StateSucceeded, Reason: items.ReasonRecorded, Attempt: 1, ResultDropped: true})
		it := h.item("big")
		if len(it.Result) != 0 || it.ExternalID != "r-2" {
			t.Errorf("after dropping the result: result %d bytes, external_id %q", len(it.Result), it.ExternalID)
		}
		a := h.bw("big", payloadA)
		h.checkAnswer("big", a, want{Decision: items.Skip, Reason: items.ReasonSucceeded, State: items.StateSucceeded, Attempt: 1})
		if a.ExternalID != "r-2" || len(a.Result) != 0 {
			t.Errorf("replay: external_id %q result %d bytes", a.ExternalID, len(a.Result))
		}
	})
}
