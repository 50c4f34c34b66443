package cli_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replaysafe/companion/cmd/companion/cli"
	"github.com/replaysafe/companion/internal/tmpdisk"
)

// healthcheck runs "companion healthcheck" with env and args, and returns its exit status and output.
func healthcheck(env map[string]string, args ...string) (int, string) {
	p := newProgram(env)
	err := p.Run(context.Background(), append([]string{"healthcheck"}, args...))
	out := p.out.String()
	if err != nil {
		out += err.Error()
	}
	return cli.ExitCode(err), out
}

// The image's HEALTHCHECK: the service's own address from COMPANION_ADDR, an address on every interface
// asked on loopback; 0 while it serves, 1 once it stopped.
func TestHealthcheckAsksReadyz(t *testing.T) {
	p := newProgram(map[string]string{"COMPANION_DATA_DIR": t.TempDir()})
	if err := p.Run(context.Background(), []string{"serve", "--addr", "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(p.Addr())
	for _, addr := range []string{"127.0.0.1:" + port, "0.0.0.0:" + port, ":" + port} {
		if code, out := healthcheck(map[string]string{"COMPANION_ADDR": addr}); code != 0 || !strings.Contains(out, "ready: http://127.0.0.1:"+port+"/readyz") {
			t.Errorf("COMPANION_ADDR=%s while serving: exit %d, %q", addr, code, out)
		}
	}
	if code, out := healthcheck(nil, "--addr", p.Addr()); code != 0 {
		t.Errorf("--addr %s: exit %d, %q", p.Addr(), code, out)
	}
	p.Close()
	if code, out := healthcheck(map[string]string{"COMPANION_ADDR": "0.0.0.0:" + port}); code != 1 || !strings.Contains(out, "not ready: http://127.0.0.1:"+port+"/readyz") {
		t.Errorf("after serve stopped: exit %d, %q", code, out)
	}
	if code, out := healthcheck(nil, "--addr", "8080"); code != 2 || !strings.Contains(out, "give host:port, e.g. --addr 127.0.0.1:8080") {
		t.Errorf("--addr 8080: exit %d, %q", code, out)
	}
}

// TestReadyzFollowsAFullDisk runs companion serve with its ledger on a 4 MB tmpfs and fills the disk:
// once a claim is answered 503 store_unavailable, /readyz answers 503 and the healthcheck exits 1,
// for as long as the disk is full; when room comes back both turn ready with no request made, and
// claims proceed again.
func TestReadyzFollowsAFullDisk(t *testing.T) {
	disk := tmpdisk.Mount(t, 4<<20)
	secret := "full-disk-secret-0123456789"
	p := start(t, map[string]string{"COMPANION_DATA_DIR": filepath.Join(disk, "ledger"), "COMPANION_TOKENS": "n8n:default:workflow:" + secret},
		"--addr", "127.0.0.1:0")
	if status, body := call(t, p, "GET", "/readyz", "", ""); status != 200 {
		t.Fatalf("readyz before: %d %v", status, body)
	}
	free := tmpdisk.Fill(t, disk)
	refused := false
	for i := 0; i < 200 && !refused; i++ {
		status, body := call(t, p, "POST", "/v1/before-write", secret, fmt.Sprintf(`{"key":"full-%d","payload":{"n":%d}}`, i, i))
		switch {
		case status == 503 && body["error"].(map[string]any)["code"] == "store_unavailable":
			refused = true
		case status != 200:
			t.Fatalf("before-write on a full disk: %d %v", status, body)
		}
	}
	if !refused {
		t.Fatal("200 claims recorded on a full disk")
	}
	for range 3 {
		if status, body := call(t, p, "GET", "/readyz", "", ""); status != 503 || body["error"].(map[string]any)["code"] != "store_unavailable" {
			t.Fatalf("readyz on a full disk after a refused claim: %d %v", status, body)
		}
	}
	if code, out := healthcheck(nil, "--addr", p.Addr()); code != 1 || !strings.Contains(out, "503 Service Unavailable: store_unavailable") {
		t.Errorf("healthcheck on a full disk: exit %d, %q", code, out)
	}
	free()
	if status, body := call(t, p, "GET", "/readyz", "", ""); status != 200 {
		t.Fatalf("readyz after the disk was freed: %d %v", status, body)
	}
	if code, out := healthcheck(nil, "--addr", p.Addr()); code != 0 {
		t.Errorf("healthcheck after the disk was freed: exit %d, %q", code, out)
	}
	if status, body := call(t, p, "POST", "/v1/before-write", secret, `{"key":"after","payload":{}}`); status != 200 || body["decision"] != "proceed" {
		t.Fatalf("before-write after the disk was freed: %d %v", status, body)
	}
}
