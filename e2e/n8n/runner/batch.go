package main

// Scenarios of the batch template.

import (
	"context"
	"fmt"
	"net/url"

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

func (e *env) runBatch(invoices ...int) (map[string]any, error) {
	code, out, err := e.trigger(batchPath, batchBody(invoices...))
	if err == nil && code != 200 {
		err = fmt.Errorf("webhook answered %d: %v", code, out)
	}
	return out, err
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
	out, err := e.runBatch(2001, 2002, 2003)
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
	for _, inv := range []int{2001, 2002, 2003} {
		_, key, ref := reminder(inv)
		if err := e.expect(key, "succeeded", 1, ref, 1); err != nil {
			return err
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
	// stored result, nothing is claimed or written.
	out, err := e.runBatch(2001, 2002, 2003)
	if err != nil {
		return err
	}
	if out["decision"] != "skip" || out["reason"] != "succeeded" {
		return fmt.Errorf("the re-run answered %v, want the stored result (skip/succeeded)", out)
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
	out, err := e.runBatch(3001, 3002, 3003)
	if err != nil {
		return err
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
	out, err := e.runBatch(invoices...)
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
