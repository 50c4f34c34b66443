package handlers_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/sqlitestore"
)

// openSQLite opens a fresh SQLite ledger in a temporary directory.
func openSQLite(t testing.TB) items.Store {
	t.Helper()
	s, err := sqlitestore.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatalf("open sqlite store: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestSQLite(t *testing.T) {
	handlerstest.Exercise(t, func(t *testing.T) items.Store { return openSQLite(t) }, handlerstest.Options{})
}

func TestRequestLogLineNamesItemButNeverPayload(t *testing.T) {
	s := handlerstest.NewService(t, openSQLite(t), handlerstest.ServiceConfig{})
	c := s.BeforeWrite(map[string]any{"key": "inv-9", "payload": map[string]any{"recipient": "jane@example.com", "iban": "DE89370400440532013000"}})
	s.AfterWrite(map[string]any{"key": "inv-9", "claim": c.Str("claim"), "outcome": "succeeded", "external_id": "x"})
	s.Get("", "/v1/items/inv-9")

	lines := strings.Split(strings.TrimSpace(s.Log.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want one line per request (3), got %d:\n%s", len(lines), s.Log)
	}
	var first map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatalf("log line is not JSON: %v", err)
	}
	want := map[string]any{"method": "POST", "route": "/v1/before-write", "status": 200.0, "tenant": "acme",
		"key": "inv-9", "decision": "proceed", "reason": "new", "state": "in_flight"}
	for k, v := range want {
		if first[k] != v {
			t.Errorf("log field %s = %v, want %v (line %s)", k, first[k], v, lines[0])
		}
	}
	if _, ok := first["latency_ms"].(float64); !ok {
		t.Errorf("log line has no latency_ms: %s", lines[0])
	}
	if !strings.Contains(lines[2], `"status":401`) || !strings.Contains(lines[2], `"error":"unauthorized"`) {
		t.Errorf("refused request line: %s", lines[2])
	}
	for _, secret := range []string{"jane@example.com", "DE89370400440532013000", handlerstest.WorkflowAcme} {
		if strings.Contains(s.Log.String(), secret) {
			t.Errorf("the log shows %q:\n%s", secret, s.Log)
		}
	}
}

func TestInternalErrorShowsNoDetail(t *testing.T) {
	boom := handlers.Route{Method: http.MethodGet, Path: "/v1/boom", Access: handlers.Workflow,
		Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("database password is hunter2") })}
	s := handlerstest.NewService(t, openSQLite(t), handlerstest.ServiceConfig{Routes: []handlers.Route{boom}})
	r := s.Get(handlerstest.WorkflowAcme, "/v1/boom")
	handlerstest.Expect(t, r, http.StatusInternalServerError, items.CodeInternal, "")
	if r.Str("error.message") != "internal error" || strings.Contains(string(r.Body), "hunter2") {
		t.Fatalf("500 body: %s", r.Body)
	}
	if !strings.Contains(s.Log.String(), "hunter2") {
		t.Fatalf("the log lacks the cause:\n%s", s.Log)
	}
	handlerstest.Expect(t, s.Get("", "/v1/boom"), http.StatusUnauthorized, handlers.CodeUnauthorized, "")
}

func TestExtraRouteSeesCaller(t *testing.T) {
	who := handlers.Route{Method: http.MethodGet, Path: "/v1/whoami", Access: handlers.Operator,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, _ := handlers.PrincipalFrom(r.Context())
			_ = json.NewEncoder(w).Encode(p)
		})}
	s := handlerstest.NewService(t, openSQLite(t), handlerstest.ServiceConfig{Routes: []handlers.Route{who}})
	if r := s.Get(handlerstest.OperatorAcme, "/v1/whoami"); r.Str("Name") != "op-acme" || r.Str("Tenant") != "acme" {
		t.Fatalf("operator: %d %s", r.Status, r.Body)
	}
	handlerstest.Expect(t, s.Get(handlerstest.WorkflowAcme, "/v1/whoami"), http.StatusForbidden, handlers.CodeForbidden, "")
}

// A caller that sends the whole configured line, name:tenant:role:secret, as its bearer is told to send
// only the secret; any other unknown token is told what to check.
func TestWholeTokenLineAsBearerSaysToSendTheSecret(t *testing.T) {
	s := handlerstest.NewService(t, openSQLite(t), handlerstest.ServiceConfig{})
	r := s.Get("wf-acme:acme:workflow:"+handlerstest.WorkflowAcme, "/v1/items/x")
	handlerstest.Expect(t, r, http.StatusUnauthorized, handlers.CodeUnauthorized, "")
	if msg := r.Str("error.message"); msg != "unknown token; send only the secret, the part after the third colon of name:tenant:role:secret" {
		t.Errorf("whole token line: %q", msg)
	}
	r = s.Get("not-a-token", "/v1/items/x")
	handlerstest.Expect(t, r, http.StatusUnauthorized, handlers.CodeUnauthorized, "")
	if msg := r.Str("error.message"); msg != "unknown token: no token of this service has this secret (check that it was pasted whole, and against the service's tokens: COMPANION_TOKENS, COMPANION_TOKENS_FILE or the config file's tokens:)" {
		t.Errorf("unknown token: %q", msg)
	}
}

// A call without a body (curl without -d, a node with its body unset) is told so, not that its JSON
// "ends too early"; a body cut short still is.
func TestAnEmptyBodySaysItIsEmpty(t *testing.T) {
	s := handlerstest.NewService(t, openSQLite(t), handlerstest.ServiceConfig{})
	for body, want := range map[string]string{"": "body: is empty: send a JSON object", " \n": "body: is empty: send a JSON object",
		`{"key":"a","payload":{}`: "body: malformed JSON: it ends too early"} {
		r := s.Post(handlerstest.WorkflowAcme, "/v1/before-write", body)
		handlerstest.Expect(t, r, http.StatusBadRequest, items.CodeInvalid, "body")
		if msg := r.Str("error.message"); msg != want {
			t.Errorf("body %q: message %q, want %q", body, msg, want)
		}
	}
}

// An after-write with a claim the item never gave (the README's example claim pasted as it is) says
// which claim to send.
func TestAForeignClaimSaysWhichClaimToSend(t *testing.T) {
	s := handlerstest.NewService(t, openSQLite(t), handlerstest.ServiceConfig{})
	s.Claim("invoice-742:reminder:2", nil)
	r := s.AfterWrite(map[string]any{"key": "invoice-742:reminder:2", "claim": "c_b4d838697893d48b1d1bc396", "outcome": "succeeded"})
	handlerstest.Expect(t, r, http.StatusConflict, items.CodeConflict, "")
	if msg := r.Str("error.message"); msg != "claim: not a claim of this item; send the claim of its before-write answer (proceed)" {
		t.Errorf("message %q", msg)
	}
}

func TestWithoutTokensAndNotOpenEveryoneIsRefused(t *testing.T) {
	ledger, err := items.NewLedger(context.Background(), openSQLite(t), items.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handlers.New(handlers.Config{Ledger: ledger, Logger: slog.New(slog.DiscardHandler)}))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/before-write", "application/json", strings.NewReader(`{"key":"a","payload":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status %d, want 401", resp.StatusCode)
	}
}

func TestParseAndCheckTokens(t *testing.T) {
	tokens, err := handlers.ParseTokens(" n8n:acme:workflow:s3cr:et-0123456789ab ,\nops:acme:operator:other-0123456789ab\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(tokens) != 2 || tokens[0].Secret != "s3cr:et-0123456789ab" || tokens[1].Role != handlers.RoleOperator {
		t.Fatalf("parsed %+v", tokens)
	}
	if err := handlers.CheckTokens(tokens); err != nil {
		t.Fatalf("good tokens refused: %v", err)
	}
	// SECRETVALUE-0123 is a secret of the minimum length; no error may show it.
	for name, tc := range map[string]struct{ tokens, want string }{
		"three parts":    {"a:acme:SECRETVALUE-0123", "got 3 part(s)"},
		"bad role":       {"a:acme:admin:SECRETVALUE-0123", `role "admin"`},
		"empty secret":   {"a:acme:workflow:", "secret is empty"},
		"bad tenant":     {"a:ac me:workflow:SECRETVALUE-0123", `tenant "ac me"`},
		"same name":      {"a:acme:workflow:SECRETVALUE-0123,a:acme:operator:SECRETVALUE-4567", "name is used by another token"},
		"shared secret":  {"a:acme:workflow:SECRETVALUE-0123,b:acme:operator:SECRETVALUE-0123", "the same as token a's"},
		"no name":        {":acme:workflow:SECRETVALUE-0123", "name is empty"},
		"semicolon list": {"a:acme:workflow:SECRETVALUE-0123;b:acme:operator:SECRETVALUE-4567", "holds a ';'"},
		"space list":     {"a:acme:workflow:SECRETVALUE-0123 b:acme:operator:SECRETVALUE-4567", "holds whitespace"},
		"tab in secret":  {"a:acme:workflow:SECRETVALUE\t-0123", "holds whitespace"},
		"short secret":   {"a:acme:workflow:SECRETVALUE-012", "shorter than 16 characters"},
	} {
		tokens, err := handlers.ParseTokens(tc.tokens)
		if err == nil {
			err = handlers.CheckTokens(tokens)
		}
		switch {
		case err == nil:
			t.Errorf("%s: %q accepted", name, tc.tokens)
		case strings.Contains(err.Error(), "SECRETVALUE"):
			t.Errorf("%s: the error shows the secret: %v", name, err)
		case !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s: %v, want it to say %q", name, err, tc.want)
		}
	}
}

// An API client's GET / (a browser's goes to the console) or a mistyped path says where the endpoints are listed and,
// where it is served, where the operator console is, not only that nothing is there.
func TestNoSuchEndpointSaysWhereToGo(t *testing.T) {
	withConsole, _ := operatorService(t, items.Config{}, nil)
	without := handlerstest.NewService(t, openSQLite(t), handlerstest.ServiceConfig{})
	const endpoints = "; the API's endpoints are listed by GET /openapi.json (docs/api.md)"
	for _, tc := range []struct {
		s    *handlerstest.Service
		path string
		want string
	}{
		{withConsole, "/", "no such endpoint: GET /" + endpoints + ", the operator console is at /console/"},
		{withConsole, "/v1/before_write", "no such endpoint: GET /v1/before_write" + endpoints + ", the operator console is at /console/"},
		{without, "/", "no such endpoint: GET /" + endpoints}, // no console where it is not served
	} {
		r := tc.s.Get(handlerstest.WorkflowAcme, tc.path)
		handlerstest.Expect(t, r, http.StatusNotFound, items.CodeNotFound, "")
		if msg := r.Str("error.message"); msg != tc.want {
			t.Errorf("GET %s: message %q, want %q", tc.path, msg, tc.want)
		}
	}
}
