package alerts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/replaysafe/companion/items"
)

// The identifiers Slack sends back; they are part of the contract with the Slack app.
const (
	// ActionResolveCommitted, ActionResolveNotCommitted and ActionEscalate are the action ids of an item's
	// three buttons.
	ActionResolveCommitted    = "resolve_committed"
	ActionResolveNotCommitted = "resolve_not_committed"
	ActionEscalate            = "escalate"
	// ActionAcknowledge replaces Committed and Not committed on an item neither settles (a duplicate effect,
	// a retryable failure unresolved for too long): resolve outcome acknowledged.
	ActionAcknowledge = "acknowledge"
	// CallbackResolveEvidence is the callback id of the evidence modal.
	CallbackResolveEvidence = "resolve_evidence"
	// BlockEvidence/ActionEvidenceText and BlockExternalID/ActionExternalIDText are the modal's inputs.
	BlockEvidence        = "evidence"
	ActionEvidenceText   = "evidence_text"
	BlockExternalID      = "external_id"
	ActionExternalIDText = "external_id_text"
)

// DefaultSlackAPIURL is Slack's Web API.
const DefaultSlackAPIURL = "https://slack.com/api/"

// SlackConfig configures the Slack notifier and the interactivity endpoint.
type SlackConfig struct {
	// BotToken authenticates the Web API calls (SlackMethods; its scopes: SlackScopes). Required.
	BotToken string
	// SigningSecret verifies the interactivity requests Slack sends. Required.
	SigningSecret string
	// APIURL is the Web API's base URL. Default DefaultSlackAPIURL; tests and proxies set their own.
	APIURL string
	// HTTPClient makes the calls. Default: a client with a 10 s timeout.
	HTTPClient *http.Client
}

// Slack delivers alert messages to Slack and opens the evidence modal.
type Slack struct {
	client *slack.Client
	http   *http.Client
	secret string
}

// NewSlack validates cfg and returns the Slack notifier.
func NewSlack(cfg SlackConfig) (*Slack, error) {
	if cfg.BotToken == "" || cfg.SigningSecret == "" {
		return nil, errors.New("alerts: Slack needs both SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET")
	}
	if cfg.APIURL == "" {
		cfg.APIURL = DefaultSlackAPIURL
	}
	if !strings.HasSuffix(cfg.APIURL, "/") {
		cfg.APIURL += "/" // slack-go appends method names to it
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	c := slack.New(cfg.BotToken, slack.OptionAPIURL(cfg.APIURL), slack.OptionHTTPClient(cfg.HTTPClient))
	return &Slack{client: c, http: cfg.HTTPClient, secret: cfg.SigningSecret}, nil
}

// Post implements Notifier with chat.postMessage. An owner that is a user id gets a direct message from
// the app; a channel id gets a channel message. The message carries metadata naming its group and post
// attempt (MessageMetadata), by which FindPost finds it when the answer was lost.
func (s *Slack) Post(ctx context.Context, owner string, m Message) (MessageRef, error) {
	channel, ts, err := s.client.PostMessageContext(ctx, owner, slack.MsgOptionText(m.Text(), false), slack.MsgOptionBlocks(Blocks(m)...),
		slack.MsgOptionMetadata(MessageMetadata(m)))
	var refused slack.SlackErrorResponse
	var limited *slack.RateLimitedError
	if errors.As(err, &refused) || errors.As(err, &limited) {
		return MessageRef{}, fmt.Errorf("slack chat.postMessage to %s: %w: %w", owner, ErrPostRefused, err)
	}
	if err != nil {
		return MessageRef{}, fmt.Errorf("slack chat.postMessage to %s: %w", owner, err)
	}
	return MessageRef{Channel: channel, TS: ts}, nil
}

// ErrTokenRefused is what CheckToken returns (wrapped, with Slack's word and what to do) when Slack
// answered that the bot token cannot be used: it is wrong, revoked, expired, of the wrong kind, or its
// app or bot user is gone. Every call with that token will be refused the same way.
var ErrTokenRefused = errors.New("the bot token was refused by Slack")

// SlackIdentity is who a token is, as Slack's auth.test answers: the workspace and the user the
// messages are posted as. BotID is empty for a token that is not a bot's.
type SlackIdentity struct {
	Team, TeamID   string
	User, UserID   string
	BotID, TeamURL string
	// Scopes are the scopes the token was granted, from the X-OAuth-Scopes header of the answer, when
	// ScopesKnown: Slack sends it with every answer, but a proxy may drop or blank it (or a fake not
	// send it); a header naming no scope leaves them unknown.
	Scopes      []string
	ScopesKnown bool
}

// String names the identity for a log line: bot "companion" (U0BOT) in workspace "Acme" (T0ACME), or
// user "anna" (U0ANNA, a person's token, not a bot's) in workspace "Acme" (T0ACME).
func (id SlackIdentity) String() string {
	if id.BotID == "" {
		return fmt.Sprintf("user %q (%s, a person's token, not a bot's) in workspace %q (%s)", id.User, id.UserID, id.Team, id.TeamID)
	}
	return fmt.Sprintf("bot %q (%s) in workspace %q (%s)", id.User, id.UserID, id.Team, id.TeamID)
}

// tokenRefusals are the auth.test errors that say the token itself cannot be used, with what to do.
// Any other failure (no answer, a rate limit, Slack's own trouble) says nothing about the token.
var tokenRefusals = map[string]string{
	"invalid_auth": "Slack does not know this token (a typo, a truncated copy, or the token of another app or workspace); " +
		"copy the Bot User OAuth Token (xoxb-…) from the app's OAuth & Permissions page",
	"not_authed":       "no token reached Slack; set SLACK_BOT_TOKEN (or SLACK_BOT_TOKEN_FILE) to the bot token (xoxb-…)",
	"account_inactive": "the token's bot user or app is gone (the app was uninstalled or deactivated); reinstall the app and copy its new bot token (xoxb-…)",
	"token_revoked":    "the token was revoked (the app was uninstalled or its token regenerated); copy the current bot token (xoxb-…) from the app's OAuth & Permissions page",
	"token_expired": "the token expired (token rotation is on for the app, and companion does not refresh tokens); " +
		"turn token rotation off and copy the bot token (xoxb-…) again",
	"not_allowed_token_type": "this kind of token cannot be used here (an app-level token xapp-…?); use the Bot User OAuth Token (xoxb-…)",
	"no_permission":          "the token may not be used in this workspace; copy the Bot User OAuth Token (xoxb-…) of the app installed there",
	"org_login_required":     "the workspace is being migrated to an Enterprise Grid organization; wait for the migration and reinstall the app",
	"ekm_access_denied":      "the workspace's administrators have suspended this app's access (Enterprise Key Management)",
}

// CheckToken asks Slack who the bot token is (auth.test, one call, no scope needed), so that a wrong
// token is found when the service starts rather than at the first alert. It returns the identity with
// the token's granted scopes (for MissingScopes), or an error wrapping ErrTokenRefused (and Slack's
// slack.SlackErrorResponse) when Slack refused the token; any other error (Slack unreachable, ctx ended,
// a rate limit, Slack's own failure) leaves the token unchecked. The caller bounds the call with ctx.
func (s *Slack) CheckToken(ctx context.Context) (SlackIdentity, error) {
	r, err := s.client.AuthTestContext(ctx)
	var refused slack.SlackErrorResponse
	if errors.As(err, &refused) {
		if hint, ok := tokenRefusals[refused.Err]; ok {
			return SlackIdentity{}, fmt.Errorf("slack auth.test: %w: %w: %s", ErrTokenRefused, err, hint)
		}
	}
	if err != nil {
		return SlackIdentity{}, fmt.Errorf("slack auth.test: %w", err)
	}
	id := SlackIdentity{Team: r.Team, TeamID: r.TeamID, User: r.User, UserID: r.UserID, BotID: r.BotID, TeamURL: r.URL}
	// slack-go keeps the answer's headers on it (slack.OptionOnResponseHeaders would give them too). A
	// header that names no scope is not read as "no scope": Slack installs no app without one, so it
	// comes from something in between (a proxy that blanks it), and proves nothing missing.
	if scopes := parseScopes(r.Header.Values("X-OAuth-Scopes")); len(scopes) > 0 {
		id.Scopes, id.ScopesKnown = scopes, true
	}
	return id, nil
}

// MetadataEventType is the event_type of the metadata every alert message carries.
const MetadataEventType = "companion_alert"

// Limits of the history read of FindPost.
const (
	// historyPage is how many messages one conversations.history call asks for (Slack advises at most 200).
	historyPage = 200
	// historyPages bounds the calls of one FindPost: a conversation with more messages since the attempt
	// proves nothing, and the dispatcher tries again later.
	historyPages = 5
)

// MessageMetadata is the Slack message metadata of an alert message: its group (tenant, owner, batch,
// escalation) and its post attempt. It names the group only: no item, payload or secret is in it.
func MessageMetadata(m Message) slack.SlackMetadata {
	return slack.SlackMetadata{EventType: MetadataEventType, EventPayload: map[string]any{
		"tenant": m.Tenant, "owner": m.Owner, "batch_id": m.BatchID, "escalation": m.Escalation, "attempt": m.Attempt}}
}

// FindPost implements PostFinder with conversations.history (include_all_metadata) over the owner's
// conversation since since: a channel id is read as it is, a user id's direct messages with the app are
// opened first (conversations.open, which answers with the existing conversation). It reads at most
// historyPages pages of historyPage messages; a longer history is an error (nothing proven).
func (s *Slack) FindPost(ctx context.Context, owner string, m Message, attempts []string, since time.Time) (MessageRef, bool, error) {
	channel := owner
	if OwnerKindOf(owner) == OwnerUser {
		c, _, _, err := s.client.OpenConversationContext(ctx, &slack.OpenConversationParameters{Users: []string{owner}})
		if err != nil {
			return MessageRef{}, false, fmt.Errorf("slack conversations.open with %s: %w", owner, err)
		}
		channel = c.ID
	}
	want := MessageMetadata(m).EventPayload
	oldest := fmt.Sprintf("%d.%06d", since.Unix(), since.Nanosecond()/1000)
	cursor := ""
	for range historyPages {
		h, err := s.client.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{ChannelID: channel, Oldest: oldest,
			Inclusive: true, Limit: historyPage, Cursor: cursor, IncludeAllMetadata: true})
		if err != nil {
			return MessageRef{}, false, fmt.Errorf("slack conversations.history of %s: %w", channel, err)
		}
		for _, msg := range h.Messages {
			md := msg.Metadata
			if md.EventType != MetadataEventType || !sameGroup(md.EventPayload, want) {
				continue
			}
			for _, a := range attempts {
				if md.EventPayload["attempt"] == a {
					return MessageRef{Channel: channel, TS: msg.Timestamp}, true, nil
				}
			}
		}
		cursor = h.ResponseMetaData.NextCursor
		if !h.HasMore || cursor == "" {
			return MessageRef{}, false, nil
		}
	}
	return MessageRef{}, false, fmt.Errorf("slack conversations.history of %s: more than %d messages since %s", channel, historyPages*historyPage, oldest)
}

// sameGroup reports whether a message's metadata names the group of want.
func sameGroup(got, want map[string]any) bool {
	for _, k := range []string{"tenant", "owner", "batch_id", "escalation"} {
		if got[k] != want[k] {
			return false
		}
	}
	return true
}

// Update implements Notifier with chat.update. An update Slack answers with an error (the message was
// deleted, the app left the channel: message_not_found, channel_not_found, …) wraps ErrPostRefused: asking
// again would get the same answer. A rate limit, or Slack's own trouble (slackTrouble), does not.
func (s *Slack) Update(ctx context.Context, ref MessageRef, m Message) error {
	_, _, _, err := s.client.UpdateMessageContext(ctx, ref.Channel, ref.TS, slack.MsgOptionText(m.Text(), false), slack.MsgOptionBlocks(Blocks(m)...))
	var refused slack.SlackErrorResponse
	if errors.As(err, &refused) && !slackTrouble[refused.Err] {
		return fmt.Errorf("slack chat.update %s/%s: %w: %w", ref.Channel, ref.TS, ErrPostRefused, err)
	}
	if err != nil {
		return fmt.Errorf("slack chat.update %s/%s: %w", ref.Channel, ref.TS, err)
	}
	return nil
}

// slackTrouble are the errors with which Slack says the trouble is its own, for now: asking again later
// may work.
var slackTrouble = map[string]bool{"internal_error": true, "fatal_error": true, "service_unavailable": true,
	"request_timeout": true, "ratelimited": true}

// ButtonValue is the value of an item's buttons: which item they act on.
type ButtonValue struct {
	Tenant string `json:"tenant"`
	Key    string `json:"key"`
}

// ResolveMetadata is the evidence modal's private_metadata: the item and the outcome the owner chose, in
// the resolve endpoint's words (succeeded, not_committed or acknowledged).
type ResolveMetadata struct {
	Tenant  string `json:"tenant"`
	Key     string `json:"key"`
	Outcome string `json:"outcome"`
}

// Blocks renders a message as Slack blocks: a title, one section per listed item with its buttons while it
// is open (Committed, Not committed and Escalate; Acknowledge and Escalate where only an acknowledgement
// settles it), or a note saying how it was settled, and "and N more" with the query that lists all.
func Blocks(m Message) []slack.Block {
	blocks := []slack.Block{slack.NewSectionBlock(mrkdwn("*"+escape(m.Text())+"*"), nil, nil)}
	for i, l := range m.Lines {
		blocks = append(blocks, slack.NewSectionBlock(mrkdwn(lineText(l)), nil, nil))
		if l.Note != "" {
			blocks = append(blocks, slack.NewContextBlock(fmt.Sprintf("note_%d", i), mrkdwn(noteText(l))))
		}
		if !l.Open {
			continue
		}
		value, _ := json.Marshal(ButtonValue{Tenant: l.Tenant, Key: l.Key})
		escalate := slack.NewButtonBlockElement(ActionEscalate, string(value), plain("Escalate")).WithStyle(slack.StyleDanger)
		if l.Acknowledge {
			blocks = append(blocks, slack.NewActionBlock(fmt.Sprintf("item_%d", i),
				slack.NewButtonBlockElement(ActionAcknowledge, string(value), plain("Acknowledge")).WithStyle(slack.StylePrimary), escalate))
			continue
		}
		blocks = append(blocks, slack.NewActionBlock(fmt.Sprintf("item_%d", i),
			slack.NewButtonBlockElement(ActionResolveCommitted, string(value), plain("Committed")).WithStyle(slack.StylePrimary),
			slack.NewButtonBlockElement(ActionResolveNotCommitted, string(value), plain("Not committed")),
			escalate,
		))
	}
	if m.More > 0 {
		blocks = append(blocks, slack.NewContextBlock("more", mrkdwn(fmt.Sprintf("and %d more: `%s` or `%s`", m.More, escape(m.Command), escape(m.Query)))))
	}
	return blocks
}

func lineText(l Line) string {
	var b strings.Builder
	if l.URL != "" {
		// Slack's link syntax: the URL's own < > | are percent-encoded by ItemURL, the text is escaped.
		fmt.Fprintf(&b, "<%s|`%s`>", l.URL, escape(l.Key))
	} else {
		fmt.Fprintf(&b, "`%s`", l.Key)
	}
	if l.Reference != "" {
		fmt.Fprintf(&b, " · ref *%s*", escape(l.Reference))
	}
	fmt.Fprintf(&b, " · %s · %s · attempts %d", escape(l.Destination), l.State, l.Attempts)
	if l.LastErrorClass != "" {
		fmt.Fprintf(&b, " · last error %s", escape(l.LastErrorClass))
	}
	fmt.Fprintf(&b, " · waiting %s", items.Age(l.Age))
	fmt.Fprintf(&b, "\nwhy: %s", CauseText(l.Cause))
	if l.CheckHint != "" && l.Open {
		fmt.Fprintf(&b, "\ncheck: %s", escape(l.CheckHint))
	}
	if ev := l.Evidence; ev != "" {
		if len(ev) > 1500 { // a section holds 3000 characters
			ev = strings.ToValidUTF8(ev[:1500], "") + "…"
		}
		fmt.Fprintf(&b, "\n```%s```", escape(ev))
	}
	return b.String()
}

// noteText says in Slack's words what happened to an item since the alert.
func noteText(l Line) string {
	switch {
	case l.Resolution != nil:
		r := l.Resolution
		t := fmt.Sprintf(":white_check_mark: Resolved as *%s* by %s: %s", outcomeWord(r.Outcome), mention(r.By), escape(r.Evidence))
		if r.ExternalID != "" {
			t += fmt.Sprintf(" (external id `%s`)", escape(r.ExternalID))
		}
		return t
	case l.EscalatedTo != "":
		t := ":arrow_upper_right: Escalated to " + mention(l.EscalatedTo)
		if l.EscalatedBy != "" {
			t += " by " + mention(l.EscalatedBy)
		}
		return t
	}
	return escape(l.Note)
}

// CauseText says in the seeds' words why an item needs a person (Slack messages and the console).
func CauseText(cause string) string {
	switch cause {
	case items.CauseNoDedupe:
		return "the outcome is unknown and the destination can neither dedupe nor be searched"
	case items.CauseLookupFailed:
		return "the outcome is unknown and the lookup by reference failed"
	case items.CauseAttemptsExhausted:
		return "the write failed and no attempts are left"
	case items.CauseAwaitingOwner:
		return "the outcome is unknown and cannot be checked automatically"
	case items.CauseDuplicateEffect:
		return "a second success with another external id was reported: a duplicate effect may exist"
	case items.CauseStale:
		return "unresolved for longer than the destination's escalate_after, with nobody acting"
	}
	return cause
}

// mention renders a Slack id (or a "slack:<user id>" resolver name) as a mention Slack shows by name;
// any other name stays text.
func mention(name string) string {
	id := strings.TrimPrefix(name, "slack:")
	if len(id) >= 3 && strings.Trim(id[1:], "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") == "" {
		switch id[0] {
		case 'U', 'W':
			return "<@" + id + ">"
		case 'C', 'G':
			return "<#" + id + ">"
		}
	}
	return escape(name)
}

// escape applies Slack's three escapes to text shown in mrkdwn.
func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func mrkdwn(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.MarkdownType, s, false, false)
}
func plain(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.PlainTextType, s, false, false)
}

// ResolveModal returns the evidence modal for an item and the outcome the owner chose. An acknowledgement
// asks for the evidence only: it changes no result, so there is no external id to give.
func ResolveModal(meta ResolveMetadata, it *items.Item, checkHint string) slack.ModalViewRequest {
	md, _ := json.Marshal(meta)
	intro := fmt.Sprintf("Mark `%s` as *%s*.", meta.Key, outcomeWord(meta.Outcome))
	if meta.Outcome == items.ResolveAcknowledged {
		intro = fmt.Sprintf("Acknowledge `%s`: you have seen it and take it from here. It stops waiting for a person; "+
			"its state, attempts and result stay as they are.", meta.Key)
	}
	if it != nil {
		if it.Reference != "" {
			intro += fmt.Sprintf("\nReference *%s* at %s.", escape(it.Reference), escape(it.Destination))
		} else {
			intro += fmt.Sprintf("\nDestination %s.", escape(it.Destination))
		}
	}
	if checkHint != "" {
		intro += "\nCheck: " + escape(checkHint)
	}
	intro += "\nWrite what you checked and what you saw; it is kept with the item."
	evidence := slack.NewPlainTextInputBlockElement(plain("e.g. found invoice INV-88 for QT-2026-0417 in the billing tool, sent 18:03"), ActionEvidenceText)
	evidence.Multiline = true
	evidence.MinLength = items.MinEvidenceLength
	evidence.MaxLength = 2000
	blocks := []slack.Block{
		slack.NewSectionBlock(mrkdwn(intro), nil, nil),
		slack.NewInputBlock(BlockEvidence, plain("Evidence"), plain("At least 10 characters: where you looked and what you found."), evidence),
	}
	submit := "Acknowledge"
	if meta.Outcome != items.ResolveAcknowledged {
		externalID := slack.NewPlainTextInputBlockElement(plain("the destination's id for the record, if you found one"), ActionExternalIDText)
		externalID.MaxLength = 500
		blocks = append(blocks, slack.NewInputBlock(BlockExternalID, plain("External id"), nil, externalID).WithOptional(true))
		submit = "Resolve"
	}
	return slack.ModalViewRequest{
		Type:            slack.VTModal,
		CallbackID:      CallbackResolveEvidence,
		Title:           plain("Resolve with evidence"),
		Submit:          plain(submit),
		Close:           plain("Cancel"),
		PrivateMetadata: string(md),
		Blocks:          slack.Blocks{BlockSet: blocks},
	}
}

// OpenResolveModal opens the evidence modal with views.open; triggerID comes from the button press and
// is valid for three seconds.
func (s *Slack) OpenResolveModal(ctx context.Context, triggerID string, view slack.ModalViewRequest) error {
	if _, err := s.client.OpenViewContext(ctx, triggerID, view); err != nil {
		return fmt.Errorf("slack views.open: %w", err)
	}
	return nil
}

// Ephemeral answers the person who pressed a button, through the press's response_url, without
// changing the message.
func (s *Slack) Ephemeral(ctx context.Context, responseURL, text string) error {
	if responseURL == "" {
		return nil
	}
	return slack.PostWebhookCustomHTTPContext(ctx, responseURL, s.http, &slack.WebhookMessage{Text: text, ResponseType: "ephemeral"})
}
