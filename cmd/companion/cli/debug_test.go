package cli_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/replaysafe/companion/cmd/companion/cli"
)

// TestDebugAddrServesProfilesOnLoopbackOnly: --debug-addr serves Go's profiles on a listener of its own,
// not on the service's address; it is off by default, and an address that is not loopback stops the
// start.
func TestDebugAddrServesProfilesOnLoopbackOnly(t *testing.T) {
	t.Parallel()
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	off := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": t.TempDir()})
	if a := off.DebugAddr(); a != "" {
		t.Errorf("profiles served on %s without --debug-addr", a)
	}
	if status, _ := get("http://" + off.Addr() + "/debug/pprof/"); status != http.StatusNotFound {
		t.Errorf("GET /debug/pprof/ on the service's address: %d; want 404", status)
	}

	on := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": t.TempDir(),
		"COMPANION_DEBUG_ADDR": "127.0.0.1:0"})
	if status, body := get("http://" + on.DebugAddr() + "/debug/pprof/"); status != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("GET /debug/pprof/ on --debug-addr: %d %.200s", status, body)
	}
	if status, body := get("http://" + on.DebugAddr() + "/debug/pprof/profile?seconds=1"); status != http.StatusOK || len(body) == 0 {
		t.Errorf("a CPU profile: %d, %d bytes", status, len(body))
	}
	if status, _ := get("http://" + on.Addr() + "/debug/pprof/"); status != http.StatusNotFound {
		t.Errorf("GET /debug/pprof/ on the service's address: %d; want 404", status)
	}

	for _, addr := range []string{"0.0.0.0:6060", ":6060", "192.0.2.1:6060"} {
		m := cli.NewMain()
		m.Stdout, m.Stderr = io.Discard, io.Discard
		m.Getenv = func(k string) string { return map[string]string{"COMPANION_DATA_DIR": t.TempDir()}[k] }
		err := m.Run(context.Background(), []string{"serve", "--addr", "127.0.0.1:0", "--debug-addr", addr})
		if err == nil {
			m.Close()
			t.Errorf("--debug-addr %s started", addr)
		} else if cli.ExitCode(err) != 2 || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("--debug-addr %s: %v (exit %d); want a usage error naming loopback", addr, err, cli.ExitCode(err))
		}
	}
}
