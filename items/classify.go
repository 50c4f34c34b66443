package items

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"time"
)

// ErrorClass is the transport or protocol class of a failed write, as the workflow saw it.
type ErrorClass string

const (
	// ClassValidation: refused locally, nothing sent.
	ClassValidation ErrorClass = "validation"
	// ClassDNS: the name did not resolve, nothing sent.
	ClassDNS ErrorClass = "dns"
	// ClassConnectionRefused: the connection was refused, nothing sent.
	ClassConnectionRefused ErrorClass = "connection_refused"
	// ClassTLS: the TLS handshake failed; the request may have been sent.
	ClassTLS ErrorClass = "tls"
	// ClassTimeout: no answer in time, after dispatch.
	ClassTimeout ErrorClass = "timeout"
	// ClassConnectionReset: the connection broke after dispatch.
	ClassConnectionReset ErrorClass = "connection_reset"
	// ClassHTTP: the destination answered with an HTTP status.
	ClassHTTP ErrorClass = "http"
	// ClassOther: anything else.
	ClassOther ErrorClass = "other"
	// ClassRejected: the destination refused the write for good and committed nothing, without an HTTP
	// status (an SMTP 5xx, another protocol's permanent refusal). Like a 4xx, it is not retried
	// automatically; like a 4xx, the request reached the destination, so it counts as possibly dispatched.
	ClassRejected ErrorClass = "rejected"
)

// ErrorClasses lists every error class.
var ErrorClasses = []ErrorClass{ClassValidation, ClassDNS, ClassConnectionRefused, ClassTLS, ClassTimeout, ClassConnectionReset, ClassHTTP, ClassOther, ClassRejected}

// errorClassWords lists the error classes for a message: "validation, dns, …".
var errorClassWords = func() string {
	words := make([]string, len(ErrorClasses))
	for i, c := range ErrorClasses {
		words[i] = string(c)
	}
	return strings.Join(words, ", ")
}()

// Valid reports whether c is a known error class.
func (c ErrorClass) Valid() bool {
	for _, v := range ErrorClasses {
		if c == v {
			return true
		}
	}
	return false
}

// NotDispatched reports whether the class proves that no request reached the destination.
func (c ErrorClass) NotDispatched() bool {
	return c == ClassValidation || c == ClassDNS || c == ClassConnectionRefused
}

// Outcome is what a workflow reports about its write.
type Outcome string

const (
	OutcomeSucceeded Outcome = "succeeded"
	OutcomeFailed    Outcome = "failed"
	OutcomeUnknown   Outcome = "unknown"
)

// Valid reports whether o is a known outcome.
func (o Outcome) Valid() bool {
	return o == OutcomeSucceeded || o == OutcomeFailed || o == OutcomeUnknown
}

// Evidence is what a workflow saw of its write: the basis of classification.
type Evidence struct {
	Outcome Outcome
	// HTTPStatus is 0 when the workflow got no HTTP status.
	HTTPStatus int
	Class      ErrorClass
	// RetryAfter is the destination's Retry-After in seconds; nil when absent.
	RetryAfter *int
}

// Classification is the state evidence leads to.
type Classification struct {
	State     State
	Retryable bool
	// RetryAt is when a retryable failure may be tried again.
	RetryAt time.Time
	// Definitive reports evidence strong enough to move an unknown item to failed: a 4xx, or a class
	// that proves nothing was sent.
	Definitive bool
}

// CheckEvidence returns a problem with the evidence of a report, or "" when it is usable. A caller's word
// "failed" needs a status or class to back it.
func CheckEvidence(e Evidence) (field, problem string) {
	if e.Outcome != OutcomeFailed {
		return "", ""
	}
	switch {
	case e.HTTPStatus >= 100 && e.HTTPStatus < 400:
		return "http_status", "a failed outcome cannot carry a 1xx-3xx status"
	case e.HTTPStatus == 0 && e.Class == ClassHTTP:
		return "http_status", "error class http needs the http_status"
	case e.HTTPStatus == 0 && e.Class == "":
		return "error", "a failed outcome needs an http_status or an error.class"
	}
	return "", ""
}

// Classify maps evidence to a state with the after-write table of the contract (first match wins).
// attempt is the number of the attempt the evidence is about; it sets the default backoff.
func Classify(e Evidence, attempt int, dest Destination, now time.Time) Classification {
	s := e.HTTPStatus
	switch {
	case e.Outcome == OutcomeSucceeded:
		return Classification{State: StateSucceeded, Definitive: true}
	case s == 429 || (s == 503 && e.RetryAfter != nil):
		at := now.Add(Backoff(attempt))
		if e.RetryAfter != nil {
			at = now.Add(time.Duration(*e.RetryAfter) * time.Second)
		}
		return Classification{State: StateFailed, Retryable: true, RetryAt: at, Definitive: s < 500}
	case s >= 400 && s < 500 && s != 408 && s != 409 && s != 425:
		return Classification{State: StateFailed, Definitive: true}
	case s >= 500 && s < 600 && dest.ServerErrorsNotCommitted:
		return Classification{State: StateFailed, Retryable: true, RetryAt: now.Add(Backoff(attempt)), Definitive: true}
	case s == 408 || s == 409 || s == 425 || (s >= 500 && s < 600):
		return Classification{State: StateUnknown}
	case s != 0:
		// Any other status (a 1xx-3xx reported as unknown, or a status out of range) proves nothing.
		return Classification{State: StateUnknown}
	case e.Class == ClassValidation:
		return Classification{State: StateFailed, Retryable: true, RetryAt: now, Definitive: true}
	case e.Class == ClassDNS || e.Class == ClassConnectionRefused:
		return Classification{State: StateFailed, Retryable: true, RetryAt: now.Add(Backoff(attempt)), Definitive: true}
	case e.Class == ClassRejected:
		// A permanent refusal without a status: what a 4xx other than 408, 409, 425, 429 is with one.
		return Classification{State: StateFailed, Definitive: true}
	}
	return Classification{State: StateUnknown}
}

// Backoff is the default delay before retry attempt+1: 1 s doubling per attempt, capped at 300 s, with
// ±20 % jitter.
func Backoff(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	base := 300 * time.Second
	if attempt <= 9 {
		base = min(time.Second<<(attempt-1), 300*time.Second)
	}
	jitter := 0.8 + 0.4*rand.Float64()
	return time.Duration(float64(base) * jitter)
}

// MaxMessageLength bounds the failure message the ledger keeps.
const MaxMessageLength = 300

var (
	redactEmail  = regexp.MustCompile(`[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}`)
	redactBearer = regexp.MustCompile(`(?i)\b(bearer|basic)\s+[^\s"',;]+`)
	redactPair   = regexp.MustCompile(`(?i)(token|secret|password|api[_-]?key|authorization)(["']?\s*[:=]\s*["']?)[^\s"',;]+`)
	redactLong   = regexp.MustCompile(`[A-Za-z0-9_\-]{32,}`)
	redactDigits = regexp.MustCompile(`\d{9,}`)
)

// Redact removes what looks like personal data or secrets from a failure message (email addresses,
// credentials, long tokens, long digit runs), escapes its control characters (EscapeControls) and cuts it
// to MaxMessageLength characters.
func Redact(msg string) string {
	msg = strings.TrimSpace(msg)
	if msg == "" {
		return "" // every report of a success: five regular expressions over nothing cost it six allocations
	}
	msg = redactEmail.ReplaceAllString(msg, "[email]")
	msg = redactBearer.ReplaceAllString(msg, "$1 [redacted]")
	msg = redactPair.ReplaceAllString(msg, "$1$2[redacted]")
	msg = redactLong.ReplaceAllString(msg, "[redacted]")
	msg = redactDigits.ReplaceAllString(msg, "[number]")
	return escapeWithin(msg, MaxMessageLength)
}
