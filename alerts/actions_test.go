package alerts_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/alerts"
	"github.com/replaysafe/companion/items"
)

// slackSide is a test's view of Slack: the fake Web API, and the requests Slack would send to the
// interactivity URL, signed like Slack signs them.
type slackSide struct {
	*fakeSlack
	e       *env
	d       *alerts.Dispatcher
	actions *alerts.Actions
}

func newSlackSide(t *testing.T, cfg items.Config, r alerts.Routing) *slackSide {
	e := newEnv(t, cfg)
	f := newFakeSlack(t)
	n := f.notifier(t)
	d := e.dispatcher(e.ledger, n, r)
	a, err := alerts.NewActions(alerts.ActionsConfig{Slack: n, Dispatcher: d, Logger: e.logger})
	if err != nil {
		t.Fatal(err)
	}
	return &slackSide{fakeSlack: f, e: e, d: d, actions: a}
}

// sign returns the headers Slack sends with body at time at, signed with secret.
func sign(body string, at time.Time, secret string) http.Header {
	stamp := strconv.FormatInt(at.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "v0:%s:%s", stamp, body)
	h := http.Header{}
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	h.Set("X-Slack-Request-Timestamp", stamp)
	h.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
	return h
}

func form(payload any) string {
	b, _ := json.Marshal(payload)
	return url.Values{"payload": {string(b)}}.Encode()
}

// click is the block_actions payload of a button press by user on a message.
func (s *slackSide) click(user string, msg slackMessage, actionID, value string) string {
	return form(map[string]any{
		"type":         "block_actions",
		"user":         map[string]any{"id": user, "username": strings.ToLower(user)},
		"trigger_id":   "13345224609.738474920.8088930838d88f008e0",
		"response_url": s.responseURL(),
		"container":    map[string]any{"type": "message", "message_ts": msg.TS, "channel_id": msg.Channel},
		"channel":      map[string]any{"id": msg.Channel},
		"actions": []any{map[string]any{"type": "button", "action_id": actionID, "block_id": "item_0", "value": value,
			"action_ts": "1764439300.000001"}},
	})
}

// submit is the view_submission payload of the evidence modal.
func submit(user, privateMetadata, evidence, externalID string) string {
	return form(map[string]any{
		"type": "view_submission",
		"user": map[string]any{"id": user},
		"view": map[string]any{
			"id": "V1", "type": "modal", "callback_id": alerts.CallbackResolveEvidence, "private_metadata": privateMetadata,
			"state": map[string]any{"values": map[string]any{
				alerts.BlockEvidence:   map[string]any{alerts.ActionEvidenceText: map[string]any{"type": "plain_text_input", "value": evidence}},
				alerts.BlockExternalID: map[string]any{alerts.ActionExternalIDText: map[string]any{"type": "plain_text_input", "value": externalID}},
			}},
		},
	})
}

func (s *slackSide) send(t *testing.T, body string) alerts.Reply {
	t.Helper()
	start := time.Now()
	r, err := s.actions.Handle(s.e.ctx, sign(body, time.Now(), signingSecret), []byte(body))
	if err != nil {
		t.Fatalf("Slack request refused: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("answered after %v; Slack waits three seconds", took)
	}
	s.d.Wait() // answers to the person and message updates run in the background
	return r
}

// buttonOf returns the value of a message's button for key and action.
func buttonOf(t *testing.T, m slackMessage, key, action string) string {
	t.Helper()
	for _, b := range m.buttons() {
		if b[0] == action && strings.Contains(b[1], `"key":"`+key+`"`) {
			return b[1]
		}
	}
	t.Fatalf("message has no %s button for %s", action, key)
	return ""
}

func TestSlackButtonAndModalResolveAnItemEndToEnd(t *testing.T) {
	t.Parallel()
	s := newSlackSide(t, items.Config{Destinations: map[string]items.Destination{
		"billing": {Owner: "U0OWNER", CheckHint: "search the billing tool for the quote reference"}}}, alerts.Routing{})
	e := s.e
	e.needsPerson("inv", "exec-1", 3)
	e.dispatch(s.d)
	msg := s.Posts()[0]

	if r := s.send(t, s.click("U0ALICE", msg, alerts.ActionResolveCommitted, buttonOf(t, msg, "inv-001", alerts.ActionResolveCommitted))); r.Body != nil {
		t.Fatalf("button press answered %s, want an empty 200", r.Body)
	}
	views := s.Views()
	if len(views) != 1 {
		t.Fatalf("%d views opened, want 1", len(views))
	}
	v := views[0]
	if v.TriggerID != "13345224609.738474920.8088930838d88f008e0" || v.View["callback_id"] != alerts.CallbackResolveEvidence || v.View["type"] != "modal" {
		t.Fatalf("views.open %v", v)
	}
	var meta map[string]string
	if err := json.Unmarshal([]byte(v.View["private_metadata"].(string)), &meta); err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"tenant": "default", "key": "inv-001", "outcome": "succeeded"}; fmt.Sprint(meta) != fmt.Sprint(want) {
		t.Fatalf("private_metadata %v, want %v", meta, want)
	}
	inputs := map[string]map[string]any{}
	for _, b := range v.View["blocks"].([]any) {
		bl := b.(map[string]any)
		if bl["type"] == "input" {
			inputs[bl["block_id"].(string)] = bl
		}
	}
	ev, ext := inputs[alerts.BlockEvidence], inputs[alerts.BlockExternalID]
	if ev == nil || ev["element"].(map[string]any)["action_id"] != alerts.ActionEvidenceText || ev["optional"] == true {
		t.Fatalf("evidence input %v, want a required input with action id evidence_text", ev)
	}
	if ext == nil || ext["element"].(map[string]any)["action_id"] != alerts.ActionExternalIDText || ext["optional"] != true {
		t.Fatalf("external id input %v, want an optional input with action id external_id_text", ext)
	}
	if !strings.Contains(fmt.Sprint(v.View["blocks"]), "search the billing tool for the quote reference") {
		t.Errorf("the modal does not say where to check")
	}

	evidence := "found invoice INV-88 for QT-inv-001 in the billing tool, sent 18:03"
	if r := s.send(t, submit("U0ALICE", v.View["private_metadata"].(string), evidence, " INV-88 ")); r.Body != nil {
		t.Fatalf("submission answered %s, want an empty 200 (the modal closes)", r.Body)
	}
	it := e.get("inv-001")
	if it.State != items.StateSucceeded || it.NeedsPerson || it.ExternalID != "INV-88" {
		t.Fatalf("item is %s needs_person=%v external id %q, want succeeded, settled, INV-88", it.State, it.NeedsPerson, it.ExternalID)
	}
	if r := it.Resolution; r == nil || r.By != "slack:U0ALICE" || r.Evidence != evidence || r.Outcome != "succeeded" {
		t.Fatalf("resolution %+v, want by slack:U0ALICE with the evidence", it.Resolution)
	}
	ups := s.Updates()
	if len(ups) != 1 || ups[0].TS != msg.TS || ups[0].Channel != msg.Channel {
		t.Fatalf("updates %v, want one of the original message %s", ups, msg.TS)
	}
	text := ups[0].texts()
	if !strings.Contains(text, "Resolved as *committed* by <@U0ALICE>: "+evidence+" (external id `INV-88`)") {
		t.Fatalf("updated message does not show who resolved what:\n%s", text)
	}
	for _, b := range ups[0].buttons() {
		if strings.Contains(b[1], `"inv-001"`) {
			t.Fatalf("the resolved item still has buttons: %v", b)
		}
	}
	if n := len(ups[0].buttons()); n != 6 {
		t.Fatalf("%d buttons left, want 6 for the two open items", n)
	}

	// Repeated submission and repeated clicks change nothing.
	if r := s.send(t, submit("U0ALICE", v.View["private_metadata"].(string), evidence, "INV-88")); r.Body != nil {
		t.Fatalf("repeated submission answered %s", r.Body)
	}
	s.send(t, s.click("U0BOB", msg, alerts.ActionResolveNotCommitted, buttonOf(t, msg, "inv-001", alerts.ActionResolveNotCommitted)))
	if n := len(s.Views()); n != 1 {
		t.Fatalf("a click on a resolved item opened a modal (%d views)", n)
	}
	if eph := s.Ephemerals(); len(eph) != 1 || !strings.Contains(eph[0], "already resolved as committed by <@U0ALICE>") {
		t.Fatalf("answers to the person %v", eph)
	}
	resolves := 0
	for _, ev := range e.get("inv-001").History {
		if ev.Kind == items.EventResolve {
			resolves++
		}
	}
	if resolves != 1 {
		t.Fatalf("%d resolutions recorded, want 1", resolves)
	}

	// A second resolver with other evidence is told who was first.
	r := s.send(t, submit("U0BOB", `{"tenant":"default","key":"inv-001","outcome":"not_committed"}`, "nothing in the billing tool", ""))
	if !strings.Contains(string(r.Body), `"response_action":"errors"`) || !strings.Contains(string(r.Body), "Already resolved as committed by U0ALICE") {
		t.Fatalf("conflicting resolution answered %s", r.Body)
	}
}

func TestSlackNotCommittedGrantsOneMoreAttempt(t *testing.T) {
	t.Parallel()
	s := newSlackSide(t, items.Config{Destinations: map[string]items.Destination{"billing": {Owner: "U0OWNER"}}}, alerts.Routing{})
	e := s.e
	e.needsPerson("inv", "", 1)
	e.dispatch(s.d)
	s.send(t, submit("U0ALICE", `{"tenant":"default","key":"inv-000","outcome":"not_committed"}`,
		"checked the sent folder and the delivery log: nothing went out", ""))
	it := e.get("inv-000")
	if it.State != items.StateFailed || !it.Retryable || it.Resolution == nil || it.Resolution.Outcome != items.ResolveNotCommitted {
		t.Fatalf("item is %s retryable=%v resolution %+v, want failed, retryable, not_committed", it.State, it.Retryable, it.Resolution)
	}
	if a := e.claim("inv-000", withDedupe(items.DedupeNone)); a.Reason != items.ReasonRetry {
		t.Fatalf("next before-write: %s/%s, want proceed/retry", a.Decision, a.Reason)
	}
}

func TestSlackRequestsAreRefused(t *testing.T) {
	t.Parallel()
	s := newSlackSide(t, items.Config{Destinations: map[string]items.Destination{"billing": {Owner: "U0OWNER"}}}, alerts.Routing{})
	e := s.e
	e.needsPerson("inv", "", 1)
	e.dispatch(s.d)
	meta := `{"tenant":"default","key":"inv-000","outcome":"succeeded"}`
	good := submit("U0ALICE", meta, "found invoice INV-88 in the billing tool", "")

	if _, err := s.actions.Handle(e.ctx, sign(good, time.Now(), "another-secret"), []byte(good)); !errors.Is(err, alerts.ErrUnverified) {
		t.Errorf("bad signature: %v, want ErrUnverified", err)
	}
	tampered := strings.Replace(good, "INV-88", "INV-89", 1)
	if _, err := s.actions.Handle(e.ctx, sign(good, time.Now(), signingSecret), []byte(tampered)); !errors.Is(err, alerts.ErrUnverified) {
		t.Errorf("body changed after signing: %v, want ErrUnverified", err)
	}
	old := time.Now().Add(-5*time.Minute - 10*time.Second)
	if _, err := s.actions.Handle(e.ctx, sign(good, old, signingSecret), []byte(good)); !errors.Is(err, alerts.ErrStaleRequest) {
		t.Errorf("timestamp older than five minutes: %v, want ErrStaleRequest", err)
	}
	if _, err := s.actions.Handle(e.ctx, http.Header{}, []byte(good)); !errors.Is(err, alerts.ErrStaleRequest) && !errors.Is(err, alerts.ErrUnverified) {
		t.Errorf("no signature headers: %v, want a refusal", err)
	}
	for _, evidence := range []string{"", "   ", "looked ok"} {
		r := s.send(t, submit("U0ALICE", meta, evidence, ""))
		var body struct {
			ResponseAction string            `json:"response_action"`
			Errors         map[string]string `json:"errors"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil || body.ResponseAction != "errors" || body.Errors[alerts.BlockEvidence] == "" {
			t.Errorf("evidence %q answered %s, want an error on the evidence block", evidence, r.Body)
		}
	}
	if it := e.get("inv-000"); it.State != items.StateUnknown || !it.NeedsPerson || it.Resolution != nil {
		t.Fatalf("refused requests changed the item: %s needs_person=%v %+v", it.State, it.NeedsPerson, it.Resolution)
	}
	if n := len(s.Updates()); n != 0 {
		t.Fatalf("refused requests updated %d messages", n)
	}
}

func TestSlackEscalateButtonReroutes(t *testing.T) {
	t.Parallel()
	s := newSlackSide(t, items.Config{Destinations: map[string]items.Destination{
		"billing": {Owner: "U0OWNER", EscalateTo: "U0BOSS", EscalateAfter: 24 * time.Hour},
		"crm":     {Owner: "U0CRM"},
	}}, alerts.Routing{})
	e := s.e
	e.needsPerson("inv", "", 2)
	e.needsPerson("crm", "", 1, withDest("crm"))
	e.dispatch(s.d)
	var billing, crm slackMessage
	for _, p := range s.Posts() {
		if strings.Contains(fmt.Sprint(p.buttons()), "inv-000") {
			billing = p
		} else {
			crm = p
		}
	}

	s.send(t, s.click("U0OWNER", billing, alerts.ActionEscalate, buttonOf(t, billing, "inv-000", alerts.ActionEscalate)))
	c := e.dispatch(s.d)
	if c.Escalated != 1 {
		t.Fatalf("counts %+v after the escalate button, want one escalated alert", c)
	}
	posts := s.Posts()
	esc := posts[len(posts)-1]
	if esc.Channel != "D0BOSS" || len(esc.buttons()) != 3 || !strings.Contains(esc.buttons()[0][1], `"inv-000"`) {
		t.Fatalf("escalation to %s with buttons %v, want inv-000 to D0BOSS", esc.Channel, esc.buttons())
	}
	s.d.Wait()
	if text := s.Updates()[len(s.Updates())-1].texts(); !strings.Contains(text, "Escalated to <@U0BOSS> by <@U0OWNER>") {
		t.Fatalf("the first message does not show the escalation:\n%s", text)
	}

	// Pressing again changes nothing; an item without escalate_to says so.
	s.send(t, s.click("U0OWNER", billing, alerts.ActionEscalate, buttonOf(t, billing, "inv-000", alerts.ActionEscalate)))
	s.send(t, s.click("U0OWNER", crm, alerts.ActionEscalate, buttonOf(t, crm, "crm-000", alerts.ActionEscalate)))
	if c := e.dispatch(s.d); c.Escalated != 0 || c.Messages != 0 {
		t.Fatalf("repeated escalate sent %+v", c)
	}
	eph := strings.Join(s.Ephemerals(), "\n")
	for _, want := range []string{"Escalating `inv-000`", "`inv-000` was already escalated to <@U0BOSS>",
		"No escalate_to owner is configured for `crm-000`"} {
		if !strings.Contains(eph, want) {
			t.Errorf("answers lack %q:\n%s", want, eph)
		}
	}
}

// A duplicate effect is settled by neither Committed nor Not committed: its line offers Acknowledge (and
// Escalate), whose modal asks for the evidence only; the acknowledgement clears the need for a person,
// closes the alert and shows on the message, and the item's state, attempt and result stay.
func TestSlackAcknowledgeButtonSettlesADuplicateEffect(t *testing.T) {
	t.Parallel()
	s := newSlackSide(t, items.Config{Destinations: map[string]items.Destination{"billing": {Owner: "U0OWNER"}}}, alerts.Routing{})
	e := s.e
	e.needsPerson("inv", "", 1) // an unknown item beside it keeps the usual buttons
	a := e.claim("dup", withDedupe(items.DedupeKey))
	e.report("dup", a.Claim, succeeded, func(p *items.AfterWriteParams) { p.ExternalID = "INV-1" })
	e.report("dup", a.Claim, succeeded, func(p *items.AfterWriteParams) { p.ExternalID = "INV-2" })
	e.dispatch(s.d)
	posts := s.Posts()
	if len(posts) != 1 {
		t.Fatalf("%d messages, want 1", len(posts))
	}
	msg := posts[0]
	var dupButtons, unknownButtons []string
	for _, b := range msg.buttons() {
		switch {
		case strings.Contains(b[1], `"key":"dup"`):
			dupButtons = append(dupButtons, b[0])
		case strings.Contains(b[1], `"key":"inv-000"`):
			unknownButtons = append(unknownButtons, b[0])
		}
	}
	if fmt.Sprint(dupButtons) != fmt.Sprint([]string{alerts.ActionAcknowledge, alerts.ActionEscalate}) ||
		fmt.Sprint(unknownButtons) != fmt.Sprint([]string{alerts.ActionResolveCommitted, alerts.ActionResolveNotCommitted, alerts.ActionEscalate}) {
		t.Fatalf("buttons: duplicate effect %v, unknown item %v", dupButtons, unknownButtons)
	}

	s.send(t, s.click("U0ALICE", msg, alerts.ActionAcknowledge, buttonOf(t, msg, "dup", alerts.ActionAcknowledge)))
	views := s.Views()
	if len(views) != 1 {
		t.Fatalf("%d views opened, want 1", len(views))
	}
	v := views[0]
	md := v.View["private_metadata"].(string)
	if md != `{"tenant":"default","key":"dup","outcome":"acknowledged"}` {
		t.Fatalf("private_metadata %s", md)
	}
	blocks := fmt.Sprint(v.View["blocks"])
	if !strings.Contains(blocks, alerts.BlockEvidence) || strings.Contains(blocks, alerts.BlockExternalID) || !strings.Contains(blocks, "Acknowledge `dup`") {
		t.Fatalf("the acknowledge modal, want the evidence input only: %s", blocks)
	}
	// Too short evidence comes back on the modal; nothing is recorded.
	if r := s.send(t, submit("U0ALICE", md, "seen", "")); !strings.Contains(string(r.Body), `"response_action":"errors"`) {
		t.Fatalf("short evidence answered %s", r.Body)
	}
	evidence := "INV-2 voided in billing; customer told"
	if r := s.send(t, submit("U0ALICE", md, evidence, "")); r.Body != nil {
		t.Fatalf("submission answered %s, want an empty 200 (the modal closes)", r.Body)
	}
	it := e.get("dup")
	if it.State != items.StateSucceeded || it.NeedsPerson || it.ExternalID != "INV-1" || it.Attempt != 1 || !it.DuplicateEffect {
		t.Fatalf("item is %s needs_person=%v external id %q attempt %d duplicate %v", it.State, it.NeedsPerson, it.ExternalID, it.Attempt, it.DuplicateEffect)
	}
	if r := it.Resolution; r == nil || r.Outcome != items.ResolveAcknowledged || r.By != "slack:U0ALICE" || r.Evidence != evidence {
		t.Fatalf("resolution %+v", it.Resolution)
	}
	alertsOf, err := e.store.ItemAlerts(e.ctx, "default", "dup")
	if err != nil || len(alertsOf) != 1 || alertsOf[0].Status != items.AlertClosed {
		t.Fatalf("the item's alerts %+v (%v), want one, closed", alertsOf, err)
	}
	ups := s.Updates()
	if len(ups) != 1 || ups[0].TS != msg.TS {
		t.Fatalf("updates %v, want one of the original message", ups)
	}
	if text := ups[0].texts(); !strings.Contains(text, "Resolved as *acknowledged* by <@U0ALICE>: "+evidence) {
		t.Fatalf("updated message does not show the acknowledgement:\n%s", text)
	}
	for _, b := range ups[0].buttons() {
		if strings.Contains(b[1], `"key":"dup"`) {
			t.Fatalf("the acknowledged item still has buttons: %v", b)
		}
	}
	// A click on the old message now tells who acknowledged it; the sweeper does not raise it again.
	s.send(t, s.click("U0BOB", msg, alerts.ActionAcknowledge, buttonOf(t, msg, "dup", alerts.ActionAcknowledge)))
	if eph := s.Ephemerals(); len(eph) != 1 || !strings.Contains(eph[0], "already resolved as acknowledged by <@U0ALICE>") {
		t.Fatalf("answers to the person %v", eph)
	}
	e.advance(24 * time.Hour)
	if c := e.sweep(0); c.NeedsPerson[items.CauseDuplicateEffect] != 0 || e.get("dup").NeedsPerson {
		t.Fatalf("the sweeper raises the acknowledged item again: %+v", c)
	}
}

// A retryable failure nobody acted on for escalate_after is flagged unresolved_too_long: its line offers
// Acknowledge too, and an acknowledgement leaves the retry as it was.
func TestSlackAcknowledgeButtonOnAStaleRetryableFailure(t *testing.T) {
	t.Parallel()
	s := newSlackSide(t, items.Config{Destinations: map[string]items.Destination{
		"billing": {Owner: "U0OWNER", Dedupe: items.DedupeKey, EscalateAfter: time.Hour}}}, alerts.Routing{})
	e := s.e
	a := e.claim("stale")
	e.report("stale", a.Claim, items.Evidence{Outcome: items.OutcomeFailed, HTTPStatus: 429}, func(p *items.AfterWriteParams) { p.RetryAfter = ptr(60) })
	e.advance(time.Hour + time.Second)
	if c := e.sweep(0); c.NeedsPerson[items.CauseStale] != 1 {
		t.Fatalf("sweep %+v, want one item unresolved_too_long", c)
	}
	e.dispatch(s.d)
	msg := s.Posts()[0]
	if got := fmt.Sprint(msg.buttons()); !strings.Contains(got, alerts.ActionAcknowledge) || strings.Contains(got, alerts.ActionResolveCommitted) {
		t.Fatalf("buttons of a stale retryable failure: %s", got)
	}
	s.send(t, s.click("U0ALICE", msg, alerts.ActionAcknowledge, buttonOf(t, msg, "stale", alerts.ActionAcknowledge)))
	s.send(t, submit("U0ALICE", s.Views()[0].View["private_metadata"].(string), "the customer's account is frozen until Monday", ""))
	it := e.get("stale")
	if it.NeedsPerson || it.State != items.StateFailed || !it.Retryable || it.Resolution == nil || it.Resolution.Outcome != items.ResolveAcknowledged {
		t.Fatalf("after acknowledging: %s retryable=%v needs_person=%v resolution %+v", it.State, it.Retryable, it.NeedsPerson, it.Resolution)
	}
	e.advance(3 * time.Hour)
	if c := e.sweep(0); len(c.NeedsPerson) != 0 {
		t.Fatalf("the sweeper raises the acknowledged failure again in the same attempt: %+v", c)
	}
	if b := e.claim("stale"); b.Reason != items.ReasonRetry || b.Attempt != 2 {
		t.Fatalf("next before-write: %s attempt %d, want retry attempt 2", b.Reason, b.Attempt)
	}
}
