package sandbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/sandbox"
)

// fakeClock is a clock the test moves by hand, for key retention.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 4, 17, 10, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// receiver is a Receiver served on 127.0.0.1:0 by Serve, with a client that
// opens a fresh connection per request (see dropping tests for why).
type receiver struct {
	t      *testing.T
	rc     *sandbox.Receiver
	url    string
	client *http.Client
	stop   func() error
}

func startReceiver(t *testing.T, cfg sandbox.Config) *receiver {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	rc, err := sandbox.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- rc.Serve(ctx, ln) }()
	var once sync.Once
	var serveErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case serveErr = <-served:
			case <-time.After(10 * time.Second):
				serveErr = context.DeadlineExceeded
			}
		})
		return serveErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Serve returned %v after its context was cancelled", err)
		}
	})
	return &receiver{
		t:      t,
		rc:     rc,
		url:    "http://" + ln.Addr().String(),
		client: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
		stop:   stop,
	}
}

// in returns s reporting to t, for a subtest that uses its parent's receiver: a helper that fails must
// stop the subtest, not call FailNow on the parent from the subtest's goroutine.
func (s *receiver) in(t *testing.T) *receiver {
	c := *s
	c.t = t
	return &c
}

// response is what a test looks at in an answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decoding %s: %v", r.body, err)
	}
}

func (r response) errorCode(t *testing.T) string {
	t.Helper()
	var body struct {
		Error string `json:"error"`
	}
	r.json(t, &body)
	return body.Error
}

// send makes one request and fails the test on a transport error.
func (s *receiver) send(method, path, body string, header map[string]string) response {
	s.t.Helper()
	resp, err := s.try(s.client, method, path, body, header)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// try makes one request with client and returns the transport error, if any.
func (s *receiver) try(client *http.Client, method, path, body string, header map[string]string) (response, error) {
	var reader io.Reader
	if body != "" {
		reader = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.url+path, reader)
	if err != nil {
		s.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{status: resp.StatusCode, header: resp.Header, body: data}, nil
}

func (s *receiver) post(body string, header map[string]string) response {
	s.t.Helper()
	return s.send(http.MethodPost, "/records", body, header)
}

func (s *receiver) effects() sandbox.Effects {
	s.t.Helper()
	resp := s.send(http.MethodGet, "/effects", "", nil)
	if resp.status != http.StatusOK {
		s.t.Fatalf("GET /effects: %d %s", resp.status, resp.body)
	}
	var e sandbox.Effects
	resp.json(s.t, &e)
	return e
}

func (s *receiver) lookup(reference string) []sandbox.Record {
	s.t.Helper()
	resp := s.send(http.MethodGet, "/records?reference="+reference, "", nil)
	if resp.status != http.StatusOK {
		s.t.Fatalf("GET /records?reference=%s: %d %s", reference, resp.status, resp.body)
	}
	var body struct {
		Records []sandbox.Record `json:"records"`
	}
	resp.json(s.t, &body)
	return body.Records
}

// control sends a control request and fails the test unless it is 200.
func (s *receiver) control(method, path, body string) response {
	s.t.Helper()
	resp := s.send(method, path, body, nil)
	if resp.status != http.StatusOK {
		s.t.Fatalf("%s %s %s: %d %s", method, path, body, resp.status, resp.body)
	}
	return resp
}

func key(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }

func wantStatus(t *testing.T, resp response, want int) {
	t.Helper()
	if resp.status != want {
		t.Fatalf("status %d, want %d (body %s)", resp.status, want, resp.body)
	}
}

func wantTotal(t *testing.T, s *receiver, want int) sandbox.Effects {
	t.Helper()
	e := s.effects()
	if e.Total != want {
		t.Fatalf("effects total %d, want %d (%+v)", e.Total, want, e)
	}
	return e
}

func TestCreateRecord(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s := startReceiver(t, sandbox.Config{Now: clock.Now})

	resp := s.post(`{"reference":"QT-2026-0417","amount":120.5}`, key("ik_1"))
	wantStatus(t, resp, http.StatusCreated)
	var rec sandbox.Record
	resp.json(t, &rec)
	want := sandbox.Record{ID: "rec_1", Reference: "QT-2026-0417", IdempotencyKey: "ik_1", CreatedAt: clock.Now()}
	if rec != want {
		t.Errorf("record %+v, want %+v", rec, want)
	}
	if !strings.Contains(string(resp.body), `"created_at":"2026-04-17T10:00:00Z"`) {
		t.Errorf("created_at is not plain RFC 3339 UTC: %s", resp.body)
	}
	if got := resp.header.Get("X-Request-Id"); !strings.HasPrefix(got, "req_") {
		t.Errorf("X-Request-Id %q, want req_<n>", got)
	}
	if resp.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("a first creation is marked replayed")
	}

	health := s.send(http.MethodGet, "/healthz", "", nil)
	wantStatus(t, health, http.StatusOK)
	if health.header.Get("X-Request-Id") == resp.header.Get("X-Request-Id") {
		t.Errorf("two responses share X-Request-Id %q", resp.header.Get("X-Request-Id"))
	}

	e := wantTotal(t, s, 1)
	if e.ByReference["QT-2026-0417"] != 1 || e.ByIdempotencyKey["ik_1"] != 1 {
		t.Errorf("effects %+v", e)
	}
	if got := s.rc.Effects(); got.Total != 1 || got.ByReference["QT-2026-0417"] != 1 {
		t.Errorf("Effects() = %+v, want what /effects says", got)
	}
}

func TestInvalidBodiesCreateNothing(t *testing.T) {
	t.Parallel()
	s := startReceiver(t, sandbox.Config{})
	for name, body := range map[string]string{
		"NotJSON":            `{"reference":`,
		"NotAnObject":        `["R1"]`,
		"ReferenceNotString": `{"reference":42}`,
		"DuplicateMember":    `{"reference":"R1","reference":"R2"}`,
		"TrailingData":       `{"reference":"R1"} {}`,
	} {
		resp := s.post(body, key("k-"+name))
		if resp.status != http.StatusBadRequest || resp.errorCode(t) != "invalid_body" {
			t.Errorf("%s: %d %s, want 400 invalid_body", name, resp.status, resp.body)
		}
	}
	big := `{"reference":"R1","pad":"` + strings.Repeat("x", sandbox.MaxBodyBytes) + `"}`
	wantStatus(t, s.post(big, nil), http.StatusRequestEntityTooLarge)
	wantTotal(t, s, 0)
}

func TestKeyModeRepeatReplaysFirstResponse(t *testing.T) {
	t.Parallel()
	s := startReceiver(t, sandbox.Config{Dedupe: sandbox.DedupeKey})

	first := s.post(`{"reference":"R1","amount":120.5,"lines":[1,2]}`, key("K"))
	wantStatus(t, first, http.StatusCreated)
	// Same body as canonical JSON: other member order, whitespace, escapes.
	again := s.post("{ \"lines\": [1, 2],\n \"amount\": 120.5, \"reference\": \"\\u00521\" }", key("K"))
	wantStatus(t, again, http.StatusCreated)
	if !bytes.Equal(again.body, first.body) {
		t.Errorf("replayed body %s, want the first %s", again.body, first.body)
	}
	if again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay lacks Idempotent-Replayed: true")
	}
	if again.header.Get("X-Request-Id") == first.header.Get("X-Request-Id") {
		t.Errorf("a replay reuses the first X-Request-Id")
	}
	e := wantTotal(t, s, 1)
	if e.ByIdempotencyKey["K"] != 1 {
		t.Errorf("by_idempotency_key %v", e.ByIdempotencyKey)
	}
}

func TestKeyModeChangedBodyIsRefused(t *testing.T) {
	t.Parallel()
	s := startReceiver(t, sandbox.Config{})
	wantStatus(t, s.post(`{"reference":"R1","amount":1}`, key("K")), http.StatusCreated)
	for name, body := range map[string]string{
		"OtherValue":     `{"reference":"R1","amount":2}`,
		"SameNumberText": `{"reference":"R1","amount":1.0}`, // numbers compare by their text
		"ExtraMember":    `{"reference":"R1","amount":1,"note":""}`,
	} {
		resp := s.post(body, key("K"))
		if resp.status != http.StatusUnprocessableEntity || resp.errorCode(t) != "idempotency_key_reused" {
			t.Errorf("%s: %d %s, want 422 idempotency_key_reused", name, resp.status, resp.body)
		}
	}
	wantTotal(t, s, 1)
}

func TestKeyModeWithoutKeyCreatesEachTime(t *testing.T) {
	t.Parallel()
	s := startReceiver(t, sandbox.Config{})
	for range 3 {
		wantStatus(t, s.post(`{"reference":"R1"}`, nil), http.StatusCreated)
	}
	e := wantTotal(t, s, 3)
	if e.ByReference["R1"] != 3 || len(e.ByIdempotencyKey) != 0 {
		t.Errorf("effects %+v", e)
	}
}

func TestNoneModeCreatesOnEveryCall(t *testing.T) {
	t.Parallel()
	s := startReceiver(t, sandbox.Config{Dedupe: sandbox.DedupeNone})
	a := s.post(`{"reference":"R1"}`, key("K"))
	b := s.post(`{"reference":"R1"}`, key("K"))
	wantStatus(t, a, http.StatusCreated)
	wantStatus(t, b, http.StatusCreated)
	if bytes.Equal(a.body, b.body) || b.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("none mode replayed: %s then %s", a.body, b.body)
	}
	// A changed body is no conflict either: the key is ignored.
	wantStatus(t, s.post(`{"reference":"R1","x":1}`, key("K")), http.StatusCreated)
	e := wantTotal(t, s, 3)
	if e.ByIdempotencyKey["K"] != 3 {
		t.Errorf("by_idempotency_key %v, want K:3", e.ByIdempotencyKey)
	}
}

func TestModeSwitchesAtRunTime(t *testing.T) {
	t.Parallel()
	s := startReceiver(t, sandbox.Config{})
	var mode struct {
		Dedupe              string `json:"dedupe"`
		KeyRetentionSeconds int    `json:"key_retention_seconds"`
	}
	s.control(http.MethodGet, "/control/mode", "").json(t, &mode)
	if mode.Dedupe != "key" || mode.KeyRetentionSeconds != 0 {
		t.Fatalf("default mode %+v, want key, 0", mode)
	}

	s.control(http.MethodPut, "/control/mode", `{"dedupe":"none"}`).json(t, &mode)
	if mode.Dedupe != "none" {
		t.Fatalf("mode after PUT none: %+v", mode)
	}
	s.post(`{"reference":"R1"}`, key("K"))
	s.post(`{"reference":"R1"}`, key("K"))
	wantTotal(t, s, 2)

	s.control(http.MethodPut, "/control/mode", `{"dedupe":"key"}`)
	s.post(`{"reference":"R1"}`, key("K"))
	replay := s.post(`{"reference":"R1"}`, key("K"))
	if replay.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("key mode after switching back does not replay: %d %s", replay.status, replay.body)
	}
	wantTotal(t, s, 3)

	for _, bad := range []string{`{"dedupe":"lookup"}`, `{"key_retention_seconds":-1}`, `{"dedup":"key"}`, `not json`} {
		if resp := s.send(http.MethodPut, "/control/mode", bad, nil); resp.status != http.StatusBadRequest {
			t.Errorf("PUT /control/mode %s: %d, want 400", bad, resp.status)
		}
	}
}

func TestKeyRetention(t *testing.T) {
	t.Parallel()

	t.Run("KeyForgottenAfterRetention", func(t *testing.T) {
		t.Parallel()
		clock := newFakeClock()
		s := startReceiver(t, sandbox.Config{Now: clock.Now, KeyRetention: 60 * time.Second})
		first := s.post(`{"reference":"R1"}`, key("K"))

		clock.Advance(60 * time.Second) // exactly the retention: still known
		if resp := s.post(`{"reference":"R1"}`, key("K")); resp.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("key forgotten at exactly its retention: %d %s", resp.status, resp.body)
		}
		clock.Advance(time.Second)
		again := s.post(`{"reference":"R1"}`, key("K"))
		wantStatus(t, again, http.StatusCreated)
		if again.header.Get("Idempotent-Replayed") != "" || bytes.Equal(again.body, first.body) {
			t.Fatalf("key not forgotten after its retention: %s", again.body)
		}
		e := wantTotal(t, s, 2)
		if e.ByIdempotencyKey["K"] != 2 {
			t.Errorf("by_idempotency_key %v, want K:2 (a duplicate effect)", e.ByIdempotencyKey)
		}
		// The reused key is remembered afresh from its new record.
		if resp := s.post(`{"reference":"R1"}`, key("K")); resp.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(resp.body, again.body) {
			t.Errorf("the second record's key is not remembered: %s", resp.body)
		}
	})

	t.Run("ChangedBodyAfterExpiryCreates", func(t *testing.T) {
		t.Parallel()
		clock := newFakeClock()
		s := startReceiver(t, sandbox.Config{Now: clock.Now, KeyRetention: time.Minute})
		s.post(`{"reference":"R1","amount":1}`, key("K"))
		clock.Advance(2 * time.Minute)
		wantStatus(t, s.post(`{"reference":"R1","amount":2}`, key("K")), http.StatusCreated)
		wantTotal(t, s, 2)
	})

	t.Run("SetAtRunTimeAppliesToKnownKeys", func(t *testing.T) {
		t.Parallel()
		clock := newFakeClock()
		s := startReceiver(t, sandbox.Config{Now: clock.Now})
		s.post(`{"reference":"R1"}`, key("K"))
		clock.Advance(time.Hour)
		if resp := s.post(`{"reference":"R1"}`, key("K")); resp.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("keys are kept forever by default, got %d %s", resp.status, resp.body)
		}
		s.control(http.MethodPut, "/control/mode", `{"key_retention_seconds":30}`)
		wantStatus(t, s.post(`{"reference":"R1"}`, key("K")), http.StatusCreated)
		wantTotal(t, s, 2)
	})
}

func TestLookupByReference(t *testing.T) {
	t.Parallel()
	s := startReceiver(t, sandbox.Config{})
	s.post(`{"reference":"A"}`, key("k1"))
	s.post(`{"reference":"B"}`, key("k2"))
	s.post(`{"reference":"A"}`, key("k3"))

	got := s.lookup("A")
	if len(got) != 2 || got[0].ID != "rec_1" || got[1].ID != "rec_3" || got[1].IdempotencyKey != "k3" {
		t.Errorf("lookup A = %+v, want rec_1 and rec_3 in creation order", got)
	}
	if got := s.lookup("nobody"); got == nil || len(got) != 0 {
		t.Errorf("lookup of an unknown reference = %#v, want an empty list", got)
	}
	var body struct {
		Records []sandbox.Record `json:"records"`
	}
	s.control(http.MethodGet, "/records?idempotency_key=k2", "").json(t, &body)
	if len(body.Records) != 1 || body.Records[0].Reference != "B" {
		t.Errorf("lookup by idempotency_key = %+v", body.Records)
	}
	if resp := s.send(http.MethodGet, "/records?reference=nobody", "", nil); !strings.Contains(string(resp.body), `"records":[]`) {
		t.Errorf("an empty lookup is not an empty array: %s", resp.body)
	}
}

func TestLookupFail(t *testing.T) {
	t.Parallel()
	s := startReceiver(t, sandbox.Config{})
	s.post(`{"reference":"A"}`, nil)
	s.post(`{"reference":"B"}`, nil)

	resp := s.send(http.MethodGet, "/records?reference=A", "", map[string]string{"X-Sandbox-Fault": "lookup_fail"})
	if resp.status != http.StatusServiceUnavailable || resp.errorCode(t) != "lookup_unavailable" {
		t.Errorf("header lookup_fail: %d %s, want 503", resp.status, resp.body)
	}

	s.control(http.MethodPost, "/control/faults", `{"fault":"lookup_fail","reference":"B"}`)
	if got := s.lookup("A"); len(got) != 1 {
		t.Errorf("a lookup of another reference met the queued fault: %+v", got)
	}
	wantStatus(t, s.send(http.MethodGet, "/records?reference=B", "", nil), http.StatusServiceUnavailable)
	if got := s.lookup("B"); len(got) != 1 {
		t.Errorf("lookup_fail with count 1 failed a second lookup: %+v", got)
	}
	// A write does not consume a lookup fault, nor a lookup a write fault.
	s.control(http.MethodPost, "/control/faults", `{"fault":"lookup_fail"}`)
	wantStatus(t, s.post(`{"reference":"C"}`, nil), http.StatusCreated)
	wantStatus(t, s.send(http.MethodGet, "/records", "", nil), http.StatusServiceUnavailable)

	if resp := s.send(http.MethodGet, "/records", "", map[string]string{"X-Sandbox-Fault": "reject_500"}); resp.errorCode(t) != "fault_not_applicable" {
		t.Errorf("a write fault on a lookup: %d %s, want 400 fault_not_applicable", resp.status, resp.body)
	}
}

func TestReset(t *testing.T) {
	t.Parallel()
	s := startReceiver(t, sandbox.Config{})
	s.post(`{"reference":"R1"}`, key("K"))
	s.control(http.MethodPost, "/control/faults", `{"fault":"reject_500","count":5}`)
	s.control(http.MethodPut, "/control/mode", `{"key_retention_seconds":3600}`)

	s.control(http.MethodPost, "/control/reset", "")
	wantTotal(t, s, 0)
	if got := s.lookup("R1"); len(got) != 0 {
		t.Errorf("records after reset: %+v", got)
	}
	if resp := s.control(http.MethodGet, "/control/faults", ""); !strings.Contains(string(resp.body), `"faults":[]`) {
		t.Errorf("queued faults after reset: %s", resp.body)
	}
	// The key is forgotten: a changed body is no conflict and creates.
	resp := s.post(`{"reference":"R1","other":true}`, key("K"))
	wantStatus(t, resp, http.StatusCreated)
	var rec sandbox.Record
	resp.json(t, &rec)
	if rec.ID != "rec_2" {
		t.Errorf("id after reset %q, want rec_2: ids never repeat", rec.ID)
	}
	var mode struct {
		KeyRetentionSeconds int `json:"key_retention_seconds"`
	}
	s.control(http.MethodGet, "/control/mode", "").json(t, &mode)
	if mode.KeyRetentionSeconds != 3600 {
		t.Errorf("reset changed the mode: %+v", mode)
	}
}

// TestConcurrentRepeatsCreateOneRecord is the property the ledger's
// same-key retries rely on: however many requests with one key arrive at
// once, one record exists afterwards.
func TestConcurrentRepeatsCreateOneRecord(t *testing.T) {
	t.Parallel()
	s := startReceiver(t, sandbox.Config{})
	const n = 50
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results = make([]response, n)
		errs    = make([]error, n)
	)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxConnsPerHost: n, MaxIdleConnsPerHost: n}}
	defer client.CloseIdleConnections()
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = s.try(client, http.MethodPost, "/records", `{"reference":"R1","amount":7}`, key("same-key"))
		})
	}
	close(start)
	wg.Wait()

	created, replayed := 0, 0
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		wantStatus(t, r, http.StatusCreated)
		if !bytes.Equal(r.body, results[0].body) {
			t.Errorf("request %d got %s, request 0 got %s", i, r.body, results[0].body)
		}
		if r.header.Get("Idempotent-Replayed") == "true" {
			replayed++
		} else {
			created++
		}
	}
	if created != 1 || replayed != n-1 {
		t.Errorf("%d created and %d replayed, want 1 and %d", created, replayed, n-1)
	}
	wantTotal(t, s, 1)
}
