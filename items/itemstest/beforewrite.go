package itemstest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// exerciseBeforeWrite covers every row of the before-write table (API.md), first match wins.
func exerciseBeforeWrite(t *testing.T, open func(t *testing.T) items.Store) {
	t.Run("Row01_NewKeyProceeds", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		key := "wf-reminders:invoice-742:reminder:2"
		a := h.bw(key, payloadA, reference("QT-2026-0417"), execution("1234"), lease(60))
		h.checkAnswer(key, a, want{Decision: items.Proceed, Reason: items.ReasonNew, State: items.StateInFlight, Attempt: 1})
		if want := epoch.Add(60 * time.Second); a.LeaseExpiresAt == nil || !a.LeaseExpiresAt.Equal(want) {
			t.Errorf("lease_expires_at = %v, want %v", a.LeaseExpiresAt, want)
		}
		if a.Reference != "QT-2026-0417" {
			t.Errorf("reference = %q", a.Reference)
		}
		secret, err := h.store.LedgerSecret(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := items.IdempotencyKey(secret, tenantA, key); a.IdempotencyKey != want || len(a.IdempotencyKey) != 35 {
			t.Errorf("idempotency_key = %q, want %q (ik_ + 32 hex)", a.IdempotencyKey, want)
		}
		it := h.checkHistory(key, items.EventClaimed)
		if it.Fingerprint != h.fingerprint(payloadA) || it.Destination != destDefault || it.Dedupe != items.DedupeNone ||
			it.Reference != "QT-2026-0417" || it.Attempt != 1 || it.ExtraAttempts != 0 {
			t.Errorf("stored item: fingerprint %s destination %s dedupe %s reference %s attempt %d", it.Fingerprint,
				it.Destination, it.Dedupe, it.Reference, it.Attempt)
		}
		if it.Workflow != "wf-reminders" || it.Object != "invoice-742" || it.Action != "reminder" || it.Sequence != "2" {
			t.Errorf("labels = %s/%s/%s/%s, want the parts of the key", it.Workflow, it.Object, it.Action, it.Sequence)
		}
		if len(it.Attempts) != 1 || it.Attempts[0].Number != 1 || it.Attempts[0].Claim != a.Claim ||
			it.Attempts[0].ExecutionID != "1234" || !it.Attempts[0].StartedAt.Equal(epoch) || it.Attempts[0].Outcome != "" {
			t.Errorf("attempts = %+v", it.Attempts)
		}
		if e := it.History[0]; e.Decision != items.Proceed || e.Reason != items.ReasonNew || e.Attempt != 1 ||
			e.To != items.StateInFlight || e.ExecutionID != "1234" || e.Fingerprint != it.Fingerprint || !e.At.Equal(epoch) {
			t.Errorf("claim event = %+v", e)
		}
		if !it.CreatedAt.Equal(epoch) || it.Tenant != tenantA || it.Key != key {
			t.Errorf("tenant %s key %s created_at %v", it.Tenant, it.Key, it.CreatedAt)
		}
	})

	t.Run("Row01_PreparedProceeds", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		idx := 3
		prep, err := items.NewPrepared(items.BeforeWriteParams{Tenant: tenantA, Key: "k", Fingerprint: h.fingerprint(payloadA),
			BatchID: "exec-1:Send", BatchIndex: &idx}, h.now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.store.Transition(h.ctx, tenantA, "k", func(cur *items.Item) (*items.Item, error) {
			if cur != nil {
				t.Errorf("a fresh store holds %s", cur.Key)
			}
			return prep, nil
		}); err != nil {
			t.Fatal(err)
		}
		if it := h.item("k"); it.State != items.StatePrepared || it.Attempt != 0 || it.Claim != "" {
			t.Fatalf("prepared item is %s at attempt %d", it.State, it.Attempt)
		}
		h.advance(time.Minute)
		// A prepared item was never dispatched: a changed payload is still row 1, not a conflict.
		a := h.bw("k", payloadB)
		h.checkAnswer("k", a, want{Decision: items.Proceed, Reason: items.ReasonNew, State: items.StateInFlight, Attempt: 1})
		it := h.checkHistory("k", items.EventPrepared, items.EventClaimed)
		if it.Fingerprint != h.fingerprint(payloadB) || it.BatchID != "exec-1:Send" || it.BatchIndex == nil || *it.BatchIndex != 3 {
			t.Errorf("after the claim: fingerprint %s batch %s/%v", it.Fingerprint, it.BatchID, it.BatchIndex)
		}
		if e := it.History[1]; e.From != items.StatePrepared || e.Reason != items.ReasonNew {
			t.Errorf("claim event %+v, want from prepared", e)
		}
	})

	t.Run("Row01_DedupeFromRequestElseDestinationElseNone", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		for _, c := range []struct {
			key  string
			opts []bwOpt
			want items.Dedupe
		}{
			{"request-wins", []bwOpt{dest(destKeyed), dedupe(items.DedupeLookup)}, items.DedupeLookup},
			{"request-none-wins", []bwOpt{dest(destKeyed), dedupe(items.DedupeNone)}, items.DedupeNone},
			{"destination", []bwOpt{dest(destSearchable)}, items.DedupeLookup},
			{"fallback", []bwOpt{dest("unconfigured")}, items.DedupeNone},
		} {
			h.claim(c.key, payloadA, c.opts...)
			it := h.item(c.key)
			if it.Dedupe != c.want || it.Attempts[0].Dedupe != c.want {
				t.Errorf("%s: recorded dedupe %s (attempt %s), want %s", c.key, it.Dedupe, it.Attempts[0].Dedupe, c.want)
			}
		}
	})

	t.Run("Row01_LeaseFromRequestElseDestination", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		if a := h.claim("default-lease", payloadA); !a.LeaseExpiresAt.Equal(epoch.Add(items.DefaultLeaseSeconds * time.Second)) {
			t.Errorf("default lease ends %v", a.LeaseExpiresAt)
		}
		if a := h.claim("short-lease", payloadA, lease(items.MinLeaseSeconds)); !a.LeaseExpiresAt.Equal(epoch.Add(5 * time.Second)) {
			t.Errorf("5 s lease ends %v", a.LeaseExpiresAt)
		}
	})

	// Row 2 beats every row below it: a changed payload after a possible dispatch is a conflict whatever
	// the state, and writes nothing.
	t.Run("Row02_ChangedPayloadAfterDispatchConflicts", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		for _, c := range []struct {
			name   string
			state  items.State
			setup  func(key string)
			answer want
		}{
			{"in_flight", items.StateInFlight, func(key string) { h.claim(key, payloadA) },
				want{Decision: items.Conflict, Reason: items.ReasonFingerprintMismatch, State: items.StateInFlight, Attempt: 1}},
			{"succeeded_beats_row03", items.StateSucceeded, func(key string) {
				h.aw(key, succeeded(h.claim(key, payloadA).Claim, "r-1"))
			}, want{Decision: items.Conflict, Reason: items.ReasonFingerprintMismatch, State: items.StateSucceeded, Attempt: 1}},
			{"failed_permanent", items.StateFailed, func(key string) {
				h.aw(key, failedStatus(h.claim(key, payloadA).Claim, 422))
			}, want{Decision: items.Conflict, Reason: items.ReasonFingerprintMismatch, State: items.StateFailed, Attempt: 1}},
			{"failed_retryable_after_429", items.StateFailed, func(key string) {
				h.aw(key, failedStatusRetryAfter(h.claim(key, payloadA).Claim, 429, 0))
			}, want{Decision: items.Conflict, Reason: items.ReasonFingerprintMismatch, State: items.StateFailed, Attempt: 1}},
			{"unknown_keyed", items.StateUnknown, func(key string) { h.unknownAfterTimeout(key, dest(destKeyed)) },
				want{Decision: items.Conflict, Reason: items.ReasonFingerprintMismatch, State: items.StateUnknown, Attempt: 1}},
			{"unknown_without_dedupe", items.StateUnknown, func(key string) { h.unknownAfterTimeout(key) },
				want{Decision: items.Conflict, Reason: items.ReasonFingerprintMismatch, State: items.StateUnknown, Attempt: 1, NeedsPerson: true}},
		} {
			key := "conflict-" + c.name
			c.setup(key)
			before := h.item(key)
			a := h.bw(key, payloadB)
			h.checkAnswer(key, a, c.answer)
			h.checkUnchanged(key, before)
			if it := h.item(key); it.Fingerprint != h.fingerprint(payloadA) {
				t.Errorf("%s: a conflict replaced the fingerprint", c.name)
			}
		}
	})

	t.Run("Row02_SamePayloadInAnotherFormIsNotAConflict", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.claim("k", payloadA)
		h.checkAnswer("k", h.bw("k", payloadA2), want{Decision: items.Skip, Reason: items.ReasonInProgress,
			State: items.StateInFlight, Attempt: 1, RetryAfter: items.DefaultLeaseSeconds})
	})

	t.Run("Row02_ConflictRecordsOnlyLeaseExpiry", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.claim("k", payloadA, dest(destKeyed), lease(60))
		before := h.item("k")
		h.advance(61 * time.Second)
		a := h.bw("k", payloadB)
		h.checkAnswer("k", a, want{Decision: items.Conflict, Reason: items.ReasonFingerprintMismatch, State: items.StateUnknown, Attempt: 1})
		it := h.checkHistory("k", items.EventClaimed, items.EventLeaseExpired)
		if it.Version != before.Version+1 || it.Cause != items.CauseLeaseExpired || it.Attempt != 1 || len(it.Attempts) != 1 ||
			it.Fingerprint != before.Fingerprint || it.Claim != before.Claim || it.Attempts[0].Outcome != items.StateUnknown {
			t.Errorf("after the conflict: version %d (was %d) cause %q attempt %d fingerprint changed %v outcome %q",
				it.Version, before.Version, it.Cause, it.Attempt, it.Fingerprint != before.Fingerprint, it.Attempts[0].Outcome)
		}
		if e := it.History[1]; e.From != items.StateInFlight || e.To != items.StateUnknown || e.Attempt != 1 || !e.At.Equal(h.now()) {
			t.Errorf("lease_expired event = %+v", e)
		}
	})

	t.Run("Row03_SucceededSkipsWithStoredResult", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		a := h.claim("k", payloadA)
		r := succeeded(a.Claim, "r-55")
		r.Result = json.RawMessage(`{"reminder_id":"r-55","sent":true}`)
		h.aw("k", r)
		before := h.item("k")
		h.advance(48 * time.Hour)
		got := h.bw("k", payloadA2)
		h.checkAnswer("k", got, want{Decision: items.Skip, Reason: items.ReasonSucceeded, State: items.StateSucceeded, Attempt: 1})
		if got.ExternalID != "r-55" || !jsonEqual(t, got.Result, r.Result) {
			t.Errorf("skip/succeeded carries external_id %q result %s, want r-55 and the stored result", got.ExternalID, got.Result)
		}
		h.checkUnchanged("k", before)
	})

	t.Run("Row04_InFlightLeaseLiveSkipsInProgress", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.claim("k", payloadA, lease(60))
		before := h.item("k")
		h.advance(20 * time.Second)
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonInProgress,
			State: items.StateInFlight, Attempt: 1, RetryAfter: 40})
		h.advance(39*time.Second + 500*time.Millisecond)
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonInProgress,
			State: items.StateInFlight, Attempt: 1, RetryAfter: 1})
		h.checkUnchanged("k", before)
	})

	t.Run("Row05_FailedPermanentSkips", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.aw("k", failedStatus(h.claim("k", payloadA).Claim, 422))
		before := h.item("k")
		h.advance(time.Hour)
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonFailedPermanent,
			State: items.StateFailed, Attempt: 1})
		h.checkUnchanged("k", before)
	})

	t.Run("Row06_NoAttemptsLeftSkipsAndNeedsPerson", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		// Three attempts (the default budget), each refused before dispatch.
		for attempt := 1; attempt <= items.DefaultMaxAttempts; attempt++ {
			a := h.bw("k", payloadA)
			reason := items.ReasonRetry
			if attempt == 1 {
				reason = items.ReasonNew
			}
			h.checkAnswer("k", a, want{Decision: items.Proceed, Reason: reason, State: items.StateInFlight, Attempt: attempt})
			h.aw("k", failedClass(a.Claim, items.ClassValidation))
		}
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonAttemptsExhausted,
			State: items.StateFailed, Attempt: 3, NeedsPerson: true})
		it := h.item("k")
		if it.NeedsPersonCause != items.CauseAttemptsExhausted || it.NeedsPersonSince == nil || len(it.Attempts) != 3 {
			t.Errorf("needs_person_cause %q since %v attempts %d", it.NeedsPersonCause, it.NeedsPersonSince, len(it.Attempts))
		}
		if n := countEvents(it, items.EventNeedsPerson, items.CauseAttemptsExhausted); n != 1 {
			t.Errorf("%d needs_person attempts_exhausted events, want 1: %v", n, kinds(it))
		}
		// Asking again changes nothing.
		before := h.item("k")
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonAttemptsExhausted,
			State: items.StateFailed, Attempt: 3, NeedsPerson: true})
		h.checkUnchanged("k", before)
	})

	t.Run("Row06_BeatsRetryLater", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.aw("k", failedStatusRetryAfter(h.claim("k", payloadA, dest(destOneShot)).Claim, 429, 30))
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonAttemptsExhausted,
			State: items.StateFailed, Attempt: 1, NeedsPerson: true})
	})

	t.Run("Row07_RetryTimeNotReachedSkipsRetryLater", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.aw("k", failedStatusRetryAfter(h.claim("k", payloadA).Claim, 429, 30))
		before := h.item("k")
		h.advance(10 * time.Second)
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonRetryLater,
			State: items.StateFailed, Attempt: 1, RetryAfter: 20})
		h.advance(19*time.Second + 100*time.Millisecond)
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonRetryLater,
			State: items.StateFailed, Attempt: 1, RetryAfter: 1})
		h.checkUnchanged("k", before)
		h.advance(900 * time.Millisecond) // exactly the retry time
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Proceed, Reason: items.ReasonRetry,
			State: items.StateInFlight, Attempt: 2})
	})

	t.Run("Row08_RetryProceedsWithNextAttempt", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		first := h.claim("k", payloadA, execution("run-1"))
		h.aw("k", failedClass(first.Claim, items.ClassValidation))
		a := h.bw("k", payloadA, execution("run-2"))
		h.checkAnswer("k", a, want{Decision: items.Proceed, Reason: items.ReasonRetry, State: items.StateInFlight, Attempt: 2})
		if a.Claim == first.Claim || a.IdempotencyKey != first.IdempotencyKey {
			t.Errorf("retry claim %q (first %q), idempotency key %q (first %q): want a new claim and the same key",
				a.Claim, first.Claim, a.IdempotencyKey, first.IdempotencyKey)
		}
		it := h.checkHistory("k", items.EventClaimed, items.EventAfterWrite, items.EventClaimed)
		if len(it.Attempts) != 2 || it.Attempts[1].ExecutionID != "run-2" || it.Attempts[0].Outcome != items.StateFailed ||
			it.Retryable || it.RetryAt != nil || it.FailureClass != "" {
			t.Errorf("after the retry: attempts %+v retryable %v retry_at %v failure_class %q", it.Attempts, it.Retryable, it.RetryAt, it.FailureClass)
		}
		if e := it.History[2]; e.Reason != items.ReasonRetry || e.From != items.StateFailed || e.Attempt != 2 {
			t.Errorf("retry claim event %+v", e)
		}
	})

	t.Run("Row08_ChangedPayloadAcceptedWhenNothingDispatched", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		for _, class := range []items.ErrorClass{items.ClassValidation, items.ClassDNS, items.ClassConnectionRefused} {
			key := "k-" + string(class)
			h.aw(key, failedClass(h.claim(key, payloadA).Claim, class))
			h.advance(2 * time.Second) // past the first backoff (1 s ± 20 %)
			h.checkAnswer(key, h.bw(key, payloadB), want{Decision: items.Proceed, Reason: items.ReasonRetry,
				State: items.StateInFlight, Attempt: 2})
			it := h.item(key)
			fa, fb := h.fingerprint(payloadA), h.fingerprint(payloadB)
			if it.Fingerprint != fb || it.Attempts[0].Fingerprint != fa || it.Attempts[1].Fingerprint != fb {
				t.Errorf("%s: fingerprint %s, attempts %s/%s: want the new one current and both kept", class, it.Fingerprint,
					it.Attempts[0].Fingerprint, it.Attempts[1].Fingerprint)
			}
			if it.History[0].Fingerprint != fa || lastEvent(it).Fingerprint != fb {
				t.Errorf("%s: the history does not keep both fingerprints: %+v", class, it.History)
			}
		}
	})

	t.Run("Row08_ChangedPayloadAfterPossibleDispatchConflicts", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		// Attempt 1 reached the destination (429); attempt 2 was refused before dispatch. The item is failed
		// and retryable, but a changed payload is still a conflict: row 2 comes first.
		h.aw("k", failedStatusRetryAfter(h.claim("k", payloadA).Claim, 429, 0))
		h.aw("k", failedClass(h.claim("k", payloadA).Claim, items.ClassDNS))
		h.advance(time.Minute)
		before := h.item("k")
		h.checkAnswer("k", h.bw("k", payloadB), want{Decision: items.Conflict, Reason: items.ReasonFingerprintMismatch,
			State: items.StateFailed, Attempt: 2})
		h.checkUnchanged("k", before)
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Proceed, Reason: items.ReasonRetry,
			State: items.StateInFlight, Attempt: 3})
	})

	t.Run("Row09_UnknownWithLookupAsksForReconcile", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.unknownAfterTimeout("k", dest(destSearchable), reference("QT-2026-0417"))
		before := h.item("k")
		a := h.bw("k", payloadA)
		h.checkAnswer("k", a, want{Decision: items.Reconcile, Reason: items.ReasonLookupRequired, State: items.StateUnknown, Attempt: 1})
		if a.Reference != "QT-2026-0417" {
			t.Errorf("reconcile answer reference = %q", a.Reference)
		}
		h.checkUnchanged("k", before)
	})

	t.Run("Row09_RecordedDedupeDecides", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		// The request's mode was recorded with the attempt; the destination's configuration does not decide.
		h.unknownAfterTimeout("lookup-on-keyed", dest(destKeyed), dedupe(items.DedupeLookup))
		h.checkAnswer("lookup-on-keyed", h.bw("lookup-on-keyed", payloadA), want{Decision: items.Reconcile,
			Reason: items.ReasonLookupRequired, State: items.StateUnknown, Attempt: 1})
		h.unknownAfterTimeout("key-on-searchable", dest(destSearchable), dedupe(items.DedupeKey))
		h.checkAnswer("key-on-searchable", h.bw("key-on-searchable", payloadA), want{Decision: items.Proceed,
			Reason: items.ReasonRetrySameKey, State: items.StateInFlight, Attempt: 2})
	})

	t.Run("Row09_AfterFailedLookupAwaitsOwner", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.unknownAfterTimeout("k", dest(destSearchable))
		if _, err := h.reconcile("k", items.FindingLookupFailed, "", "search API answered 500 twice"); err != nil {
			t.Fatal(err)
		}
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonAwaitingOwner,
			State: items.StateUnknown, Attempt: 1, NeedsPerson: true})
		if it := h.item("k"); it.NeedsPersonCause != items.CauseLookupFailed {
			t.Errorf("needs_person_cause = %q, want lookup_failed", it.NeedsPersonCause)
		}
	})

	t.Run("Row10_UnknownWithKeyRetriesSameKey", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		first := h.unknownAfterTimeout("k", dest(destKeyed))
		h.advance(time.Minute)
		a := h.bw("k", payloadA, lease(30))
		h.checkAnswer("k", a, want{Decision: items.Proceed, Reason: items.ReasonRetrySameKey, State: items.StateInFlight, Attempt: 2})
		if a.IdempotencyKey != first.IdempotencyKey || a.Claim == first.Claim || !a.LeaseExpiresAt.Equal(h.now().Add(30*time.Second)) {
			t.Errorf("same-key retry: idempotency key %q (first %q), claim %q (first %q), lease %v", a.IdempotencyKey,
				first.IdempotencyKey, a.Claim, first.Claim, a.LeaseExpiresAt)
		}
		it := h.checkHistory("k", items.EventClaimed, items.EventAfterWrite, items.EventClaimed)
		if it.Attempts[0].Outcome != items.StateUnknown || it.Cause != "" || it.NeedsPerson {
			t.Errorf("after the retry: attempt 1 outcome %q, cause %q, needs_person %v", it.Attempts[0].Outcome, it.Cause, it.NeedsPerson)
		}
		if e := lastEvent(it); e.From != items.StateUnknown || e.Reason != items.ReasonRetrySameKey {
			t.Errorf("claim event %+v", e)
		}
	})

	t.Run("Row10_ExpiredLeaseWithKeyRetriesSameKey", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.claim("k", payloadA, dest(destKeyed), lease(60))
		h.advance(60 * time.Second) // the lease ends exactly now
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Proceed, Reason: items.ReasonRetrySameKey,
			State: items.StateInFlight, Attempt: 2})
		it := h.checkHistory("k", items.EventClaimed, items.EventLeaseExpired, items.EventClaimed)
		if it.Attempts[0].Outcome != items.StateUnknown {
			t.Errorf("attempt 1 outcome %q, want unknown", it.Attempts[0].Outcome)
		}
	})

	t.Run("Row10_AttemptBudgetExhaustedAwaitsOwner", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		a := h.unknownAfterTimeout("k", dest(destKeyed))
		for attempt := 2; attempt <= items.DefaultMaxAttempts; attempt++ {
			a = h.bw("k", payloadA)
			h.checkAnswer("k", a, want{Decision: items.Proceed, Reason: items.ReasonRetrySameKey, State: items.StateInFlight, Attempt: attempt})
			h.aw("k", failedClass(a.Claim, items.ClassTimeout))
		}
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonAwaitingOwner,
			State: items.StateUnknown, Attempt: 3, NeedsPerson: true})
		if it := h.item("k"); it.NeedsPersonCause != items.CauseAwaitingOwner {
			t.Errorf("needs_person_cause = %q", it.NeedsPersonCause)
		}
	})

	t.Run("Row10_KeyRetentionPassedAwaitsOwner", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.unknownAfterTimeout("k", dest(destShortRetention))
		h.advance((shortRetention - 1) * time.Second)
		a := h.bw("k", payloadA)
		h.checkAnswer("k", a, want{Decision: items.Proceed, Reason: items.ReasonRetrySameKey, State: items.StateInFlight, Attempt: 2})
		h.aw("k", failedClass(a.Claim, items.ClassTimeout))
		// The retention counts from the first dispatch under this key, not from the latest attempt.
		h.advance(time.Second)
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonAwaitingOwner,
			State: items.StateUnknown, Attempt: 2, NeedsPerson: true})

		// The default retention is a day.
		h.unknownAfterTimeout("default-retention", dest(destKeyed))
		h.advance(items.DefaultKeyRetentionSeconds * time.Second)
		h.checkAnswer("default-retention", h.bw("default-retention", payloadA), want{Decision: items.Skip,
			Reason: items.ReasonAwaitingOwner, State: items.StateUnknown, Attempt: 1, NeedsPerson: true})
	})

	t.Run("Row10_RetentionCountsFromFirstPossibleDispatch", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		// Attempt 1 never left (dns): the destination cannot have stored the key then.
		h.aw("k", failedClass(h.claim("k", payloadA, dest(destShortRetention)).Claim, items.ClassDNS))
		h.advance(3000 * time.Second)
		a := h.bw("k", payloadA)
		h.checkAnswer("k", a, want{Decision: items.Proceed, Reason: items.ReasonRetry, State: items.StateInFlight, Attempt: 2})
		h.aw("k", failedClass(a.Claim, items.ClassTimeout))
		h.advance((shortRetention - 1) * time.Second)
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Proceed, Reason: items.ReasonRetrySameKey,
			State: items.StateInFlight, Attempt: 3})
	})

	t.Run("Row11_UnknownWithoutDedupeAwaitsOwner", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.unknownAfterTimeout("k")
		it := h.item("k")
		if !it.NeedsPerson || it.NeedsPersonCause != items.CauseNoDedupe {
			t.Errorf("an unknown item without dedupe: needs_person %v cause %q", it.NeedsPerson, it.NeedsPersonCause)
		}
		for range 3 {
			h.advance(time.Hour)
			h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonAwaitingOwner,
				State: items.StateUnknown, Attempt: 1, NeedsPerson: true})
		}
		h.checkUnchanged("k", it)
	})

	t.Run("Row11_ExpiredLeaseWithoutDedupeAwaitsOwner", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.claim("k", payloadA, lease(60))
		h.advance(60 * time.Second)
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonAwaitingOwner,
			State: items.StateUnknown, Attempt: 1, NeedsPerson: true})
		it := h.checkHistory("k", items.EventClaimed, items.EventLeaseExpired, items.EventNeedsPerson)
		if it.Cause != items.CauseLeaseExpired || it.NeedsPersonSince == nil || !it.NeedsPersonSince.Equal(h.now()) {
			t.Errorf("cause %q needs_person_since %v", it.Cause, it.NeedsPersonSince)
		}
		h.advance(time.Hour)
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonAwaitingOwner,
			State: items.StateUnknown, Attempt: 1, NeedsPerson: true})
		h.checkUnchanged("k", it)
	})

	t.Run("Row11_LookupModeWithoutRetryAwaitsOwner", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		// Lookup mode never retries blindly, even with attempts left: reconcile, then a person.
		h.unknownAfterTimeout("k", dest(destSearchable))
		if _, err := h.reconcile("k", items.FindingLookupFailed, "", "search index is down for hours"); err != nil {
			t.Fatal(err)
		}
		h.advance(time.Minute)
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonAwaitingOwner,
			State: items.StateUnknown, Attempt: 1, NeedsPerson: true})
	})

	t.Run("Batch_DecidedInOrderAgainstEarlierItems", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.aw("done", succeeded(h.claim("done", payloadA).Claim, "r-9"))
		ps := []items.BeforeWriteParams{
			h.params("k1", payloadA), h.params("k2", payloadA), h.params("k1", payloadA), h.params("k1", payloadB),
			h.params("done", payloadA),
		}
		answers, err := h.ledger.BeforeWriteMany(h.ctx, tenantA, ps)
		if err != nil {
			t.Fatal(err)
		}
		wants := []want{
			{Decision: items.Proceed, Reason: items.ReasonNew, State: items.StateInFlight, Attempt: 1},
			{Decision: items.Proceed, Reason: items.ReasonNew, State: items.StateInFlight, Attempt: 1},
			{Decision: items.Skip, Reason: items.ReasonInProgress, State: items.StateInFlight, Attempt: 1, RetryAfter: items.DefaultLeaseSeconds},
			{Decision: items.Conflict, Reason: items.ReasonFingerprintMismatch, State: items.StateInFlight, Attempt: 1},
			{Decision: items.Skip, Reason: items.ReasonSucceeded, State: items.StateSucceeded, Attempt: 1},
		}
		if len(answers) != len(wants) {
			t.Fatalf("%d answers for %d requests", len(answers), len(wants))
		}
		for i, w := range wants {
			h.checkAnswer(ps[i].Key, answers[i], w)
		}
		if answers[4].ExternalID != "r-9" {
			t.Errorf("batch skip/succeeded external_id = %q", answers[4].ExternalID)
		}
		if it := h.checkHistory("k1", items.EventClaimed); it.Claim != answers[0].Claim {
			t.Errorf("k1 claim %q, want the first answer's %q", it.Claim, answers[0].Claim)
		}
	})
}
