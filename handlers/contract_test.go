package handlers_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/gin-gonic/gin"

	"github.com/replaysafe/companion/alerts"
	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/sqlitestore"
)

const slackSecret = "8f742231b10e8888abcd99yyyzzz85a5"

// fakeSlackAPI answers every Web API method with ok and records the method names.
type fakeSlackAPI struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeSlackAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.calls = append(f.calls, strings.TrimPrefix(r.URL.Path, "/api/"))
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"ok":true,"channel":"D0OWNER","ts":"1764439200.000100"}`)
}

func (f *fakeSlackAPI) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// slackService is the service with the operator surface and the Slack endpoint, over a fake Slack.
func slackService(t *testing.T, ledger items.Config) (*handlerstest.Service, *alerts.Dispatcher, *fakeSlackAPI) {
	t.Helper()
	api := &fakeSlackAPI{}
	slackSrv := httptest.NewServer(api)
	t.Cleanup(slackSrv.Close)
	var d *alerts.Dispatcher
	svc, _ := operatorService(t, ledger, func(c *handlers.Config) {
		store := c.Operators.(*sqlitestore.Store)
		n, err := alerts.NewSlack(alerts.SlackConfig{BotToken: "xoxb-test", SigningSecret: slackSecret, APIURL: slackSrv.URL + "/api/"})
		if err != nil {
			t.Fatal(err)
		}
		d, err = alerts.NewDispatcher(alerts.DispatcherConfig{Ledger: c.Ledger, Outbox: store, Notifier: n,
			Routing: alerts.Routing{DefaultOwner: "U0OWNER"}, Logger: c.Logger})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Wait)
		a, err := alerts.NewActions(alerts.ActionsConfig{Slack: n, Dispatcher: d, Logger: c.Logger})
		if err != nil {
			t.Fatal(err)
		}
		c.Resolver, c.SlackActions = d, a
	})
	return svc, d, api
}

// slackRequest is a request Slack would send to the interactivity URL, signed at `at` with secret.
func slackRequest(payload any, at time.Time, secret string) handlerstest.Request {
	b, _ := json.Marshal(payload)
	body := url.Values{"payload": {string(b)}}.Encode()
	stamp := strconv.FormatInt(at.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "v0:%s:%s", stamp, body)
	h := http.Header{}
	h.Set("X-Slack-Request-Timestamp", stamp)
	h.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
	return handlerstest.Request{Method: http.MethodPost, Path: "/v1/slack/actions", ContentType: "application/x-www-form-urlencoded",
		Body: body, Header: h}
}

func evidenceSubmission(key, outcome, evidence string) map[string]any {
	meta, _ := json.Marshal(map[string]string{"tenant": "acme", "key": key, "outcome": outcome})
	return map[string]any{"type": "view_submission", "user": map[string]any{"id": "U0ALICE"},
		"view": map[string]any{"callback_id": alerts.CallbackResolveEvidence, "private_metadata": string(meta),
			"state": map[string]any{"values": map[string]any{
				alerts.BlockEvidence: map[string]any{alerts.ActionEvidenceText: map[string]any{"type": "plain_text_input", "value": evidence}},
			}}}}
}

func TestSlackActionsOverHTTP(t *testing.T) {
	t.Parallel()
	svc, d, api := slackService(t, items.Config{})
	c := svc.Claim("inv-1", nil)
	svc.AfterWrite(map[string]any{"key": "inv-1", "claim": c.Str("claim"), "outcome": "unknown"})
	if _, err := d.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	good := evidenceSubmission("inv-1", "succeeded", "found invoice INV-88 in the billing tool at 18:03")

	handlerstest.Expect(t, svc.Do(slackRequest(good, time.Now(), "wrong-secret")), http.StatusUnauthorized, handlers.CodeUnauthorized, "")
	handlerstest.Expect(t, svc.Do(slackRequest(good, time.Now().Add(-6*time.Minute), slackSecret)), http.StatusUnauthorized, handlers.CodeUnauthorized, "")
	json := slackRequest(good, time.Now(), slackSecret)
	json.ContentType = "application/json"
	handlerstest.Expect(t, svc.Do(json), http.StatusUnsupportedMediaType, handlers.CodeUnsupportedMediaType, "")
	short := svc.Do(slackRequest(evidenceSubmission("inv-1", "succeeded", "ok"), time.Now(), slackSecret))
	if short.Status != http.StatusOK || short.Str("response_action") != "errors" || short.Str("errors.evidence") == "" {
		t.Fatalf("short evidence answered %d %s, want the modal's error on the evidence block", short.Status, short.Body)
	}
	if it := svc.Item("acme", "inv-1"); it.State != items.StateUnknown {
		t.Fatalf("refused requests changed the item: %s", it.State)
	}

	r := svc.Do(slackRequest(good, time.Now(), slackSecret))
	if r.Status != http.StatusOK || len(r.Body) != 0 {
		t.Fatalf("submission answered %d %q, want an empty 200", r.Status, r.Body)
	}
	it := svc.Item("acme", "inv-1")
	if it.State != items.StateSucceeded || it.Resolution == nil || it.Resolution.By != "slack:U0ALICE" {
		t.Fatalf("item %s resolution %+v, want succeeded by slack:U0ALICE", it.State, it.Resolution)
	}
	d.Wait()
	if calls := strings.Join(api.Calls(), " "); calls != "chat.postMessage chat.update" {
		t.Fatalf("Slack calls %q, want the alert and then its update", calls)
	}
}

func TestResolveThroughTheAPIUpdatesTheSlackMessage(t *testing.T) {
	t.Parallel()
	svc, d, api := slackService(t, items.Config{})
	c := svc.Claim("inv-1", nil)
	svc.AfterWrite(map[string]any{"key": "inv-1", "claim": c.Str("claim"), "outcome": "unknown"})
	if _, err := d.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := svc.Post(handlerstest.OperatorAcme, "/v1/items/inv-1/resolve", map[string]any{"outcome": "succeeded",
		"evidence": "found invoice INV-88 in the billing tool"})
	handlerstest.Expect(t, r, http.StatusOK, "", "")
	d.Wait()
	if calls := strings.Join(api.Calls(), " "); calls != "chat.postMessage chat.update" {
		t.Fatalf("Slack calls %q, want the alert and then its update", calls)
	}
}

// contract loads the served OpenAPI document and a router over it for the service at base.
func contract(t *testing.T, svc *handlerstest.Service) (*openapi3.T, func(req handlerstest.Request, resp handlerstest.Response)) {
	t.Helper()
	r := svc.Get("", "/openapi.json")
	handlerstest.Expect(t, r, http.StatusOK, "", "")
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("served document invalid: %v", err)
	}
	doc.Servers = openapi3.Servers{{URL: svc.URL}}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	check := func(req handlerstest.Request, resp handlerstest.Response) {
		t.Helper()
		var body []byte
		switch b := req.Body.(type) {
		case nil:
		case string:
			body = []byte(b)
		default:
			body, _ = json.Marshal(b)
		}
		hr, _ := http.NewRequest(req.Method, svc.URL+req.Path, bytes.NewReader(body))
		hr.Header.Set("Content-Type", "application/json")
		if req.ContentType != "" {
			hr.Header.Set("Content-Type", req.ContentType)
		}
		for k, vs := range req.Header {
			hr.Header[k] = vs
		}
		route, params, err := router.FindRoute(hr)
		if err != nil {
			t.Errorf("%s %s is not in the document: %v", req.Method, req.Path, err)
			return
		}
		in := &openapi3filter.RequestValidationInput{Request: hr, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
		if resp.Status < 400 {
			if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
				t.Errorf("%s %s: an accepted request does not match the document: %v", req.Method, req.Path, err)
			}
		}
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.Status, Header: resp.Header,
			Body: io.NopCloser(bytes.NewReader(resp.Body))}
		if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
			t.Errorf("%s %s → %d does not match the document: %v\n%s", req.Method, req.Path, resp.Status, err, resp.Body)
		}
	}
	return doc, check
}

func TestAnswersMatchTheOpenAPIDocument(t *testing.T) {
	t.Parallel()
	svc, d, _ := slackService(t, items.Config{Destinations: map[string]items.Destination{"crm": {Dedupe: items.DedupeLookup}}})
	_, check := contract(t, svc)
	do := func(req handlerstest.Request) handlerstest.Response {
		t.Helper()
		resp := svc.Do(req)
		check(req, resp)
		return resp
	}
	post := func(token, path string, body any) handlerstest.Response {
		return do(handlerstest.Request{Method: http.MethodPost, Path: path, Token: token, Body: body})
	}
	get := func(token, path string) handlerstest.Response {
		return do(handlerstest.Request{Method: http.MethodGet, Path: path, Token: token})
	}
	wf, op := handlerstest.WorkflowAcme, handlerstest.OperatorAcme
	payload := map[string]any{"invoice": "742", "amount": 120.5}

	get("", "/healthz")
	get("", "/readyz")
	a := post(wf, "/v1/before-write", map[string]any{"key": "inv-1", "payload": payload, "reference": "QT-1", "batch_id": "exec-1", "batch_index": 0})
	post(wf, "/v1/before-write", map[string]any{"key": "inv-1", "payload": payload}) // skip/in_progress
	post(wf, "/v1/before-write", map[string]any{"workflow": "wf", "object": "o", "action": "a", "sequence": 2, "payload": payload})
	post(wf, "/v1/before-write", map[string]any{"key": "inv-1", "payload": payload, "bogus": 1}) // 400
	post("", "/v1/before-write", map[string]any{"key": "inv-1", "payload": payload})             // 401
	post(wf, "/v1/after-write", map[string]any{"key": "inv-1", "claim": a.Str("claim"), "outcome": "succeeded", "external_id": "x-1", "result": map[string]any{"id": 1}})
	post(wf, "/v1/before-write", map[string]any{"key": "inv-1", "payload": payload})                       // skip/succeeded with result
	post(wf, "/v1/before-write", map[string]any{"key": "inv-1", "payload": map[string]any{"other": true}}) // conflict
	post(wf, "/v1/after-write", map[string]any{"key": "nope", "claim": "c_x", "outcome": "succeeded"})     // 404
	post(wf, "/v1/after-write", map[string]any{"key": "inv-1", "claim": "c_x", "outcome": "succeeded"})    // 409
	l := post(wf, "/v1/before-write", map[string]any{"key": "crm-1", "payload": payload, "destination": "crm", "reference": "Q-9"})
	post(wf, "/v1/after-write", map[string]any{"key": "crm-1", "claim": l.Str("claim"), "outcome": "failed", "error": map[string]any{"class": "timeout", "extra": "kept"}})
	post(wf, "/v1/before-write", map[string]any{"key": "crm-1", "payload": payload, "destination": "crm"}) // reconcile
	post(wf, "/v1/reconcile", map[string]any{"key": "crm-1", "finding": "lookup_failed", "evidence": "the CRM search answered 500 twice"})
	u := post(wf, "/v1/before-write", map[string]any{"key": "inv-2", "payload": payload, "owner": "U024BE7LH", "lease_seconds": 60})
	post(wf, "/v1/after-write", map[string]any{"key": "inv-2", "claim": u.Str("claim"), "outcome": "unknown", "http_status": 504})
	if _, err := d.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	get(wf, "/v1/items/inv-1")
	get(wf, "/v1/items/crm-1")
	get(wf, "/v1/items/missing") // 404
	post(op, "/v1/items/inv-2/resolve", map[string]any{"outcome": "not_committed", "evidence": "no record in billing for QT-2"})
	post(op, "/v1/items/inv-2/resolve", map[string]any{"outcome": "not_committed", "evidence": "no record in billing for QT-2"})       // unchanged
	post(op, "/v1/items/inv-1/resolve", map[string]any{"outcome": "succeeded", "evidence": "it is there, id x-1"})                     // 409
	post(wf, "/v1/items/inv-1/resolve", map[string]any{"outcome": "succeeded", "evidence": "it is there, id x-1"})                     // 403
	post(wf, "/v1/after-write", map[string]any{"key": "inv-1", "claim": a.Str("claim"), "outcome": "succeeded", "external_id": "x-2"}) // duplicate_effect
	if ack := post(op, "/v1/items/inv-1/resolve", map[string]any{"outcome": "acknowledged", "evidence": "two records, one voided by hand"}); ack.Status != http.StatusOK {
		t.Errorf("resolve acknowledged of a duplicate effect: %d %s", ack.Status, ack.Body)
	}
	post(op, "/v1/items/inv-2/resolve", map[string]any{"outcome": "acknowledged", "evidence": "nothing to acknowledge here"}) // 409
	get(op, "/v1/items?needs_person=true&limit=10")
	get(op, "/v1/items?limit=1")
	get(op, "/v1/items?state=bogus") // 400
	get(wf, "/v1/items?execution_id=41&limit=5")
	get(wf, "/v1/items?state=unknown") // 403
	get(op, "/v1/stats")
	get(op, "/v1/stats/series")
	get(op, "/v1/stats/series?step=1d&destination=crm")
	get(op, "/v1/stats/series?step=1w") // 400
	get(op, "/metrics")
	bw := post(wf, "/v1/batches/before-write", map[string]any{"batch_id": "exec-2:Send", "items": []any{
		map[string]any{"key": "b-1", "payload": payload, "reference": "QT-b1"},
		map[string]any{"key": "inv-1", "payload": payload},
		map[string]any{"workflow": "wf", "object": "b2", "action": "send", "sequence": "0", "payload": payload, "batch_index": 7},
	}})
	post(wf, "/v1/batches/before-write", map[string]any{"batch_id": "exec-2:Send", "items": []any{map[string]any{"key": "b-1"}}}) // 400
	post(wf, "/v1/batches/prepare", map[string]any{"batch_id": "exec-3", "items": []any{map[string]any{"key": "p-1", "payload": payload}}})
	claims, _ := bw.At("items").([]any)
	if len(claims) != 3 {
		t.Fatalf("batch before-write: %s", bw.Body)
	}
	post(wf, "/v1/batches/after-write", map[string]any{"items": []any{
		map[string]any{"key": "b-1", "claim": claims[0].(map[string]any)["claim"], "outcome": "succeeded", "external_id": "x-9"},
		map[string]any{"key": "missing", "claim": "c_x", "outcome": "succeeded"},
		map[string]any{"key": "b-1", "claim": "c_other", "outcome": "succeeded"},
	}})
	get(wf, "/v1/batches/"+url.PathEscape("exec-2:Send"))
	get(wf, "/v1/batches/exec-3")
	get(wf, "/v1/batches/nope") // 404
	do(slackRequest(evidenceSubmission("crm-1", "succeeded", "found Q-9 in the CRM by hand, id 77"), time.Now(), slackSecret))
	do(slackRequest(evidenceSubmission("crm-1", "succeeded", "x"), time.Now(), slackSecret))
	do(slackRequest(evidenceSubmission("crm-1", "succeeded", "found Q-9"), time.Now(), "wrong")) // 401
}

func TestEveryRouteIsInTheOpenAPIDocument(t *testing.T) {
	t.Parallel()
	store := openSQLite(t)
	ledger, err := items.NewLedger(context.Background(), store, items.Config{})
	if err != nil {
		t.Fatal(err)
	}
	engine, ok := handlers.New(handlers.Config{Ledger: ledger, Open: true}).(interface{ Routes() gin.RoutesInfo })
	if !ok {
		t.Fatal("the handler does not list its routes")
	}
	doc := loadContract(t)
	param := regexp.MustCompile(`:([a-z_]+)`)
	for _, r := range engine.Routes() {
		path := param.ReplaceAllString(r.Path, "{$1}")
		p := doc.Paths.Find(path)
		if p == nil || p.GetOperation(r.Method) == nil {
			t.Errorf("%s %s is served but not described in openapi.json", r.Method, path)
		}
	}
}
