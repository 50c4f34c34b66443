package cli_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/cmd/companion/cli"
)

// allScopes are the bot scopes the alerts need (docs/slack.md), and one more a real app may have.
const allScopes = "chat:write,chat:write.public,im:write,im:history,channels:history,groups:history"

// botScopes are the scopes each of fakeSlackAuth's bot tokens was granted, as Slack sends them in the
// X-OAuth-Scopes header of every answer; a token not listed gets no such header.
var botScopes = map[string]string{
	"xoxb-good":      allScopes,
	"xoxp-person":    allScopes,
	"xoxb-nohistory": "chat:write,im:write,im:history,groups:history", // no channels:history
	"xoxb-nochat":    "im:write,im:history,channels:history,groups:history",
	"xoxb-imonly":    "im:write,im:history", // neither chat:write nor a channel's history
	// Tokens Slack lets post that name no chat:write: a legacy bot integration's, a classic app's user
	// token; one whose header a proxy blanked; one with only chat:write's variants (not certain).
	"xoxb-legacybot":  "identify,bot:basic",
	"xoxp-classic":    "chat:write:bot,im:write,im:history,channels:history,groups:history",
	"xoxb-blank":      "",
	"xoxb-publiconly": "chat:write.public,chat:write.customize,im:write,im:history,channels:history,groups:history",
}

// fakeSlackAuth plays Slack's auth.test for the start's token check: xoxb-good is the bot "companion" of
// workspace "Acme", xoxp-person a person's token, xoxb-nohistory, xoxb-nochat, xoxb-imonly and xoxb-noheader the same
// bot with fewer scopes or none named (botScopes); any other token is refused invalid_auth; every other
// method answers ok.
func fakeSlackAuth(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = r.ParseForm()
		token := r.PostForm.Get("token")
		if token == "" {
			token = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		}
		if scopes, ok := botScopes[token]; ok {
			w.Header().Set("X-OAuth-Scopes", scopes)
		}
		if !strings.HasSuffix(r.URL.Path, "/auth.test") {
			_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "channel": "D0OPS", "ts": "1.1"})
			return
		}
		answer := map[string]any{"ok": false, "error": "invalid_auth"}
		switch token {
		case "xoxb-good", "xoxb-nohistory", "xoxb-nochat", "xoxb-imonly", "xoxb-noheader", "xoxb-legacybot", "xoxb-blank", "xoxb-publiconly":
			answer = map[string]any{"ok": true, "url": "https://acme.slack.com/", "team": "Acme", "user": "companion",
				"team_id": "T0ACME", "user_id": "U0BOT", "bot_id": "B0BOT"}
		case "xoxp-person", "xoxp-classic":
			answer = map[string]any{"ok": true, "url": "https://acme.slack.com/", "team": "Acme", "user": "anna",
				"team_id": "T0ACME", "user_id": "U0ANNA"}
		}
		_ = json.NewEncoder(w).Encode(answer)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// slackEnv is serve's environment with Slack at apiURL and the bot token given.
func slackEnv(t *testing.T, apiURL, token string) map[string]string {
	return map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": filepath.Join(t.TempDir(), "data"),
		"COMPANION_SWEEP_EVERY": "@every 1h", "SLACK_BOT_TOKEN": token, "SLACK_SIGNING_SECRET": "signing", "SLACK_API_URL": apiURL}
}

// serve starts serve with SLACK_BOT_TOKEN token against Slack at apiURL; it returns the program or the
// start's error.
func serveWithSlack(t *testing.T, env map[string]string) (program, error) {
	t.Helper()
	p := newProgram(env)
	err := p.Run(context.Background(), []string{"serve"})
	if err != nil {
		p.Close()
		return p, err
	}
	t.Cleanup(func() { p.Close() })
	return p, nil
}

// The start asks Slack who the bot token is: the start line names the bot and its workspace; a person's
// token starts with a warning. A token Slack refuses stops the start (exit 1) before anything is opened:
// the error names Slack's word, what to do and the ways to start anyway, and leaves no data dir; with
// SLACK_TOKEN_CHECK=warn it starts and says loudly that the token was refused.
func TestServeChecksTheSlackBotTokenAtStart(t *testing.T) {
	slack := fakeSlackAuth(t)
	api := slack.URL + "/api/"

	p, err := serveWithSlack(t, slackEnv(t, api, "xoxb-good"))
	if err != nil {
		t.Fatalf("a good token: %v\n%s", err, p.err)
	}
	if want := `alerts Slack ` + api + ` as bot \"companion\" (U0BOT) in workspace \"Acme\" (T0ACME)`; !strings.Contains(p.err.String(), want) {
		t.Errorf("the start line does not name the bot (%s):\n%s", want, p.err)
	}
	p.Close()

	p, err = serveWithSlack(t, slackEnv(t, api, "xoxp-person"))
	if err != nil {
		t.Fatalf("a person's token: %v\n%s", err, p.err)
	}
	if !strings.Contains(p.err.String(), "SLACK_BOT_TOKEN is not a bot token") || !strings.Contains(p.err.String(), `"level":"WARN"`) {
		t.Errorf("a person's token starts without a warning:\n%s", p.err)
	}
	p.Close()

	env := slackEnv(t, api, "xoxb-typo")
	p, err = serveWithSlack(t, env)
	if err == nil {
		t.Fatalf("started with a token Slack refuses:\n%s", p.err)
	}
	for _, want := range []string{"SLACK_BOT_TOKEN: slack auth.test: the bot token was refused by Slack: invalid_auth",
		"Bot User OAuth Token (xoxb-…)", "Nothing was started", "SLACK_TOKEN_CHECK=warn", "unset SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal lacks %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "xoxb-typo") {
		t.Errorf("the refusal shows the token: %v", err)
	}
	if cli.ExitCode(err) != 1 {
		t.Errorf("exit code %d, want 1", cli.ExitCode(err))
	}
	if _, statErr := os.Stat(env["COMPANION_DATA_DIR"]); statErr == nil {
		t.Errorf("the refused start created the data dir")
	}

	env["SLACK_TOKEN_CHECK"] = "warn"
	p, err = serveWithSlack(t, env)
	if err != nil {
		t.Fatalf("SLACK_TOKEN_CHECK=warn did not start: %v", err)
	}
	for _, want := range []string{`"level":"ERROR"`, "SLACK_BOT_TOKEN was refused by Slack; starting anyway", "invalid_auth",
		"alerts Slack " + api + " (the bot token was REFUSED by Slack"} {
		if !strings.Contains(p.err.String(), want) {
			t.Errorf("SLACK_TOKEN_CHECK=warn: the log lacks %q:\n%s", want, p.err)
		}
	}
	p.Close()

	env["SLACK_TOKEN_CHECK"] = "off"
	if _, err := serveWithSlack(t, env); err == nil || !strings.Contains(err.Error(), `SLACK_TOKEN_CHECK="off": write refuse`) {
		t.Errorf("SLACK_TOKEN_CHECK=off: %v", err)
	}
}

// A Slack that cannot be asked proves nothing about the token and must not keep the ledger down: the
// start goes on, with a warning and the start line saying the token is unchecked; a Slack that does not
// answer delays it by no more than the check's timeout.
func TestServeStartsWhenSlackCannotBeAsked(t *testing.T) {
	p, err := serveWithSlack(t, slackEnv(t, "http://127.0.0.1:1/api/", "xoxb-1"))
	if err != nil {
		t.Fatalf("Slack unreachable: the start stopped: %v", err)
	}
	for _, want := range []string{"the Slack bot token could not be checked at the start; starting anyway", "connection refused",
		"asking Slack again every minute until it answers", // in words, not "every 1m0s"
		"alerts Slack http://127.0.0.1:1/api/ (bot token not checked at the start: "} {
		if !strings.Contains(p.err.String(), want) {
			t.Errorf("Slack unreachable: the log lacks %q:\n%s", want, p.err)
		}
	}
	if status, _ := call(t, p, "GET", "/v1/items?limit=1", "", ""); status != 200 {
		t.Errorf("the ledger does not answer: %d", status)
	}
	p.Close()

	defer cli.SetSlackCheckTimeout(300 * time.Millisecond)()
	release := make(chan struct{})
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer silent.Close()
	defer close(release)
	began := time.Now()
	p, err = serveWithSlack(t, slackEnv(t, silent.URL+"/api/", "xoxb-1"))
	if err != nil {
		t.Fatalf("Slack silent: the start stopped: %v", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("a silent Slack held the start %s (the check's timeout is 300 ms)", took)
	}
	if want := "slack auth.test: no answer within 300ms"; !strings.Contains(p.err.String(), want) {
		t.Errorf("Slack silent: the log lacks %q:\n%s", want, p.err)
	}
}

// A token Slack could not be asked about at the start is asked about again until Slack answers: the
// answer is logged, an error line when Slack refuses the token, and the service goes on either way.
func TestServeAsksSlackAgainUntilItAnswers(t *testing.T) {
	defer cli.SetSlackRecheckEvery(50 * time.Millisecond)()
	for _, c := range []struct {
		token string
		want  []string
	}{
		{"xoxb-typo", []string{`"level":"ERROR"`, "SLACK_BOT_TOKEN was refused by Slack (checked once Slack answered, after the start)", "invalid_auth"}},
		{"xoxb-good", []string{`Slack answered the check of the bot token: alerts are posted as bot \"companion\" (U0BOT)`}},
		{"xoxb-nochat", []string{`Slack answered the check of the bot token`, `"level":"ERROR"`, "lacks the scope chat:write",
			"no alert can be posted", "(checked once Slack answered, after the start)", "the service goes on, and the alerts wait in the ledger",
			"Add chat:write under the app's OAuth & Permissions → Bot Token Scopes and reinstall the app to the workspace"}},
	} {
		var mu sync.Mutex
		down, asked := true, 0
		auth := fakeSlackAuth(t)
		slack := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			asked++
			isDown := down
			mu.Unlock()
			if isDown {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			auth.Config.Handler.ServeHTTP(w, r)
		}))
		p, err := serveWithSlack(t, slackEnv(t, slack.URL+"/api/", c.token))
		if err != nil {
			t.Fatalf("%s: Slack down: the start stopped: %v", c.token, err)
		}
		if !strings.Contains(p.err.String(), "(bot token not checked at the start: slack auth.test: ") {
			t.Errorf("%s: the start line does not say the token is unchecked:\n%s", c.token, p.err)
		}
		time.Sleep(200 * time.Millisecond) // asked again while down: nothing more is logged
		mu.Lock()
		down = false
		againWhileDown := asked
		mu.Unlock()
		if againWhileDown < 2 {
			t.Errorf("%s: Slack was asked %d time(s) while down, want again every 50 ms", c.token, againWhileDown)
		}
		deadline := time.Now().Add(10 * time.Second)
		for !containsAll(p.err.String(), c.want) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if !containsAll(p.err.String(), c.want) {
			t.Errorf("%s: once Slack answered, the log lacks %q:\n%s", c.token, c.want, p.err)
		}
		mu.Lock()
		answered := asked
		mu.Unlock()
		time.Sleep(200 * time.Millisecond)
		mu.Lock()
		if asked != answered {
			t.Errorf("%s: Slack was asked again after it answered: %d, then %d", c.token, answered, asked)
		}
		mu.Unlock()
		if status, _ := call(t, p, "GET", "/v1/items?limit=1", "", ""); status != 200 {
			t.Errorf("%s: the ledger does not answer: %d", c.token, status)
		}
		p.Close() // before the pause between checks is restored
		slack.Close()
	}
}

// sweep --once posts alerts too, so it checks the bot token as serve does, through the same check: a
// token Slack refuses stops it (exit 1) before the ledger is opened, even with --create; with
// SLACK_TOKEN_CHECK=warn it sweeps with an error line; a good token is named on its alerts line; a Slack
// that cannot be asked only warns (and is not asked again: the sweep is over).
func TestSweepOnceChecksTheSlackBotToken(t *testing.T) {
	api := fakeSlackAuth(t).URL + "/api/"
	sweep := sweepOnceCreate

	p, err := sweep(slackEnv(t, api, "xoxb-good"))
	if err != nil {
		t.Fatalf("a good token: %v\n%s", err, p.err)
	}
	if want := `alerts to Slack ` + api + ` as bot "companion" (U0BOT) in workspace "Acme" (T0ACME)`; !strings.Contains(p.out.String(), want) {
		t.Errorf("the sweep does not name the bot (%s):\n%s", want, p.out)
	}

	env := slackEnv(t, api, "xoxb-typo")
	p, err = sweep(env)
	if err == nil {
		t.Fatalf("swept with a token Slack refuses:\n%s", p.out)
	}
	for _, want := range []string{"SLACK_BOT_TOKEN: slack auth.test: the bot token was refused by Slack: invalid_auth",
		"Bot User OAuth Token (xoxb-…)", "Nothing was started", "SLACK_TOKEN_CHECK=warn"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal lacks %q: %v", want, err)
		}
	}
	if cli.ExitCode(err) != 1 {
		t.Errorf("exit code %d, want 1", cli.ExitCode(err))
	}
	if _, statErr := os.Stat(env["COMPANION_DATA_DIR"]); statErr == nil {
		t.Errorf("the refused sweep created the data dir")
	}

	env["SLACK_TOKEN_CHECK"] = "warn"
	p, err = sweep(env)
	if err != nil {
		t.Fatalf("SLACK_TOKEN_CHECK=warn did not sweep: %v", err)
	}
	if want := "SLACK_BOT_TOKEN was refused by Slack; starting anyway"; !strings.Contains(p.err.String(), want) ||
		!strings.Contains(p.err.String(), `"level":"ERROR"`) {
		t.Errorf("SLACK_TOKEN_CHECK=warn: the log lacks an error line %q:\n%s", want, p.err)
	}
	if want := "alerts to Slack " + api + " (the bot token was REFUSED by Slack"; !strings.Contains(p.out.String(), want) {
		t.Errorf("SLACK_TOKEN_CHECK=warn: the sweep does not say %q:\n%s", want, p.out)
	}

	env["SLACK_TOKEN_CHECK"] = "off"
	if _, err := sweep(env); err == nil || !strings.Contains(err.Error(), `SLACK_TOKEN_CHECK="off": write refuse`) {
		t.Errorf("SLACK_TOKEN_CHECK=off: %v", err)
	}

	p, err = sweep(slackEnv(t, "http://127.0.0.1:1/api/", "xoxb-1"))
	if err != nil {
		t.Fatalf("Slack unreachable: the sweep stopped: %v", err)
	}
	if want := "the Slack bot token could not be checked at the start; starting anyway: "; !strings.Contains(p.err.String(), want) ||
		strings.Contains(p.err.String(), "asking Slack again") {
		t.Errorf("Slack unreachable: the log lacks %q, or promises to ask again:\n%s", want, p.err)
	}
	if want := "alerts to Slack http://127.0.0.1:1/api/ (bot token not checked at the start: "; !strings.Contains(p.out.String(), want) {
		t.Errorf("Slack unreachable: the sweep does not say %q:\n%s", want, p.out)
	}
}

func containsAll(s string, wants []string) bool {
	for _, w := range wants {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

// "companion items" without list, show or resolve is a usage mistake: its usage on standard error and
// exit 2, as every other one; "companion items --help" asked for it: standard output and exit 0.
func TestItemsWithoutSubcommandIsAUsageError(t *testing.T) {
	p := newProgram(map[string]string{})
	err := p.Run(context.Background(), []string{"items"})
	p.Close()
	if cli.ExitCode(err) != 2 || err == nil || !strings.Contains(err.Error(), "items: name a subcommand: list, show or resolve") {
		t.Errorf("companion items: %v (exit %d); want exit 2 naming the subcommands", err, cli.ExitCode(err))
	}
	if !strings.Contains(p.err.String(), "usage: companion items list|show|resolve") || p.out.String() != "" {
		t.Errorf("companion items: the usage is not on standard error alone:\nstdout:\n%s\nstderr:\n%s", p.out, p.err)
	}
	for _, help := range []string{"--help", "-h"} {
		p := newProgram(map[string]string{})
		err := p.Run(context.Background(), []string{"items", help})
		p.Close()
		if err != nil || !strings.Contains(p.out.String(), "usage: companion items list|show|resolve") {
			t.Errorf("companion items %s: %v\n%s", help, err, p.out)
		}
	}
}

// "companion templates" without render is the same mistake, and so is a subcommand it does not know.
func TestTemplatesWithoutSubcommandIsAUsageError(t *testing.T) {
	for _, args := range [][]string{{"templates"}, {"templates", "rendr"}} {
		p := newProgram(map[string]string{})
		err := p.Run(context.Background(), args)
		p.Close()
		if cli.ExitCode(err) != 2 || p.out.String() != "" {
			t.Errorf("%v: %v (exit %d), stdout %q; want exit 2 and nothing on standard output", args, err, cli.ExitCode(err), p.out)
		}
		if len(args) == 1 && !strings.Contains(p.err.String(), "usage: companion templates render") {
			t.Errorf("%v: no usage on standard error:\n%s", args, p.err)
		}
	}
}

// A --debug-addr already taken stops the start before the ledger is opened, as --addr does.
func TestDebugAddrInUseCreatesNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	dataDir := filepath.Join(t.TempDir(), "data")
	p := newProgram(map[string]string{"COMPANION_DATA_DIR": dataDir})
	err = p.Run(context.Background(), []string{"serve", "--addr", addr, "--debug-addr", ln.Addr().String()})
	if err == nil {
		p.Close()
		t.Fatal("started with --debug-addr in use")
	}
	p.Close()
	if !strings.Contains(err.Error(), "--debug-addr: cannot listen on "+ln.Addr().String()) {
		t.Errorf("error: %v", err)
	}
	if _, statErr := os.Stat(dataDir); statErr == nil {
		t.Errorf("a start stopped by a taken --debug-addr created the data dir")
	}
	// The service's own address, bound first, was given back.
	again, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the stopped start still holds --addr %s: %v", addr, err)
	}
	again.Close()
}

// sweepOnceCreate runs "companion sweep --once --create" with env, and returns the program (its output)
// once it is over.
func sweepOnceCreate(env map[string]string) (program, error) {
	p := newProgram(env)
	err := p.Run(context.Background(), []string{"sweep", "--once", "--create"})
	p.Close()
	return p, err
}
