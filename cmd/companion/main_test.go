package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/replaysafe/companion/handlers/handlerstest"
)

// binary is the companion program, built once for these tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "companion-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "companion")
	build := exec.Command("go", "build", "-o", binary, ".")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// process is a running companion binary.
type process struct {
	cmd    *exec.Cmd
	addr   string
	log    *handlerstest.SyncBuffer
	exited chan struct{}
	err    error // the exit status, once exited is closed
}

// command returns the binary's command for serve on a free loopback port over dataDir.
func command(dataDir string, env ...string) *exec.Cmd {
	cmd := exec.Command(binary, "serve")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COMPANION_") && !strings.HasPrefix(kv, "MONGODB_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "COMPANION_ADDR=127.0.0.1:0", "COMPANION_DATA_DIR="+dataDir)
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// run starts cmd and waits for its start line; it fails the test if the program exits first.
func run(t *testing.T, cmd *exec.Cmd) *process {
	t.Helper()
	p := &process{cmd: cmd, log: &handlerstest.SyncBuffer{}, exited: make(chan struct{})}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", binary, err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(p.log, line)
			var entry struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &entry) == nil && entry.Addr != "" && strings.Contains(entry.Msg, "serving on") {
				ready <- entry.Addr
			}
		}
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	select {
	case p.addr = <-ready:
		return p
	case <-p.exited:
		t.Fatalf("companion exited before serving: %v\n%s", p.err, p.log)
	case <-time.After(30 * time.Second):
		t.Fatalf("companion did not start in 30 s:\n%s", p.log)
	}
	return nil
}

func post(c *http.Client, addr, path, body string) (int, map[string]any, error) {
	resp, err := c.Post("http://"+addr+path, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, m, nil
}

func TestAcknowledgedClaimsSurviveSIGKILL(t *testing.T) {
	dir := t.TempDir()
	p := run(t, command(dir))

	type ack struct {
		key, claim, idempotencyKey string
		succeeded                  bool // the after-write success was acknowledged too
	}
	var (
		mu   sync.Mutex
		acks []ack
		wg   sync.WaitGroup
	)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	payload := func(key string) string {
		return fmt.Sprintf(`{"key":%q,"payload":{"invoice":%q,"amount":120.5}}`, key, key)
	}
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				key := fmt.Sprintf("crash-%d-%d", g, i)
				status, ans, err := post(client, p.addr, "/v1/before-write", payload(key))
				if err != nil {
					return // the process is gone
				}
				if status != 200 || ans["decision"] != "proceed" {
					t.Errorf("%s: %d %v", key, status, ans)
					return
				}
				a := ack{key: key, claim: ans["claim"].(string), idempotencyKey: ans["idempotency_key"].(string)}
				if i%3 == 0 {
					status, rep, err := post(client, p.addr, "/v1/after-write",
						fmt.Sprintf(`{"key":%q,"claim":%q,"outcome":"succeeded","external_id":"rec-%s"}`, key, a.claim, key))
					a.succeeded = err == nil && status == 200 && rep["state"] == "succeeded"
				}
				mu.Lock()
				acks = append(acks, a)
				mu.Unlock()
			}
		})
	}
	killMidTraffic(t, p, &wg, client, "claims acknowledged", 200, func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acks)
	})

	q := run(t, command(dir))
	mu.Lock()
	defer mu.Unlock()
	succeeded := 0
	for _, a := range acks {
		status, ans, err := post(client, q.addr, "/v1/before-write", payload(a.key))
		if err != nil || status != 200 {
			t.Fatalf("replay %s: %d %v %v", a.key, status, ans, err)
		}
		if ans["decision"] == "proceed" || ans["reason"] == "new" {
			t.Fatalf("acknowledged claim %s was lost: the replay got %v/%v", a.key, ans["decision"], ans["reason"])
		}
		if ans["idempotency_key"] != a.idempotencyKey {
			t.Fatalf("%s: idempotency key changed across the restart: %v, was %s", a.key, ans["idempotency_key"], a.idempotencyKey)
		}
		switch {
		case a.succeeded:
			succeeded++
			if ans["reason"] != "succeeded" || ans["external_id"] != "rec-"+a.key {
				t.Fatalf("acknowledged success of %s was lost: %v", a.key, ans)
			}
		case ans["decision"] != "skip" || (ans["reason"] != "in_progress" && ans["reason"] != "succeeded"):
			t.Fatalf("replay of claimed %s: %v/%v", a.key, ans["decision"], ans["reason"])
		}
	}
	t.Logf("%d acknowledged claims (%d with acknowledged success) all survived SIGKILL", len(acks), succeeded)
}

// killMidTraffic waits until done() counts n of what the callers (wg) do, failing the test after 60 s,
// then kills p with SIGKILL while they are still sending (some requests are cut off mid-way), and waits
// for the process and the callers to end.
func killMidTraffic(t *testing.T, p *process, wg *sync.WaitGroup, client *http.Client, what string, n int, done func() int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for done() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d %s in 60 s", done(), what)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	wg.Wait()
	client.CloseIdleConnections()
}

func TestSIGTERMLetsRunningRequestsFinish(t *testing.T) {
	dir := t.TempDir()
	p := run(t, command(dir))
	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"key":"slow-1","payload":{"a":1}}`
	fmt.Fprintf(conn, "POST /v1/before-write HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:10])
	time.Sleep(300 * time.Millisecond) // the server has the headers: the request is running

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if c, err := net.DialTimeout("tcp", p.addr, time.Second); err == nil {
		c.Close()
		t.Errorf("new connections are still accepted after SIGTERM")
	}
	select {
	case <-p.exited:
		t.Fatalf("exited with a request still running:\n%s", p.log)
	default:
	}

	if _, err := io.WriteString(conn, body[10:]); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("the running request got no answer: %v\n%s", err, p.log)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"decision":"proceed"`) {
		t.Fatalf("running request: %d %s", resp.StatusCode, b)
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("still running 10 s after SIGTERM:\n%s", p.log)
	}
	if p.err != nil {
		t.Fatalf("exit status after SIGTERM: %v\n%s", p.err, p.log)
	}
	if !strings.Contains(p.log.String(), "companion stopped") {
		t.Fatalf("no stop line:\n%s", p.log)
	}

	q := run(t, command(dir))
	status, ans, err := post(http.DefaultClient, q.addr, "/v1/before-write", body)
	if err != nil || ans["reason"] != "in_progress" {
		t.Fatalf("the claim answered during shutdown is not in the ledger: %d %v %v", status, ans, err)
	}
}

// TestReadOnlyDataDirStopsTheStart runs the program as a user who cannot write the data dir. A
// read-only ledger cannot durably record a claim, so the program refuses to start instead of serving.
// (A data dir made read-only under a running process keeps working: the open files stay writable, and
// every acknowledged write is still durable.)
func TestReadOnlyDataDirStopsTheStart(t *testing.T) {
	base := t.TempDir()
	populated := filepath.Join(base, "populated")
	p := run(t, command(populated))
	if status, _, err := post(http.DefaultClient, p.addr, "/v1/before-write", `{"key":"k","payload":{}}`); err != nil || status != 200 {
		t.Fatalf("claim before: %d %v", status, err)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.exited
	empty := filepath.Join(base, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{populated, empty} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if err := os.Chmod(filepath.Join(dir, e.Name()), 0o444); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { // let t.TempDir remove them
		for _, dir := range []string{populated, empty} {
			_ = os.Chmod(dir, 0o755)
		}
	})

	for _, dir := range []string{populated, empty} {
		cmd := command(dir)
		if os.Geteuid() == 0 {
			// root writes anywhere; run as nobody, who can reach the directories but not write them.
			for _, d := range []string{filepath.Dir(binary), filepath.Dir(base), base} {
				if err := os.Chmod(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			if errors.Is(err, syscall.EPERM) {
				t.Skipf("cannot run as an unprivileged user here: %v", err)
			}
			t.Fatalf("%s: the program did not exit with an error: %v\n%s", dir, err, &stderr)
		}
		if exit.ExitCode() != 1 || !strings.Contains(stderr.String(), "cannot open the ledger in data dir "+dir) ||
			strings.Contains(stderr.String(), "serving on") {
			t.Fatalf("%s: exit %d:\n%s", dir, exit.ExitCode(), &stderr)
		}
		// It says what is wrong and what to do in plain words, not SQLite's "unable to open database file
		// (14)" under the name of an internal step.
		for _, want := range []string{"cannot create files in it (permission denied)", "give this user write access to it", "--data-dir"} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("%s: the error lacks %q:\n%s", dir, want, &stderr)
			}
		}
		if strings.Contains(stderr.String(), "sqlitestore") || strings.Contains(stderr.String(), "(14)") {
			t.Errorf("%s: the error speaks of the store's internals:\n%s", dir, &stderr)
		}
	}
}
