package handlers

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/replaysafe/companion/console"
	"github.com/replaysafe/companion/internal/loopback"
	"github.com/replaysafe/companion/items"
)

// The edge is what every request meets before any route: one middleware (edge), in front of the API, the
// console and the extra routes alike, that
//
//   - answers only the Host names the service is reached by (hostPolicy): in open mode the loopback names
//     alone, so that a web page whose name was rebound to 127.0.0.1 (DNS rebinding) reads and resolves
//     nothing; with tokens, AllowedHosts when set. Anything else is 421 misdirected_host, before anything
//     else is checked;
//   - slows down guessing of secrets (failedAuth): a client address whose bearer tokens or console
//     sign-ins failed more than FailedAuthBurst times, refilled at FailedAuthPerSecond, is answered 429 with
//     Retry-After to every request that presents a credential until its budget refills. A correct token
//     costs nothing, so it is refused only while its address is over budget.

// Codes of the edge.
const (
	CodeMisdirectedHost items.Code = "misdirected_host"
	CodeTooManyRequests items.Code = "too_many_requests"
)

// The budget of failed authentications per client address: a burst, refilled at a steady rate. A person
// mistyping a token, or a workflow deployed with a stale one, stays far below it; a guesser is held to a
// few tries a second.
const (
	FailedAuthBurst     = 10
	FailedAuthPerSecond = 2.0
)

// maxFailingClients bounds the addresses the throttle remembers; past it, those whose budget is full again
// are forgotten first.
const maxFailingClients = 65536

// hostPolicy says which Host a request may name.
type hostPolicy struct {
	// open answers the loopback names only (no tokens); any answers every Host (tokens set, no allowed
	// hosts configured).
	open, any bool
	// allowed are the configured names; an entry with a port matches that port only.
	allowed []hostPort
}

// hostPort is a Host split into its name (lower case, without the brackets of an IPv6 literal or a
// trailing dot) and its port ("" when it names none).
type hostPort struct{ name, port string }

func splitHost(host string) hostPort {
	name, port, err := net.SplitHostPort(host)
	if err != nil {
		name, port = host, ""
	}
	name = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(strings.ToLower(name), "["), "]"), ".")
	return hostPort{name: name, port: port}
}

func newHostPolicy(open bool, allowed []string) hostPolicy {
	p := hostPolicy{open: open, any: !open && len(allowed) == 0}
	if open {
		return p // open mode answers the loopback names only, whatever else is configured
	}
	for _, h := range allowed {
		p.allowed = append(p.allowed, splitHost(strings.TrimSpace(h)))
	}
	return p
}

// allows reports whether a request naming host (the Host header: a name or address, with or without a
// port) is answered.
func (p hostPolicy) allows(host string) bool {
	if p.any {
		return true
	}
	h := splitHost(host)
	if loopback.Name(h.name) {
		return true
	}
	for _, a := range p.allowed {
		if a.name == h.name && (a.port == "" || a.port == h.port) {
			return true
		}
	}
	return false
}

// CheckAllowedHost returns what is wrong with an allowed_hosts entry: a host name or address, with an
// optional port, and nothing else (no scheme, path or wildcard).
func CheckAllowedHost(h string) string {
	name, port := h, ""
	if n, p, err := net.SplitHostPort(h); err == nil {
		name, port = n, p
	}
	switch {
	case h == "":
		return "is empty"
	case strings.Contains(h, "://") || strings.ContainsAny(h, "/?#@* \t"):
		return "must be a host name such as companion.example.com, with a port if it is to match that port only: no scheme, path or wildcard"
	case port != "":
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "has a port that is not 1-65535"
		}
	}
	if net.ParseIP(strings.Trim(name, "[]")) == nil && strings.Trim(name, ".-") == "" {
		return "must be a host name such as companion.example.com"
	}
	return ""
}

// misdirected is the answer to a request naming a Host the service does not answer.
func (p hostPolicy) misdirected(host string) *items.Error {
	msg := "this service does not answer requests for host " + strconv.Quote(host) + "; "
	if p.open {
		msg += "without tokens it answers only localhost and loopback addresses (http://localhost:PORT, http://127.0.0.1:PORT)"
	} else {
		msg += "use one of the names in its allowed_hosts (COMPANION_ALLOWED_HOSTS), or add this one there"
	}
	return &items.Error{Code: CodeMisdirectedHost, Message: msg}
}

// LoopbackHosts wraps h (the profiles of --debug-addr) so that it answers only requests naming a loopback
// Host, as the service does in open mode: it has no token either.
func LoopbackHosts(h http.Handler) http.Handler {
	p := newHostPolicy(true, nil)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.allows(r.Host) {
			writeErrorBody(w, p.misdirected(r.Host))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// writeErrorBody writes an error in the one error shape, for a handler outside gin.
func writeErrorBody(w http.ResponseWriter, err error) {
	d := publicError(err)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(StatusOf(d.Code))
	_ = jsonLine{ErrorBody{Error: d}}.Render(w)
}

// failedAuth is a token bucket of failed authentications per client address.
type failedAuth struct {
	burst, rate float64
	now         func() time.Time

	mu      sync.Mutex
	clients map[string]*budget
}

type budget struct {
	tokens float64
	at     time.Time
}

func newFailedAuth() *failedAuth {
	return &failedAuth{burst: FailedAuthBurst, rate: FailedAuthPerSecond, now: time.Now, clients: map[string]*budget{}}
}

// refill brings b up to now; the caller holds mu.
func (f *failedAuth) refill(b *budget, now time.Time) {
	b.tokens = math.Min(f.burst, b.tokens+now.Sub(b.at).Seconds()*f.rate)
	b.at = now
}

// wait returns how long the client must wait before presenting a credential again; 0 when it may now.
func (f *failedAuth) wait(client string) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.clients[client]
	if b == nil {
		return 0
	}
	f.refill(b, f.now())
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) / f.rate * float64(time.Second))
}

// fail takes one failure from the client's budget. Failures of requests that were let in together may take
// it below zero, down to -burst: a burst of parallel guesses waits that much longer.
func (f *failedAuth) fail(client string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	b := f.clients[client]
	if b == nil {
		if len(f.clients) >= maxFailingClients {
			f.forget(now)
		}
		b = &budget{tokens: f.burst, at: now}
		f.clients[client] = b
	}
	f.refill(b, now)
	b.tokens = math.Max(-f.burst, b.tokens-1)
}

// forget drops the clients whose budget is full again, and, if that frees nothing, any one; the caller
// holds mu.
func (f *failedAuth) forget(now time.Time) {
	for k, b := range f.clients {
		if f.refill(b, now); b.tokens >= f.burst {
			delete(f.clients, k)
		}
	}
	for k := range f.clients {
		if len(f.clients) < maxFailingClients {
			break
		}
		delete(f.clients, k)
	}
}

// clientKey is the address a client's failures count against: its IP, an IPv6 one by its /64 (one
// subscriber holds a whole /64).
func clientKey(ip string) string {
	addr := net.ParseIP(ip)
	if addr == nil || addr.To4() != nil {
		return ip
	}
	return addr.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// presentsCredential reports whether the request offers a secret to check: a bearer token, or the
// console's sign-in form.
func presentsCredential(r *http.Request) bool {
	return r.Header.Get("Authorization") != "" ||
		(r.Method == http.MethodPost && r.URL.Path == console.Prefix+"signin")
}

// edge is the middleware described at the top of this file.
func (s *server) edge(c *gin.Context) {
	if !s.hosts.allows(c.Request.Host) {
		s.writeError(c, s.hosts.misdirected(c.Request.Host))
		return
	}
	if s.auth.open || !presentsCredential(c.Request) {
		c.Next()
		return
	}
	client := clientKey(c.ClientIP())
	if wait := s.failures.wait(client); wait > 0 {
		secs := int(math.Ceil(wait.Seconds()))
		c.Header("Retry-After", strconv.Itoa(secs))
		s.writeError(c, &items.Error{Code: CodeTooManyRequests, Message: "too many failed authentications from this address: retry in " +
			strconv.Itoa(secs) + " s, with the right token (a correct token is never counted against an address)"})
		return
	}
	c.Next()
	if c.Writer.Status() == http.StatusUnauthorized {
		s.failures.fail(client)
	}
}
