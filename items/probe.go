package items

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// This file holds what the ledger knows of probes: the service's own lookups of an unknown item in its
// destination (package probes makes the HTTP reads). A probe's reads are recorded in the item's history
// (kind probe), its verdict goes through Reconcile like a workflow's finding, so every change a probe makes
// is a guarded transition and a probe that loses a race with a workflow's report changes nothing.

// EventProbe is a history event: one read of a probe, with its outcome (found, absent, failed).
const EventProbe = "probe"

// Outcomes of one probe read. A found read settles the item; an absent read settles it only after the
// last delay; a failed read (any other answer, a timeout, a refused connection) proves nothing.
const (
	ProbeFound  = "found"
	ProbeAbsent = "absent"
	ProbeFailed = "failed"
)

// ProbeResolverPrefix names the resolver of a probe's findings: "probe:" + the destination.
const ProbeResolverPrefix = "probe:"

// ProbeRead is what one read of a probe saw, as the history keeps it: never a header, never the body.
type ProbeRead struct {
	// Read counts the probe's reads of the current attempt from 1.
	Read int
	// Of is how many reads the schedule plans (the settle_after delays).
	Of int
	// URL is the URL read, without credentials.
	URL string
	// Status is the HTTP status; 0 when no answer arrived.
	Status int
	// Outcome is ProbeFound, ProbeAbsent or ProbeFailed.
	Outcome string
	// ExternalID is the value the found rule's path held.
	ExternalID string
	// Detail says in a few words what the path held or why the read failed.
	Detail string
	At     time.Time
}

// Text is the read as one line of evidence: "read 2/3 at 10:02:30Z: GET https://… → 200, records.0.id empty: absent".
func (r ProbeRead) Text() string {
	status := "no answer"
	if r.Status != 0 {
		status = fmt.Sprint(r.Status)
	}
	s := fmt.Sprintf("read %d/%d at %s: GET %s → %s", r.Read, r.Of, r.At.UTC().Format(time.RFC3339), r.URL, status)
	if r.Detail != "" {
		s += ", " + r.Detail
	}
	return s + ": " + r.Outcome
}

// ProbeReads returns the probe reads recorded for the item's current attempt, in order.
func (it *Item) ProbeReads() []Event {
	var out []Event
	for _, e := range it.History {
		if e.Kind == EventProbe && e.Attempt == it.Attempt {
			out = append(out, e)
		}
	}
	return out
}

// Probeable reports whether a probe may read the item now: it is unknown (so no lease is live), its
// recorded dedupe is lookup and no lookup has failed, as reconcile requires.
func (it *Item) Probeable() bool {
	return it != nil && it.State == StateUnknown && it.Dedupe == DedupeLookup && !it.LookupFailed
}

// ProbeBase is the moment a probe's delays count from: when the current attempt ended (its report, or the
// lease's expiry), else when it started.
func (it *Item) ProbeBase() time.Time {
	a := it.CurrentAttempt()
	switch {
	case a != nil && a.EndedAt != nil:
		return *a.EndedAt
	case it.LeaseExpiresAt != nil:
		return *it.LeaseExpiresAt
	case a != nil:
		return a.StartedAt
	}
	return it.UpdatedAt
}

// ProbeClaim takes one read of a probe of one item: the read number of the item's attempt, held by Claim
// until Until. A prober that stops before making the read gives it back (the stores' ReleaseProbe, by
// Tenant, Key, Attempt, Read and Claim), so that the read is claimable at once.
type ProbeClaim struct {
	Tenant  string
	Key     string
	Attempt int
	Read    int
	Claim   string
	Until   time.Time
	Now     time.Time
}

// RecordProbe records one read of a probe that did not settle the item (an absent read before the last
// delay, a failed read before the failures run out) in the item's history, inside one guarded transition:
// only while the item is probeable at attempt and the read is not recorded yet. It reports whether the item
// changed. Returns ErrNotFound, ErrUnavailable.
func (l *Ledger) RecordProbe(ctx context.Context, tenant, key string, attempt int, r ProbeRead, by string) (bool, error) {
	changed := false
	_, err := l.transition(ctx, tenant, key, func(cur *Item) (*Item, error) {
		changed = false
		if cur == nil {
			return nil, ErrNotFound
		}
		if !cur.Probeable() || cur.Attempt != attempt {
			return nil, nil
		}
		for _, e := range cur.ProbeReads() {
			if e.Reason == probeReadReason(r.Read) {
				return nil, nil
			}
		}
		cur.record(probeEvent(cur, r, by))
		changed = true
		return cur, nil
	})
	return changed, err
}

func probeEvent(it *Item, r ProbeRead, by string) Event {
	return Event{At: r.At, Kind: EventProbe, Attempt: it.Attempt, Outcome: r.Outcome, HTTPStatus: r.Status,
		ExternalID: r.ExternalID, By: by, Reason: probeReadReason(r.Read), Note: truncate(r.Text(), 500)}
}

// probeReadReason names a read in its event ("read_2"), so that a read is recorded once.
func probeReadReason(n int) Reason { return Reason(fmt.Sprintf("read_%d", n)) }

// ProbeEvidence is a probe's evidence for its verdict: every read of the attempt, one per line, the last
// one included.
func ProbeEvidence(it *Item, last ProbeRead) string {
	var lines []string
	for _, e := range it.ProbeReads() {
		lines = append(lines, e.Note)
	}
	lines = append(lines, last.Text())
	return strings.Join(lines, "\n")
}

// truncate cuts s to at most n bytes, at a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
