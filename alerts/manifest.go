package alerts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// A Slack app can be created from an app manifest pasted at api.slack.com/apps → Create New App → From
// an app manifest (https://docs.slack.dev/app-manifests/configuring-apps-with-app-manifests). The
// manifest here is the app the notifier needs and nothing more: the bot user, the bot scopes of
// SlackScopes (or those some owners need), and interactivity for the buttons. No events, no slash
// commands, no redirect URLs: the service uses none. The field names are Slack's
// (https://docs.slack.dev/reference/app-manifest); TestAppManifestRoundTripsThroughSlackGo holds them to
// slack-go's manifest types.

// Slack's limits on the manifest's names (the app manifest reference).
const (
	// ManifestNameMax is the longest display_information.name Slack accepts, in characters.
	ManifestNameMax = 35
	// ManifestDescriptionMax is the longest display_information.description, in characters.
	ManifestDescriptionMax = 140
	// ManifestBotNameMax is the longest features.bot_user.display_name, in characters.
	ManifestBotNameMax = 80
)

// DefaultAppDescription is the app's description when none is given.
const DefaultAppDescription = "Asks the owner of a workflow write whose outcome is unknown to check it, and records the answer in companion."

// botNameChars are the characters Slack allows in a bot user's display name.
var botNameChars = regexp.MustCompile(`^[a-z0-9._-]+$`)

// AppManifest is a Slack app manifest for the notifier. Its fields are in the order of Slack's export.
type AppManifest struct {
	Display  ManifestDisplay  `json:"display_information" yaml:"display_information"`
	Features ManifestFeatures `json:"features" yaml:"features"`
	OAuth    ManifestOAuth    `json:"oauth_config" yaml:"oauth_config"`
	Settings ManifestSettings `json:"settings" yaml:"settings"`
}

// ManifestDisplay is how the app appears in Slack.
type ManifestDisplay struct {
	Name        string `json:"name" yaml:"name"`
	Description string `json:"description,omitempty" yaml:"description,omitempty"`
}

// ManifestFeatures are the app's App Home and its bot user.
type ManifestFeatures struct {
	AppHome ManifestAppHome `json:"app_home" yaml:"app_home"`
	BotUser ManifestBotUser `json:"bot_user" yaml:"bot_user"`
}

// ManifestAppHome is the App Home: alerts to a user (U…) are direct messages from the app, shown in its
// Messages tab. The tab is read-only because the service reads no replies: a user who answered there
// would be answering no one.
type ManifestAppHome struct {
	HomeTabEnabled             bool `json:"home_tab_enabled" yaml:"home_tab_enabled"`
	MessagesTabEnabled         bool `json:"messages_tab_enabled" yaml:"messages_tab_enabled"`
	MessagesTabReadOnlyEnabled bool `json:"messages_tab_read_only_enabled" yaml:"messages_tab_read_only_enabled"`
}

// ManifestBotUser is the bot user the alerts are posted as.
type ManifestBotUser struct {
	DisplayName  string `json:"display_name" yaml:"display_name"`
	AlwaysOnline bool   `json:"always_online" yaml:"always_online"`
}

// ManifestOAuth holds the scopes the app asks for when it is installed.
type ManifestOAuth struct {
	Scopes ManifestScopes `json:"scopes" yaml:"scopes"`
}

// ManifestScopes are the bot token's scopes.
type ManifestScopes struct {
	Bot []string `json:"bot" yaml:"bot"`
}

// ManifestSettings turn interactivity on (Slack posts the button presses and the modal to its request
// URL) and say that the app is reached over HTTP, not Socket Mode, with a token that does not expire
// (the service has no way to refresh one).
type ManifestSettings struct {
	Interactivity        ManifestInteractivity `json:"interactivity" yaml:"interactivity"`
	SocketModeEnabled    bool                  `json:"socket_mode_enabled" yaml:"socket_mode_enabled"`
	TokenRotationEnabled bool                  `json:"token_rotation_enabled" yaml:"token_rotation_enabled"`
}

// ManifestInteractivity is where Slack sends the interactions with the app's messages.
type ManifestInteractivity struct {
	IsEnabled  bool   `json:"is_enabled" yaml:"is_enabled"`
	RequestURL string `json:"request_url" yaml:"request_url"`
}

// ManifestParams are what a deployment's manifest is made of.
type ManifestParams struct {
	// Name is the app's name (display_information.name), at most ManifestNameMax characters.
	Name string
	// Description is display_information.description, at most ManifestDescriptionMax characters;
	// DefaultAppDescription when empty.
	Description string
	// BotName is the bot user's display name: at most ManifestBotNameMax of a-z, 0-9, '.', '_' and '-'.
	BotName string
	// RequestURL is the https URL Slack posts the interactions to: the service's POST /v1/slack/actions.
	RequestURL string
	// Scopes are the bot scopes to ask for: SlackScopes(), or NeededScopes(owners). They must include
	// every essential one.
	Scopes []SlackScope
}

// ManifestError is a manifest parameter Slack would refuse. Field is the manifest's field
// (display_information.name, features.bot_user.display_name, settings.interactivity.request_url, …).
type ManifestError struct {
	Field   string
	Problem string
}

func (e *ManifestError) Error() string { return e.Field + ": " + e.Problem }

// NewAppManifest returns the app manifest of p, or a *ManifestError naming the first parameter Slack
// would refuse.
func NewAppManifest(p ManifestParams) (AppManifest, error) {
	if p.Description == "" {
		p.Description = DefaultAppDescription
	}
	if err := checkManifestParams(p); err != nil {
		return AppManifest{}, err
	}
	scopes := make([]string, len(p.Scopes))
	for i, s := range p.Scopes {
		scopes[i] = s.Name
	}
	return AppManifest{
		Display: ManifestDisplay{Name: p.Name, Description: p.Description},
		Features: ManifestFeatures{
			AppHome: ManifestAppHome{MessagesTabEnabled: true, MessagesTabReadOnlyEnabled: true},
			BotUser: ManifestBotUser{DisplayName: p.BotName},
		},
		OAuth:    ManifestOAuth{Scopes: ManifestScopes{Bot: scopes}},
		Settings: ManifestSettings{Interactivity: ManifestInteractivity{IsEnabled: true, RequestURL: p.RequestURL}},
	}, nil
}

func checkManifestParams(p ManifestParams) error {
	name, desc, bot := utf8.RuneCountInString(p.Name), utf8.RuneCountInString(p.Description), utf8.RuneCountInString(p.BotName)
	switch {
	case name == 0:
		return &ManifestError{"display_information.name", "is empty; Slack needs a name for the app"}
	case name > ManifestNameMax:
		return &ManifestError{"display_information.name", fmt.Sprintf("%q is %d characters; Slack allows at most %d", p.Name, name, ManifestNameMax)}
	case desc > ManifestDescriptionMax:
		return &ManifestError{"display_information.description", fmt.Sprintf("is %d characters; Slack allows at most %d", desc, ManifestDescriptionMax)}
	case bot == 0:
		return &ManifestError{"features.bot_user.display_name", "is empty; Slack needs a display name for the bot user"}
	case bot > ManifestBotNameMax:
		return &ManifestError{"features.bot_user.display_name", fmt.Sprintf("%q is %d characters; Slack allows at most %d", p.BotName, bot, ManifestBotNameMax)}
	case !botNameChars.MatchString(p.BotName):
		return &ManifestError{"features.bot_user.display_name", fmt.Sprintf("%q: Slack allows only a-z, 0-9, '.', '_' and '-' (such as %q)", p.BotName, suggestBotName(p.BotName))}
	}
	if u, err := url.Parse(p.RequestURL); err != nil || u.Scheme != "https" || u.Host == "" {
		return &ManifestError{"settings.interactivity.request_url", fmt.Sprintf("%q is not an https URL; Slack sends interactions only to https", p.RequestURL)}
	}
	for _, s := range slackScopes {
		if s.Essential && !containsScope(p.Scopes, s.Name) {
			return &ManifestError{"oauth_config.scopes.bot", fmt.Sprintf("lacks %s: without it %s", s.Name, s.Without)}
		}
	}
	return nil
}

func containsScope(scopes []SlackScope, name string) bool {
	for _, s := range scopes {
		if s.Name == name {
			return true
		}
	}
	return false
}

// suggestBotName folds a name into the characters Slack allows in a bot's display name: "Companion
// Alerts" is "companion-alerts".
func suggestBotName(s string) string {
	var b []rune
	for _, r := range s {
		switch {
		case r >= 'A' && r <= 'Z':
			b = append(b, r-'A'+'a')
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			b = append(b, r)
		case len(b) > 0 && b[len(b)-1] != '-':
			b = append(b, '-')
		}
	}
	out := string(bytes.Trim([]byte(string(b)), "-"))
	if out == "" {
		return "companion"
	}
	return out
}

// JSON returns the manifest as Slack's JSON tab takes it, indented.
func (m AppManifest) JSON() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // an app named "Ops & Alerts" reads as written
	enc.SetIndent("", "    ")
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// YAML returns the manifest as Slack's YAML tab takes it. Every string value is double-quoted: a scope
// such as chat:write is valid YAML unquoted, but users report Slack's editor refusing such values, and a
// quoted value means the same to every parser.
func (m AppManifest) YAML() ([]byte, error) {
	var root yaml.Node
	if err := root.Encode(m); err != nil {
		return nil, err
	}
	quoteStrings(&root)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// quoteStrings double-quotes the string values under n, not the mapping keys.
func quoteStrings(n *yaml.Node) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			quoteStrings(n.Content[i])
		}
	case yaml.SequenceNode, yaml.DocumentNode:
		for _, c := range n.Content {
			quoteStrings(c)
		}
	case yaml.ScalarNode:
		if n.Tag == "!!str" {
			n.Style = yaml.DoubleQuotedStyle
		}
	}
}
