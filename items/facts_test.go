package items_test

import (
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

func TestFacts(t *testing.T) {
	t.Parallel()
	since := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	sameKey := items.Event{Kind: items.EventClaimed, Decision: items.Proceed, Reason: items.ReasonRetrySameKey}
	toUnknown := items.Event{Kind: items.EventLeaseExpired, From: items.StateInFlight, To: items.StateUnknown}
	resolve := items.Event{Kind: items.EventResolve, Outcome: "succeeded", By: "U1"}
	ack := func(attempt int) items.Event {
		return items.Event{Kind: items.EventResolve, Attempt: attempt, Outcome: items.ResolveAcknowledged, By: "U1"}
	}
	tests := []struct {
		name string
		it   items.Item
		want items.Facts
	}{
		{"NewClaim", items.Item{State: items.StateInFlight, Attempt: 1}, items.Facts{Attempt: 1}},
		{"RecoveredBySameKeyRetry", items.Item{State: items.StateSucceeded, Attempt: 2,
			History: []items.Event{toUnknown, sameKey, {Kind: items.EventAfterWrite, To: items.StateSucceeded}}},
			items.Facts{Attempt: 2, SameKeyRecovered: true, EnteredUnknown: true}},
		{"SameKeyRetryNotYetSucceeded", items.Item{State: items.StateInFlight, Attempt: 2, History: []items.Event{sameKey}},
			items.Facts{Attempt: 2}},
		{"ResolvedTwiceByHand", items.Item{State: items.StateSucceeded, Attempt: 1, History: []items.Event{toUnknown, resolve, resolve}},
			items.Facts{Attempt: 1, Resolutions: 2, EnteredUnknown: true}},
		{"UnknownIsASweepCandidate", items.Item{State: items.StateUnknown, Attempt: 1, History: []items.Event{toUnknown}},
			items.Facts{Attempt: 1, EnteredUnknown: true, SweepCandidate: true}},
		{"RetryableFailureIsASweepCandidate", items.Item{State: items.StateFailed, Retryable: true, Attempt: 1},
			items.Facts{Attempt: 1, SweepCandidate: true}},
		{"PermanentFailureIsNot", items.Item{State: items.StateFailed, Attempt: 1}, items.Facts{Attempt: 1}},
		{"DuplicateEffect", items.Item{State: items.StateSucceeded, Attempt: 1, DuplicateEffect: true},
			items.Facts{Attempt: 1, DuplicateEffect: true, SweepCandidate: true}},
		{"NeedsPersonAlertPending", items.Item{State: items.StateUnknown, Attempt: 1, NeedsPerson: true, NeedsPersonSince: &since,
			AlertStatus: items.AlertPending}, items.Facts{Attempt: 1, NeedsPersonSince: &since, AlertPending: true}},
		{"NeedsPersonAlertSent", items.Item{State: items.StateUnknown, Attempt: 1, NeedsPerson: true, NeedsPersonSince: &since,
			AlertStatus: items.AlertSent}, items.Facts{Attempt: 1, NeedsPersonSince: &since}},
		{"AcknowledgedRetryableFailureIsNot", items.Item{State: items.StateFailed, Retryable: true, Attempt: 2,
			History: []items.Event{ack(2)}}, items.Facts{Attempt: 2, Resolutions: 1}},
		{"RetryableFailureAcknowledgedInAnEarlierAttemptIs", items.Item{State: items.StateFailed, Retryable: true, Attempt: 2,
			History: []items.Event{ack(1)}}, items.Facts{Attempt: 2, Resolutions: 1, SweepCandidate: true}},
		{"RetryableFailureResolvedOtherwiseSinceIs", items.Item{State: items.StateFailed, Retryable: true, Attempt: 2,
			History: []items.Event{ack(2), {Kind: items.EventResolve, Attempt: 2, Outcome: items.ResolveNotCommitted}}},
			items.Facts{Attempt: 2, Resolutions: 2, SweepCandidate: true}},
		{"AcknowledgedDuplicateEffectIsNot", items.Item{State: items.StateSucceeded, Attempt: 1, DuplicateEffect: true,
			History: []items.Event{ack(1)}}, items.Facts{Attempt: 1, DuplicateEffect: true, Resolutions: 1}},
		{"UnknownIsOneWhateverWasAcknowledged", items.Item{State: items.StateUnknown, Attempt: 1, History: []items.Event{ack(1)}},
			items.Facts{Attempt: 1, Resolutions: 1, SweepCandidate: true}},
		{"TextThatLooksLikeAReasonIsNotOne", items.Item{State: items.StateSucceeded, Attempt: 1,
			History: []items.Event{{Kind: items.EventResolve, Note: `"reason":"retry_same_key" "to":"unknown"`}}},
			items.Facts{Attempt: 1, Resolutions: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.it.Facts()
			if got != tt.want {
				t.Errorf("Facts() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestSettled: an item is settled (retention may remove it) when it succeeded or failed, needs no person,
// and no rule of the sweeper can flag it again without a new request.
func TestSettled(t *testing.T) {
	t.Parallel()
	ack := func(attempt int) []items.Event {
		return []items.Event{{Kind: items.EventResolve, Attempt: attempt, Outcome: items.ResolveAcknowledged, By: "U1"}}
	}
	tests := []struct {
		name string
		it   items.Item
		want bool
	}{
		{"Succeeded", items.Item{State: items.StateSucceeded, Attempt: 1}, true},
		{"PermanentFailure", items.Item{State: items.StateFailed, Attempt: 1}, true},
		{"RetryableFailure", items.Item{State: items.StateFailed, Retryable: true, Attempt: 1}, false},
		{"AcknowledgedRetryableFailure", items.Item{State: items.StateFailed, Retryable: true, Attempt: 1, History: ack(1)}, true},
		{"RetryableFailureAcknowledgedInAnEarlierAttempt", items.Item{State: items.StateFailed, Retryable: true, Attempt: 2, History: ack(1)}, false},
		{"DuplicateEffectNotYetFlagged", items.Item{State: items.StateSucceeded, Attempt: 1, DuplicateEffect: true}, false},
		{"DuplicateEffectAcknowledged", items.Item{State: items.StateSucceeded, Attempt: 1, DuplicateEffect: true, History: ack(1)}, true},
		{"NeedsAPerson", items.Item{State: items.StateSucceeded, Attempt: 1, DuplicateEffect: true, NeedsPerson: true}, false},
		{"Unknown", items.Item{State: items.StateUnknown, Attempt: 1, History: ack(1)}, false},
		{"InFlightAfterAnAcknowledgement", items.Item{State: items.StateInFlight, Attempt: 2, History: ack(1)}, false},
		{"Prepared", items.Item{State: items.StatePrepared}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.it.Settled(); got != tt.want {
				t.Errorf("Settled() = %v, want %v", got, tt.want)
			}
		})
	}
}
