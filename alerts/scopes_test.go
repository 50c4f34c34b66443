package alerts_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/alerts"
)

// CheckToken reads the scopes Slack granted the token from the X-OAuth-Scopes header of auth.test's
// answer; without the header the scopes are unknown, not empty.
func TestCheckTokenReadsTheGrantedScopes(t *testing.T) {
	t.Parallel()
	f := newFakeSlack(t)
	for _, c := range []struct {
		name   string
		header []string
		want   []string
		known  bool
	}{
		{"Slack's header", []string{"chat:write", " im:history", "channels:history "}, []string{"chat:write", "im:history", "channels:history"}, true},
		{"Slack's header, upper case", []string{"Chat:Write"}, []string{"chat:write"}, true},
		{"a blank header (a proxy that blanks it)", []string{}, nil, false},
		{"a header of commas and spaces", []string{" , ,"}, nil, false},
		{"no header", nil, nil, false},
	} {
		f.mu.Lock()
		f.scopes = c.header
		f.mu.Unlock()
		id, err := f.notifier(t).CheckToken(t.Context())
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if id.ScopesKnown != c.known || !slices.Equal(id.Scopes, c.want) || (c.want != nil) != (id.Scopes != nil) {
			t.Errorf("%s: scopes %q known %v, want %q known %v", c.name, id.Scopes, id.ScopesKnown, c.want, c.known)
		}
	}
}

func scopeNames(scopes []alerts.SlackScope) []string {
	var out []string
	for _, s := range scopes {
		out = append(out, s.Name)
	}
	return out
}

// The scopes a start asks for follow where the alerts go: chat:write always; the direct messages'
// scopes for user owners, both channel history scopes for channel owners (an id does not say public or
// private); every scope when the configuration names no owner (a before-write's owner can be anything).
func TestMissingScopesFollowTheOwners(t *testing.T) {
	t.Parallel()
	all := []string{"chat:write", "im:write", "im:history", "channels:history", "groups:history"}
	for _, c := range []struct {
		name            string
		granted, owners []string
		want            []string
	}{
		{"everything granted", all, nil, nil},
		{"nothing granted, no owner named", nil, nil, all},
		{"only chat:write, a user owner", []string{"chat:write"}, []string{"U024BE7LH"}, []string{"im:write", "im:history"}},
		{"only chat:write, an Enterprise user", []string{"chat:write"}, []string{"W0ENT"}, []string{"im:write", "im:history"}},
		{"only chat:write, a channel owner", []string{"chat:write"}, []string{"C0OPS"}, []string{"channels:history", "groups:history"}},
		{"a private channel's scope, a channel owner", []string{"chat:write", "groups:history"}, []string{"C0OPS"}, []string{"channels:history"}},
		{"history of channels, a user owner too", []string{"chat:write", "channels:history", "groups:history"}, []string{"C0OPS", "U0ANNA"},
			[]string{"im:write", "im:history"}},
		{"no chat:write, a channel owner", []string{"channels:history", "groups:history"}, []string{"C0OPS"}, []string{"chat:write"}},
		{"a classic app's bot scope", []string{"bot"}, nil, nil},
		{"a legacy bot integration's token", []string{"identify", "bot:basic"}, nil, nil},
		{"a legacy token", []string{"identify", "read", "post", "client"}, nil, nil},
		{"a classic app's user token: chat:write:bot", []string{"chat:write:bot", "im:write", "im:history"}, []string{"U0ANNA"}, nil},
		{"a classic app's user token: chat:write:user", []string{"chat:write:user", "channels:history", "groups:history"}, []string{"C0OPS"}, nil},
		{"a legacy token's post, no history", []string{"post"}, []string{"C0OPS"}, []string{"channels:history", "groups:history"}},
		{"chat:write.public without chat:write", []string{"chat:write.public", "chat:write.customize"}, []string{"C0OPS"},
			[]string{"chat:write", "channels:history", "groups:history"}},
	} {
		got := alerts.MissingScopes(c.granted, c.owners)
		if !slices.Equal(scopeNames(got), c.want) {
			t.Errorf("%s: missing %q, want %q", c.name, scopeNames(got), c.want)
		}
		for _, s := range got {
			if s.Essential != (s.Name == "chat:write") || s.Without == "" {
				t.Errorf("%s: %s essential %v, without %q", c.name, s.Name, s.Essential, s.Without)
			}
			if !s.Essential && !strings.Contains(s.Without, "may then be posted twice") {
				t.Errorf("%s: %s does not say what its lack costs: %q", c.name, s.Name, s.Without)
			}
		}
	}
}

// A missing chat:write is certain only where the token has nothing like it: chat:write.public and
// chat:write.customize are its variants (Slack's docs say they need chat:write besides, but that is not
// proof the token cannot post), its older names (chat:write:bot, chat:write:user, post) count as it.
func TestScopeVariants(t *testing.T) {
	t.Parallel()
	chatWrite := alerts.SlackScopes()[0]
	if chatWrite.Name != "chat:write" || !chatWrite.Essential {
		t.Fatalf("the first scope is %q, essential %v", chatWrite.Name, chatWrite.Essential)
	}
	for _, c := range []struct {
		granted, want []string
	}{
		{[]string{"chat:write.public", "im:write"}, []string{"chat:write.public"}},
		{[]string{"chat:write.customize", "chat:write.public"}, []string{"chat:write.customize", "chat:write.public"}},
		{[]string{"chat:write:bot"}, nil},
		{[]string{"chat:write"}, nil},
		{[]string{"im:write", "channels:history"}, nil},
	} {
		if got := chatWrite.Variants(c.granted); !slices.Equal(got, c.want) {
			t.Errorf("Variants(%q) = %q, want %q", c.granted, got, c.want)
		}
	}
}

// The header may come as Slack sends it or as a proxy passes it on: lower-case name, several lines.
func TestCheckTokenReadsScopesFromEveryHeaderLine(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Written as given, not canonicalized: the client must find it all the same.
		w.Header()["x-oauth-scopes"] = []string{"chat:write, im:write", "im:history"}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true,"team":"Acme","team_id":"T0ACME","user":"companion","user_id":"U0BOT","bot_id":"B0BOT"}`))
	}))
	t.Cleanup(srv.Close)
	s, err := alerts.NewSlack(alerts.SlackConfig{BotToken: "xoxb-test", SigningSecret: "secret", APIURL: srv.URL + "/api/"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.CheckToken(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"chat:write", "im:write", "im:history"}; !id.ScopesKnown || !slices.Equal(id.Scopes, want) {
		t.Errorf("scopes %q known %v, want %q", id.Scopes, id.ScopesKnown, want)
	}
}

// webAPIOf names the Web API method of each slack-go Client method: what the notifier may call.
var webAPIOf = map[string]string{
	"AuthTestContext":               "auth.test",
	"PostMessageContext":            "chat.postMessage",
	"UpdateMessageContext":          "chat.update",
	"OpenConversationContext":       "conversations.open",
	"GetConversationHistoryContext": "conversations.history",
	"OpenViewContext":               "views.open",
}

// Every Web API method the notifier calls is in the scopes' table (SlackMethods), with its scopes, and the
// table names no method the notifier does not call: a new slack-go call in the package's code fails here
// until its method and scope are added (and the docs', TestDocsListTheSlackScopes). Checked twice: in the
// code (every call on a slack-go client) and on the wire (every method the fake Slack was asked).
func TestSlackScopesCoverEveryMethod(t *testing.T) {
	t.Parallel()
	methods := alerts.SlackMethods()
	if _, ok := methods["chat.postMessage"]; !ok || !slices.Equal(methods["chat.postMessage"], []string{"chat:write"}) {
		t.Errorf("chat.postMessage needs %q, want chat:write", methods["chat.postMessage"])
	}

	// In the code: calls of the form x.client.Method(…).
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	called := map[string]bool{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if recv, ok := sel.X.(*ast.SelectorExpr); !ok || recv.Sel.Name != "client" {
				return true
			}
			api, ok := webAPIOf[sel.Sel.Name]
			if !ok {
				t.Errorf("%s: the notifier calls slack-go's %s: add its Web API method to webAPIOf here and its scope to alerts/scopes.go",
					fset.Position(call.Pos()), sel.Sel.Name)
				return true
			}
			called[api] = true
			if _, ok := methods[api]; !ok {
				t.Errorf("%s: %s (%s) is called but not in the scopes' table (alerts/scopes.go)", fset.Position(call.Pos()), api, sel.Sel.Name)
			}
			return true
		})
	}
	if got, want := slices.Sorted(maps.Keys(called)), slices.Sorted(maps.Keys(methods)); !slices.Equal(got, want) {
		t.Errorf("the code calls %q; the scopes' table lists %q", got, want)
	}

	// On the wire: everything the notifier does, to a user and to a channel.
	f := newFakeSlack(t)
	s := f.notifier(t)
	ctx := t.Context()
	if _, err := s.CheckToken(ctx); err != nil {
		t.Fatal(err)
	}
	for _, owner := range []string{"U0ANNA", "C0OPS"} {
		m := alerts.Message{Tenant: "default", Owner: owner, BatchID: "b1", Attempt: "1"}
		ref, err := s.Post(ctx, owner, m)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Update(ctx, ref, m); err != nil {
			t.Fatal(err)
		}
		if _, found, err := s.FindPost(ctx, owner, m, []string{"1"}, time.Unix(0, 0)); err != nil || !found {
			t.Fatalf("FindPost %s: found %v, %v", owner, found, err)
		}
	}
	if err := s.OpenResolveModal(ctx, "trigger", alerts.ResolveModal(alerts.ResolveMetadata{Tenant: "default", Key: "k", Outcome: "succeeded"}, nil, "")); err != nil {
		t.Fatal(err)
	}
	if got, want := f.Methods(), slices.Sorted(maps.Keys(methods)); !slices.Equal(got, want) {
		t.Errorf("the notifier asked Slack %q; the scopes' table lists %q", got, want)
	}
}

// docScopeRow is a row of a Markdown table whose first cell is a scope in backticks.
var docScopeRow = regexp.MustCompile("(?m)^ *\\| `([a-z_.]+:[a-z_.:]+)` \\|")

// The Slack setup in docs/slack.md lists, in its table of scopes, exactly the scopes of the code's
// table, each with its methods.
func TestDocsListTheSlackScopes(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/slack.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## Scopes\n")
	if start < 0 {
		t.Fatal("docs/slack.md has no section Scopes")
	}
	section := doc[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	rows := map[string]string{}
	for _, loc := range docScopeRow.FindAllStringSubmatchIndex(section, -1) {
		line := section[loc[0]:]
		line = line[:strings.IndexByte(line, '\n')]
		rows[section[loc[2]:loc[3]]] = line
	}
	var want []string
	for _, s := range alerts.SlackScopes() {
		want = append(want, s.Name)
		for _, m := range s.Methods {
			if !strings.Contains(rows[s.Name], "`"+m+"`") {
				t.Errorf("the docs' row of %s does not name %s: %q", s.Name, m, rows[s.Name])
			}
		}
	}
	if got := slices.Sorted(maps.Keys(rows)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("docs/slack.md lists the scopes %q; the code needs %q", got, want)
	}
}
