package cli_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestBenchClaimsReportsAndSummarizes runs companion bench against a running service in both modes, with
// the floor, and checks the summary and that the items it wrote are there, succeeded, under its prefix.
func TestBenchClaimsReportsAndSummarizes(t *testing.T) {
	svc := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": t.TempDir(),
		"COMPANION_TOKENS": "wf:acme:workflow:wf-secret-0123456789,anna:acme:operator:op-secret-0123456789", "COMPANION_SWEEP_EVERY": "@every 1h"})
	env := map[string]string{"COMPANION_URL": "http://" + svc.Addr(), "COMPANION_TOKEN": "wf-secret-0123456789"}
	floor := t.TempDir()

	out, err := run(t, env, "bench", "--items", "40", "--callers", "4", "--prefix", "bench-single", "--floor", floor, "--floor-items", "20")
	if err != nil {
		t.Fatalf("bench single: %v\n%s", err, out)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^\s+before-write\s+40\s+[0-9.]+ ms\s+[0-9.]+ ms`),
		regexp.MustCompile(`(?m)^\s+after-write\s+40\s+[0-9.]+ ms\s+[0-9.]+ ms`),
		regexp.MustCompile(`(?m)^\s+single, 4 callers\s+40\s+[0-9]+\s+0\s*$`),
		regexp.MustCompile(`(?m)^\s+floor \(2 fsync'd SQLite commits/item\)\s+40\s+20\s+[0-9]+`),
		regexp.MustCompile(`× the floor`),
		regexp.MustCompile(`companion items list --workflow bench-single --all`),
		regexp.MustCompile(`Service CPU not measured \(GET /metrics answered 403\)`),
	} {
		if !want.MatchString(out) {
			t.Errorf("bench single: no %s in\n%s", want, out)
		}
	}
	if left, _ := os.ReadDir(floor); len(left) != 0 {
		t.Errorf("the floor left %d files in its directory", len(left))
	}

	out, err = run(t, env, "bench", "--mode", "batch", "--batch", "25", "--items", "110", "--callers", "2", "--prefix", "bench-batch")
	if err != nil {
		t.Fatalf("bench batch: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^\s+batch before-write\s+5\s`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^\s+batch of 25, 2 callers\s+110\s+[0-9]+\s+0\s*$`).MatchString(out) {
		t.Errorf("bench batch:\n%s", out)
	}

	op := map[string]string{"COMPANION_URL": env["COMPANION_URL"], "COMPANION_TOKEN": "op-secret-0123456789"}
	// With an operator token the bench reads the service's CPU time from GET /metrics.
	out, err = run(t, op, "bench", "--items", "30", "--callers", "2", "--prefix", "bench-cpu")
	if err != nil || !regexp.MustCompile(`Service CPU: [0-9]+ µs per item \([0-9.]+ s over the run`).MatchString(out) {
		t.Errorf("bench with an operator token: %v\n%s", err, out)
	}
	for prefix, n := range map[string]string{"bench-single": "40", "bench-batch": "110"} {
		out, err = run(t, op, "items", "list", "--workflow", prefix, "--state", "succeeded", "--limit", "500", "--all")
		if err != nil || !strings.Contains(out, n+" item(s)") {
			t.Errorf("items list --workflow %s: %v\n%s", prefix, err, out)
		}
	}

	// A second run with the same prefix finds its keys taken: it says so, and fails.
	out, err = run(t, env, "bench", "--items", "3", "--callers", "1", "--prefix", "bench-single")
	if err == nil || !strings.Contains(err.Error(), "3 calls failed") || !strings.Contains(err.Error(), "not proceed") {
		t.Errorf("a repeated prefix: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"--mode", "stream"}, {"--batch", "501"}, {"--prefix", "a:b"}, {"--items", "0"}, {"--callers", "0"}} {
		if _, err := run(t, env, append([]string{"bench"}, args...)...); err == nil {
			t.Errorf("bench %v: no error", args)
		}
	}
}
