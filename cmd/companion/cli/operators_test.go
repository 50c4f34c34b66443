package cli_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/cmd/companion/cli"
	"github.com/replaysafe/companion/items/mongostore/mongotest"
	"github.com/replaysafe/companion/items/sqlitestore"
)

// run runs one command of the CLI and returns what it printed.
func run(t *testing.T, env map[string]string, args ...string) (string, error) {
	t.Helper()
	p := newProgram(env)
	err := p.Run(context.Background(), args)
	p.Close()
	return p.out.String(), err
}

func TestOperatorCommandsOverTheAPI(t *testing.T) {
	dir := t.TempDir()
	svc := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": dir,
		"COMPANION_TOKENS": "wf:acme:workflow:wf-secret-0123456789,anna:acme:operator:op-secret-0123456789", "COMPANION_SWEEP_EVERY": "@every 1h"})
	if !strings.Contains(svc.err.String(), "alerts log only") {
		t.Errorf("the start line does not say that alerts go to the log:\n%s", svc.err)
	}
	for _, key := range []string{"inv-1", "inv-2"} {
		_, a := call(t, svc, "POST", "/v1/before-write", "wf-secret-0123456789", `{"key":"`+key+`","payload":{"n":1},"reference":"QT-`+key+`","batch_id":"exec-7"}`)
		call(t, svc, "POST", "/v1/after-write", "wf-secret-0123456789", `{"key":"`+key+`","claim":"`+a["claim"].(string)+`","outcome":"unknown","error":{"class":"timeout"}}`)
		if key == "inv-2" {
			// A workflow reporting in a loop: 20 more unknown outcomes, 5 beyond what the history keeps.
			for i := range 20 {
				call(t, svc, "POST", "/v1/after-write", "wf-secret-0123456789", fmt.Sprintf(`{"key":"inv-2","claim":"%s","outcome":"unknown","error":{"class":"timeout","message":"try %d"}}`, a["claim"], i))
			}
		}
	}
	call(t, svc, "POST", "/v1/before-write", "wf-secret-0123456789", `{"key":"inv-3","payload":{"n":1},"execution_id":"exec-8"}`)
	env := map[string]string{"COMPANION_URL": "http://" + svc.Addr(), "COMPANION_TOKEN": "op-secret-0123456789"}

	out, err := run(t, env, "items", "list", "--execution", "exec-8")
	if err != nil || !strings.Contains(out, "inv-3") || !strings.Contains(out, "1 item(s)") {
		t.Fatalf("items list --execution: %v\n%s", err, out)
	}

	out, err = run(t, env, "items", "list", "--reference", "QT-inv-1")
	if err != nil || !strings.Contains(out, "inv-1") || !strings.Contains(out, "1 item(s)") {
		t.Fatalf("items list --reference: %v\n%s", err, out)
	}

	out, err = run(t, env, "items", "list", "--needs-person", "--batch", "exec-7")
	if err != nil {
		t.Fatal(err)
	}
	// The two rows, in the order of their last change: serve's first sweep, at start, may send inv-1's alert
	// (a change) after inv-2 was reported, so either may come first.
	lines := strings.Split(strings.TrimSpace(out), "\n")
	inv2 := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "inv-2 ") })
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "KEY") || (inv2 != 1 && inv2 != 2) ||
		!strings.Contains(lines[inv2], "unknown_no_dedupe") || !strings.Contains(lines[inv2], "QT-inv-2") ||
		!strings.HasPrefix(lines[3-inv2], "inv-1 ") || lines[3] != "2 item(s)" {
		t.Fatalf("items list:\n%s", out)
	}
	out, err = run(t, env, "items", "list", "--limit", "1", "--json")
	var page struct {
		Items      []map[string]any `json:"items"`
		NextCursor string           `json:"next_cursor"`
	}
	if err != nil || json.Unmarshal([]byte(out), &page) != nil || len(page.Items) != 1 || page.NextCursor == "" {
		t.Fatalf("items list --json: %v\n%s", err, out)
	}
	out, err = run(t, env, "items", "list", "--limit", "1", "--all", "--state", "unknown,in_flight")
	if err != nil || !strings.Contains(out, "3 item(s)\n") {
		t.Fatalf("items list --all: %v\n%s", err, out)
	}

	out, err = run(t, env, "items", "show", "inv-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"state", "unknown (timeout)", "QT-inv-1", "needs person", "unknown_no_dedupe", "idempotency key", "ik_",
		"attempts:", "history:", "claimed"} {
		if !strings.Contains(out, want) {
			t.Errorf("items show lacks %q:\n%s", want, out)
		}
	}

	if out, err = run(t, env, "items", "show", "inv-2"); err != nil || !strings.Contains(out, "history:\n  (5 repeated reports not kept: ") ||
		!strings.Contains(out, "try 19") || strings.Contains(out, "try 5\n") {
		t.Errorf("items show of an item with dropped history: %v\n%s", err, out)
	}
	if out, err = run(t, env, "items", "show", "inv-1"); err != nil || strings.Contains(out, "not kept") {
		t.Errorf("items show of an item with its whole history speaks of repeats not kept: %v\n%s", err, out)
	}

	out, err = run(t, env, "items", "resolve", "inv-1", "--outcome", "succeeded", "--evidence", "found invoice INV-88 in billing", "--external-id", "INV-88")
	if err != nil || out != "resolved inv-1 as succeeded: now succeeded\n" {
		t.Fatalf("items resolve: %v %q", err, out)
	}
	// The repeat, with the KEY after the flags and between them, as a newcomer may well write it.
	for _, args := range [][]string{
		{"items", "resolve", "--outcome", "succeeded", "--evidence", "found invoice INV-88 in billing", "--external-id", "INV-88", "inv-1"},
		{"items", "resolve", "--outcome", "succeeded", "inv-1", "--evidence", "found invoice INV-88 in billing", "--external-id", "INV-88"},
	} {
		out, err = run(t, env, args...)
		if err != nil || !strings.HasPrefix(out, "inv-1 was already resolved as succeeded by anna at ") ||
			!strings.HasSuffix(out, "with the same evidence; nothing changed (state succeeded)\n") {
			t.Fatalf("repeated resolve %q: %v %q", args, err, out)
		}
	}
	if out, err = run(t, env, "items", "show", "--json", "inv-1"); err != nil || !strings.Contains(out, `"key": "inv-1"`) && !strings.Contains(out, `"key":"inv-1"`) {
		t.Fatalf("items show --json KEY: %v\n%s", err, out)
	}
	_, err = run(t, env, "items", "resolve", "inv-1", "--outcome", "not_committed", "--evidence", "looked again: no invoice after all")
	if err == nil || !strings.Contains(err.Error(), "conflict (HTTP 409)") || !strings.Contains(err.Error(), "(resolved as succeeded by anna at ") {
		t.Fatalf("a second, different resolution: %v", err)
	}
	_, err = run(t, env, "items", "resolve", "inv-3", "--outcome", "succeeded", "--evidence", "it is there, I saw it")
	if err == nil || !strings.Contains(err.Error(), "conflict (HTTP 409)") || cli.ExitCode(err) != 1 {
		t.Fatalf("resolving an item in flight: %v", err)
	}
	_, err = run(t, env, "items", "resolve", "inv-2", "--outcome", "maybe", "--evidence", "x")
	if cli.ExitCode(err) != 2 {
		t.Fatalf("bad outcome: %v (exit %d), want a usage error", err, cli.ExitCode(err))
	}
	// A duplicate effect: only acknowledged settles it; a succeeded item without one is a conflict.
	_, err = run(t, env, "items", "resolve", "inv-1", "--outcome", "acknowledged", "--evidence", "seen it, nothing to do")
	if err == nil || !strings.Contains(err.Error(), "conflict (HTTP 409)") {
		t.Fatalf("acknowledging a succeeded item without a duplicate effect: %v", err)
	}
	_, d := call(t, svc, "POST", "/v1/before-write", "wf-secret-0123456789", `{"key":"dup","payload":{"n":1}}`)
	for _, id := range []string{"INV-90", "INV-91"} {
		call(t, svc, "POST", "/v1/after-write", "wf-secret-0123456789", `{"key":"dup","claim":"`+d["claim"].(string)+`","outcome":"succeeded","external_id":"`+id+`"}`)
	}
	_, err = run(t, env, "items", "resolve", "dup", "--outcome", "acknowledged", "--evidence", "voided INV-91", "--external-id", "INV-91")
	if cli.ExitCode(err) != 2 {
		t.Fatalf("acknowledged with --external-id: %v (exit %d), want a usage error", err, cli.ExitCode(err))
	}
	out, err = run(t, env, "items", "resolve", "dup", "--outcome", "acknowledged", "--evidence", "voided INV-91 in billing by hand")
	if err != nil || out != "resolved dup as acknowledged: still succeeded, needs no person\n" {
		t.Fatalf("items resolve --outcome acknowledged: %v %q", err, out)
	}
	if _, it := call(t, svc, "GET", "/v1/items/dup", "op-secret-0123456789", ""); it["needs_person"] != false || it["duplicate_effect"] != true {
		t.Fatalf("after acknowledged: %v", it)
	}
	_, err = run(t, env, "items", "show", "nope")
	if err == nil || !strings.Contains(err.Error(), "not_found (HTTP 404)") {
		t.Fatalf("show a missing key: %v", err)
	}
	_, err = run(t, map[string]string{"COMPANION_URL": env["COMPANION_URL"], "COMPANION_TOKEN": "wf-secret-0123456789"}, "stats")
	if err == nil || !strings.Contains(err.Error(), "forbidden (HTTP 403)") || !strings.Contains(err.Error(), "needs one of role operator") {
		t.Fatalf("stats with a workflow token: %v", err)
	}
	_, err = run(t, map[string]string{"COMPANION_URL": strings.TrimPrefix(env["COMPANION_URL"], "http://")}, "stats")
	if err == nil || !strings.Contains(err.Error(), "e.g. COMPANION_URL="+env["COMPANION_URL"]) {
		t.Fatalf("stats with COMPANION_URL without its scheme: %v", err)
	}
	// A list parameter the service refuses is the flag's mistake: named as the flag, exit status 2.
	_, err = run(t, env, "items", "list", "--limit", "0")
	if want := `items list: --limit: must be 1-500 (run "companion items list --help")`; err == nil || err.Error() != want || cli.ExitCode(err) != 2 {
		t.Fatalf("items list --limit 0: %v (exit %d), want %q", err, cli.ExitCode(err), want)
	}
	_, err = run(t, env, "items", "list", "--state", "done")
	if err == nil || !strings.HasPrefix(err.Error(), "items list: --state: must be one or more of") || cli.ExitCode(err) != 2 {
		t.Fatalf("items list --state done: %v (exit %d)", err, cli.ExitCode(err))
	}
	// A COMPANION_URL copied from a request (…/v1) is refused before any call; any other path is named
	// when the service answers that it has no such endpoint.
	_, err = run(t, map[string]string{"COMPANION_URL": env["COMPANION_URL"] + "/v1/", "COMPANION_TOKEN": env["COMPANION_TOKEN"]}, "items", "list")
	if want := "ends in /v1: give the service's address without it (the commands add /v1/…), COMPANION_URL=" + env["COMPANION_URL"]; err == nil ||
		!strings.Contains(err.Error(), want) || cli.ExitCode(err) != 2 {
		t.Fatalf("items list with COMPANION_URL …/v1: %v (exit %d), want %q", err, cli.ExitCode(err), want)
	}
	_, err = run(t, map[string]string{"COMPANION_URL": env["COMPANION_URL"] + "/api", "COMPANION_TOKEN": env["COMPANION_TOKEN"]}, "stats")
	if want := "its path /api is not part of it here: try COMPANION_URL=" + env["COMPANION_URL"] + "."; err == nil ||
		!strings.Contains(err.Error(), "not_found (HTTP 404)") || !strings.Contains(err.Error(), want) {
		t.Fatalf("stats with COMPANION_URL …/api: %v, want %q", err, want)
	}
	_, err = run(t, map[string]string{"COMPANION_URL": env["COMPANION_URL"]}, "stats")
	if err == nil || !strings.Contains(err.Error(), "unauthorized (HTTP 401)") || !strings.Contains(err.Error(), "set COMPANION_TOKEN") {
		t.Fatalf("stats without COMPANION_TOKEN: %v", err)
	}
	_, err = run(t, map[string]string{"COMPANION_URL": env["COMPANION_URL"], "COMPANION_TOKEN": "not-a-known-secret-0000"}, "stats")
	if err == nil || !strings.Contains(err.Error(), "unauthorized (HTTP 401)") || !strings.Contains(err.Error(), "secret in COMPANION_TOKEN") {
		t.Fatalf("stats with an unknown COMPANION_TOKEN: %v", err)
	}
	// The service's tokens may come from any of three places; both messages name all of them.
	for _, msg := range []string{err.Error(), func() string {
		_, err := run(t, map[string]string{"COMPANION_URL": env["COMPANION_URL"]}, "stats")
		return err.Error()
	}()} {
		for _, source := range []string{"COMPANION_TOKENS,", "COMPANION_TOKENS_FILE", "tokens: in its config file"} {
			if !strings.Contains(msg, source) {
				t.Errorf("the message about a token the service does not know names no %s: %s", source, msg)
			}
		}
	}
	_, err = run(t, map[string]string{"COMPANION_URL": env["COMPANION_URL"], "COMPANION_TOKEN": "anna:acme:operator:op-secret-0123456789"}, "stats")
	if err == nil || !strings.Contains(err.Error(), "unauthorized (HTTP 401)") ||
		!strings.Contains(err.Error(), "COMPANION_TOKEN looks like a whole token line (name:tenant:role:secret): set it to the secret only") {
		t.Fatalf("stats with a whole token line in COMPANION_TOKEN: %v", err)
	}

	// inv-2's loop of reports above dropped 5 from its history: the stats count them.
	_, looped := call(t, svc, "GET", "/v1/items/inv-2", "op-secret-0123456789", "")
	if looped["history_dropped"] != 5.0 {
		t.Fatalf("inv-2's history dropped %v reports, want 5", looped["history_dropped"])
	}
	out, err = run(t, env, "stats", "--wide")
	if err != nil {
		t.Fatal(err)
	}
	var all string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "all") {
			all = strings.Join(strings.Fields(l), " ")
		}
	}
	// items, in_flight, succeeded, failed, unknown, needs person, oldest, retries, conflicts, recoveries, by hand, duplicates, removed,
	// dropped repeats
	if !strings.HasPrefix(all, "all 4 1 2 0 1 1 ") || !strings.HasSuffix(all, " 0 0 0 2 1 0 5") {
		t.Fatalf("stats --wide total line %q:\n%s", all, out)
	}
	// Without --wide the same numbers come in two tables, neither wider than 100 columns.
	out, err = run(t, env, "stats")
	if err != nil {
		t.Fatal(err)
	}
	var totals []string
	for _, l := range strings.Split(out, "\n") {
		if len(l) > 100 {
			t.Errorf("stats prints a line of %d columns: %q", len(l), l)
		}
		if strings.HasPrefix(strings.TrimSpace(l), "all") {
			totals = append(totals, strings.Join(strings.Fields(l), " "))
		}
	}
	if len(totals) != 2 || !strings.HasPrefix(totals[0], "all 4 1 2 0 1 1 ") || totals[1] != "all 0 0 0 2 1 0 5" {
		t.Fatalf("stats total lines %q:\n%s", totals, out)
	}
	out, err = run(t, env, "stats", "--json")
	var st map[string]any
	if err != nil || json.Unmarshal([]byte(out), &st) != nil || st["manual_resolutions"] != 2.0 || st["history_dropped"] != 5.0 {
		t.Fatalf("stats --json: %v\n%s", err, out)
	}

	_, err = run(t, map[string]string{"COMPANION_URL": "http://127.0.0.1:1"}, "stats")
	if err == nil || !strings.Contains(err.Error(), "cannot reach companion at http://127.0.0.1:1 (COMPANION_URL): dial tcp 127.0.0.1:1: connect: connection refused; "+
		"start it (companion serve) or set COMPANION_URL to where it runs") {
		t.Fatalf("unreachable service: %v", err)
	}
}

// "companion items --help" is the one place that shows all three subcommands: it names every flag of
// each, so that a newcomer does not learn of --execution or --reference only from the docs.
func TestItemsHelpNamesEveryFlag(t *testing.T) {
	overview, err := run(t, nil, "items", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"list", "show", "resolve"} {
		help, err := run(t, nil, "items", sub, "--help")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(help, -1) {
			if !strings.Contains(overview, "--"+m[1]) {
				t.Errorf("items --help does not name items %s --%s:\n%s", sub, m[1], overview)
			}
		}
	}
}

func TestSweepOnceSendsDueAlertsToTheLog(t *testing.T) {
	dir := t.TempDir()
	svc := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": dir, "COMPANION_SWEEP_EVERY": "@every 1h"})
	_, a := call(t, svc, "POST", "/v1/before-write", "", `{"key":"inv-1","payload":{"n":1}}`)
	call(t, svc, "POST", "/v1/after-write", "", `{"key":"inv-1","claim":"`+a["claim"].(string)+`","outcome":"unknown"}`)
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	// The service swept at its start, before the item needed a person; this sweep sends its alert.
	p := newProgram(map[string]string{"COMPANION_DATA_DIR": dir})
	err := p.Run(context.Background(), []string{"sweep", "--once"})
	if err != nil {
		t.Fatal(err)
	}
	out := p.out.String()
	if !strings.Contains(out, "alerts to log only") || !strings.Contains(out, "1 message(s) with 1 alert(s)") {
		t.Fatalf("sweep --once printed:\n%s", out)
	}
	if !strings.Contains(p.err.String(), "1 item(s) need a person") {
		t.Fatalf("the alert is not in the log:\n%s", p.err)
	}
	p = newProgram(map[string]string{"COMPANION_DATA_DIR": dir})
	if err := p.Run(context.Background(), []string{"sweep", "--once", "--json"}); err != nil {
		t.Fatal(err)
	}
	var counts struct {
		Alerts struct{ Messages int } `json:"alerts"`
	}
	if err := json.Unmarshal([]byte(p.out.String()), &counts); err != nil || counts.Alerts.Messages != 0 {
		t.Fatalf("a second sweep: %v %s", err, p.out)
	}
	if _, err := run(t, map[string]string{"COMPANION_DATA_DIR": dir}, "sweep"); cli.ExitCode(err) != 2 {
		t.Fatalf("sweep without --once: %v", err)
	}
}

// TestSweepOnceRefusesAMissingLedger: run from the wrong directory, sweep --once would create an empty
// ledger and report that all is well; it refuses, creates nothing, and starts one only with --create.
func TestSweepOnceRefusesAMissingLedger(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "elsewhere")
	_, err := run(t, map[string]string{"COMPANION_DATA_DIR": dir}, "sweep", "--once")
	if err == nil || !strings.Contains(err.Error(), "no ledger in "+dir) || !strings.Contains(err.Error(), "--create") {
		t.Fatalf("sweep --once on a missing ledger: %v", err)
	}
	if _, statErr := os.Stat(dir); statErr == nil {
		t.Fatalf("the refused sweep created %s", dir)
	}
	out, err := run(t, map[string]string{"COMPANION_DATA_DIR": dir}, "sweep", "--once", "--create")
	if err != nil || !strings.Contains(out, "0 lease(s) expired") {
		t.Fatalf("sweep --once --create: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "companion.db")); err != nil {
		t.Fatalf("--create made no ledger: %v", err)
	}
	if _, err := run(t, map[string]string{"COMPANION_DATA_DIR": dir}, "sweep", "--once"); err != nil {
		t.Fatalf("sweep --once on the ledger --create made: %v", err)
	}
}

func TestAlertsConfigAndSlackSettings(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("alerts:\n  default_owner: C0OPS\n  routes:\n    - workflow: \"billing-*\"\n      owner: U0ANNA\n      escalate_after: 2h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	svc := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": filepath.Join(dir, "d1"), "COMPANION_CONFIG": good,
		"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET_FILE": writeSecret(t, dir, "signing"), "SLACK_API_URL": "http://127.0.0.1:1/api/"})
	if !strings.Contains(svc.err.String(), "alerts Slack http://127.0.0.1:1/api/") {
		t.Errorf("start line does not name Slack:\n%s", svc.err)
	}
	if strings.Contains(svc.err.String(), "names no owner") {
		t.Errorf("the start line warns of no owner though the config names some:\n%s", svc.err)
	}
	// Slack set up, but no owner anywhere in the config: the start line says that the alerts will go to
	// the log, and what to set, instead of leaving a newcomer to wait for a Slack message that never comes.
	for i, yaml := range []string{"", "destinations:\n  billing:\n    dedupe: key\n"} {
		env := map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": filepath.Join(dir, fmt.Sprintf("n%d", i)),
			"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "signing", "SLACK_API_URL": "http://127.0.0.1:1/api/"}
		if yaml != "" {
			env["COMPANION_CONFIG"] = filepath.Join(dir, "no-owner.yaml")
			if err := os.WriteFile(env["COMPANION_CONFIG"], []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		p := start(t, env)
		for _, want := range []string{"alerts Slack http://127.0.0.1:1/api/ (bot token not checked", "(but the config names no owner", "go to the log",
			"set defaults.owner or alerts.default_owner"} {
			if !strings.Contains(p.err.String(), want) {
				t.Errorf("config %q: the start line lacks %q:\n%s", yaml, want, p.err)
			}
		}
	}
	status, _ := call(t, svc, "POST", "/v1/slack/actions", "", "")
	if status != 415 {
		t.Errorf("the Slack endpoint answered %d to a request without a form, want 415", status)
	}

	for _, tc := range []struct {
		name string
		env  map[string]string
		yaml string
		want []string
	}{
		{"bad glob", nil, "alerts:\n  routes:\n    - workflow: \"[\"\n      owner: U1\n", []string{"line 3", "alerts.routes[0].workflow", "glob"}},
		{"empty route", nil, "alerts:\n  routes:\n    - workflow: billing\n", []string{"line 3", "alerts.routes[0]", "names no owner"}},
		{"bad escalate_after", nil, "alerts:\n  routes:\n    - owner: U1\n      escalate_after: soon\n", []string{"line 4", "escalate_after"}},
		{"only a token", map[string]string{"SLACK_BOT_TOKEN": "xoxb-1"}, "", []string{"SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET"}},
		{"bad schedule", map[string]string{"COMPANION_SWEEP_EVERY": "every minute"}, "", []string{"--sweep-every", `five cron fields ("*/2 * * * *") or a descriptor ("@every 30s"`}},
		{"duration as schedule", map[string]string{"COMPANION_SWEEP_EVERY": "30s"}, "", []string{"--sweep-every", `did you mean "@every 30s"?`}},
		{"relative public_url", nil, "public_url: companion.example.com\n", []string{"line 1", "public_url", "absolute http(s) URL"}},
		{"public_url with a query", nil, "public_url: https://c.example.com/?a=1\n", []string{"line 1", "public_url", "plain base URL"}},
		{"bad COMPANION_PUBLIC_URL", map[string]string{"COMPANION_PUBLIC_URL": "ftp://c.example.com"}, "", []string{"COMPANION_PUBLIC_URL", "absolute http(s) URL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(cfg, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			env := map[string]string{"COMPANION_CONFIG": cfg, "COMPANION_DATA_DIR": filepath.Join(t.TempDir(), "d"), "COMPANION_ADDR": "127.0.0.1:0"}
			for k, v := range tc.env {
				env[k] = v
			}
			p := newProgram(env)
			err := p.Run(context.Background(), nil)
			if err == nil {
				p.Close()
				t.Fatal("started")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
			if errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
		})
	}
}

func writeSecret(t *testing.T, dir, value string) string {
	t.Helper()
	f := filepath.Join(dir, "secret-"+value)
	if err := os.WriteFile(f, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// The operator surface works the same on the MongoDB store: the list, the stats and a sweep.
func TestOperatorCommandsOnMongoDB(t *testing.T) {
	srv := mongotest.Start(t)
	env := map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": filepath.Join(t.TempDir(), "unused"),
		"MONGODB_URI": srv.URI(), "MONGODB_DATABASE": "companion_ops_test", "COMPANION_SWEEP_EVERY": "@every 1h"}
	svc := start(t, env)
	_, a := call(t, svc, "POST", "/v1/before-write", "", `{"key":"inv-1","payload":{"n":1},"batch_id":"exec-1"}`)
	call(t, svc, "POST", "/v1/after-write", "", `{"key":"inv-1","claim":"`+a["claim"].(string)+`","outcome":"unknown"}`)

	p := newProgram(env)
	if err := p.Run(context.Background(), []string{"sweep", "--once"}); err != nil {
		t.Fatal(err)
	}
	if out := p.out.String(); !strings.Contains(out, "swept mongodb ") || !strings.Contains(out, "1 message(s) with 1 alert(s)") {
		t.Fatalf("sweep --once on MongoDB:\n%s", out)
	}
	client := map[string]string{"COMPANION_URL": "http://" + svc.Addr()}
	out, err := run(t, client, "items", "list", "--needs-person", "--batch", "exec-1")
	if err != nil || !strings.Contains(out, "inv-1") || !strings.Contains(out, "1 item(s)") {
		t.Fatalf("items list on MongoDB: %v\n%s", err, out)
	}
	out, err = run(t, client, "items", "show", "inv-1")
	if err != nil || !strings.Contains(out, "(alert sent)") {
		t.Fatalf("items show on MongoDB: %v\n%s", err, out)
	}
	out, err = run(t, client, "stats", "--json")
	var st map[string]any
	if err != nil || json.Unmarshal([]byte(out), &st) != nil || st["needs_person"] != 1.0 {
		t.Fatalf("stats on MongoDB: %v\n%s", err, out)
	}
}

// With public_url (COMPANION_PUBLIC_URL wins over the file), each alert line links to the item's console
// page; serve answers /console/ on the same address.
func TestPublicURLLinksAlertsToTheConsole(t *testing.T) {
	var mu sync.Mutex
	var posted []string
	slack := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		// Slack's client sends the blocks as JSON, whose encoder writes < and > as \u003c and \u003e.
		posted = append(posted, r.URL.Path+" "+strings.NewReplacer(`\u003c`, "<", `\u003e`, ">").Replace(r.Form.Get("blocks"))+string(b))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "conversations.open"):
			_, _ = io.WriteString(w, `{"ok":true,"channel":{"id":"D0OPS"}}`)
		default:
			_, _ = io.WriteString(w, `{"ok":true,"channel":"D0OPS","ts":"1.1"}`)
		}
	}))
	t.Cleanup(slack.Close)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(cfg, []byte("public_url: https://file.example.com\nalerts:\n  default_owner: U0OPS\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": filepath.Join(dir, "d"), "COMPANION_CONFIG": cfg,
		"COMPANION_SWEEP_EVERY": "@every 1s", "COMPANION_PUBLIC_URL": "https://companion.example.com",
		"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s", "SLACK_API_URL": slack.URL + "/api/"}
	svc := start(t, env)
	_, a := call(t, svc, "POST", "/v1/before-write", "", `{"key":"inv-1","payload":{"n":1},"dedupe":"none"}`)
	call(t, svc, "POST", "/v1/after-write", "", `{"key":"inv-1","claim":"`+a["claim"].(string)+`","outcome":"unknown"}`)
	resp, err := http.Get("http://" + svc.Addr() + "/console/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "inv-1") {
		t.Fatalf("GET /console/ in open mode answered %d:\n%s", resp.StatusCode, body)
	}
	// serve's sweeps (at start, then every second) send the alert. (Stopping serve and running sweep --once
	// instead raced with the sweep at start: an alert it had claimed when serve stopped waits for its
	// claim to expire, and sweep --once found nothing to send.)
	var all string
	for deadline := time.Now().Add(15 * time.Second); ; {
		mu.Lock()
		all = strings.Join(posted, "\n")
		mu.Unlock()
		if strings.Contains(all, "<https://companion.example.com/console/item?key=inv-1|`inv-1`>") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no console link in what Slack received in 15 s:\n%s", all)
		}
		time.Sleep(50 * time.Millisecond)
	}
	svc.Close()
	if strings.Contains(all, "file.example.com") {
		t.Fatalf("the file's public_url won over COMPANION_PUBLIC_URL:\n%s", all)
	}
}

func TestItemsListNamesItemsItCannotRead(t *testing.T) {
	dir := t.TempDir()
	svc := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": dir,
		"COMPANION_TOKENS": "wf:acme:workflow:wf-secret-0123456789,anna:acme:operator:op-secret-0123456789", "COMPANION_SWEEP_EVERY": "@every 1h"})
	for _, key := range []string{"inv-1", "inv-2"} {
		call(t, svc, "POST", "/v1/before-write", "wf-secret-0123456789", `{"key":"`+key+`","payload":{"n":1}}`)
	}
	// Damage inv-2's stored document as a bad disk or a hand edit would (the driver is the store's).
	db, err := sql.Open("sqlite", filepath.Join(dir, sqlitestore.FileName)+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE items SET doc = '{"key": ' WHERE key = 'inv-2'`); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"COMPANION_URL": "http://" + svc.Addr(), "COMPANION_TOKEN": "op-secret-0123456789"}
	out, err := run(t, env, "items", "list")
	if err != nil || !strings.Contains(out, "inv-1") || !strings.Contains(out, "1 item(s)\n1 more item(s) cannot be read from the ledger (corrupt) and are left out: inv-2\n") {
		t.Fatalf("items list: %v\n%s", err, out)
	}
	out, err = run(t, env, "items", "list", "--json")
	var page struct {
		Unreadable []string `json:"unreadable"`
	}
	if err != nil || json.Unmarshal([]byte(out), &page) != nil || len(page.Unreadable) != 1 || page.Unreadable[0] != "inv-2" {
		t.Fatalf("items list --json: %v\n%s", err, out)
	}
}
