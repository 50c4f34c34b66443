package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/replaysafe/companion/alerts"
	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/items"
)

func init() {
	commands = append(commands,
		command{"slack", "set up the Slack app: print its app manifest for this deployment (slack manifest)", (*Main).slackCommand},
	)
}

const slackUsage = "usage: companion slack manifest [flags]"

const slackSynopsis = `Prints the Slack app manifest of this deployment, to create the app in one paste: at
https://api.slack.com/apps choose Create New App → From an app manifest, pick the workspace, paste it.

  companion slack manifest --public-url https://companion.example.com > manifest.json
  companion slack manifest --config companion.yaml --format yaml > manifest.yaml

The manifest names the app and its bot user, asks for the bot scopes the alerts need (all of them;
with a configuration file, only those its owners need, unless --all-scopes) and turns interactivity on
with the request URL <public URL>` + handlers.SlackActionsPath + `, where Slack sends the buttons. Nothing
else: no events, no slash commands. The public URL is --public-url, else COMPANION_PUBLIC_URL, else
public_url: in the configuration file (--config, env COMPANION_CONFIG); it must be https, the only
scheme Slack sends interactions to. Of the file it reads only the owners and public_url: the secrets
its tokens and lookups name need not be set yet. The manifest goes to standard output, what to do
next to standard error. Then install the app, and start companion with its bot token (SLACK_BOT_TOKEN)
and signing secret (SLACK_SIGNING_SECRET): docs/slack.md.`

// slackCommand runs "companion slack manifest". Without a subcommand, or with one it does not know, it is
// a usage mistake: the usage on standard error and exit 2.
func (m *Main) slackCommand(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprintf(m.Stderr, "%s\n\n%s\n", slackUsage, slackSynopsis)
		return usageErrorf("slack: name a subcommand: manifest")
	}
	if a := args[0]; isHelpFlag(a) || a == "help" {
		fmt.Fprintf(m.Stdout, "%s\n\n%s\n", slackUsage, slackSynopsis)
		return nil
	}
	if args[0] != "manifest" {
		return usageErrorf("slack: unknown subcommand %q; the only one is manifest (run \"companion slack --help\")", args[0])
	}
	return m.slackManifest(ctx, args[1:])
}

func (m *Main) slackManifest(_ context.Context, args []string) error {
	fs := m.newFlags("slack manifest", slackSynopsis)
	publicURL := fs.String("public-url", "", "the service's https `URL` as Slack reaches it (default: COMPANION_PUBLIC_URL, else the config file's public_url)")
	configPath := fs.String("config", m.env("COMPANION_CONFIG", ""), "YAML configuration `file`: its public_url, and the owners whose scopes are asked for (env COMPANION_CONFIG)")
	allScopes := fs.Bool("all-scopes", false, "ask for every bot scope the alerts can need, even with a config file whose owners need fewer")
	name := fs.String("name", "companion", fmt.Sprintf("the app's `name` in Slack, at most %d characters", alerts.ManifestNameMax))
	botName := fs.String("bot-name", "companion", fmt.Sprintf("the bot user's display `name`: at most %d of a-z, 0-9, '.', '_', '-'", alerts.ManifestBotNameMax))
	description := fs.String("description", alerts.DefaultAppDescription, fmt.Sprintf("the app's `text` in Slack, at most %d characters", alerts.ManifestDescriptionMax))
	format := fs.String("format", "json", "`format` of the manifest: json or yaml (Slack's paste box has a tab for each)")
	if done, err := m.parse(fs, args); done {
		return err
	}
	if *format != "json" && *format != "yaml" {
		return usageErrorf("slack manifest --format: %q is not json or yaml", *format)
	}

	var owners []string
	var filePublicURL string
	if *configPath != "" {
		var err error
		if owners, filePublicURL, err = manifestSettings(*configPath); err != nil {
			return err
		}
	}
	base, source, err := m.manifestPublicURL(*publicURL, filePublicURL, *configPath)
	if err != nil {
		return err
	}

	scopes := alerts.SlackScopes()
	scopesNote := "every bot scope the alerts can need"
	switch {
	case *configPath == "":
	case *allScopes:
		scopesNote += " (--all-scopes)"
	case len(owners) == 0:
		scopesNote += fmt.Sprintf(": %s names no owner, and a before-write's owner can be a user or a channel", *configPath)
	default:
		scopes = alerts.NeededScopes(owners)
		scopesNote = fmt.Sprintf("only the scopes the owners of %s need (%d owner(s))", *configPath, len(owners))
		if left := len(alerts.SlackScopes()) - len(scopes); left > 0 {
			scopesNote += fmt.Sprintf("; an owner of another kind, named in the file later or by a before-write, needs %s "+
				"(--all-scopes asks for them now)", scopeList(missingFrom(alerts.SlackScopes(), scopes)))
		}
	}

	manifest, err := alerts.NewAppManifest(alerts.ManifestParams{Name: *name, Description: *description, BotName: *botName,
		RequestURL: strings.TrimRight(base, "/") + handlers.SlackActionsPath, Scopes: scopes})
	if err != nil {
		var me *alerts.ManifestError
		if errors.As(err, &me) {
			if flag, ok := manifestFlags[me.Field]; ok {
				return usageErrorf("slack manifest %s: %s", flag, me.Problem)
			}
		}
		return err
	}
	out, err := manifest.JSON()
	if *format == "yaml" {
		out, err = manifest.YAML()
	}
	if err != nil {
		return err
	}
	if _, err := m.Stdout.Write(out); err != nil {
		return err
	}

	fmt.Fprintf(m.Stderr, "Slack app manifest (%s): scopes %s, %s; request URL %s, from %s.\n",
		*format, scopeList(scopes), scopesNote, manifest.Settings.Interactivity.RequestURL, source)
	if host := hostOf(base); unreachableFromSlack(host) {
		fmt.Fprintf(m.Stderr, "warning: %s is not an address Slack's servers can reach: the buttons will not work until the request URL "+
			"is the public https address of companion (print the manifest again and paste it under the app's App Manifest).\n", host)
	}
	fmt.Fprint(m.Stderr, "Next: https://api.slack.com/apps → Create New App → From an app manifest → pick the workspace → paste it "+
		"(the "+strings.ToUpper(*format)+" tab) → Create. Then Install to Workspace, and start companion with the Bot User OAuth Token "+
		"as SLACK_BOT_TOKEN and Basic Information's Signing Secret as SLACK_SIGNING_SECRET (docs/slack.md).\n")
	return nil
}

// manifestSettings reads of the configuration file only what the manifest needs: the owners (their kinds
// decide the scopes) and public_url. The file's shape is checked (an unknown field may be a misspelt owner),
// but no token or lookup secret is resolved and nothing else is checked: the manifest is printed before
// the deployment's secrets exist.
func manifestSettings(path string) (owners []string, publicURL string, err error) {
	fc, probs, err := decodeConfig(path)
	if err != nil {
		return nil, "", err
	}
	var cfg items.Config
	ownersOf := func(dc destinationConfig, where string) items.Destination {
		var d items.Destination
		if check(dc.Owner, where+".owner", probs) {
			d.Owner = dc.Owner.Value
		}
		if check(dc.EscalateTo, where+".escalate_to", probs) {
			d.EscalateTo = dc.EscalateTo.Value
		}
		return d
	}
	cfg.Defaults = ownersOf(fc.Defaults, "defaults")
	cfg.Destinations = map[string]items.Destination{}
	for name, dc := range fc.Destinations {
		cfg.Destinations[name] = ownersOf(dc, "destinations."+name)
	}
	routing := fc.Alerts.routing(probs)
	if f := fc.PublicURL; check(f, "public_url", probs) {
		if err := checkPublicURL(f.Value); err != nil {
			probs.add(f.Line, "public_url", err.Error())
		}
	}
	if err := probs.err(); err != nil {
		return nil, "", err
	}
	return configOwners(cfg, routing), fc.PublicURL.Value, nil
}

// manifestFlags name the flag behind each manifest field a user sets.
var manifestFlags = map[string]string{
	"display_information.name":           "--name",
	"display_information.description":    "--description",
	"features.bot_user.display_name":     "--bot-name",
	"settings.interactivity.request_url": "--public-url",
}

// manifestPublicURL returns the service's public URL and where it came from: flag, else
// COMPANION_PUBLIC_URL, else the config file's public_url. It must be https: Slack sends interactions
// to no other scheme.
func (m *Main) manifestPublicURL(flagValue, fileValue, configPath string) (base, source string, err error) {
	switch {
	case flagValue != "":
		base, source = flagValue, "--public-url"
	case m.Getenv("COMPANION_PUBLIC_URL") != "":
		base, source = m.Getenv("COMPANION_PUBLIC_URL"), "COMPANION_PUBLIC_URL"
	case fileValue != "":
		base, source = fileValue, "public_url in "+configPath
	default:
		return "", "", usageErrorf("slack manifest: no public URL: Slack needs the https address it reaches companion at, for its buttons " +
			"(the request URL is that address followed by " + handlers.SlackActionsPath + "). Give it with --public-url https://companion.example.com, " +
			"or set COMPANION_PUBLIC_URL, or public_url: in the configuration file (--config or COMPANION_CONFIG). No public address yet " +
			"(a try-out)? Alerts are posted without one, only their buttons need it: create the app by hand, steps 1, 3 and 4 of " +
			"docs/slack.md")
	}
	if err := checkPublicURL(base); err != nil {
		return "", "", usageErrorf("slack manifest: %s: %v", source, err)
	}
	if u, _ := url.Parse(base); u.Scheme != "https" {
		return "", "", usageErrorf("slack manifest: %s %q is not https: Slack sends the buttons only to an https request URL with a valid "+
			"certificate. Put companion behind your TLS reverse proxy and give its https address (for a try-out, a tunnel's https "+
			"address); docs/slack.md", source, base)
	}
	return base, source, nil
}

// missingFrom returns the scopes of all that are not in some.
func missingFrom(all, some []alerts.SlackScope) []alerts.SlackScope {
	var out []alerts.SlackScope
	for _, s := range all {
		if !containsScopeNamed(some, s.Name) {
			out = append(out, s)
		}
	}
	return out
}

func containsScopeNamed(scopes []alerts.SlackScope, name string) bool {
	for _, s := range scopes {
		if s.Name == name {
			return true
		}
	}
	return false
}

func hostOf(base string) string {
	u, err := url.Parse(base)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// unreachableFromSlack says whether host is a name or address that Slack's servers cannot reach: this
// machine, or a private, link-local or unspecified address.
func unreachableFromSlack(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && (ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsUnspecified())
}
