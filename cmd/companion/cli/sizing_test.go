package cli_test

import (
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/replaysafe/companion/cmd/companion/cli"
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
		regexp.MustCompile(`× the floor \([0-9]+ items/s; [0-9]+ before the run, [0-9]+ after it\)`),
		regexp.MustCompile(`companion items list --workflow bench-single --all`),
		regexp.MustCompile(`Service CPU not measured \(GET /metrics answered 403\): run with an operator token to read it from GET /metrics\.`),
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
	// ... and what the SQLite ledger's one writer did: 30 items at two callers are 60 transitions.
	if m := regexp.MustCompile(`SQLite writer: busy ([0-9]+)% of the run \(committing, the fsync included, ([0-9]+)%; reading, deciding and\s+writing ([0-9]+)%\), ([0-9.]+) transitions per commit`).FindStringSubmatch(out); m == nil {
		t.Errorf("bench with an operator token: no SQLite writer line in\n%s", out)
	} else if per, _ := strconv.ParseFloat(m[4], 64); per < 1 || per > 2 {
		t.Errorf("bench with an operator token: %s transitions per commit at two callers, want 1 to 2\n%s", m[4], out)
	}
	// ... and its item cache: each of the 30 items is a claim (a new key: a miss) then a report of the item
	// the claim put (a hit), 60 lookups, half of them hits.
	if m := regexp.MustCompile(`Its item cache \(--item-cache 2048\) answered ([0-9]+)% of 60 item lookups`).FindStringSubmatch(out); m == nil || m[1] != "50" {
		t.Errorf("bench with an operator token: no item cache line of 50%% of 60 lookups in\n%s", out)
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

// TestBenchRunsOneAfterTheOtherKeepTheirKeysApart: without --prefix, runs started one after the other
// (the sizing commands of docs/deploying.md pasted at once, a script's loop) each write keys of their
// own, so none finds the keys of the one before taken; three runs in well under a second, of which two
// share a second, would otherwise fail. A run that wrote nothing (its keys taken) sets no rate against
// the floor: the floor's row stays, the "× the floor" line is left out.
func TestBenchRunsOneAfterTheOtherKeepTheirKeysApart(t *testing.T) {
	svc := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": t.TempDir(),
		"COMPANION_SWEEP_EVERY": "@every 1h"})
	env := map[string]string{"COMPANION_URL": "http://" + svc.Addr()}
	listed := regexp.MustCompile(`companion items list --workflow (bench-[0-9]{8}T[0-9]{6}\.[0-9]{3}) --all`)
	seen := map[string]bool{}
	for i := range 3 {
		out, err := run(t, env, "bench", "--items", "2", "--callers", "1")
		if err != nil {
			t.Fatalf("run %d without --prefix: %v\n%s", i+1, err, out)
		}
		m := listed.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("run %d: no default prefix of the UTC time to the millisecond in\n%s", i+1, out)
		}
		if seen[m[1]] {
			t.Errorf("run %d: prefix %s again", i+1, m[1])
		}
		seen[m[1]] = true
	}

	prefix := ""
	for p := range seen {
		prefix = p
	}
	out, err := run(t, env, "bench", "--items", "2", "--callers", "1", "--prefix", prefix, "--floor", t.TempDir(), "--floor-items", "4")
	if err == nil || !strings.Contains(err.Error(), "2 calls failed") {
		t.Fatalf("a run on taken keys: %v\n%s", err, out)
	}
	if !strings.Contains(out, "floor (2 fsync'd SQLite commits/item)") || strings.Contains(out, "× the floor") {
		t.Errorf("a run that wrote nothing: want the floor's row and no rate against it:\n%s", out)
	}
}

// TestBenchOverHTTPSAndThroughAProxy runs companion bench against the service behind a TLS server
// (verified against --cacert, refused without it), and through an HTTP proxy named by HTTP_PROXY.
func TestBenchOverHTTPSAndThroughAProxy(t *testing.T) {
	svc := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": t.TempDir(),
		"COMPANION_TOKENS": "wf:acme:workflow:wf-secret-0123456789", "COMPANION_SWEEP_EVERY": "@every 1h"})
	backend := &url.URL{Scheme: "http", Host: svc.Addr()}

	var conns atomic.Int32
	tlsServer := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(backend))
	tlsServer.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	tlsServer.StartTLS()
	defer tlsServer.Close()
	cacert := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(cacert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsServer.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"COMPANION_URL": tlsServer.URL, "COMPANION_TOKEN": "wf-secret-0123456789"}
	out, err := run(t, env, "bench", "--items", "30", "--callers", "2", "--prefix", "bench-tls", "--cacert", cacert)
	if err != nil || !regexp.MustCompile(`(?m)^\s+single, 2 callers\s+30\s+[0-9]+\s+0\s*$`).MatchString(out) {
		t.Fatalf("bench over https: %v\n%s", err, out)
	}
	// One connection per caller, kept alive, and the one that reads GET /metrics.
	if n := conns.Load(); n > 3 {
		t.Errorf("60 calls of 2 callers opened %d TLS connections; want at most 3", n)
	}
	out, err = run(t, env, "bench", "--items", "4", "--callers", "1", "--prefix", "bench-tls-unknown-ca")
	if err == nil || !strings.Contains(err.Error(), "4 calls failed") || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("bench over https with a certificate of an unknown authority: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"--cacert", filepath.Join(t.TempDir(), "none.pem")}, {"--cacert", cacert + "x"}} {
		if _, err := run(t, env, append([]string{"bench"}, args...)...); err == nil {
			t.Errorf("bench %v: no error", args)
		}
	}

	// HTTP_PROXY names a proxy for the URL (not a loopback one, which net/http never proxies): the calls
	// go through it.
	var proxied atomic.Int32
	forward := httputil.NewSingleHostReverseProxy(backend)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Host == "companion.bench.invalid:8080" {
			proxied.Add(1)
		}
		forward.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	env = map[string]string{"COMPANION_URL": "http://companion.bench.invalid:8080", "COMPANION_TOKEN": "wf-secret-0123456789", "HTTP_PROXY": proxy.URL}
	out, err = run(t, env, "bench", "--items", "10", "--callers", "2", "--prefix", "bench-proxy")
	if err != nil || !regexp.MustCompile(`(?m)^\s+single, 2 callers\s+10\s+[0-9]+\s+0\s*$`).MatchString(out) {
		t.Fatalf("bench through a proxy: %v\n%s", err, out)
	}
	if n := proxied.Load(); n < 20 {
		t.Errorf("the proxy forwarded %d calls; want 20 and GET /metrics", n)
	}
}

// A token the service does not know, or none where it needs one, stops the bench before its first call:
// every call would be refused alike, and the run printed a table of errors (20,000 of them for --items
// 10000) where one line says what to fix.
func TestBenchWithATokenTheServiceRefusesSendsNothing(t *testing.T) {
	svc := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": t.TempDir(),
		"COMPANION_TOKENS": "wf:acme:workflow:wf-secret-0123456789,op:acme:operator:op-secret-0123456789", "COMPANION_SWEEP_EVERY": "@every 1h"})
	for _, tc := range []struct{ token, want string }{
		{"wrong-secret-0123456789", "it knows no token with the secret in --token (COMPANION_TOKEN): check it against its tokens, in its COMPANION_TOKENS, the file its COMPANION_TOKENS_FILE names, or tokens: in its config file"},
		{"", "it runs with tokens and none was given: set COMPANION_TOKEN"},
	} {
		env := map[string]string{"COMPANION_URL": "http://" + svc.Addr(), "COMPANION_TOKEN": tc.token}
		out, err := run(t, env, "bench", "--items", "50", "--callers", "2", "--prefix", "bench-refused")
		if err == nil || !strings.Contains(err.Error(), "answered 401 (GET /metrics): "+tc.want) || !strings.Contains(err.Error(), "no item was sent") ||
			strings.Contains(out, "calls  items") {
			t.Errorf("bench with token %q: %v\n%s", tc.token, err, out)
		}
	}
	out, err := run(t, map[string]string{"COMPANION_URL": "http://" + svc.Addr(), "COMPANION_TOKEN": "op-secret-0123456789"},
		"items", "list", "--workflow", "bench-refused", "--json")
	if err != nil || strings.Contains(out, "bench-refused:") {
		t.Errorf("items of a refused bench: %v\n%s", err, out)
	}
}

// TestBenchShowsHTTPErrorAnswers: an answer other than 200 is an error of its call, shown with its
// status and body, whether it comes with a Content-Length (401 of the service: GET /metrics is open, so
// the bench cannot tell the token is unknown before its calls) or chunked (503).
func TestBenchShowsHTTPErrorAnswers(t *testing.T) {
	svc := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": t.TempDir(),
		"COMPANION_TOKENS": "wf:acme:workflow:wf-secret-0123456789", "COMPANION_SWEEP_EVERY": "@every 1h", "COMPANION_METRICS_OPEN": "true"})
	env := map[string]string{"COMPANION_URL": "http://" + svc.Addr(), "COMPANION_TOKEN": "wrong-secret-0123456789"}
	out, err := run(t, env, "bench", "--items", "3", "--callers", "1", "--prefix", "bench-401")
	if err == nil || !regexp.MustCompile(`^bench: 3 calls failed; the first: before-write: HTTP 401: \{"error":\{"code":"[a-z_]+"`).MatchString(err.Error()) ||
		!regexp.MustCompile(`(?m)^\s+single, 1 caller\s+0\s+0\s+3\s*$`).MatchString(out) {
		t.Errorf("bench with a wrong token: %v\n%s", err, out)
	}

	draining := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":{"code":"unavailable",`)
		w.(http.Flusher).Flush() // chunked
		io.WriteString(w, `"message":"draining"}}`)
	}))
	defer draining.Close()
	env["COMPANION_URL"] = draining.URL
	out, err = run(t, env, "bench", "--mode", "batch", "--batch", "5", "--items", "12", "--callers", "2", "--prefix", "bench-503")
	if err == nil || !strings.Contains(err.Error(), `3 calls failed; the first: batch before-write: HTTP 503: {"error":{"code":"unavailable","message":"draining"}}`) ||
		!regexp.MustCompile(`(?m)^\s+batch of 5, 2 callers\s+0\s+0\s+3\s*$`).MatchString(out) ||
		!strings.Contains(out, "Service CPU not measured (GET /metrics answered 503): the service did not answer GET /metrics after the run.") ||
		strings.Contains(out, "operator token") { // it had one: the service was draining, not refusing it

		t.Errorf("bench against a service that answers 503: %v\n%s", err, out)
	}
}

// A bench against an address where nothing listens stops at once and says so, instead of running every
// call into an error and printing a table of zeros.
func TestBenchWithNoServiceSaysSo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // a port nothing listens on
	out, err := run(t, map[string]string{"COMPANION_URL": "http://" + addr}, "bench", "--items", "5", "--callers", "1")
	if err == nil || !strings.Contains(err.Error(), "bench: cannot reach companion at http://"+addr+" (--url, or COMPANION_URL)") ||
		!strings.Contains(err.Error(), "start it (companion serve)") {
		t.Errorf("bench with no service: %v", err)
	}
	if strings.Contains(out, "items/s") {
		t.Errorf("bench with no service printed a summary:\n%s", out)
	}
}

// A --url copied from a request (…/v1) would send every call to /v1/v1/… and count each as an error: it is
// refused before any call, saying what to give, from the flag as from COMPANION_URL.
func TestBenchURLEndingInV1IsRefused(t *testing.T) {
	for _, env := range []map[string]string{nil, {"COMPANION_URL": "http://127.0.0.1:1/v1"}} {
		args := []string{"bench", "--items", "5", "--callers", "1"}
		if env == nil {
			args = append(args, "--url", "http://127.0.0.1:1/v1/")
		}
		out, err := run(t, env, args...)
		if err == nil || !strings.Contains(err.Error(), "ends in /v1: give the service's address without it (the bench adds /v1/…), --url http://127.0.0.1:1") ||
			cli.ExitCode(err) != 2 || out != "" {
			t.Errorf("%v (env %v): %v (exit %d)\n%s", args, env, err, cli.ExitCode(err), out)
		}
	}
}

// A --floor that does not exist says so and what to give, before anything is measured; a file is not a
// directory.
func TestBenchFloorMustBeADirectory(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ floor, want string }{
		{filepath.Join(dir, "missing"), "does not exist: give a directory on the disk to measure"},
		{file, "is not a directory"},
	} {
		_, err := run(t, map[string]string{"COMPANION_URL": "http://127.0.0.1:1"}, "bench", "--items", "0", "--floor", tc.floor)
		if err == nil || !strings.Contains(err.Error(), strconv.Quote(tc.floor)+" "+tc.want) {
			t.Errorf("--floor %s: %v; want %q", tc.floor, err, tc.want)
		}
	}
}

// TestBenchOutputReadByTheScripts runs the awk programs of scripts/scale-run.sh and scripts/ab-rounds.sh on
// real bench output at one caller and at 32, single and in batches of 500, and checks each finds the run's
// items/s: the summary's "1 caller" (not "1 callers") must not leave a script reading nothing.
func TestBenchOutputReadByTheScripts(t *testing.T) {
	awk, err := exec.LookPath("awk")
	if err != nil {
		t.Skip("no awk on PATH: the scripts' programs cannot run here")
	}
	read := func(script, pattern string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("..", "..", "..", "scripts", script))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(pattern).FindSubmatch(b)
		if m == nil {
			t.Fatalf("%s: no awk program matching %s", script, pattern)
		}
		return string(m[1])
	}
	scale := read("scale-run.sh", `(?s)awk '(/before-write/[^']*)' <<<"\$out"`)
	ab := map[string]string{
		"32": read("ab-rounds.sh", `r32=\$\(awk '([^']*)' <<<"\$o32"\)`),
		"1":  read("ab-rounds.sh", `r1=\$\(awk '([^']*)' <<<"\$o1"\)`),
		"b":  read("ab-rounds.sh", `rb=\$\(awk '([^']*)' <<<"\$ob"\)`),
	}
	runAwk := func(prog, in string) string {
		t.Helper()
		cmd := exec.Command(awk, prog)
		cmd.Stdin = strings.NewReader(in)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("awk %q: %v", prog, err)
		}
		return strings.TrimSpace(string(out))
	}

	svc := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": t.TempDir(),
		"COMPANION_SWEEP_EVERY": "@every 1h"})
	env := map[string]string{"COMPANION_URL": "http://" + svc.Addr()}
	for _, tt := range []struct {
		ab, row string
		args    []string
	}{
		{"1", "single, 1 caller", []string{"--items", "20", "--callers", "1"}},
		{"32", "single, 32 callers", []string{"--items", "64", "--callers", "32"}},
		{"b", "batch of 500, 1 caller", []string{"--mode", "batch", "--batch", "500", "--items", "1000", "--callers", "1"}},
	} {
		out, err := run(t, env, append([]string{"bench"}, tt.args...)...)
		if err != nil {
			t.Fatalf("bench %v: %v\n%s", tt.args, err, out)
		}
		m := regexp.MustCompile(`(?m)^\s+` + tt.row + `\s+[0-9]+\s+([0-9]+)\s+0\s*$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("bench %v: no row %q in\n%s", tt.args, tt.row, out)
		}
		if got := strings.Fields(runAwk(scale, out)); len(got) != 3 || got[0] != m[1] {
			t.Errorf("scale-run.sh's awk on %q: %q, want the rate %s first", tt.row, got, m[1])
		}
		if got := runAwk(ab[tt.ab], out); got != m[1] {
			t.Errorf("ab-rounds.sh's awk on %q: %q, want %s", tt.row, got, m[1])
		}
	}
}
