package items

import "time"

// Facts are what the measures, the sweeper and the alert outbox select and count items by, derived from
// the item alone. Stores keep them beside the item's document (columns, top-level fields) whenever they
// write it, so that GET /v1/stats, a metrics scrape or a sweep reads small indexed values instead of
// parsing every document and searching its history.
type Facts struct {
	// Attempt is the number of the current attempt; 0 while prepared. Retries are the attempts beyond the
	// first (Attempt-1), and an item with Attempt ≥ 1 is one operation.
	Attempt int
	// SameKeyRecovered: the item succeeded, and some before-write let it retry under the same key (the
	// receiver's idempotency key recovered it).
	SameKeyRecovered bool
	// Resolutions counts the resolutions by a person recorded in the history.
	Resolutions int
	// DuplicateEffect: a duplicate effect was reported.
	DuplicateEffect bool
	// EnteredUnknown: the item's outcome was unknown at some point.
	EnteredUnknown bool
	// NeedsPersonSince is when the item started needing a person; nil when it does not.
	NeedsPersonSince *time.Time
	// SweepCandidate: the sweeper must look at the item, as it may newly need a person: it does not need
	// one yet, and it is unknown, or it is failed and retryable, or flagged with a duplicate effect, and no
	// person acknowledged it in its current attempt (sweepCandidate).
	SweepCandidate bool
	// AlertPending: the item needs a person and its alert has not gone out yet.
	AlertPending bool
}

// Facts derives the item's facts.
func (it *Item) Facts() Facts {
	f := Facts{
		Attempt:         it.Attempt,
		DuplicateEffect: it.DuplicateEffect,
		SweepCandidate:  it.sweepCandidate(),
		AlertPending:    it.NeedsPerson && it.AlertStatus == AlertPending,
	}
	if it.NeedsPerson {
		f.NeedsPersonSince = it.NeedsPersonSince
	}
	sameKey := false
	for i := range it.History {
		e := &it.History[i]
		sameKey = sameKey || e.Reason == ReasonRetrySameKey
		f.EnteredUnknown = f.EnteredUnknown || e.To == StateUnknown
		if e.Kind == EventResolve {
			f.Resolutions++
		}
	}
	f.SameKeyRecovered = sameKey && it.State == StateSucceeded
	return f
}

// sweepCandidate reports whether a rule of NeedsPersonCause may still fire for the item without a new
// request (before-write, after-write, reconcile, resolve): it does not need a person yet, and
//
//   - it is unknown (every rule of an unknown item is the sweeper's, and awaiting_owner and
//     unresolved_too_long come with time alone); or
//   - it is failed and retryable, or flagged with a duplicate effect, and no person acknowledged it in its
//     current attempt. An acknowledgement silences every rule of a failed or succeeded item for the
//     attempt (acknowledged): only a before-write (a new attempt) or another resolution (a new last
//     resolution) ends it.
//
// Everything else (succeeded, failed for good, in flight, prepared) is never flagged by the sweeper.
// Only a new request makes an item a candidate again, and every request rewrites the item and so its
// facts.
func (it *Item) sweepCandidate() bool {
	if it.NeedsPerson {
		return false
	}
	if it.State == StateUnknown {
		return true
	}
	return ((it.State == StateFailed && it.Retryable) || it.DuplicateEffect) && !it.acknowledged()
}
