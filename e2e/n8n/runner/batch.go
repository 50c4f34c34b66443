package main

// Scenarios of the batch template.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"time"

	"github.com/replaysafe/companion/blueprints"
)

const batchPath = "companion/batch-guarded-write"

func batchBody(invoices ...int) map[string]any {
	var items []any
	for _, inv := range invoices {
		b, _, _ := reminder(inv)
		items = append(items, b)
	}
	return map[string]any{"items": items}
}

// runBatch delivers the invoices as one batch and wants the webhook's answer for the whole delivery:
// status want, a Retry-After exactly on a 503, and an answer naming every item in order.
func (e *env) runBatch(want int, invoices ...int) (map[string]any, error) {
	return e.deliverBatch(want, batchBody(invoices...), len(invoices))
}

func (e *env) deliverBatch(want int, body any, n int) (map[string]any, error) {
	code, h, out, err := e.triggerHeader(batchPath, body)
	if err != nil {
		return out, err
	}
	if code != want {
		return out, fmt.Errorf("webhook answered %d, want %d: %.600v", code, want, out)
	}
	if ra := h.Get("Retry-After"); (code == 503) != (ra != "") {
		return out, fmt.Errorf("webhook answered %d with Retry-After %q: only a 503 carries one", code, ra)
	}
	if code != 400 {
		items, _ := out["items"].([]any)
		if len(items) != n {
			return out, fmt.Errorf("the answer lists %d items, want %d: %.600v", len(items), n, out)
		}
		for i, it := range items {
			if m, _ := it.(map[string]any); m["batch_index"] != float64(i) {
				return out, fmt.Errorf("answer item %d is %v: want the delivery's order", i, it)
			}
		}
	}
	return out, nil
}

// answerItem is one item of a batch answer.
type answerItem struct {
	Key        string  `json:"key"`
	State      string  `json:"state"`
	Decision   string  `json:"decision"`
	Reason     string  `json:"reason"`
	ExternalID string  `json:"external_id"`
	Answer     int     `json:"answer"`
	RetryAfter float64 `json:"retry_after"`
}

func answerItems(out map[string]any) []answerItem {
	b, _ := json.Marshal(out["items"])
	var items []answerItem
	_ = json.Unmarshal(b, &items)
	return items
}

type batch struct {
	Counts map[string]int `json:"counts"`
	Items  []item         `json:"items"`
}

func (e *env) batch(id string) (batch, error) {
	var b batch
	code, err := call("GET", e.companion+blueprints.PathBatches+url.PathEscape(id), token, nil, &b)
	if err == nil && code != 200 {
		err = fmt.Errorf("GET batch %s: %d", id, code)
	}
	return b, err
}

// batchOf reads the batch a run answered with: the run that wrote something answers with its
// batch_id and the counts of the batch before-write.
func (e *env) batchOf(out map[string]any) (string, batch, error) {
	id, _ := out["batch_id"].(string)
	if id == "" {
		return "", batch{}, fmt.Errorf("the run answered without its batch_id: %v", out)
	}
	b, err := e.batch(id)
	return id, b, err
}

func scenarioBatch(ctx context.Context, e *env) error {
	out, err := e.runBatch(200, 2001, 2002, 2003)
	if err != nil {
		return err
	}
	id, b, err := e.batchOf(out)
	if err != nil {
		return err
	}
	if b.Counts["succeeded"] != 3 || len(b.Items) != 3 {
		return fmt.Errorf("batch %s: counts %v, %d items; want 3 succeeded", id, b.Counts, len(b.Items))
	}
	// The answer names each item with the id its record got at the receiver.
	for i, inv := range []int{2001, 2002, 2003} {
		_, key, ref := reminder(inv)
		if err := e.expect(key, "succeeded", 1, ref, 1); err != nil {
			return err
		}
		recs, err := e.records(ref)
		if err != nil {
			return err
		}
		if a := answerItems(out)[i]; a.Key != key || a.State != "succeeded" || a.Answer != 200 || len(recs) != 1 || a.ExternalID != recs[0].ID {
			return fmt.Errorf("answer item %d %+v, want %s succeeded with the receiver's id %v", i, a, key, recs)
		}
	}
	return nil
}

func scenarioBatchRerun(ctx context.Context, e *env) error {
	before, err := e.effects()
	if err != nil {
		return err
	}
	// The same items again, as a replayed execution would send them: every item is skipped with its
	// stored result, nothing is claimed or written. (The items of "batch: three items claimed and written
	// once each", on purpose.)
	reuseInvoices(2001, 2002, 2003)
	out, err := e.runBatch(200, 2001, 2002, 2003)
	if err != nil {
		return err
	}
	for _, a := range answerItems(out) {
		if a.Decision != "skip" || a.Reason != "succeeded" || a.ExternalID == "" {
			return fmt.Errorf("the re-run answered %+v, want the stored result (skip/succeeded with its external id)", a)
		}
	}
	after, err := e.effects()
	if err != nil {
		return err
	}
	if after.Total != before.Total {
		return fmt.Errorf("re-run created %d new records", after.Total-before.Total)
	}
	for _, inv := range []int{2001, 2002, 2003} {
		_, key, ref := reminder(inv)
		if err := e.expect(key, "succeeded", 1, ref, 1); err != nil {
			return err
		}
	}
	return nil
}

func scenarioBatchDrop(ctx context.Context, e *env) error {
	_, _, dropRef := reminder(3002)
	if err := e.fault(map[string]any{"fault": "commit_then_drop", "count": 1, "reference": dropRef}); err != nil {
		return err
	}
	// One write is unknown: the delivery is answered 503, so the sender delivers it again later.
	out, err := e.runBatch(503, 3001, 3002, 3003)
	if err != nil {
		return err
	}
	if a := answerItems(out); a[0].Answer != 200 || a[1].Answer != 503 || a[1].State != "unknown" || a[1].RetryAfter != 60 || a[2].Answer != 200 {
		return fmt.Errorf("answer items %+v, want 200, 503 (unknown, 60 s), 200", a)
	}
	id, b, err := e.batchOf(out)
	if err != nil {
		return err
	}
	if b.Counts["succeeded"] != 2 || b.Counts["unknown"] != 1 {
		return fmt.Errorf("batch %s counts %v, want 2 succeeded and 1 unknown", id, b.Counts)
	}
	for inv, state := range map[int]string{3001: "succeeded", 3002: "unknown", 3003: "succeeded"} {
		_, key, ref := reminder(inv)
		if err := e.expect(key, state, 1, ref, 1); err != nil {
			return err
		}
	}
	return nil
}

// scenarioBatchLarge runs a node with more items than one batch call takes (500): the template splits
// them into calls of 500, 500 and 50 under one batch id, and every item is claimed and written once.
func scenarioBatchLarge(ctx context.Context, e *env) error {
	const n = 1050
	before, err := e.effects()
	if err != nil {
		return err
	}
	invoices := make([]int, n)
	for i := range invoices {
		invoices[i] = 10000 + i
	}
	out, err := e.runBatch(200, invoices...)
	if err != nil {
		return err
	}
	id, b, err := e.batchOf(out)
	if err != nil {
		return err
	}
	if b.Counts["succeeded"] != n {
		return fmt.Errorf("batch %s counts %v, want %d succeeded", id, b.Counts, n)
	}
	if counts, _ := out["counts"].(map[string]any); counts["proceed"] != float64(n) {
		return fmt.Errorf("the run answered counts %v, want %d proceed over its calls", out["counts"], n)
	}
	after, err := e.effects()
	if err != nil {
		return err
	}
	if after.Total-before.Total != n {
		return fmt.Errorf("the receiver created %d records, want %d", after.Total-before.Total, n)
	}
	// The first, a boundary, and the last item: each once, at its position in the node.
	for _, i := range []int{0, 499, 500, n - 1} {
		_, key, ref := reminder(invoices[i])
		if err := e.expect(key, "succeeded", 1, ref, 1); err != nil {
			return err
		}
		var it struct {
			BatchIndex int `json:"batch_index"`
		}
		if _, err := call("GET", e.companion+blueprints.PathItems+url.PathEscape(key), token, nil, &it); err != nil {
			return err
		} else if it.BatchIndex != i {
			return fmt.Errorf("%s: batch_index %d, want %d", key, it.BatchIndex, i)
		}
	}
	return nil
}

// scenarioBatchMissingFields: one item of a delivery lacks its invoice. The delivery is answered 400
// naming it, before any key is built: the execution's batch holds no item, none of the delivery's keys
// exists (also not the complete items'), and the receiver got nothing.
func scenarioBatchMissingFields(ctx context.Context, e *env) error {
	before, err := e.effects()
	if err != nil {
		return err
	}
	body := batchBody(2101, 2102, 2103)
	delete(body["items"].([]any)[1].(map[string]any), "invoice")
	out, err := e.deliverBatch(400, body, 3)
	if err != nil {
		return err
	}
	if fmt.Sprint(out["missing"]) != "[items[1].invoice]" {
		return fmt.Errorf("the answer names %v, want [items[1].invoice]: %v", out["missing"], out)
	}
	exec, _ := out["execution_id"].(string)
	if exec == "" {
		return fmt.Errorf("the 400 answer does not name its execution: %v", out)
	}
	for _, q := range []string{"batch_id=" + url.QueryEscape("n8n-"+workflowIDs["batch-guarded-write"]+"-exec-"+exec), "execution_id=" + url.QueryEscape(exec)} {
		var list struct {
			Items []item `json:"items"`
		}
		if code, err := call("GET", e.companion+blueprints.PathList+"?"+q, operatorToken, nil, &list); err != nil || code != 200 || len(list.Items) != 0 {
			return fmt.Errorf("GET /v1/items?%s: %d %v, %d items; want none (nothing claimed)", q, code, err, len(list.Items))
		}
	}
	for _, key := range []string{"invoice-2101:reminder:2", "invoice-2103:reminder:2", "invoice-undefined:reminder:2"} {
		if code, err := call("GET", e.companion+blueprints.PathItems+url.PathEscape(key), token, nil, nil); err != nil || code != 404 {
			return fmt.Errorf("GET item %s: %d %v, want 404 (nothing claimed)", key, code, err)
		}
	}
	after, err := e.effects()
	if err != nil {
		return err
	}
	if after.Total != before.Total {
		return fmt.Errorf("the receiver got %d records from a refused delivery", after.Total-before.Total)
	}
	return nil
}

// scenarioBatchConflict: an invoice written before comes again with another amount, next to a new
// one. The new one is written; the changed one is a conflict, so the delivery is answered 409 (a person
// decides; delivering it again cannot help) and nothing is sent for it.
func scenarioBatchConflict(ctx context.Context, e *env) error {
	if _, err := e.runBatch(200, 2201); err != nil {
		return fmt.Errorf("first delivery: %w", err)
	}
	body := batchBody(2201, 2202)
	body["items"].([]any)[0].(map[string]any)["amount"] = 99.0
	out, err := e.deliverBatch(409, body, 2)
	if err != nil {
		return err
	}
	if a := answerItems(out); a[0].Decision != "conflict" || a[0].Answer != 409 || a[1].State != "succeeded" || a[1].Answer != 200 {
		return fmt.Errorf("answer items %+v, want 2201 conflict (409) and 2202 written (200)", a)
	}
	for _, inv := range []int{2201, 2202} {
		_, key, ref := reminder(inv)
		if err := e.expect(key, "succeeded", 1, ref, 1); err != nil {
			return err
		}
	}
	return nil
}

// scenarioBatchRetryLater: one item's write is refused with 429 and Retry-After 2: the delivery is
// answered 503 with Retry-After 2 (that item's, the soonest); delivered again after it, every item's
// effect exists once and the answer is 200.
func scenarioBatchRetryLater(ctx context.Context, e *env) error {
	_, _, ref := reminder(2302)
	if err := e.fault(map[string]any{"fault": "reject_429", "count": 1, "reference": ref, "retry_after": 2}); err != nil {
		return err
	}
	code, h, out, err := e.triggerHeader(batchPath, batchBody(2301, 2302))
	if err != nil {
		return err
	}
	if code != 503 || h.Get("Retry-After") != "2" {
		return fmt.Errorf("webhook answered %d with Retry-After %q, want 503 with 2: %v", code, h.Get("Retry-After"), out)
	}
	time.Sleep(3 * time.Second)
	if _, err := e.runBatch(200, 2301, 2302); err != nil {
		return fmt.Errorf("delivered again after Retry-After: %w", err)
	}
	for inv, attempt := range map[int]int{2301: 1, 2302: 2} {
		_, key, ref := reminder(inv)
		if err := e.expect(key, "succeeded", attempt, ref, 1); err != nil {
			return err
		}
	}
	return nil
}
