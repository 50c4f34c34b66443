package main

// Scenarios of the single-item guarded-write template.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/replaysafe/companion/blueprints"
)

func reminder(inv int) (map[string]any, string, string) {
	claimInvoice(inv)
	body := map[string]any{"invoice": fmt.Sprint(inv), "recipient": "c-19", "amount": 120.5, "reminder": 2}
	return body, fmt.Sprintf("invoice-%d:reminder:2", inv), fmt.Sprintf("invoice-%d-reminder-2", inv)
}

// reminders is reminder for several invoices at once: the events of one delivery, and their keys and
// references in the same order.
func reminders(invoices ...int) (events []map[string]any, keys, refs []string) {
	for _, inv := range invoices {
		body, key, ref := reminder(inv)
		events, keys, refs = append(events, body), append(keys, key), append(refs, ref)
	}
	return events, keys, refs
}

const single = "companion/guarded-write"

// runSingle delivers body to the single-item template and checks the answer's status: 200 when the
// effect exists, 503 with a Retry-After when a later delivery can still finish it (want 503), and so on.
func (e *env) runSingle(body any, want int) (map[string]any, error) {
	code, h, out, err := e.triggerHeader(single, body)
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

func scenarioClean(ctx context.Context, e *env) error {
	body, key, ref := reminder(1001)
	out, err := e.runSingle(body, 200)
	if err != nil {
		return err
	}
	// The workflow passes the destination's id downstream and the ledger stores it.
	if err := e.expectWrittenOnce(key, ref, out); err != nil {
		return err
	}
	_, err = e.expectState(key+":trigger", "succeeded", 1)
	return err
}

func scenarioDrop(ctx context.Context, e *env) error {
	body, key, ref := reminder(1002)
	if err := e.fault(map[string]any{"fault": "commit_then_drop", "count": 1, "reference": ref}); err != nil {
		return err
	}
	// The write's outcome is unknown: the sender is told to deliver again later.
	if _, err := e.runSingle(body, 503); err != nil {
		return err
	}
	// The receiver committed and hung up: the ledger does not know, and must not say "not sent".
	if err := e.expect(key, "unknown", 1, ref, 1); err != nil {
		return err
	}
	if _, err := e.expectState(key+":trigger", "unknown", 1); err != nil {
		return err
	}
	// The same event again: the trigger and the write are retried with the same key, the receiver
	// replays its first answer, nothing new is created.
	if _, err := e.runSingle(body, 200); err != nil {
		return fmt.Errorf("re-send: %w", err)
	}
	if err := e.expect(key, "succeeded", 2, ref, 1); err != nil {
		return err
	}
	_, err := e.expectState(key+":trigger", "succeeded", 2)
	return err
}

func scenario429(ctx context.Context, e *env) error {
	key, err := e.refusedThenWrittenOnce(1003, e.runSingle)
	if err != nil {
		return err
	}
	_, err = e.expectState(key+":trigger", "succeeded", 2)
	return err
}

func scenarioTwice(ctx context.Context, e *env) error {
	body, key, ref := reminder(1004)
	for i := 0; i < 2; i++ {
		out, err := e.runSingle(body, 200)
		if err != nil {
			return fmt.Errorf("delivery %d: %w", i+1, err)
		}
		if dup := out["duplicate"] == true; dup != (i == 1) {
			return fmt.Errorf("delivery %d answered %v; only the second is a duplicate", i+1, out)
		}
	}
	return e.expect(key, "succeeded", 1, ref, 1)
}

func scenarioTwiceAtOnce(ctx context.Context, e *env) error {
	body, key, ref := reminder(1005)
	// The receiver answers slowly so both deliveries are inside n8n at the same time.
	if err := e.fault(map[string]any{"fault": "commit_then_delay", "count": 1, "reference": ref, "delay_ms": 1500}); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	outs := make([]map[string]any, 2)
	codes := make([]int, 2)
	heads := make([]http.Header, 2)
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			codes[i], heads[i], outs[i], errs[i] = e.triggerHeader(single, body)
		}(i)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if dups := btoi(outs[0]["duplicate"] == true) + btoi(outs[1]["duplicate"] == true); dups != 1 {
		return fmt.Errorf("%d of the two deliveries were short-circuited, want exactly 1: %v", dups, outs)
	}
	// The duplicate came while the first was running: it is told to come back (503, Retry-After), and
	// comes back to a finished effect.
	for i := range 2 {
		want := 200
		if outs[i]["duplicate"] == true {
			want = 503
		}
		if codes[i] != want || (want == 503) != (heads[i].Get("Retry-After") != "") {
			return fmt.Errorf("delivery %d answered %d (Retry-After %q), want %d: %v", i+1, codes[i], heads[i].Get("Retry-After"), want, outs[i])
		}
	}
	return e.expect(key, "succeeded", 1, ref, 1)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// scenarioMissingFields delivers an event without the fields its key is built from: it is answered 400
// and nothing is claimed (no invoice-undefined key shared by every malformed delivery), nothing written.
func scenarioMissingFields(ctx context.Context, e *env) error {
	code, out, err := e.trigger(single, map[string]any{"recipient": "c-19", "reminder": 2})
	if err != nil {
		return err
	}
	if code != 400 || fmt.Sprint(out["missing"]) != "[amount invoice]" {
		return fmt.Errorf("webhook answered %d %v, want 400 naming amount and invoice", code, out)
	}
	for _, key := range []string{"invoice-undefined:reminder:2", "invoice-undefined:reminder:2:trigger", "invoice-:reminder:2"} {
		if code, err := call("GET", e.companion+blueprints.PathItems+url.PathEscape(key), token, nil, nil); err != nil || code != 404 {
			return fmt.Errorf("GET item %s: %d %v, want 404 (nothing claimed)", key, code, err)
		}
	}
	return nil
}

// scenarioTriggerRetryLater: a delivery while the write waits for its Retry-After is told to come
// back (503, from the write's own ledger answer), not answered 200 as a duplicate; it spends no
// attempt of the trigger's, and the delivery after the wait writes once.
func scenarioTriggerRetryLater(ctx context.Context, e *env) error {
	body, key, ref := reminder(1006)
	if err := e.fault(map[string]any{"fault": "reject_429", "count": 1, "reference": ref, "retry_after": 3}); err != nil {
		return err
	}
	if _, err := e.runSingle(body, 503); err != nil {
		return err
	}
	out, err := e.runSingle(body, 503)
	if err != nil {
		return fmt.Errorf("delivery during the wait: %w", err)
	}
	if out["duplicate"] == true || out["reason"] != "retry_later" {
		return fmt.Errorf("delivery during the wait answered %v, want the write's retry_later", out)
	}
	if _, err := e.expectState(key+":trigger", "failed", 1); err != nil {
		return err
	}
	time.Sleep(4 * time.Second)
	if _, err := e.runSingle(body, 200); err != nil {
		return fmt.Errorf("delivery after the wait: %w", err)
	}
	if err := e.expect(key, "succeeded", 2, ref, 1); err != nil {
		return err
	}
	_, err = e.expectState(key+":trigger", "succeeded", 2)
	return err
}

// scenarioConflict: the same event with another amount after the write is a conflict: answered 409 (before
// issue 12's sub-workflow e2e it was answered 200, since the conflicting item's state is succeeded), nothing
// written, the item and the trigger claim stay as they were.
func scenarioConflict(ctx context.Context, e *env) error {
	body, key, ref := reminder(1007)
	if _, err := e.runSingle(body, 200); err != nil {
		return err
	}
	body["amount"] = 99.5
	out, err := e.runSingle(body, 409)
	if err != nil {
		return err
	}
	if out["decision"] != "conflict" {
		return fmt.Errorf("answered %v, want the conflict", out)
	}
	if err := e.expect(key, "succeeded", 1, ref, 1); err != nil {
		return err
	}
	_, err = e.expectState(key+":trigger", "succeeded", 1)
	return err
}
