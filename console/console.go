// Package console serves the operator console at /console/: the items that need a person, each item's
// story, a batch, a search and the post-release measures, as server-rendered HTML.
//
// It sits on the floor of handlers, which mounts it: handlers authenticates tokens, keeps the one table
// from error codes to HTTP statuses, and hands both in through Config. The console keeps its own
// sign-in sessions (in a cookie sealed with a key derived from the ledger secret, so that every replica
// knows them: sessions.go), puts a CSRF token in every form, and settles items through the same Resolver as the API and Slack. Every value shown is escaped
// by html/template, no page carries an inline script, and every answer carries a strict
// Content-Security-Policy.
package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/replaysafe/companion/batches"
	"github.com/replaysafe/companion/internal/loopback"
	"github.com/replaysafe/companion/items"
)

// Prefix is where the console is mounted.
const Prefix = "/console/"

// SessionTTL is how long a sign-in lasts.
const SessionTTL = 12 * time.Hour

// MaxFormBytes is the largest form body read; a larger one reads as empty and is refused.
const MaxFormBytes = 64 << 10

// DefaultRefresh is how often an open page reloads itself.
const DefaultRefresh = 15 * time.Second

// CSP is the Content-Security-Policy of every answer: nothing but the console's own files, no inline
// script or style, no framing, forms post only to the console.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Principal is who signed in: a token's name, tenant and role.
type Principal struct {
	Name   string
	Tenant string
	// Operator is true for an operator token; only those may sign in.
	Operator bool
	// Token identifies the token (a digest of its secret, never the secret), for Config.Recheck; empty in
	// open mode.
	Token string
}

// Store is what the console reads beside the ledger.
type Store interface {
	ListItems(ctx context.Context, p items.ListParams) (items.ItemPage, error)
	// NeedsPersonCount counts a tenant's items needing a person, cheaply (the stores' kept counts).
	NeedsPersonCount(ctx context.Context, tenant string) (int, error)
	Stats(ctx context.Context, tenant string, now time.Time) (*items.Stats, error)
	// ItemAlerts returns the alert outbox records about an item, oldest first.
	ItemAlerts(ctx context.Context, tenant, key string) ([]items.Alert, error)
}

// Resolver settles an item on a person's evidence (the alert dispatcher, or the ledger).
type Resolver interface {
	Resolve(ctx context.Context, p items.ResolveParams) (*items.Item, items.Reason, error)
}

// Target is where an item's alert goes and what its owner should check.
type Target struct {
	Owner     string
	CheckHint string
}

// PublicError is what a caller may see of an error: its HTTP status, code and message (handlers' table).
type PublicError struct {
	Status  int
	Code    string
	Message string
}

// Config is what the console needs. Ledger, Store, Resolver, Batches, Authenticate and Errors are required.
type Config struct {
	Ledger   *items.Ledger
	Store    Store
	Resolver Resolver
	Batches  *batches.Service
	// Authenticate returns the principal of a token secret.
	Authenticate func(secret string) (Principal, bool)
	// Recheck returns the principal of the token a session was made with (Principal.Token) as the
	// configuration has it now, and false when no token has it any more; nil checks nothing.
	Recheck func(token string) (Principal, bool)
	// Open serves the console without sign-in as Local (the API's open mode, loopback only).
	Open  bool
	Local Principal
	// Origins are the origins ("https://companion.example.com", scheme://host[:port]) whose forms the
	// console accepts besides the loopback names' (localhost, 127.0.0.1, [::1], any port): the service's
	// public URL and allowed hosts. A form's Origin is never compared with the request's Host, which a
	// page whose name was rebound to this machine controls.
	Origins []string
	// Errors turns an error into what the page may show (handlers' error table).
	Errors func(error) PublicError
	// Target routes an item (owner, check hint); nil shows the item's own owner and no hint.
	Target func(*items.Item) Target
	// CauseText explains a needs-person cause; nil shows the cause word.
	CauseText func(string) string
	// Refresh is how often pages reload themselves; DefaultRefresh when 0.
	Refresh time.Duration
	// QueueLimit is how many of the oldest items needing a person the queue's pages reach; QueueLimit
	// when 0.
	QueueLimit int
	Logger     *slog.Logger
	// StoreKind names the store ("sqlite", "mongodb") where the Overview says that it keeps no measures
	// over time (a Store that is no items.SeriesStore); empty: "this store".
	StoreKind string
}

// Console is the console's http.Handler.
type Console struct {
	cfg    Config
	pages  map[string]*pageTemplate
	static http.Handler
	// sessions seals and opens the session cookies (sessions.go).
	sessions *sessionSealer
}

type session struct {
	who     Principal
	csrf    string
	expires time.Time
}

// New returns the console. It panics on a missing requirement: a wiring mistake.
func New(cfg Config) *Console {
	if cfg.Ledger == nil || cfg.Store == nil || cfg.Resolver == nil || cfg.Batches == nil || cfg.Authenticate == nil || cfg.Errors == nil {
		panic("console: Config needs Ledger, Store, Resolver, Batches, Authenticate and Errors")
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.QueueLimit <= 0 {
		cfg.QueueLimit = QueueLimit
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Target == nil {
		cfg.Target = func(it *items.Item) Target { return Target{Owner: it.Owner} }
	}
	if cfg.CauseText == nil {
		cfg.CauseText = func(c string) string { return c }
	}
	sub, _ := fs.Sub(staticFS, "static")
	return &Console{cfg: cfg, pages: parsePages(), sessions: newSessionSealer(cfg.Ledger.DeriveKey(sessionPurpose)),
		static: http.StripPrefix(Prefix+"static/", http.FileServerFS(sub))}
}

// Cookie names: the session, and the sign-in form's own CSRF cookie (before there is a session).
const (
	sessionCookie = "companion_console"
	signinCookie  = "companion_console_signin"
)

func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	if strings.HasPrefix(r.URL.Path, Prefix+"static/") {
		h.Set("Cache-Control", "public, max-age=300")
		c.static.ServeHTTP(w, r)
		return
	}
	h.Set("Cache-Control", "no-store")
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodPost {
		h.Set("Allow", "GET, HEAD, POST")
		c.fail(w, r, nil, PublicError{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed", Message: r.Method + " is not allowed here"})
		return
	}
	if r.Method == http.MethodPost {
		// A console form is a few kB at most (evidence ≤ 2000 characters).
		r.Body = http.MaxBytesReader(w, r.Body, MaxFormBytes)
	}
	if r.Method == http.MethodPost && !c.formOrigin(r) {
		c.fail(w, r, nil, PublicError{Status: http.StatusForbidden, Code: "forbidden", Message: "the form came from " +
			r.Header.Get("Origin") + ", which is not this console's address; if people open the console there, set the service's " +
			"public_url (COMPANION_PUBLIC_URL) to it, or add its host to allowed_hosts (COMPANION_ALLOWED_HOSTS)"})
		return
	}
	path := strings.TrimPrefix(r.URL.Path, strings.TrimSuffix(Prefix, "/"))
	switch path {
	case "/signin":
		c.signin(w, r)
		return
	case "/signout":
		c.signout(w, r)
		return
	}
	s := c.session(w, r)
	if s == nil {
		c.toSignin(w, r)
		return
	}
	if r.Method == http.MethodPost && !c.validCSRF(s, r) {
		c.fail(w, r, s, PublicError{Status: http.StatusForbidden, Code: "forbidden",
			Message: "the form has no valid CSRF token; reload the page and try again"})
		return
	}
	switch {
	case path == "/" && r.Method != http.MethodPost:
		c.queue(w, r, s)
	case path == "/item" && r.Method != http.MethodPost:
		c.item(w, r, s)
	case path == "/item/resolve" && r.Method == http.MethodPost:
		c.resolve(w, r, s)
	case path == "/batch" && r.Method != http.MethodPost:
		c.batch(w, r, s)
	case path == "/find" && r.Method != http.MethodPost:
		c.find(w, r, s)
	case path == "/overview" && r.Method != http.MethodPost:
		c.overview(w, r, s)
	default:
		c.fail(w, r, s, PublicError{Status: http.StatusNotFound, Code: "not_found", Message: "no such page: " + r.URL.Path})
	}
}

// formOrigin refuses a POST whose Origin is not one of the console's (Config.Origins, the loopback names),
// or, without an Origin, whose Sec-Fetch-Site names another site. Browsers send one of them with every
// form; a client that sends neither still needs the CSRF token. An Origin of "null" (a sandboxed frame, a
// file) is no origin of the console's.
func (c *Console) formOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		switch r.Header.Get("Sec-Fetch-Site") {
		case "", "same-origin", "none":
			return true
		}
		return false
	}
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false
	}
	if loopback.Name(u.Hostname()) {
		return true
	}
	origin := withoutDefaultPort(u.Scheme + "://" + u.Host)
	for _, allowed := range c.cfg.Origins {
		if origin == withoutDefaultPort(allowed) {
			return true
		}
	}
	return false
}

// withoutDefaultPort is the origin with its scheme's default port left out (https://h:443 is https://h).
func withoutDefaultPort(origin string) string {
	o := strings.ToLower(strings.TrimSuffix(origin, "/"))
	if s, ok := strings.CutSuffix(o, ":443"); ok && strings.HasPrefix(o, "https://") {
		return s
	}
	if s, ok := strings.CutSuffix(o, ":80"); ok && strings.HasPrefix(o, "http://") {
		return s
	}
	return o
}

func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
	return base64.RawURLEncoding.EncodeToString(b)
}

func setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: Prefix, MaxAge: maxAge, HttpOnly: true,
		Secure: secure(r), SameSite: http.SameSiteStrictMode})
}

// session returns the request's live session: the one its cookie holds (sessions.go), while it lasts. In
// open mode every visitor gets one as Local, made on the first visit, so that forms still carry a CSRF
// token.
func (c *Console) session(w http.ResponseWriter, r *http.Request) *session {
	if ck, err := r.Cookie(sessionCookie); err == nil {
		if s, ok := c.sessions.open(ck.Value); ok && c.live(s) {
			return s
		}
	}
	if !c.cfg.Open {
		return nil
	}
	return c.newSession(w, r, c.cfg.Local)
}

// live reports whether a session from a cookie still holds: its end has not passed on the ledger's clock,
// and the token it was made with is still an operator token here (the session then shows the token's
// name and tenant as configured now). An open mode's session holds in open mode only.
func (c *Console) live(s *session) bool {
	switch {
	case !c.cfg.Ledger.Now().Before(s.expires):
		return false
	case s.who.Token == "":
		return c.cfg.Open
	case c.cfg.Recheck == nil:
		return true
	}
	p, ok := c.cfg.Recheck(s.who.Token)
	if !ok || !p.Operator {
		return false
	}
	s.who = p
	return true
}

func (c *Console) newSession(w http.ResponseWriter, r *http.Request, who Principal) *session {
	s := &session{who: who, csrf: randomToken(), expires: c.cfg.Ledger.Now().Add(SessionTTL)}
	setCookie(w, r, sessionCookie, c.sessions.seal(s), int(SessionTTL/time.Second))
	return s
}

func (c *Console) validCSRF(s *session, r *http.Request) bool {
	got := r.PostFormValue("csrf")
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.csrf)) == 1
}

// toSignin sends a request without a live session to the sign-in page, which then leads back to the page
// asked for (a link from a Slack alert lands on its item). A request whose session cookie names a session
// no longer known (expired, signed out, a restart) is told that its session ended, and a form posted so
// that it was not recorded.
func (c *Console) toSignin(w http.ResponseWriter, r *http.Request) {
	q := url.Values{}
	if _, err := r.Cookie(sessionCookie); err == nil {
		setCookie(w, r, sessionCookie, "", -1)
		q.Set("ended", "1")
		if r.Method == http.MethodPost {
			q.Set("ended", "post")
		}
	}
	next := r.URL.RequestURI()
	if r.Method == http.MethodPost {
		next = ""
		if key := r.PostFormValue("key"); items.ValidKey(key) {
			next = itemURL(key)
		}
	}
	if safeNext(next) != Prefix {
		q.Set("next", next)
	}
	to := Prefix + "signin"
	if len(q) > 0 {
		to += "?" + q.Encode()
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// safeNext returns next when it is a path of the console on this site, else the queue: a sign-in never
// leads elsewhere.
func safeNext(next string) string {
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || !strings.HasPrefix(next, Prefix) ||
		strings.ContainsAny(next, "\\\x00") || strings.HasPrefix(u.Path, Prefix+"signin") || strings.HasPrefix(u.Path, Prefix+"signout") {
		return Prefix
	}
	return next
}

// signin shows the sign-in form (GET) or checks an operator token (POST). The form carries its own CSRF
// token, tied to a short-lived cookie, since there is no session yet.
func (c *Console) signin(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Open {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return
	}
	v := signinView{Next: safeNext(r.FormValue("next"))}
	if v.Next == Prefix {
		v.Next = ""
	}
	switch r.URL.Query().Get("ended") {
	case "1":
		v.Notice = "Your session has ended (a session lasts 12 hours, and ends when you sign out or when its token is removed or changed). Sign in again."
	case "post":
		v.Notice = "Your session had ended, so what you submitted was not recorded. Sign in again, then submit it again."
	}
	if r.Method == http.MethodPost {
		ck, err := r.Cookie(signinCookie)
		got := r.PostFormValue("csrf")
		switch p, ok := c.cfg.Authenticate(strings.TrimSpace(r.PostFormValue("token"))); {
		case err != nil || got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(ck.Value)) != 1:
			w.WriteHeader(http.StatusForbidden)
			v.Error = "the form has no valid CSRF token; try again"
		case !ok:
			w.WriteHeader(http.StatusUnauthorized)
			v.Error = "unknown token: no token of this service has this secret (check that it was pasted whole)"
			if strings.Count(r.PostFormValue("token"), ":") >= 3 {
				v.Error = "unknown token; paste only the secret, the part after the third colon of name:tenant:operator:secret"
			}
		case !p.Operator:
			w.WriteHeader(http.StatusForbidden)
			v.Error = "the console needs an operator token; " + p.Name + " is a workflow token"
		default:
			setCookie(w, r, signinCookie, "", -1)
			c.newSession(w, r, p)
			http.Redirect(w, r, safeNext(v.Next), http.StatusSeeOther)
			return
		}
	}
	v.CSRF = randomToken()
	setCookie(w, r, signinCookie, v.CSRF, 600)
	c.render(w, r, "signin", page{Title: "Sign in", Body: v})
}

// signout ends the session (POST): the browser drops its cookie, and with it the session on every replica
// (sessions.go says what that does not end).
func (c *Console) signout(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return
	}
	setCookie(w, r, sessionCookie, "", -1)
	http.Redirect(w, r, Prefix+"signin", http.StatusSeeOther)
}

// signinView is the sign-in page.
type signinView struct {
	CSRF  string
	Error string
	// Notice says why the sign-in page is shown (a session that ended); Next is where signing in leads.
	Notice string
	Next   string
}

// pagePaths are the console's pages, under Prefix.
var pagePaths = []string{"", "signin", "signout", "item", "item/resolve", "batch", "find", "overview"}

// Route names the console page a request path asks for, for the request's log line and its metrics:
// the page ("/console/item"), "/console/static/*file" for the stylesheet, script and icon, and
// "/console/*path" for any other path, so that no caller's text becomes a metric's label.
func Route(path string) string {
	rest, ok := strings.CutPrefix(path, Prefix)
	switch {
	case !ok:
	case slices.Contains(pagePaths, rest):
		return Prefix + rest
	case strings.HasPrefix(rest, "static/"):
		return Prefix + "static/*file"
	}
	return Prefix + "*path"
}
