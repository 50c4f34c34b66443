package handlerstest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/items"
)

// badInput sends requests the contract refuses, checks each status and error shape, and then checks
// that the ledger is exactly as it was.
func badInput(t *testing.T, s *Service) {
	// Items the bad requests aim at: one in flight, one unknown, one succeeded.
	inFlight := s.Claim("held", nil)
	unknown := s.Claim("lost", nil)
	s.AfterWrite(map[string]any{"key": "lost", "claim": unknown.Str("claim"), "outcome": "unknown"})
	done := s.Claim("done", nil)
	s.AfterWrite(map[string]any{"key": "done", "claim": done.Str("claim"), "outcome": "succeeded", "external_id": "x1"})
	existing := []string{"held", "lost", "done"}
	// Keys no refused request may create.
	fresh := []string{"new-1", "new-2", "a", "wf:obj:act:1", strings.Repeat("k", 200)}

	snapshot := func() map[string]string {
		out := map[string]string{}
		for _, tenant := range []string{"acme", "globex"} {
			for _, key := range append(append([]string{}, existing...), fresh...) {
				it := s.Item(tenant, key)
				if it == nil {
					continue
				}
				b, err := json.Marshal(it)
				if err != nil {
					t.Fatal(err)
				}
				out[tenant+"/"+key] = string(b)
			}
		}
		return out
	}
	before := snapshot()

	bw := func(fields string) string { return `{"key":"new-1","payload":{"a":1}` + fields + `}` }
	aw := func(fields string) string {
		return fmt.Sprintf(`{"key":"held","claim":%q`, inFlight.Str("claim")) + fields + `}`
	}
	huge := `{"key":"new-1","payload":{"blob":"` + strings.Repeat("x", handlers.MaxBodyBytes) + `"}}`
	const (
		bwPath = "/v1/before-write"
		awPath = "/v1/after-write"
	)

	cases := []struct {
		name        string
		method      string
		path        string
		token       string
		contentType string
		body        string
		hideLength  bool
		header      http.Header
		status      int
		code        items.Code
		field       string
		message     string // the error's message, where a case checks it
	}{
		// 401: authentication comes first.
		{name: "no token", path: bwPath, body: bw(""), status: 401, code: handlers.CodeUnauthorized},
		{name: "wrong token", path: bwPath, token: "nope", body: bw(""), status: 401, code: handlers.CodeUnauthorized},
		{name: "not a bearer token", path: bwPath, header: http.Header{"Authorization": {"Basic " + WorkflowAcme}}, body: bw(""), status: 401, code: handlers.CodeUnauthorized},
		{name: "no token beats wrong content type", path: bwPath, contentType: "text/plain", body: bw(""), status: 401, code: handlers.CodeUnauthorized},
		{name: "no token on GET item", method: http.MethodGet, path: "/v1/items/held", status: 401, code: handlers.CodeUnauthorized},
		// 403: the role.
		{name: "workflow token on resolve", path: "/v1/items/lost/resolve", token: WorkflowAcme, body: `{"outcome":"succeeded","evidence":"seen in the destination"}`, status: 403, code: handlers.CodeForbidden},
		{name: "forbidden beats bad body", path: "/v1/items/lost/resolve", token: WorkflowAcme, body: `{`, status: 403, code: handlers.CodeForbidden},
		// 415: the content type.
		{name: "text/plain", path: bwPath, contentType: "text/plain", body: bw(""), status: 415, code: handlers.CodeUnsupportedMediaType},
		{name: "no content type", path: bwPath, contentType: "-", body: bw(""), status: 415, code: handlers.CodeUnsupportedMediaType},
		{name: "application/xml", path: bwPath, contentType: "application/xml", body: bw(""), status: 415, code: handlers.CodeUnsupportedMediaType},
		{name: "form", path: awPath, contentType: "application/x-www-form-urlencoded", body: "key=held", status: 415, code: handlers.CodeUnsupportedMediaType},
		{name: "latin-1 charset", path: bwPath, contentType: "application/json; charset=iso-8859-1", body: bw(""), status: 415, code: handlers.CodeUnsupportedMediaType},
		{name: "wrong content type beats oversized body", path: bwPath, contentType: "text/plain", body: huge, status: 415, code: handlers.CodeUnsupportedMediaType},
		// 413: the size.
		{name: "oversized body", path: bwPath, body: huge, status: 413, code: handlers.CodePayloadTooLarge},
		{name: "oversized body without length", path: bwPath, body: huge, hideLength: true, status: 413, code: handlers.CodePayloadTooLarge},
		// 400: the body.
		{name: "malformed JSON", path: bwPath, body: `{"key": "new-1", "payload": {"a": 1},`, status: 400, code: items.CodeInvalid, field: "body"},
		{name: "empty body", path: bwPath, body: ``, status: 400, code: items.CodeInvalid, field: "body"},
		{name: "array body", path: bwPath, body: `[{"key":"new-1"}]`, status: 400, code: items.CodeInvalid, field: "body"},
		{name: "two objects", path: bwPath, body: bw("") + `{}`, status: 400, code: items.CodeInvalid, field: "body"},
		{name: "invalid UTF-8", path: bwPath, body: "{\"key\":\"new-1\",\"payload\":{\"a\":\"\xff\"}}", status: 400, code: items.CodeInvalid, field: "body"},
		{name: "unknown field", path: bwPath, body: bw(`,"colour":"red"`), status: 400, code: items.CodeInvalid, field: "colour"},
		{name: "field name in another case", path: bwPath, body: `{"Key":"new-1","payload":{"a":1}}`, status: 400, code: items.CodeInvalid, field: "Key"},
		{name: "field given twice", path: bwPath, body: `{"key":"new-1","key":"new-2","payload":{"a":1}}`, status: 400, code: items.CodeInvalid, field: "key"},
		{name: "unknown field in after-write", path: awPath, body: aw(`,"outcome":"succeeded","extra":1`), status: 400, code: items.CodeInvalid, field: "extra"},
		{name: "key is a number", path: bwPath, body: `{"key":5,"payload":{"a":1}}`, status: 400, code: items.CodeInvalid, field: "key"},
		{name: "lease as a string", path: bwPath, body: bw(`,"lease_seconds":"300"`), status: 400, code: items.CodeInvalid, field: "lease_seconds"},
		{name: "batch_index not whole", path: bwPath, body: bw(`,"batch_index":1.5`), status: 400, code: items.CodeInvalid, field: "batch_index"},
		{name: "reference is an object", path: bwPath, body: bw(`,"reference":{"id":1}`), status: 400, code: items.CodeInvalid, field: "reference"},
		{name: "http_status as text", path: awPath, body: aw(`,"outcome":"failed","http_status":"500"`), status: 400, code: items.CodeInvalid, field: "http_status"},
		{name: "error is a string", path: awPath, body: aw(`,"outcome":"failed","error":"timeout"`), status: 400, code: items.CodeInvalid, field: "error"},
		{name: "error class is a number", path: awPath, body: aw(`,"outcome":"failed","error":{"class":7}`), status: 400, code: items.CodeInvalid, field: "error.class"},
		{name: "payload missing", path: bwPath, body: `{"key":"new-1"}`, status: 400, code: items.CodeInvalid, field: "payload"},
		{name: "payload null", path: bwPath, body: `{"key":"new-1","payload":null}`, status: 400, code: items.CodeInvalid, field: "payload"},
		{name: "payload is a string", path: bwPath, body: `{"key":"new-1","payload":"a=1"}`, status: 400, code: items.CodeInvalid, field: "payload"},
		{name: "payload is an array", path: bwPath, body: `{"key":"new-1","payload":[1]}`, status: 400, code: items.CodeInvalid, field: "payload"},
		{name: "payload duplicate member", path: bwPath, body: `{"key":"new-1","payload":{"a":1,"a":2}}`, status: 400, code: items.CodeInvalid, field: "payload"},
		{name: "payload lone surrogate", path: bwPath, body: `{"key":"new-1","payload":{"a":"\ud800"}}`, status: 400, code: items.CodeInvalid, field: "payload"},
		{name: "key with slash", path: bwPath, body: `{"key":"a/b","payload":{}}`, status: 400, code: items.CodeInvalid, field: "key"},
		{name: "key of 201 characters", path: bwPath, body: `{"key":"` + strings.Repeat("k", 201) + `","payload":{}}`, status: 400, code: items.CodeInvalid, field: "key"},
		{name: "empty key", path: bwPath, body: `{"key":"","payload":{}}`, status: 400, code: items.CodeInvalid, field: "key"},
		{name: "key of dots", path: bwPath, body: `{"key":"..","payload":{}}`, status: 400, code: items.CodeInvalid, field: "key"},
		{name: "key with space", path: bwPath, body: `{"key":"new 1","payload":{}}`, status: 400, code: items.CodeInvalid, field: "key"},
		{name: "no key", path: bwPath, body: `{"payload":{}}`, status: 400, code: items.CodeInvalid, field: "key"},
		{name: "key and parts", path: bwPath, body: `{"key":"new-1","workflow":"wf","object":"obj","action":"act","sequence":1,"payload":{}}`, status: 400, code: items.CodeInvalid, field: "key"},
		{name: "parts without sequence", path: bwPath, body: `{"workflow":"wf","object":"obj","action":"act","payload":{}}`, status: 400, code: items.CodeInvalid, field: "sequence"},
		{name: "negative sequence", path: bwPath, body: `{"workflow":"wf","object":"obj","action":"act","sequence":-1,"payload":{}}`, status: 400, code: items.CodeInvalid, field: "sequence"},
		{name: "part with colon", path: bwPath, body: `{"workflow":"wf:x","object":"obj","action":"act","sequence":1,"payload":{}}`, status: 400, code: items.CodeInvalid, field: "workflow"},
		{name: "lease too short", path: bwPath, body: bw(`,"lease_seconds":4`), status: 400, code: items.CodeInvalid, field: "lease_seconds"},
		{name: "lease too long", path: bwPath, body: bw(`,"lease_seconds":86401`), status: 400, code: items.CodeInvalid, field: "lease_seconds"},
		{name: "lease zero", path: bwPath, body: bw(`,"lease_seconds":0`), status: 400, code: items.CodeInvalid, field: "lease_seconds"},
		{name: "bad dedupe word", path: bwPath, body: bw(`,"dedupe":"maybe"`), status: 400, code: items.CodeInvalid, field: "dedupe"},
		{name: "negative batch_index", path: bwPath, body: bw(`,"batch_index":-1`), status: 400, code: items.CodeInvalid, field: "batch_index"},
		{name: "failed without evidence", path: awPath, body: aw(`,"outcome":"failed"`), status: 400, code: items.CodeInvalid, field: "error"},
		{name: "failed with a 2xx", path: awPath, body: aw(`,"outcome":"failed","http_status":201`), status: 400, code: items.CodeInvalid, field: "http_status"},
		{name: "class http without status", path: awPath, body: aw(`,"outcome":"failed","error":{"class":"http"}`), status: 400, code: items.CodeInvalid, field: "http_status"},
		{name: "http_status inside error", path: awPath, body: aw(`,"outcome":"failed","error":{"class":"http","http_status":503}`), status: 400, code: items.CodeInvalid, field: "http_status",
			message: "http_status: error class http needs the http_status, beside outcome, not inside error"},
		{name: "unknown error class", path: awPath, body: aw(`,"outcome":"failed","error":{"class":"boom"}`), status: 400, code: items.CodeInvalid, field: "error.class"},
		{name: "unknown outcome word", path: awPath, body: aw(`,"outcome":"done"`), status: 400, code: items.CodeInvalid, field: "outcome"},
		{name: "no claim", path: awPath, body: `{"key":"held","outcome":"succeeded"}`, status: 400, code: items.CodeInvalid, field: "claim"},
		{name: "http_status out of range", path: awPath, body: aw(`,"outcome":"failed","http_status":600`), status: 400, code: items.CodeInvalid, field: "http_status"},
		{name: "result not an object", path: awPath, body: aw(`,"outcome":"succeeded","result":"ok"`), status: 400, code: items.CodeInvalid, field: "result"},
		{name: "reconcile without evidence", path: "/v1/reconcile", body: `{"key":"lost","finding":"absent"}`, status: 400, code: items.CodeInvalid, field: "evidence"},
		{name: "reconcile found without external_id", path: "/v1/reconcile", body: `{"key":"lost","finding":"found","evidence":"seen in the destination"}`, status: 400, code: items.CodeInvalid, field: "external_id"},
		{name: "reconcile bad finding", path: "/v1/reconcile", body: `{"key":"lost","finding":"maybe","evidence":"seen in the destination"}`, status: 400, code: items.CodeInvalid, field: "finding"},
		{name: "resolve bad outcome", path: "/v1/items/lost/resolve", token: OperatorAcme, body: `{"outcome":"done","evidence":"seen in the destination"}`, status: 400, code: items.CodeInvalid, field: "outcome"},
		{name: "resolve short evidence", path: "/v1/items/lost/resolve", token: OperatorAcme, body: `{"outcome":"succeeded","evidence":"   ok     "}`, status: 400, code: items.CodeInvalid, field: "evidence"},
		{name: "resolve unknown field", path: "/v1/items/lost/resolve", token: OperatorAcme, body: `{"outcome":"succeeded","evidence":"seen in the destination","by":"me"}`, status: 400, code: items.CodeInvalid, field: "by"},
		{name: "GET key with encoded slash", method: http.MethodGet, path: "/v1/items/a%2Fb", status: 400, code: items.CodeInvalid, field: "key"},
		{name: "GET key with encoded space", method: http.MethodGet, path: "/v1/items/new%201", status: 400, code: items.CodeInvalid, field: "key"},
		{name: "resolve bad key beats missing key", path: "/v1/items/a%2Fb/resolve", token: OperatorAcme, body: `{"outcome":"succeeded","evidence":"seen in the destination"}`, status: 400, code: items.CodeInvalid, field: "key"},
		// 404: the key, for the caller's tenant.
		{name: "GET missing key", method: http.MethodGet, path: "/v1/items/new-2", status: 404, code: items.CodeNotFound},
		{name: "GET another tenant's key", method: http.MethodGet, path: "/v1/items/held", token: WorkflowGlobex, status: 404, code: items.CodeNotFound},
		{name: "after-write on a missing key", path: awPath, body: `{"key":"new-2","claim":"c_x","outcome":"succeeded"}`, status: 404, code: items.CodeNotFound},
		{name: "after-write on another tenant's key", path: awPath, token: WorkflowGlobex, body: aw(`,"outcome":"succeeded"`), status: 404, code: items.CodeNotFound},
		{name: "reconcile another tenant's key", path: "/v1/reconcile", token: WorkflowGlobex, body: `{"key":"lost","finding":"absent","evidence":"searched the destination"}`, status: 404, code: items.CodeNotFound},
		{name: "resolve another tenant's key", path: "/v1/items/lost/resolve", token: OperatorGlobex, body: `{"outcome":"succeeded","evidence":"seen in the destination"}`, status: 404, code: items.CodeNotFound},
		// 409: the state.
		{name: "after-write with an unknown claim", path: awPath, body: `{"key":"held","claim":"c_000000000000000000000000","outcome":"succeeded"}`, status: 409, code: items.CodeConflict},
		{name: "resolve an item in flight", path: "/v1/items/held/resolve", token: OperatorAcme, body: `{"outcome":"succeeded","evidence":"seen in the destination"}`, status: 409, code: items.CodeConflict},
		{name: "resolve a succeeded item", path: "/v1/items/done/resolve", token: OperatorAcme, body: `{"outcome":"not_committed","evidence":"not in the destination"}`, status: 409, code: items.CodeConflict},
		{name: "reconcile an item without lookup dedupe", path: "/v1/reconcile", body: `{"key":"lost","finding":"absent","evidence":"searched the destination"}`, status: 409, code: items.CodeConflict},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := Request{Method: tc.method, Path: tc.path, Token: tc.token, ContentType: tc.contentType, HideLength: tc.hideLength, Header: tc.header}
			if req.Method == "" {
				req.Method = http.MethodPost
			}
			if req.Token == "" && tc.status != 401 {
				req.Token = WorkflowAcme
			}
			if req.Method == http.MethodPost {
				req.Body = tc.body
			}
			r := s.Do(req)
			Expect(t, r, tc.status, tc.code, tc.field)
			if msg := r.Str("error.message"); tc.message != "" && msg != tc.message {
				t.Errorf("message %q, want %q", msg, tc.message)
			}
		})
	}

	after := snapshot()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("refused requests changed %s:\nbefore %s\nafter  %s", k, v, after[k])
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("refused requests created %s", k)
		}
	}
}
