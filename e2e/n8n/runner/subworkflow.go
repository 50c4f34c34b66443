package main

// The reusable sub-workflows (issue 12, item 2): n8n-templates/guarded-write-subworkflows.json, whose claim
// and report are the sub-workflows companion: claim and companion: report called by two Execute Workflow
// nodes, run through the single-item events and counted the same way at the receiver. The e2e imports them
// as a builder does: the sub-workflows and the caller imported and published, the caller rendered with the
// sub-workflows' ids (`companion templates render --claim-workflow-id … --report-workflow-id …`).

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/replaysafe/companion/blueprints"
)

const (
	subPath = "companion/guarded-write-subworkflows"
	// The caller with several items: a Code node after the webhook makes one item per element of items.
	subMultiWorkflowID = "e2eSubMulti00001"
	subMultiPath       = "companion/guarded-write-subworkflows-items"
	// The caller with n8n's Send Email node in the write slot (destination mail, dedupe none).
	subEmailWorkflowID = "e2eSubEmail00001"
	subEmailPath       = "companion/guarded-write-subworkflows-email"
)

// writeSubWorkflowVariants writes two variants of the sub-workflows' caller, as a builder would change it:
// one handling several items (the webhook's items[] become one n8n item each, shaped as a webhook item,
// {body: …}, so the two Execute Workflow nodes, Run once with all items, claim and report them in one
// sub-execution each), and one whose write is n8n's Send Email node (as emailWorkflow does to guarded-write).
func writeSubWorkflowVariants(dir string, s blueprints.Settings) error {
	var tpl blueprints.Template
	for _, t := range blueprints.Templates() {
		if t.Sub == blueprints.SubCaller {
			tpl = t
		}
	}
	tpl.WebhookPath = subMultiPath
	multi := blueprints.RenderN8n(tpl, s)
	multi.Name = "companion: guarded write with the sub-workflows, several items (e2e)"
	setWebhookID(multi, "e2e-sub-items-webhook-0001")
	multi.Nodes = append(multi.Nodes, blueprints.N8nNode{
		ID: "e2e-sub-items-split-0001", Name: "Split items", Type: "n8n-nodes-base.code", TypeVersion: 2, Position: [2]int{110, 500},
		Parameters: blueprints.CodeParams{Mode: "runOnceForAllItems", JSCode: "return $input.first().json.body.items.map((body) => ({ json: { body } }));"},
	})
	multi.Connections["Split items"] = multi.Connections["Webhook"]
	multi.Connections["Webhook"] = blueprints.N8nConnections{Main: [][]blueprints.N8nConnection{{{Node: "Split items", Type: "main"}}}}

	tpl.WebhookPath = subEmailPath
	email := blueprints.RenderN8n(tpl, s)
	email.Name = "companion: guarded write with the sub-workflows and Send Email (e2e)"
	setWebhookID(email, "e2e-sub-email-webhook-0001")
	useSendEmail(email)

	for _, v := range []struct {
		wf   blueprints.N8nWorkflow
		id   string
		file string
	}{{multi, subMultiWorkflowID, "sub-items.json"}, {email, subEmailWorkflowID, "sub-email.json"}} {
		if err := writeWorkflow(dir, v.file, v.id, v.wf); err != nil {
			return err
		}
	}
	return nil
}

func setWebhookID(wf blueprints.N8nWorkflow, id string) {
	for i, n := range wf.Nodes {
		if n.Name == "Webhook" {
			wf.Nodes[i].WebhookID = id
		}
	}
}

// runSub delivers body to the caller and checks the answer's status, and that only a 503 carries a
// Retry-After.
func (e *env) runSub(body any, want int) (map[string]any, error) {
	code, h, out, err := e.triggerHeader(subPath, body)
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

// expectCallerExecution checks that the claim of key names the calling execution, not the sub-execution
// that made the request: its execution_id is the one in the caller's batch_id (n8n-<caller>-exec-<id>), so
// the caller's error workflow finds it.
func (e *env) expectCallerExecution(key string) error {
	var it struct {
		BatchID     string `json:"batch_id"`
		ExecutionID string `json:"execution_id"`
	}
	if code, err := call("GET", e.companion+blueprints.PathItems+url.PathEscape(key), token, nil, &it); err != nil || code != 200 {
		return fmt.Errorf("GET item %s: %d %v", key, code, err)
	}
	want := "n8n-" + workflowIDs["guarded-write-subworkflows"] + "-exec-" + it.ExecutionID
	if it.ExecutionID == "" || it.BatchID != want {
		return fmt.Errorf("ledger %s: execution_id %q, batch_id %q: the claim does not name the calling execution (want batch_id %s)", key, it.ExecutionID, it.BatchID, want)
	}
	return nil
}

func scenarioSubClean(ctx context.Context, e *env) error {
	body, key, ref := reminder(8001)
	out, err := e.runSub(body, 200)
	if err != nil {
		return err
	}
	if err := e.expectWrittenOnce(key, ref, out); err != nil {
		return err
	}
	if out["decision"] != "proceed" {
		return fmt.Errorf("the webhook answered %v, want the proceed that wrote", out)
	}
	return e.expectCallerExecution(key)
}

// scenarioSubTwice delivers the same event twice in a row: the second run's claim answers skip/succeeded
// and the stored result is answered 200; one record.
func scenarioSubTwice(ctx context.Context, e *env) error {
	body, key, ref := reminder(8002)
	for i := range 2 {
		out, err := e.runSub(body, 200)
		if err != nil {
			return fmt.Errorf("delivery %d: %w", i+1, err)
		}
		if i == 1 && (out["decision"] != "skip" || out["reason"] != "succeeded") {
			return fmt.Errorf("the second delivery answered %v, want the stored result (skip/succeeded)", out)
		}
	}
	return e.expect(key, "succeeded", 1, ref, 1)
}

// scenarioSubTwiceAtOnce delivers the same event twice at once: one claim wins and writes; the other
// answers skip/in_progress, and its webhook 503 with a Retry-After; one record.
func scenarioSubTwiceAtOnce(ctx context.Context, e *env) error {
	body, key, ref := reminder(8003)
	if err := e.fault(map[string]any{"fault": "commit_then_delay", "count": 1, "reference": ref, "delay_ms": 1500}); err != nil {
		return err
	}
	got, err := e.triggerTwiceAtOnce(subPath, body)
	if err != nil {
		return err
	}
	codes := []int{got[0].code, got[1].code}
	heads := []http.Header{got[0].head, got[1].head}
	outs := []map[string]any{got[0].out, got[1].out}
	waited := 0
	for i := range 2 {
		switch {
		case codes[i] == 200 && outs[i]["decision"] == "proceed":
		case codes[i] == 503 && outs[i]["reason"] == "in_progress" && heads[i].Get("Retry-After") != "":
			waited++
		default:
			return fmt.Errorf("delivery %d answered %d (Retry-After %q): %v", i+1, codes[i], heads[i].Get("Retry-After"), outs[i])
		}
	}
	if waited != 1 {
		return fmt.Errorf("%d of the two deliveries were told to wait, want exactly 1: %v %v", waited, codes, outs)
	}
	return e.expect(key, "succeeded", 1, ref, 1)
}

// scenarioSub429: a write refused with 429 is reported failed by companion: report (answered 503 with
// the write's Retry-After); the re-run after it writes once.
func scenarioSub429(ctx context.Context, e *env) error {
	_, err := e.refusedThenWrittenOnce(8004, e.runSub)
	return err
}

// scenarioSubDrop: the receiver commits and drops the connection, so the write's error output reaches
// companion: report, which reports unknown (answered 503); the re-send retries with the same key and the
// receiver replays its first answer: one record.
func scenarioSubDrop(ctx context.Context, e *env) error {
	body, key, ref := reminder(8005)
	if err := e.fault(map[string]any{"fault": "commit_then_drop", "count": 1, "reference": ref}); err != nil {
		return err
	}
	if _, err := e.runSub(body, 503); err != nil {
		return err
	}
	if err := e.expect(key, "unknown", 1, ref, 1); err != nil {
		return err
	}
	if it, _ := e.item(key); it.FailureClass == "" {
		return fmt.Errorf("ledger %s: unknown without the transport failure's class: the error output was not judged", key)
	}
	if _, err := e.runSub(body, 200); err != nil {
		return fmt.Errorf("re-send: %w", err)
	}
	return e.expect(key, "succeeded", 2, ref, 1)
}

// scenarioSubConflict: the same key with another payload after the write is a conflict: answered 409,
// nothing written, the item stays as it was.
func scenarioSubConflict(ctx context.Context, e *env) error {
	body, key, ref := reminder(8006)
	if _, err := e.runSub(body, 200); err != nil {
		return err
	}
	body["amount"] = 99.5
	out, err := e.runSub(body, 409)
	if err != nil {
		return err
	}
	if out["decision"] != "conflict" {
		return fmt.Errorf("answered %v, want the conflict", out)
	}
	return e.expect(key, "succeeded", 1, ref, 1)
}

// scenarioSubMissingFields: a delivery without the fields its key is built from is answered 400 before
// companion: claim runs; nothing is claimed.
func scenarioSubMissingFields(ctx context.Context, e *env) error {
	code, out, err := e.trigger(subPath, map[string]any{"recipient": "c-19", "reminder": 2})
	if err != nil {
		return err
	}
	if code != 400 || fmt.Sprint(out["missing"]) != "[amount invoice]" {
		return fmt.Errorf("webhook answered %d %v, want 400 naming amount and invoice", code, out)
	}
	for _, key := range []string{"invoice-undefined:reminder:2", "invoice-:reminder:2"} {
		if code, err := call("GET", e.companion+blueprints.PathItems+url.PathEscape(key), token, nil, nil); err != nil || code != 404 {
			return fmt.Errorf("GET item %s: %d %v, want 404 (nothing claimed)", key, code, err)
		}
	}
	return nil
}

// scenarioSubErrorWorkflow fails the caller after its write (companion: report's after-write answered 503
// until its retries run out): the caller's error workflow finds the claim by the calling execution's id,
// which companion: claim sent, and reports it unknown within seconds, not by lease expiry.
func scenarioSubErrorWorkflow(ctx context.Context, e *env) error {
	body, key, ref := reminder(8007)
	e.failReports.Store(true)
	code, _, err := e.trigger(subPath, body)
	e.failReports.Store(false)
	if err != nil {
		return err
	}
	if code < 500 {
		return fmt.Errorf("the run answered %d; the execution should have failed", code)
	}
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		if last = e.expect(key, "unknown", 1, ref, 1); last == nil {
			break
		}
		time.Sleep(time.Second)
	}
	if last != nil {
		return last
	}
	if it, _ := e.item(key); it.Cause == "lease_expired" {
		return fmt.Errorf("ledger %s: unknown by lease expiry, not by the error workflow", key)
	}
	return nil
}

// scenarioSubItems sends three events in one delivery: one call of companion: claim claims all three, the
// write sends them, the receiver drops the second's connection after committing, and the report is called
// once for both write outputs (Both outcomes). Each item keeps its own claim through both sub-executions: two
// succeeded with their own record's id, the dropped one unknown; one record each; answered once, 503.
func scenarioSubItems(ctx context.Context, e *env) error {
	events, keys, refs := reminders(8101, 8102, 8103)
	if err := e.fault(map[string]any{"fault": "commit_then_drop", "count": 1, "reference": refs[1]}); err != nil {
		return err
	}
	code, h, out, err := e.triggerHeader(subMultiPath, map[string]any{"items": events})
	if err != nil {
		return err
	}
	// Every route meets in All items before the Answer: the three are reported before the webhook is answered,
	// once for all of them (until 2026-12-01 the first item to reach a Respond node answered, and this polled).
	if err := e.expectItems(keys, refs); err != nil {
		return err
	}
	return expectItemAnswers(code, h.Get("Retry-After"), out, 503, "60", map[string]int{keys[0]: 200, keys[1]: 503, keys[2]: 200})
}

// expectItems checks scenarioSubItems' three items: the second unknown, the others succeeded with the id of
// their own record; one record each.
func (e *env) expectItems(keys, refs []string) error {
	for i, key := range keys {
		state := "succeeded"
		if i == 1 {
			state = "unknown"
		}
		if err := e.expect(key, state, 1, refs[i], 1); err != nil {
			return err
		}
		if state != "succeeded" {
			continue
		}
		recs, err := e.records(refs[i])
		if err != nil {
			return err
		}
		if it, _ := e.item(key); len(recs) != 1 || it.ExternalID != recs[0].ID {
			return fmt.Errorf("ledger %s: external_id %q, the receiver's record for it %v: the items' claims were mixed up", key, it.ExternalID, recs)
		}
	}
	return nil
}

// scenarioSubEmail runs the caller with Send Email in the write slot: companion: report records the
// Message-ID of a success without statusCode; a message kept and then dropped before the reply is unknown
// and its re-run (dedupe none) sends nothing; a 451 keeps nothing and the re-run sends the one message.
func scenarioSubEmail(ctx context.Context, e *env) error {
	run := func(body any, want int) (map[string]any, error) {
		code, h, out, err := e.triggerHeader(subEmailPath, body)
		if err == nil && (code != want || (code == 503) != (h.Get("Retry-After") != "")) {
			err = fmt.Errorf("webhook answered %d (Retry-After %q), want %d: %v", code, h.Get("Retry-After"), want, out)
		}
		return out, err
	}
	body, key, _ := reminder(8201)
	if _, err := run(body, 200); err != nil {
		return fmt.Errorf("clean: %w", err)
	}
	if err := e.expectMail(key, "succeeded", 1, 1); err != nil {
		return err
	}
	if _, id, _ := e.mailFor(key); id == "" {
		return fmt.Errorf("the sink holds no Message-ID for %s", key)
	} else if it, _ := e.item(key); it.ExternalID != id {
		return fmt.Errorf("external_id %q, the sink's Message-ID %q", it.ExternalID, id)
	}

	body, key, _ = reminder(8202)
	if err := e.mailFault("drop_after_data"); err != nil {
		return err
	}
	if _, err := run(body, 503); err != nil {
		return fmt.Errorf("drop: %w", err)
	}
	if err := e.expectMail(key, "unknown", 1, 1); err != nil {
		return err
	}
	if out, err := run(body, 503); err != nil || out["reason"] != "awaiting_owner" {
		return fmt.Errorf("drop, re-run: %v, answered %v; want awaiting_owner", err, out)
	}
	if err := e.expectMail(key, "unknown", 1, 1); err != nil {
		return err
	}

	body, key, _ = reminder(8203)
	if err := e.mailFault("reject_451"); err != nil {
		return err
	}
	if _, err := run(body, 503); err != nil {
		return fmt.Errorf("451: %w", err)
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
		code, _, out, err := e.triggerHeader(subEmailPath, body)
		if err != nil {
			return err
		}
		if code == 200 {
			break
		}
		if code != 503 || time.Now().After(deadline) {
			return fmt.Errorf("451, re-run answered %d: %v", code, out)
		}
		time.Sleep(time.Second)
	}
	return e.expectMail(key, "succeeded", 2, 1)
}
