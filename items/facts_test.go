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
