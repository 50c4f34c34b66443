package sandbox_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/replaysafe/companion/sandbox"
)

func fault(name string) map[string]string { return map[string]string{"X-Sandbox-Fault": name} }

// TestFaultsBeforeCommit: the caller gets a definite refusal and nothing exists.
func TestFaultsBeforeCommit(t *testing.T) {
	t.Parallel()
	s := startReceiver(t, sandbox.Config{})
	for _, tc := range []struct {
		fault  string
		status int
		code   string
	}{
		{"reject_429", http.StatusTooManyRequests, "rate_limited"},
		{"reject_400", http.StatusBadRequest, "validation_failed"},
		{"reject_500", http.StatusInternalServerError, "internal_error"},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			resp := s.post(`{"reference":"R-`+tc.fault+`"}`, map[string]string{"X-Sandbox-Fault": tc.fault, "Idempotency-Key": "K-" + tc.fault})
			if resp.status != tc.status || resp.errorCode(t) != tc.code {
				t.Fatalf("%d %s, want %d %s", resp.status, resp.body, tc.status, tc.code)
			}
			if resp.header.Get("X-Request-Id") == "" {
				t.Errorf("no X-Request-Id on a fault response")
			}
			if got := s.lookup("R-" + tc.fault); len(got) != 0 {
				t.Errorf("a record exists after %s: %+v", tc.fault, got)
			}
			// Nothing was remembered either: the key is free for another body.
			retry := s.post(`{"reference":"R-`+tc.fault+`","changed":true}`, key("K-"+tc.fault))
			wantStatus(t, retry, http.StatusCreated)
			if retry.header.Get("Idempotent-Replayed") != "" {
				t.Errorf("the retry after %s was a replay", tc.fault)
			}
		})
	}
	wantTotal(t, s, 3) // the three retries
}

func TestReject429RetryAfter(t *testing.T) {
	t.Parallel()
	s := startReceiver(t, sandbox.Config{})
	if got := s.post(`{}`, fault("reject_429")).header.Get("Retry-After"); got != "30" {
		t.Errorf("default Retry-After %q, want 30", got)
	}
	if got := s.post(`{}`, map[string]string{"X-Sandbox-Fault": "reject_429", "X-Sandbox-Retry-After": "2"}).header.Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After %q, want 2 from X-Sandbox-Retry-After", got)
	}
	s.control(http.MethodPost, "/control/faults", `{"fault":"reject_429","retry_after":7}`)
	if got := s.post(`{}`, nil).header.Get("Retry-After"); got != "7" {
		t.Errorf("queued Retry-After %q, want 7", got)
	}
	wantTotal(t, s, 0)
}

// TestCommitThen500 is indistinguishable from reject_500 for the caller, yet
// the record exists.
func TestCommitThen500(t *testing.T) {
	t.Parallel()
	s := startReceiver(t, sandbox.Config{})
	committed := s.post(`{"reference":"R1"}`, map[string]string{"X-Sandbox-Fault": "commit_then_500", "Idempotency-Key": "K"})
	rejected := s.post(`{"reference":"R2"}`, fault("reject_500"))
	wantStatus(t, committed, http.StatusInternalServerError)
	if !bytes.Equal(committed.body, rejected.body) {
		t.Errorf("commit_then_500 body %s differs from reject_500 body %s", committed.body, rejected.body)
	}
	e := wantTotal(t, s, 1)
	if e.ByReference["R1"] != 1 {
		t.Errorf("effects %+v, want R1 committed", e)
	}
	// A same-key retry gets the 201 the commit produced.
	retry := s.post(`{"reference":"R1"}`, key("K"))
	wantStatus(t, retry, http.StatusCreated)
	if retry.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("same-key retry after commit_then_500 was not a replay")
	}
	wantTotal(t, s, 1)
}

func TestCommitThenDrop(t *testing.T) {
	t.Parallel()
	s := startReceiver(t, sandbox.Config{})

	t.Run("HTTPClientSeesEOF", func(t *testing.T) {
		_, err := s.try(s.client, http.MethodPost, "/records", `{"reference":"R1"}`,
			map[string]string{"X-Sandbox-Fault": "commit_then_drop", "Idempotency-Key": "K"})
		if err == nil {
			t.Fatal("the request succeeded, want a transport error")
		}
		if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("error %v, want EOF or connection reset", err)
		}
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			t.Errorf("a drop looks like a timeout: %v", err)
		}
		e := wantTotal(t, s, 1)
		if e.ByIdempotencyKey["K"] != 1 {
			t.Errorf("effects %+v, want the dropped request committed", e)
		}
		retry := s.post(`{"reference":"R1"}`, key("K"))
		if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("same-key retry after a drop: %d %s, want the replayed 201", retry.status, retry.body)
		}
		wantTotal(t, s, 1)
	})

	t.Run("NoResponseByteOnTheWire", func(t *testing.T) {
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		body := `{"reference":"R2"}`
		req := "POST /records HTTP/1.1\r\nHost: sandbox\r\nX-Sandbox-Fault: commit_then_drop\r\n" +
			"Content-Type: application/json\r\nContent-Length: " + itoa(len(body)) + "\r\n\r\n" + body
		if _, err := conn.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(conn)
		if len(got) != 0 {
			t.Errorf("received %q, want no byte", got)
		}
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			t.Errorf("the connection stayed open: %v", err)
		}
		if len(s.lookup("R2")) != 1 {
			t.Errorf("the dropped record was not committed")
		}
	})
}

// TestCommitThenDelay: the caller times out, yet the record is counted, and
// a retry with the same key is a replay.
func TestCommitThenDelay(t *testing.T) {
	t.Parallel()
	s := startReceiver(t, sandbox.Config{})
	impatient := &http.Client{Timeout: 300 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}

	started := time.Now()
	_, err := s.try(impatient, http.MethodPost, "/records", `{"reference":"R1"}`,
		map[string]string{"X-Sandbox-Fault": "commit_then_delay", "Idempotency-Key": "K"})
	if ne, ok := errors.AsType[net.Error](err); !ok || !ne.Timeout() {
		t.Fatalf("error %v, want a client timeout", err)
	}
	if elapsed := time.Since(started); elapsed > 2*time.Second {
		t.Errorf("the timeout took %s", elapsed)
	}
	e := wantTotal(t, s, 1)
	if e.ByReference["R1"] != 1 {
		t.Errorf("effects %+v, want R1 counted although the caller timed out", e)
	}
	retry := s.post(`{"reference":"R1"}`, key("K"))
	if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("same-key retry after a timeout: %d %s", retry.status, retry.body)
	}

	// A patient caller gets the 201 once delay_ms has passed.
	s.control(http.MethodPost, "/control/faults", `{"fault":"commit_then_delay","delay_ms":200}`)
	started = time.Now()
	resp := s.post(`{"reference":"R2"}`, nil)
	wantStatus(t, resp, http.StatusCreated)
	if elapsed := time.Since(started); elapsed < 200*time.Millisecond {
		t.Errorf("answered after %s, want at least delay_ms 200ms", elapsed)
	}
	wantTotal(t, s, 2)
}

// TestCommitThenDelayEndsAtShutdown: the record is committed before the wait,
// and shutting the server down cuts the wait short instead of holding
// shutdown for the whole delay.
func TestCommitThenDelayEndsAtShutdown(t *testing.T) {
	t.Parallel()
	s := startReceiver(t, sandbox.Config{})
	answered := make(chan error, 1)
	go func() {
		patient := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		_, err := s.try(patient, http.MethodPost, "/records", `{"reference":"R1"}`,
			map[string]string{"X-Sandbox-Fault": "commit_then_delay", "X-Sandbox-Delay-Ms": "20000"})
		answered <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for s.rc.Effects().Total == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the record was not committed before the delay")
		}
		time.Sleep(10 * time.Millisecond)
	}

	started := time.Now()
	if err := s.stop(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if elapsed := time.Since(started); elapsed > 3*time.Second {
		t.Errorf("shutdown took %s with a delayed answer in progress", elapsed)
	}
	select {
	case err := <-answered:
		if err != nil {
			t.Logf("caller saw %v", err) // acceptable: the server went away
		}
	case <-time.After(5 * time.Second):
		t.Error("the delayed caller was never answered")
	}
}

// TestRefuse: a queued refuse resets the next connection before a byte is
// read; the caller sees a connection error and nothing is created.
func TestRefuse(t *testing.T) {
	t.Parallel()
	s := startReceiver(t, sandbox.Config{})

	// The subtests share one receiver and its fault queue; each reports to its own t (s.in), so a failure
	// stops that subtest, not the parent from a subtest's goroutine.
	t.Run("HTTPClientSeesConnectionError", func(t *testing.T) {
		s := s.in(t)
		s.control(http.MethodPost, "/control/faults", `{"fault":"refuse"}`)
		_, err := s.try(s.client, http.MethodPost, "/records", `{"reference":"R1"}`, key("K"))
		if err == nil {
			t.Fatal("the request succeeded, want a connection error")
		}
		if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) && !errors.Is(err, syscall.EPIPE) {
			t.Errorf("error %v, want connection reset", err)
		}
		wantTotal(t, s, 0)
		// Consumed: the next connection is served.
		wantStatus(t, s.post(`{"reference":"R1"}`, key("K")), http.StatusCreated)
		wantTotal(t, s, 1)
	})

	t.Run("ResetBeforeAnyByte", func(t *testing.T) {
		s := s.in(t)
		s.control(http.MethodPost, "/control/faults", `{"fault":"refuse","count":2}`)
		for i := range 2 {
			// The kernel completes the handshake before the receiver accepts the connection and resets it,
			// so the reset can reach the client before its dial has returned: connect then reports it
			// (connect: connection reset by peer), which happens on a busy machine. Either way it is the
			// reset before any byte that the fault promises, and the connection was accepted, so one
			// queued refuse was used.
			n := 0
			conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
			if err == nil {
				_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
				n, err = conn.Read(make([]byte, 1))
				conn.Close()
			}
			if n != 0 || !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("connection %d: read %d bytes, %v; want a reset", i, n, err)
			}
		}
		wantStatus(t, s.send(http.MethodGet, "/healthz", "", nil), http.StatusOK)
	})

	t.Run("NotAsHeaderNorWithReference", func(t *testing.T) {
		s := s.in(t)
		if resp := s.post(`{"reference":"R9"}`, fault("refuse")); resp.errorCode(t) != "fault_not_applicable" {
			t.Errorf("refuse as a header: %d %s, want 400 fault_not_applicable", resp.status, resp.body)
		}
		if resp := s.send(http.MethodPost, "/control/faults", `{"fault":"refuse","reference":"R9"}`, nil); resp.status != http.StatusBadRequest {
			t.Errorf("refuse with a reference: %d %s, want 400", resp.status, resp.body)
		}
		if len(s.lookup("R9")) != 0 {
			t.Error("a refused request created a record")
		}
	})
}

func TestQueuedFaults(t *testing.T) {
	t.Parallel()

	t.Run("CountAndReference", func(t *testing.T) {
		t.Parallel()
		s := startReceiver(t, sandbox.Config{})
		s.control(http.MethodPost, "/control/faults", `{"fault":"reject_500","count":2,"reference":"R1"}`)
		wantStatus(t, s.post(`{"reference":"R2"}`, nil), http.StatusCreated) // other reference: untouched
		wantStatus(t, s.post(`{}`, nil), http.StatusCreated)                 // no reference: untouched
		wantStatus(t, s.post(`{"reference":"R1"}`, nil), http.StatusInternalServerError)
		var queue struct {
			Faults []struct {
				Fault string `json:"fault"`
				Count int    `json:"count"`
			} `json:"faults"`
		}
		s.control(http.MethodGet, "/control/faults", "").json(t, &queue)
		if len(queue.Faults) != 1 || queue.Faults[0].Count != 1 {
			t.Errorf("queue after one use: %+v, want reject_500 with count 1 left", queue.Faults)
		}
		wantStatus(t, s.post(`{"reference":"R1"}`, nil), http.StatusInternalServerError)
		wantStatus(t, s.post(`{"reference":"R1"}`, nil), http.StatusCreated) // used up
		e := wantTotal(t, s, 3)
		if e.ByReference["R1"] != 1 {
			t.Errorf("effects %+v", e)
		}
	})

	t.Run("ConsumedInOrder", func(t *testing.T) {
		t.Parallel()
		s := startReceiver(t, sandbox.Config{})
		s.control(http.MethodPost, "/control/faults", `{"fault":"reject_429"}`)
		s.control(http.MethodPost, "/control/faults", `{"fault":"commit_then_500"}`)
		s.control(http.MethodPost, "/control/faults", `{"fault":"reject_400"}`)
		for i, want := range []int{429, 500, 400, 201} {
			if got := s.post(`{"reference":"R1"}`, nil).status; got != want {
				t.Errorf("request %d: status %d, want %d", i, got, want)
			}
		}
		wantTotal(t, s, 2) // commit_then_500 and the last one
	})

	t.Run("HeaderWinsAndLeavesQueue", func(t *testing.T) {
		t.Parallel()
		s := startReceiver(t, sandbox.Config{})
		s.control(http.MethodPost, "/control/faults", `{"fault":"reject_500"}`)
		wantStatus(t, s.post(`{}`, fault("reject_400")), http.StatusBadRequest)
		wantStatus(t, s.post(`{}`, nil), http.StatusInternalServerError)
	})

	t.Run("InvalidBodyConsumesNothing", func(t *testing.T) {
		t.Parallel()
		s := startReceiver(t, sandbox.Config{})
		s.control(http.MethodPost, "/control/faults", `{"fault":"reject_429"}`)
		if resp := s.post(`not json`, nil); resp.errorCode(t) != "invalid_body" {
			t.Fatalf("%d %s", resp.status, resp.body)
		}
		wantStatus(t, s.post(`{}`, nil), http.StatusTooManyRequests)
	})

	t.Run("DeleteClears", func(t *testing.T) {
		t.Parallel()
		s := startReceiver(t, sandbox.Config{})
		s.control(http.MethodPost, "/control/faults", `{"fault":"reject_500","count":3}`)
		s.control(http.MethodPost, "/control/faults", `{"fault":"lookup_fail"}`)
		if resp := s.control(http.MethodDelete, "/control/faults", ""); !strings.Contains(string(resp.body), `"faults":[]`) {
			t.Errorf("DELETE answered %s", resp.body)
		}
		wantStatus(t, s.post(`{}`, nil), http.StatusCreated)
		wantStatus(t, s.send(http.MethodGet, "/records", "", nil), http.StatusOK)
	})

	t.Run("InvalidRequests", func(t *testing.T) {
		t.Parallel()
		s := startReceiver(t, sandbox.Config{})
		for _, body := range []string{
			`{}`, `{"fault":"explode"}`, `{"fault":"reject_500","count":0}`,
			`{"fault":"reject_429","retry_after":-1}`, `{"fault":"commit_then_delay","delay_ms":-5}`,
			`{"fault":"reject_500","cuont":2}`,
		} {
			if resp := s.send(http.MethodPost, "/control/faults", body, nil); resp.status != http.StatusBadRequest {
				t.Errorf("POST /control/faults %s: %d, want 400", body, resp.status)
			}
		}
		if resp := s.post(`{}`, fault("explode")); resp.errorCode(t) != "unknown_fault" {
			t.Errorf("unknown header fault: %d %s", resp.status, resp.body)
		}
		if resp := s.post(`{}`, fault("lookup_fail")); resp.errorCode(t) != "fault_not_applicable" {
			t.Errorf("lookup_fail on a write: %d %s", resp.status, resp.body)
		}
		wantTotal(t, s, 0)
	})
}

// TestRequestLog: one line per request with the fields an operator needs,
// and never the body.
func TestRequestLog(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	s := startReceiver(t, sandbox.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	s.post(`{"reference":"R1","iban":"DE89370400440532013000"}`, map[string]string{"Idempotency-Key": "ik_9", "X-Sandbox-Fault": "commit_then_500"})
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}

	text := logs.String()
	if strings.Contains(text, "DE89370400440532013000") {
		t.Errorf("the body leaked into the log:\n%s", text)
	}
	var line string
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if strings.Contains(sc.Text(), "path=/records") {
			if line != "" {
				t.Errorf("more than one line for one request:\n%s", text)
			}
			line = sc.Text()
		}
	}
	for _, want := range []string{"method=POST", "idempotency_key=ik_9", "reference=R1", "fault=commit_then_500", "status=500", "request_id=req_"} {
		if !strings.Contains(line, want) {
			t.Errorf("log line lacks %q: %s", want, line)
		}
	}
}
