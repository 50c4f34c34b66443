package acceptance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/replaysafe/companion/acceptance"
	"github.com/replaysafe/companion/cmd/companion/cli"
	"github.com/replaysafe/companion/sandbox"
)

// runSuite runs the suite against p and returns the result and what a user would read: the progress
// lines and the table.
func runSuite(t *testing.T, p *acceptance.InProcess, opts acceptance.Options) (*acceptance.Result, string) {
	t.Helper()
	svc, err := acceptance.NewService(p.ServiceURL, "", "")
	if err != nil {
		t.Fatal(err)
	}
	// A call is bounded by a minute, not the real client's 10 s: on the FerretDB test server under the race
	// detector a batch call of case 8 takes several seconds (the case 15-17 s in all), and past 10 s when
	// the machine slows (CI on a throttled VM, 2026-12-01 21:20 UTC). What the cases check is the ledger,
	// not the service's speed.
	svc.WithTimeout(time.Minute)
	rcv, err := acceptance.NewReceiver(p.ReceiverURL)
	if err != nil {
		t.Fatal(err)
	}
	opts.Service, opts.Receiver, opts.Store, opts.ServiceVersion = svc, rcv, p.Store, p.Version
	var out bytes.Buffer
	opts.Progress = &out
	res, err := acceptance.Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	acceptance.WriteTable(&out, res)
	return res, out.String()
}

func startInProcess(t *testing.T, cfg acceptance.InProcessConfig) *acceptance.InProcess {
	t.Helper()
	p, err := acceptance.StartInProcess(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return p
}

func caseResult(t *testing.T, res *acceptance.Result, id string) acceptance.CaseResult {
	t.Helper()
	for _, c := range res.Cases {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("no case %s in the result", id)
	return acceptance.CaseResult{}
}

func TestSuitePassesOnSQLite(t *testing.T) {
	t.Parallel()
	p := startInProcess(t, acceptance.InProcessConfig{})
	res, table := runSuite(t, p, acceptance.Options{})
	if res.Failed > 0 || res.Passed != len(acceptance.Cases()) {
		t.Fatalf("%d passed, %d failed, %d skipped; want all %d passed:\n%s", res.Passed, res.Failed, res.Skipped, len(acceptance.Cases()), table)
	}
	for _, c := range res.Cases {
		var ledger, effects bool
		for _, ch := range c.Checks {
			ledger = ledger || ch.Side == "ledger"
			effects = effects || ch.Side == "effects"
		}
		if !ledger || !effects {
			t.Errorf("case %s passed without asserting both sides (ledger %t, effects %t)", c.ID, ledger, effects)
		}
	}
	t.Logf("suite on SQLite: %d cases in %.1f s", len(res.Cases), res.Duration)
}

// A ledger configured against the truth about its destination must make the suite fail, loudly and with
// the duplicate the misconfiguration causes, not silently pass. Each misconfiguration is one a user can
// make in the service's YAML or in their choice of receiver.
func TestMisconfiguredLedgerFailsTheSuite(t *testing.T) {
	t.Parallel()
	with := func(name string, change func(*acceptance.DestinationSpec)) []acceptance.DestinationSpec {
		specs := acceptance.Destinations()
		for i := range specs {
			if specs[i].Name == name {
				change(&specs[i])
			}
		}
		return specs
	}
	tests := []struct {
		name         string
		cfg          acceptance.InProcessConfig
		failing      string
		wantEffects  string
		wantInReason string
	}{
		{
			name:         "destination says key, receiver ignores keys",
			cfg:          acceptance.InProcessConfig{Receiver: sandbox.Config{Dedupe: sandbox.DedupeNone}},
			failing:      "5",
			wantEffects:  "1 → 2",
			wantInReason: "effects expected 1, observed 2",
		},
		{
			name: "server_errors_not_committed for a receiver that commits then answers 500",
			cfg: acceptance.InProcessConfig{Destinations: with(acceptance.DestinationLookup, func(d *acceptance.DestinationSpec) {
				d.ServerErrorsNotCommitted = true
			})},
			failing:      "17",
			wantEffects:  "1 → 2",
			wantInReason: "effects expected 1, observed 2",
		},
		{
			name: "ledger trusts keys longer than the receiver keeps them",
			cfg: acceptance.InProcessConfig{Destinations: with(acceptance.DestinationRetention, func(d *acceptance.DestinationSpec) {
				d.KeyRetentionSeconds = 3600
			})},
			failing:      "20",
			wantEffects:  "1 → 2",
			wantInReason: "expected skip/awaiting_owner, observed proceed/retry_same_key",
		},
		{
			name: "destination without dedupe configured as key",
			cfg: acceptance.InProcessConfig{Destinations: with(acceptance.DestinationNone, func(d *acceptance.DestinationSpec) {
				d.Dedupe = "key"
			})},
			failing:      "12",
			wantEffects:  "1 → 2",
			wantInReason: "effects expected 1, observed 2",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := startInProcess(t, tt.cfg)
			// The check of the destinations before the cases would refuse the dedupe misconfigured here
			// (TestSuiteRefusesAServiceWithoutItsDestinations); skipped, to show the case fails on it.
			res, table := runSuite(t, p, acceptance.Options{Only: []string{tt.failing}, SkipDestinationCheck: true})
			t.Log("\n" + table)
			c := caseResult(t, res, tt.failing)
			if c.Status != acceptance.Fail || res.Failed != 1 {
				t.Fatalf("case %s is %s (%d failed); want FAIL:\n%s", tt.failing, c.Status, res.Failed, table)
			}
			if c.ObservedEffects != tt.wantEffects {
				t.Errorf("observed effects %q, want %q (the duplicate the misconfiguration causes)", c.ObservedEffects, tt.wantEffects)
			}
			if !strings.Contains(strings.Join(c.Failures, "\n"), tt.wantInReason) {
				t.Errorf("failures do not say %q:\n%s", tt.wantInReason, strings.Join(c.Failures, "\n"))
			}
			lines := strings.Split(strings.TrimSpace(table), "\n")
			if last := lines[len(lines)-1]; last != "0 passed, 1 failed" {
				t.Errorf("last line %q, want \"0 passed, 1 failed\"", last)
			}
			if !strings.Contains(table, "FAIL case "+tt.failing) {
				t.Errorf("the output does not name the failing case:\n%s", table)
			}
		})
	}
}

// A service started without the suite's destinations (docs/acceptance.md, step 1, skipped) runs them on
// its defaults, dedupe none: the cases would fail as if the ledger were not replay-safe. The run is
// refused before any case, naming each destination whose dedupe differs and what to add; one with a
// dedupe misconfigured is named alone.
func TestSuiteRefusesAServiceWithoutItsDestinations(t *testing.T) {
	t.Parallel()
	misconfigured := acceptance.Destinations()
	for i := range misconfigured {
		if misconfigured[i].Name == acceptance.DestinationNone {
			misconfigured[i].Dedupe = "key"
		}
	}
	for _, tc := range []struct {
		name  string
		specs []acceptance.DestinationSpec
		want  []string
	}{
		{"none of them", []acceptance.DestinationSpec{}, []string{
			"does not have the suite's destinations: acceptance-key has dedupe none there, the suite needs key; " +
				"acceptance-lookup has dedupe none there, the suite needs lookup; acceptance-retention has dedupe none there",
			"Add the destinations of docs/acceptance.md#the-destination-configuration to its configuration file (--config) and restart it; no case was run"}},
		{"one misconfigured", misconfigured, []string{"does not have the suite's destinations: acceptance-none has dedupe key there, the suite needs none. Add"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startInProcess(t, acceptance.InProcessConfig{Destinations: tc.specs})
			svc, _ := acceptance.NewService(p.ServiceURL, "", "")
			rcv, _ := acceptance.NewReceiver(p.ReceiverURL)
			var progress bytes.Buffer
			res, err := acceptance.Run(context.Background(), acceptance.Options{Service: svc, Receiver: rcv, Only: []string{"5"}, Progress: &progress})
			if err == nil {
				t.Fatalf("the suite ran against a service without its destinations: %+v\n%s", res, &progress)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal lacks %q:\n%v", want, err)
				}
			}
			if progress.Len() != 0 {
				t.Errorf("a case ran:\n%s", &progress)
			}
		})
	}
}

// Against an external receiver that ignores keys, the command fails with ErrFailed (exit status 1) and
// prints the failing row and the summary.
func TestCommandFailsAgainstAReceiverIgnoringKeys(t *testing.T) {
	t.Parallel()
	r, err := acceptance.StartReceiver(context.Background(), acceptance.InProcessConfig{Receiver: sandbox.Config{Dedupe: sandbox.DedupeNone}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	var stdout, stderr bytes.Buffer
	err = acceptance.Command(context.Background(), []string{"--receiver", r.ReceiverURL, "--only", "5,9"}, &stdout, &stderr)
	if !errors.Is(err, acceptance.ErrFailed) {
		t.Fatalf("Command returned %v, want ErrFailed; output:\n%s", err, stdout.String())
	}
	out := stdout.String()
	for _, want := range []string{"dedupe none", "[ 1/2] case", "FAIL case 5: Receiver commits, then response is dropped",
		"effects expected 1, observed 2", "\n1 passed, 1 failed\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.HasSuffix(out, "1 passed, 1 failed\n") {
		t.Errorf("the last line is not the summary:\n%s", out)
	}
	// The default report is a block per case within ReportWidth columns; --wide is the one-row table.
	for line := range strings.Lines(out) {
		if n := utf8.RuneCountInString(strings.TrimSuffix(line, "\n")); n > acceptance.ReportWidth {
			t.Errorf("a line of %d columns:\n%s", n, line)
		}
	}
	for _, want := range []string{"case 5   FAIL  commit_then_drop @ after_commit", "  effects     1 → 1, observed 1 → 2"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	stdout.Reset()
	err = acceptance.Command(context.Background(), []string{"--receiver", r.ReceiverURL, "--only", "5", "--wide"}, &stdout, &stderr)
	if !errors.Is(err, acceptance.ErrFailed) || !strings.Contains(stdout.String(), "CASE  INJECTED FAULT @ BOUNDARY") {
		t.Errorf("--wide: %v\n%s", err, stdout.String())
	}
}

func TestCommandJSON(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if err := acceptance.Command(context.Background(), []string{"--json", "--only", "1,4"}, &stdout, &stderr); err != nil {
		t.Fatalf("Command: %v\n%s", err, stderr.String())
	}
	var res acceptance.Result
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("stdout is not one JSON document: %v\n%s", err, stdout.String())
	}
	h := res.Header
	if h.ServiceVersion == "" || !strings.HasPrefix(h.Store, "sqlite") || len(h.ConfigurationHash) != 16 ||
		h.RetrySettings == "" || h.Timestamp.IsZero() || h.ReceiverMode.Dedupe != "key" || h.Settings != acceptance.DefaultSettings() {
		t.Errorf("header incomplete: %+v", h)
	}
	if res.Passed != 2 || res.Failed != 0 || len(res.Cases) != 2 || res.Cases[0].ID != "1" || res.Cases[1].ID != "4" {
		t.Errorf("result %d passed %d failed, cases %+v", res.Passed, res.Failed, res.Cases)
	}
	if !strings.Contains(stderr.String(), "case 1   PASS") {
		t.Errorf("progress is not on stderr:\n%s", stderr.String())
	}
}

func TestCommandUsage(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if err := acceptance.Command(context.Background(), []string{"--help"}, &stdout, &stderr); err != nil {
		t.Fatalf("--help: %v", err)
	}
	if !strings.Contains(stdout.String(), "Usage: companion acceptance") || !strings.Contains(stdout.String(), "--receiver") {
		t.Errorf("--help printed:\n%s", stdout.String())
	}
	for _, args := range [][]string{
		{"--bogus"},
		{"extra"},
		{"--token", "t"},
		{"--service", "http://127.0.0.1:1", "--store", "mongodb"},
		{"--store", "postgres"},
		{"--store", "mongodb"}, // without MONGODB_URI
		{"--only", "1,99"},
	} {
		err := acceptance.CommandEnv(context.Background(), args, &stdout, &stderr, func(string) string { return "" })
		if !errors.Is(err, acceptance.ErrUsage) {
			t.Errorf("%q: got %v, want a usage error", args, err)
		}
	}
}

// A service or receiver where nothing listens is named with what to do.
func TestCommandSaysWhatToStart(t *testing.T) {
	t.Parallel()
	r, err := acceptance.StartReceiver(context.Background(), acceptance.InProcessConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--service", "http://127.0.0.1:1", "--receiver", r.ReceiverURL}, "connection refused; start it (companion serve) or point --service at it"},
		{[]string{"--receiver", "http://127.0.0.1:1"}, "connection refused; start one (companion receiver --addr host:port) or point --receiver at it"},
	} {
		var stdout, stderr bytes.Buffer
		err := acceptance.CommandEnv(context.Background(), append(tc.args, "--only", "5"), &stdout, &stderr, func(string) string { return "" })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v; want %q", tc.args, err, tc.want)
		}
	}
}

// The configuration users copy into their deployment is exactly the one the suite expects.
func TestDocsShowTheDestinationConfiguration(t *testing.T) {
	doc, err := os.ReadFile("../docs/acceptance.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), acceptance.DestinationsYAML()) {
		t.Errorf("docs/acceptance.md does not contain the destination configuration:\n%s", acceptance.DestinationsYAML())
	}
	for _, c := range acceptance.Cases() {
		if !strings.Contains(string(doc), "| "+c.ID+" |") {
			t.Errorf("docs/acceptance.md does not explain case %s", c.ID)
		}
	}
}

// The suite passes against the real program, `companion serve` with the destination configuration of
// docs/acceptance.md and tokens, run the way a user runs it: `companion acceptance --service … --token …`.
func TestSuiteAgainstCompanionServe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// The receiver runs first: the probed destination's lookup names it.
	r, err := acceptance.StartReceiver(context.Background(), acceptance.InProcessConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	config := filepath.Join(dir, "companion.yaml")
	if err := os.WriteFile(config, []byte(acceptance.DestinationsYAMLFor(r.ReceiverURL)), 0o600); err != nil {
		t.Fatal(err)
	}
	const workflowSecret, operatorSecret = "wf-4f9c2a71d6e3b805", "op-91d7e0c3a5b24f68"
	env := map[string]string{"COMPANION_TOKENS": "ci-workflow:acme:workflow:" + workflowSecret + ",ci-owner:acme:operator:" + operatorSecret}
	serve := cli.NewMain()
	serve.Stdout, serve.Stderr, serve.Getenv = io.Discard, io.Discard, func(k string) string { return env[k] }
	if err := serve.Run(context.Background(), []string{"serve", "--addr", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"), "--config", config,
		"--sweep-every", acceptance.ProbeEvery}); err != nil {
		t.Fatalf("serve: %v", err)
	}
	t.Cleanup(func() { serve.Close() })

	// Without --token the suite stops at its first call, saying which flag gives the token.
	var stdout bytes.Buffer
	run := cli.NewMain()
	run.Stdout, run.Stderr, run.Getenv = &stdout, io.Discard, func(string) string { return "" }
	err = run.Run(context.Background(), []string{"acceptance", "--service", "http://" + serve.Addr(), "--receiver", r.ReceiverURL})
	if want := "refused the suite's first call: POST /v1/before-write: service answered 401 unauthorized: missing Authorization: Bearer <token>. " +
		"Give one of its tokens with --token"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("without --token: %v; want %q", err, want)
	}

	// The workflow token from COMPANION_TOKEN, as the other commands take it (out of the process list).
	stdout.Reset()
	run = cli.NewMain()
	run.Stdout, run.Stderr = &stdout, io.Discard
	run.Getenv = func(k string) string {
		if k == "COMPANION_TOKEN" {
			return workflowSecret
		}
		return ""
	}
	err = run.Run(context.Background(), []string{"acceptance", "--service", "http://" + serve.Addr(), "--receiver", r.ReceiverURL,
		"--operator-token", operatorSecret})
	out := stdout.String()
	t.Log("\n" + out)
	if err != nil {
		t.Fatalf("companion acceptance: %v (exit status %d)", err, cli.ExitCode(err))
	}
	if want := fmt.Sprintf("%d passed, 0 failed\n", len(acceptance.Cases())); !strings.HasSuffix(out, want) {
		t.Errorf("the last line is not %q", want)
	}
	for _, want := range []string{"service        http://" + serve.Addr(), "version dev, store sqlite", "dedupe key, keys kept forever"} {
		if !strings.Contains(out, want) {
			t.Errorf("the header lacks %q", want)
		}
	}
}

// A failing suite makes the program exit with status 1, a wrong flag with the usage status.
func TestProgramExitStatus(t *testing.T) {
	t.Parallel()
	r, err := acceptance.StartReceiver(context.Background(), acceptance.InProcessConfig{Receiver: sandbox.Config{Dedupe: sandbox.DedupeNone}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	m := cli.NewMain()
	m.Stdout, m.Stderr, m.Getenv = io.Discard, io.Discard, func(string) string { return "" }
	if code := cli.ExitCode(m.Run(context.Background(), []string{"acceptance", "--receiver", r.ReceiverURL, "--only", "5"})); code != 1 {
		t.Errorf("a failing case: exit status %d, want 1", code)
	}
	if code := cli.ExitCode(m.Run(context.Background(), []string{"acceptance", "--bogus"})); code != 2 {
		t.Errorf("a wrong flag: exit status %d, want 2", code)
	}
}

// --store mongodb on a MONGODB_URI, and --store postgres on a POSTGRES_URL, where nothing listens stop as
// companion serve does: one line naming the host, what it said and what to check, without the password.
func TestCommandNamesAnUnreachableStore(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	for _, c := range []struct {
		store, env, value string
		want              []string
		not               string
	}{
		{"mongodb", "MONGODB_URI", "mongodb://ledger:hunter2@" + addr + "/?serverSelectionTimeoutMS=300",
			[]string{addr + ": connection refused", "check that MongoDB runs"}, "topology"},
		{"postgres", "POSTGRES_URL", "postgres://ledger:hunter2@" + addr + "/companion?connect_timeout=1",
			[]string{"no PostgreSQL answered at " + addr, "(connection refused)"}, "\n"},
	} {
		var stdout, stderr bytes.Buffer
		err := acceptance.CommandEnv(context.Background(), []string{"--store", c.store, "--only", "5"}, &stdout, &stderr,
			func(k string) string { return map[string]string{c.env: c.value}[k] })
		if err == nil || strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), c.not) {
			t.Errorf("--store %s where nothing listens: %v", c.store, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("--store %s where nothing listens: %v; want %q", c.store, err, w)
			}
		}
	}
}

// AwaitProbeRun returns once the in-process prober (every second) starts its next run.
func TestAwaitProbeRunReturnsAtTheProbersNextRun(t *testing.T) {
	t.Parallel()
	p := startInProcess(t, acceptance.InProcessConfig{})
	for range 2 {
		start := time.Now()
		if err := p.AwaitProbeRun(t.Context()); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("AwaitProbeRun took %s; the prober runs every second", took)
		}
	}
}
