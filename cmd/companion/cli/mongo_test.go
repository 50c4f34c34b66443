package cli_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/replaysafe/companion/items/mongostore/mongotest"
)

// MONGODB_URI selects the MongoDB store: the same API answers, the ledger lives in MongoDB (a restart on
// another data dir still knows the claim), and the start line names MongoDB.
func TestServeOnMongoDB(t *testing.T) {
	srv := mongotest.Start(t)
	env := map[string]string{
		"COMPANION_ADDR":     "127.0.0.1:0",
		"COMPANION_DATA_DIR": filepath.Join(t.TempDir(), "unused"),
		"MONGODB_URI":        srv.URI(),
		"MONGODB_DATABASE":   "companion_cli_test",
	}
	p := start(t, env)
	startLine := p.err.String()
	if !strings.Contains(startLine, "mongodb ") || !strings.Contains(startLine, "companion_cli_test") {
		t.Errorf("start line does not name the MongoDB store:\n%s", startLine)
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
	if status, _ := call(t, again, "GET", "/readyz", "", ""); status != 200 {
		t.Errorf("/readyz = %d, want 200", status)
	}
}

func TestServeRefusesAnUnreachableMongoDB(t *testing.T) {
	p := newProgram(map[string]string{
		"COMPANION_ADDR": "127.0.0.1:0",
		"MONGODB_URI":    "mongodb://ledger:hunter2@127.0.0.1:1/?serverSelectionTimeoutMS=300&connectTimeoutMS=300",
	})
	err := p.Run(t.Context(), []string{"serve"})
	defer p.Close()
	if err == nil {
		t.Fatal("serve started without its MongoDB")
	}
	if !strings.Contains(err.Error(), "MongoDB") || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error = %q, want it to name MongoDB without the password", err)
	}
}
