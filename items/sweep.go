package items

import (
	"context"
	"strings"
	"time"
)

// NeedsPersonCause returns why the item needs a person at now, or "" when nothing says so (or when it
// already waits for one). These are the sweeper's rules, checked top to bottom:
//
//   - a duplicate effect was reported and nobody acknowledged it (duplicate_effect);
//   - unknown after a failed lookup (lookup_failed);
//   - unknown, and its destination can neither dedupe nor be searched (unknown_no_dedupe);
//   - unknown with dedupe key, and no same-key retry is possible any more: no attempts left, or the
//     receiver may have forgotten the key (awaiting_owner, as before-write row 11 would say);
//   - failed and retryable with no attempts left, and nobody acknowledged it in this attempt
//     (attempts_exhausted);
//   - unknown, or failed and retryable, unchanged for the destination's escalate_after: nobody is acting
//     on it, and nobody acknowledged it in this attempt (unresolved_too_long).
//
// A permanent failure is settled knowledge (the destination refused the write) and never needs a person here.
// Nor does a failed or succeeded item a person acknowledged in its current attempt: they took it over
// (only a new attempt asks again), so it is no sweep candidate (Facts.SweepCandidate) and retention may
// remove it (Item.Settled). attempts_exhausted could otherwise reach an acknowledged item only by a
// lowered max_attempts, as the acknowledged unresolved_too_long fires only while attempts are left.
func (l *Ledger) NeedsPersonCause(it *Item, now time.Time) string {
	if it == nil || it.NeedsPerson {
		return ""
	}
	dest := l.cfg.Destination(it.Destination)
	switch {
	case it.DuplicateEffect && !it.acknowledged():
		return CauseDuplicateEffect
	case it.State == StateUnknown && it.LookupFailed:
		return CauseLookupFailed
	case it.State == StateUnknown && (it.Dedupe == DedupeNone || it.Dedupe == ""):
		return CauseNoDedupe
	case it.State == StateUnknown && it.Dedupe == DedupeKey && !l.sameKeyRetryPossible(it, dest, now):
		return CauseAwaitingOwner
	case it.State == StateFailed && it.Retryable && !l.attemptsLeft(it, dest) && !it.acknowledged():
		return CauseAttemptsExhausted
	}
	stale := (it.State == StateUnknown || (it.State == StateFailed && it.Retryable)) && !it.acknowledged()
	if stale && dest.EscalateAfter > 0 && now.Sub(it.UpdatedAt) >= dest.EscalateAfter {
		return CauseStale
	}
	return ""
}

// sameKeyRetryPossible mirrors before-write row 10: attempts left, and the first dispatch under the key is
// younger than the destination's key retention.
func (l *Ledger) sameKeyRetryPossible(it *Item, dest Destination, now time.Time) bool {
	if !l.attemptsLeft(it, dest) {
		return false
	}
	first, ok := it.firstDispatch()
	return !ok || now.Before(first.Add(time.Duration(dest.KeyRetentionSeconds)*time.Second))
}

// MarkNeedsPerson checks the rules of NeedsPersonCause against the stored item, inside one guarded
// transition, and marks the item as needing a person when one applies. It returns the cause it marked, or
// "" when the item did not change (a concurrent change that settled the item wins). Returns ErrNotFound.
func (l *Ledger) MarkNeedsPerson(ctx context.Context, tenant, key string) (string, error) {
	now := l.now()
	var cause string
	_, err := l.transition(ctx, tenant, key, func(cur *Item) (*Item, error) {
		if cur == nil {
			return nil, ErrNotFound
		}
		cause = l.NeedsPersonCause(cur, now)
		if cause == "" {
			return nil, nil
		}
		cur.markNeedsPerson(cause, now)
		return cur, nil
	})
	if err != nil {
		return "", err
	}
	return cause, nil
}

// AlertMark names an item an alert was about: its key, and the attempt and cause of the alert.
type AlertMark struct {
	Key     string
	Attempt int
	Cause   string
}

// RecordAlerts records on the items of one tenant that an alert about them went out (status AlertSent)
// or escalated (AlertEscalated), and to whom. An item changes only while it still needs a person for the
// mark's cause in the mark's attempt: one settled meanwhile keeps its state. Stores that can write all
// the items in one transaction do. It returns how many items changed.
func (l *Ledger) RecordAlerts(ctx context.Context, tenant string, marks []AlertMark, status, to string) (int, error) {
	now := l.now()
	keys := make([]string, len(marks))
	for i, m := range marks {
		keys[i] = m.Key
	}
	changed := make([]bool, len(marks))
	_, err := l.TransitionMany(ctx, tenant, keys, func(i int, cur *Item) (*Item, error) {
		m := marks[i]
		changed[i] = false
		if cur == nil || !cur.NeedsPerson || cur.NeedsPersonCause != m.Cause || cur.Attempt != m.Attempt || cur.AlertStatus == status {
			return nil, nil
		}
		kind := EventAlerted
		if status == AlertEscalated {
			kind = EventEscalated
		}
		cur.AlertStatus = status
		cur.record(Event{At: now, Kind: kind, Attempt: cur.Attempt, Reason: Reason(m.Cause), Note: "to " + to})
		changed[i] = true
		return cur, nil
	})
	n := 0
	for _, c := range changed {
		if c {
			n++
		}
	}
	return n, err
}

// AlertedTo returns to whom the alert (or escalation) about the item's current attempt went, as the
// dispatcher gave it to RecordAlerts: an owner's id, or the words it uses for the service's log ("the log",
// "<owner> (in the log)"). Empty when no alert of this attempt went out.
func (it *Item) AlertedTo() string {
	for i := len(it.History) - 1; i >= 0; i-- {
		e := it.History[i]
		if e.Attempt != it.Attempt {
			return ""
		}
		if e.Kind == EventAlerted || e.Kind == EventEscalated {
			return strings.TrimPrefix(e.Note, "to ")
		}
	}
	return ""
}
