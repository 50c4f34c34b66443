package alerts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/replaysafe/companion/items"
)

// MaxListedItems is how many items one message lists; the rest are counted ("and N more") with the
// operator query that lists them.
const MaxListedItems = 10

// Message is one alert message: the items of one owner, tenant and batch that need a person.
type Message struct {
	Tenant  string
	Owner   string
	BatchID string
	// Escalation is true for a message sent to the escalate_to owner.
	Escalation bool
	// Lines are the listed items, at most MaxListedItems.
	Lines []Line
	// More counts the items of the group that are not listed.
	More int
	// Query is the operator API request that lists the group's items; Command the same for the CLI.
	Query   string
	Command string
	// Attempt names the post that carries the message (the time the post began, in Unix milliseconds): a
	// notifier that can find its posts (PostFinder) puts it in the message's metadata, so that a post
	// whose answer was lost is found again by it. Empty on updates.
	Attempt string
}

// Total is the number of items the message is about.
func (m Message) Total() int { return len(m.Lines) + m.More }

// Line is one listed item.
type Line struct {
	Tenant      string
	Key         string
	Reference   string
	Destination string
	State       items.State
	Attempts    int
	// LastErrorClass is the failure class of the last report, or the HTTP status it carried.
	LastErrorClass string
	// Cause says why the item needs a person.
	Cause string
	// Age is how long the item has needed a person.
	Age       time.Duration
	CheckHint string
	// URL is the item's page in the operator console; empty when no public URL is configured.
	URL string
	// Open is true while the item still waits for its owner: the line carries the buttons.
	Open bool
	// Acknowledge is true on an open line only an acknowledgement settles (items.Item.Acknowledgeable): it
	// carries Acknowledge instead of Committed and Not committed.
	Acknowledge bool
	// Resolution is the person's resolution of a settled item; nil when it settled without one.
	Resolution *items.Resolution
	// EscalatedTo and EscalatedBy say where the alert escalated and who asked (empty: the clock).
	EscalatedTo string
	EscalatedBy string
	// Note says in plain text what happened since: who resolved it and how, or where it escalated.
	Note string
	// Evidence is the failed lookup's evidence on an item waiting for a person because its lookup failed,
	// with who looked (a probe's reads, one per line, by probe:<destination>).
	Evidence string
}

// Text is the message's plain-text form: Slack's notification text and the log notifier's line.
func (m Message) Text() string {
	var b strings.Builder
	switch {
	case m.Escalation:
		fmt.Fprintf(&b, "Escalated: %d item(s) still need a person", m.Total())
	default:
		fmt.Fprintf(&b, "%d item(s) need a person", m.Total())
	}
	if m.BatchID != "" {
		fmt.Fprintf(&b, " in batch %s", m.BatchID)
	}
	if m.Tenant != "" && m.Tenant != "default" {
		fmt.Fprintf(&b, " (tenant %s)", m.Tenant)
	}
	return b.String()
}

// newLine describes an item for a message.
func newLine(it *items.Item, a items.Alert, hint string, open bool, now time.Time) Line {
	l := Line{Tenant: it.Tenant, Key: it.Key, Reference: it.Reference, Destination: it.Destination, State: it.State,
		Attempts: it.Attempt, LastErrorClass: lastErrorClass(it), Cause: a.Cause, CheckHint: hint, Open: open,
		Acknowledge: open && it.Acknowledgeable()}
	since := a.CreatedAt
	if it.NeedsPersonSince != nil && it.NeedsPersonCause == a.Cause {
		since = *it.NeedsPersonSince
	}
	l.Age = max(now.Sub(since), 0)
	if open && a.Cause == items.CauseLookupFailed {
		l.Evidence = lookupEvidence(it)
	}
	if !open {
		if r := it.Resolution; r != nil && !r.At.Before(a.CreatedAt) {
			l.Resolution = r
		}
		l.Note = settledNote(it, l.Resolution)
	} else if a.Status == items.AlertEscalated && a.EscalateTo != "" {
		l.EscalatedTo, l.EscalatedBy = a.EscalateTo, a.EscalatedBy
		l.Note = "escalated to " + a.EscalateTo
		if a.EscalatedBy != "" {
			l.Note += " by " + a.EscalatedBy
		}
	}
	return l
}

// lookupEvidence returns the evidence of the item's failed lookup of its current attempt, with who gave it.
func lookupEvidence(it *items.Item) string {
	for i := len(it.History) - 1; i >= 0; i-- {
		e := it.History[i]
		if e.Kind == items.EventReconcile && e.Outcome == items.FindingLookupFailed && e.Attempt == it.Attempt {
			return "lookup by " + e.By + ":\n" + e.Note
		}
	}
	return ""
}

func lastErrorClass(it *items.Item) string {
	switch {
	case it.HTTPStatus != 0:
		return fmt.Sprintf("http %d", it.HTTPStatus)
	case it.FailureClass != "":
		return string(it.FailureClass)
	case it.Cause != "":
		return it.Cause
	}
	return ""
}

// settledNote says how an item that no longer waits for its owner was settled.
func settledNote(it *items.Item, r *items.Resolution) string {
	if r != nil {
		note := fmt.Sprintf("resolved as %s by %s: %s", outcomeWord(r.Outcome), r.By, r.Evidence)
		if r.ExternalID != "" {
			note += " (external id " + r.ExternalID + ")"
		}
		return note
	}
	return fmt.Sprintf("settled without a person: now %s", it.State)
}

// outcomeWord names a resolution outcome as the buttons do.
func outcomeWord(outcome string) string {
	switch outcome {
	case items.ResolveNotCommitted:
		return "not committed"
	case items.ResolveAcknowledged:
		return "acknowledged"
	}
	return "committed"
}

// ItemURL returns the console page of an item under publicURL (the service's address as people reach
// it, such as https://companion.example.com); empty when publicURL is empty.
func ItemURL(publicURL, key string) string {
	if publicURL == "" {
		return ""
	}
	return strings.TrimRight(publicURL, "/") + "/console/item?key=" + url.QueryEscape(key)
}

// stillNeeded reports whether the item still waits for its owner for the alert's cause.
func stillNeeded(it *items.Item, a items.Alert) bool {
	return it != nil && it.NeedsPerson && it.NeedsPersonCause == a.Cause && it.Attempt == a.Attempt
}

// groupQuery returns the operator API query and CLI command that list the items of a group.
func groupQuery(g items.AlertGroup) (query, command string) {
	v := url.Values{}
	v.Set("needs_person", "true")
	cmd := []string{"companion items list --needs-person"}
	if g.BatchID != "" {
		v.Set("batch_id", g.BatchID)
		cmd = append(cmd, "--batch "+shellQuote(g.BatchID))
	}
	if g.Owner != "" {
		v.Set("owner", g.Owner)
		cmd = append(cmd, "--owner "+shellQuote(g.Owner))
	}
	return "GET /v1/items?" + v.Encode(), strings.Join(cmd, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:@+=~-/", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// MessageRef locates a delivered message. For Slack, Channel is the conversation id and TS the message
// timestamp; the log notifier returns Channel "log" and an empty TS.
type MessageRef struct {
	Channel string
	TS      string
}

// ErrPostRefused is wrapped by a Notifier's Post error when the destination answered that it did not take
// the message (Slack's ok:false, a rate limit): no message landed. Any other error may hide a message
// that landed. An Update error wraps it when the destination answered that it will not change the
// message (deleted, or out of the app's reach): asking again is no use.
var ErrPostRefused = errors.New("the post was refused")

// Notifier delivers alert messages.
type Notifier interface {
	// Post delivers a new message to owner and returns where it landed.
	Post(ctx context.Context, owner string, m Message) (MessageRef, error)
	// Update replaces an earlier message, to show what happened to its items.
	Update(ctx context.Context, ref MessageRef, m Message) error
}

// PostFinder is a Notifier that can find a message it posted when the post's answer was lost (a timeout, a
// connection cut after the request was sent, a stop cutting the call): the message may have landed all
// the same. The dispatcher asks it before posting a group again whose earlier post is not recorded.
type PostFinder interface {
	// FindPost looks for a message of m's group (tenant, owner, batch, escalation) sent to owner by one of
	// the given attempts (Message.Attempt) since since. found is false only when the conversation's
	// history since then was read through and holds no such message; an error means nothing is proven.
	FindPost(ctx context.Context, owner string, m Message, attempts []string, since time.Time) (ref MessageRef, found bool, err error)
}

// LogNotifier writes alerts to the log: the notifier when no Slack settings are given. The items stay
// visible through the operator API (GET /v1/items?needs_person=true).
type LogNotifier struct {
	Logger *slog.Logger
}

func (n LogNotifier) logger() *slog.Logger {
	if n.Logger == nil {
		return slog.Default()
	}
	return n.Logger
}

// Post implements Notifier: one warning line per message, with the listed keys and the query for all.
func (n LogNotifier) Post(ctx context.Context, owner string, m Message) (MessageRef, error) {
	keys := make([]string, len(m.Lines))
	for i, l := range m.Lines {
		keys[i] = l.Key
	}
	n.logger().WarnContext(ctx, m.Text(), "alert_owner", owner, "tenant", m.Tenant, "batch_id", m.BatchID,
		"escalation", m.Escalation, "items", m.Total(), "keys", strings.Join(keys, " "), "more", m.More, "query", m.Query)
	for _, l := range m.Lines {
		if l.Evidence != "" {
			n.logger().WarnContext(ctx, "alert item evidence", "tenant", l.Tenant, "key", l.Key, "evidence", l.Evidence)
		}
	}
	return MessageRef{Channel: "log"}, nil
}

// Update implements Notifier: a log message cannot change, so it logs what happened.
func (n LogNotifier) Update(ctx context.Context, ref MessageRef, m Message) error {
	for _, l := range m.Lines {
		if l.Note != "" {
			n.logger().InfoContext(ctx, "alert item update", "tenant", l.Tenant, "key", l.Key, "note", l.Note)
		}
	}
	return nil
}
