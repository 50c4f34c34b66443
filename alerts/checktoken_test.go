package alerts_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/replaysafe/companion/alerts"
)

// The bot token is checked with auth.test: a good one names the bot and the workspace; one Slack refuses
// is ErrTokenRefused with Slack's word and what to do; anything else (no answer, a rate limit, Slack's
// own failure) leaves the token unchecked and is not ErrTokenRefused.
func TestCheckToken(t *testing.T) {
	t.Parallel()
	f := newFakeSlack(t)
	withToken := func(token string) *alerts.Slack {
		s, err := alerts.NewSlack(alerts.SlackConfig{BotToken: token, SigningSecret: signingSecret, APIURL: f.apiURL()})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	id, err := f.notifier(t).CheckToken(t.Context())
	if err != nil {
		t.Fatalf("a good token: %v", err)
	}
	want := alerts.SlackIdentity{Team: "Acme", TeamID: "T0ACME", User: "companion", UserID: "U0BOT", BotID: "B0BOT", TeamURL: "https://acme.slack.com/"}
	if !reflect.DeepEqual(id, want) {
		t.Fatalf("identity %+v, want %+v", id, want)
	}
	if got := id.String(); got != `bot "companion" (U0BOT) in workspace "Acme" (T0ACME)` {
		t.Errorf("identity reads %q", got)
	}
	id.BotID = ""
	if got := id.String(); !strings.Contains(got, `user "companion" (U0BOT, a person's token, not a bot's)`) {
		t.Errorf("a user token's identity does not say it is not a bot's: %q", got)
	}

	refusals := []struct {
		name, token, slackSays string
		want                   []string
	}{
		{"a typo", "xoxb-tset", "", []string{"invalid_auth", "Bot User OAuth Token (xoxb-…)", "OAuth & Permissions"}},
		{"revoked", "xoxb-test", "token_revoked", []string{"token_revoked", "revoked"}},
		{"the app uninstalled", "xoxb-test", "account_inactive", []string{"account_inactive", "reinstall the app"}},
		{"expired by rotation", "xoxb-test", "token_expired", []string{"token_expired", "rotation"}},
		{"an app-level token", "xapp-1", "not_allowed_token_type", []string{"not_allowed_token_type", "xapp-"}},
	}
	for _, c := range refusals {
		f.mu.Lock()
		f.authError = c.slackSays
		f.mu.Unlock()
		_, err := withToken(c.token).CheckToken(t.Context())
		var slackErr slack.SlackErrorResponse
		if !errors.Is(err, alerts.ErrTokenRefused) || !errors.As(err, &slackErr) {
			t.Errorf("%s: %v; want ErrTokenRefused wrapping Slack's answer", c.name, err)
			continue
		}
		for _, w := range append(c.want, "slack auth.test") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", c.name, err, w)
			}
		}
		if strings.Contains(err.Error(), c.token) {
			t.Errorf("%s: the error shows the token: %q", c.name, err)
		}
	}

	unchecked := []struct {
		name      string
		slackSays string
		status    int
	}{
		{"Slack's own failure", "internal_error", 0},
		{"rate limited", "", http.StatusTooManyRequests},
		{"Slack down", "", http.StatusServiceUnavailable},
	}
	for _, c := range unchecked {
		f.mu.Lock()
		f.authError, f.authStatus = c.slackSays, c.status
		f.mu.Unlock()
		if _, err := f.notifier(t).CheckToken(t.Context()); err == nil || errors.Is(err, alerts.ErrTokenRefused) {
			t.Errorf("%s: %v; want an error that is not ErrTokenRefused", c.name, err)
		}
	}
	f.mu.Lock()
	f.authError, f.authStatus = "", 0
	f.mu.Unlock()

	f.srv.Close() // nothing answers
	if _, err := f.notifier(t).CheckToken(t.Context()); err == nil || errors.Is(err, alerts.ErrTokenRefused) {
		t.Errorf("Slack unreachable: %v; want an error that is not ErrTokenRefused", err)
	}
}

// A Slack that does not answer holds the check no longer than its context.
func TestCheckTokenEndsWithItsContext(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer srv.Close()
	defer close(release) // before Close, which waits for the handler
	s, err := alerts.NewSlack(alerts.SlackConfig{BotToken: "xoxb-test", SigningSecret: signingSecret, APIURL: srv.URL + "/api/"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err = s.CheckToken(ctx)
	if err == nil || errors.Is(err, alerts.ErrTokenRefused) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a Slack that does not answer: %v; want the context's deadline", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("the check took %s past a 200 ms context", took)
	}
}
