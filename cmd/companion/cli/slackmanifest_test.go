package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/replaysafe/companion/alerts"
	"github.com/replaysafe/companion/cmd/companion/cli"
)

// slackManifest runs "companion slack manifest args…" and returns its standard output, standard error
// and error.
func slackManifest(t *testing.T, env map[string]string, args ...string) (string, string, error) {
	t.Helper()
	p := newProgram(env)
	err := p.Run(context.Background(), append([]string{"slack", "manifest"}, args...))
	p.Close()
	return p.out.String(), p.err.String(), err
}

// manifest is what the tests read of a printed manifest: every key of it is decoded, an unknown one is
// an error (so nothing the service does not use slips in).
type manifest struct {
	Display struct {
		Name        string `json:"name" yaml:"name"`
		Description string `json:"description" yaml:"description"`
	} `json:"display_information" yaml:"display_information"`
	Features struct {
		AppHome struct {
			HomeTab         bool `json:"home_tab_enabled" yaml:"home_tab_enabled"`
			MessagesTab     bool `json:"messages_tab_enabled" yaml:"messages_tab_enabled"`
			MessagesTabRead bool `json:"messages_tab_read_only_enabled" yaml:"messages_tab_read_only_enabled"`
		} `json:"app_home" yaml:"app_home"`
		BotUser struct {
			DisplayName  string `json:"display_name" yaml:"display_name"`
			AlwaysOnline *bool  `json:"always_online" yaml:"always_online"`
		} `json:"bot_user" yaml:"bot_user"`
	} `json:"features" yaml:"features"`
	OAuth struct {
		Scopes struct {
			Bot []string `json:"bot" yaml:"bot"`
		} `json:"scopes" yaml:"scopes"`
	} `json:"oauth_config" yaml:"oauth_config"`
	Settings struct {
		Interactivity struct {
			IsEnabled  bool   `json:"is_enabled" yaml:"is_enabled"`
			RequestURL string `json:"request_url" yaml:"request_url"`
		} `json:"interactivity" yaml:"interactivity"`
		SocketMode    *bool `json:"socket_mode_enabled" yaml:"socket_mode_enabled"`
		TokenRotation *bool `json:"token_rotation_enabled" yaml:"token_rotation_enabled"`
	} `json:"settings" yaml:"settings"`
}

func parseManifest(t *testing.T, format, out string) manifest {
	t.Helper()
	var m manifest
	switch format {
	case "json":
		dec := json.NewDecoder(strings.NewReader(out))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("the JSON manifest does not parse: %v\n%s", err, out)
		}
		if dec.More() {
			t.Fatalf("more than the manifest on standard output:\n%s", out)
		}
	case "yaml":
		dec := yaml.NewDecoder(strings.NewReader(out))
		dec.KnownFields(true)
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("the YAML manifest does not parse: %v\n%s", err, out)
		}
	}
	return m
}

func allScopeNames() []string { return scopeNames(alerts.SlackScopes()) }

func scopeNames(scopes []alerts.SlackScope) []string {
	var names []string
	for _, s := range scopes {
		names = append(names, s.Name)
	}
	return names
}

// writeConfig writes a configuration file and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "companion.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The manifest, JSON by default and YAML with --format yaml, is the only thing on standard output and
// parses with no unknown key: the app and bot named "companion" (or as the flags say), the bot not
// always online, exactly SlackScopes' names in their order (a scope added to alerts/scopes.go appears
// here untouched), interactivity on at <public URL>/v1/slack/actions, Socket Mode and token rotation
// off. Standard error says which scopes and where the URL came from, and what to do next.
func TestSlackManifestCarriesEveryScopeAndTheRequestURL(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"json", "yaml"} {
		args := []string{"--public-url", "https://companion.example.com"}
		if format == "yaml" {
			args = append(args, "--format", "yaml")
		}
		out, errOut, err := slackManifest(t, nil, args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", format, err, errOut)
		}
		m := parseManifest(t, format, out)
		if got, want := m.OAuth.Scopes.Bot, allScopeNames(); !slices.Equal(got, want) {
			t.Errorf("%s: scopes %q, want SlackScopes' %q", format, got, want)
		}
		switch {
		case m.Display.Name != "companion" || m.Features.BotUser.DisplayName != "companion":
			t.Errorf("%s: app %q, bot %q; want companion", format, m.Display.Name, m.Features.BotUser.DisplayName)
		case m.Display.Description != alerts.DefaultAppDescription:
			t.Errorf("%s: description %q", format, m.Display.Description)
		case m.Features.BotUser.AlwaysOnline == nil || *m.Features.BotUser.AlwaysOnline:
			t.Errorf("%s: always_online is not false", format)
		case !m.Settings.Interactivity.IsEnabled || m.Settings.Interactivity.RequestURL != "https://companion.example.com/v1/slack/actions":
			t.Errorf("%s: interactivity %+v", format, m.Settings.Interactivity)
		case m.Settings.SocketMode == nil || *m.Settings.SocketMode || m.Settings.TokenRotation == nil || *m.Settings.TokenRotation:
			t.Errorf("%s: socket mode or token rotation not written false", format)
		case !m.Features.AppHome.MessagesTab || !m.Features.AppHome.MessagesTabRead || m.Features.AppHome.HomeTab:
			t.Errorf("%s: app home %+v; want the read-only Messages tab alone", format, m.Features.AppHome)
		}
		for _, says := range []string{"every bot scope", "from --public-url", "From an app manifest", "SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET"} {
			if !strings.Contains(errOut, says) {
				t.Errorf("%s: standard error does not say %q:\n%s", format, says, errOut)
			}
		}
		if strings.Contains(errOut, "warning") {
			t.Errorf("%s: a public https URL warned:\n%s", format, errOut)
		}
	}

	out, _, err := slackManifest(t, nil, "--public-url", "https://ops.example.com/companion/", "--name", "Acme alerts",
		"--bot-name", "acme-alerts", "--description", "Alerts of Acme's workflows")
	if err != nil {
		t.Fatal(err)
	}
	m := parseManifest(t, "json", out)
	if m.Display.Name != "Acme alerts" || m.Features.BotUser.DisplayName != "acme-alerts" || m.Display.Description != "Alerts of Acme's workflows" ||
		m.Settings.Interactivity.RequestURL != "https://ops.example.com/companion/v1/slack/actions" {
		t.Errorf("flags: %+v", m)
	}
}

// The manifest reads of the configuration file only the owners and public_url: a file whose token and
// lookup secrets are not set yet (the app is made before the deployment's secrets exist), and whose other
// settings the service would refuse, still gives its manifest, with the scopes its owners need. A
// misspelt field is still refused: it may be an owner.
func TestSlackManifestReadsOnlyTheOwnersAndThePublicURL(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, `public_url: https://c.example.com
defaults:
  owner: U024BE7LH
  retention: 1h
destinations:
  crm:
    escalate_to: C024BE91L
    lookup:
      url: https://api.crm.example/v2/deals?reference={reference}
      headers:
        Authorization: {env: CRM_LOOKUP_AUTH_NOT_SET}
      found: {status: 200, path: results.0.id}
tokens:
  - {name: ops, tenant: default, role: operator, secret_env: COMPANION_OPS_SECRET_NOT_SET}
`)
	out, errOut, err := slackManifest(t, nil, "--config", cfg)
	if err != nil {
		t.Fatalf("a config whose secrets are not set: %v\n%s", err, errOut)
	}
	m := parseManifest(t, "json", out)
	if got, want := m.OAuth.Scopes.Bot, scopeNames(alerts.NeededScopes([]string{"U024BE7LH", "C024BE91L"})); !slices.Equal(got, want) {
		t.Errorf("scopes %q, want those of a user and a channel owner %q", got, want)
	}
	if m.Settings.Interactivity.RequestURL != "https://c.example.com/v1/slack/actions" {
		t.Errorf("request URL %q", m.Settings.Interactivity.RequestURL)
	}
	// serve refuses the same file, naming what it lacks.
	if err := cli.ReadConfig(cfg, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "COMPANION_OPS_SECRET_NOT_SET") {
		t.Errorf("the service's loading of the same file: %v, want a refusal naming the unset secret", err)
	}
	typo := writeConfig(t, "public_url: https://c.example.com\ndestinations:\n  crm:\n    ownr: U1\n")
	if _, _, err := slackManifest(t, nil, "--config", typo); err == nil || !strings.Contains(err.Error(), "ownr") {
		t.Errorf("a misspelt owner: %v, want a refusal naming it", err)
	}
}

// The public URL is --public-url, else COMPANION_PUBLIC_URL, else the config file's public_url (given
// by --config or COMPANION_CONFIG), and standard error names the one used.
func TestSlackManifestPublicURLPrecedence(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, "public_url: https://from-file.example.com\n")
	for _, c := range []struct {
		name   string
		env    map[string]string
		args   []string
		want   string
		source string
	}{
		{"flag alone", nil, []string{"--public-url", "https://from-flag.example.com"}, "https://from-flag.example.com", "--public-url"},
		{"environment alone", map[string]string{"COMPANION_PUBLIC_URL": "https://from-env.example.com"}, nil, "https://from-env.example.com", "COMPANION_PUBLIC_URL"},
		{"file alone", nil, []string{"--config", cfg}, "https://from-file.example.com", "public_url in " + cfg},
		{"file by COMPANION_CONFIG", map[string]string{"COMPANION_CONFIG": cfg}, nil, "https://from-file.example.com", "public_url in " + cfg},
		{"environment over file", map[string]string{"COMPANION_PUBLIC_URL": "https://from-env.example.com"}, []string{"--config", cfg},
			"https://from-env.example.com", "COMPANION_PUBLIC_URL"},
		{"flag over both", map[string]string{"COMPANION_PUBLIC_URL": "https://from-env.example.com"},
			[]string{"--config", cfg, "--public-url", "https://from-flag.example.com"}, "https://from-flag.example.com", "--public-url"},
	} {
		out, errOut, err := slackManifest(t, c.env, c.args...)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := parseManifest(t, "json", out).Settings.Interactivity.RequestURL; got != c.want+"/v1/slack/actions" {
			t.Errorf("%s: request URL %q, want %s/v1/slack/actions", c.name, got, c.want)
		}
		if !strings.Contains(errOut, "from "+c.source+".") {
			t.Errorf("%s: standard error does not name %q:\n%s", c.name, c.source, errOut)
		}
	}
}

// With a configuration file the manifest asks only for the scopes its owners need, says so on standard
// error and names the scopes left out; --all-scopes asks for all; a file that names no owner asks for
// all (a before-write's owner can be of any kind).
func TestSlackManifestScopesFollowTheConfigsOwners(t *testing.T) {
	t.Parallel()
	users := writeConfig(t, "public_url: https://c.example.com\nalerts:\n  default_owner: U024BE7LH\n")
	out, errOut, err := slackManifest(t, nil, "--config", users)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := parseManifest(t, "json", out).OAuth.Scopes.Bot, []string{"chat:write", "im:write", "im:history"}; !slices.Equal(got, want) {
		t.Errorf("user owner: scopes %q, want %q", got, want)
	}
	for _, says := range []string{"only the scopes the owners of " + users + " need", "channels:history, groups:history", "--all-scopes"} {
		if !strings.Contains(errOut, says) {
			t.Errorf("user owner: standard error does not say %q:\n%s", says, errOut)
		}
	}

	out, errOut, err = slackManifest(t, nil, "--config", users, "--all-scopes")
	if err != nil {
		t.Fatal(err)
	}
	if got := parseManifest(t, "json", out).OAuth.Scopes.Bot; !slices.Equal(got, allScopeNames()) || !strings.Contains(errOut, "every bot scope") {
		t.Errorf("--all-scopes: scopes %q\n%s", got, errOut)
	}

	channel := writeConfig(t, "public_url: https://c.example.com\ndefaults:\n  owner: C024BE91L\n")
	out, _, err = slackManifest(t, nil, "--config", channel)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := parseManifest(t, "json", out).OAuth.Scopes.Bot, []string{"chat:write", "channels:history", "groups:history"}; !slices.Equal(got, want) {
		t.Errorf("channel owner: scopes %q, want %q", got, want)
	}

	none := writeConfig(t, "public_url: https://c.example.com\n")
	out, errOut, err = slackManifest(t, nil, "--config", none)
	if err != nil {
		t.Fatal(err)
	}
	if got := parseManifest(t, "json", out).OAuth.Scopes.Bot; !slices.Equal(got, allScopeNames()) || !strings.Contains(errOut, "names no owner") {
		t.Errorf("no owner: scopes %q\n%s", got, errOut)
	}
}

// What cannot make a working app is refused with exit 2, nothing on standard output, and a message that
// says what to do: no public URL (naming its three sources), an http one (localhost too: Slack sends
// interactions only to https, and cannot reach this machine anyway), one that is no URL, an unknown
// format, a bot name Slack does not allow (with one it does), a too long app name. A broken config file
// is an error of its own (exit 1, naming the file). "slack" alone or with an unknown subcommand is a
// usage mistake. An https URL Slack cannot reach (localhost, a private address) is printed with a warning.
func TestSlackManifestRefusals(t *testing.T) {
	t.Parallel()
	httpFile := writeConfig(t, "public_url: http://c.example.com\n")
	broken := writeConfig(t, "public_url: https://c.example.com\nalerts:\n  default_ownr: U1\n")
	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
		exit int
		says []string
	}{
		{"no public URL", nil, nil, 2, []string{"no public URL", "--public-url", "COMPANION_PUBLIC_URL", "public_url:",
			"No public address yet (a try-out)? Alerts are posted without one, only their buttons need it: create the app by hand"}},
		{"http", nil, []string{"--public-url", "http://c.example.com"}, 2, []string{`--public-url "http://c.example.com" is not https`, "reverse proxy"}},
		{"http on localhost", nil, []string{"--public-url", "http://localhost:8080"}, 2, []string{"is not https", "tunnel"}},
		{"http from the environment", map[string]string{"COMPANION_PUBLIC_URL": "http://c.example.com"}, nil, 2, []string{"COMPANION_PUBLIC_URL", "is not https"}},
		{"http from the file", nil, []string{"--config", httpFile}, 2, []string{"public_url in " + httpFile, "is not https"}},
		{"not a URL", nil, []string{"--public-url", "companion.example.com"}, 2, []string{"not an absolute http(s) URL"}},
		{"a query", nil, []string{"--public-url", "https://c.example.com/?a=1"}, 2, []string{"no query"}},
		{"format", nil, []string{"--public-url", "https://c.example.com", "--format", "toml"}, 2, []string{`--format: "toml" is not json or yaml`}},
		{"bot name", nil, []string{"--public-url", "https://c.example.com", "--bot-name", "Companion Bot"}, 2, []string{"--bot-name", `"companion-bot"`}},
		{"app name", nil, []string{"--public-url", "https://c.example.com", "--name", strings.Repeat("n", 36)}, 2, []string{"--name", "at most 35"}},
		{"broken config", nil, []string{"--config", broken}, 1, []string{broken, "default_ownr"}},
	} {
		out, errOut, err := slackManifest(t, c.env, c.args...)
		if code := cli.ExitCode(err); code != c.exit {
			t.Errorf("%s: exit %d (%v), want %d", c.name, code, err, c.exit)
			continue
		}
		for _, says := range c.says {
			if !strings.Contains(err.Error(), says) {
				t.Errorf("%s: %q does not say %q", c.name, err, says)
			}
		}
		if out != "" || errOut != "" {
			t.Errorf("%s: printed %q / %q", c.name, out, errOut)
		}
	}

	for _, args := range [][]string{{"slack"}, {"slack", "manifests"}} {
		p := newProgram(nil)
		err := p.Run(context.Background(), args)
		if cli.ExitCode(err) != 2 || p.out.String() != "" {
			t.Errorf("%v: exit %d (%v), stdout %q", args, cli.ExitCode(err), err, p.out)
		}
		if len(args) == 1 && !strings.Contains(p.err.String(), "usage: companion slack manifest") {
			t.Errorf("slack alone: no usage on standard error:\n%s", p.err)
		}
	}

	for _, base := range []string{"https://localhost:8443", "https://127.0.0.1", "https://10.1.2.3", "https://dev.localhost"} {
		out, errOut, err := slackManifest(t, nil, "--public-url", base)
		if err != nil || !bytes.HasPrefix([]byte(out), []byte("{")) || !strings.Contains(errOut, "warning: ") || !strings.Contains(errOut, "not an address Slack's servers can reach") {
			t.Errorf("%s: %v; stderr %s", base, err, errOut)
		}
	}
}
