package probes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/replaysafe/companion/items"
)

// reader makes the reads of one destination, within its limits: at most Concurrency at once, at most
// RatePerSecond started per second, each within Timeout and MaxResponseBytes.
type reader struct {
	destination string
	lookup      Lookup
	steps       []string
	client      *http.Client
	slots       chan struct{}

	mu   sync.Mutex
	next time.Time // when the next read may start (rate)
}

func newReader(destination string, l Lookup, transport http.RoundTripper) *reader {
	steps, _ := parsePath(l.IDPath) // checked by Lookup.Check
	r := &reader{destination: destination, lookup: l, steps: steps, slots: make(chan struct{}, l.Concurrency)}
	r.client = &http.Client{
		Transport: transport,
		Timeout:   l.Timeout,
		// A redirect is followed only to the same scheme and host: the headers' secrets are for that
		// host alone, and a lookup that moved elsewhere is a failed read, not an answer.
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 || req.URL.Host != via[0].URL.Host || req.URL.Scheme != via[0].URL.Scheme {
				return http.ErrUseLastResponse
			}
			return nil
		},
	}
	return r
}

// acquire waits for a slot and for the rate; release gives the slot back.
func (r *reader) acquire(ctx context.Context) error {
	select {
	case r.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	r.mu.Lock()
	now := time.Now()
	start := now
	if r.next.After(now) {
		start = r.next
	}
	r.next = start.Add(time.Duration(float64(time.Second) / r.lookup.RatePerSecond))
	r.mu.Unlock()
	if wait := start.Sub(now); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			<-r.slots
			return ctx.Err()
		}
	}
	return nil
}

func (r *reader) release() { <-r.slots }

// answer is what one read saw.
type answer struct {
	// url is the URL read, as it may be shown (secret query values redacted).
	url        string
	status     int
	outcome    string
	externalID string
	detail     string
	// final is set for a failed read no later read can do better than (the item's values cannot stand in
	// the URL): the lookup fails at once.
	final bool
}

// read looks the item up once. It never returns the answer's body, a header or a secret: only the
// status, what the path held, or why the read failed.
func (r *reader) read(ctx context.Context, it *items.Item, idempotencyKey string) answer {
	a := r.get(ctx, it, idempotencyKey)
	a.detail = r.lookup.redact(a.detail)
	return a
}

func (r *reader) get(ctx context.Context, it *items.Item, idempotencyKey string) answer {
	target, shown, err := r.lookup.requestURL(map[string]string{"{reference}": it.Reference, "{idempotency_key}": idempotencyKey, "{key}": it.Key})
	a := answer{url: shown, outcome: items.ProbeFailed}
	if err != nil {
		a.url, a.detail, a.final = r.lookup.URL, err.Error(), true
		return a
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		a.detail = "the URL cannot be built from the item's values"
		return a
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "companion-probe")
	for _, h := range r.lookup.Headers {
		req.Header.Set(h.Name, h.Value)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		a.detail = "no answer: " + transportProblem(err, r.lookup.Timeout)
		return a
	}
	defer resp.Body.Close()
	a.status = resp.StatusCode
	body, err := io.ReadAll(io.LimitReader(resp.Body, r.lookup.MaxResponseBytes+1))
	switch {
	case err != nil:
		a.detail = "the answer broke off: " + transportProblem(err, r.lookup.Timeout)
		return a
	case int64(len(body)) > r.lookup.MaxResponseBytes:
		a.detail = fmt.Sprintf("the answer is larger than %d bytes", r.lookup.MaxResponseBytes)
		return a
	case resp.StatusCode == http.StatusNotFound && r.lookup.AbsentOn404:
		a.outcome, a.detail = items.ProbeAbsent, "404 reads as absent"
		return a
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		a.detail = "a redirect to another host is not followed"
		return a
	case resp.StatusCode != r.lookup.FoundStatus:
		a.detail = "not the found status " + strconv.Itoa(r.lookup.FoundStatus)
		return a
	}
	path := strings.Join(r.steps, ".")
	id, empty, problem := lookupPath(body, r.steps)
	switch {
	case problem != "":
		a.detail = path + " " + problem
	case empty:
		a.outcome, a.detail = items.ProbeAbsent, path+" empty"
	default:
		a.outcome, a.externalID, a.detail = items.ProbeFound, id, path+" = "+strconv.Quote(id)
	}
	return a
}

// lookupPath walks the JSON document along steps. It returns the value there as an external id, or empty
// when there is nothing (missing, null, "", an empty array), or a problem when the document is not JSON
// or the value is not a string or a number.
func lookupPath(body []byte, steps []string) (id string, empty bool, problem string) {
	var v any
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "", false, "cannot be read: the answer is not JSON"
	}
	for _, s := range steps {
		switch node := v.(type) {
		case map[string]any:
			v = node[s]
		case []any:
			i, err := strconv.Atoi(s)
			if err != nil || i < 0 {
				return "", false, "cannot be read: " + strconv.Quote(s) + " indexes an array"
			}
			if i >= len(node) {
				return "", true, ""
			}
			v = node[i]
		case nil:
			return "", true, ""
		default:
			return "", false, "cannot be read: " + strconv.Quote(s) + " steps into a value of type " + kind(v)
		}
	}
	switch val := v.(type) {
	case nil:
		return "", true, ""
	case string:
		if strings.TrimSpace(val) == "" {
			return "", true, ""
		}
		if len(val) > 500 {
			return "", false, "holds a value longer than 500 characters"
		}
		return val, false, ""
	case json.Number:
		return val.String(), false, ""
	case []any:
		if len(val) == 0 {
			return "", true, ""
		}
	}
	return "", false, "holds a value of type " + kind(v) + ", not an id"
}

func kind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case bool:
		return "boolean"
	case string:
		return "string"
	}
	return "number"
}

// transportProblem names a failed read's cause in a few words, without the URL or any header.
func transportProblem(err error, timeout time.Duration) string {
	var ne net.Error
	var ue *url.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return "timed out after " + timeout.String()
	case errors.Is(err, context.Canceled):
		return "stopped"
	case errors.As(err, &ue):
		err = ue.Err
	}
	var oe *net.OpError
	var de *net.DNSError
	switch {
	case errors.As(err, &de):
		return "the host name does not resolve"
	case errors.As(err, &oe) && oe.Op == "dial":
		return "the connection was refused"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "the connection closed without an answer"
	}
	msg := err.Error()
	if len(msg) > 120 {
		msg = msg[:120]
	}
	return msg
}
