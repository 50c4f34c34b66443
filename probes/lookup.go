package probes

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/replaysafe/companion/internal/loopback"
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

// QueryParam is one query parameter a lookup adds to every read. Its value is a secret (an API key a
// destination takes in the URL): it comes from the environment or a file, is sent only to the lookup's
// host, and is never logged, stored or shown: every URL shown carries REDACTED in its place.
type QueryParam struct {
	Name  string
	Value string
}

// Redacted stands in a shown URL for the value of a secret query parameter.
const Redacted = "REDACTED"

// Lookup is how the service looks an item up in one destination: an HTTP GET, and the rules that read
// its answer as found, absent or failed.
type Lookup struct {
	// URL is the URL template: {reference}, {idempotency_key} and {key} are replaced by the item's values,
	// escaped for the part of the URL they stand in. A value that would leave the template's path, or
	// that is empty, fails the read without a request (expand). Required.
	URL string
	// Headers are sent with every read.
	Headers []Header
	// Query are secret query parameters added to every read's URL.
	Query []QueryParam
	// InsecureHTTP lets a lookup that sends secrets (Headers, Query) use plain http to a host that is not
	// loopback: for a destination on a network the operator trusts. Without it such a lookup needs https.
	InsecureHTTP bool
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
	} else if secrets := l.secretNames(); len(secrets) > 0 && !l.InsecureHTTP {
		if u, _ := url.Parse(placeholder.ReplaceAllString(l.URL, "x")); u.Scheme == "http" && !loopback.Name(u.Hostname()) {
			add("url", "sends secrets (%s) over plain http to %s: use https, or set insecure_http: true when the network to it is one you trust",
				strings.Join(secrets, ", "), u.Hostname())
		}
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
	inTemplate := templateQueryNames(l.URL)
	for _, q := range l.Query {
		switch {
		case q.Name == "":
			add("query", "a parameter has no name")
		case inTemplate[q.Name]:
			add("query."+q.Name, "is also in the url's query: give it in one place")
		case q.Value == "":
			add("query."+q.Name, "its secret is empty")
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
	for _, pair := range strings.Split(queryOf(tmpl), "&") {
		name, value, _ := strings.Cut(pair, "=")
		if value != "" && !placeholder.MatchString(value) && secretName(name) {
			return fmt.Errorf("holds a secret in its query (%s=…): secrets are not written in the config file; "+
				"give it under query: {%s: {env: VARIABLE}} (or file:) and leave it out of the url", name, name)
		}
	}
	return nil
}

// queryOf returns the query of a URL template, without its '?'.
func queryOf(tmpl string) string {
	_, q, _ := strings.Cut(tmpl, "?")
	return q
}

// templateQueryNames are the names of the query parameters written in the URL template.
func templateQueryNames(tmpl string) map[string]bool {
	out := map[string]bool{}
	for _, pair := range strings.Split(queryOf(tmpl), "&") {
		if name, _, _ := strings.Cut(pair, "="); name != "" {
			out[name] = true
		}
	}
	return out
}

// secretName reports whether a query parameter's name says it carries a secret (api_key, apiKey, hapikey,
// access_token, client_secret, password, sig, auth, …). A value written for such a name in the URL is a
// secret in the config file.
func secretName(name string) bool {
	n := strings.ToLower(name)
	n = strings.NewReplacer("_", "", "-", "", ".", "").Replace(n)
	for _, part := range []string{"apikey", "token", "secret", "password", "passwd", "credential"} {
		if strings.Contains(n, part) {
			return true
		}
	}
	for _, end := range []string{"key", "sig", "signature", "auth", "pwd", "pass"} {
		if strings.HasSuffix(n, end) {
			return true
		}
	}
	return false
}

// secretNames names the secrets a read sends: its headers and its secret query parameters.
func (l Lookup) secretNames() []string {
	var out []string
	for _, h := range l.Headers {
		out = append(out, "header "+h.Name)
	}
	for _, q := range l.Query {
		out = append(out, "query "+q.Name)
	}
	return out
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

// CodeBadReference begins the detail of a read refused for its placeholder's value (badValue).
const CodeBadReference = "lookup_bad_reference"

// badValue is a placeholder's value that cannot stand in the URL: the read fails without a request.
type badValue struct {
	placeholder, value, why string
}

func (e *badValue) Error() string {
	return fmt.Sprintf("%s: %s is %s, which %s; nothing was sent", CodeBadReference, e.placeholder, strconv.Quote(e.value), e.why)
}

// expand fills the template with the item's values, each escaped for where it stands: in the path, as a
// path segment; in the query, as a query value. It refuses (*badValue) a value that is blank, which would
// look up everything or nothing, and one that is . or .. or holds / \ or % once decoded: escaped or not,
// in the path it would make the read climb out of the template's path (a destination, or a proxy before
// it, may decode the path once more), with the lookup's credentials, to read something else than the
// item. The contract (API.md, "Lookup reads never climb") refuses such values wherever the placeholder
// stands, in the query too, where a destination that builds a path from a query value would climb as
// well. So the path of every read stays under the template's fixed part.
func expand(tmpl string, values map[string]string) (string, error) {
	query := strings.IndexByte(tmpl, '?')
	var b strings.Builder
	last := 0
	for _, loc := range placeholder.FindAllStringIndex(tmpl, -1) {
		b.WriteString(tmpl[last:loc[0]])
		name := tmpl[loc[0]:loc[1]]
		v := values[name]
		inQuery := query >= 0 && loc[0] > query
		if why := badPlaceholderValue(v); why != "" {
			return "", &badValue{placeholder: name, value: v, why: why}
		}
		if inQuery {
			b.WriteString(url.QueryEscape(v))
		} else {
			b.WriteString(url.PathEscape(v))
		}
		last = loc[1]
	}
	b.WriteString(tmpl[last:])
	return b.String(), nil
}

// badPlaceholderValue says why v cannot stand for a placeholder, or "".
func badPlaceholderValue(v string) string {
	if strings.TrimSpace(v) == "" {
		return "blank: there is nothing to look up"
	}
	decoded, err := url.PathUnescape(v)
	if err != nil {
		decoded = v
	}
	switch {
	case decoded == "." || decoded == "..":
		return "a path step (. or ..) that would leave the lookup's path"
	case strings.ContainsAny(decoded, `/\%`):
		return "holding / \\ or % (once decoded), which could leave the lookup's path"
	}
	return ""
}

// requestURL returns the URL a read of the item's values asks, and the same URL as it may be shown: the
// secret query parameters' values replaced by Redacted.
func (l Lookup) requestURL(values map[string]string) (target, shown string, err error) {
	target, err = expand(l.URL, values)
	if err != nil || len(l.Query) == 0 {
		return target, target, err
	}
	shown = target
	sep := "?"
	if strings.Contains(target, "?") {
		sep = "&"
		if strings.HasSuffix(target, "?") || strings.HasSuffix(target, "&") {
			sep = ""
		}
	}
	for _, q := range l.Query {
		name := url.QueryEscape(q.Name)
		target += sep + name + "=" + url.QueryEscape(q.Value)
		shown += sep + name + "=" + Redacted
		sep = "&"
	}
	return target, shown, nil
}

// redact replaces every secret of the lookup in s (a transport error may quote the URL) with Redacted.
func (l Lookup) redact(s string) string {
	for _, q := range l.Query {
		for _, v := range []string{q.Value, url.QueryEscape(q.Value)} {
			if v != "" {
				s = strings.ReplaceAll(s, v, Redacted)
			}
		}
	}
	for _, h := range l.Headers {
		if h.Value != "" {
			s = strings.ReplaceAll(s, h.Value, Redacted)
		}
	}
	return s
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
