package main

// The native-node proof (issue 12): the single-item template with n8n's own Send Email node in the
// write slot, writing to the sandbox receiver's SMTP destination, counted per key at the sink.

import (
	"context"
	"fmt"
	"time"

	"github.com/replaysafe/companion/blueprints"
)

const (
	emailWorkflowID = "e2eEmailWrite001"
	emailPath       = "companion/email-write"
	smtpCredID      = "e2eSmtpCred"
	smtpCredName    = "sandbox smtp"
)

// emailWorkflow is the guarded-write template with its write slot swapped for a Send Email node (v2.1)
// as a builder would: On Error → Continue (using error output), both outputs kept, destination `mail`
// (dedupe none: an email cannot be deduplicated or searched).
func emailWorkflow(s blueprints.Settings) blueprints.N8nWorkflow {
	var tpl blueprints.Template
	for _, t := range blueprints.Templates() {
		if t.Slug == "guarded-write" {
			tpl = t
		}
	}
	tpl.WebhookPath = emailPath
	wf := blueprints.RenderN8n(tpl, s)
	wf.Name = "companion: guarded write with Send Email (e2e)"
	setWebhookID(wf, "e2e-email-webhook-0001")
	useSendEmail(wf)
	return wf
}

// useSendEmail swaps the write slot of a rendered single-item workflow for a Send Email node (v2.1) as a
// builder would: On Error → Continue (using error output) and both outputs kept, destination `mail`
// (dedupe none: an email cannot be deduplicated or searched).
func useSendEmail(wf blueprints.N8nWorkflow) {
	for i, n := range wf.Nodes {
		switch n.Name {
		case "Settings":
			p := n.Parameters.(blueprints.SetParams)
			for j, a := range p.Assignments.Assignments {
				switch a.Name {
				case "destination":
					p.Assignments.Assignments[j].Value = "mail"
				case "dedupe":
					p.Assignments.Assignments[j].Value = "none"
				}
			}
			wf.Nodes[i].Parameters = p
		case blueprints.NodeWrite:
			wf.Nodes[i].Type = "n8n-nodes-base.emailSend"
			wf.Nodes[i].TypeVersion = 2.1
			wf.Nodes[i].Parameters = map[string]any{
				"operation":   "send",
				"fromEmail":   "billing@example.com",
				"toEmail":     "={{ $('Settings').item.json.payload.recipient }}@example.com",
				"subject":     "={{ $('Settings').item.json.key }}",
				"emailFormat": "text",
				"text":        "=Reminder {{ $('Settings').item.json.payload.reminder }} for invoice {{ $('Settings').item.json.payload.invoice }}: {{ $('Settings').item.json.payload.amount }} due.",
				"options":     map[string]any{"appendAttribution": false},
			}
			wf.Nodes[i].Credentials = map[string]blueprints.N8nCredentialRef{"smtp": {ID: smtpCredID, Name: smtpCredName}}
		}
	}
}

// mailFor returns how many messages the SMTP sink holds for key (the subject) and the first one's id.
func (e *env) mailFor(key string) (int, string, error) {
	var c struct {
		BySubject map[string]int `json:"by_subject"`
		List      []struct {
			Subject   string `json:"subject"`
			MessageID string `json:"message_id"`
		} `json:"list"`
	}
	if _, err := call("GET", e.receiver+"/mail", "", nil, &c); err != nil {
		return 0, "", err
	}
	id := ""
	for _, m := range c.List {
		if m.Subject == key && id == "" {
			id = m.MessageID
		}
	}
	return c.BySubject[key], id, nil
}

func (e *env) expectMail(key, state string, attempt, messages int) error {
	if _, err := e.expectState(key, state, attempt); err != nil {
		return err
	}
	n, _, err := e.mailFor(key)
	if err == nil && n != messages {
		err = fmt.Errorf("smtp sink: %d messages for %s, want %d", n, key, messages)
	}
	return err
}

func (e *env) mailFault(fault string) error {
	code, err := call("POST", e.receiver+"/control/mail-faults", "", map[string]any{"fault": fault}, nil)
	if err == nil && code != 200 {
		err = fmt.Errorf("queue mail fault %s: %d", fault, code)
	}
	return err
}

func (e *env) runEmail(body any, want int) (map[string]any, error) {
	code, h, out, err := e.triggerHeader(emailPath, body)
	if err != nil {
		return out, err
	}
	if code != want {
		return out, fmt.Errorf("webhook answered %d, want %d: %v", code, want, out)
	}
	if ra := h.Get("Retry-After"); (code == 503) != (ra != "") {
		return out, fmt.Errorf("webhook answered %d with Retry-After %q", code, ra)
	}
	return out, nil
}

// scenarioEmailClean: Send Email returns no statusCode; the template records succeeded with the
// message id as the external id.
func scenarioEmailClean(ctx context.Context, e *env) error {
	body, key, _ := reminder(5001)
	if _, err := e.runEmail(body, 200); err != nil {
		return err
	}
	if err := e.expectMail(key, "succeeded", 1, 1); err != nil {
		return err
	}
	_, id, _ := e.mailFor(key)
	if it, _ := e.item(key); id == "" || it.ExternalID != id {
		return fmt.Errorf("external_id %q, the sink's Message-ID %q", it.ExternalID, id)
	}
	return nil
}

// scenarioEmailDrop: the server keeps the message and drops the connection before its reply. The item
// is unknown (one message exists); a re-run with dedupe none sends nothing and is answered 503.
func scenarioEmailDrop(ctx context.Context, e *env) error {
	body, key, _ := reminder(5002)
	if err := e.mailFault("drop_after_data"); err != nil {
		return err
	}
	if _, err := e.runEmail(body, 503); err != nil {
		return err
	}
	if err := e.expectMail(key, "unknown", 1, 1); err != nil {
		return err
	}
	out, err := e.runEmail(body, 503)
	if err != nil {
		return fmt.Errorf("re-run: %w", err)
	}
	if out["reason"] != "awaiting_owner" {
		return fmt.Errorf("re-run answered %v, want the write's awaiting_owner", out)
	}
	return e.expectMail(key, "unknown", 1, 1)
}

// scenarioEmail451: a 451 refusal keeps nothing: failed (not sent), answered 503; the re-run after the
// backoff sends the one message.
func scenarioEmail451(ctx context.Context, e *env) error {
	body, key, _ := reminder(5003)
	if err := e.mailFault("reject_451"); err != nil {
		return err
	}
	if _, err := e.runEmail(body, 503); err != nil {
		return err
	}
	if err := e.expectMail(key, "failed", 1, 0); err != nil {
		return err
	}
	if it, _ := e.item(key); it.FailureClass != "connection_refused" {
		return fmt.Errorf("ledger %s: failure class %q, want connection_refused (smtp_451)", key, it.FailureClass)
	}
	// The default backoff after attempt 1 is about a second.
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, _, out, err := e.triggerHeader(emailPath, body)
		if err != nil {
			return err
		}
		if code == 200 {
			break
		}
		if code != 503 || time.Now().After(deadline) {
			return fmt.Errorf("re-run answered %d: %v", code, out)
		}
		time.Sleep(time.Second)
	}
	return e.expectMail(key, "succeeded", 2, 1)
}

// scenarioEmailTwice: the same trigger twice, one after the other and then twice at once: one message.
func scenarioEmailTwice(ctx context.Context, e *env) error {
	body, key, _ := reminder(5004)
	for i := range 2 {
		if _, err := e.runEmail(body, 200); err != nil {
			return fmt.Errorf("delivery %d: %w", i+1, err)
		}
	}
	if err := e.expectMail(key, "succeeded", 1, 1); err != nil {
		return err
	}
	body, key, _ = reminder(5005)
	got, err := e.triggerTwiceAtOnce(emailPath, body)
	if err != nil {
		return err
	}
	for i, a := range got {
		if a.code != 200 && a.code != 503 {
			return fmt.Errorf("delivery %d at once answered %d", i+1, a.code)
		}
	}
	return e.expectMail(key, "succeeded", 1, 1)
}

// refusedForGood is the 550 story through one email workflow (run delivers a body to it and checks the
// webhook's status): the SMTP sink refuses the message with 550 and keeps nothing; the item is failed with the
// class rejected (a refusal for good), answered 422; delivered again, nothing is sent (skip/failed_permanent,
// 422 again) and the sink holds no message for it.
func (e *env) refusedForGood(invoice int, run func(body any, want int) (map[string]any, error)) error {
	body, key, _ := reminder(invoice)
	if err := e.mailFault("reject_550"); err != nil {
		return err
	}
	if _, err := run(body, 422); err != nil {
		return err
	}
	if err := e.expectMail(key, "failed", 1, 0); err != nil {
		return err
	}
	if it, _ := e.item(key); it.FailureClass != "rejected" {
		return fmt.Errorf("ledger %s: failure class %q, want rejected (smtp_550)", key, it.FailureClass)
	}
	out, err := run(body, 422)
	if err != nil {
		return fmt.Errorf("delivered again: %w", err)
	}
	if decision(out) != "skip/failed_permanent" {
		return fmt.Errorf("delivered again: answered %v, want skip/failed_permanent", out)
	}
	return e.expectMail(key, "failed", 1, 0)
}

// scenarioEmail550: a 550 through the template with Send Email.
func scenarioEmail550(ctx context.Context, e *env) error {
	return e.refusedForGood(5006, e.runEmail)
}
