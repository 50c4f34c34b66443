package main

// The community node proof: n8n-templates/guarded-write-node.json, whose Before write and After write are
// the Companion node of n8n-node/ (installed from its packed tarball as its README writes, install.go), run
// through the same events as the plain single-item template and counted the same way at the receiver and
// at the SMTP sink.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/replaysafe/companion/blueprints"
)

const (
	nodeWorkflowID      = "e2eNodeWrite0001"
	nodeEmailWorkflowID = "e2eNodeEmail0001"
	nodePath            = "companion/guarded-write-node" // the template's own webhook path
	nodeEmailPath       = "companion/guarded-write-node-email"
	nodeCredID          = "companion-api" // the template's credential reference
	nodeCredName        = "companion"
	// nodeCustomType is the node's type when n8n loads it from N8N_CUSTOM_EXTENSIONS (its
	// CustomDirectoryLoader names every such package CUSTOM); the template names the community package's
	// type, which the install into the nodes folder gives.
	nodeCustomType    = "CUSTOM.companion"
	nodeCommunityType = "n8n-nodes-companion.companion"
	// templateWriteURL is the write slot's URL in the committed template (the sandbox receiver's default).
	templateWriteURL = "http://127.0.0.1:9090/records"
)

// nodeWorkflows renders the community-node template with the write slot pointed at the receiver: as it is
// (the community type, from the nodes folder), and with the write slot swapped for n8n's Send Email node
// (destination `mail`, dedupe none, its own webhook path) and the type rewritten to CUSTOM.companion, as the
// README says to import it for the custom extension.
func (e *env) nodeWorkflows() (write, email map[string]any, err error) {
	b, err := os.ReadFile(filepath.Join(e.root, "n8n-templates", "guarded-write-node.json"))
	if err != nil {
		return nil, nil, err
	}
	text := string(b)
	if !strings.Contains(text, `"`+nodeCommunityType+`"`) || !strings.Contains(text, templateWriteURL) {
		return nil, nil, fmt.Errorf("guarded-write-node.json no longer names %s or %s: update e2e/n8n/runner/node.go", nodeCommunityType, templateWriteURL)
	}
	text = strings.ReplaceAll(text, templateWriteURL, e.receiver+"/records")
	if err := json.Unmarshal([]byte(text), &write); err != nil {
		return nil, nil, err
	}
	custom := strings.ReplaceAll(text, `"`+nodeCommunityType+`"`, `"`+nodeCustomType+`"`)
	if err := json.Unmarshal([]byte(custom), &email); err != nil {
		return nil, nil, err
	}
	write["id"] = nodeWorkflowID
	email["id"] = nodeEmailWorkflowID
	email["name"] = "companion: guarded write with the Companion node and Send Email (e2e)"
	for _, n := range email["nodes"].([]any) {
		n := n.(map[string]any)
		p, _ := n["parameters"].(map[string]any)
		switch n["name"] {
		case "Webhook":
			p["path"] = nodeEmailPath
			n["webhookId"] = "e2e-node-email-webhook-01"
		case "Before write":
			p["destination"] = "mail"
			p["dedupe"] = "none"
		case "YOUR WRITE: create the record":
			n["type"] = "n8n-nodes-base.emailSend"
			n["typeVersion"] = 2.1
			n["parameters"] = map[string]any{
				"operation":   "send",
				"fromEmail":   "billing@example.com",
				"toEmail":     "={{ $('Webhook').item.json.body.recipient }}@example.com",
				"subject":     "={{ $('Before write').item.json.companion.key }}",
				"emailFormat": "text",
				"text":        "=Reminder {{ $('Webhook').item.json.body.reminder }} for invoice {{ $('Webhook').item.json.body.invoice }}: {{ $('Webhook').item.json.body.amount }} due.",
				"options":     map[string]any{"appendAttribution": false},
			}
			n["credentials"] = map[string]any{"smtp": map[string]any{"id": smtpCredID, "name": smtpCredName}}
		}
	}
	return write, email, nil
}

// nodeCredential is the Companion API credential the template refers to, pointed at companion
// behind the fault proxy, as the plain templates' credential is.
func (e *env) nodeCredential() string {
	return fmt.Sprintf(`{"id":"%s","name":"%s","type":"companionApi","data":{"baseUrl":"%s","token":"%s"}}`,
		nodeCredID, nodeCredName, e.proxy, token)
}

// runNode delivers body to path and wants the template's answer: status want (200 when the effect
// exists, 503 with a Retry-After when a later delivery can still finish it, 409, 400), a Retry-After
// exactly on a 503, and the body the Answer node gives (key, decision, reason, state, external_id).
func (e *env) runNode(path string, body any, want int) (map[string]any, error) {
	code, h, out, err := e.triggerHeader(path, body)
	if err != nil {
		return out, err
	}
	if code != want {
		return out, fmt.Errorf("webhook answered %d, want %d: %v", code, want, out)
	}
	if ra := h.Get("Retry-After"); (code == 503) != (ra != "") {
		return out, fmt.Errorf("webhook answered %d with Retry-After %q: only a 503 carries one", code, ra)
	}
	return out, nil
}

// decision reads the Before write's decision from an answer (proceed when the run wrote).
func decision(out map[string]any) string {
	d, _ := out["decision"].(string)
	r, _ := out["reason"].(string)
	return d + "/" + r
}

func scenarioNodeClean(ctx context.Context, e *env) error {
	body, key, ref := reminder(7001)
	out, err := e.runNode(nodePath, body, 200)
	if err != nil {
		return err
	}
	// After write took the record's id from the response body (body.id), the ledger stored it and the
	// webhook answered with it.
	return e.expectWrittenOnce(key, ref, out)
}

func scenarioNodeDrop(ctx context.Context, e *env) error {
	body, key, ref := reminder(7002)
	if err := e.fault(map[string]any{"fault": "commit_then_drop", "count": 1, "reference": ref}); err != nil {
		return err
	}
	if _, err := e.runNode(nodePath, body, 503); err != nil {
		return err
	}
	// The write's error output carried the transport error; After write reported unknown, not failed.
	if err := e.expect(key, "unknown", 1, ref, 1); err != nil {
		return err
	}
	// The same event again: Before write gives the same idempotency key, the receiver replays.
	if _, err := e.runNode(nodePath, body, 200); err != nil {
		return fmt.Errorf("re-send: %w", err)
	}
	return e.expect(key, "succeeded", 2, ref, 1)
}

func scenarioNode429(ctx context.Context, e *env) error {
	_, err := e.refusedThenWrittenOnce(7003, func(body any, want int) (map[string]any, error) { return e.runNode(nodePath, body, want) })
	return err
}

func scenarioNodeTwice(ctx context.Context, e *env) error {
	body, key, ref := reminder(7004)
	for i := range 2 {
		out, err := e.runNode(nodePath, body, 200)
		if err != nil {
			return fmt.Errorf("delivery %d: %w", i+1, err)
		}
		// The second meets the write's own claim: skip/succeeded, the Already done branch.
		if d := decision(out); (d == "skip/succeeded") != (i == 1) {
			return fmt.Errorf("delivery %d answered %v; only the second is skip/succeeded", i+1, out)
		}
	}
	return e.expect(key, "succeeded", 1, ref, 1)
}

func scenarioNodeTwiceAtOnce(ctx context.Context, e *env) error {
	body, key, ref := reminder(7005)
	// The receiver answers slowly so both deliveries are inside n8n at the same time.
	if err := e.fault(map[string]any{"fault": "commit_then_delay", "count": 1, "reference": ref, "delay_ms": 1500}); err != nil {
		return err
	}
	got, err := e.triggerTwiceAtOnce(nodePath, body)
	if err != nil {
		return err
	}
	codes := []int{got[0].code, got[1].code}
	heads := []http.Header{got[0].head, got[1].head}
	outs := []map[string]any{got[0].out, got[1].out}
	// Exactly one went to Wait (skip/in_progress: the other held the claim), answered 503 with a
	// Retry-After so its sender comes back; the other wrote and answered 200.
	if waits := btoi(decision(outs[0]) == "skip/in_progress") + btoi(decision(outs[1]) == "skip/in_progress"); waits != 1 {
		return fmt.Errorf("%d of the two deliveries were told to wait, want exactly 1: %v", waits, outs)
	}
	for i := range 2 {
		want := 200
		if decision(outs[i]) == "skip/in_progress" {
			want = 503
		}
		if codes[i] != want || (want == 503) != (heads[i].Get("Retry-After") != "") {
			return fmt.Errorf("delivery %d answered %d (Retry-After %q), want %d: %v", i+1, codes[i], heads[i].Get("Retry-After"), want, outs[i])
		}
	}
	return e.expect(key, "succeeded", 1, ref, 1)
}

// scenarioNodeEmail: Send Email in the write slot (no statusCode in its output): one message for a
// clean run, for the same trigger twice, and twice at once; the Message-ID is the external id; a 550 is
// failed/rejected, answered 422, and sends nothing when delivered again.
func scenarioNodeEmail(ctx context.Context, e *env) error {
	body, key, _ := reminder(7101)
	if _, err := e.runNode(nodeEmailPath, body, 200); err != nil {
		return err
	}
	if err := e.expectMail(key, "succeeded", 1, 1); err != nil {
		return err
	}
	_, id, _ := e.mailFor(key)
	if it, _ := e.item(key); id == "" || it.ExternalID != id {
		return fmt.Errorf("external_id %q, the sink's Message-ID %q", it.ExternalID, id)
	}
	if out, err := e.runNode(nodeEmailPath, body, 200); err != nil || decision(out) != "skip/succeeded" {
		return fmt.Errorf("second delivery: %v, answered %v; want skip/succeeded", err, out)
	}
	if err := e.expectMail(key, "succeeded", 1, 1); err != nil {
		return err
	}
	body, key, _ = reminder(7102)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			// One writes (200); the other finds it in progress (503) or, when it comes after, written (200).
			code, _, out, err := e.triggerHeader(nodeEmailPath, body)
			if err == nil && code != 200 && !(code == 503 && decision(out) == "skip/in_progress") {
				err = fmt.Errorf("delivery %d answered %d: %v", i+1, code, out)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := e.expectMail(key, "succeeded", 1, 1); err != nil {
		return err
	}
	// A 550: After write reports it rejected, as the templates do (one table).
	return e.refusedForGood(7103, func(body any, want int) (map[string]any, error) { return e.runNode(nodeEmailPath, body, want) })
}

// scenarioNodeMissingFields: a delivery without the fields the key is built from is answered 400
// naming them by Check delivery, before the Companion node runs: nothing is claimed, nothing written.
func scenarioNodeMissingFields(ctx context.Context, e *env) error {
	before, err := e.effects()
	if err != nil {
		return err
	}
	out, err := e.runNode(nodePath, map[string]any{"recipient": "c-19", "reminder": 2}, 400)
	if err != nil {
		return err
	}
	if fmt.Sprint(out["missing"]) != "[amount invoice]" {
		return fmt.Errorf("the answer names %v, want [amount invoice]: %v", out["missing"], out)
	}
	for _, key := range []string{"invoice-undefined:reminder:2", "invoice-:reminder:2"} {
		if code, err := call("GET", e.companion+blueprints.PathItems+url.PathEscape(key), token, nil, nil); err != nil || code != 404 {
			return fmt.Errorf("GET item %s: %d %v, want 404 (nothing claimed)", key, code, err)
		}
	}
	if after, err := e.effects(); err != nil || after.Total != before.Total {
		return fmt.Errorf("the receiver got %d records from a refused delivery (%v)", after.Total-before.Total, err)
	}
	return nil
}

// scenarioNodeConflict: the same invoice again with another amount after it was written is a conflict
// (Needs attention): answered 409, nothing sent, the first record stays the only one.
func scenarioNodeConflict(ctx context.Context, e *env) error {
	body, key, ref := reminder(7007)
	if _, err := e.runNode(nodePath, body, 200); err != nil {
		return fmt.Errorf("first delivery: %w", err)
	}
	body["amount"] = 99.0
	out, err := e.runNode(nodePath, body, 409)
	if err != nil {
		return err
	}
	if decision(out) != "conflict/fingerprint_mismatch" {
		return fmt.Errorf("answered %v, want conflict/fingerprint_mismatch", out)
	}
	return e.expect(key, "succeeded", 1, ref, 1)
}
