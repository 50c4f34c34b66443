package items

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"
)

// This file holds the vocabulary of the operator surface, the sweeper and the alert outbox: the query
// parameters and records the stores return for them. The interfaces that use them are declared by their
// consumers (alerts, handlers), each as narrow as it needs.

// ItemRef names one item.
type ItemRef struct {
	Tenant string `json:"tenant"`
	Key    string `json:"key"`
}

// Less orders references by tenant, then key: the order the sweeper pages in.
func (r ItemRef) Less(o ItemRef) bool {
	if r.Tenant != o.Tenant {
		return r.Tenant < o.Tenant
	}
	return r.Key < o.Key
}

// MaxListLimit is the largest page of the operator's item list; DefaultListLimit is used when none is asked.
const (
	MaxListLimit     = 500
	DefaultListLimit = 100
)

// ListParams filters and pages the operator's list of items. Empty fields do not filter.
type ListParams struct {
	Tenant string
	// States keeps items in any of these states.
	States []State
	// NeedsPerson keeps items that do (true) or do not (false) need a person.
	NeedsPerson *bool
	Destination string
	Workflow    string
	BatchID     string
	// ExecutionID keeps items whose latest claim came from that execution (Item.ExecutionID).
	ExecutionID string
	// Reference keeps items whose business reference (Item.Reference: the latest one a before-write gave)
	// is exactly Reference.
	Reference string
	// Owner keeps items whose per-request owner is Owner, or about which an alert went to Owner.
	Owner string
	// ChangedBefore keeps items whose last change is at or before it (the API's older_than).
	ChangedBefore *time.Time
	// Order is the list's order: ListByChange (the zero value) or ListByNeedsPersonSince.
	Order ListOrder
	// Limit is the page size, 1 to MaxListLimit.
	Limit int
	// Cursor continues a previous page of the same order; empty for the first.
	Cursor string
}

// ListOrder is the order of the operator's item list.
type ListOrder string

const (
	// ListByChange lists newest change first (updated_at, then key, both descending); its cursor is a
	// ListCursor.
	ListByChange ListOrder = ""
	// ListByNeedsPersonSince lists the items needing a person (ListParams.NeedsPerson must be true) in the
	// order a person should see them: the one waiting longest first, by needs_person_since ascending, then
	// key ascending. An item needing a person without a recorded since (the ledger records one whenever it
	// marks an item; only an item written outside it lacks one) counts as waiting longer than any other: it
	// comes first, its keys in order. Its cursor is a SinceCursor.
	ListByNeedsPersonSince ListOrder = "needs_person_since"
)

// CheckOrder returns an invalid_request error when p asks for an order this service does not know, or for
// ListByNeedsPersonSince without NeedsPerson true.
func (p ListParams) CheckOrder() error {
	switch p.Order {
	case ListByChange:
		return nil
	case ListByNeedsPersonSince:
		if p.NeedsPerson == nil || !*p.NeedsPerson {
			return Invalid("needs_person", "must be true to list by needs_person_since")
		}
		return nil
	}
	return Invalid("order", "must be needs_person_since or empty")
}

// ItemPage is one page of the operator's item list, newest change first. NextCursor is empty on the last page.
type ItemPage struct {
	Items      []*Item `json:"items"`
	NextCursor string  `json:"next_cursor"`
	// Unreadable names the items of the page that the store holds but cannot read (a corrupt stored
	// document): they are left out of Items, keep their place in the order, and the next page goes on
	// past them. Empty when every item was read.
	Unreadable []string `json:"unreadable,omitempty"`
}

// PageOf makes the page of a list from up to limit+1 items read in list order: the extra item only
// says that there is a next page, whose cursor is the position of the page's last item.
func PageOf(found []*Item, limit int) ItemPage {
	page := ItemPage{Items: found}
	if page.Items == nil {
		page.Items = []*Item{}
	}
	if len(found) > limit {
		page.Items = found[:limit]
		last := page.Items[limit-1]
		page.NextCursor = ListCursor{UpdatedAt: last.UpdatedAt, Key: last.Key}.Encode()
	}
	return page
}

// ListCursor is the position after the last item of a page: the list is ordered by last change, then key,
// both descending. Encoded, it is the API's opaque cursor.
type ListCursor struct {
	UpdatedAt time.Time `json:"u"`
	Key       string    `json:"k"`
}

// Encode returns the cursor as an opaque URL-safe string.
func (c ListCursor) Encode() string { return encodeCursor(c) }

// encodeCursor writes a cursor's fields as JSON in URL-safe base64: the API's opaque cursor.
func encodeCursor(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor reads into v what encodeCursor wrote.
func decodeCursor(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	return err
}

// DecodeListCursor reads a cursor made by Encode. Returns an invalid_request error naming "cursor" when s
// was not made by Encode.
func DecodeListCursor(s string) (ListCursor, error) {
	var c ListCursor
	if err := decodeCursor(s, &c); err != nil || c.Key == "" || c.UpdatedAt.IsZero() {
		return ListCursor{}, Invalid("cursor", "is not a cursor this service returned")
	}
	return c, nil
}

// SinceCursor is the position after the last item of a page listed by ListByNeedsPersonSince:
// needs_person_since (nil: the item has none), then key, both ascending. Encoded, it is an opaque cursor
// that DecodeListCursor refuses, as DecodeSinceCursor refuses a ListCursor.
type SinceCursor struct {
	Since *time.Time
	Key   string
}

type sinceCursorJSON struct {
	Order ListOrder  `json:"o"`
	Since *time.Time `json:"s,omitempty"`
	Key   string     `json:"k"`
}

// Encode returns the cursor as an opaque URL-safe string.
func (c SinceCursor) Encode() string {
	return encodeCursor(sinceCursorJSON{Order: ListByNeedsPersonSince, Since: c.Since, Key: c.Key})
}

// DecodeSinceCursor reads a cursor made by SinceCursor.Encode. Returns an invalid_request error naming
// "cursor" when s was not made by it.
func DecodeSinceCursor(s string) (SinceCursor, error) {
	var c sinceCursorJSON
	if err := decodeCursor(s, &c); err != nil || c.Order != ListByNeedsPersonSince || c.Key == "" || (c.Since != nil && c.Since.IsZero()) {
		return SinceCursor{}, Invalid("cursor", "is not a cursor this service returned for this order")
	}
	return SinceCursor{Since: c.Since, Key: c.Key}, nil
}

// Measures are the seeds' post-release measures ("What to measure after release") over a set of items.
type Measures struct {
	// Items counts all items; States counts them per state (every state is present).
	Items  int           `json:"items"`
	States map[State]int `json:"states"`
	// NeedsPerson counts items waiting for their owner.
	NeedsPerson int `json:"needs_person"`
	// EnteredUnknown counts items whose outcome was unknown at some point.
	EnteredUnknown int `json:"entered_unknown"`
	// OldestUnresolvedAgeSeconds is the age of the oldest item that is unknown or needs a person, measured
	// from when it started needing a person (else from its last change); 0 when there is none.
	OldestUnresolvedAgeSeconds int64 `json:"oldest_unresolved_age_seconds"`
	// Retries counts attempts beyond each item's first; RetriesPerOperation divides them by the items that
	// had at least one attempt.
	Retries             int     `json:"retries"`
	RetriesPerOperation float64 `json:"retries_per_operation"`
	// FingerprintConflicts counts before-writes answered conflict/fingerprint_mismatch.
	FingerprintConflicts int `json:"fingerprint_conflicts"`
	// SameKeyRecoveries counts items that succeeded after a same-key retry (the receiver's idempotency key
	// recovered them).
	SameKeyRecoveries int `json:"same_key_recoveries"`
	// ManualResolutions counts resolutions by a person (operator API or Slack).
	ManualResolutions int `json:"manual_resolutions"`
	// DuplicateEffects counts items flagged with a duplicate effect.
	DuplicateEffects int `json:"duplicate_effects"`
	// HistoryDropped sums the items' history_dropped: the repeated after-write reports their histories no
	// longer hold (see Item.HistoryDropped). Not 0: a workflow replays its reports in a loop.
	// HistoryDroppedItems counts the items with a history_dropped above 0.
	HistoryDropped      int `json:"history_dropped"`
	HistoryDroppedItems int `json:"history_dropped_items"`
	// Removed counts the settled items retention removed. The other counts are of the items in the ledger,
	// except the cumulative ones (EnteredUnknown, Retries, SameKeyRecoveries, ManualResolutions,
	// DuplicateEffects, HistoryDropped, HistoryDroppedItems), which keep counting the removed items.
	Removed int `json:"removed"`
}

// NewMeasures returns empty measures with every state present.
func NewMeasures() Measures {
	m := Measures{States: make(map[State]int, len(States))}
	for _, s := range States {
		m.States[s] = 0
	}
	return m
}

// Stats are the measures of one tenant, in total and per destination.
type Stats struct {
	Tenant string `json:"tenant"`
	// At is when the measures were taken.
	At time.Time `json:"at"`
	Measures
	Destinations map[string]Measures `json:"destinations"`
}

// Counter names kept by stores beside the items: measures of answers that change no item.
const (
	// CounterFingerprintConflicts counts conflict/fingerprint_mismatch answers per tenant and destination.
	CounterFingerprintConflicts = "fingerprint_conflicts"
)

// Alert statuses beyond the item's (AlertPending, AlertSent, AlertEscalated).
const (
	// AlertClosed: the item was settled or no longer needs a person for this cause; nothing more is sent.
	AlertClosed = "closed"
)

// Event kinds recorded by the alert dispatcher.
const (
	// EventAlerted: an alert about the item went to its owner.
	EventAlerted = "alerted"
)

// Alert is one record of the alert outbox: an item needs a person for a cause, and its owner is to be told
// once. An item gets at most one alert per attempt and cause.
type Alert struct {
	Tenant  string `json:"tenant"`
	Key     string `json:"key"`
	Attempt int    `json:"attempt"`
	Cause   string `json:"cause"`
	// Owner is who the alert goes to (a Slack user or channel id); EscalateTo who gets it when it escalates.
	Owner         string        `json:"owner"`
	EscalateTo    string        `json:"escalate_to,omitempty"`
	EscalateAfter time.Duration `json:"escalate_after,omitempty"`
	BatchID       string        `json:"batch_id,omitempty"`
	Destination   string        `json:"destination"`
	// Status is pending, sent, escalated or closed.
	Status string `json:"status"`
	// Channel and TS locate the message that carried the alert (TS is Slack's message timestamp).
	Channel string `json:"channel,omitempty"`
	TS      string `json:"ts,omitempty"`
	// EscalateAt is when a sent alert escalates; nil when it never does.
	EscalateAt *time.Time `json:"escalate_at,omitempty"`
	// EscalatedBy is who asked for the escalation; empty when the clock did.
	EscalatedBy       string     `json:"escalated_by,omitempty"`
	EscalationChannel string     `json:"escalation_channel,omitempty"`
	EscalationTS      string     `json:"escalation_ts,omitempty"`
	CreatedAt         time.Time  `json:"created_at"`
	SentAt            *time.Time `json:"sent_at,omitempty"`
	EscalatedAt       *time.Time `json:"escalated_at,omitempty"`
	ClosedAt          *time.Time `json:"closed_at,omitempty"`
	// PostAttemptAt is when a dispatcher last began to post a message carrying the alert (its first or,
	// for a sent alert, its escalation) whose landing is not recorded yet: the post's answer may have been
	// lost while the message landed, so the next sender looks for it before posting. Cleared when the
	// message is recorded; nil when no post is in doubt.
	PostAttemptAt *time.Time `json:"post_attempt_at,omitempty"`
}

// Ref returns the item the alert is about.
func (a Alert) Ref() ItemRef { return ItemRef{Tenant: a.Tenant, Key: a.Key} }

// AlertGroup is what one message is about: one owner, one tenant and one batch. Escalation groups collect
// sent alerts whose escalation is due, for their escalate_to owner.
type AlertGroup struct {
	Tenant     string `json:"tenant"`
	Owner      string `json:"owner"`
	BatchID    string `json:"batch_id"`
	Escalation bool   `json:"escalation"`
}

// AlertClaim is a dispatcher's claim on a group of alerts: until Until, no other dispatcher takes them.
type AlertClaim struct {
	Group AlertGroup
	// Claim is the dispatcher's token; the alerts it takes carry it until finished or released.
	Claim string
	Now   time.Time
	Until time.Time
}

// AlertDelivery records where a claimed group's message landed.
type AlertDelivery struct {
	Claim   string
	Channel string
	TS      string
	At      time.Time
	// Escalation is true when the message was an escalation (the alerts become escalated).
	Escalation bool
}

// Age says how long something has waited as people read it in a list or an alert: "45s", "12m",
// "3h05m" (under two days), "4d". A negative duration (clocks apart) reads as "0s".
func Age(d time.Duration) string {
	d = max(d, 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}
