package alerts_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/slack-go/slack"
	"go.yaml.in/yaml/v3"

	"github.com/replaysafe/companion/alerts"
)

func manifestParams() alerts.ManifestParams {
	return alerts.ManifestParams{Name: "companion", BotName: "companion",
		RequestURL: "https://companion.example.com/v1/slack/actions", Scopes: alerts.SlackScopes()}
}

// The manifest's JSON and YAML decode into slack-go's manifest types with no field left over (so every
// field name is one Slack knows), and both say the same: the app's name and description, the bot user
// (not always online), the scopes in SlackScopes' order, interactivity on at the request URL, Socket
// Mode and token rotation off, and nothing else (no events, no slash commands, no redirect URLs).
func TestAppManifestRoundTripsThroughSlackGo(t *testing.T) {
	t.Parallel()
	m, err := alerts.NewAppManifest(manifestParams())
	if err != nil {
		t.Fatal(err)
	}
	want := slack.Manifest{
		Display: slack.Display{Name: "companion", Description: alerts.DefaultAppDescription},
		Features: slack.Features{
			AppHome: slack.AppHome{MessagesTabEnabled: true, MessagesTabReadOnlyEnabled: true},
			BotUser: slack.BotUser{DisplayName: "companion", AlwaysOnline: false},
		},
		OAuthConfig: slack.OAuthConfig{Scopes: slack.OAuthScopes{Bot: scopeNames(alerts.SlackScopes())}},
		Settings: slack.Settings{Interactivity: &slack.Interactivity{IsEnabled: true,
			RequestUrl: "https://companion.example.com/v1/slack/actions"}},
	}

	js, err := m.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var fromJSON slack.Manifest
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fromJSON); err != nil {
		t.Fatalf("JSON into slack.Manifest: %v\n%s", err, js)
	}
	if !reflect.DeepEqual(fromJSON, want) {
		t.Errorf("JSON:\n%+v\nwant\n%+v", fromJSON, want)
	}

	ys, err := m.YAML()
	if err != nil {
		t.Fatal(err)
	}
	var fromYAML slack.Manifest
	ydec := yaml.NewDecoder(bytes.NewReader(ys))
	ydec.KnownFields(true)
	if err := ydec.Decode(&fromYAML); err != nil {
		t.Fatalf("YAML into slack.Manifest: %v\n%s", err, ys)
	}
	if !reflect.DeepEqual(fromYAML, want) {
		t.Errorf("YAML:\n%+v\nwant\n%+v", fromYAML, want)
	}

	// Fields slack-go's types leave out when false are written: Slack's export writes them, and a reader
	// of the manifest sees that the bot is not always online and that Socket Mode is off.
	for _, field := range []string{`"always_online": false`, `"socket_mode_enabled": false`, `"token_rotation_enabled": false`, `"is_enabled": true`} {
		if !bytes.Contains(js, []byte(field)) {
			t.Errorf("the JSON lacks %s:\n%s", field, js)
		}
	}
	for _, absent := range []string{"event_subscriptions", "slash_commands", "redirect_urls", "shortcuts", "user"} {
		if bytes.Contains(js, []byte(`"`+absent+`"`)) {
			t.Errorf("the JSON has %s, which the service does not use:\n%s", absent, js)
		}
	}
	// Every string value of the YAML is double-quoted; keys and booleans are not.
	for line := range strings.Lines(string(ys)) {
		_, value, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "- ")), ": ")
		item := strings.HasPrefix(strings.TrimSpace(line), "- ")
		switch {
		case item && !strings.HasPrefix(strings.TrimSpace(line), `- "`):
			t.Errorf("YAML list item not quoted: %q", line)
		case ok && value != "true" && value != "false" && !strings.HasPrefix(value, `"`):
			t.Errorf("YAML value not quoted: %q", line)
		case strings.HasPrefix(strings.TrimSpace(line), `"`):
			t.Errorf("YAML key quoted: %q", line)
		}
	}
}

// The manifest asks for exactly the scopes it is given, in their order: NeededScopes for user owners
// only asks for no channel history.
func TestAppManifestAsksForTheScopesItIsGiven(t *testing.T) {
	t.Parallel()
	p := manifestParams()
	p.Scopes = alerts.NeededScopes([]string{"U024BE7LH"})
	m, err := alerts.NewAppManifest(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.OAuth.Scopes.Bot, []string{"chat:write", "im:write", "im:history"}; !slices.Equal(got, want) {
		t.Errorf("scopes %q, want %q", got, want)
	}
}

// What Slack would refuse is refused here, naming the manifest's field and Slack's limit: an empty or
// too long name, a too long description, a bot name with characters Slack does not allow (with a name it
// does), a request URL that is not https, scopes without chat:write.
func TestAppManifestRefusesWhatSlackWould(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		change func(*alerts.ManifestParams)
		field  string
		says   string
	}{
		{"empty name", func(p *alerts.ManifestParams) { p.Name = "" }, "display_information.name", "is empty"},
		{"long name", func(p *alerts.ManifestParams) { p.Name = strings.Repeat("é", 36) }, "display_information.name", "36 characters; Slack allows at most 35"},
		{"long description", func(p *alerts.ManifestParams) { p.Description = strings.Repeat("x", 141) }, "display_information.description", "at most 140"},
		{"empty bot name", func(p *alerts.ManifestParams) { p.BotName = "" }, "features.bot_user.display_name", "is empty"},
		{"long bot name", func(p *alerts.ManifestParams) { p.BotName = strings.Repeat("a", 81) }, "features.bot_user.display_name", "at most 80"},
		{"bot name with capitals and spaces", func(p *alerts.ManifestParams) { p.BotName = "Companion Alerts!" }, "features.bot_user.display_name", `(such as "companion-alerts")`},
		{"http request URL", func(p *alerts.ManifestParams) { p.RequestURL = "http://companion.example.com/v1/slack/actions" }, "settings.interactivity.request_url", "not an https URL"},
		{"no chat:write", func(p *alerts.ManifestParams) { p.Scopes = p.Scopes[1:] }, "oauth_config.scopes.bot", "lacks chat:write"},
	} {
		p := manifestParams()
		c.change(&p)
		_, err := alerts.NewAppManifest(p)
		var me *alerts.ManifestError
		if !errors.As(err, &me) || me.Field != c.field || !strings.Contains(me.Problem, c.says) {
			t.Errorf("%s: %v; want %s: …%s…", c.name, err, c.field, c.says)
		}
	}
	p := manifestParams()
	p.Name, p.Description, p.BotName = strings.Repeat("n", 35), strings.Repeat("d", 140), "a.b_c-9"
	if _, err := alerts.NewAppManifest(p); err != nil {
		t.Errorf("at Slack's limits: %v", err)
	}
}
