package sandbox

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Fault names one injected misbehaviour. Each fault acts at one [Boundary].
type Fault string

// The faults the receiver can inject. Their names are part of the contract.
const (
	// FaultRefuse accepts the next TCP connection and closes it at once with
	// RST, without reading a byte: nothing is dispatched or committed. It can
	// only be queued, since a request header is never read.
	FaultRefuse Fault = "refuse"
	// FaultReject429 answers 429 with Retry-After before commit.
	FaultReject429 Fault = "reject_429"
	// FaultReject400 answers 400 (validation error) before commit.
	FaultReject400 Fault = "reject_400"
	// FaultReject500 answers 500 before commit: nothing is committed.
	FaultReject500 Fault = "reject_500"
	// FaultCommitThenDrop commits the record, then closes the connection
	// without sending a single response byte.
	FaultCommitThenDrop Fault = "commit_then_drop"
	// FaultCommitThen500 commits the record, then answers 500 with the same
	// body as FaultReject500, so the caller cannot tell the two apart.
	FaultCommitThen500 Fault = "commit_then_500"
	// FaultCommitThenDelay commits the record, then holds the 201 back for
	// delay_ms (default [DefaultDelay]): longer than a caller's timeout.
	FaultCommitThenDelay Fault = "commit_then_delay"
	// FaultLookupFail makes GET /records answer 503.
	FaultLookupFail Fault = "lookup_fail"
	// FaultLookup500 makes GET /records answer 500, as a lookup endpoint with a bug does.
	FaultLookup500 Fault = "lookup_500"
)

// Boundary says where in handling a request a fault acts.
type Boundary string

// The boundaries at which faults act.
const (
	// BeforeReading is the connection level: the request is never read.
	BeforeReading Boundary = "before_reading"
	// BeforeCommit is after the body was read and validated, before any
	// record is created or any key remembered.
	BeforeCommit Boundary = "before_commit"
	// AfterCommit is after the record was created (or, for a repeated
	// Idempotency-Key, after the first response was found), before answering.
	AfterCommit Boundary = "after_commit"
	// Lookup is GET /records.
	Lookup Boundary = "lookup"
)

// Boundary returns where f acts, or "" for a name that is not a fault.
func (f Fault) Boundary() Boundary {
	switch f {
	case FaultRefuse:
		return BeforeReading
	case FaultReject429, FaultReject400, FaultReject500:
		return BeforeCommit
	case FaultCommitThenDrop, FaultCommitThen500, FaultCommitThenDelay:
		return AfterCommit
	case FaultLookupFail, FaultLookup500:
		return Lookup
	}
	return ""
}

// forWrite reports whether f applies to POST /records.
func (f Fault) forWrite() bool {
	b := f.Boundary()
	return b == BeforeCommit || b == AfterCommit
}

// Defaults of the fault parameters.
const (
	// DefaultRetryAfterSeconds is the Retry-After of reject_429 when none is given.
	DefaultRetryAfterSeconds = 30
	// DefaultDelay is how long commit_then_delay holds its answer when no
	// delay_ms is given.
	DefaultDelay = 10 * time.Second
)

// Request headers that inject a fault into one request. HeaderRetryAfter and
// HeaderDelayMs are optional and set what a queued fault sets with
// retry_after and delay_ms.
const (
	HeaderFault      = "X-Sandbox-Fault"
	HeaderRetryAfter = "X-Sandbox-Retry-After"
	HeaderDelayMs    = "X-Sandbox-Delay-Ms"
)

// queuedFault is one entry of POST /control/faults; Count is what is left.
type queuedFault struct {
	Fault      Fault  `json:"fault"`
	Count      int    `json:"count"`
	Reference  string `json:"reference,omitempty"`
	RetryAfter int    `json:"retry_after"`
	DelayMs    int    `json:"delay_ms"`
}

// appliedFault is the fault one request meets, with its parameters; the zero
// value means no fault.
type appliedFault struct {
	Fault      Fault
	RetryAfter int
	Delay      time.Duration
}

// faultError is a fault request the receiver cannot honour; it becomes a 400.
type faultError struct {
	code    string
	message string
}

func (e *faultError) Error() string { return e.message }

// headerFault reads the fault a request asks for in its headers. ok is false
// when the request names none. applies says which faults make sense for the
// endpoint; naming another one is an error rather than silently ignored, so a
// misspelt or misplaced fault cannot make a test pass by accident.
func headerFault(h http.Header, applies func(Fault) bool) (f appliedFault, ok bool, err error) {
	name := h.Get(HeaderFault)
	if name == "" {
		return appliedFault{}, false, nil
	}
	f = appliedFault{Fault: Fault(name), RetryAfter: DefaultRetryAfterSeconds, Delay: DefaultDelay}
	switch {
	case f.Fault.Boundary() == "":
		return f, true, &faultError{"unknown_fault", fmt.Sprintf("unknown fault %q", name)}
	case f.Fault == FaultRefuse:
		return f, true, &faultError{"fault_not_applicable", "refuse acts before a request is read, so it can only be queued with POST /control/faults"}
	case !applies(f.Fault):
		return f, true, &faultError{"fault_not_applicable", fmt.Sprintf("fault %q does not apply to this endpoint", name)}
	}
	if v := h.Get(HeaderRetryAfter); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return f, true, &faultError{"invalid_fault", HeaderRetryAfter + " must be a whole number of seconds, at least 0"}
		}
		f.RetryAfter = n
	}
	if v := h.Get(HeaderDelayMs); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return f, true, &faultError{"invalid_fault", HeaderDelayMs + " must be a whole number of milliseconds, at least 0"}
		}
		f.Delay = time.Duration(n) * time.Millisecond
	}
	return f, true, nil
}

// faultRequest is the body of POST /control/faults. Pointers tell an omitted
// field (default) from a zero one.
type faultRequest struct {
	Fault      Fault  `json:"fault"`
	Count      *int   `json:"count"`
	Reference  string `json:"reference"`
	RetryAfter *int   `json:"retry_after"`
	DelayMs    *int   `json:"delay_ms"`
}

// queued validates req and returns the queue entry it asks for.
func (req faultRequest) queued() (queuedFault, error) {
	q := queuedFault{Fault: req.Fault, Count: 1, Reference: req.Reference,
		RetryAfter: DefaultRetryAfterSeconds, DelayMs: int(DefaultDelay / time.Millisecond)}
	switch {
	case req.Fault == "":
		return q, errors.New("fault is required")
	case req.Fault.Boundary() == "":
		return q, fmt.Errorf("unknown fault %q", req.Fault)
	case req.Fault == FaultRefuse && req.Reference != "":
		return q, errors.New("refuse acts before a request is read, so it cannot match a reference")
	}
	if req.Count != nil {
		if *req.Count < 1 {
			return q, errors.New("count must be at least 1")
		}
		q.Count = *req.Count
	}
	if req.RetryAfter != nil {
		if *req.RetryAfter < 0 {
			return q, errors.New("retry_after must be at least 0")
		}
		q.RetryAfter = *req.RetryAfter
	}
	if req.DelayMs != nil {
		if *req.DelayMs < 0 {
			return q, errors.New("delay_ms must be at least 0")
		}
		q.DelayMs = *req.DelayMs
	}
	return q, nil
}

// takeQueuedLocked consumes one use of the first queued fault that applies
// and whose reference, if it has one, equals reference. The caller holds rc.mu.
func (rc *Receiver) takeQueuedLocked(applies func(Fault) bool, reference string) appliedFault {
	for i := range rc.faults {
		q := &rc.faults[i]
		if !applies(q.Fault) || (q.Reference != "" && q.Reference != reference) {
			continue
		}
		q.Count--
		f := appliedFault{Fault: q.Fault, RetryAfter: q.RetryAfter, Delay: time.Duration(q.DelayMs) * time.Millisecond}
		if q.Count == 0 {
			rc.faults = append(rc.faults[:i], rc.faults[i+1:]...)
		}
		return f
	}
	return appliedFault{}
}

// faultFor returns the fault a request meets: the one its header names, else
// the first matching queued one (which it consumes).
func (rc *Receiver) faultFor(r *http.Request, applies func(Fault) bool, reference string) (appliedFault, error) {
	f, ok, err := headerFault(r.Header, applies)
	if ok || err != nil {
		return f, err
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.takeQueuedLocked(applies, reference), nil
}

// takeRefuse consumes one queued refuse, reporting whether there was one.
func (rc *Receiver) takeRefuse() bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.takeQueuedLocked(func(f Fault) bool { return f == FaultRefuse }, "").Fault == FaultRefuse
}
