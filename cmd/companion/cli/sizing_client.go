package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The bench's client. When the bench runs on the machine of the service it measures, every microsecond
// of CPU it spends is taken from the service, so it talks to the service the way wrk or h2load do: each
// caller owns one HTTP/1.1 keep-alive connection, writes each request from a reused buffer in one write,
// and reads the answer from a bufio.Reader on the caller's own goroutine (net/http's transport runs a
// reading and a writing goroutine per connection and hands every request and answer over channels).
// Behind a proxy (HTTP_PROXY, HTTPS_PROXY, NO_PROXY as net/http reads them) it uses net/http instead.

const (
	// benchCallTimeout bounds one call, as the http.Client's Timeout did.
	benchCallTimeout = 60 * time.Second
	// benchIdleProbe is how long a connection may sit unused before a call first checks that the server
	// has not closed it meanwhile (servers close idle connections; a caller that runs is never idle).
	benchIdleProbe = time.Second
	// benchMaxAnswer bounds an answer's body: a batch answer of 500 items is about 200 kB.
	benchMaxAnswer = 64 << 20
)

// benchPoster makes the bench's calls for one caller: POST body to path (after the URL's own path) and
// return the answer's status and body. The body is valid until the next call.
type benchPoster interface {
	post(ctx context.Context, path string, body []byte) (status int, answer []byte, err error)
	close()
}

// benchTarget is what every lean connection to the service shares, taken once from the URL.
type benchTarget struct {
	addr   string      // host:port to dial
	host   string      // the Host header
	prefix string      // the URL's path without its final slash, before every call's path
	tls    *tls.Config // nil for http://
	header string      // the request's header lines after Host, each ending in CRLF, without Content-Length
	// idleProbe is benchIdleProbe (tests shorten it).
	idleProbe time.Duration
}

// newBenchTarget prepares the lean client's connections to u (http or https). roots are the certificate
// authorities an https server's certificate must chain to: nil for the system's, as net/http.
func newBenchTarget(u *url.URL, token string, roots *x509.CertPool) *benchTarget {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	t := &benchTarget{addr: net.JoinHostPort(u.Hostname(), port), host: u.Host, prefix: strings.TrimRight(u.EscapedPath(), "/"),
		idleProbe: benchIdleProbe}
	if u.Scheme == "https" {
		// As net/http: the server's name (without the port) for SNI and verification, and HTTP/1.1, the
		// only protocol this client speaks, offered by ALPN.
		t.tls = &tls.Config{ServerName: u.Hostname(), RootCAs: roots, NextProtos: []string{"http/1.1"}}
	}
	h := "User-Agent: companion-bench\r\nContent-Type: application/json\r\n"
	switch {
	case token != "":
		h += "Authorization: Bearer " + token + "\r\n"
	case u.User != nil: // as net/http does with a URL's user:password
		p, _ := u.User.Password()
		h += "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+p)) + "\r\n"
	}
	t.header = h
	return t
}

// benchConn is one caller's connection to the service: opened at its first call, kept alive between
// calls, closed when an answer says Connection: close, when a call fails, or when the server closed it
// while it was idle, and opened again by the next call. A call that fails is never sent again: the
// caller counts it as an error.
type benchConn struct {
	t      *benchTarget
	conn   net.Conn
	br     *bufio.Reader
	req    []byte    // the request being written; reused
	answer []byte    // the answer's body; reused
	used   time.Time // when the last answer was read
	stop   func() bool
}

func (c *benchConn) post(ctx context.Context, path string, body []byte) (int, []byte, error) {
	if c.conn != nil && time.Since(c.used) >= c.t.idleProbe && !c.idle() {
		c.close()
	}
	if c.conn == nil {
		if err := c.dial(ctx); err != nil {
			return 0, nil, err
		}
	}
	status, err := c.roundTrip(ctx, path, body)
	if err != nil {
		c.close()
		return 0, nil, err
	}
	return status, c.answer, nil
}

func (c *benchConn) dial(ctx context.Context) error {
	d := net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", c.t.addr)
	if err != nil {
		return err
	}
	if c.t.tls != nil {
		tc := tls.Client(conn, c.t.tls)
		hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			conn.Close()
			return err
		}
		conn = tc
	}
	c.conn = conn
	if c.br == nil {
		c.br = bufio.NewReaderSize(conn, 16<<10)
	} else {
		c.br.Reset(conn)
	}
	// The run's end (a signal) interrupts a call that waits for its answer.
	c.stop = context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	return nil
}

func (c *benchConn) close() {
	if c.conn == nil {
		return
	}
	c.stop()
	_ = c.conn.Close()
	c.conn = nil
}

// idle reports whether an idle connection is still open and quiet: not closed by the server (nor sent
// anything unasked, such as a 408) while nobody used it. It waits at most a millisecond.
func (c *benchConn) idle() bool {
	if c.br.Buffered() > 0 || c.conn.SetReadDeadline(time.Now().Add(time.Millisecond)) != nil {
		return false
	}
	_, err := c.br.Peek(1)
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// roundTrip writes the request in one write and reads its answer into c.answer.
func (c *benchConn) roundTrip(ctx context.Context, path string, body []byte) (int, error) {
	b := append(c.req[:0], "POST "...)
	b = append(b, c.t.prefix...)
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, c.t.host...)
	b = append(b, "\r\n"...)
	b = append(b, c.t.header...)
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, body...)
	c.req = b
	if err := c.conn.SetDeadline(time.Now().Add(benchCallTimeout)); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil { // after SetDeadline: a cancellation from now on interrupts the call
		return 0, err
	}
	if _, err := c.conn.Write(b); err != nil {
		return 0, err
	}
	status, keep, err := c.readAnswer()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // the server closed the connection before it answered in full
		}
		return 0, err
	}
	if !keep {
		c.close()
	}
	c.used = time.Now()
	return status, nil
}

var errBenchAnswer = errors.New("malformed HTTP answer")

// readAnswer reads a status line, headers and body (Content-Length, chunked, or up to the connection's
// end), skipping interim 1xx answers. keep is whether the connection can carry the next call.
func (c *benchConn) readAnswer() (status int, keep bool, err error) {
	for {
		line, err := c.line()
		if err != nil {
			return 0, false, err
		}
		// HTTP/1.x NNN reason
		if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' || (len(line) > 12 && line[12] != ' ') {
			return 0, false, fmt.Errorf("%w: status line %q", errBenchAnswer, truncate(line))
		}
		status, ok := parseDecimal(line[9:12])
		if !ok || status < 100 {
			return 0, false, fmt.Errorf("%w: status line %q", errBenchAnswer, truncate(line))
		}
		http10 := line[7] == '0' // HTTP/1.0 closes the connection unless it says keep-alive; 1.1 keeps it
		keep = !http10
		length, chunked := -1, false
		for {
			h, err := c.line()
			if err != nil {
				return 0, false, err
			}
			if len(h) == 0 {
				break
			}
			name, value, ok := bytes.Cut(h, []byte(":"))
			if !ok {
				return 0, false, fmt.Errorf("%w: header %q", errBenchAnswer, truncate(h))
			}
			value = bytes.Trim(value, " \t")
			switch {
			case bytes.EqualFold(name, []byte("Content-Length")):
				n, ok := parseDecimal(value)
				if !ok || (length >= 0 && n != length) {
					return 0, false, fmt.Errorf("%w: Content-Length %q", errBenchAnswer, truncate(value))
				}
				length = n
			case bytes.EqualFold(name, []byte("Transfer-Encoding")):
				if !bytes.EqualFold(value, []byte("chunked")) {
					return 0, false, fmt.Errorf("%w: Transfer-Encoding %q is not chunked", errBenchAnswer, truncate(value))
				}
				chunked = true
			case bytes.EqualFold(name, []byte("Connection")):
				for tok := range bytes.SplitSeq(value, []byte(",")) {
					switch tok = bytes.Trim(tok, " \t"); {
					case bytes.EqualFold(tok, []byte("close")):
						keep = false
					case bytes.EqualFold(tok, []byte("keep-alive")) && http10:
						keep = true
					}
				}
			}
		}
		if status < 200 {
			if status == http.StatusSwitchingProtocols {
				return 0, false, fmt.Errorf("%w: 101 Switching Protocols", errBenchAnswer)
			}
			continue // 100 Continue, 103 Early Hints: the answer follows
		}
		c.answer = c.answer[:0]
		switch {
		case status == http.StatusNoContent || status == http.StatusNotModified:
		case chunked:
			err = c.readChunked()
		case length > benchMaxAnswer:
			err = fmt.Errorf("%w: an answer of %d bytes", errBenchAnswer, length)
		case length >= 0:
			err = c.readN(length)
		default: // no length: the body runs to the connection's end
			keep = false
			err = c.readToEnd()
		}
		return status, keep, err
	}
}

// line reads a line of the answer's head without its CRLF; it is valid until the next read.
func (c *benchConn) line() ([]byte, error) {
	l, err := c.br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: a line longer than %d bytes", errBenchAnswer, c.br.Size())
		}
		return nil, err
	}
	l = l[:len(l)-1]
	if n := len(l); n > 0 && l[n-1] == '\r' {
		l = l[:n-1]
	}
	return l, nil
}

// readN appends the next n bytes of the answer to c.answer.
func (c *benchConn) readN(n int) error {
	if len(c.answer)+n > benchMaxAnswer {
		return fmt.Errorf("%w: an answer over %d bytes", errBenchAnswer, benchMaxAnswer)
	}
	c.answer = slices.Grow(c.answer, n)[:len(c.answer)+n]
	_, err := io.ReadFull(c.br, c.answer[len(c.answer)-n:])
	return err
}

func (c *benchConn) readChunked() error {
	for {
		l, err := c.line()
		if err != nil {
			return err
		}
		if i := bytes.IndexByte(l, ';'); i >= 0 { // chunk extensions
			l = l[:i]
		}
		size, ok := parseHex(bytes.Trim(l, " \t"))
		if !ok {
			return fmt.Errorf("%w: chunk size %q", errBenchAnswer, truncate(l))
		}
		if size == 0 {
			for { // trailers, up to the empty line
				if l, err = c.line(); err != nil || len(l) == 0 {
					return err
				}
			}
		}
		if err := c.readN(size); err != nil {
			return err
		}
		if l, err = c.line(); err != nil {
			return err
		} else if len(l) != 0 {
			return fmt.Errorf("%w: no CRLF after a chunk", errBenchAnswer)
		}
	}
}

func (c *benchConn) readToEnd() error {
	for {
		c.answer = slices.Grow(c.answer, 4096)
		n, err := c.br.Read(c.answer[len(c.answer):cap(c.answer)])
		c.answer = c.answer[:len(c.answer)+n]
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(c.answer) > benchMaxAnswer {
			return fmt.Errorf("%w: an answer over %d bytes", errBenchAnswer, benchMaxAnswer)
		}
	}
}

// parseDecimal parses 1-18 decimal digits.
func parseDecimal(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	n := 0
	for _, d := range b {
		if d < '0' || d > '9' {
			return 0, false
		}
		n = n*10 + int(d-'0')
	}
	return n, true
}

// parseHex parses a chunk size: 1-15 hexadecimal digits.
func parseHex(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	n := 0
	for _, d := range b {
		switch {
		case d >= '0' && d <= '9':
			d -= '0'
		case d|0x20 >= 'a' && d|0x20 <= 'f':
			d = (d | 0x20) - 'a' + 10
		default:
			return 0, false
		}
		n = n<<4 | int(d)
	}
	return n, true
}

func truncate(b []byte) []byte { return b[:min(len(b), 80)] }

// benchStd makes the calls through net/http: behind a proxy.
type benchStd struct {
	client *http.Client
	base   string
	header http.Header // shared: the client only reads it
	answer bytes.Buffer
}

func (s *benchStd) post(ctx context.Context, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header = s.header
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	s.answer.Reset()
	_, err = s.answer.ReadFrom(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, s.answer.Bytes(), nil
}

func (s *benchStd) close() {}
