package alerts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/replaysafe/companion/items"
)

// MaxRequestAge is how old a Slack request's timestamp may be; older requests are refused (a replayed
// request cannot act again after it).
const MaxRequestAge = 5 * time.Minute

// DefaultOpenTimeout bounds views.open: Slack's trigger id lasts three seconds, and the request must be
// answered within them.
const DefaultOpenTimeout = 2500 * time.Millisecond

// Errors of Actions.Handle that are not about the payload. The HTTP layer answers 401 for both.
var (
	// ErrUnverified: the request does not carry a valid Slack signature.
	ErrUnverified = errors.New("alerts: the request is not signed with the Slack signing secret")
	// ErrStaleRequest: the request's timestamp is older than MaxRequestAge (or missing).
	ErrStaleRequest = errors.New("alerts: the request's timestamp is older than five minutes")
)

// ActionsConfig configures Actions.
type ActionsConfig struct {
	// Slack opens modals and answers button presses; its signing secret verifies requests. Required.
	Slack *Slack
	// Dispatcher resolves and escalates items and updates the messages. Required.
	Dispatcher *Dispatcher
	// Now is the clock the request age is checked against. Default time.Now.
	Now func() time.Time
	// OpenTimeout bounds views.open. Default DefaultOpenTimeout.
	OpenTimeout time.Duration
	// Logger gets failures. Default slog.Default().
	Logger *slog.Logger
}

// Actions answers Slack's interactivity requests: the item buttons (block_actions) and the evidence
// modal's submission (view_submission).
type Actions struct {
	cfg ActionsConfig
}

// NewActions validates cfg and returns the interactivity handler logic.
func NewActions(cfg ActionsConfig) (*Actions, error) {
	if cfg.Slack == nil || cfg.Dispatcher == nil {
		return nil, errors.New("alerts: Slack actions need the Slack settings and a dispatcher")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.OpenTimeout == 0 {
		cfg.OpenTimeout = DefaultOpenTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Actions{cfg: cfg}, nil
}

// Reply is what to answer Slack with: status 200 and Body as JSON, or an empty body when Body is nil.
type Reply struct {
	Body []byte
}

// Handle verifies a request Slack sent to the interactivity URL and acts on it. It returns ErrStaleRequest
// or ErrUnverified for a request that must be refused before anything is read, and an invalid_request
// *items.Error for a verified body it cannot understand. Everything else is answered with a Reply (a
// refusal the person must see, such as a missing evidence text, is a Reply with the modal's errors).
func (a *Actions) Handle(ctx context.Context, header http.Header, body []byte) (Reply, error) {
	if err := a.verify(header, body); err != nil {
		return Reply{}, err
	}
	form, err := url.ParseQuery(string(body))
	if err != nil || form.Get("payload") == "" {
		return Reply{}, items.Invalid("payload", "must be Slack's form-encoded interaction payload")
	}
	var cb slack.InteractionCallback
	if err := json.Unmarshal([]byte(form.Get("payload")), &cb); err != nil {
		return Reply{}, items.Invalid("payload", "is not an interaction payload")
	}
	switch cb.Type {
	case slack.InteractionTypeBlockActions:
		return a.blockActions(ctx, &cb)
	case slack.InteractionTypeViewSubmission:
		if cb.View.CallbackID == CallbackResolveEvidence {
			return a.submitEvidence(ctx, &cb)
		}
	}
	return Reply{}, nil
}

func (a *Actions) verify(header http.Header, body []byte) error {
	ts, err := strconv.ParseInt(header.Get("X-Slack-Request-Timestamp"), 10, 64)
	if err != nil || a.cfg.Now().Sub(time.Unix(ts, 0)) > MaxRequestAge {
		return ErrStaleRequest
	}
	sv, err := slack.NewSecretsVerifier(header, a.cfg.Slack.secret)
	if errors.Is(err, slack.ErrExpiredTimestamp) {
		return ErrStaleRequest
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnverified, err)
	}
	if _, err := sv.Write(body); err != nil {
		return fmt.Errorf("%w: %v", ErrUnverified, err)
	}
	if err := sv.Ensure(); err != nil {
		return fmt.Errorf("%w: %v", ErrUnverified, err)
	}
	return nil
}

// slackUser names a Slack user as a resolver: "slack:" and the user id.
func slackUser(u slack.User) string { return "slack:" + u.ID }

func (a *Actions) blockActions(ctx context.Context, cb *slack.InteractionCallback) (Reply, error) {
	for _, act := range cb.ActionCallback.BlockActions {
		var v ButtonValue
		if act.ActionID != ActionResolveCommitted && act.ActionID != ActionResolveNotCommitted && act.ActionID != ActionAcknowledge &&
			act.ActionID != ActionEscalate {
			continue
		}
		if err := json.Unmarshal([]byte(act.Value), &v); err != nil || v.Tenant == "" || !items.ValidKey(v.Key) {
			return Reply{}, items.Invalid("actions.value", `must be {"tenant":…,"key":…}`)
		}
		switch act.ActionID {
		case ActionEscalate:
			a.escalate(ctx, cb, v)
		default:
			outcome := items.ResolveSucceeded
			switch act.ActionID {
			case ActionResolveNotCommitted:
				outcome = items.ResolveNotCommitted
			case ActionAcknowledge:
				outcome = items.ResolveAcknowledged
			}
			a.openModal(ctx, cb, ResolveMetadata{Tenant: v.Tenant, Key: v.Key, Outcome: outcome})
		}
	}
	return Reply{}, nil
}

// openModal opens the evidence modal, unless the item was settled already (a repeated click): then the
// person is told by whom, and the message is brought up to date.
func (a *Actions) openModal(ctx context.Context, cb *slack.InteractionCallback, meta ResolveMetadata) {
	d := a.cfg.Dispatcher
	it, err := d.cfg.Ledger.Get(ctx, meta.Tenant, meta.Key)
	switch {
	case errors.Is(err, items.ErrNotFound):
		a.tell(cb, fmt.Sprintf("`%s` is not in the ledger any more.", meta.Key))
		return
	case err != nil:
		a.cfg.Logger.ErrorContext(ctx, "slack action: reading the item failed", "tenant", meta.Tenant, "key", meta.Key, "error", err)
		a.tell(cb, "The ledger could not be read; try again in a moment.")
		return
	case !it.NeedsPerson && it.Resolution != nil:
		r := it.Resolution
		a.tell(cb, fmt.Sprintf("`%s` was already resolved as %s by %s at %s.", meta.Key, outcomeWord(r.Outcome), mention(r.By), r.At.Format(time.RFC3339)))
		d.settled(meta.Tenant, meta.Key)
		return
	case !it.NeedsPerson:
		// Settled without a person (a lookup, a late report), and the message not updated yet.
		a.tell(cb, fmt.Sprintf("`%s` no longer needs a person: it was settled without one, and is %s now.", meta.Key, it.State))
		d.settled(meta.Tenant, meta.Key)
		return
	}
	octx, cancel := context.WithTimeout(ctx, a.cfg.OpenTimeout)
	defer cancel()
	view := ResolveModal(meta, it, d.target(it).CheckHint)
	if err := a.cfg.Slack.OpenResolveModal(octx, cb.TriggerID, view); err != nil {
		a.cfg.Logger.ErrorContext(ctx, "slack action: opening the evidence modal failed", "key", meta.Key, "error", err)
		a.tell(cb, "The evidence dialog could not be opened; press the button again.")
	}
}

func (a *Actions) escalate(ctx context.Context, cb *slack.InteractionCallback, v ButtonValue) {
	res, err := a.cfg.Dispatcher.Escalate(ctx, v.Tenant, v.Key, slackUser(cb.User))
	switch {
	case err != nil:
		a.cfg.Logger.ErrorContext(ctx, "slack action: escalation failed", "tenant", v.Tenant, "key", v.Key, "error", err)
		a.tell(cb, "The escalation could not be recorded; try again in a moment.")
	case res.Requested > 0:
		a.tell(cb, fmt.Sprintf("Escalating `%s`.", v.Key))
	case len(res.Already) > 0:
		a.tell(cb, fmt.Sprintf("`%s` was already escalated to %s.", v.Key, mention(res.Already[0])))
	case res.NoTarget:
		a.tell(cb, fmt.Sprintf("No escalate_to owner is configured for `%s`; nothing was escalated.", v.Key))
	default:
		a.tell(cb, fmt.Sprintf("`%s` has no alert that can escalate now.", v.Key))
	}
}

// tell answers the person who pressed a button, in the background so the request is answered at once.
func (a *Actions) tell(cb *slack.InteractionCallback, text string) {
	url := cb.ResponseURL
	a.cfg.Dispatcher.background(func(ctx context.Context) {
		if err := a.cfg.Slack.Ephemeral(ctx, url, text); err != nil {
			a.cfg.Logger.WarnContext(ctx, "slack action: answering the person failed", "error", err)
		}
	})
}

// submitEvidence resolves the item the modal was opened for, with the Slack user as the resolver. A
// refusal the person can fix comes back as errors on the modal's inputs; the modal closes on success.
func (a *Actions) submitEvidence(ctx context.Context, cb *slack.InteractionCallback) (Reply, error) {
	var meta ResolveMetadata
	if err := json.Unmarshal([]byte(cb.View.PrivateMetadata), &meta); err != nil || meta.Tenant == "" || !items.ValidKey(meta.Key) {
		return Reply{}, items.Invalid("view.private_metadata", `must be {"tenant","key","outcome"}`)
	}
	value := func(block, action string) string {
		if cb.View.State == nil {
			return ""
		}
		return cb.View.State.Values[block][action].Value
	}
	p := items.ResolveParams{Tenant: meta.Tenant, Key: meta.Key, Outcome: meta.Outcome,
		Evidence: value(BlockEvidence, ActionEvidenceText), ExternalID: strings.TrimSpace(value(BlockExternalID, ActionExternalIDText)),
		By: slackUser(cb.User)}
	if err := items.CheckResolve(p); err != nil {
		var e *items.Error
		if errors.As(err, &e) && len(e.Fields) > 0 && e.Fields[0].Field == "external_id" {
			return modalErrors(BlockExternalID, "External id: "+e.Fields[0].Problem)
		}
		if errors.As(err, &e) && len(e.Fields) > 0 && e.Fields[0].Field == "evidence" {
			return modalErrors(BlockEvidence, "Evidence "+e.Fields[0].Problem+": say where you looked and what you found.")
		}
		return modalErrors(BlockEvidence, "This dialog is damaged; close it and press the button again.")
	}
	_, _, err := a.cfg.Dispatcher.Resolve(ctx, p)
	if err == nil {
		return Reply{}, nil
	}
	switch items.ErrorCode(err) {
	case items.CodeConflict:
		if it, gerr := a.cfg.Dispatcher.cfg.Ledger.Get(ctx, p.Tenant, p.Key); gerr == nil && it.Resolution != nil && !it.NeedsPerson {
			r := it.Resolution
			a.cfg.Dispatcher.settled(p.Tenant, p.Key)
			return modalErrors(BlockEvidence, fmt.Sprintf("Already resolved as %s by %s at %s: %s", outcomeWord(r.Outcome),
				strings.TrimPrefix(r.By, "slack:"), r.At.Format(time.RFC3339), r.Evidence))
		}
		var e *items.Error
		errors.As(err, &e)
		return modalErrors(BlockEvidence, "Cannot resolve: "+e.Message)
	case items.CodeNotFound:
		return modalErrors(BlockEvidence, "This item is not in the ledger any more.")
	default:
		a.cfg.Logger.ErrorContext(ctx, "slack action: resolving failed", "tenant", p.Tenant, "key", p.Key, "error", err)
		return modalErrors(BlockEvidence, "The ledger could not record this just now; submit again in a moment.")
	}
}

func modalErrors(block, problem string) (Reply, error) {
	b, err := json.Marshal(slack.NewErrorsViewSubmissionResponse(map[string]string{block: problem}))
	return Reply{Body: b}, err
}
