package console

import (
	"strings"

	"github.com/replaysafe/companion/items"
)

// The ledger's words (states, causes, error classes, findings, alert statuses, reasons) in words an owner
// understands at 3 a.m. The page shows the sentence and, where it differs, the word in small type: the
// word is what the API, the CLI and the logs use, so an owner can search for it.

var stateWords = map[string]string{
	string(items.StatePrepared):  "registered by its batch, not claimed yet",
	string(items.StateInFlight):  "in flight: a workflow holds it and is writing",
	string(items.StateSucceeded): "succeeded: the effect exists",
	string(items.StateFailed):    "failed",
	string(items.StateUnknown):   "outcome unknown: it may or may not have been written",
	string(items.StateRemoved):   "removed by retention",
}

var alertWords = map[string]string{
	items.AlertPending:   "due, not sent yet (the alert dispatcher sends it shortly)",
	items.AlertSent:      "sent to the owner",
	items.AlertEscalated: "escalated: sent on to the escalation contact",
	items.AlertClosed:    "closed: nothing more is sent",
}

var classWords = map[string]string{
	string(items.ClassValidation):        "refused before sending: nothing was sent",
	string(items.ClassDNS):               "the destination's name did not resolve: nothing was sent",
	string(items.ClassConnectionRefused): "the connection was refused: nothing was sent",
	string(items.ClassTLS):               "the TLS handshake failed: the request may have been sent",
	string(items.ClassTimeout):           "no answer in time: the request may have been written",
	string(items.ClassConnectionReset):   "the connection broke after sending: the request may have been written",
	string(items.ClassHTTP):              "the destination answered with an HTTP error",
	string(items.ClassOther):             "another error",
}

// causeWords explain an item's cause (why it is unknown or failed) beside the needs-person causes, which
// Config.CauseText explains.
var causeWords = map[string]string{
	items.CauseLeaseExpired:          "the workflow's lease ran out before it reported",
	items.CauseLookupFailed:          "the lookup by reference failed",
	items.CauseUnknownOutcome:        "the workflow reported an unknown outcome",
	items.CauseEarlierAttemptUnknown: "this attempt failed, but an earlier one may have written the effect",
}

// outcomeWords name what an event's outcome field holds: a report's outcome, a lookup's finding, a probe
// read's outcome or a person's resolution.
var outcomeWords = map[string]map[string]string{
	items.EventAfterWrite: {"succeeded": "succeeded", "failed": "failed", "unknown": "unknown: the workflow does not know"},
	items.EventReconcile: {items.FindingFound: "found in the destination", items.FindingAbsent: "not in the destination",
		items.FindingLookupFailed: "the lookup failed: proves nothing"},
	items.EventProbe: {items.ProbeFound: "found in the destination", items.ProbeAbsent: "not found (yet)",
		items.ProbeFailed: "the read failed: proves nothing"},
	items.EventResolve: resolutionWords,
}

var resolutionWords = map[string]string{
	items.ResolveSucceeded:    "committed: the effect exists",
	items.ResolveNotCommitted: "not committed: a retry may write it",
	items.ResolveAcknowledged: "acknowledged",
}

var reasonWords = map[string]string{
	string(items.ReasonNew):                 "first claim",
	string(items.ReasonFingerprintMismatch): "another payload under this key",
	string(items.ReasonSucceeded):           "already succeeded",
	string(items.ReasonInProgress):          "in progress elsewhere",
	string(items.ReasonFailedPermanent):     "failed for good",
	string(items.ReasonAttemptsExhausted):   "no attempts left",
	string(items.ReasonRetryLater):          "retry later",
	string(items.ReasonRetry):               "retry after a failure",
	string(items.ReasonLookupRequired):      "look the reference up first",
	string(items.ReasonRetrySameKey):        "retry with the same idempotency key",
	string(items.ReasonAwaitingOwner):       "waits for its owner",
	string(items.ReasonRecorded):            "recorded",
	string(items.ReasonLateSuccess):         "a success reported late",
	string(items.ReasonDuplicateEffect):     "a second success with another external id",
	string(items.ReasonUnchanged):           "a repeat; nothing changed",
	string(items.ReasonHistoryOnly):         "kept in the history only",
}

var decisionWords = map[string]string{
	string(items.Proceed): "proceed: write now", string(items.Skip): "skip: do not write",
	string(items.Conflict): "conflict: do not write", string(items.Reconcile): "look it up first",
}

// wordOf returns the sentence for w in table, or w itself.
func wordOf(table map[string]string, w string) string {
	if s, ok := table[w]; ok {
		return s
	}
	return w
}

// causeText explains a cause: a needs-person cause through Config.CauseText, else the console's own words,
// else an HTTP status cause ("http_503").
func (c *Console) causeText(cause string) string {
	if s := c.cfg.CauseText(cause); s != cause {
		return s
	}
	if s, ok := causeWords[cause]; ok {
		return s
	}
	if s, ok := classWords[cause]; ok {
		return "the write's outcome is unknown: " + s
	}
	if n, ok := strings.CutPrefix(cause, "http_"); ok {
		return "the destination answered HTTP " + n + ", which does not say whether the write happened"
	}
	return cause
}

// situation says in a sentence or two what the item's state means and what its owner should do next.
func (c *Console) situation(it *items.Item, v *itemView) string {
	switch {
	case it.State == items.StateSucceeded && it.DuplicateEffect && it.NeedsPerson:
		return "The write succeeded, but a second success with another external id was reported: the effect may exist twice. " +
			"Check the destination (" + it.Destination + "), undo the duplicate if there is one, then acknowledge it below."
	case it.State == items.StateSucceeded && it.DuplicateEffect:
		return "The write succeeded; a duplicate effect was reported and acknowledged. Nothing to do."
	case it.State == items.StateSucceeded:
		return "The write succeeded. Nothing to do."
	case it.State == items.StateInFlight:
		s := "A workflow holds this item and is writing now"
		if it.LeaseExpiresAt != nil {
			s += " (its lease runs until " + it.LeaseExpiresAt.UTC().Format("15:04:05Z") + ")"
		}
		return s + ". Nothing to do: its report, or the lease's end, settles what happens next."
	case it.State == items.StatePrepared:
		return "Registered by its batch and not claimed yet. Nothing to do."
	case it.State == items.StateFailed && v.Acknowledge:
		return "The write failed and may be retried, but nothing has moved for too long. Find out why the workflow does not retry it, then acknowledge it below."
	case it.State == items.StateFailed && v.Settle:
		return "The write failed and no attempts are left: nothing retries it. Check whether it reached the destination (" + it.Destination +
			"), then record below what you found (not committed grants one more attempt)."
	case it.State == items.StateFailed && it.Retryable:
		s := "The write failed and will be retried: the next run of the workflow tries again"
		if it.RetryAt != nil && it.RetryAt.After(v.Now) {
			s += " from " + stamp(*it.RetryAt)
		}
		return s + ". Nothing to do unless it keeps failing."
	case it.State == items.StateFailed:
		return "The destination refused the write for good: a run with the same key skips it. Nothing here to settle; fix the cause and send it as a new item if it is still wanted."
	case it.State == items.StateUnknown && it.NeedsPerson && it.NeedsPersonCause == items.CauseStale:
		return "Nobody knows whether the write happened, and nothing has moved for too long (no run retried it or looked it up). " +
			"Check the destination (" + it.Destination + "), then record below what you found."
	case it.State == items.StateUnknown && it.NeedsPerson:
		return "Nobody knows whether the write happened, and nothing checks it automatically. Check the destination (" + it.Destination +
			"), then record below what you found."
	case it.State == items.StateUnknown && it.Dedupe == items.DedupeLookup && !it.LookupFailed:
		return "Nobody knows yet whether the write happened: the next run (or the service's probe) looks the reference up in the destination (" +
			it.Destination + "). Nothing to do yet; if you already know, record it below."
	case it.State == items.StateUnknown:
		return "Nobody knows yet whether the write happened: the next run retries it with the same idempotency key, which the destination deduplicates. Nothing to do yet; if you already know, record it below."
	}
	return ""
}
