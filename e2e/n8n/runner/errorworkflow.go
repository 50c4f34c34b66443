package main

// Scenarios of the error workflow.

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/replaysafe/companion/blueprints"
)

func scenarioErrorWorkflow(ctx context.Context, e *env) error {
	body, key, ref := reminder(4001)
	if err := e.failedRunReportedUnknown(body, key, ref, 1); err != nil {
		return err
	}
	// The trigger claim of the failed execution was in flight too.
	_, err := e.expectState(key+":trigger", "unknown", 1)
	return err
}

// scenarioErrorWorkflowBatch fails a batch execution after its 600 writes, at the batch report: the error
// workflow must read both pages of the batch's status (500 a page) and report every claim unknown.
func scenarioErrorWorkflowBatch(ctx context.Context, e *env) error {
	const n = 600
	invoices := make([]int, n)
	for i := range invoices {
		invoices[i] = 20000 + i
	}
	e.failBatchReports.Store(true)
	code, _, err := e.trigger(batchPath, batchBody(invoices...))
	e.failBatchReports.Store(false)
	if err != nil {
		return err
	}
	if code < 500 {
		return fmt.Errorf("webhook answered %d; the execution should have failed", code)
	}
	_, lastKey, _ := reminder(invoices[n-1])
	var it struct {
		BatchID string `json:"batch_id"`
	}
	if code, err := call("GET", e.companion+blueprints.PathItems+url.PathEscape(lastKey), token, nil, &it); err != nil || code != 200 {
		return fmt.Errorf("GET item %s: %d %v", lastKey, code, err)
	}
	// The lease is 300 s; the error workflow reports the claims within a minute.
	deadline := time.Now().Add(90 * time.Second)
	var b batch
	for time.Now().Before(deadline) {
		if b, err = e.batch(it.BatchID); err != nil {
			return err
		}
		if b.Counts["unknown"] == n {
			break
		}
		time.Sleep(2 * time.Second)
	}
	if b.Counts["unknown"] != n {
		return fmt.Errorf("batch %s counts %v, want %d unknown", it.BatchID, b.Counts, n)
	}
	// The last item is on the second page: reported by the error workflow, not by lease expiry.
	if item, _ := e.item(lastKey); item.Cause == "lease_expired" {
		return fmt.Errorf("ledger %s: unknown by lease expiry, not by the error workflow", lastKey)
	}
	return nil
}

// scenarioErrorWorkflowRerun fails a re-run: its write item belongs to the first run's batch, so only
// the list by execution (the latest claim's) finds it; the error workflow reports it unknown at once.
func scenarioErrorWorkflowRerun(ctx context.Context, e *env) error {
	body, key, ref := reminder(4002)
	if err := e.fault(map[string]any{"fault": "commit_then_drop", "count": 1, "reference": ref}); err != nil {
		return err
	}
	if code, out, err := e.trigger(single, body); err != nil || code != 503 {
		return fmt.Errorf("first run: %d %v %v, want 503 (unknown)", code, out, err)
	}
	return e.failedRunReportedUnknown(body, key, ref, 2)
}

// failedRunReportedUnknown runs the single template on body with its after-write failing, so that the
// execution fails holding the claim of attempt; the error workflow must then report that claim unknown
// (within seconds: the lease is 300 s, so lease expiry cannot be what made it unknown).
func (e *env) failedRunReportedUnknown(body map[string]any, key, ref string, attempt int) error {
	e.failReports.Store(true)
	code, _, err := e.trigger(single, body)
	e.failReports.Store(false)
	if err != nil {
		return err
	}
	if code < 500 {
		return fmt.Errorf("the run of attempt %d answered %d; the execution should have failed", attempt, code)
	}
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		if last = e.expect(key, "unknown", attempt, ref, 1); last == nil {
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
