package alerts

import (
	"fmt"
	"slices"
	"strings"
)

// The bot scopes the Slack notifier needs are listed here and nowhere else in the code: the start's check
// (CheckToken's Scopes, MissingScopes) and docs/slack.md's setup follow this table, and
// TestSlackScopesCoverEveryMethod fails when the notifier calls a Web API method that is not in it.
//
// Slack sends the scopes a token was granted in the X-OAuth-Scopes header of every Web API answer
// (https://docs.slack.dev/legacy/legacy-authentication/legacy-oauth-scopes, "Working with scopes");
// slack-go keeps them on auth.test's answer (slack.AuthTestResponse.Header).

// OwnerKind is the kind of conversation an alert goes to, by its owner's Slack id. The scopes that read
// a conversation's history differ by kind.
type OwnerKind string

const (
	// OwnerUser is a user id (U…, W…): the alert is a direct message from the app.
	OwnerUser OwnerKind = "user"
	// OwnerChannel is a channel id (C…, G…): a public or a private channel; which one its id does not say.
	OwnerChannel OwnerKind = "channel"
)

// OwnerKindOf returns the kind of conversation an alert to owner goes to (FindPost reads the history by
// it). Anything that is not a user id is read as a channel.
func OwnerKindOf(owner string) OwnerKind {
	if strings.HasPrefix(owner, "U") || strings.HasPrefix(owner, "W") {
		return OwnerUser
	}
	return OwnerChannel
}

// SlackScope is one bot scope the Slack notifier needs: the Web API methods that need it, the owners it
// matters for, and what stops working without it.
type SlackScope struct {
	// Name is Slack's name of the scope, as the app's OAuth & Permissions page and X-OAuth-Scopes write it.
	Name string
	// Or are the older scopes that grant the same to a token of an older kind: a classic app's
	// perspectival chat:write:bot and chat:write:user (a user token, xoxp-, of a classic app has them
	// instead of chat:write), a legacy token's post. A token with one of them does not lack this scope.
	Or []string
	// Methods are the Web API methods the notifier calls that need this scope.
	Methods []string
	// For are the kinds of owner it is needed for; empty: every alert.
	For []OwnerKind
	// Essential says that without it no alert can be posted: the start treats its lack as a refused token
	// (SLACK_TOKEN_CHECK). Without any other scope the alerts are posted, and something less is lost.
	Essential bool
	// Without says what breaks without it, for the start's log line.
	Without string
}

// lostAnswer is what a missing history scope costs: a post whose answer was lost is not found.
var lostAnswer = fmt.Sprintf("so a post whose answer was lost cannot be found: its alert waits %d minutes (the find give-up) "+
	"and may then be posted twice", int(DefaultFindGiveUp.Minutes()))

// slackScopes are the scopes the notifier needs, the essential first.
var slackScopes = []SlackScope{
	{Name: "chat:write", Or: []string{"chat:write:bot", "chat:write:user", "post"}, Methods: []string{"chat.postMessage", "chat.update"}, Essential: true,
		Without: "no alert can be posted or updated: Slack refuses chat.postMessage and chat.update (missing_scope)"},
	{Name: "im:write", Methods: []string{"conversations.open"}, For: []OwnerKind{OwnerUser},
		Without: "for an alert to a user (U…) the direct-message conversation cannot be opened to read its history (conversations.open), " + lostAnswer},
	{Name: "im:history", Methods: []string{"conversations.history"}, For: []OwnerKind{OwnerUser},
		Without: "the history of the direct messages to a user (U…) cannot be read (conversations.history), " + lostAnswer},
	{Name: "channels:history", Methods: []string{"conversations.history"}, For: []OwnerKind{OwnerChannel},
		Without: "if an alert channel (C…) is public, its history cannot be read (conversations.history), " + lostAnswer},
	{Name: "groups:history", Methods: []string{"conversations.history"}, For: []OwnerKind{OwnerChannel},
		Without: "if an alert channel (C…) is private, its history cannot be read (conversations.history), " + lostAnswer},
}

// slackMethodsWithoutScope are the Web API methods the notifier calls that need no scope: auth.test
// (the start's check) and views.open (the evidence modal; the button press's trigger id is its right).
var slackMethodsWithoutScope = []string{"auth.test", "views.open"}

// SlackScopes returns the bot scopes the Slack notifier needs, the essential first. The caller may
// change the copy it gets.
func SlackScopes() []SlackScope {
	out := make([]SlackScope, len(slackScopes))
	for i, s := range slackScopes {
		s.Methods, s.For, s.Or = slices.Clone(s.Methods), slices.Clone(s.For), slices.Clone(s.Or)
		out[i] = s
	}
	return out
}

// SlackMethods returns every Web API method the Slack notifier calls, each with the scopes it needs
// (one of them, by the kind of conversation, for conversations.history; none for auth.test and
// views.open).
func SlackMethods() map[string][]string {
	out := map[string][]string{}
	for _, m := range slackMethodsWithoutScope {
		out[m] = []string{}
	}
	for _, s := range slackScopes {
		for _, m := range s.Methods {
			out[m] = append(out[m], s.Name)
		}
	}
	return out
}

// NeededScopes returns the scopes alerts to owners need, the essential first. No owners (alerts go only
// to owners a before-write names, which can be of any kind) needs every scope.
func NeededScopes(owners []string) []SlackScope {
	kinds := map[OwnerKind]bool{}
	for _, o := range owners {
		kinds[OwnerKindOf(o)] = true
	}
	var out []SlackScope
	for _, s := range SlackScopes() {
		if len(owners) == 0 || len(s.For) == 0 || slices.ContainsFunc(s.For, func(k OwnerKind) bool { return kinds[k] }) {
			out = append(out, s)
		}
	}
	return out
}

// umbrellaScopes grant a token every scope of the table: a classic app's bot token has "bot"; a legacy
// bot integration's token (a custom "Bots" integration, xoxb-) "bot:basic" (Slack names its scopes
// "identify,bot:basic"); a legacy token (xoxp-) "client".
var umbrellaScopes = []string{"bot", "bot:basic", "client"}

// MissingScopes returns the scopes of NeededScopes(owners) that granted (a token's scopes, as Slack
// names them) lacks, the essential first: a scope is not lacking when granted has it, one of its Or, or
// an umbrella scope (umbrellaScopes: a classic app's "bot", a legacy bot's "bot:basic", "client").
func MissingScopes(granted, owners []string) []SlackScope {
	if slices.ContainsFunc(umbrellaScopes, func(u string) bool { return slices.Contains(granted, u) }) {
		return nil
	}
	var out []SlackScope
	for _, s := range NeededScopes(owners) {
		if !slices.Contains(granted, s.Name) && !slices.ContainsFunc(s.Or, func(o string) bool { return slices.Contains(granted, o) }) {
			out = append(out, s)
		}
	}
	return out
}

// Variants returns the scopes of granted that extend s's name without being it or one of its Or:
// chat:write.public and chat:write.customize for chat:write. Slack's docs say those need chat:write
// besides, but a token that has one and lacks chat:write is not proof that it cannot post (Slack may
// grant more than its header names, or name a scope this table does not know): a missing essential
// scope with variants is a warning, not a refusal.
func (s SlackScope) Variants(granted []string) []string {
	var out []string
	for _, g := range granted {
		if g != s.Name && !slices.Contains(s.Or, g) && strings.HasPrefix(g, s.Name) {
			out = append(out, g)
		}
	}
	return out
}

// parseScopes reads an X-OAuth-Scopes header's values: scope names separated by commas, on one line or
// several, with or without spaces; Slack writes them in lower case, and so are they returned.
func parseScopes(values []string) []string {
	out := []string{}
	for _, v := range values {
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.ToLower(strings.TrimSpace(s)); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}
