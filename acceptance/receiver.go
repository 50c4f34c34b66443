package acceptance

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/replaysafe/companion/sandbox"
)

// Receiver is a client of the sandbox receiver (docs/sandbox-receiver.md): the destination the cases
// write to, whose GET /effects is the other side of every assertion.
type Receiver struct {
	base    string
	control *http.Client
}

// NewReceiver returns a client of the sandbox receiver at base.
func NewReceiver(base string) (*Receiver, error) {
	u, err := url.Parse(strings.TrimRight(base, "/"))
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("receiver URL %q: want http://host:port", base)
	}
	return &Receiver{base: u.String(), control: &http.Client{Timeout: 10 * time.Second}}, nil
}

// URL returns the receiver's base URL.
func (r *Receiver) URL() string { return r.base }

// Write is one write of a business record, as the workflow's HTTP step sends it.
type Write struct {
	// Target replaces the receiver's base URL, to fail before dispatch: a host under .invalid (DNS) or a
	// closed loopback port (connection refused).
	Target string
	// Body is the record, the payload the before-write fingerprinted.
	Body json.RawMessage
	// IdempotencyKey is sent as the Idempotency-Key header when not empty. Destinations that cannot
	// dedupe have no such header to set, so the cases leave it empty for them.
	IdempotencyKey string
	// Fault is injected into this one request with X-Sandbox-Fault.
	Fault sandbox.Fault
	// RetryAfter (reject_429) and DelayMs (commit_then_delay) parametrise the fault.
	RetryAfter int
	DelayMs    int
	// Timeout is the client's timeout for this write.
	Timeout time.Duration
}

// Seen is what the workflow's HTTP step actually saw of a write: a status, or a transport error class.
// It is the evidence the after-write carries; the suite never reports what the fault was meant to do.
type Seen struct {
	// Status is the HTTP status, 0 when no response arrived.
	Status     int
	RetryAfter *int
	// Record is the created (or replayed) record of a 201.
	Record    *sandbox.Record
	RequestID string
	Replayed  bool
	// Class is the transport error class (dns, connection_refused, timeout, connection_reset, tls,
	// other) when no response arrived.
	Class string
	// Code is the receiver's error code of a non-2xx answer.
	Code string
	// Detail is the error text or the status line, for people.
	Detail string
}

// String describes what was seen, for the table: "201", "429 retry-after 1", "timeout".
func (s Seen) String() string {
	switch {
	case s.Status != 0 && s.RetryAfter != nil:
		return fmt.Sprintf("%d retry-after %d", s.Status, *s.RetryAfter)
	case s.Status != 0:
		return strconv.Itoa(s.Status)
	default:
		return s.Class
	}
}

// Succeeded reports whether the write was acknowledged with a 2xx.
func (s Seen) Succeeded() bool { return s.Status >= 200 && s.Status < 300 }

// Report turns what was seen into the after-write body for the claim: succeeded with the record id on a
// 2xx; otherwise failed with the status or the error class, for the service to classify (the contract
// does not take the caller's word "failed" on trust).
func (s Seen) Report(key, claim string) AfterWrite {
	aw := AfterWrite{Key: key, Claim: claim, ReceiverRequestID: s.RequestID}
	switch {
	case s.Succeeded():
		aw.Outcome = "succeeded"
		if s.Record != nil {
			aw.ExternalID = s.Record.ID
			aw.Result, _ = json.Marshal(map[string]any{"record_id": s.Record.ID, "replayed": s.Replayed})
		}
	case s.Status != 0:
		aw.Outcome = "failed"
		aw.HTTPStatus = s.Status
		aw.RetryAfter = s.RetryAfter
		aw.Error = &WriteError{Class: "http", Code: s.Code, Message: s.Detail}
	default:
		aw.Outcome = "failed"
		aw.Error = &WriteError{Class: s.Class, Message: s.Detail}
	}
	return aw
}

// Write sends one POST /records and returns what the client saw. Each write uses a fresh connection and
// is never repeated by the client stack: Go's transport silently resends a request carrying an
// Idempotency-Key when a reused connection breaks, which would be a second retry owner hidden from the
// ledger (seed 000, "Multiple retry owners").
func (r *Receiver) Write(ctx context.Context, w Write) Seen {
	target := r.base
	if w.Target != "" {
		target = w.Target
	}
	client := &http.Client{
		Timeout:   w.Timeout,
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target+"/records", bytes.NewReader(w.Body))
	if err != nil {
		return Seen{Class: "other", Detail: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	if w.IdempotencyKey != "" {
		req.Header.Set(sandbox.HeaderIdempotencyKey, w.IdempotencyKey)
	}
	if w.Fault != "" {
		req.Header.Set(sandbox.HeaderFault, string(w.Fault))
		if w.RetryAfter > 0 {
			req.Header.Set(sandbox.HeaderRetryAfter, strconv.Itoa(w.RetryAfter))
		}
		if w.DelayMs > 0 {
			req.Header.Set(sandbox.HeaderDelayMs, strconv.Itoa(w.DelayMs))
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		return Seen{Class: TransportClass(err), Detail: err.Error()}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	seen := Seen{Status: resp.StatusCode, RequestID: resp.Header.Get(sandbox.HeaderRequestID),
		Replayed: resp.Header.Get(sandbox.HeaderReplayed) == "true", Detail: resp.Status}
	if err != nil {
		// The status line arrived but the body broke off: the status decides (the contract's rule).
		seen.Detail = err.Error()
	}
	if v := resp.Header.Get("Retry-After"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			seen.RetryAfter = &n
		}
	}
	if seen.Succeeded() {
		var rec sandbox.Record
		if json.Unmarshal(body, &rec) == nil && rec.ID != "" {
			seen.Record = &rec
		}
	} else {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil {
			seen.Code = e.Error
		}
	}
	return seen
}

// TransportClass classifies an error of an HTTP client that got no response, in the after-write's
// error classes. Only dns and connection_refused prove that nothing was sent; everything after the
// connection was set up is at best a timeout or a reset, which the ledger must treat as unknown.
func TransportClass(err error) string {
	if _, ok := errors.AsType[*net.DNSError](err); ok {
		return "dns"
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return "connection_refused"
	}
	if _, ok := errors.AsType[*tls.RecordHeaderError](err); ok {
		return "tls"
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return "tls"
	}
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return "tls"
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return "timeout"
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return "timeout"
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "connection_reset"
	}
	return "other"
}

// Lookup is GET /records?reference=R: the workflow's search of the destination by business reference.
// With fail set, the receiver is told to fail the lookup (lookup_fail). It returns the records found, or
// an error when the lookup failed (the caller reports lookup_failed then).
func (r *Receiver) Lookup(ctx context.Context, reference string, fail bool) ([]sandbox.Record, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+"/records?reference="+url.QueryEscape(reference), nil)
	if err != nil {
		return nil, err
	}
	if fail {
		req.Header.Set(sandbox.HeaderFault, string(sandbox.FaultLookupFail))
	}
	var out struct {
		Records []sandbox.Record `json:"records"`
	}
	if err := r.do(req, &out); err != nil {
		return nil, fmt.Errorf("lookup of %s: %w", reference, err)
	}
	return out.Records, nil
}

// Effects returns the receiver's counts of created records.
func (r *Receiver) Effects(ctx context.Context) (sandbox.Effects, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+"/effects", nil)
	if err != nil {
		return sandbox.Effects{}, err
	}
	var e sandbox.Effects
	err = r.do(req, &e)
	return e, err
}

// ReceiverMode is the receiver's dedupe mode and key retention (GET/PUT /control/mode).
type ReceiverMode struct {
	Dedupe              string `json:"dedupe"`
	KeyRetentionSeconds *int64 `json:"key_retention_seconds,omitempty"`
}

// Mode returns the receiver's mode.
func (r *Receiver) Mode(ctx context.Context) (ReceiverMode, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+"/control/mode", nil)
	if err != nil {
		return ReceiverMode{}, err
	}
	var m ReceiverMode
	err = r.do(req, &m)
	return m, err
}

// SetKeyRetention changes how long the receiver remembers idempotency keys (0: forever).
func (r *Receiver) SetKeyRetention(ctx context.Context, seconds int64) error {
	body, _ := json.Marshal(map[string]int64{"key_retention_seconds": seconds})
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, r.base+"/control/mode", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	var m ReceiverMode
	return r.do(req, &m)
}

// QueueFault queues count faults for the requests about reference (POST /control/faults).
func (r *Receiver) QueueFault(ctx context.Context, fault sandbox.Fault, count int, reference string) error {
	body, _ := json.Marshal(map[string]any{"fault": fault, "count": count, "reference": reference})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+"/control/faults", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	var out map[string]any
	return r.do(req, &out)
}

func (r *Receiver) do(req *http.Request, out any) error {
	resp, err := r.control.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("receiver answered %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return json.Unmarshal(body, out)
}
