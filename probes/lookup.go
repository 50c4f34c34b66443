package probes

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Defaults of a Lookup.
const (
	DefaultFoundStatus      = http.StatusOK
	DefaultMaxFailedReads   = 3
	DefaultRetryAfter       = time.Minute
	DefaultTimeout          = 10 * time.Second
	DefaultMaxResponseBytes = 1 << 20
	DefaultConcurrency      = 2
	DefaultRatePerSecond    = 5
)

// DefaultSettleAfter are the delays of a probe's reads after the attempt ended: a destination's search
// may lag its writes, so "absent" is believed only after the last.
var DefaultSettleAfter = []time.Duration{30 * time.Second, 2 * time.Minute, 10 * time.Minute}

// Header is one request header of a lookup. Its value is a secret: it comes from the environment or a
// file, is sent only to the lookup's host, and is never logged, stored or shown.
type Header struct {
	Name  string
	Value string
}

// Lookup is how the service looks an item up in one destination: an HTTP GET, and the rules that read
// its answer as found, absent or failed.
type Lookup struct {
	// URL is the URL template: {reference}, {idempotency_key} and {key} are replaced by the item's values,
	// escaped for the part of the URL they stand in. Required.
	URL string
	// Headers are sent with every read.
	Headers []Header
	// FoundStatus is the status of an answer the found and absent rules read. Default 200.
	FoundStatus int
	// IDPath is the path in the answer's JSON (members and array indexes separated by dots, as in
	// "records.0.id") whose non-empty value is the external id: found. Empty there (missing, null, "",
	// []) is absent. Required.
	IDPath string
	// AbsentOn404 reads a 404 as absent.
	AbsentOn404 bool
	// SettleAfter are the delays of the reads after the attempt ended. Default DefaultSettleAfter.
	SettleAfter []time.Duration
	// MaxFailedReads failed reads make the verdict lookup_failed. Default 3.
	MaxFailedReads int
	// RetryAfter spaces the reads that follow a failed one past the last delay. Default 1 minute.
	RetryAfter time.Duration
	// Timeout bounds one read, answer included. Default 10 s.
	Timeout time.Duration
	// MaxResponseBytes bounds the answer read; a larger one is a failed read. Default 1 MiB.
	MaxResponseBytes int64
	// Concurrency bounds the reads running at once against the destination. Default 2.
	Concurrency int
	// RatePerSecond bounds how many reads start per second. Default 5.
	RatePerSecond float64
}

// placeholder matches the {…} of a URL template.
var placeholder = regexp.MustCompile(`\{[^{}]*\}`)

// Placeholders are the names a URL template may use.
var Placeholders = []string{"{reference}", "{idempotency_key}", "{key}"}

// WithDefaults returns l with its zero fields set to the defaults.
func (l Lookup) WithDefaults() Lookup {
	if l.FoundStatus == 0 {
		l.FoundStatus = DefaultFoundStatus
	}
	if len(l.SettleAfter) == 0 {
		l.SettleAfter = DefaultSettleAfter
	}
	if l.MaxFailedReads == 0 {
		l.MaxFailedReads = DefaultMaxFailedReads
	}
	if l.RetryAfter == 0 {
		l.RetryAfter = DefaultRetryAfter
	}
	if l.Timeout == 0 {
		l.Timeout = DefaultTimeout
	}
	if l.MaxResponseBytes == 0 {
		l.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if l.Concurrency == 0 {
		l.Concurrency = DefaultConcurrency
	}
	if l.RatePerSecond == 0 {
		l.RatePerSecond = DefaultRatePerSecond
	}
	return l
}

// Problem is one thing wrong with a Lookup: the field, and what is wrong, in the configuration's words.
type Problem struct {
	Field   string
	Problem string
}

// Check returns what is wrong with l (after WithDefaults), field by field; nil when it is usable. The
// messages never carry a header's value.
func (l Lookup) Check() []Problem {
	var out []Problem
	add := func(field, format string, args ...any) {
		out = append(out, Problem{Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	if err := checkTemplate(l.URL); err != nil {
		add("url", "%v", err)
	}
	for _, h := range l.Headers {
		switch {
		case !validHeaderName(h.Name):
			add("headers", "%q is not a header name", h.Name)
		case h.Value == "":
			add("headers."+h.Name, "its secret is empty")
		case strings.ContainsAny(h.Value, "\r\n\x00"):
			add("headers."+h.Name, "its secret holds a line break or a NUL byte")
		}
	}
	if l.FoundStatus < 200 || l.FoundStatus > 299 {
		add("found.status", "must be 200-299, not %d", l.FoundStatus)
	}
	if _, err := parsePath(l.IDPath); err != nil {
		add("found.path", "%v", err)
	}
	for i, d := range l.SettleAfter {
		switch {
		case d <= 0:
			add("settle_after", "delay %d must be positive, not %s", i+1, d)
		case i > 0 && d <= l.SettleAfter[i-1]:
			add("settle_after", "delays must grow: %s after %s", d, l.SettleAfter[i-1])
		}
	}
	bounds := []struct {
		field    string
		ok       bool
		problem  string
		argument any
	}{
		{"max_failed_reads", l.MaxFailedReads >= 1 && l.MaxFailedReads <= 20, "must be 1-20, not %v", l.MaxFailedReads},
		{"retry_after", l.RetryAfter >= time.Second, "must be at least 1s, not %v", l.RetryAfter},
		{"timeout", l.Timeout >= 100*time.Millisecond && l.Timeout <= 2*time.Minute, "must be 100ms-2m, not %v", l.Timeout},
		{"max_response_bytes", l.MaxResponseBytes >= 1024 && l.MaxResponseBytes <= 64<<20, "must be 1024-67108864, not %v", l.MaxResponseBytes},
		{"concurrency", l.Concurrency >= 1 && l.Concurrency <= 64, "must be 1-64, not %v", l.Concurrency},
		{"rate_per_second", l.RatePerSecond > 0 && l.RatePerSecond <= 1000, "must be more than 0 and at most 1000, not %v", l.RatePerSecond},
	}
	for _, b := range bounds {
		if !b.ok {
			add(b.field, b.problem, b.argument)
		}
	}
	return out
}

func checkTemplate(tmpl string) error {
	if tmpl == "" {
		return errors.New("is required")
	}
	for _, p := range placeholder.FindAllString(tmpl, -1) {
		known := false
		for _, k := range Placeholders {
			known = known || p == k
		}
		if !known {
			return fmt.Errorf("%s is not one of %s", p, strings.Join(Placeholders, ", "))
		}
	}
	u, err := url.Parse(placeholder.ReplaceAllString(tmpl, "x"))
	switch {
	case err != nil:
		return errors.New("is not a URL")
	case u.Scheme != "https" && u.Scheme != "http":
		return fmt.Errorf("must be an http or https URL, not %q", u.Scheme)
	case u.Host == "" || placeholder.MatchString(hostOf(tmpl)):
		return errors.New("must name a fixed host: placeholders belong in the path or the query")
	case u.User != nil:
		return errors.New("must not carry credentials: send them in a header whose value comes from the environment or a file")
	case u.Fragment != "":
		return errors.New("must not have a #fragment")
	}
	return nil
}

// hostOf returns the authority part of a URL template.
func hostOf(tmpl string) string {
	_, rest, _ := strings.Cut(tmpl, "://")
	host, _, _ := strings.Cut(rest, "/")
	host, _, _ = strings.Cut(host, "?")
	return host
}

func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if r > 0x7e || r <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return true
}

// expand fills the template with the item's values, each escaped for where it stands: in the path, as a
// path segment; in the query, as a query value.
func expand(tmpl string, values map[string]string) string {
	query := strings.IndexByte(tmpl, '?')
	var b strings.Builder
	last := 0
	for _, loc := range placeholder.FindAllStringIndex(tmpl, -1) {
		b.WriteString(tmpl[last:loc[0]])
		v := values[tmpl[loc[0]:loc[1]]]
		if query >= 0 && loc[0] > query {
			b.WriteString(url.QueryEscape(v))
		} else {
			b.WriteString(url.PathEscape(v))
		}
		last = loc[1]
	}
	b.WriteString(tmpl[last:])
	return b.String()
}

// parsePath splits an id path ("records.0.id", "$.records[0].id") into its steps.
func parsePath(p string) ([]string, error) {
	p = strings.TrimPrefix(strings.TrimPrefix(p, "$"), ".")
	p = strings.NewReplacer("[", ".", "]", "").Replace(p)
	if p == "" {
		return nil, errors.New("is required: the JSON path of the external id, such as records.0.id")
	}
	steps := strings.Split(p, ".")
	for _, s := range steps {
		if s == "" {
			return nil, fmt.Errorf("%q has an empty step", p)
		}
	}
	return steps, nil
}
