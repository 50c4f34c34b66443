package cli_test

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/cmd/companion/cli"
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

// TestServeRefusesAnUnreachableStore: serve and sweep --once on a MONGODB_URI, or a POSTGRES_URL, where
// nothing listens stop within the URI's wait (serverSelectionTimeoutMS, connect_timeout) with one line
// naming the host and port tried, what it said and what to check, exit status 1 as other start failures,
// and never the password (nor the MongoDB driver's topology dump).
func TestServeRefusesAnUnreachableStore(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	for _, c := range []struct {
		env, value string
		want       []string
		wait       time.Duration
	}{
		{"MONGODB_URI", "mongodb://ledger:hunter2@" + addr + "/?serverSelectionTimeoutMS=400&authSource=admin",
			[]string{"cannot open the ledger on MongoDB mongodb://xxxxx@" + addr, "within 400ms", addr + ": connection refused",
				"check that MongoDB runs"}, 400 * time.Millisecond},
		{"POSTGRES_URL", "postgres://ledger:hunter2@" + addr + "/companion?connect_timeout=1",
			[]string{"cannot open the ledger on PostgreSQL postgres://ledger@" + addr + "/companion (schema companion)",
				"no PostgreSQL answered at " + addr + " within 1s (connection refused)", "check that PostgreSQL runs there"}, time.Second},
	} {
		for _, args := range [][]string{{"serve"}, {"sweep", "--once"}} {
			p := newProgram(map[string]string{"COMPANION_ADDR": "127.0.0.1:0", c.env: c.value})
			began := time.Now()
			err := p.Run(t.Context(), args)
			took := time.Since(began)
			p.Close()
			if err == nil {
				t.Fatalf("%s: %v started without its store", c.env, args)
			}
			msg := err.Error()
			for _, want := range c.want {
				if !strings.Contains(msg, want) {
					t.Errorf("%s: %v: the error lacks %q: %s", c.env, args, want, msg)
				}
			}
			for _, not := range []string{"hunter2", "topology", "\n"} {
				if strings.Contains(msg, not) {
					t.Errorf("%s: %v: the error shows %q: %s", c.env, args, not, msg)
				}
			}
			if code := cli.ExitCode(err); code != 1 {
				t.Errorf("%s: %v: exit status %d, want 1 as other start failures", c.env, args, code)
			}
			if took > c.wait+3*time.Second {
				t.Errorf("%s: %v took %v to give up, want about the URI's %s", c.env, args, took, c.wait)
			}
		}
	}
}
