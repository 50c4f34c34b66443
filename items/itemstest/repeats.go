package itemstest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// exerciseRepeats covers "Repeats are per attempt" (API.md, additions of 2026-12-01): a report, finding or
// resolution is an identical repeat only for the item's current attempt. The n8n lookup template sends a
// fixed evidence text per reference, so the same text on a later attempt is the normal path.
func exerciseRepeats(t *testing.T, open func(t *testing.T) items.Store) {
	// The scenario: claim → unknown → absent (E) → attempt 2 → unknown → absent (E) again.
	t.Run("ReconcileSameFindingOnLaterAttemptIsRecorded", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.unknownAfterTimeout("k", dest(destSearchable), lease(5), reference("QT-2026-0417"))
		if _, err := h.reconcile("k", items.FindingAbsent, "", evidenceAbsent); err != nil {
			t.Fatal(err)
		}
		a := h.bw("k", payloadA, lease(5))
		h.checkAnswer("k", a, want{Decision: items.Proceed, Reason: items.ReasonRetry, State: items.StateInFlight, Attempt: 2})
		h.aw("k", failedClass(a.Claim, items.ClassTimeout))
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Reconcile, Reason: items.ReasonLookupRequired, State: items.StateUnknown, Attempt: 2})
		h.advance(time.Minute)
		r, err := h.reconcile("k", items.FindingAbsent, "", evidenceAbsent)
		if err != nil {
			t.Fatal(err)
		}
		h.checkReport("k", r, wantReport{State: items.StateFailed, Reason: items.ReasonRecorded, Attempt: 2})
		if it := h.item("k"); it.ExtraAttempts != 2 || it.Attempts[1].Outcome != items.StateFailed || lastEvent(it).Attempt != 2 {
			t.Errorf("after the second absent: extra_attempts %d, attempt 2 outcome %q, last event %+v", it.ExtraAttempts, it.Attempts[1].Outcome, lastEvent(it))
		}
		// Attempt 3 ends by its lease (lease_seconds 5): the same finding once more is recorded too.
		a = h.bw("k", payloadA, lease(5))
		h.checkAnswer("k", a, want{Decision: items.Proceed, Reason: items.ReasonRetry, State: items.StateInFlight, Attempt: 3})
		h.advance(5 * time.Second)
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Reconcile, Reason: items.ReasonLookupRequired, State: items.StateUnknown, Attempt: 3})
		r, err = h.reconcile("k", items.FindingAbsent, "", evidenceAbsent)
		if err != nil {
			t.Fatal(err)
		}
		h.checkReport("k", r, wantReport{State: items.StateFailed, Reason: items.ReasonRecorded, Attempt: 3})
		// Within one attempt a repeat still changes nothing.
		before := h.item("k")
		r, err = h.reconcile("k", items.FindingAbsent, "", evidenceAbsent)
		if err != nil {
			t.Fatal(err)
		}
		h.checkReport("k", r, wantReport{State: items.StateFailed, Reason: items.ReasonUnchanged, Attempt: 3})
		h.checkUnchanged("k", before)
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Proceed, Reason: items.ReasonRetry, State: items.StateInFlight, Attempt: 4})
	})

	t.Run("LookupFailedOnLaterAttemptNeedsPerson", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.unknownAfterTimeout("k", dest(destSearchable))
		if _, err := h.reconcile("k", items.FindingLookupFailed, "", evidenceAbsent); err != nil {
			t.Fatal(err)
		}
		if _, _, err := h.resolve("k", items.ResolveNotCommitted, "billing has no invoice 742", ""); err != nil {
			t.Fatal(err)
		}
		a := h.claim("k", payloadA)
		h.aw("k", failedClass(a.Claim, items.ClassTimeout))
		r, err := h.reconcile("k", items.FindingLookupFailed, "", evidenceAbsent)
		if err != nil {
			t.Fatal(err)
		}
		h.checkReport("k", r, wantReport{State: items.StateUnknown, Reason: items.ReasonRecorded, Attempt: 2})
		if it := h.item("k"); !it.LookupFailed || !it.NeedsPerson || it.NeedsPersonCause != items.CauseLookupFailed {
			t.Errorf("after lookup_failed on attempt 2: lookup_failed %v needs_person %v (%q)", it.LookupFailed, it.NeedsPerson, it.NeedsPersonCause)
		}
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonAwaitingOwner, State: items.StateUnknown,
			Attempt: 2, NeedsPerson: true})
	})

	// The resolution variant: a second not_committed with the same evidence text, on a later attempt.
	t.Run("ResolveSameEvidenceOnLaterAttemptIsRecorded", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		const evidence = "billing has no invoice 742"
		h.unknownAfterTimeout("k")
		if _, _, err := h.resolve("k", items.ResolveNotCommitted, evidence, ""); err != nil {
			t.Fatal(err)
		}
		a := h.claim("k", payloadA)
		h.aw("k", failedClass(a.Claim, items.ClassTimeout))
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Skip, Reason: items.ReasonAwaitingOwner, State: items.StateUnknown,
			Attempt: 2, NeedsPerson: true})
		h.advance(time.Minute)
		it, reason, err := h.resolve("k", items.ResolveNotCommitted, evidence, "")
		if err != nil {
			t.Fatal(err)
		}
		if reason != items.ReasonRecorded || it.State != items.StateFailed || it.NeedsPerson || it.ExtraAttempts != 2 ||
			!it.Resolution.At.Equal(h.now()) || countEvents(it, items.EventResolve, items.ReasonRecorded) != 2 {
			t.Errorf("second not_committed: reason %s state %s needs_person %v extra_attempts %d resolution %+v", reason, it.State,
				it.NeedsPerson, it.ExtraAttempts, it.Resolution)
		}
		h.checkAnswer("k", h.bw("k", payloadA), want{Decision: items.Proceed, Reason: items.ReasonRetry, State: items.StateInFlight, Attempt: 3})
		// The same for succeeded: a person's second word on a later attempt settles it.
		a = h.unknownAfterTimeout("s", dest(destOneShot))
		if _, _, err := h.resolve("s", items.ResolveNotCommitted, evidence, ""); err != nil {
			t.Fatal(err)
		}
		a = h.claim("s", payloadA, dest(destOneShot))
		h.aw("s", failedClass(a.Claim, items.ClassValidation))
		if _, _, err := h.resolve("s", items.ResolveNotCommitted, evidence, ""); err != nil {
			t.Fatalf("not_committed of an exhausted item on attempt 2: %v", err)
		}
		h.checkAnswer("s", h.bw("s", payloadA, dest(destOneShot)), want{Decision: items.Proceed, Reason: items.ReasonRetry, State: items.StateInFlight, Attempt: 3})
	})

	t.Run("AfterWriteSameReportOnLaterAttemptIsRecorded", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		first := h.unknownAfterTimeout("k", dest(destKeyed))
		second := h.claim("k", payloadA)
		if second.Reason != items.ReasonRetrySameKey {
			t.Fatalf("second claim %s, want retry_same_key", second.Reason)
		}
		h.checkReport("k", h.aw("k", failedClass(second.Claim, items.ClassTimeout)), wantReport{State: items.StateUnknown, Reason: items.ReasonRecorded, Attempt: 2})
		before := h.item("k")
		h.checkReport("k", h.aw("k", failedClass(second.Claim, items.ClassTimeout)), wantReport{State: items.StateUnknown, Reason: items.ReasonUnchanged, Attempt: 2})
		h.checkUnchanged("k", before)
		// Attempt 1's report again is no longer a repeat for the current attempt: the history takes it.
		h.checkReport("k", h.aw("k", failedClass(first.Claim, items.ClassTimeout)), wantReport{State: items.StateUnknown, Reason: items.ReasonHistoryOnly, Attempt: 1})
		if it := h.item("k"); it.Attempt != 2 || it.State != items.StateUnknown || lastEvent(it).Reason != items.ReasonHistoryOnly {
			t.Errorf("after attempt 1's repeat: attempt %d state %s last event %+v", it.Attempt, it.State, lastEvent(it))
		}
	})

	t.Run("NoItemWaitsForLookupWhileReconcileAnswersUnchanged", func(t *testing.T) {
		t.Parallel()
		store := open(t)
		for n := range 24 {
			t.Run(fmt.Sprintf("sequence-%02d", n), func(t *testing.T) {
				t.Parallel()
				// One store, a clock and ledger per sequence: each sequence moves its own time.
				lookupInvariantSequence(t, newHarness(t, func(*testing.T) items.Store { return store }), n)
			})
		}
	})
}

// lookupInvariantSequence drives an item of a searchable destination through a seeded random sequence of
// every request that can touch it, always with the same evidence texts (as the n8n lookup template does),
// and checks after each step the contract's rule: no request may leave an item where before-write answers
// reconcile/lookup_required while reconcile answers unchanged. The probe is the one finding that could
// answer unchanged: the last one recorded, with its evidence.
func lookupInvariantSequence(t *testing.T, h *harness, n int) {
	const steps = 10
	findings := []struct{ finding, externalID string }{
		{items.FindingAbsent, ""}, {items.FindingFound, "r-7"}, {items.FindingLookupFailed, ""},
	}
	rng := rand.New(rand.NewPCG(uint64(n), 2026))
	key := fmt.Sprintf("k-%d", n)
	claim := ""
	var trace []string
	for range steps {
		var step string
		switch op := rng.IntN(10); { // without a claim yet, 3 and 4 fall through to a reconcile
		case op <= 2:
			a := h.bw(key, payloadA, dest(destSearchable), lease(5))
			step = "before-write " + string(a.Decision)
			if a.Decision == items.Proceed {
				claim = a.Claim
			}
		case op == 3 && claim != "":
			step = "after-write timeout"
			h.aw(key, failedClass(claim, items.ClassTimeout))
		case op == 4 && claim != "":
			step = "after-write validation"
			h.aw(key, failedClass(claim, items.ClassValidation))
		case op == 5:
			step = "lease runs out"
			h.advance(5 * time.Second)
		case op <= 8:
			f := findings[rng.IntN(4)%3] // absent twice as often: the usual finding
			r, err := h.reconcile(key, f.finding, f.externalID, evidenceAbsent)
			step = fmt.Sprintf("reconcile %s: %s%v", f.finding, r.Reason, err)
		default:
			_, reason, err := h.resolve(key, items.ResolveNotCommitted, "billing has no invoice 742", "")
			step = fmt.Sprintf("resolve not_committed: %s%v", reason, err)
		}
		trace = append(trace, step)
		it, err := h.store.Get(h.ctx, h.tenant, key)
		if errors.Is(err, items.ErrNotFound) {
			continue // nothing claimed yet
		} else if err != nil {
			t.Fatal(err)
		}
		a := h.bw(key, payloadA, dest(destSearchable), lease(5))
		if a.Decision == items.Proceed {
			claim = a.Claim
			trace = append(trace, "before-write proceed")
			continue
		}
		if a.Decision != items.Reconcile {
			continue
		}
		last := findings[0]
		for i := len(it.History) - 1; i >= 0; i-- {
			if e := it.History[i]; e.Kind == items.EventReconcile {
				last.finding, last.externalID = e.Outcome, e.ExternalID
				break
			}
		}
		r, err := h.reconcile(key, last.finding, last.externalID, evidenceAbsent)
		trace = append(trace, fmt.Sprintf("probe reconcile %s: %s%v", last.finding, r.Reason, err))
		if err != nil || r.Reason == items.ReasonUnchanged {
			t.Fatalf("%s: before-write answers reconcile/%s, and reconcile %s answers %s (%v), after:\n  %s", key, a.Reason,
				last.finding, r.Reason, err, strings.Join(trace, "\n  "))
		}
	}
}
