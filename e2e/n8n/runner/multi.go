package main

// The single-item templates fed several items, and claims companion refuses: guarded-write and
// lookup-reconcile as a builder changes them when their trigger gives several events (a node before Check
// delivery makes one item per event, as a Split Out does), and a delivery whose key companion refuses (400)
// through each template family.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/replaysafe/companion/blueprints"
)

// itemsWriteTimeoutMillis bounds the write of the several-items workflows; the twenty-item scenarios hold one
// write's answer longer than that.
const itemsWriteTimeoutMillis = 4000

const (
	// guarded-write with one item per element of the delivery's items.
	singleItemsWorkflowID = "e2eSingleItems01"
	singleItemsPath       = "companion/guarded-write-items"
	// lookup-reconcile with one item per element of the delivery's items.
	lookupItemsWorkflowID = "e2eLookupItems01"
	lookupItemsPath       = "companion/lookup-reconcile-items"
)

// withSplitItems changes a rendered webhook workflow as a builder does whose trigger gives several events:
// a Code node between the webhook and Check delivery makes one item per element of the delivery's items,
// shaped as a webhook item ({body: …}).
func withSplitItems(wf *blueprints.N8nWorkflow, name, webhookID string) {
	wf.Name = name
	setWebhookID(*wf, webhookID)
	wf.Nodes = append(wf.Nodes, blueprints.N8nNode{
		ID: webhookID + "-split", Name: "Split items", Type: "n8n-nodes-base.code", TypeVersion: 2, Position: [2]int{110, 500},
		Parameters: blueprints.CodeParams{Mode: "runOnceForAllItems", JSCode: "return $input.first().json.body.items.map((body) => ({ json: { body } }));"},
	})
	wf.Connections["Split items"] = wf.Connections["Webhook"]
	wf.Connections["Webhook"] = blueprints.N8nConnections{Main: [][]blueprints.N8nConnection{{{Node: "Split items", Type: "main"}}}}
}

// writeItemsVariants writes the several-items variants of guarded-write and lookup-reconcile.
func writeItemsVariants(dir string, s blueprints.Settings) error {
	for _, v := range []struct {
		slug, path, id, file, name string
	}{
		{"guarded-write", singleItemsPath, singleItemsWorkflowID, "single-items.json", "companion: guarded write, several items (e2e)"},
		{"lookup-reconcile", lookupItemsPath, lookupItemsWorkflowID, "lookup-items.json", "companion: lookup-reconcile, several items (e2e)"},
	} {
		var tpl blueprints.Template
		for _, t := range blueprints.Templates() {
			if t.Slug == v.slug {
				tpl = t
			}
		}
		tpl.WebhookPath = v.path
		// A write that times out after 4 s instead of 10 s, so the twenty-item scenario's slow write is a timeout
		// without waiting long (the other items' writes answer in milliseconds).
		ts := s
		ts.WriteTimeoutMillis = itemsWriteTimeoutMillis
		wf := blueprints.RenderN8n(tpl, ts)
		withSplitItems(&wf, v.name, "e2e-"+v.id+"-webhook")
		if err := writeWorkflow(dir, v.file, v.id, wf); err != nil {
			return err
		}
	}
	return nil
}

// webhookItems is the list of per-item answers in a several-items answer, in the order of the run.
func webhookItems(out map[string]any) []map[string]any {
	var items []map[string]any
	raw, _ := out["items"].([]any)
	for _, it := range raw {
		m, _ := it.(map[string]any)
		items = append(items, m)
	}
	return items
}

// expectItemAnswers checks a several-items answer: the status and Retry-After of the whole delivery, and
// each item's own status, by key.
func expectItemAnswers(code int, retryAfter string, out map[string]any, want int, wantRetryAfter string, each map[string]int) error {
	var errs []error
	if code != want || retryAfter != wantRetryAfter {
		errs = append(errs, fmt.Errorf("webhook answered %d (Retry-After %q), want %d (Retry-After %q): %.800v", code, retryAfter, want, wantRetryAfter, out))
	}
	got := map[string]int{}
	for _, it := range webhookItems(out) {
		k, _ := it["key"].(string)
		s, _ := it["status"].(float64)
		got[k] = int(s)
	}
	if fmt.Sprint(got) != fmt.Sprint(each) {
		errs = append(errs, fmt.Errorf("the answer's items answered %v, want %v", got, each))
	}
	return errors.Join(errs...)
}

// scenarioSingleItems delivers three events at once to guarded-write fed several items: the first is
// written, the receiver refuses the second with 429 (the write's success output: Never Error) and drops the
// third's connection after committing (its error output). Every item is reported by the template itself
// before the run answers or stops: the dropped one is unknown with its transport class (not the error
// workflow's "other"), each trigger claim is reported with its write; the delivery is answered once, 503 with
// the soonest Retry-After, naming each item's own answer. Delivered again after it, the two retry with their
// keys and everything is answered 200: one record each.
//
// Before the Merges (the success and error outputs each ran the rest of the workflow), the success output's
// 429 stopped the execution before the dropped item was reported, and the first item answered 200.
func scenarioSingleItems(ctx context.Context, e *env) error {
	events, keys, refs := reminders(1101, 1102, 1103)
	err := e.threeFaultedItems(singleItemsPath, events, keys, refs, "the template (its error output never ran)", func() (errs []error) {
		if it, _ := e.item(keys[1]); it.HTTPStatus != 429 {
			errs = append(errs, fmt.Errorf("ledger %s: http_status %d, want the 429 the template reported", keys[1], it.HTTPStatus))
		}
		for i, state := range []string{"succeeded", "failed", "unknown"} {
			if _, err := e.expectState(keys[i]+":trigger", state, 1); err != nil {
				errs = append(errs, err)
			}
		}
		return errs
	})
	if err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	code, h, out, err := e.triggerHeader(singleItemsPath, map[string]any{"items": events})
	if err != nil {
		return err
	}
	// The first is a duplicate of a finished delivery: answered 200 from its trigger claim.
	if err := expectItemAnswers(code, h.Get("Retry-After"), out, 200, "", map[string]int{keys[0] + ":trigger": 200, keys[1]: 200, keys[2]: 200}); err != nil {
		return fmt.Errorf("delivered again: %w", err)
	}
	for i, attempt := range []int{1, 2, 2} {
		if err := e.expect(keys[i], "succeeded", attempt, refs[i], 1); err != nil {
			return err
		}
	}
	return nil
}

// threeFaultedItems delivers three events at once to path, the second item's write refused with 429 and the
// third's dropped after the receiver committed it, and checks what every scenario of several items checks
// of that delivery: the first succeeded, the second failed, the third unknown with its transport class
// (reported by reporter), each at attempt 1 with its records, more's own checks (when not nil), and one
// answer, 503 with the soonest Retry-After, naming each item's own.
func (e *env) threeFaultedItems(path string, events []map[string]any, keys, refs []string, reporter string, more func() []error) error {
	if err := e.fault(map[string]any{"fault": "reject_429", "count": 1, "reference": refs[1], "retry_after": 1}); err != nil {
		return err
	}
	if err := e.fault(map[string]any{"fault": "commit_then_drop", "count": 1, "reference": refs[2]}); err != nil {
		return err
	}
	code, h, out, err := e.triggerHeader(path, map[string]any{"items": events})
	if err != nil {
		return err
	}
	var errs []error
	for i, w := range []struct {
		state   string
		records int
	}{{"succeeded", 1}, {"failed", 0}, {"unknown", 1}} {
		if err := e.expect(keys[i], w.state, 1, refs[i], w.records); err != nil {
			errs = append(errs, err)
		}
	}
	if it, _ := e.item(keys[2]); it.FailureClass != "connection_reset" {
		errs = append(errs, fmt.Errorf("ledger %s: failure class %q (cause %q), want connection_reset: %s did not report the dropped write", keys[2], it.FailureClass, it.Cause, reporter))
	}
	if more != nil {
		errs = append(errs, more()...)
	}
	errs = append(errs, expectItemAnswers(code, h.Get("Retry-After"), out, 503, "1", map[string]int{keys[0]: 200, keys[1]: 503, keys[2]: 503}))
	return errors.Join(errs...)
}

// scenarioLookupItems: lookup-reconcile fed three quotes at once, the second refused with 429 and the third
// dropped after committing. Every item is reported by the template (the dropped one unknown with its
// transport class), and the delivery is answered once, 503. Delivered again while the search fails for the
// third: the first is stored, the second written, the third waits for its owner (lookup_failed), answered
// once, 503; one record each.
func scenarioLookupItems(ctx context.Context, e *env) error {
	if err := e.mode(map[string]any{"dedupe": "none"}); err != nil {
		return err
	}
	defer func() { _ = e.mode(map[string]any{"dedupe": "key"}) }()
	var events []map[string]any
	var keys, refs []string
	for _, n := range []int{1, 2, 3} {
		ref := fmt.Sprintf("QT-2026-07%02d", n)
		events = append(events, map[string]any{"reference": ref, "customer": "c-88", "amount": 4200 + n})
		keys, refs = append(keys, "quote:"+ref+":create"), append(refs, ref)
	}
	if err := e.threeFaultedItems(lookupItemsPath, events, keys, refs, "the template", nil); err != nil {
		return err
	}
	// Delivered again while the destination's search fails for the dropped one: the first is a stored result, the
	// second is written, the third's lookup fails and it waits for its owner. All three meet in one answer, 503:
	// with Reconcile looping back to Before-write, the third reached All items in a second run, after the first
	// run had answered 200 for the other two.
	if err := e.fault(map[string]any{"fault": "lookup_fail", "count": 1, "reference": refs[2]}); err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	code, h, out, err := e.triggerHeader(lookupItemsPath, map[string]any{"items": events})
	if err != nil {
		return err
	}
	if err := expectItemAnswers(code, h.Get("Retry-After"), out, 503, "60", map[string]int{keys[0]: 200, keys[1]: 200, keys[2]: 503}); err != nil {
		return fmt.Errorf("delivered again: %w", err)
	}
	for i, w := range []struct {
		state   string
		attempt int
	}{{"succeeded", 1}, {"succeeded", 2}, {"unknown", 1}} {
		if err := e.expect(keys[i], w.state, w.attempt, refs[i], 1); err != nil {
			return err
		}
	}
	return nil
}

// expectRefused checks a delivery whose key companion refuses: the webhook answers 400 with companion's
// error word (invalid_request) and message, naming the field, and shows nothing internal; nothing was
// claimed (GET of each key: 404) and nothing was written for ref.
func (e *env) expectRefused(code int, out map[string]any, ref string, keys ...string) error {
	msg, _ := out["message"].(string)
	if code != 400 || out["error"] != "invalid_request" || !strings.Contains(msg, "key") {
		return fmt.Errorf("webhook answered %d %v, want 400 invalid_request with companion's message about the key", code, out)
	}
	b, _ := json.Marshal(out)
	for _, internal := range []string{"stack", "NodeApiError", "Error in workflow", "claim\":\"c_"} {
		if strings.Contains(string(b), internal) {
			return fmt.Errorf("the answer shows %q: %s", internal, b)
		}
	}
	// A key outside companion's rules cannot even be asked about (400); a valid key of the refused call is 404.
	for _, key := range keys {
		if code, err := call("GET", e.companion+blueprints.PathItems+url.PathEscape(key), token, nil, nil); err != nil || (code != 404 && code != 400) {
			return fmt.Errorf("GET item %s: %d %v, want 404 or 400 (nothing claimed)", key, code, err)
		}
	}
	ef, err := e.effects()
	if err != nil {
		return err
	}
	if ef.ByReference[ref] != 0 {
		return fmt.Errorf("receiver: %d records for %s, want none", ef.ByReference[ref], ref)
	}
	return nil
}

// refusedReminder is an invoice reminder whose invoice number holds a space: every field is there (Check
// delivery lets it through), but the key built from it is outside companion's key characters, so
// before-write answers 400 invalid_request.
func refusedReminder() (map[string]any, string, string) {
	body := map[string]any{"invoice": "74 2", "recipient": "c-19", "amount": 120.5, "reminder": 2}
	return body, "invoice-74 2:reminder:2", "invoice-74 2-reminder-2"
}

// scenarioSingleRefused: guarded-write with a key companion refuses answers 400 with companion's words
// (its trigger claim is refused first); before, the HTTP Request threw and n8n answered its own 500.
func scenarioSingleRefused(ctx context.Context, e *env) error {
	body, key, ref := refusedReminder()
	code, out, err := e.trigger(single, body)
	if err != nil {
		return err
	}
	return e.expectRefused(code, out, ref, key, key+":trigger")
}

// scenarioSubRefused: the sub-workflows' caller with a key companion refuses: companion: claim returns the
// refusal instead of failing the calling node (after five tries), and the caller answers 400.
func scenarioSubRefused(ctx context.Context, e *env) error {
	body, key, ref := refusedReminder()
	code, out, err := e.trigger(subPath, body)
	if err != nil {
		return err
	}
	return e.expectRefused(code, out, ref, key)
}

// scenarioLookupRefused: lookup-reconcile with a reference companion refuses in the key.
func scenarioLookupRefused(ctx context.Context, e *env) error {
	const ref = "QT 2026 0999"
	code, out, err := e.trigger("companion/lookup-reconcile", map[string]any{"reference": ref, "customer": "c-88", "amount": 10})
	if err != nil {
		return err
	}
	return e.expectRefused(code, out, ref, "quote:"+ref+":create")
}

// scenarioBatchRefused: a batch whose second item has a key companion refuses: the batch call is refused as
// a whole (400 naming items[1].key), the delivery is answered 400 with companion's words, and nothing of it
// is claimed or written, the valid first item neither.
func scenarioBatchRefused(ctx context.Context, e *env) error {
	good, goodKey, goodRef := reminder(3901)
	bad, badKey, badRef := refusedReminder()
	code, _, out, err := e.triggerHeader(batchPath, map[string]any{"items": []any{good, bad}})
	if err != nil {
		return err
	}
	msg, _ := out["message"].(string)
	if code != 400 || out["error"] != "invalid_request" || !strings.Contains(msg, "items[1].key") {
		return fmt.Errorf("webhook answered %d %.800v, want 400 invalid_request naming items[1].key", code, out)
	}
	if err := e.expectRefused(400, map[string]any{"error": "invalid_request", "message": "key"}, badRef, badKey); err != nil {
		return err
	}
	if code, err := call("GET", e.companion+blueprints.PathItems+url.PathEscape(goodKey), token, nil, nil); err != nil || code != 404 {
		return fmt.Errorf("GET item %s: %d %v, want 404: the valid item of the refused call was claimed", goodKey, code, err)
	}
	ef, err := e.effects()
	if err != nil {
		return err
	}
	if ef.ByReference[goodRef] != 0 {
		return fmt.Errorf("receiver: %d records for the valid item %s, want none (its call was refused)", ef.ByReference[goodRef], goodRef)
	}
	return nil
}

const (
	// guarded-write-node with one item per element of the delivery's items, its Before write renamed.
	nodeItemsWorkflowID = "e2eNodeItems0001"
	nodeItemsPath       = "companion/guarded-write-node-items"
	renamedBeforeWrite  = "Claim each reminder"
)

// nodeItemsWorkflow is the community-node workflow (as nodeWorkflows renders it) with a Code node between
// the webhook and Check delivery that makes one item per element of the delivery's items.
func nodeItemsWorkflow(write map[string]any) (map[string]any, error) {
	b, err := json.Marshal(write)
	if err != nil {
		return nil, err
	}
	var wf map[string]any
	if err := json.Unmarshal(b, &wf); err != nil {
		return nil, err
	}
	wf["id"] = nodeItemsWorkflowID
	wf["name"] = "companion: guarded write with the Companion node, several items (e2e)"
	for _, n := range wf["nodes"].([]any) {
		n := n.(map[string]any)
		switch n["name"] {
		case "Webhook":
			n["parameters"].(map[string]any)["path"] = nodeItemsPath
			n["webhookId"] = "e2e-node-items-webhook-01"
		case "Before write":
			// Renamed, as a builder names the node for what it claims: After write finds the claims anyway.
			n["name"] = renamedBeforeWrite
		case blueprints.NodeWrite:
			n["parameters"].(map[string]any)["options"].(map[string]any)["timeout"] = itemsWriteTimeoutMillis
		}
	}
	wf["nodes"] = append(wf["nodes"].([]any), map[string]any{
		"id": "e2e-node-items-split-0001", "name": "Split items", "type": "n8n-nodes-base.code", "typeVersion": 2, "position": []int{110, 500},
		"parameters": map[string]any{"mode": "runOnceForAllItems", "jsCode": "return $input.first().json.body.items.map((body) => ({ json: { body } }));"},
	})
	conns := wf["connections"].(map[string]any)
	conns[renamedBeforeWrite] = conns["Before write"]
	delete(conns, "Before write")
	for _, outs := range conns {
		for _, out := range outs.(map[string]any)["main"].([]any) {
			for _, c := range out.([]any) {
				if c := c.(map[string]any); c["node"] == "Before write" {
					c["node"] = renamedBeforeWrite
				}
			}
		}
	}
	conns["Split items"] = conns["Webhook"]
	conns["Webhook"] = map[string]any{"main": []any{[]any{map[string]any{"node": "Split items", "type": "main", "index": 0}}}}
	return wf, nil
}

// scenarioNodeItems is scenarioSingleItems through the community-node template: three events at once, the
// second refused with 429, the third dropped after committing; each reported by After write before the run
// answers (the dropped one unknown with its transport class), answered once 503; delivered again, each
// written once.
func scenarioNodeItems(ctx context.Context, e *env) error {
	events, keys, refs := reminders(7301, 7302, 7303)
	if err := e.threeFaultedItems(nodeItemsPath, events, keys, refs, "After write", nil); err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	code, h, out, err := e.triggerHeader(nodeItemsPath, map[string]any{"items": events})
	if err != nil {
		return err
	}
	if err := expectItemAnswers(code, h.Get("Retry-After"), out, 200, "", map[string]int{keys[0]: 200, keys[1]: 200, keys[2]: 200}); err != nil {
		return fmt.Errorf("delivered again: %w", err)
	}
	for i, attempt := range []int{1, 2, 2} {
		if err := e.expect(keys[i], "succeeded", attempt, refs[i], 1); err != nil {
			return err
		}
	}
	return nil
}

// scenarioNodeRefused: the community-node template with a key companion refuses: Before write (On Error:
// Continue (using error output)) routes the refused batch call to Needs attention with companion's status and
// word, and the webhook answers 400 with them; before, the node threw and n8n answered its own 500.
func scenarioNodeRefused(ctx context.Context, e *env) error {
	body, key, ref := refusedReminder()
	code, out, err := e.trigger(nodePath, body)
	if err != nil {
		return err
	}
	return e.expectRefused(code, out, ref, key)
}

// twentyItems delivers twenty invoice reminders in one delivery to path (a workflow fed several items): the
// receiver refuses the 5th with 400 (for good) and the 12th with 429 (Retry-After 1 s), and holds the 18th's
// answer past the write's timeout after committing it. Every item is claimed, written and reported in that one
// execution: 17 succeeded with one record each, the 400 failed for good and the 429 failed retryably with
// none, the timed-out one unknown (class timeout) with the one record it committed; the delivery is answered
// once, 503 with the soonest Retry-After, each item with its own answer (200, 422, 503).
func (e *env) twentyItems(path string, first int) error {
	invoices := make([]int, 20)
	for i := range invoices {
		invoices[i] = first + i
	}
	events, keys, refs := reminders(invoices...)
	const refused, later, slow = 4, 11, 17
	for _, f := range []map[string]any{
		{"fault": "reject_400", "count": 1, "reference": refs[refused]},
		{"fault": "reject_429", "count": 1, "reference": refs[later], "retry_after": 1},
		{"fault": "commit_then_delay", "count": 1, "reference": refs[slow], "delay_ms": itemsWriteTimeoutMillis + 2000},
	} {
		if err := e.fault(f); err != nil {
			return err
		}
	}
	code, h, out, err := e.triggerHeader(path, map[string]any{"items": events})
	if err != nil {
		return err
	}
	var errs []error
	each := map[string]int{}
	for i, key := range keys {
		state, records, answer := "succeeded", 1, 200
		switch i {
		case refused:
			state, records, answer = "failed", 0, 422
		case later:
			state, records, answer = "failed", 0, 503
		case slow:
			state, answer = "unknown", 503
		}
		each[key] = answer
		if err := e.expect(key, state, 1, refs[i], records); err != nil {
			errs = append(errs, err)
		}
	}
	for i, class := range map[int]string{refused: "http", later: "http", slow: "timeout"} {
		if it, _ := e.item(keys[i]); it.FailureClass != class {
			errs = append(errs, fmt.Errorf("ledger %s: failure class %q (http_status %d, cause %q), want %s", keys[i], it.FailureClass, it.HTTPStatus, it.Cause, class))
		}
	}
	if it, _ := e.item(keys[refused]); it.HTTPStatus != 400 {
		errs = append(errs, fmt.Errorf("ledger %s: http_status %d, want the receiver's 400", keys[refused], it.HTTPStatus))
	}
	if err := expectItemAnswers(code, h.Get("Retry-After"), out, 503, "1", each); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// scenarioSingleTwenty: twenty items in one delivery through guarded-write fed several items.
func scenarioSingleTwenty(ctx context.Context, e *env) error {
	return e.twentyItems(singleItemsPath, 1301)
}

// scenarioNodeTwenty: twenty items in one delivery through the community-node template fed several items,
// whose Before write is renamed: After write finds every claim through paired items.
func scenarioNodeTwenty(ctx context.Context, e *env) error {
	return e.twentyItems(nodeItemsPath, 7501)
}
