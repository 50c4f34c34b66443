package main

// The side-by-side of issue 12: n8n's own Remove Duplicates node in front of a write, as builders use it
// for "exactly once", against the guarded-write template, with the same events and faults; effects are
// counted at the sink.

import (
	"context"
	"fmt"
	"time"

	"github.com/replaysafe/companion/blueprints"
)

const (
	naiveWorkflowID = "e2eRemoveDups001"
	naivePath       = "companion/remove-duplicates"
)

// naiveWorkflow: Webhook → Remove Duplicates (items processed in previous executions, by the business
// key) → HTTP Request (the write, without an idempotency key: nothing upstream gives one).
func naiveWorkflow(s blueprints.Settings) map[string]any {
	key := "={{ 'invoice-' + $json.body.invoice + ':reminder:' + $json.body.reminder }}"
	body := "={{ JSON.stringify({ invoice: String($json.body.invoice), recipient: $json.body.recipient, amount: $json.body.amount, reminder: $json.body.reminder, reference: 'invoice-' + $json.body.invoice + '-reminder-' + $json.body.reminder }) }}"
	return map[string]any{
		"id": naiveWorkflowID, "name": "Remove Duplicates in front of a write (e2e baseline)", "active": false,
		"settings": map[string]any{"executionOrder": "v1"},
		"nodes": []map[string]any{
			{"id": "b0a1c2d3-0000-4000-8000-000000000001", "name": "Webhook", "type": "n8n-nodes-base.webhook", "typeVersion": 2,
				"position": []int{0, 0}, "webhookId": "e2e-remove-duplicates-0001",
				"parameters": map[string]any{"httpMethod": "POST", "path": naivePath, "responseMode": "lastNode", "options": map[string]any{}}},
			{"id": "b0a1c2d3-0000-4000-8000-000000000002", "name": "Remove Duplicates", "type": "n8n-nodes-base.removeDuplicates", "typeVersion": 2,
				"position":   []int{220, 0},
				"parameters": map[string]any{"operation": "removeItemsSeenInPreviousExecutions", "logic": "removeItemsWithAlreadySeenKeyValues", "dedupeValue": key, "options": map[string]any{}}},
			{"id": "b0a1c2d3-0000-4000-8000-000000000003", "name": "Write", "type": "n8n-nodes-base.httpRequest", "typeVersion": 4.2,
				"position": []int{440, 0},
				"parameters": map[string]any{"method": "POST", "url": s.WriteURL, "sendBody": true, "specifyBody": "json", "jsonBody": body,
					"options": map[string]any{"timeout": s.WriteTimeoutMillis}}},
		},
		"connections": map[string]any{
			"Webhook":           map[string]any{"main": [][]map[string]any{{{"node": "Remove Duplicates", "type": "main", "index": 0}}}},
			"Remove Duplicates": map[string]any{"main": [][]map[string]any{{{"node": "Write", "type": "main", "index": 0}}}},
		},
	}
}

// scenarioSideBySide delivers the same events to both workflows and counts records per reference.
func scenarioSideBySide(ctx context.Context, e *env) error {
	count := func(ref string) (int, error) {
		ef, err := e.effects()
		return ef.ByReference[ref], err
	}
	// A duplicate delivery: both write once.
	nb, _, nref := reminder(6101)
	tb, _, tref := reminder(6001)
	for range 2 {
		if _, _, err := e.trigger(naivePath, nb); err != nil {
			return err
		}
		if _, err := e.runSingle(tb, 200); err != nil {
			return err
		}
	}
	naiveDup, err := count(nref)
	if err != nil {
		return err
	}
	tplDup, err := count(tref)
	if err != nil {
		return err
	}
	// A refused write (429), then the sender delivers again.
	nb, _, nref = reminder(6102)
	tb, _, tref = reminder(6002)
	for _, ref := range []string{nref, tref} {
		if err := e.fault(map[string]any{"fault": "reject_429", "count": 1, "reference": ref, "retry_after": 1}); err != nil {
			return err
		}
	}
	if code, out, err := e.trigger(naivePath, nb); err != nil || code < 500 {
		return fmt.Errorf("the Remove Duplicates workflow, refused write: %d %v %v (want the execution to fail)", code, out, err)
	}
	if _, err := e.runSingle(tb, 503); err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	if _, _, err := e.trigger(naivePath, nb); err != nil {
		return err
	}
	if _, err := e.runSingle(tb, 200); err != nil {
		return err
	}
	naiveRefused, err := count(nref)
	if err != nil {
		return err
	}
	tplRefused, err := count(tref)
	if err != nil {
		return err
	}
	fmt.Printf("     side by side, records at the sink: duplicate delivery: Remove Duplicates %d, template %d; refused (429) then delivered again: Remove Duplicates %d, template %d\n",
		naiveDup, tplDup, naiveRefused, tplRefused)
	if naiveDup != 1 || tplDup != 1 || tplRefused != 1 {
		return fmt.Errorf("records: duplicate %d/%d, refused %d/%d (Remove Duplicates/template); want 1/1 and the template's 1", naiveDup, tplDup, naiveRefused, tplRefused)
	}
	if naiveRefused != 0 {
		return fmt.Errorf("the Remove Duplicates workflow wrote %d records after the redelivery; this scenario expects it to drop the redelivery of a refused write", naiveRefused)
	}
	return nil
}
