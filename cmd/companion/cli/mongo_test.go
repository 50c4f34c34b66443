package cli_test

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/cmd/companion/cli"
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
	if status, health := call(t, again, "GET", "/healthz", "", ""); status != 200 || health["store"] != "mongodb" {
		t.Errorf("/healthz = %d %v, want store mongodb", status, health)
	}
	if status, _ := call(t, again, "GET", "/readyz", "", ""); status != 200 {
		t.Errorf("/readyz = %d, want 200", status)
	}
}

// TestServeRefusesAnUnreachableMongoDB: serve and sweep --once on a MONGODB_URI where nothing listens stop
// within the URI's serverSelectionTimeoutMS with one line naming the host tried, what it said and what to
// check, exit status 1 as other start failures, and never the URI's password or the driver's topology dump.
func TestServeRefusesAnUnreachableMongoDB(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	for _, args := range [][]string{{"serve"}, {"sweep", "--once"}} {
		p := newProgram(map[string]string{
			"COMPANION_ADDR": "127.0.0.1:0",
			"MONGODB_URI":    "mongodb://ledger:hunter2@" + addr + "/?serverSelectionTimeoutMS=400&authSource=admin",
		})
		began := time.Now()
		err := p.Run(t.Context(), args)
		took := time.Since(began)
		p.Close()
		if err == nil {
			t.Fatalf("%v started without its MongoDB", args)
		}
		msg := err.Error()
		for _, want := range []string{"cannot open the ledger on MongoDB mongodb://xxxxx@" + addr, "within 400ms",
			addr + ": connection refused", "check that MongoDB runs"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%v: the error lacks %q: %s", args, want, msg)
			}
		}
		for _, not := range []string{"hunter2", "topology", "\n"} {
			if strings.Contains(msg, not) {
				t.Errorf("%v: the error shows %q: %s", args, not, msg)
			}
		}
		if code := cli.ExitCode(err); code != 1 {
			t.Errorf("%v: exit status %d, want 1 as other start failures", args, code)
		}
		if took > 4*time.Second {
			t.Errorf("%v took %v to give up, want about the URI's 400ms", args, took)
		}
	}
}
