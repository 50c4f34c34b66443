package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replaysafe/companion/cmd/companion/cli"
)

// withOwner adds a configuration file whose alerts go to owner alone.
func withOwner(t *testing.T, env map[string]string, owner string) map[string]string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cfg, []byte("alerts:\n  default_owner: "+owner+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env["COMPANION_CONFIG"] = cfg
	return env
}

// scopeLines are the start's log lines about the bot token's scopes.
func scopeLines(log string) []string {
	var out []string
	for line := range strings.SplitSeq(log, "\n") {
		if strings.Contains(line, "scope") {
			out = append(out, line)
		}
	}
	return out
}

// The start reads the scopes Slack granted the bot token (X-OAuth-Scopes of auth.test's answer) and
// says once what the alerts need and lack: every scope granted, nothing; a history scope missing, one
// warning naming it and what its lack costs, and the start goes on; only for the owners the
// configuration names (a user owner needs no channel history); chat:write missing, refused as a refused
// token (exit 1, nothing created), and SLACK_TOKEN_CHECK=warn starts with an error line; no header, one
// line saying the scopes were not checked, and the start goes on.
func TestServeChecksTheSlackBotTokensScopes(t *testing.T) {
	api := fakeSlackAuth(t).URL + "/api/"

	p, err := serveWithSlack(t, slackEnv(t, api, "xoxb-good"))
	if err != nil {
		t.Fatalf("every scope: %v\n%s", err, p.err)
	}
	if lines := scopeLines(p.err.String()); len(lines) != 0 || strings.Contains(p.err.String(), `"level":"WARN"`) {
		t.Errorf("every scope granted: the start says %q", lines)
	}
	p.Close()

	p, err = serveWithSlack(t, slackEnv(t, api, "xoxb-nohistory"))
	if err != nil {
		t.Fatalf("no channels:history: the start stopped: %v", err)
	}
	lines := scopeLines(p.err.String())
	if len(lines) != 1 {
		t.Fatalf("no channels:history: %d lines about scopes, want one:\n%s", len(lines), p.err)
	}
	for _, want := range []string{`"level":"WARN"`, "the Slack bot token lacks channels:history; starting anyway",
		"if an alert channel (C…) is public, its history cannot be read", "waits 10 minutes", "may then be posted twice",
		"reinstall the app", `"missing_scopes":"channels:history"`} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("no channels:history: the warning lacks %q: %s", want, lines[0])
		}
	}
	if msg, _, _ := strings.Cut(lines[0], `"missing_scopes"`); strings.Contains(msg, "im:history") || strings.Contains(msg, "chat:write") {
		t.Errorf("no channels:history: the warning names a scope the token has: %s", lines[0])
	}
	if status, _ := call(t, p, "GET", "/v1/items?limit=1", "", ""); status != 200 {
		t.Errorf("no channels:history: the ledger does not answer: %d", status)
	}
	p.Close()

	// Alerts that go to a user only need no channel's history; to a channel they do.
	p, err = serveWithSlack(t, withOwner(t, slackEnv(t, api, "xoxb-nohistory"), "U0ANNA"))
	if err != nil {
		t.Fatalf("a user owner: %v", err)
	}
	if lines := scopeLines(p.err.String()); len(lines) != 0 {
		t.Errorf("alerts to a user only: the start warns about %q", lines)
	}
	p.Close()
	p, err = serveWithSlack(t, withOwner(t, slackEnv(t, api, "xoxb-nohistory"), "C0OPS"))
	if err != nil {
		t.Fatalf("a channel owner: %v", err)
	}
	if lines := scopeLines(p.err.String()); len(lines) != 1 || !strings.Contains(lines[0], "lacks channels:history") {
		t.Errorf("alerts to a channel: the start says %q, want the warning about channels:history", lines)
	}
	p.Close()

	env := slackEnv(t, api, "xoxb-nochat")
	p, err = serveWithSlack(t, env)
	if err == nil {
		t.Fatalf("started with a token without chat:write:\n%s", p.err)
	}
	for _, want := range []string{`SLACK_BOT_TOKEN: the bot token of bot "companion" (U0BOT) in workspace "Acme" (T0ACME) lacks the scope chat:write`,
		"(Slack names its scopes: im:write,im:history,channels:history,groups:history)", "no alert can be posted or updated",
		"Nothing was started", "Add chat:write under the app's OAuth & Permissions", "reinstall the app", "SLACK_TOKEN_CHECK=warn",
		"unset SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("no chat:write: the refusal lacks %q: %v", want, err)
		}
	}
	if cli.ExitCode(err) != 1 {
		t.Errorf("no chat:write: exit code %d, want 1", cli.ExitCode(err))
	}
	if _, statErr := os.Stat(env["COMPANION_DATA_DIR"]); statErr == nil {
		t.Errorf("no chat:write: the refused start created the data dir")
	}

	t.Log("REFUSAL ", err)
	env["SLACK_TOKEN_CHECK"] = "warn"
	p, err = serveWithSlack(t, env)
	t.Log("WARNLOG ", p.err.String())
	if err != nil {
		t.Fatalf("no chat:write, SLACK_TOKEN_CHECK=warn: did not start: %v", err)
	}
	for _, want := range []string{`"level":"ERROR"`, "lacks the scope chat:write", "starting anyway (SLACK_TOKEN_CHECK=warn)",
		"no alert can be posted or updated", "the alerts wait in the ledger",
		"Add chat:write under the app's OAuth & Permissions → Bot Token Scopes and reinstall the app to the workspace",
		`(the bot token LACKS chat:write: no alert is posted until it is added)`} {
		if !strings.Contains(p.err.String(), want) {
			t.Errorf("no chat:write, SLACK_TOKEN_CHECK=warn: the log lacks %q:\n%s", want, p.err)
		}
	}
	p.Close()

	p, err = serveWithSlack(t, slackEnv(t, api, "xoxb-noheader"))
	if err != nil {
		t.Fatalf("no header: the start stopped: %v", err)
	}
	lines = scopeLines(p.err.String())
	if len(lines) != 1 || !strings.Contains(lines[0], "the Slack bot token's scopes were not checked: Slack's answer did not name them") ||
		strings.Contains(lines[0], `"level":"WARN"`) {
		t.Errorf("no header: the start says %q, want one line that the scopes were not checked", lines)
	}
	if want := `alerts Slack ` + api + ` as bot \"companion\" (U0BOT)`; !strings.Contains(p.err.String(), want) {
		t.Errorf("no header: the start line does not name the bot:\n%s", p.err)
	}
	p.Close()
}

// A token without chat:write that lacks a history scope too: the refusal names both, to be added in one
// reinstall, and no line before it says "starting anyway, and the alerts are posted" (a newcomer read
// that, then "Nothing was started"). With SLACK_TOKEN_CHECK=warn the one error line names both too.
func TestServeRefusingATokenWithoutChatWriteSaysNothingOfStartingAnyway(t *testing.T) {
	api := fakeSlackAuth(t).URL + "/api/"
	env := slackEnv(t, api, "xoxb-imonly")
	p, err := serveWithSlack(t, env)
	if err == nil {
		t.Fatalf("started with a token without chat:write:\n%s", p.err)
	}
	for _, want := range []string{"lacks the scope chat:write", "Nothing was started",
		"it also lacks channels:history, groups:history, which the alerts' owners need too",
		"Add chat:write, channels:history, groups:history under the app's OAuth & Permissions"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("no chat:write nor channel history: the refusal lacks %q: %v", want, err)
		}
	}
	if strings.Contains(p.err.String(), "starting anyway") || strings.Contains(p.err.String(), `"level":"WARN"`) {
		t.Errorf("a refused start logged a warning that it starts anyway:\n%s", p.err)
	}

	env["SLACK_TOKEN_CHECK"] = "warn"
	p, err = serveWithSlack(t, env)
	if err != nil {
		t.Fatalf("SLACK_TOKEN_CHECK=warn: did not start: %v", err)
	}
	lines := scopeLines(p.err.String())
	if len(lines) < 1 || !strings.Contains(lines[0], `"level":"ERROR"`) || !strings.Contains(lines[0], "it also lacks channels:history, groups:history") ||
		strings.Contains(p.err.String(), "the alerts are posted, but") {
		t.Errorf("SLACK_TOKEN_CHECK=warn: want one error line naming every missing scope, and no line saying the alerts are posted:\n%s", p.err)
	}
	p.Close()
}

// A token Slack lets post is never refused for its scopes: a legacy bot integration's (identify,bot:basic),
// a classic app's user token (chat:write:bot), a header a proxy blanked (not checked); a token with only
// chat:write's variants (chat:write.public) lacks chat:write by Slack's docs, but that is not certain: a
// warning naming it, and the start goes on.
func TestServeRefusesNoTokenThatMayPost(t *testing.T) {
	api := fakeSlackAuth(t).URL + "/api/"
	for _, c := range []struct {
		token, says string
	}{
		{"xoxb-legacybot", ""},
		{"xoxp-classic", ""},
		{"xoxb-blank", "the Slack bot token's scopes were not checked: Slack's answer did not name them"},
		{"xoxb-publiconly", "the Slack bot token names chat:write.public, chat:write.customize but not chat:write"},
	} {
		p, err := serveWithSlack(t, slackEnv(t, api, c.token))
		if err != nil {
			t.Errorf("%s: the start stopped: %v", c.token, err)
			continue
		}
		lines := scopeLines(p.err.String())
		switch {
		case c.says == "" && len(lines) != 0:
			t.Errorf("%s: the start says %q, want nothing about scopes", c.token, lines)
		case c.says != "" && (len(lines) != 1 || !strings.Contains(lines[0], c.says)):
			t.Errorf("%s: the start says %q, want one line saying %q", c.token, lines, c.says)
		}
		if strings.Contains(p.err.String(), "LACKS") || strings.Contains(p.err.String(), `"level":"ERROR"`) {
			t.Errorf("%s: the start says the token cannot post:\n%s", c.token, p.err)
		}
		p.Close()
	}
}

// sweep --once checks the scopes through the same check: without chat:write it sweeps nothing (exit 1)
// unless SLACK_TOKEN_CHECK=warn; a missing history scope warns and the sweep goes on.
func TestSweepOnceChecksTheSlackBotTokensScopes(t *testing.T) {
	api := fakeSlackAuth(t).URL + "/api/"
	sweep := sweepOnceCreate

	env := slackEnv(t, api, "xoxb-nochat")
	p, err := sweep(env)
	if err == nil || !strings.Contains(err.Error(), "lacks the scope chat:write") || !strings.Contains(err.Error(), "Nothing was started") {
		t.Fatalf("no chat:write: %v\n%s", err, p.out)
	}
	if _, statErr := os.Stat(env["COMPANION_DATA_DIR"]); statErr == nil {
		t.Errorf("no chat:write: the refused sweep created the data dir")
	}
	env["SLACK_TOKEN_CHECK"] = "warn"
	if p, err = sweep(env); err != nil {
		t.Fatalf("no chat:write, SLACK_TOKEN_CHECK=warn: %v", err)
	}
	if want := "(the bot token LACKS chat:write: no alert is posted until it is added)"; !strings.Contains(p.out.String(), want) {
		t.Errorf("no chat:write, SLACK_TOKEN_CHECK=warn: the sweep does not say %q:\n%s", want, p.out)
	}

	p, err = sweep(slackEnv(t, api, "xoxb-nohistory"))
	if err != nil {
		t.Fatalf("no channels:history: %v", err)
	}
	if lines := scopeLines(p.err.String()); len(lines) != 1 || !strings.Contains(lines[0], "lacks channels:history; starting anyway") {
		t.Errorf("no channels:history: the sweep says %q", lines)
	}
	if !strings.Contains(p.out.String(), "swept ") {
		t.Errorf("no channels:history: no sweep:\n%s", p.out)
	}
}
