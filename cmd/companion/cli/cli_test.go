package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/replaysafe/companion/cmd/companion/cli"
	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/handlers/handlerstest"
)

// program is one in-process run of companion.
type program struct {
	*cli.Main
	out, err *handlerstest.SyncBuffer
}

func newProgram(env map[string]string) program {
	p := program{Main: cli.NewMain(), out: &handlerstest.SyncBuffer{}, err: &handlerstest.SyncBuffer{}}
	p.Stdout, p.Stderr = p.out, p.err
	p.Getenv = func(k string) string { return env[k] }
	return p
}

// start runs serve with args and stops it when the test ends.
func start(t *testing.T, env map[string]string, args ...string) program {
	t.Helper()
	p := newProgram(env)
	if err := p.Run(context.Background(), append([]string{"serve"}, args...)); err != nil {
		t.Fatalf("serve %v: %v\n%s", args, err, p.err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func call(t *testing.T, p program, method, path, token, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+p.Addr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

// With tokens, --metrics-open leaves one endpoint open to whoever reaches --addr: the start line says so,
// and says nothing of it without the flag.
func TestStartLineNamesOpenMetrics(t *testing.T) {
	for _, open := range []string{"true", ""} {
		p := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": filepath.Join(t.TempDir(), "data"),
			"COMPANION_TOKENS": "ops:acme:operator:op-secret-0123456789", "COMPANION_METRICS_OPEN": open})
		startLine := p.err.String()
		said := strings.Contains(startLine, "auth on (1 token(s): ops (acme, operator)), except GET /metrics (--metrics-open: no token, every tenant);") &&
			strings.Contains(startLine, `"metrics_open":true`)
		status, _ := call(t, p, "GET", "/metrics", "", "")
		if open == "true" && (!said || status != 200) || open == "" && (strings.Contains(startLine, "GET /metrics") || !strings.Contains(startLine, `"metrics_open":false`) || status != 401) {
			t.Errorf("COMPANION_METRICS_OPEN=%q: GET /metrics without a token %d; start line:\n%s", open, status, startLine)
		}
	}
}

// A setting given in the environment that serve cannot use stops the start naming the variable, where a
// newcomer who set it will look, and creates nothing; COMPANION_METRICS_OPEN that is not true or false is
// such a mistake, not a silent "closed" (1 opens it, as true does), unless --metrics-open decides.
func TestServeEnvironmentMistakesNameTheVariable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"COMPANION_SWEEP_EVERY": "30s"}, nil, `--sweep-every (COMPANION_SWEEP_EVERY): sweep schedule "30s"`},
		{map[string]string{"COMPANION_ADDR": "localhost"}, nil, `--addr (COMPANION_ADDR) "localhost": address localhost: missing port in address; give host:port, e.g. --addr localhost:8080`},
		{map[string]string{"COMPANION_DEBUG_ADDR": "0.0.0.0:6060"}, nil, `--debug-addr (COMPANION_DEBUG_ADDR) "0.0.0.0:6060": the profiles are served on a loopback address only`},
		{map[string]string{"COMPANION_METRICS_OPEN": "yes"}, nil, `COMPANION_METRICS_OPEN "yes" is not true or false`},
	} {
		env := map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": dir}
		maps.Copy(env, c.env)
		p := newProgram(env)
		err := p.Run(context.Background(), append([]string{"serve"}, c.args...))
		p.Close()
		if err == nil || !strings.Contains(err.Error(), c.want) || cli.ExitCode(err) != 2 {
			t.Errorf("%v: %v (exit %d); want %q", c.env, err, cli.ExitCode(err), c.want)
		}
		if _, statErr := os.Stat(dir); statErr == nil {
			t.Fatalf("%v: the data dir was created", c.env)
		}
	}
	tokens := "ops:acme:operator:op-secret-0123456789"
	for _, c := range []struct {
		value string
		args  []string
		open  bool
	}{{"1", nil, true}, {"false", nil, false}, {"yes", []string{"--metrics-open=false"}, false}} {
		p := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": filepath.Join(t.TempDir(), "data"),
			"COMPANION_TOKENS": tokens, "COMPANION_METRICS_OPEN": c.value}, c.args...)
		if status, _ := call(t, p, "GET", "/metrics", "", ""); (status == 200) != c.open {
			t.Errorf("COMPANION_METRICS_OPEN=%s %v: GET /metrics without a token answered %d, want open %v", c.value, c.args, status, c.open)
		}
		p.Close()
	}
}

func TestServeAnswersThenStopsAndKeepsTheLedger(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	env := map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": dir}
	p := start(t, env)

	startLine := p.err.String()
	for _, want := range []string{"serving on http://" + p.Addr(), "sqlite " + filepath.Join(dir, "companion.db"), "auth off", "config none"} {
		if !strings.Contains(startLine, want) {
			t.Errorf("start line lacks %q:\n%s", want, startLine)
		}
	}
	if status, health := call(t, p, "GET", "/healthz", "", ""); status != 200 || health["store"] != "sqlite" || health["version"] == "" || health["version"] == nil {
		t.Errorf("/healthz = %d %v, want the version and store sqlite", status, health)
	}
	status, first := call(t, p, "POST", "/v1/before-write", "", `{"key":"k1","payload":{"a":1}}`)
	if status != 200 || first["decision"] != "proceed" {
		t.Fatalf("before-write: %d %v", status, first)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if !strings.Contains(p.err.String(), "companion stopped") {
		t.Errorf("no stop line:\n%s", p.err)
	}
	if _, err := http.Get("http://" + p.Addr() + "/healthz"); err == nil {
		t.Errorf("the service still answers after Close")
	}

	again := start(t, env)
	status, replay := call(t, again, "POST", "/v1/before-write", "", `{"key":"k1","payload":{"a":1}}`)
	if status != 200 || replay["decision"] != "skip" || replay["reason"] != "in_progress" || replay["idempotency_key"] != first["idempotency_key"] {
		t.Fatalf("replay after restart: %d %v", status, replay)
	}
}

func TestFlagsWinOverEnvironment(t *testing.T) {
	envDir, flagDir := filepath.Join(t.TempDir(), "env"), filepath.Join(t.TempDir(), "flag")
	p := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:1", "COMPANION_DATA_DIR": envDir}, "--addr", "127.0.0.1:0", "--data-dir", flagDir)
	if p.Addr() == "127.0.0.1:1" {
		t.Fatalf("listening on the environment's address")
	}
	if _, err := os.Stat(filepath.Join(flagDir, "companion.db")); err != nil {
		t.Fatalf("the ledger is not in the flag's data dir: %v", err)
	}
	if _, err := os.Stat(envDir); err == nil {
		t.Fatalf("the environment's data dir was created")
	}
}

func TestRefusesNonLoopbackWithoutTokens(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:0", "example.com:0"} {
		p := newProgram(map[string]string{"COMPANION_DATA_DIR": t.TempDir()})
		err := p.Run(context.Background(), []string{"serve", "--addr", addr})
		if err == nil {
			p.Close()
			t.Fatalf("%s: started without tokens", addr)
		}
		if !strings.Contains(err.Error(), "refusing to listen on "+addr+" without tokens") ||
			!strings.Contains(err.Error(), "COMPANION_TOKENS_FILE=/run/secrets/companion_tokens (a Docker or Kubernetes secret)") ||
			!strings.Contains(err.Error(), "e.g. n8n:default:workflow:SECRET1,ops:default:operator:SECRET2 with secrets of 16 characters or more") {
			t.Errorf("%s: %v", addr, err)
		}
		if cli.ExitCode(err) != 1 {
			t.Errorf("%s: exit code %d", addr, cli.ExitCode(err))
		}
	}
	// The image's setting: COMPANION_ADDR on every interface, no tokens given. It stops; it never binds
	// loopback instead, where nothing outside the container could reach it.
	p := newProgram(map[string]string{"COMPANION_DATA_DIR": t.TempDir(), "COMPANION_ADDR": "0.0.0.0:0"})
	if err := p.Run(context.Background(), []string{"serve"}); err == nil || !strings.Contains(err.Error(), "COMPANION_TOKENS_FILE") {
		p.Close()
		t.Errorf("COMPANION_ADDR=0.0.0.0:0 without tokens: %v", err)
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0"} {
		p := newProgram(map[string]string{"COMPANION_DATA_DIR": t.TempDir()})
		err := p.Run(context.Background(), []string{"serve", "--addr", addr})
		if err != nil && strings.Contains(err.Error(), "refusing") {
			t.Errorf("%s refused: %v", addr, err)
		}
		p.Close()
	}
}

func TestTokensFromEnvironmentFilesAndConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cfg := write("companion.yaml", `
tokens:
  - name: ops
    tenant: acme
    role: operator
    secret_env: OPS_SECRET
  - name: make
    tenant: acme
    role: workflow
    secret_file: `+write("make.secret", "make-secret-0123456\n")+`
  - name: n8n-globex
    tenant: globex
    role: workflow
    secret_env: GLOBEX_SECRET
`)
	env := map[string]string{
		"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": filepath.Join(dir, "data"), "COMPANION_CONFIG": cfg,
		"COMPANION_TOKENS_FILE": write("tokens", "n8n:acme:workflow:n8n-secret-01234567\n"),
		"OPS_SECRET":            "ops-secret-01234567",
		"GLOBEX_SECRET_FILE":    write("globex.secret", "globex-secret-0123"),
	}
	p := start(t, env)
	if !strings.Contains(p.err.String(), "auth on (4 token(s): n8n (acme, workflow), ops (acme, operator), make (acme, workflow), n8n-globex (globex, workflow))") {
		t.Errorf("start line: %s", p.err)
	}
	for i, secret := range []string{"n8n-secret-01234567", "make-secret-0123456", "ops-secret-01234567", "globex-secret-0123"} {
		if status, body := call(t, p, "POST", "/v1/before-write", secret, fmt.Sprintf(`{"key":"k-%d","payload":{}}`, i)); status != 200 {
			t.Errorf("token %s: %d %v", secret, status, body)
		}
	}
	if status, _ := call(t, p, "POST", "/v1/before-write", "", `{"key":"k","payload":{}}`); status != 401 {
		t.Errorf("no token: %d", status)
	}
	if status, _ := call(t, p, "POST", "/v1/items/k-1/resolve", "make-secret-0123456", `{"outcome":"succeeded","evidence":"seen in the destination"}`); status != 403 {
		t.Errorf("workflow token on resolve: %d", status)
	}
	if status, _ := call(t, p, "GET", "/v1/items/k-1", "globex-secret-0123", ""); status != 404 {
		t.Errorf("globex reads acme's item: %d", status)
	}
	if strings.Contains(p.err.String(), "-secret") {
		t.Errorf("the log shows a secret:\n%s", p.err)
	}
}

func TestConfigReachesTheLedger(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "companion.yaml")
	if err := os.WriteFile(cfg, []byte(`
defaults:
  lease_seconds: 60
destinations:
  billing:
    dedupe: key
    max_attempts: 2
    server_errors_not_committed: true
    escalate_after: 30m
    owner: U024BE7LH
`), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, map[string]string{"COMPANION_DATA_DIR": filepath.Join(dir, "data")}, "--addr", "127.0.0.1:0", "--config", cfg)
	if want := "config " + cfg + " (destinations billing)"; !strings.Contains(p.err.String(), want) {
		t.Errorf("the start line does not say %q:\n%s", want, p.err)
	}

	_, billing := call(t, p, "POST", "/v1/before-write", "", `{"key":"b1","payload":{},"destination":"billing"}`)
	_, other := call(t, p, "POST", "/v1/before-write", "", `{"key":"o1","payload":{}}`)
	if billing["lease_expires_at"] == other["lease_expires_at"] && billing["lease_expires_at"] == nil {
		t.Fatalf("no leases: %v %v", billing, other)
	}
	_, bItem := call(t, p, "GET", "/v1/items/b1", "", "")
	_, oItem := call(t, p, "GET", "/v1/items/o1", "", "")
	if bItem["dedupe"] != "key" || oItem["dedupe"] != "none" {
		t.Fatalf("dedupe recorded: billing %v, default %v", bItem["dedupe"], oItem["dedupe"])
	}
	_, bRep := call(t, p, "POST", "/v1/after-write", "", `{"key":"b1","claim":"`+billing["claim"].(string)+`","outcome":"failed","http_status":500}`)
	_, oRep := call(t, p, "POST", "/v1/after-write", "", `{"key":"o1","claim":"`+other["claim"].(string)+`","outcome":"failed","http_status":500}`)
	if bRep["state"] != "failed" || oRep["state"] != "unknown" {
		t.Fatalf("a 500 under the stronger contract: %v; under the default: %v", bRep["state"], oRep["state"])
	}
}

// TestStartLineNamesTheConfigByItsAbsolutePath: a config file given relative to the working directory
// (--config companion.yaml, or COMPANION_CONFIG) is named by its absolute path in the start line's
// message and in its config field alike.
func TestStartLineNamesTheConfigByItsAbsolutePath(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "companion.yaml"), []byte("destinations:\n  billing:\n    dedupe: key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(wd, "companion.yaml")
	for name, c := range map[string]struct {
		env  map[string]string
		args []string
	}{
		"--config":         {map[string]string{"COMPANION_DATA_DIR": filepath.Join(dir, "data-flag")}, []string{"--config", "companion.yaml"}},
		"COMPANION_CONFIG": {map[string]string{"COMPANION_DATA_DIR": filepath.Join(dir, "data-env"), "COMPANION_CONFIG": "./companion.yaml"}, nil},
	} {
		p := start(t, c.env, append([]string{"--addr", "127.0.0.1:0"}, c.args...)...)
		var line struct {
			Msg    string `json:"msg"`
			Config string `json:"config"`
		}
		for _, l := range strings.Split(p.err.String(), "\n") {
			if strings.Contains(l, "serving on") && json.Unmarshal([]byte(l), &line) != nil {
				t.Fatalf("%s: the start line is not JSON: %s", name, l)
			}
		}
		if line.Config != want || !strings.Contains(line.Msg, "config "+want+" (destinations billing)") {
			t.Errorf("%s: the start line's config field is %q and its message %q; want both to name %s", name, line.Config, line.Msg, want)
		}
		p.Close()
	}
}

// startWithBadConfig writes yaml as the config file in a new directory and runs serve with it (and env);
// the config must stop the start. It returns the directory (whose data/ is the ledger's), the config
// file's path and the error.
func startWithBadConfig(t *testing.T, yaml string, env map[string]string) (dir, cfg string, err error) {
	t.Helper()
	dir = t.TempDir()
	cfg = filepath.Join(dir, "companion.yaml")
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"COMPANION_CONFIG": cfg, "COMPANION_DATA_DIR": filepath.Join(dir, "data")}
	maps.Copy(vars, env)
	p := newProgram(vars)
	if err = p.Run(context.Background(), []string{"--addr", "127.0.0.1:0"}); err == nil {
		p.Close()
		t.Fatalf("started with a bad config")
	}
	return dir, cfg, err
}

func TestBadConfigStopsTheStartNamingLineAndField(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown field", "destinations:\n  billing:\n    dedup: key\n", []string{"line 3: destinations.billing.dedup: unknown field (did you mean dedupe?)"}},
		// The example, on line 14 of a longer file.
		{"typo of max_attempts", "defaults:\n  dedupe: none\n" + strings.Repeat("# a comment\n", 7) +
			"destinations:\n  crm:\n    dedupe: lookup\n  billing:\n    max_attempt: 5\n",
			[]string{"line 14: destinations.billing.max_attempt: unknown field (did you mean max_attempts?)"}},
		{"unknown section", "defaults:\n  dedupe: key\nslack: {}\n", []string{"line 3: slack: unknown field (known here: defaults, destinations, tokens, alerts, public_url, max_clock_skew, series, allowed_hosts, trusted_proxies, tenants)"}},
		{"typo in a token", "tokens:\n  - name: a\n    tenant: acme\n    role: workflow\n    secret_evn: X\n", []string{"line 5: tokens[0].secret_evn: unknown field (did you mean secret_env?)"}},
		{"typo in a route", "alerts:\n  routes:\n    - workflow: a*\n      ownr: U1\n", []string{"line 4: alerts.routes[0].ownr: unknown field (did you mean owner?)"}},
		{"typo under defaults", "defaults:\n  lease_second: 60\n", []string{"line 2: defaults.lease_second: unknown field (did you mean lease_seconds?)"}},
		{"bad dedupe word", "destinations:\n  billing:\n    dedupe: maybe\n", []string{"line 3", "destinations.billing.dedupe", `"maybe" is not one of key, lookup, none`}},
		{"wrong type", "destinations:\n  billing:\n    max_attempts: many\n", []string{"line 3", "destinations.billing.max_attempts", "whole number"}},
		{"lease out of range", "defaults:\n  lease_seconds: 2\n", []string{"line 2", "defaults.lease_seconds", "5-86400"}},
		{"no attempts", "defaults:\n\n  max_attempts: 0\n", []string{"line 3", "defaults.max_attempts"}},
		{"bad duration", "destinations:\n  crm:\n    escalate_after: soon\n", []string{"line 3", "destinations.crm.escalate_after"}},
		{"bad clock skew", "defaults:\n  dedupe: key\nmax_clock_skew: soon\n", []string{"line 3", "max_clock_skew", "duration"}},
		{"negative clock skew", "max_clock_skew: -1s\n", []string{"line 1", "max_clock_skew", "must not be negative"}},
		{"series hours too short", "series:\n  hours_kept: 24h\n", []string{"line 2", "series.hours_kept", "must be at least 48h: the console's charts show the last 48 hours"}},
		{"series days too short", "series:\n  days_kept: 7d\n", []string{"line 2", "series.days_kept", "write 168h"}},
		{"series typo", "series:\n  hour_kept: 840h\n", []string{"line 2", "series.hour_kept: unknown field (did you mean hours_kept?)"}},
		{"flag as text", "destinations:\n  crm:\n    server_errors_not_committed: yes please\n", []string{"line 3", "server_errors_not_committed", "true or false"}},
		{"inline secret", "tokens:\n  - name: a\n    tenant: acme\n    role: workflow\n    secret: hunter2\n", []string{"line 5", "tokens[0].secret", "secret_env"}},
		{"unset secret env", "tokens:\n  - name: a\n    tenant: acme\n    role: workflow\n    secret_env: NOT_SET\n", []string{"line 5", "tokens[0].secret_env", "NOT_SET"}},
		{"bad role", "tokens:\n  - name: a\n    tenant: acme\n    role: admin\n    secret_env: HOME_SECRET\n", []string{"line 4", "tokens[0].role", `"admin" is not one of workflow, operator`}},
		{"malformed YAML", "destinations:\n  billing:\n   dedupe: key\n  - x\n", []string{"line"}},
		// One start names every problem of the file, in line order: an unknown field does not hide the
		// others (docs/configuration.md shows both lines of such a file).
		{"unknown field and bad value together", "defaults:\n  max_attempt: 3\ndestinations:\n  billing:\n    dedupe: maybe\n",
			[]string{"line 2: defaults.max_attempt: unknown field (did you mean max_attempts?)\n  line 5: destinations.billing.dedupe: \"maybe\" is not one of key, lookup, none"}},
		{"bad value before an unknown field", "destinations:\n  billing:\n    dedupe: maybe\n    max_attempt: 3\n",
			[]string{"line 3: destinations.billing.dedupe: \"maybe\" is not one of key, lookup, none\n  line 4: destinations.billing.max_attempt: unknown field"}},
		// The YAML parser's own words get the likely cause.
		{"tab indent", "defaults:\n\tdedupe: key\n", []string{"line 2", "line 2 holds a tab: YAML indents with spaces only"}},
		{"indentation", "defaults:\n  dedupe: key\n   max_attempts: 3\n", []string{"line 3", "check this line's indentation"}},
		// The parser names the line its unfinished block began on, lines above the culprit: the hint names the culprit.
		{"dedent to no level", "defaults:\n  dedupe: key\n destinations:\n  billing:\n    dedupe: key\n",
			[]string{"line 2: did not find expected key (line 3 is indented by 1 space, which matches no level above it: indent it as the other lines of its level)"}},
		{"dedent inside a destination", "destinations:\n  billing:\n    dedupe: key\n   owner: U1\n",
			[]string{"line 1: did not find expected key (line 4 is indented by 3 spaces, which matches no level above it"}},
		{"list item's key misindented", "tokens:\n  - name: a\n   tenant: b\n", []string{"line 3 is indented by 3 spaces"}},
		{"colon in a value", "destinations:\n  billing:\n    check_hint: search: the billing tool\n", []string{"line 3", `a value that holds ": " needs quotes`}},
		{"unclosed quote", "defaults:\n  check_hint: \"search billing\n", []string{"line", "a quote opened and never closed?"}},
		{"destinations as a list", "destinations:\n  - billing\n", []string{"line 2"}},
		{"retention shorter than key retention", "defaults:\n  key_retention_seconds: 604800\ndestinations:\n  crm:\n    retention: 72h\n",
			[]string{"line 5", "destinations.crm.retention", "shorter than key_retention_seconds 604800", "; give a retention of 168h or more"}},
		{"retention in days", "defaults:\n  retention: 30d\n", []string{"line 2", "defaults.retention", `not "30d" (a duration has no days: write 720h)`}},
		{"retention not positive", "defaults:\n  retention: 0s\n", []string{"line 2", "defaults.retention", "positive"}},
		{"contract undone", "defaults:\n  server_errors_not_committed: true\ndestinations:\n  crm:\n    server_errors_not_committed: false\n",
			[]string{"line 5", "destinations.crm.server_errors_not_committed", "cannot override"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, cfg, err := startWithBadConfig(t, tc.yaml, map[string]string{"HOME_SECRET": "x"})
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if !strings.Contains(err.Error(), cfg) {
				t.Errorf("error does not name the file: %v", err)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error shows the secret: %v", err)
			}
			if _, statErr := os.Stat(filepath.Join(dir, "data")); statErr == nil {
				t.Errorf("the ledger was opened before the config was checked")
			}
		})
	}
}

// A retention refused as not positive is named once, not also as shorter than the key retention, whether
// a destination gives it or inherits it from defaults; a destination with a retention of its own that is
// too short is still named.
func TestBadRetentionIsNamedOnce(t *testing.T) {
	_, cfg, err := startWithBadConfig(t, "defaults:\n  retention: -1s\ndestinations:\n  a:\n    owner: U1\n  b:\n    retention: -5s\n  c:\n    retention: 2h\n", nil)
	want := "config " + cfg + ":\n" +
		"  line 2: defaults.retention: must be positive\n" +
		"  line 7: destinations.b.retention: must be positive\n" +
		"  line 9: destinations.c.retention: retention 2h0m0s is shorter than key_retention_seconds 86400: an item would be forgotten while a replay of it may still come; give a retention of 24h or more"
	if err == nil || err.Error() != want {
		t.Errorf("got:\n%v\nwant:\n%s", err, want)
	}
}

// A configuration file that is not there (a relative path from another directory, a typo) stops the start
// naming it by its absolute path and saying what to do, before anything is created; so does a directory.
func TestMissingConfigFileSaysWhatToDo(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, c := range []struct{ config, want string }{
		{"companion.yml", "config companion.yml (" + filepath.Join(dir, "companion.yml") + "): no such file; give the path of your YAML file with --config or COMPANION_CONFIG (docs/configuration.md), or leave both out to run every destination on the defaults"},
		{dir, "config " + dir + ": is a directory; give the YAML file in it with --config or COMPANION_CONFIG"},
	} {
		for _, viaEnv := range []bool{false, true} {
			env := map[string]string{"COMPANION_DATA_DIR": filepath.Join(dir, "data")}
			args := []string{"serve", "--addr", "127.0.0.1:0"}
			if viaEnv {
				env["COMPANION_CONFIG"] = c.config
			} else {
				args = append(args, "--config", c.config)
			}
			p := newProgram(env)
			err := p.Run(context.Background(), args)
			p.Close()
			if err == nil || err.Error() != c.want || cli.ExitCode(err) != 1 {
				t.Errorf("%v (COMPANION_CONFIG %v): %v (exit %d); want %q", args, viaEnv, err, cli.ExitCode(err), c.want)
			}
			if _, statErr := os.Stat(filepath.Join(dir, "data")); statErr == nil {
				t.Fatalf("the data dir was created before the config was read")
			}
		}
	}
}

// A port already taken (another companion serve, most likely) says so and names the flag to change. The
// start stops before it opens the ledger: no data dir, no companion.lock left behind.
func TestAddressInUseSaysWhatToDo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	dataDir := filepath.Join(t.TempDir(), "data")
	p := newProgram(map[string]string{"COMPANION_DATA_DIR": dataDir})
	err = p.Run(context.Background(), []string{"serve", "--addr", addr})
	if err == nil {
		p.Close()
		t.Fatal("started on an address in use")
	}
	if _, statErr := os.Stat(dataDir); statErr == nil {
		t.Errorf("a start stopped by a taken port created the data dir %s", dataDir)
	}
	_, port, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(port)
	for _, want := range []string{"cannot listen on " + addr + ": the address is already in use", "--addr (COMPANION_ADDR)",
		"--addr 127.0.0.1:" + strconv.Itoa(n+1)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

// An --addr that is not host:port says what it most likely meant.
func TestMalformedAddrSuggestsHostPort(t *testing.T) {
	for addr, want := range map[string]string{"8080": "--addr 127.0.0.1:8080", "localhost": "--addr localhost:8080",
		"http://127.0.0.1:8080": "--addr 127.0.0.1:8080", "http://localhost:9000/": "--addr localhost:9000"} {
		p := newProgram(map[string]string{"COMPANION_DATA_DIR": t.TempDir()})
		err := p.Run(context.Background(), []string{"serve", "--addr", addr})
		if err == nil {
			p.Close()
			t.Fatalf("started on --addr %s", addr)
		}
		if !strings.Contains(err.Error(), "give host:port, e.g. "+want) {
			t.Errorf("--addr %s: %v; want the suggestion %q", addr, err, want)
		}
	}
}

// A data dir that is a file, not a directory, is named as such (not as a failed mkdir or SQLite error).
func TestDataDirThatIsAFileSaysSo(t *testing.T) {
	file := filepath.Join(t.TempDir(), "companion-data")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p := newProgram(nil)
	err := p.Run(context.Background(), []string{"--addr", "127.0.0.1:0", "--data-dir", file})
	if err == nil {
		p.Close()
		t.Fatal("started on a data dir that is a file")
	}
	for _, want := range []string{"cannot open the ledger in data dir " + file + ": it is a file, not a directory", "--data-dir (COMPANION_DATA_DIR)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "write access") {
		t.Errorf("error advises write access, which does not turn a file into a directory: %v", err)
	}
}

func TestUnusableDataDirStopsTheStart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p := newProgram(nil)
	err := p.Run(context.Background(), []string{"--addr", "127.0.0.1:0", "--data-dir", filepath.Join(file, "data")})
	if err == nil {
		p.Close()
		t.Fatal("started on a data dir inside a file")
	}
	// It names the file on the path, and no store internals ("sqlitestore: data dir: mkdir …").
	if want := "cannot open the ledger in data dir " + filepath.Join(file, "data") + ": " + file + ", on its path, is a file, not a directory; " +
		"choose another directory with --data-dir (COMPANION_DATA_DIR)"; err.Error() != want {
		t.Fatalf("error:\n%v\nwant\n%s", err, want)
	}
}

// runOnce runs the program with args to its end and returns what it printed to stdout.
func runOnce(args ...string) (string, error) {
	p := newProgram(nil)
	err := p.Run(context.Background(), args)
	p.Close()
	return p.out.String(), err
}

func TestHelpVersionAndUsageMistakes(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		out, err := runOnce(args...)
		if err != nil || !strings.Contains(out, "serve") || !strings.Contains(out, "version") || !strings.Contains(out, "before-write") {
			t.Errorf("%v: %v\n%s", args, err, out)
		}
	}
	for _, args := range [][]string{{"serve", "--help"}, {"help", "serve"}, {"serve", "-h"}} {
		out, err := runOnce(args...)
		if err != nil || !strings.Contains(out, "COMPANION_ADDR") || !strings.Contains(out, "COMPANION_DATA_DIR") || !strings.Contains(out, "COMPANION_CONFIG") {
			t.Errorf("%v: %v\n%s", args, err, out)
		}
	}
	if out, err := runOnce("version", "--help"); err != nil || !strings.Contains(out, "usage: companion version") {
		t.Errorf("version --help: %v\n%s", err, out)
	}
	if out, err := runOnce("version"); err != nil || !strings.HasPrefix(out, "companion ") {
		t.Errorf("version: %v %q", err, out)
	}
	for _, args := range [][]string{{"frobnicate"}, {"serve", "--nope"}, {"version", "extra"}, {"--addr", "no-port"}, {"help", "frobnicate"}} {
		if _, err := runOnce(args...); cli.ExitCode(err) != 2 {
			t.Errorf("%v: exit code %d (%v), want 2", args, cli.ExitCode(err), err)
		}
	}
	// A mistyped flag is named with the flag it most likely meant.
	for args, want := range map[string]string{
		"serve --adr 127.0.0.1:0":  `serve: unknown flag --adr (did you mean --addr? run "companion serve --help")`,
		"serve --data_dir x":       `serve: unknown flag --data_dir (did you mean --data-dir?`,
		"items list --need-person": `items list: unknown flag --need-person (did you mean --needs-person?`,
		"serve --frobnicate":       `serve: unknown flag --frobnicate (run "companion serve --help" for its flags)`,
		// The flag other servers listen by: --addr takes host and port together.
		"serve --port 8081":    `serve: unknown flag --port (did you mean --addr? it takes host:port, such as --addr 127.0.0.1:8080;`,
		"serve --listen x":     `serve: unknown flag --listen (did you mean --addr? it takes host:port`,
		"healthcheck --port 1": `healthcheck: unknown flag --port (did you mean --addr?`,
		"items list --port 1":  `items list: unknown flag --port (run "companion items list --help" for its flags)`,
		// Two neighbouring letters swapped: two edits apart, too far for a short name, but what was meant.
		"bench --itmes 5":          `bench: unknown flag --itmes (did you mean --items? run "companion bench --help")`,
		"stats --josn":             `stats: unknown flag --josn (did you mean --json?`,
		"templates render --otu x": `templates render: unknown flag --otu (did you mean --out?`,
		"items lst":                `items: unknown subcommand "lst" (did you mean list? run "companion items --help")`,
		"items sohw k":             `items: unknown subcommand "sohw" (did you mean show?`,
		"items frobnicate":         `items: unknown subcommand "frobnicate"; use list, show or resolve`,
		// A value a flag cannot take says what it must be, with the flag as it is written.
		"items list --limit x":                  `items list: --limit "x" is not a whole number (run "companion items list --help")`,
		"serve --metrics-open=yes":              `serve: --metrics-open "yes" is not true or false (--metrics-open alone is true; --metrics-open=false)`,
		"items list --needs-person=maybe":       `items list: --needs-person "maybe" is not true or false`,
		"items list --state":                    `items list: --state needs a value (--state VALUE or --state=VALUE)`,
		"templates render --write-timeout-ms x": `templates render: --write-timeout-ms "x" is not a value it takes`,
		"templates render --force=maybe":        `templates render: --force "maybe" is not true or false`,
	} {
		_, err := runOnce(strings.Fields(args)...)
		if err == nil || !strings.Contains(err.Error(), want) || cli.ExitCode(err) != 2 {
			t.Errorf("%s: %v (exit %d); want %q", args, err, cli.ExitCode(err), want)
		}
	}
}

// "companion help items list" prints what "companion items list --help" prints, flags included: README
// says help shows one command's flags, and a subcommand's are where they are (the group's help has none).
func TestHelpOfASubcommandIsItsOwnHelp(t *testing.T) {
	for _, sub := range [][]string{{"items", "list"}, {"items", "resolve"}, {"templates", "render"}, {"slack", "manifest"}} {
		want, err := runOnce(append(slices.Clone(sub), "--help")...)
		if err != nil || !strings.Contains(want, "\nflags:\n") {
			t.Fatalf("%v --help: %v\n%s", sub, err, want)
		}
		if got, err := runOnce(append([]string{"help"}, sub...)...); err != nil || got != want {
			t.Errorf("help %v: %v\n%s\nwant what %v --help prints:\n%s", sub, err, got, sub, want)
		}
	}
	if _, err := runOnce("help", "items", "lsit"); cli.ExitCode(err) != 2 {
		t.Errorf("help items lsit: %v (exit %d), want a usage mistake", err, cli.ExitCode(err))
	}
}

func TestTokenMistakesStopTheStart(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens")
	if err := os.WriteFile(file, []byte("ops:acme:operator:SECRETVALUE-0001\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokenConfig := filepath.Join(dir, "companion.yaml")
	if err := os.WriteFile(tokenConfig, []byte("tokens:\n  - {name: a, tenant: acme, role: workflow, secret_env: A_SECRET}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		env  map[string]string
		want string
	}{
		"both sources":        {map[string]string{"COMPANION_TOKENS": "a:acme:workflow:SECRETVALUE-0003", "COMPANION_TOKENS_FILE": file}, "not both"},
		"missing part":        {map[string]string{"COMPANION_TOKENS": "a:acme:SECRETVALUE-0001"}, "COMPANION_TOKENS: token 1"},
		"unknown role":        {map[string]string{"COMPANION_TOKENS": "a:acme:admin:SECRETVALUE-0001"}, `role "admin"`},
		"shared secret":       {map[string]string{"COMPANION_TOKENS": "a:acme:workflow:SECRETVALUE-0001,b:acme:operator:SECRETVALUE-0001"}, "the same as token a's"},
		"missing tokens file": {map[string]string{"COMPANION_TOKENS_FILE": filepath.Join(dir, "nope")}, "COMPANION_TOKENS_FILE"},
		// The example: a ';'-separated list read as one token, whose secret then matched nothing.
		"semicolon list": {map[string]string{"COMPANION_TOKENS": "a:acme:workflow:SECRETVALUE-0001;b:acme:operator:SECRETVALUE-0002"},
			"COMPANION_TOKENS: token 1 (a): the secret holds a ';': separate tokens with commas or newlines"},
		"short secret": {map[string]string{"COMPANION_TOKENS": "a:acme:workflow:SECRETVALUE"}, "shorter than 16 characters"},
		"config token with a space": {map[string]string{"COMPANION_CONFIG": tokenConfig, "A_SECRET": "SECRETVALUE-0001 SECRETVALUE-0002"},
			"tokens[0]: token 1 (a): the secret holds whitespace"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tc.env["COMPANION_DATA_DIR"] = filepath.Join(t.TempDir(), "data")
			p := newProgram(tc.env)
			err := p.Run(context.Background(), []string{"--addr", "127.0.0.1:0"})
			if err == nil {
				p.Close()
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "SECRETVALUE") {
				t.Fatalf("error: %v", err)
			}
		})
	}
}

// gcPercent reads the collector's target (GOGC) without changing it.
func gcPercent() int {
	old := debug.SetGCPercent(100)
	debug.SetGCPercent(old)
	return old
}

// TestServeRunsTheCollectorAtGCPercentUnlessGOGCIsSet: serve raises GOGC to handlers.GCPercent, and
// leaves the collector alone when the environment sets GOGC (the runtime applied it at start).
func TestServeRunsTheCollectorAtGCPercentUnlessGOGCIsSet(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": t.TempDir(), "GOGC": "150"})
	if got := gcPercent(); got != 100 {
		t.Errorf("with GOGC set, serve changed the collector's target to %d", got)
	}
	start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": t.TempDir()})
	if got := gcPercent(); got != handlers.GCPercent {
		t.Errorf("without GOGC the collector's target is %d, want %d", got, handlers.GCPercent)
	}
}

// TestEveryCommandHasHelpAndVersion runs --help, -h, "help <command>" and --version on every command the
// program's help lists, and on the subcommands: each exits 0 and prints a usage line with a written
// description to standard output, or the version.
func TestEveryCommandHasHelpAndVersion(t *testing.T) {
	run := func(args ...string) (string, string, error) {
		p := newProgram(map[string]string{"COMPANION_DATA_DIR": filepath.Join(t.TempDir(), "never-created")})
		err := p.Run(context.Background(), args)
		p.Close()
		return p.out.String(), p.err.String(), err
	}
	help, _, err := run("help")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	_, list, _ := strings.Cut(help, "commands:\n")
	for line := range strings.Lines(list) {
		if !strings.HasPrefix(line, "  ") {
			break
		}
		names = append(names, strings.Fields(line)[0])
	}
	if len(names) < 9 {
		t.Fatalf("the help lists %d commands: %v", len(names), names)
	}
	invocations := [][]string{{"items", "list"}, {"items", "show"}, {"items", "resolve"}, {"templates", "render"}, {"slack", "manifest"}}
	for _, name := range names {
		invocations = append(invocations, []string{name}, []string{"help", name})
	}
	for _, cmd := range invocations {
		variants := [][]string{cmd}
		if cmd[0] != "help" {
			variants = [][]string{append(slices.Clone(cmd), "--help"), append(slices.Clone(cmd), "-h")}
		}
		for _, args := range variants {
			if len(args) == 1 && args[0] == "serve" || args[0] == "help" && len(args) == 1 {
				continue
			}
			out, errOut, err := run(args...)
			switch {
			case err != nil:
				t.Errorf("%v: %v (exit %d)", args, err, cli.ExitCode(err))
			case !strings.Contains(strings.ToLower(out), "usage: companion "+strings.ToLower(strings.Join(slices.DeleteFunc(slices.Clone(args), func(a string) bool {
				return a == "help" || strings.HasPrefix(a, "-")
			}), " "))):
				t.Errorf("%v: no usage line on stdout:\n%s\nstderr:\n%s", args, out, errOut)
			case len(strings.Fields(out)) < 12:
				t.Errorf("%v: no written description:\n%s", args, out)
			}
		}
		if cmd[0] == "help" || cmd[0] == "version" {
			continue
		}
		out, _, err := run(append(slices.Clone(cmd), "--version")...)
		if err != nil || !strings.HasPrefix(out, "companion ") || strings.Count(out, "\n") != 1 {
			t.Errorf("%v --version: %v %q", cmd, err, out)
		}
	}
	if out, _, err := run("--version"); err != nil || !strings.HasPrefix(out, "companion ") {
		t.Errorf("--version: %v %q", err, out)
	}
}

// A second serve on the data dir of a running one stops at its start, naming the process that holds the
// ledger, and starts once the first has stopped.
func TestSecondServeOnOneDataDirStops(t *testing.T) {
	dir := t.TempDir()
	first := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": dir, "COMPANION_SWEEP_EVERY": "@every 1h"})
	p := newProgram(nil)
	err := p.Run(context.Background(), []string{"--addr", "127.0.0.1:0", "--data-dir", dir, "--sweep-every", "@every 1h"})
	if err == nil {
		p.Close()
		t.Fatal("a second serve started on the data dir of a running one")
	}
	// As docs/deploying.md shows it: without the store's package name.
	for _, want := range []string{"cannot open the ledger in data dir " + dir + ": the ledger is open in another process",
		fmt.Sprintf("pid %d holds", os.Getpid()), "stop that one first"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	// sweep --once beside a running serve (docs/operators.md lists it among the CLI's commands) says
	// that serve sweeps the ledger itself.
	sw := newProgram(nil)
	err = sw.Run(context.Background(), []string{"sweep", "--once", "--data-dir", dir})
	sw.Close()
	for _, want := range []string{"the ledger is open in another process", "If that is companion serve: it sweeps this ledger itself",
		"sweep --once is not needed beside it"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("sweep --once beside serve: the error lacks %q: %v", want, err)
		}
	}
	first.Close()
	again := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": dir, "COMPANION_SWEEP_EVERY": "@every 1h"})
	again.Close()
}
