// Package handlerstest holds the HTTP tests every store runs: the contract of API.md exercised through
// the real handler and a real HTTP server, on whatever items.Store the caller opens. The SQLite store
// runs them in package handlers; the MongoDB store runs them too.
package handlerstest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
)

// Options tune Exercise for one store.
type Options struct {
	// SkipConcurrency, when not empty, skips the tests that need the store's compare-and-set to hold
	// under concurrent callers, giving this reason (for a test server that cannot provide it).
	SkipConcurrency string
}

// Clock is the fake clock of the store conformance suite.
type Clock = itemstest.Clock

// NewClock returns a clock standing at a fixed, whole-second time.
func NewClock() *Clock { return itemstest.NewClock() }

// Secrets of the tokens every Service accepts.
const (
	WorkflowAcme   = "secret-wf-acme"
	OperatorAcme   = "secret-op-acme"
	WorkflowGlobex = "secret-wf-globex"
	OperatorGlobex = "secret-op-globex"
)

// Tokens are the tokens every Service accepts: two tenants, a workflow and an operator token each.
var Tokens = []handlers.Token{
	{Name: "wf-acme", Tenant: "acme", Role: handlers.RoleWorkflow, Secret: WorkflowAcme},
	{Name: "op-acme", Tenant: "acme", Role: handlers.RoleOperator, Secret: OperatorAcme},
	{Name: "wf-globex", Tenant: "globex", Role: handlers.RoleWorkflow, Secret: WorkflowGlobex},
	{Name: "op-globex", Tenant: "globex", Role: handlers.RoleOperator, Secret: OperatorGlobex},
}

// Service is the HTTP service on a real listener, over a store, with a fake clock.
type Service struct {
	t      testing.TB
	Store  items.Store
	Ledger *items.Ledger
	Clock  *Clock
	URL    string
	client *http.Client
	// Log holds the service's log lines.
	Log *bytes.Buffer
}

// clientTimeout bounds a test's request to the service. A store test may give its (slow) test server a
// long timeout, and the race detector slows everything: under it the bound is longer (race.go).
var clientTimeout = 30 * time.Second

// ServiceConfig changes how NewService builds the service.
type ServiceConfig struct {
	// Ledger is the ledger's configuration; its clock is replaced by the Service's.
	Ledger items.Config
	// Open runs the service without tokens.
	Open bool
	// Routes are extra routes.
	Routes []handlers.Route
	// Configure, when set, changes the handlers' configuration last (operator store, Slack, metrics).
	Configure func(*handlers.Config)
}

// NewService starts the service over store on a loopback listener; it stops when the test ends.
func NewService(t testing.TB, store items.Store, cfg ServiceConfig) *Service {
	t.Helper()
	clock := NewClock()
	cfg.Ledger.Now = clock.Now
	ledger, err := items.NewLedger(context.Background(), store, cfg.Ledger)
	if err != nil {
		t.Fatalf("NewLedger: %v", err)
	}
	var logBuf SyncBuffer
	hc := handlers.Config{Ledger: ledger, Logger: slog.New(slog.NewJSONHandler(&logBuf, nil)), Open: cfg.Open, Routes: cfg.Routes}
	if !cfg.Open {
		hc.Tokens = Tokens
	}
	if cfg.Configure != nil {
		cfg.Configure(&hc)
	}
	srv := httptest.NewServer(handlers.New(hc))
	t.Cleanup(srv.Close)
	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 100 // the race test opens 50 connections; keep them instead of churning ports
	client := &http.Client{Transport: tr, Timeout: clientTimeout}
	t.Cleanup(tr.CloseIdleConnections)
	return &Service{t: t, Store: store, Ledger: ledger, Clock: clock, URL: srv.URL, client: client, Log: &logBuf.buf}
}

// SyncBuffer collects what a program writes (its log) while a test reads it from another goroutine.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Request is one HTTP request to the service.
type Request struct {
	Method string
	Path   string
	// Token is the bearer secret; empty sends no Authorization header.
	Token string
	// ContentType defaults to application/json for a request with a body; "-" sends none.
	ContentType string
	// Body is sent as is when it is a string or []byte, and as JSON otherwise.
	Body any
	// Header holds extra headers.
	Header http.Header
	// HideLength sends the body without a Content-Length (chunked).
	HideLength bool
	// Host is the Host the request names; the service's own address when empty.
	Host string
}

// Response is what came back.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	// JSON is the body decoded as an object (nil when it is not one).
	JSON map[string]any
}

// Str returns the string at a dotted path of the JSON body ("error.code"), or "".
func (r Response) Str(path string) string {
	v, _ := r.At(path).(string)
	return v
}

// Num returns the number at a dotted path of the JSON body, or -1.
func (r Response) Num(path string) float64 {
	v, ok := r.At(path).(float64)
	if !ok {
		return -1
	}
	return v
}

// At returns the value at a dotted path of the JSON body, or nil.
func (r Response) At(path string) any {
	var v any = r.JSON
	for _, part := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[part]
	}
	return v
}

// Do sends a request and reads the whole answer.
func (s *Service) Do(req Request) Response {
	s.t.Helper()
	var body io.Reader
	if req.Body != nil {
		var b []byte
		switch v := req.Body.(type) {
		case string:
			b = []byte(v)
		case []byte:
			b = v
		default:
			var err error
			if b, err = json.Marshal(v); err != nil {
				s.t.Fatalf("encode body: %v", err)
			}
		}
		body = bytes.NewReader(b)
		if req.HideLength {
			body = io.MultiReader(body)
		}
	}
	hr, err := http.NewRequest(req.Method, s.URL+req.Path, body)
	if err != nil {
		s.t.Fatalf("new request: %v", err)
	}
	if req.Token != "" {
		hr.Header.Set("Authorization", "Bearer "+req.Token)
	}
	if req.Host != "" {
		hr.Host = req.Host
	}
	switch {
	case req.ContentType == "-":
	case req.ContentType != "":
		hr.Header.Set("Content-Type", req.ContentType)
	case req.Body != nil:
		hr.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range req.Header {
		hr.Header[k] = vs
	}
	// Errors are reported with Errorf, not Fatalf: Do runs in the race test's and the benchmarks'
	// goroutines. The zero Response (status 0) then fails the caller's checks.
	resp, err := s.client.Do(hr)
	if err != nil {
		s.t.Errorf("%s %s: %v", req.Method, req.Path, err)
		return Response{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Errorf("%s %s: read: %v", req.Method, req.Path, err)
		return Response{}
	}
	out := Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
	_ = json.Unmarshal(b, &out.JSON)
	return out
}

// Post sends a JSON body with a token.
func (s *Service) Post(token, path string, body any) Response {
	s.t.Helper()
	return s.Do(Request{Method: http.MethodPost, Path: path, Token: token, Body: body})
}

// Get sends a GET with a token.
func (s *Service) Get(token, path string) Response {
	s.t.Helper()
	return s.Do(Request{Method: http.MethodGet, Path: path, Token: token})
}

// BeforeWrite asks before a write, as tenant acme's workflow, with the given body.
func (s *Service) BeforeWrite(body map[string]any) Response {
	s.t.Helper()
	return s.Post(WorkflowAcme, "/v1/before-write", body)
}

// AfterWrite reports a write, as tenant acme's workflow.
func (s *Service) AfterWrite(body map[string]any) Response {
	s.t.Helper()
	return s.Post(WorkflowAcme, "/v1/after-write", body)
}

// Claim asks before a write for key with a fixed payload and fails the test unless it proceeds. It
// returns the answer.
func (s *Service) Claim(key string, extra map[string]any) Response {
	s.t.Helper()
	body := map[string]any{"key": key, "payload": map[string]any{"invoice": key, "amount": 120.5}}
	for k, v := range extra {
		body[k] = v
	}
	r := s.BeforeWrite(body)
	if r.Status != http.StatusOK || r.Str("decision") != "proceed" {
		s.t.Fatalf("claim %s: %d %s", key, r.Status, r.Body)
	}
	return r
}

// Item reads the item straight from the store, or nil when it does not exist.
func (s *Service) Item(tenant, key string) *items.Item {
	s.t.Helper()
	it, err := s.Store.Get(context.Background(), tenant, key)
	if err == items.ErrNotFound {
		return nil
	}
	if err != nil {
		s.t.Fatalf("store get %s/%s: %v", tenant, key, err)
	}
	return it
}

// Expect fails the test unless the response has the status and, for an error, the contract's error
// shape with the code (and, when field is not empty, a fields entry naming it).
func Expect(t testing.TB, r Response, status int, code items.Code, field string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d; body %s", r.Status, status, r.Body)
	}
	if code == "" {
		return
	}
	if len(r.JSON) != 1 || r.At("error") == nil {
		t.Fatalf("error body is not {\"error\": …}: %s", r.Body)
	}
	if got := r.Str("error.code"); got != string(code) {
		t.Fatalf("error.code %q, want %q; body %s", got, code, r.Body)
	}
	if r.Str("error.message") == "" {
		t.Fatalf("error.message is empty: %s", r.Body)
	}
	if field == "" {
		return
	}
	fields, _ := r.At("error.fields").([]any)
	for _, f := range fields {
		if m, ok := f.(map[string]any); ok && m["field"] == field && m["problem"] != "" {
			if !strings.HasPrefix(r.Str("error.message"), field+": ") && len(fields) == 1 {
				t.Fatalf("error.message %q does not name field %q", r.Str("error.message"), field)
			}
			return
		}
	}
	t.Fatalf("error.fields does not name %q: %s", field, r.Body)
}
