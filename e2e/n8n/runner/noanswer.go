package main

// A before-write that got no answer, among several items (2026-12-01, "n8n Retry On Fail with several
// items"): the proxy in front of companion resets the connection of one item's claim before companion sees
// it. n8n's HTTP Request sends a node's items' requests together, each on its own connection, so only that
// request fails. Until then the claim nodes kept n8n's Retry On Fail (companion: claim) or failed as a whole
// (the single templates): a retry re-ran the node for every item, and the items already claimed met their
// own claims (skip/in_progress), were never written and expired into unknown; without it the execution
// failed and n8n answered 500.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/replaysafe/companion/blueprints"
)

// resetClaim resets the connection of the before-write asking for the key in e.dropClaim, once, and says
// whether it did; any other request is left to the proxy (its body restored).
func (e *env) resetClaim(w http.ResponseWriter, r *http.Request) bool {
	want := e.dropClaim.Load()
	if want == nil || r.Method != http.MethodPost || r.URL.Path != blueprints.PathBeforeWrite && r.URL.Path != blueprints.PathBatchBeforeWrite {
		return false
	}
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return false
	}
	// A single claim's key, or any of a batch call's (the community node asks in batch calls).
	var req struct {
		Key   string `json:"key"`
		Items []struct {
			Key string `json:"key"`
		} `json:"items"`
	}
	if json.Unmarshal(body, &req) != nil {
		return false
	}
	asks := req.Key == *want
	for _, it := range req.Items {
		asks = asks || it.Key == *want
	}
	if !asks || !e.dropClaim.CompareAndSwap(want, nil) {
		return false
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		return false
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return false
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // a reset, not an orderly close
	}
	_ = conn.Close()
	e.dropped.Add(1)
	return true
}

// scenarioSingleNoAnswer: guarded-write fed three items; the claim of the third gets no answer.
func scenarioSingleNoAnswer(ctx context.Context, e *env) error {
	return e.claimWithoutAnswer(singleItemsPath, []int{1201, 1202, 1203}, ":trigger")
}

// scenarioSubNoAnswer: the sub-workflows' example caller fed three items; companion: claim's request for the
// third gets no answer.
func scenarioSubNoAnswer(ctx context.Context, e *env) error {
	return e.claimWithoutAnswer(subMultiPath, []int{8601, 8602, 8603}, "")
}

// scenarioNodeNoAnswer: the community-node template fed three items, which its Before write asks in one batch
// call; that call's connection is reset. Its three items go to Needs attention marked unanswered and are
// answered 503 with a Retry-After (before, 500: "the node could not ask"); nothing is claimed or written;
// delivered again, each is written once.
func scenarioNodeNoAnswer(ctx context.Context, e *env) error {
	events, keys, refs := reminders(7401, 7402, 7403)
	e.dropped.Store(0)
	e.dropClaim.Store(&keys[2])
	defer e.dropClaim.Store(nil)
	code, h, out, err := e.triggerHeader(nodeItemsPath, map[string]any{"items": events})
	if err != nil {
		return err
	}
	var errs []error
	if n := e.dropped.Load(); n != 1 {
		errs = append(errs, fmt.Errorf("the proxy reset %d calls, want 1", n))
	}
	for i := range keys {
		if it, err := e.item(keys[i]); err == nil {
			errs = append(errs, fmt.Errorf("ledger %s: %s at attempt %d, want no item (its call never reached companion)", keys[i], it.State, it.Attempt))
		}
	}
	errs = append(errs, expectItemAnswers(code, h.Get("Retry-After"), out, 503, "60", map[string]int{keys[0]: 503, keys[1]: 503, keys[2]: 503}))
	for _, it := range webhookItems(out) {
		if it["error"] != "no_answer" {
			errs = append(errs, fmt.Errorf("an item was answered %v, want error no_answer", it))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	code, h, out, err = e.triggerHeader(nodeItemsPath, map[string]any{"items": events})
	if err != nil {
		return err
	}
	if err := expectItemAnswers(code, h.Get("Retry-After"), out, 200, "", map[string]int{keys[0]: 200, keys[1]: 200, keys[2]: 200}); err != nil {
		return fmt.Errorf("delivered again: %w", err)
	}
	for i := range keys {
		if err := e.expect(keys[i], "succeeded", 1, refs[i], 1); err != nil {
			return fmt.Errorf("delivered again: %w", err)
		}
	}
	return nil
}

// claimWithoutAnswer delivers three events at once to path while the proxy resets the connection of the
// third's write claim, and checks: the first two are written once and succeeded at attempt 1; the third is
// not claimed (companion never saw its request) and nothing of it is written; the webhook is answered once,
// 503 with a Retry-After, the third's own answer 503 no_answer. Delivered again: the third is written once,
// the others are not written again (their keys, or their trigger claims' keys with duplicate, answer 200).
func (e *env) claimWithoutAnswer(path string, invoices []int, duplicate string) error {
	events, keys, refs := reminders(invoices...)
	e.dropped.Store(0)
	e.dropClaim.Store(&keys[2])
	defer e.dropClaim.Store(nil)
	code, h, out, err := e.triggerHeader(path, map[string]any{"items": events})
	if err != nil {
		return err
	}
	var errs []error
	if n := e.dropped.Load(); n != 1 {
		errs = append(errs, fmt.Errorf("the proxy reset %d claims, want 1 (was %s asked?)", n, keys[2]))
	}
	for i := range 2 {
		if err := e.expect(keys[i], "succeeded", 1, refs[i], 1); err != nil {
			errs = append(errs, err)
		}
	}
	if it, err := e.item(keys[2]); err == nil {
		errs = append(errs, fmt.Errorf("ledger %s: %s at attempt %d, want no item (its claim never reached companion)", keys[2], it.State, it.Attempt))
	}
	if recs, err := e.records(refs[2]); err != nil || len(recs) != 0 {
		errs = append(errs, fmt.Errorf("receiver: %d records for %s, want none (%v)", len(recs), refs[2], err))
	}
	errs = append(errs, expectItemAnswers(code, h.Get("Retry-After"), out, 503, "60", map[string]int{keys[0]: 200, keys[1]: 200, keys[2]: 503}))
	for _, it := range webhookItems(out) {
		if it["key"] == keys[2] && it["error"] != "no_answer" {
			errs = append(errs, fmt.Errorf("the third item was answered %v, want error no_answer", it))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	code, h, out, err = e.triggerHeader(path, map[string]any{"items": events})
	if err != nil {
		return err
	}
	if err := expectItemAnswers(code, h.Get("Retry-After"), out, 200, "", map[string]int{keys[0] + duplicate: 200, keys[1] + duplicate: 200, keys[2]: 200}); err != nil {
		return fmt.Errorf("delivered again: %w", err)
	}
	for i := range keys {
		if err := e.expect(keys[i], "succeeded", 1, refs[i], 1); err != nil {
			return fmt.Errorf("delivered again: %w", err)
		}
	}
	return nil
}
