package main

// Scenarios of the lookup-reconcile template.

import (
	"context"
	"fmt"
)

func scenarioLookup(ctx context.Context, e *env) error {
	const ref, key = "QT-2026-0417", "quote:QT-2026-0417:create"
	body := map[string]any{"reference": ref, "customer": "c-88", "amount": 4200}
	// A destination that ignores idempotency keys but can be searched by reference.
	if err := e.mode(map[string]any{"dedupe": "none"}); err != nil {
		return err
	}
	defer func() { _ = e.mode(map[string]any{"dedupe": "key"}) }()
	if err := e.fault(map[string]any{"fault": "commit_then_drop", "count": 1, "reference": ref}); err != nil {
		return err
	}
	// Unknown: the sender is told to deliver again later.
	if code, out, err := e.trigger("companion/lookup-reconcile", body); err != nil || code != 503 {
		return fmt.Errorf("webhook: %d %v %v, want 503", code, out, err)
	}
	if err := e.expect(key, "unknown", 1, ref, 1); err != nil {
		return err
	}
	// Next run: before-write says reconcile, the lookup finds the record, nothing is re-sent, and the
	// ledger takes the found record's id.
	if code, out, err := e.trigger("companion/lookup-reconcile", body); err != nil || code != 200 {
		return fmt.Errorf("webhook (re-run): %d %v %v", code, out, err)
	}
	if err := e.expect(key, "succeeded", 1, ref, 1); err != nil {
		return err
	}
	recs, err := e.records(ref)
	if err != nil {
		return err
	}
	if it, _ := e.item(key); len(recs) != 1 || it.ExternalID != recs[0].ID {
		return fmt.Errorf("external_id %q, receiver records %v", it.ExternalID, recs)
	}
	return nil
}
