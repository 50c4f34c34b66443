package cli_test

import (
	"path/filepath"
	"strings"
	"testing"
)

// checkSharedStore runs serve on the shared store env names (MongoDB, PostgreSQL) and checks what holds on
// any of them: the start line names it (startLine), the API answers, the ledger outlives the process (a
// restart on another data dir still knows the claim, under the same idempotency key), and /healthz names
// the store (kind) and /readyz is ready. It returns the restarted service.
func checkSharedStore(t *testing.T, env map[string]string, kind, startLine string) program {
	t.Helper()
	env["COMPANION_ADDR"], env["COMPANION_DATA_DIR"] = "127.0.0.1:0", filepath.Join(t.TempDir(), "unused")
	p := start(t, env)
	if !strings.Contains(p.err.String(), startLine) {
		t.Errorf("the start line does not name the store (%s):\n%s", startLine, p.err)
	}
	status, first := call(t, p, "POST", "/v1/before-write", "", `{"key":"k1","payload":{"a":1}}`)
	if status != 200 || first["decision"] != "proceed" {
		t.Fatalf("before-write: %d %v", status, first)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	env["COMPANION_DATA_DIR"] = filepath.Join(t.TempDir(), "other")
	again := start(t, env)
	status, replay := call(t, again, "POST", "/v1/before-write", "", `{"key":"k1","payload":{"a":1}}`)
	if status != 200 || replay["decision"] != "skip" || replay["reason"] != "in_progress" || replay["idempotency_key"] != first["idempotency_key"] {
		t.Fatalf("replay after restart: %d %v", status, replay)
	}
	if status, health := call(t, again, "GET", "/healthz", "", ""); status != 200 || health["store"] != kind {
		t.Errorf("/healthz = %d %v, want store %s", status, health, kind)
	}
	if status, _ := call(t, again, "GET", "/readyz", "", ""); status != 200 {
		t.Errorf("/readyz = %d, want 200", status)
	}
	return again
}
