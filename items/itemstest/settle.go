package itemstest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

const (
	evidenceFound  = "billing search for QT-2026-0417 shows invoice r-7"
	evidenceAbsent = "billing search for QT-2026-0417 finds nothing"
)

// exerciseReconcile covers POST /v1/reconcile: a workflow's lookup of an unknown item's reference.
func exerciseReconcile(t *testing.T, open func(t *testing.T) items.Store) {
	t.Run("FoundSucceeds", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.unknownAfterTimeout("k", dest(destSearchable), reference("QT-2026-0417"))
		h.advance(time.Minute)
		r, err := h.reconcile("k", items.FindingFound, "r-7", "  "+evidenceFound+"  ")
		if err != nil {
			t.Fatal(err)
		}
		h.checkReport("k", r, wantReport{State: items.StateSucceeded, Reason: items.ReasonRecorded, Attempt: 1})
		it := h.checkHistory("k", items.EventClaimed, items.EventAfterWrite, items.EventReconcile)
		if it.ExternalID != "r-7" || it.NeedsPerson || it.Cause != "" || it.Attempts[0].Outcome != items.StateSucceeded {
			t.Errorf("after found: external_id %q needs_person %v cause %q outcome %q", it.ExternalID, it.NeedsPerson, it.Cause, it.Attempts[0].Outcome)
		}
		if e := lastEvent(it); e.Outcome != items.FindingFound || e.Note != evidenceFound || e.By != "wf-token" ||
			e.From != items.StateUnknown || e.To != items.StateSucceeded || e.ExternalID != "r-7" || !e.At.Equal(h.now()) {
			t.Errorf("reconcile event %+v", e)
		}
		a := h.bw("k", payloadA)
		h.checkAnswer("k", a, want{Decision: items.Skip, Reason: items.ReasonSucceeded, State: items.StateSucceeded, Attempt: 1})
		if a.ExternalID != "r-7" {
			t.Errorf("replay external_id %q", a.ExternalID)
		}
	})

	t.Run("AbsentGrantsOneAttempt", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		first := h.unknownAfterTimeout("k", dest(destSearchableOneShot))
		r, err := h.reconcile("k", items.FindingAbsent, "", evidenceAbsent)
		if err != nil {
			t.Fatal(err)
		}
		h.checkReport("k", r, wantReport{State: items.StateFailed, Reason: items.ReasonRecorded, Attempt: 1})
		h.checkFailed("k", true, h.now())
		if it := h.item("k"); it.ExtraAttempts != 1 || it.Attempts[0].Outcome != items.StateFailed {
			t.Errorf("extra_attempts %d, attempt 1 outcome %q", it.ExtraAttempts, it.Attempts[0].Outcome)
		}
		// One attempt beyond the budget of 1, under the same key; then none.
		a := h.bw("k", payloadA)
		h.checkAnswer("k", a, want{Decision: items.Proceed, Reason: items.ReasonRetry, State: items.StateInFlight, Attempt: 2})
		if a.IdempotencyKey != first.IdempotencyKey {
			t.Errorf("the retry after absent changed the idempotency key")
		}
		h.aw("k", failedClass(a.Claim, items.ClassValidation))
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonAttemptsExhausted,
			State: items.StateFailed, Attempt: 2, NeedsPerson: true})
	})

	t.Run("LookupFailedLeavesItForAPerson", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.unknownAfterTimeout("k", dest(destSearchable))
		r, err := h.reconcile("k", items.FindingLookupFailed, "", "search API answered 500 three times")
		if err != nil {
			t.Fatal(err)
		}
		h.checkReport("k", r, wantReport{State: items.StateUnknown, Reason: items.ReasonRecorded, Attempt: 1})
		it := h.item("k")
		if !it.LookupFailed || it.Cause != items.CauseLookupFailed || !it.NeedsPerson || it.NeedsPersonCause != items.CauseLookupFailed ||
			it.Attempts[0].Outcome != items.StateUnknown {
			t.Errorf("after lookup_failed: lookup_failed %v cause %q needs_person %v (%q) outcome %q", it.LookupFailed, it.Cause,
				it.NeedsPerson, it.NeedsPersonCause, it.Attempts[0].Outcome)
		}
		// Only a person can settle it now.
		_, err = h.reconcile("k", items.FindingAbsent, "", evidenceAbsent)
		checkCode(t, err, items.CodeConflict)
		h.checkUnchanged("k", it)
	})

	t.Run("InFlightPastLeaseCounts", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.claim("k", payloadA, dest(destSearchable), lease(60))
		h.advance(60 * time.Second)
		r, err := h.reconcile("k", items.FindingAbsent, "", evidenceAbsent)
		if err != nil {
			t.Fatal(err)
		}
		h.checkReport("k", r, wantReport{State: items.StateFailed, Reason: items.ReasonRecorded, Attempt: 1})
		h.checkHistory("k", items.EventClaimed, items.EventLeaseExpired, items.EventReconcile)
	})

	t.Run("OnlyForUnknownLookupItems", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		setups := map[string]func(key string){
			"in_flight": func(key string) { h.claim(key, payloadA, dest(destSearchable)) },
			"succeeded": func(key string) { h.aw(key, succeeded(h.claim(key, payloadA, dest(destSearchable)).Claim, "r-1")) },
			"failed": func(key string) {
				h.aw(key, failedStatusRetryAfter(h.claim(key, payloadA, dest(destSearchable)).Claim, 429, 30))
			},
			"unknown_keyed":          func(key string) { h.unknownAfterTimeout(key, dest(destKeyed)) },
			"unknown_without_dedupe": func(key string) { h.unknownAfterTimeout(key) },
			"expired_lease_keyed": func(key string) {
				h.claim(key, payloadA, dest(destKeyed), lease(5))
				h.advance(10 * time.Second)
			},
		}
		for name, setup := range setups {
			key := "k-" + name
			setup(key)
			before := h.item(key)
			for _, finding := range []string{items.FindingFound, items.FindingAbsent, items.FindingLookupFailed} {
				_, err := h.reconcile(key, finding, "r-1", evidenceFound)
				checkCode(t, err, items.CodeConflict)
			}
			h.checkUnchanged(key, before)
		}
	})

	t.Run("IdenticalRepeatIsUnchanged", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		for _, finding := range []string{items.FindingFound, items.FindingAbsent, items.FindingLookupFailed} {
			key := "k-" + finding
			h.unknownAfterTimeout(key, dest(destSearchable))
			first, err := h.reconcile(key, finding, "r-7", evidenceFound)
			if err != nil {
				t.Fatal(err)
			}
			before := h.item(key)
			h.advance(time.Second)
			again, err := h.reconcile(key, finding, "r-7", evidenceFound)
			if err != nil {
				t.Fatalf("%s repeated: %v", finding, err)
			}
			h.checkReport(key, again, wantReport{State: first.State, Reason: items.ReasonUnchanged, Attempt: 1})
			h.checkUnchanged(key, before)
		}
		// Another finding after found is refused: the item is no longer unknown.
		_, err := h.reconcile("k-found", items.FindingAbsent, "", evidenceAbsent)
		checkCode(t, err, items.CodeConflict)
	})

	t.Run("InvalidOrMissing", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.unknownAfterTimeout("k", dest(destSearchable))
		before := h.item("k")
		for _, c := range []struct{ finding, externalID, evidence, field string }{
			{"maybe", "", evidenceAbsent, "finding"},
			{items.FindingAbsent, "", "   too short  ", "evidence"},
			{items.FindingFound, "", evidenceFound, "external_id"},
		} {
			_, err := h.reconcile("k", c.finding, c.externalID, c.evidence)
			var e *items.Error
			if !errors.As(err, &e) || e.Code != items.CodeInvalid || e.Fields[0].Field != c.field {
				t.Errorf("reconcile %q/%q: %v, want invalid %s", c.finding, c.evidence, err, c.field)
			}
		}
		h.checkUnchanged("k", before)
		if _, err := h.reconcile("missing", items.FindingAbsent, "", evidenceAbsent); !errors.Is(err, items.ErrNotFound) {
			t.Errorf("reconcile of a missing key: %v", err)
		}
		if _, err := h.as(tenantB).reconcile("k", items.FindingAbsent, "", evidenceAbsent); !errors.Is(err, items.ErrNotFound) {
			t.Errorf("reconcile of another tenant's key: %v", err)
		}
		h.checkUnchanged("k", before)
	})
}

// exerciseResolve covers POST /v1/items/{key}/resolve: an operator settles an item on evidence.
func exerciseResolve(t *testing.T, open func(t *testing.T) items.Store) {
	t.Run("SucceededRecordsWhoAndEvidence", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.unknownAfterTimeout("k")
		h.advance(time.Hour)
		it, reason, err := h.resolve("k", items.ResolveSucceeded, "  checked billing: invoice 742 was sent  ", "r-9")
		if err != nil {
			t.Fatal(err)
		}
		if reason != items.ReasonRecorded || it.State != items.StateSucceeded || it.ExternalID != "r-9" || it.NeedsPerson || it.AlertStatus != "" {
			t.Errorf("resolved: reason %s state %s external_id %q needs_person %v alert %q", reason, it.State, it.ExternalID, it.NeedsPerson, it.AlertStatus)
		}
		wantRes := items.Resolution{Outcome: items.ResolveSucceeded, Evidence: "checked billing: invoice 742 was sent", ExternalID: "r-9", By: "ops-anna", At: h.now()}
		if r := it.Resolution; r == nil || r.Outcome != wantRes.Outcome || r.Evidence != wantRes.Evidence || r.ExternalID != wantRes.ExternalID ||
			r.By != wantRes.By || !r.At.Equal(wantRes.At) {
			t.Errorf("resolution = %+v, want %+v", it.Resolution, wantRes)
		}
		stored := h.item("k")
		if e := lastEvent(stored); e.Kind != items.EventResolve || e.By != "ops-anna" || e.Note != wantRes.Evidence ||
			e.From != items.StateUnknown || e.To != items.StateSucceeded || e.Outcome != items.ResolveSucceeded {
			t.Errorf("resolve event %+v", e)
		}
		if stored.Version != it.Version || stored.Resolution == nil || stored.Resolution.By != "ops-anna" {
			t.Errorf("the returned item is not the stored one")
		}
		a := h.bw("k", payloadA)
		h.checkAnswer("k", a, want{Decision: items.Skip, Reason: items.ReasonSucceeded, State: items.StateSucceeded, Attempt: 1})
		if a.ExternalID != "r-9" {
			t.Errorf("replay external_id %q", a.ExternalID)
		}
	})

	t.Run("NotCommittedGrantsOneAttempt", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		first := h.unknownAfterTimeout("k", dest(destOneShot))
		it, reason, err := h.resolve("k", items.ResolveNotCommitted, "billing has no invoice 742", "")
		if err != nil {
			t.Fatal(err)
		}
		if reason != items.ReasonRecorded || it.State != items.StateFailed || it.ExtraAttempts != 1 || it.NeedsPerson {
			t.Errorf("not_committed: reason %s state %s extra_attempts %d needs_person %v", reason, it.State, it.ExtraAttempts, it.NeedsPerson)
		}
		h.checkFailed("k", true, h.now())
		a := h.bw("k", payloadA)
		h.checkAnswer("k", a, want{Decision: items.Proceed, Reason: items.ReasonRetry, State: items.StateInFlight, Attempt: 2})
		if a.IdempotencyKey != first.IdempotencyKey {
			t.Errorf("the retry after not_committed changed the idempotency key")
		}
		h.aw("k", failedClass(a.Claim, items.ClassValidation))
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonAttemptsExhausted,
			State: items.StateFailed, Attempt: 2, NeedsPerson: true})
	})

	t.Run("FailedWithNoAttemptsLeftCanBeResolved", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		for _, outcome := range []string{items.ResolveSucceeded, items.ResolveNotCommitted} {
			key := "k-" + outcome
			h.aw(key, failedClass(h.claim(key, payloadA, dest(destOneShot)).Claim, items.ClassValidation))
			it, _, err := h.resolve(key, outcome, "looked at the destination myself", "")
			if err != nil {
				t.Fatalf("%s: %v", outcome, err)
			}
			wantState := map[string]items.State{items.ResolveSucceeded: items.StateSucceeded, items.ResolveNotCommitted: items.StateFailed}[outcome]
			if it.State != wantState || it.NeedsPerson {
				t.Errorf("%s: state %s needs_person %v", outcome, it.State, it.NeedsPerson)
			}
		}
		h.checkAnswer("k-not_committed", h.bw("k-not_committed", payloadA), want{Decision: items.Proceed, Reason: items.ReasonRetry,
			State: items.StateInFlight, Attempt: 2})
	})

	t.Run("InFlightPastLeaseCounts", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.claim("k", payloadA, dest(destKeyed), lease(60))
		h.advance(time.Minute)
		if _, _, err := h.resolve("k", items.ResolveSucceeded, "the receiver log shows it", "r-1"); err != nil {
			t.Fatal(err)
		}
		h.checkHistory("k", items.EventClaimed, items.EventLeaseExpired, items.EventResolve)
	})

	t.Run("OnlyUnknownOrExhaustedItems", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		setups := map[string]func(key string){
			"in_flight": func(key string) { h.claim(key, payloadA) },
			"succeeded": func(key string) { h.aw(key, succeeded(h.claim(key, payloadA).Claim, "r-1")) },
			"failed_retryable_attempts_left": func(key string) {
				h.aw(key, failedStatusRetryAfter(h.claim(key, payloadA).Claim, 429, 30))
			},
			"failed_permanent_attempts_left": func(key string) { h.aw(key, failedStatus(h.claim(key, payloadA).Claim, 422)) },
			"prepared": func(key string) {
				prep, err := items.NewPrepared(h.params(key, payloadA), h.now())
				if err != nil {
					t.Fatal(err)
				}
				if _, err := h.store.Transition(h.ctx, tenantA, key, func(*items.Item) (*items.Item, error) { return prep, nil }); err != nil {
					t.Fatal(err)
				}
			},
		}
		for name, setup := range setups {
			key := "k-" + name
			setup(key)
			before := h.item(key)
			for _, outcome := range []string{items.ResolveSucceeded, items.ResolveNotCommitted} {
				_, _, err := h.resolve(key, outcome, "looked at the destination myself", "")
				checkCode(t, err, items.CodeConflict)
			}
			h.checkUnchanged(key, before)
		}
	})

	t.Run("IdenticalRepeatIsUnchanged", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.unknownAfterTimeout("k")
		first, _, err := h.resolve("k", items.ResolveNotCommitted, "billing has no invoice 742", "")
		if err != nil {
			t.Fatal(err)
		}
		h.advance(time.Minute)
		again, reason, err := h.resolve("k", items.ResolveNotCommitted, "billing has no invoice 742", "")
		if err != nil {
			t.Fatal(err)
		}
		if reason != items.ReasonUnchanged || again.Version != first.Version || again.State != items.StateFailed ||
			!again.Resolution.At.Equal(first.Resolution.At) {
			t.Errorf("repeat: reason %s version %d (first %d) state %s", reason, again.Version, first.Version, again.State)
		}
		h.checkUnchanged("k", first)
	})

	t.Run("InvalidOrMissing", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.unknownAfterTimeout("k")
		before := h.item("k")
		for _, c := range []struct{ outcome, evidence, field string }{
			{"committed", "looked at the destination myself", "outcome"},
			{items.ResolveSucceeded, " \t short \n", "evidence"},
		} {
			_, _, err := h.resolve("k", c.outcome, c.evidence, "")
			var e *items.Error
			if !errors.As(err, &e) || e.Code != items.CodeInvalid || e.Fields[0].Field != c.field {
				t.Errorf("resolve %q/%q: %v, want invalid %s", c.outcome, c.evidence, err, c.field)
			}
		}
		if _, _, err := h.resolve("missing", items.ResolveSucceeded, "looked at the destination myself", ""); !errors.Is(err, items.ErrNotFound) {
			t.Errorf("resolve of a missing key: %v", err)
		}
		if _, _, err := h.as(tenantB).resolve("k", items.ResolveSucceeded, "looked at the destination myself", ""); !errors.Is(err, items.ErrNotFound) {
			t.Errorf("resolve of another tenant's key: %v", err)
		}
		h.checkUnchanged("k", before)
	})

	t.Run("SecondResolutionConflictSaysWhoResolvedFirst", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.unknownAfterTimeout("k")
		if _, _, err := h.resolve("k", items.ResolveSucceeded, "checked billing: invoice 742 was sent", "r-9"); err != nil {
			t.Fatal(err)
		}
		resolvedAt := h.now()
		h.advance(time.Hour)
		_, _, err := h.resolve("k", items.ResolveNotCommitted, "looked again: billing has no invoice 742", "")
		var e *items.Error
		want := "(resolved as succeeded by ops-anna at " + resolvedAt.UTC().Format(time.RFC3339) + ")"
		if !errors.As(err, &e) || e.Code != items.CodeConflict || !strings.Contains(e.Message, want) {
			t.Errorf("second resolution: %v, want a conflict saying %s", err, want)
		}
	})
}

// exerciseKnowledge checks that knowledge only grows: nothing moves an unknown item to "not sent" except
// a reconcile finding absent or a person's resolution not_committed.
func exerciseKnowledge(t *testing.T, open func(t *testing.T) items.Store) {
	t.Run("UnknownStaysUnknownWithoutEvidence", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		a := h.unknownAfterTimeout("k")
		check := func(step string) {
			t.Helper()
			if it := h.item("k"); it.State != items.StateUnknown || !it.NeedsPerson {
				t.Fatalf("after %s the item is %s (needs_person %v)", step, it.State, it.NeedsPerson)
			}
		}
		for range 3 {
			h.advance(24 * time.Hour)
			if changed, err := h.ledger.ExpireLease(h.ctx, tenantA, "k"); err != nil || changed {
				t.Errorf("a sweep of an unknown item: %v, %v", changed, err)
			}
			if _, err := h.ledger.Get(h.ctx, tenantA, "k"); err != nil {
				t.Fatal(err)
			}
			h.checkAnswer("k", h.bw("k", payloadA, dest(destKeyed), dedupe(items.DedupeKey)), want{Decision: items.Skip,
				Reason: items.ReasonAwaitingOwner, State: items.StateUnknown, Attempt: 1, NeedsPerson: true})
			check("time, sweeps and before-writes")
		}
		for _, p := range []items.AfterWriteParams{failedStatus(a.Claim, 500), failedStatusRetryAfter(a.Claim, 503, 1),
			failedStatus(a.Claim, 409), failedClass(a.Claim, items.ClassOther), unknownOutcome(a.Claim)} {
			h.aw("k", p)
			check("non-definitive evidence")
		}
		for _, finding := range []string{items.FindingAbsent, items.FindingLookupFailed} {
			_, err := h.reconcile("k", finding, "", evidenceAbsent)
			checkCode(t, err, items.CodeConflict)
			check("a reconcile of an item without lookup")
		}
		if _, _, err := h.resolve("k", items.ResolveNotCommitted, "billing has no invoice 742", ""); err != nil {
			t.Fatal(err)
		}
		h.checkFailed("k", true, h.now())
	})

	t.Run("OlderAttemptFailureDoesNotSettleUnknown", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		first := h.unknownAfterTimeout("k", dest(destKeyed))
		second := h.claim("k", payloadA)
		h.aw("k", failedClass(second.Claim, items.ClassTimeout))
		// Attempt 1 now reports a definitive failure: it is not the current attempt, so history only.
		h.checkReport("k", h.aw("k", failedStatus(first.Claim, 404)), wantReport{State: items.StateUnknown, Reason: items.ReasonHistoryOnly, Attempt: 1})
	})

	// A failure of a same-key retry proves only that the retry committed nothing: the earlier attempt may
	// have, so the item stays unknown (the contract's "knowledge only grows"; see the report of this suite).
	t.Run("RetryFailureKeepsEarlierUnknown", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.unknownAfterTimeout("k", dest(destKeyed))
		a := h.claim("k", payloadA)
		h.checkReport("k", h.aw("k", failedClass(a.Claim, items.ClassDNS)), wantReport{State: items.StateUnknown, Reason: items.ReasonRecorded, Attempt: 2})
		it := h.item("k")
		if it.Cause != items.CauseEarlierAttemptUnknown || it.Retryable || it.RetryAt != nil || it.Attempts[1].FailureClass != items.ClassDNS {
			t.Errorf("after a dns failure of the retry: cause %q retryable %v retry_at %v class %q", it.Cause, it.Retryable, it.RetryAt, it.Attempts[1].FailureClass)
		}
		if it.Attempts[0].Outcome != items.StateUnknown || it.Attempts[1].Outcome != items.StateFailed {
			t.Errorf("attempt outcomes %q, %q; want unknown (may have committed) and failed (sent nothing)", it.Attempts[0].Outcome, it.Attempts[1].Outcome)
		}
		// Still within the budget and the key's retention: the same key again, never a blind new write.
		a = h.bw("k", payloadA)
		h.checkAnswer("k", a, want{Decision: items.Proceed, Reason: items.ReasonRetrySameKey, State: items.StateInFlight, Attempt: 3})
		h.checkReport("k", h.aw("k", failedStatusRetryAfter(a.Claim, 429, 600)), wantReport{State: items.StateUnknown, Reason: items.ReasonRecorded, Attempt: 3})
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonAwaitingOwner,
			State: items.StateUnknown, Attempt: 3, NeedsPerson: true})
		// A person's not_committed settles every attempt: a later pre-dispatch failure is a plain failure.
		if _, _, err := h.resolve("k", items.ResolveNotCommitted, "billing has no invoice 742", ""); err != nil {
			t.Fatal(err)
		}
		for _, at := range h.item("k").Attempts {
			if at.Outcome != items.StateFailed {
				t.Errorf("after not_committed attempt %d is %q, want failed", at.Number, at.Outcome)
			}
		}
		a = h.claim("k", payloadA)
		h.checkReport("k", h.aw("k", failedClass(a.Claim, items.ClassValidation)), wantReport{State: items.StateFailed, Reason: items.ReasonRecorded, Attempt: 4})
	})

	t.Run("DefinitiveFailureClearsUnknownsPerson", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		a := h.unknownAfterTimeout("k")
		h.aw("k", failedStatus(a.Claim, 404))
		if it := h.item("k"); it.State != items.StateFailed || it.NeedsPerson || it.NeedsPersonCause != "" {
			t.Errorf("a 404 after a timeout: %s, needs_person %v (%q)", it.State, it.NeedsPerson, it.NeedsPersonCause)
		}
	})

	t.Run("SweepRecordsExpiredLeaseAsUnknown", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.claim("k", payloadA, lease(60))
		before := h.item("k")
		h.advance(59 * time.Second)
		if changed, err := h.ledger.ExpireLease(h.ctx, tenantA, "k"); err != nil || changed {
			t.Errorf("a sweep of a live lease: %v, %v", changed, err)
		}
		h.checkUnchanged("k", before)
		h.advance(time.Second)
		if changed, err := h.ledger.ExpireLease(h.ctx, tenantA, "k"); err != nil || !changed {
			t.Errorf("a sweep of an expired lease: %v, %v", changed, err)
		}
		it := h.checkHistory("k", items.EventClaimed, items.EventLeaseExpired, items.EventNeedsPerson)
		if it.State != items.StateUnknown || it.Cause != items.CauseLeaseExpired || !it.NeedsPerson || it.NeedsPersonCause != items.CauseNoDedupe {
			t.Errorf("after the sweep: %s cause %q needs_person %v (%q)", it.State, it.Cause, it.NeedsPerson, it.NeedsPersonCause)
		}
		if changed, err := h.ledger.ExpireLease(h.ctx, tenantA, "k"); err != nil || changed {
			t.Errorf("a second sweep: %v, %v", changed, err)
		}
		if changed, err := h.ledger.ExpireLease(h.ctx, tenantA, "missing"); err != nil || changed {
			t.Errorf("a sweep of a missing key: %v, %v", changed, err)
		}
	})
}
