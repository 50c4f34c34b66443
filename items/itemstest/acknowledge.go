package itemstest

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

const evidenceAck = "both invoices exist; customer refunded one by hand"

// duplicateEffect makes key succeed on attempt 2 with external id r-2 and then reports attempt 1's success
// with r-1: a succeeded item flagged duplicate_effect that needs a person. It returns attempt 1's report.
func (h *harness) duplicateEffect(key string) items.AfterWriteParams {
	h.t.Helper()
	first := h.claim(key, payloadA)
	h.aw(key, failedStatusRetryAfter(first.Claim, 429, 0))
	second := h.claim(key, payloadA)
	h.aw(key, succeeded(second.Claim, "r-2"))
	dup := succeeded(first.Claim, "r-1")
	if r := h.aw(key, dup); r.Reason != items.ReasonDuplicateEffect {
		h.t.Fatalf("duplicate report on %s: %s", key, r.Reason)
	}
	return dup
}

// staleFailure makes key a retryable failure (429, retry in 60 s) of destEscalating that nobody acted on
// for an hour: the sweeper's rule flags it unresolved_too_long.
func (h *harness) staleFailure(key string) {
	h.t.Helper()
	a := h.claim(key, payloadA, dest(destEscalating))
	h.aw(key, failedStatusRetryAfter(a.Claim, 429, 60))
	h.advance(time.Hour + time.Second) // a store may order changes by a nanosecond past the clock
	if cause := h.markNeedsPerson(key); cause != items.CauseStale {
		h.t.Fatalf("MarkNeedsPerson(%s) = %q, want %s", key, cause, items.CauseStale)
	}
}

func (h *harness) markNeedsPerson(key string) string {
	h.t.Helper()
	cause, err := h.ledger.MarkNeedsPerson(h.ctx, h.tenant, key)
	if err != nil {
		h.t.Fatalf("MarkNeedsPerson(%s): %v", key, err)
	}
	return cause
}

// checkAcknowledged checks that an acknowledgement cleared the need for a person, recorded who, when and on
// what evidence, and left state, attempt and result as before.
func (h *harness) checkAcknowledged(key string, before, it *items.Item, reason items.Reason) {
	h.t.Helper()
	t := h.t
	if reason != items.ReasonRecorded || it.NeedsPerson || it.NeedsPersonCause != "" || it.NeedsPersonSince != nil || it.AlertStatus != "" {
		t.Errorf("acknowledged %s: reason %s needs_person %v (%q, since %v) alert %q", key, reason, it.NeedsPerson, it.NeedsPersonCause,
			it.NeedsPersonSince, it.AlertStatus)
	}
	if it.State != before.State || it.Attempt != before.Attempt || it.ExternalID != before.ExternalID || string(it.Result) != string(before.Result) ||
		it.Retryable != before.Retryable || !equalTimes(it.RetryAt, before.RetryAt) || it.ExtraAttempts != before.ExtraAttempts ||
		it.DuplicateEffect != before.DuplicateEffect {
		t.Errorf("acknowledged %s changed it: state %s→%s attempt %d→%d external_id %q→%q retryable %v→%v retry_at %v→%v", key,
			before.State, it.State, before.Attempt, it.Attempt, before.ExternalID, it.ExternalID, before.Retryable, it.Retryable, before.RetryAt, it.RetryAt)
	}
	for i := range before.Attempts {
		if it.Attempts[i].Outcome != before.Attempts[i].Outcome {
			t.Errorf("acknowledged %s changed attempt %d's outcome %q→%q", key, i+1, before.Attempts[i].Outcome, it.Attempts[i].Outcome)
		}
	}
	if r := it.Resolution; r == nil || r.Outcome != items.ResolveAcknowledged || r.Evidence != evidenceAck || r.By != "ops-anna" ||
		r.ExternalID != "" || !r.At.Equal(h.now()) {
		t.Errorf("resolution %+v", it.Resolution)
	}
	stored := h.item(key)
	if e := lastEvent(stored); e.Kind != items.EventResolve || e.Outcome != items.ResolveAcknowledged || e.By != "ops-anna" ||
		e.Note != evidenceAck || e.From != before.State || e.To != before.State || e.Attempt != before.Attempt {
		t.Errorf("acknowledge event %+v", e)
	}
	if stored.Version != it.Version {
		t.Errorf("the returned item is not the stored one")
	}
}

func equalTimes(a, b *time.Time) bool {
	return (a == nil) == (b == nil) && (a == nil || a.Equal(*b))
}

// exerciseAcknowledge covers resolve outcome acknowledged (API.md, additions of 2026-12-01).
func exerciseAcknowledge(t *testing.T, open func(t *testing.T) items.Store) {
	t.Run("DuplicateEffectIsAcknowledged", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		dup := h.duplicateEffect("k")
		before := h.item("k")
		h.advance(time.Hour)
		it, reason, err := h.resolve("k", items.ResolveAcknowledged, "  "+evidenceAck+"\n", "")
		if err != nil {
			t.Fatal(err)
		}
		h.checkAcknowledged("k", before, it, reason)
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonSucceeded, State: items.StateSucceeded, Attempt: 2})
		// Acknowledged stays acknowledged: the sweeper does not ask again, a repeat and the duplicate report's
		// retry change nothing.
		h.advance(24 * time.Hour)
		if cause := h.markNeedsPerson("k"); cause != "" {
			t.Errorf("the sweeper flags an acknowledged duplicate effect again: %s", cause)
		}
		acked := h.item("k")
		again, reason, err := h.resolve("k", items.ResolveAcknowledged, evidenceAck, "")
		if err != nil || reason != items.ReasonUnchanged || again.Version != acked.Version {
			t.Errorf("repeated acknowledgement: %s, %v", reason, err)
		}
		h.checkReport("k", h.aw("k", dup), wantReport{State: items.StateSucceeded, Reason: items.ReasonDuplicateEffect, Attempt: 1})
		h.checkUnchanged("k", acked)
		// Another acknowledgement once it needs no person is refused.
		_, _, err = h.resolve("k", items.ResolveAcknowledged, "a second look, nothing new", "")
		checkCode(t, err, items.CodeConflict)
		// A new duplicate (a third external id) needs a person again, and the same words acknowledge it again.
		h.checkReport("k", h.aw("k", succeeded(before.Attempts[0].Claim, "r-3")), wantReport{State: items.StateSucceeded, Reason: items.ReasonDuplicateEffect, Attempt: 1})
		if it := h.item("k"); !it.NeedsPerson || it.NeedsPersonCause != items.CauseDuplicateEffect {
			t.Fatalf("a new duplicate: needs_person %v (%q)", it.NeedsPerson, it.NeedsPersonCause)
		}
		if _, reason, err := h.resolve("k", items.ResolveAcknowledged, evidenceAck, ""); err != nil || reason != items.ReasonRecorded {
			t.Errorf("acknowledging the new duplicate with the same words: %s, %v", reason, err)
		}
		if it := h.item("k"); it.NeedsPerson || countEvents(it, items.EventResolve, items.ReasonRecorded) != 2 {
			t.Errorf("after the second acknowledgement: needs_person %v, resolve events %d", it.NeedsPerson, countEvents(it, items.EventResolve, items.ReasonRecorded))
		}
	})

	t.Run("StaleRetryableFailureIsAcknowledged", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.staleFailure("k")
		before := h.item("k")
		it, reason, err := h.resolve("k", items.ResolveAcknowledged, evidenceAck, "")
		if err != nil {
			t.Fatal(err)
		}
		h.checkAcknowledged("k", before, it, reason)
		// Not flagged again in this attempt, however long it waits.
		h.advance(3 * time.Hour)
		if cause := h.markNeedsPerson("k"); cause != "" {
			t.Errorf("the sweeper flags an acknowledged failure again in the same attempt: %s", cause)
		}
		// Nor when max_attempts is lowered under it (the person took it over), which flags a failure nobody
		// acknowledged.
		cfg := h.ledger.Config()
		cfg.Destinations = maps.Clone(cfg.Destinations)
		d := cfg.Destinations[destEscalating]
		d.MaxAttempts = 1
		cfg.Destinations[destEscalating] = d
		lowered, err := items.NewLedger(h.ctx, h.store, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if cause := lowered.NeedsPersonCause(h.item("k"), h.now()); cause != "" {
			t.Errorf("with max_attempts lowered, the sweeper flags an acknowledged failure: %s", cause)
		}
		h.staleFailure("other")
		other := h.item("other")
		other.NeedsPerson = false
		if cause := lowered.NeedsPersonCause(other, h.now()); cause != items.CauseAttemptsExhausted {
			t.Errorf("with max_attempts lowered, a failure nobody acknowledged: %q, want %s", cause, items.CauseAttemptsExhausted)
		}
		// The retry is still there: the next before-write proceeds; a new attempt left alone is flagged again.
		a := h.bw("k", payloadA, dest(destEscalating))
		h.checkAnswer("k", a, want{Decision: items.Proceed, Reason: items.ReasonRetry, State: items.StateInFlight, Attempt: 2})
		h.aw("k", failedStatusRetryAfter(a.Claim, 429, 60))
		h.advance(time.Hour + time.Second)
		if cause := h.markNeedsPerson("k"); cause != items.CauseStale {
			t.Errorf("a new attempt nobody acts on: MarkNeedsPerson = %q, want %s", cause, items.CauseStale)
		}
	})

	t.Run("OtherItemsConflict", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		setups := map[string]func(key string){
			"succeeded_without_duplicate": func(key string) { h.aw(key, succeeded(h.claim(key, payloadA).Claim, "r-1")) },
			"in_flight":                   func(key string) { h.claim(key, payloadA) },
			"unknown_needing_person":      func(key string) { h.unknownAfterTimeout(key) },
			"unknown_keyed":               func(key string) { h.unknownAfterTimeout(key, dest(destKeyed)) },
			"failed_retryable_not_flagged": func(key string) {
				h.aw(key, failedStatusRetryAfter(h.claim(key, payloadA).Claim, 429, 30))
			},
			"failed_attempts_exhausted": func(key string) {
				h.aw(key, failedClass(h.claim(key, payloadA, dest(destOneShot)).Claim, items.ClassValidation))
			},
			"failed_permanent": func(key string) { h.aw(key, failedStatus(h.claim(key, payloadA).Claim, 422)) },
			// unresolved_too_long on an unknown item: succeeded or not_committed settle it, not acknowledged.
			"unknown_flagged_unresolved_too_long": func(key string) {
				h.unknownAfterTimeout(key, dest(destEscalating))
				h.advance(time.Hour + time.Second)
				if cause := h.markNeedsPerson(key); cause != items.CauseStale {
					t.Fatalf("MarkNeedsPerson(%s) = %q, want %s", key, cause, items.CauseStale)
				}
			},
		}
		for name, setup := range setups {
			key := "k-" + name
			setup(key)
			before := h.item(key)
			_, _, err := h.resolve(key, items.ResolveAcknowledged, evidenceAck, "")
			checkCode(t, err, items.CodeConflict)
			h.checkUnchanged(key, before)
		}
		// The other outcomes do not settle what acknowledged is for.
		h.duplicateEffect("dup")
		h.staleFailure("stale")
		for _, key := range []string{"dup", "stale"} {
			before := h.item(key)
			for _, outcome := range []string{items.ResolveSucceeded, items.ResolveNotCommitted} {
				_, _, err := h.resolve(key, outcome, evidenceAck, "")
				checkCode(t, err, items.CodeConflict)
				var e *items.Error
				if errors.As(err, &e) && !strings.Contains(e.Message, "acknowledged") {
					t.Errorf("%s %s: the conflict does not point to acknowledged: %q", key, outcome, e.Message)
				}
			}
			h.checkUnchanged(key, before)
		}
	})

	t.Run("ExternalIDIsRefused", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.duplicateEffect("k")
		before := h.item("k")
		_, _, err := h.resolve("k", items.ResolveAcknowledged, evidenceAck, "r-1")
		var e *items.Error
		if !errors.As(err, &e) || e.Code != items.CodeInvalid || e.Fields[0].Field != "external_id" {
			t.Errorf("acknowledged with an external id: %v, want invalid external_id", err)
		}
		_, _, err = h.resolve("k", items.ResolveAcknowledged, " seen it ", "")
		if !errors.As(err, &e) || e.Code != items.CodeInvalid || e.Fields[0].Field != "evidence" {
			t.Errorf("acknowledged with short evidence: %v, want invalid evidence", err)
		}
		h.checkUnchanged("k", before)
	})
}
