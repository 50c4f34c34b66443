package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawAnswer is what rawServer writes to a request: text as it is, then a close of the connection if
// close is set.
type rawAnswer struct {
	text  string
	close bool
}

// rawServer reads requests with net/http's parser (so it also checks that the bench writes them as
// HTTP/1.1 says) and answers each with the next of its answers, byte for byte.
type rawServer struct {
	ln       net.Listener
	conns    atomic.Int32
	mu       sync.Mutex
	answers  []rawAnswer
	requests []*http.Request
	bodies   []string
	closed   chan struct{} // a value after each close of a connection by an answer
}

func newRawServer(t *testing.T, answers ...rawAnswer) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln, answers: answers, closed: make(chan struct{}, len(answers))}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			go s.serve(conn)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return s
}

func (s *rawServer) serve(conn net.Conn) {
	defer conn.Close()
	br := bufio.NewReader(conn)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, _ := io.ReadAll(req.Body)
		s.mu.Lock()
		s.requests = append(s.requests, req)
		s.bodies = append(s.bodies, string(body))
		if len(s.answers) == 0 {
			s.mu.Unlock()
			return
		}
		a := s.answers[0]
		s.answers = s.answers[1:]
		s.mu.Unlock()
		if _, err := io.WriteString(conn, a.text); err != nil || a.close {
			conn.Close()
			s.closed <- struct{}{}
			return
		}
	}
}

func (s *rawServer) requestCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

func newTestConn(t *testing.T, rawURL, token string) *benchConn {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	c := &benchConn{t: newBenchTarget(u, token, nil)}
	t.Cleanup(c.close)
	return c
}

// TestBenchConnReadsEveryFormOfAnswer holds the lean client to what it must read on one keep-alive
// connection: Content-Length, chunked answers (with extensions and trailers), an interim 100 Continue,
// a 204, and an error answer with its body; then an HTTP/1.0 answer that runs to the connection's end,
// after which the next call opens a new connection. The server checks the requests.
func TestBenchConnReadsEveryFormOfAnswer(t *testing.T) {
	t.Parallel()
	chunked := strings.Repeat("0123456789abcdef", 300)
	s := newRawServer(t,
		rawAnswer{text: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"a\":\"one\"}"},
		rawAnswer{text: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n" +
			"12c0\r\n" + chunked + "\r\n0\r\nX-Trailer: t\r\n\r\n"},
		rawAnswer{text: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"},
		rawAnswer{text: "HTTP/1.1 204 No Content\r\n\r\n"},
		rawAnswer{text: "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 32\r\n\r\n{\"error\":{\"code\":\"unavailable\"}}"},
		rawAnswer{text: "HTTP/1.0 200 OK\r\n\r\nup to the end", close: true},
		rawAnswer{text: "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext"},
	)
	c := newTestConn(t, "http://"+s.ln.Addr().String()+"/base/", "tok-1")
	for i, want := range []struct {
		status int
		answer string
		conns  int32
	}{{200, `{"a":"one"}`, 1}, {200, "hello" + chunked, 1}, {200, "ok", 1}, {204, "", 1}, {503, `{"error":{"code":"unavailable"}}`, 1},
		{200, "up to the end", 1}, {200, "next", 2}} {
		body := strings.Repeat("b", i*1000)
		status, answer, err := c.post(context.Background(), "/v1/call", []byte(body))
		if err != nil || status != want.status || string(answer) != want.answer {
			t.Fatalf("call %d: %d %.60q %v; want %d %.60q", i, status, answer, err, want.status, want.answer)
		}
		if got := s.conns.Load(); got != want.conns {
			t.Errorf("call %d: %d connections; want %d", i, got, want.conns)
		}
		s.mu.Lock()
		req, got := s.requests[i], s.bodies[i]
		s.mu.Unlock()
		if req.Method != "POST" || req.URL.Path != "/base/v1/call" || req.Proto != "HTTP/1.1" || req.Host != s.ln.Addr().String() ||
			req.Header.Get("Authorization") != "Bearer tok-1" || req.Header.Get("Content-Type") != "application/json" ||
			req.ContentLength != int64(len(body)) || got != body {
			t.Errorf("call %d: the server read %s %s %s Host %s %v, a body of %d bytes", i, req.Method, req.URL, req.Proto, req.Host, req.Header, len(got))
		}
	}
}

// TestBenchConnReopensClosedConnectionsAndNeverResends: an answer with Connection: close, a server
// that closes an idle connection without saying so, and a connection that breaks in the middle of an
// answer. Each following call opens a new connection and succeeds; the broken call is an error of its
// own, sent once.
func TestBenchConnReopensClosedConnectionsAndNeverResends(t *testing.T) {
	t.Parallel()
	s := newRawServer(t,
		rawAnswer{text: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\na", close: true},
		rawAnswer{text: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb", close: true},
		rawAnswer{text: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nc"},
		rawAnswer{text: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", close: true},
		rawAnswer{text: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nd"},
		rawAnswer{text: "HTTP/1.1 200 OK\r\nContent-Len", close: true},
		rawAnswer{text: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\ne"},
	)
	c := newTestConn(t, "http://"+s.ln.Addr().String(), "")
	c.t.idleProbe = 0 // check every connection before its call
	post := func(want string, conns int32) {
		t.Helper()
		status, answer, err := c.post(context.Background(), "/x", []byte("{}"))
		if err != nil || status != 200 || string(answer) != want {
			t.Fatalf("call: %d %q %v; want 200 %q", status, answer, err, want)
		}
		if got := s.conns.Load(); got != conns {
			t.Errorf("answer %q on connection %d; want %d", want, got, conns)
		}
	}
	post("a", 1) // Connection: close
	post("b", 2) // then the server closes it, unsaid
	<-s.closed
	<-s.closed
	time.Sleep(20 * time.Millisecond) // the close reaches the client
	post("c", 3)
	for _, broken := range []string{"abc of 10", "a header"} {
		if _, _, err := c.post(context.Background(), "/x", []byte("{}")); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("an answer that breaks off after %s: %v; want %v", broken, err, io.ErrUnexpectedEOF)
		}
		<-s.closed
		before := s.requestCount()
		post(map[string]string{"abc of 10": "d", "a header": "e"}[broken], s.conns.Load()+1)
		if got := s.requestCount(); got != before+1 {
			t.Errorf("after the broken call the server read %d requests; want %d (the broken one is never resent)", got-before, 1)
		}
	}
}

// TestBenchConnRefusesWhatItCannotRead: answers that are not HTTP/1.x, or that it does not read (other
// transfer codings), are errors of the call.
func TestBenchConnRefusesWhatItCannotRead(t *testing.T) {
	t.Parallel()
	for _, text := range []string{
		"HTTP/2 200\r\n\r\n",
		"HTTP/1.1 2000 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\n\r\n",
	} {
		s := newRawServer(t, rawAnswer{text: text})
		c := newTestConn(t, "http://"+s.ln.Addr().String(), "")
		if status, _, err := c.post(context.Background(), "/x", nil); !errors.Is(err, errBenchAnswer) {
			t.Errorf("%q: %d %v; want %v", text, status, err, errBenchAnswer)
		}
		if c.conn != nil {
			t.Errorf("%q: the connection stays open after a malformed answer", text)
		}
	}
}

// TestBenchConnStopsWithItsContext: a call waiting for an answer ends when the run's context does.
func TestBenchConnStopsWithItsContext(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	c := newTestConn(t, srv.URL, "")
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	if _, _, err := c.post(ctx, "/slow", nil); err == nil || time.Since(start) > 5*time.Second {
		t.Errorf("a call whose context ended: %v after %s", err, time.Since(start))
	}
	if _, _, err := c.post(ctx, "/slow", nil); !errors.Is(err, context.Canceled) {
		t.Errorf("a call after the context ended: %v; want %v", err, context.Canceled)
	}
}

// cannedServer answers every request with answer, as fast as it can read them: the requests' heads up
// to the empty line, then Content-Length bytes of body. It stands for the service in benchmarks of the
// client alone.
func cannedServer(b *testing.B, text string) string {
	b.Helper()
	answer := []byte(text)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				for {
					length := 0
					for {
						l, err := br.ReadSlice('\n')
						if err != nil {
							return
						}
						if len(l) <= 2 {
							break
						}
						if len(l) > 16 && bytes.EqualFold(l[:16], []byte("content-length: ")) {
							length, _ = parseDecimal(bytes.TrimSpace(l[16:]))
						}
					}
					if _, err := br.Discard(length); err != nil {
						return
					}
					if _, err := conn.Write(answer); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// BenchmarkBenchClient compares what the bench's client spends per call, the canned server's share
// being the same on both sides: the lean client and its scan against net/http and encoding/json (the
// client before), for a before-write answer and a batch answer of 500 items (chunked).
//
//	go test ./cmd/companion/cli -run '^$' -bench BenchClient -benchmem
func BenchmarkBenchClient(b *testing.B) {
	one := `{"key":"bench-x:i0000001:write:0","decision":"proceed","reason":"new","state":"in_flight","attempt":1,` +
		`"claim":"c_9adbdc737bc9c2ee8e4188f4","idempotency_key":"ik_1fc2ffe16071b8922c9eaf467a0a95be",` +
		`"lease_expires_at":"2026-12-01T11:21:46.443289348Z","message":"claimed attempt 1; write now with the idempotency key, then call after-write"}`
	var items strings.Builder
	items.WriteString(`{"batch_id":"bench-x-b0000000","items":[`)
	for i := range 500 {
		if i > 0 {
			items.WriteByte(',')
		}
		fmt.Fprintf(&items, `{"key":"bench-x:i%07d:write:0","decision":"proceed","reason":"new","state":"in_flight","attempt":1,`+
			`"claim":"c_f26f64a4bea6a7b6480490%02d","idempotency_key":"ik_0fe99f8a4da59dfbd1b1dcbb2fa47f6d",`+
			`"lease_expires_at":"2026-12-01T11:21:47.0411359Z","message":"claimed attempt 1; write now with the idempotency key, then call after-write","batch_index":%d}`, i, i%100, i)
	}
	items.WriteString(`],"counts":{"proceed":500,"skip":0,"conflict":0,"reconcile":0}}`)
	var chunked strings.Builder
	for rest := items.String(); rest != ""; {
		n := min(len(rest), 8192)
		fmt.Fprintf(&chunked, "%x\r\n%s\r\n", n, rest[:n])
		rest = rest[n:]
	}
	answers := map[string]string{
		"single":   "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nDate: Tue, 01 Dec 2026 11:16:46 GMT\r\nContent-Length: " + strconv.Itoa(len(one)) + "\r\n\r\n" + one,
		"batch500": "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nDate: Tue, 01 Dec 2026 11:16:47 GMT\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked.String() + "0\r\n\r\n",
	}
	r := &benchRun{o: benchOptions{prefix: "bench-x"}}
	body := r.appendItem(nil, 1, 1)
	for _, kind := range []string{"single", "batch500"} {
		base := cannedServer(b, answers[kind])
		u, _ := url.Parse(base)
		want := 1
		if kind == "batch500" {
			want = 500
		}
		b.Run(kind+"/lean", func(b *testing.B) {
			c := &benchConn{t: newBenchTarget(u, "tok", nil)}
			defer c.close()
			var as []benchAnswer
			for b.Loop() {
				status, answer, err := c.post(context.Background(), "/v1/before-write", body)
				if err != nil || status != 200 {
					b.Fatal(status, err)
				}
				if kind == "single" {
					if a, err := decodeAnswer(answer); err != nil || a.Claim == "" {
						b.Fatal(a, err)
					}
				} else if as, err = decodeItems(answer, as); err != nil || len(as) != want {
					b.Fatal(len(as), err)
				}
			}
		})
		b.Run(kind+"/net-http", func(b *testing.B) {
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.DisableCompression = true
			s := &benchStd{client: &http.Client{Transport: tr}, base: base,
				header: http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer tok"}}}
			defer tr.CloseIdleConnections()
			for b.Loop() {
				status, answer, err := s.post(context.Background(), "/v1/before-write", body)
				if err != nil || status != 200 {
					b.Fatal(status, err)
				}
				if kind == "single" {
					var a benchAnswer
					if err := json.Unmarshal(answer, &a); err != nil || a.Claim == "" {
						b.Fatal(a, err)
					}
				} else {
					var as struct {
						Items []benchAnswer `json:"items"`
					}
					if err := json.Unmarshal(answer, &as); err != nil || len(as.Items) != want {
						b.Fatal(len(as.Items), err)
					}
				}
			}
		})
	}
}
