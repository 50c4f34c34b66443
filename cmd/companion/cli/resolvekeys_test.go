package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/replaysafe/companion/cmd/companion/cli"
)

// runWithStdin runs one command of the CLI with stdin as its standard input.
func runWithStdin(t *testing.T, env map[string]string, stdin string, args ...string) (string, error) {
	t.Helper()
	p := newProgram(env)
	p.Stdin = strings.NewReader(stdin)
	err := p.Run(context.Background(), args)
	p.Close()
	return p.out.String(), err
}

// TestItemsResolveSeveralKeys: items resolve KEY KEY… and - (the keys from standard input) resolve each
// key with its own request, one line each, go on past a key that fails and exit 1 when one did.
func TestItemsResolveSeveralKeys(t *testing.T) {
	svc := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": t.TempDir(),
		"COMPANION_TOKENS": "wf:acme:workflow:wf-secret-0123456789,anna:acme:operator:op-secret-0123456789", "COMPANION_SWEEP_EVERY": "@every 1h"})
	const wf = "wf-secret-0123456789"
	for _, key := range []string{"k1", "k2", "k4", "k5", "k6", "k7", "p1", "p2"} {
		_, a := call(t, svc, "POST", "/v1/before-write", wf, `{"key":"`+key+`","payload":{"n":1},"batch_id":"run-`+key[:1]+`"}`)
		call(t, svc, "POST", "/v1/after-write", wf, `{"key":"`+key+`","claim":"`+a["claim"].(string)+`","outcome":"unknown","error":{"class":"timeout"}}`)
	}
	call(t, svc, "POST", "/v1/before-write", wf, `{"key":"k3","payload":{"n":1}}`) // in flight: resolve answers 409
	env := map[string]string{"COMPANION_URL": "http://" + svc.Addr(), "COMPANION_TOKEN": "op-secret-0123456789"}
	state := func(key string) (string, map[string]any) {
		t.Helper()
		_, it := call(t, svc, "GET", "/v1/items/"+key, "op-secret-0123456789", "")
		s, _ := it["state"].(string)
		return s, it
	}
	const evidence = "bench item cut off by a kill: no destination"

	// Mistakes in the command line resolve nothing, whatever the keys: exit 2.
	for name, c := range map[string]struct {
		stdin string
		args  []string
		want  string
	}{
		"evidence too short": {"", []string{"k5", "k6", "--outcome", "succeeded", "--evidence", " short   "}, "at least 10 characters"},
		"no evidence":        {"", []string{"k5", "k6", "--outcome", "succeeded"}, "--evidence is required"},
		"no outcome":         {"", []string{"k5", "k6", "--evidence", evidence}, "--outcome must be"},
		"no key":             {"", []string{"--outcome", "succeeded", "--evidence", evidence}, "give the item's KEY"},
		"stdin empty":        {"\n  \n", []string{"-", "--outcome", "succeeded", "--evidence", evidence}, "read no keys from standard input"},
		"stdin twice":        {"k5\nk6\n", []string{"-", "-", "--outcome", "succeeded", "--evidence", evidence}, "give - (read the keys from standard input) once"},
		"one external id":    {"", []string{"k5", "k6", "--outcome", "succeeded", "--evidence", evidence, "--external-id", "INV-1"}, "with one KEY only"},
		"unknown flag":       {"", []string{"k5", "--outcome", "succeeded", "k6", "--evidense", evidence}, "unknown flag --evidense"},
	} {
		out, err := runWithStdin(t, env, c.stdin, append([]string{"items", "resolve"}, c.args...)...)
		if cli.ExitCode(err) != 2 || !strings.Contains(err.Error(), c.want) || out != "" {
			t.Errorf("%s: %v (exit %d), printed %q; want a usage error saying %q", name, err, cli.ExitCode(err), out, c.want)
		}
	}
	for _, k := range []string{"k5", "k6"} {
		if s, _ := state(k); s != "unknown" {
			t.Fatalf("a usage mistake resolved %s: now %s", k, s)
		}
	}

	// Keys on the command line, before and between the flags; k3 fails (in flight), the others are resolved.
	out, err := run(t, env, "items", "resolve", "k1", "k3", "--outcome", "succeeded", "k2", "--evidence", evidence)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if cli.ExitCode(err) != 1 || len(lines) != 3 || lines[0] != "resolved k1 as succeeded: now succeeded" ||
		!strings.HasPrefix(lines[1], "k3 not resolved: conflict (HTTP 409): ") || lines[2] != "resolved k2 as succeeded: now succeeded" {
		t.Fatalf("items resolve k1 k3 k2: %v (exit %d)\n%s", err, cli.ExitCode(err), out)
	}
	if !strings.Contains(err.Error(), "1 of 3 keys not resolved (k3); 2 resolved (or already were)") {
		t.Errorf("the error does not name the key that failed: %v", err)
	}
	for _, k := range []string{"k1", "k2"} {
		s, it := state(k)
		r, _ := it["resolution"].(map[string]any)
		if s != "succeeded" || r == nil || r["evidence"] != evidence || r["by"] != "anna" {
			t.Fatalf("%s after items resolve: %s %v", k, s, it)
		}
	}
	if s, _ := state("k3"); s != "in_flight" {
		t.Fatalf("k3 is %s", s)
	}

	// - reads the keys from standard input: blank lines and surrounding spaces (a \r too) are skipped, a
	// key given twice is resolved once, and an already resolved key says so and is no failure.
	out, err = runWithStdin(t, env, "\nk4\n\n  k1 \r\nk4\n", "items", "resolve", "-", "--outcome", "succeeded", "--evidence", evidence)
	lines = strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if err != nil || len(lines) != 2 || lines[0] != "resolved k4 as succeeded: now succeeded" ||
		!strings.HasPrefix(lines[1], "k1 was already resolved as succeeded by anna at ") {
		t.Fatalf("items resolve -: %v\n%s", err, out)
	}

	// The pipeline of docs/operators.md: items list --json, its keys (what jq -r '.items[].key' prints), resolve -.
	out, err = run(t, env, "items", "list", "--batch", "run-p", "--state", "unknown", "--all", "--json")
	var page struct {
		Items []struct {
			Key string `json:"key"`
		} `json:"items"`
	}
	if err != nil || json.Unmarshal([]byte(out), &page) != nil || len(page.Items) != 2 {
		t.Fatalf("items list --json: %v\n%s", err, out)
	}
	var keys strings.Builder
	for _, it := range page.Items {
		keys.WriteString(it.Key + "\n")
	}
	out, err = runWithStdin(t, env, keys.String(), "items", "resolve", "-", "--outcome", "not_committed", "--evidence", "checked billing: no invoice for either")
	if err != nil || strings.Count(out, " as not_committed: now failed\n") != 2 {
		t.Fatalf("items resolve - from items list --json: %v\n%s", err, out)
	}
	for _, k := range []string{"p1", "p2"} {
		if s, _ := state(k); s != "failed" {
			t.Fatalf("%s after not_committed: %s", k, s)
		}
	}

	// --json with several keys: one line of JSON per key, the API's error shape for a key that failed.
	out, err = run(t, env, "items", "resolve", "--json", "k5", "nope", "--outcome", "succeeded", "--evidence", evidence)
	lines = strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	var first, second map[string]any
	if cli.ExitCode(err) != 1 || len(lines) != 2 || json.Unmarshal([]byte(lines[0]), &first) != nil || json.Unmarshal([]byte(lines[1]), &second) != nil {
		t.Fatalf("items resolve --json k5 nope: %v\n%s", err, out)
	}
	e, _ := second["error"].(map[string]any)
	if first["key"] != "k5" || first["state"] != "succeeded" || second["key"] != "nope" || e["code"] != "not_found" || e["status"] != 404.0 {
		t.Fatalf("items resolve --json k5 nope:\n%s", out)
	}

	// Many failures: a line each, and the error names the first ten and how many more.
	var missing []string
	for i := 1; i <= 12; i++ {
		missing = append(missing, fmt.Sprintf("gone-%02d", i))
	}
	out, err = runWithStdin(t, env, strings.Join(missing, "\n"), "items", "resolve", "-", "--outcome", "succeeded", "--evidence", evidence)
	if cli.ExitCode(err) != 1 || strings.Count(out, " not resolved: not_found (HTTP 404)") != 12 ||
		!strings.Contains(err.Error(), "12 of 12 keys not resolved (gone-01, gone-02, ") || !strings.Contains(err.Error(), "gone-10 and 2 more)") {
		t.Fatalf("items resolve - with 12 missing keys: %v\n%s", err, out)
	}

	// A refused token is every key's answer: the run stops at the first key and says how many were not tried.
	bad := map[string]string{"COMPANION_URL": env["COMPANION_URL"], "COMPANION_TOKEN": "wf-secret-0123456789"}
	out, err = run(t, bad, "items", "resolve", "k6", "k7", "--outcome", "succeeded", "--evidence", evidence)
	if cli.ExitCode(err) != 1 || !strings.HasPrefix(out, "k6 not resolved: forbidden (HTTP 403): ") || strings.Count(out, "\n") != 1 ||
		!strings.Contains(err.Error(), "stopped at k6 (key 1 of 2)") || !strings.Contains(err.Error(), "1 not tried") {
		t.Fatalf("items resolve with a workflow token: %v\n%s", err, out)
	}
	// So is a service that cannot be reached.
	out, err = run(t, map[string]string{"COMPANION_URL": "http://127.0.0.1:1"}, "items", "resolve", "k6", "k7", "k5", "--outcome", "succeeded", "--evidence", evidence)
	if cli.ExitCode(err) != 1 || !strings.HasPrefix(out, "k6 not resolved: cannot reach companion at http://127.0.0.1:1") || strings.Count(out, "\n") != 1 ||
		!strings.Contains(err.Error(), "stopped at k6 (key 1 of 3)") || !strings.Contains(err.Error(), "0 resolved before it, 2 not tried") {
		t.Fatalf("items resolve with nothing at COMPANION_URL: %v\n%s", err, out)
	}
	for _, k := range []string{"k6", "k7"} {
		if s, _ := state(k); s != "unknown" {
			t.Fatalf("%s with a refused token: %s", k, s)
		}
	}
}
