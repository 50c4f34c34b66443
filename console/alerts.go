package console

import (
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/replaysafe/companion/items"
)

// alertView is one record of the item's alert outbox in words: what it was about, where it stands, and
// when it was posted where. An alert holds no message text, payload or secret, and none is shown.
type alertView struct {
	Title  string
	Status string
	// Word is the outbox's status word ("pending", "sent", …), shown small beside Status.
	Word  string
	Lines []alertLine
}

// alertLine is one fact of an alert; URL, when set, links its value (a Slack message).
type alertLine struct{ Name, Value, URL string }

// slackChannel and slackTS check the shape of a recorded message location before it becomes a link.
var (
	slackChannel = regexp.MustCompile(`^[A-Z0-9]{2,}$`)
	slackTS      = regexp.MustCompile(`^[0-9]{1,12}\.[0-9]{1,9}$`)
)

// slackURL links a Slack message by its channel and ts: https://slack.com/archives/<channel>/p<ts without
// the dot>, which Slack opens in the workspace the reader is signed in to. Empty when either is unknown or
// not shaped like Slack's.
func slackURL(channel, ts string) string {
	if !slackChannel.MatchString(channel) || !slackTS.MatchString(ts) {
		return ""
	}
	return "https://slack.com/archives/" + url.PathEscape(channel) + "/p" + strings.Replace(ts, ".", "", 1)
}

// stamp is how the console writes a moment: UTC, to the second.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

// logChannel is where the dispatcher records a message it wrote to the service's log instead of Slack
// (alerts.LogNotifier): no owner is configured for the item, or Slack is not.
const logChannel = "log"

// Why an alert went to the log, in words.
const (
	noOwnerText = "no owner is configured for this item (defaults.owner, its destination's owner, a route's owner or alerts.default_owner)"
	noSlackText = "Slack is not configured (SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET)"
)

// loggedText says that an alert (escalation: its escalation) to owner went to the service's log, and why
// nobody was notified.
func loggedText(escalation bool, owner string) string {
	what := "written"
	if escalation {
		what = "escalation written"
	}
	if owner == "" {
		return what + " to the service's log, not sent to anyone: " + noOwnerText
	}
	return what + " to the service's log for " + owner + ", not sent to them: " + noSlackText
}

// alertText says where an item's alert stands: its alert status in words, except when the alert went to
// the service's log rather than to a person. alertedTo is whom the dispatcher recorded it to
// (items.Item.AlertedTo): "the log" when no owner is configured, "<owner> (in the log)" when Slack is not.
func alertText(status, alertedTo string) string {
	if status == items.AlertSent || status == items.AlertEscalated {
		if owner, ok := toTheLog(alertedTo); ok {
			return loggedText(status == items.AlertEscalated, owner)
		}
	}
	return wordOf(alertWords, status)
}

// toTheLog reads whom the dispatcher recorded an alert to (items.Item.AlertedTo, or an alert event's note
// without its "to "): whether it went to the service's log, and the owner it named there (empty: none).
func toTheLog(alertedTo string) (owner string, logged bool) {
	if alertedTo == "the log" {
		return "", true
	}
	return strings.CutSuffix(alertedTo, " (in the log)")
}

// alertViews describes the item's alert outbox records, newest first, as of now.
func (c *Console) alertViews(as []items.Alert, now time.Time) []alertView {
	out := make([]alertView, 0, len(as))
	for i := len(as) - 1; i >= 0; i-- {
		a := as[i]
		v := alertView{Title: "Attempt " + strconv.Itoa(a.Attempt) + ": " + c.causeText(a.Cause), Word: a.Status}
		add := func(name, value, link string) { v.Lines = append(v.Lines, alertLine{name, value, link}) }
		logged := a.Channel == logChannel
		to := a.Owner
		switch {
		case to == "":
			to = "nobody: " + noOwnerText
		case logged:
			to += ", in the service's log only: " + noSlackText
		}
		switch {
		case a.Status == items.AlertEscalated && a.EscalationChannel == logChannel:
			v.Status = loggedText(true, a.EscalateTo)
		case (a.Status == items.AlertSent || a.Status == items.AlertEscalated) && logged:
			v.Status = loggedText(false, a.Owner)
		case a.Status != items.AlertPending:
			v.Status = wordOf(alertWords, a.Status)
		case a.TS != "":
			v.Status = "posted, not recorded as sent yet: the next dispatcher updates that message instead of posting another"
		case a.PostAttemptAt != nil:
			v.Status = "being posted: the post's landing is not recorded yet"
		default:
			v.Status = "due, not sent yet"
		}
		add("cause", a.Cause, "")
		add("to", to, "")
		add("due since", stamp(a.CreatedAt), "")
		if a.SentAt != nil {
			if logged {
				add("logged", stamp(*a.SentAt), "")
			} else {
				add("posted", stamp(*a.SentAt), "")
			}
		}
		switch {
		case logged:
			add("message", "none in Slack: a warning line in the service's log names the item", "")
		case a.Channel != "" || a.TS != "":
			add("message", "in "+a.Channel+" at ts "+a.TS, slackURL(a.Channel, a.TS))
		}
		if a.PostAttemptAt != nil {
			what := "a post"
			if a.Status == items.AlertSent {
				what = "an escalation post"
			}
			add("post under way", what+" began "+stamp(*a.PostAttemptAt)+" ("+items.Age(now.Sub(*a.PostAttemptAt))+
				" ago) and its landing is not recorded yet: the next sender looks for the message before posting, so it is not posted twice", "")
		}
		if a.EscalateTo != "" {
			switch {
			case a.EscalatedAt != nil:
				by := "when it was due"
				if a.EscalatedBy != "" {
					by = "asked by " + a.EscalatedBy
				}
				add("escalated", "to "+a.EscalateTo+" at "+stamp(*a.EscalatedAt)+", "+by, "")
			case a.EscalateAt != nil && a.Status == items.AlertSent:
				when := "due at " + stamp(*a.EscalateAt)
				if !a.EscalateAt.After(now) {
					when = "due since " + stamp(*a.EscalateAt) + ": the dispatcher sends it shortly"
				}
				if a.EscalatedBy != "" {
					when += ", asked by " + a.EscalatedBy
				}
				add("escalation", "to "+a.EscalateTo+", "+when, "")
			case a.Status != items.AlertClosed:
				add("escalation", "to "+a.EscalateTo+" if nobody acts within "+a.EscalateAfter.String()+" of the post", "")
			}
		}
		switch {
		case a.EscalationChannel == logChannel:
			add("escalation message", "none in Slack: a warning line in the service's log names the item", "")
		case a.EscalationChannel != "" || a.EscalationTS != "":
			add("escalation message", "in "+a.EscalationChannel+" at ts "+a.EscalationTS, slackURL(a.EscalationChannel, a.EscalationTS))
		}
		if a.ClosedAt != nil {
			add("closed", stamp(*a.ClosedAt), "")
		}
		out = append(out, v)
	}
	return out
}
