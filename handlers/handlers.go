// Package handlers serves the ledger over HTTP: the v1 contract, written out in docs/api.md.
//
// It is the only package that imports gin. Every request passes the same checks in the contract's order —
// authentication (401), role (403), content type (415), body size (413), body (400), key (404), state
// (409) — and every error leaves through one function (writeError) that maps codes to statuses in one
// table. The ledger (items.Ledger) decides; this package only translates HTTP to domain calls and back.
package handlers

import (
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/replaysafe/companion/batches"
	"github.com/replaysafe/companion/console"
	"github.com/replaysafe/companion/items"
)

// MaxBodyBytes is the largest request body accepted; a larger one is refused with 413.
const MaxBodyBytes = 1 << 20

// GCPercent is the garbage collector's target (GOGC) that companion serve runs with when the environment
// does not set GOGC. The service keeps little (a live heap of a few MB) while a request allocates freely:
// a batch of 500 claims allocates about 4 MB. At Go's default of 100 the collector ran about twice per batch and,
// with the memory it returned to the system and took back, cost a fifth of the batch's time. At 400 the
// heap may grow to five times what is live: still a few tens of MB. The HTTP benchmarks run with it.
const GCPercent = 400

// Config is what the HTTP service needs.
type Config struct {
	// Ledger decides and records. Required.
	Ledger *items.Ledger
	// Tokens are the accepted bearer tokens. With none, the service answers 401 to every authenticated
	// route unless Open is set.
	Tokens []Token
	// Open runs the service without tokens: every caller is tenant "default" with role operator and
	// resolver name "local". It is ignored when Tokens are set. Whoever sets it must bind to loopback only.
	Open bool
	// Logger receives one line per request; slog.Default() when nil.
	Logger *slog.Logger
	// Routes are extra endpoints built outside this package (metrics, Slack actions, …). They are served
	// with the same authentication, logging and error shape as the built-in ones.
	Routes []Route
	// Operators serves the operator list (GET /v1/items), GET /v1/stats and GET /metrics, and keeps the
	// fingerprint-conflict counter. Without it those routes answer 404.
	Operators OperatorStore
	// Metrics counts decisions and request durations for GET /metrics. Default: NewMetrics().
	Metrics *Metrics
	// MetricsOpen serves GET /metrics without a token, with every tenant's measures together.
	MetricsOpen bool
	// Resolver settles items for POST /v1/items/{key}/resolve: the alert dispatcher, so that the Slack
	// messages about the item follow. Default: the ledger.
	Resolver Resolver
	// SlackActions answers POST /v1/slack/actions; nil when Slack is not configured (the route answers 404).
	SlackActions SlackActions
	// Version and StoreKind ("sqlite", "mongodb") are reported by GET /healthz, so that a client (the
	// acceptance suite) can record what it ran against. Neither carries a path or an address.
	Version   string
	StoreKind string
	// Console configures the operator console at /console/, served when Operators is set.
	Console ConsoleConfig
	// AllowedHosts are the Host names (a name, or name:port for that port only) a service with tokens
	// answers besides the loopback names; any other Host is answered 421 misdirected_host. Empty: every
	// Host. A service running open answers the loopback names only, whatever this says.
	AllowedHosts []string
	// PublicURL is the service's address as people reach it (public_url): console forms are accepted from
	// its origin, from the AllowedHosts and from the loopback names, never from an origin taken from Host.
	PublicURL string
	// TrustedProxies are the addresses (IPs or CIDRs) of the reverse proxies whose X-Forwarded-For (or
	// X-Real-IP) names the client, which failed sign-ins count against. Empty: the peer's address counts,
	// and no forwarded header is believed.
	TrustedProxies []string
}

// ConsoleConfig is what the operator console needs beyond the service's own configuration.
type ConsoleConfig struct {
	// Off leaves /console/ unserved.
	Off bool
	// Target routes an item to its owner and check hint (the alert routing); nil shows the item's owner.
	Target func(*items.Item) console.Target
	// CauseText explains a needs-person cause in words; nil shows the cause.
	CauseText func(string) string
	// Refresh is how often console pages reload themselves; console.DefaultRefresh when 0.
	Refresh time.Duration
	// QueueLimit is how many of the oldest items needing a person the queue's pages reach;
	// console.QueueLimit when 0.
	QueueLimit int
}

// Access says who may call a route.
type Access int

const (
	// Public routes need no token (health, readiness).
	Public Access = iota
	// Workflow routes are open to both roles: workflow and operator.
	Workflow
	// Operator routes are open to the operator role only.
	Operator
)

// Route is one extra endpoint. Its handler finds the caller with PrincipalFrom(r.Context()).
type Route struct {
	Method string
	// Path uses gin's syntax: /v1/things/:id.
	Path    string
	Access  Access
	Handler http.Handler
}

// server holds what the handlers share.
type server struct {
	// batches serves the batch endpoints (batches.go).
	batches *batches.Service

	ledger *items.Ledger
	log    *slog.Logger
	auth   authenticator
	// Operators' surface (operators.go).
	operators     OperatorStore
	metricsOf     *Metrics
	metricsAccess Access
	resolver      Resolver
	slack         SlackActions
	// health is what GET /healthz reports besides its status.
	version, storeKind string
	// The edge (edge.go): the Host names answered, and the failed authentications per client address.
	hosts    hostPolicy
	failures *failedAuth
}

// SlackActionsPath is where Slack posts the interactions with the alerts (buttons, the evidence modal):
// the request URL of the Slack app's interactivity is the service's public URL followed by it.
const SlackActionsPath = "/v1/slack/actions"

// endpoint is one built-in route.
type endpoint struct {
	method string
	path   string
	access Access
	handle gin.HandlerFunc
}

// endpoints is the route table. New endpoints (batches, operator lists, stats) are added here, with
// their handlers in a file per resource.
func (s *server) endpoints() []endpoint {
	return []endpoint{
		{http.MethodGet, "/healthz", Public, s.healthz},
		{http.MethodGet, "/readyz", Public, s.readyz},
		{http.MethodPost, "/v1/before-write", Workflow, s.beforeWrite},
		{http.MethodPost, "/v1/after-write", Workflow, s.afterWrite},
		{http.MethodPost, "/v1/batches/before-write", Workflow, s.batchBeforeWrite},
		{http.MethodPost, "/v1/batches/prepare", Workflow, s.batchPrepare},
		{http.MethodPost, "/v1/batches/after-write", Workflow, s.batchAfterWrite},
		{http.MethodGet, "/v1/batches/:batch_id", Workflow, s.getBatch},
		{http.MethodPost, "/v1/reconcile", Workflow, s.reconcile},
		{http.MethodGet, "/v1/items/:key", Workflow, s.getItem},
		{http.MethodPost, "/v1/items/:key/resolve", Operator, s.resolve},
		// A workflow token may list by execution_id alone (listItems refuses it every other filter).
		{http.MethodGet, "/v1/items", Workflow, s.listItems},
		{http.MethodGet, "/v1/stats", Operator, s.stats},
		{http.MethodGet, "/v1/stats/series", Operator, s.statsSeries},
		{http.MethodGet, "/metrics", s.metricsAccess, s.metrics},
		{http.MethodGet, "/openapi.json", Public, s.openAPI},
		{http.MethodPost, SlackActionsPath, Public, s.slackActions},
	}
}

// New returns the HTTP service. It panics when cfg.Ledger is nil: that is a wiring mistake, not a
// runtime condition.
func New(cfg Config) http.Handler {
	if cfg.Ledger == nil {
		panic("handlers: Config.Ledger is required")
	}
	gin.SetMode(gin.ReleaseMode)
	s := &server{ledger: cfg.Ledger, log: cfg.Logger, auth: newAuthenticator(cfg.Tokens, cfg.Open),
		operators: cfg.Operators, metricsOf: cfg.Metrics, metricsAccess: Operator, resolver: cfg.Resolver, slack: cfg.SlackActions,
		version: cfg.Version, storeKind: cfg.StoreKind, hosts: newHostPolicy(len(cfg.Tokens) == 0, cfg.AllowedHosts), failures: newFailedAuth()}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.metricsOf == nil {
		s.metricsOf = NewMetrics()
	}
	if cfg.MetricsOpen {
		s.metricsAccess = Public
	}
	if s.resolver == nil {
		s.resolver = cfg.Ledger
	}

	r := gin.New()
	// Keys arrive percent-encoded in paths and are decoded exactly once, so "a%2Fb" is the key "a/b"
	// (refused as invalid) rather than a path with an extra segment.
	r.UseEscapedPath = true
	r.UnescapePathValues = true
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.HandleMethodNotAllowed = true
	// The client address (which failed sign-ins count against) is the peer's, unless the peer is a trusted
	// proxy: then X-Forwarded-For names it.
	if err := r.SetTrustedProxies(cfg.TrustedProxies); err != nil {
		panic("handlers: Config.TrustedProxies: " + err.Error()) // checked by the caller (CheckTrustedProxy)
	}
	r.Use(s.serveRequests, s.edge)
	// Where to go instead: a person who opens the service's address in a browser (GET /) finds the console.
	notFound := "; the API's endpoints are listed by GET /openapi.json (docs/api.md)"
	if cfg.Operators != nil && !cfg.Console.Off {
		notFound += ", the operator console is at /console/"
	}
	noRoute := func(c *gin.Context) {
		s.writeError(c, &items.Error{Code: items.CodeNotFound, Message: "no such endpoint: " + c.Request.Method + " " + c.Request.URL.Path + notFound})
	}
	r.NoRoute(noRoute)
	r.NoMethod(func(c *gin.Context) {
		s.writeError(c, &items.Error{Code: CodeMethodNotAllowed, Message: c.Request.Method + " is not allowed here; allowed: " + c.Writer.Header().Get("Allow")})
	})

	s.batches = batchService(cfg.Ledger)
	for _, e := range s.endpoints() {
		r.Handle(e.method, e.path, s.authorize(e.access, false), e.handle)
	}
	for _, rt := range cfg.Routes {
		r.Handle(rt.Method, rt.Path, s.authorize(rt.Access, true), gin.WrapH(rt.Handler))
	}
	if cfg.Operators != nil && !cfg.Console.Off {
		s.mountConsole(r, cfg)
		r.GET("/", s.home(noRoute))
		r.HEAD("/", s.home(noRoute))
	}
	return r
}

// mountConsole serves the operator console under /console/. The console signs its visitors in itself
// (an operator token, then a session cookie), with this service's tokens, resolver and error table.
func (s *server) mountConsole(r *gin.Engine, cfg Config) {
	c := console.New(console.Config{Ledger: s.ledger, Store: s.operators, Resolver: s.resolver, Batches: s.batches,
		Authenticate: s.auth.consolePrincipal, Recheck: s.auth.consoleRecheck,
		Open:  s.auth.open,
		Local: console.Principal{Name: OpenPrincipal.Name, Tenant: OpenPrincipal.Tenant, Operator: true},
		Errors: func(err error) console.PublicError {
			d := publicError(err)
			return console.PublicError{Status: StatusOf(d.Code), Code: string(d.Code), Message: d.Message}
		},
		Origins: consoleOrigins(cfg.PublicURL, cfg.AllowedHosts),
		Target:  cfg.Console.Target, CauseText: cfg.Console.CauseText, Refresh: cfg.Console.Refresh,
		QueueLimit: cfg.Console.QueueLimit, Logger: s.log, StoreKind: cfg.StoreKind})
	h := gin.WrapH(c)
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost} {
		r.Handle(m, consoleRoute, h)
	}
	r.GET("/console", func(c *gin.Context) { c.Redirect(http.StatusMovedPermanently, console.Prefix) })
}

// consoleOrigins are the origins the console accepts forms from besides the loopback names: the public
// URL's, and each allowed host's over https and http.
func consoleOrigins(publicURL string, allowedHosts []string) []string {
	var out []string
	if u, err := url.Parse(publicURL); err == nil && u.Scheme != "" && u.Host != "" {
		out = append(out, u.Scheme+"://"+u.Host)
	}
	for _, h := range allowedHosts {
		out = append(out, "https://"+h, "http://"+h)
	}
	return out
}

// consoleRoute is the one route of the console's pages.
const consoleRoute = "/console/*path"

// home answers GET / : a browser (it accepts text/html) is sent to the console; an API client gets the
// 404 of any unknown endpoint, which names where to go.
func (s *server) home(notFound gin.HandlerFunc) gin.HandlerFunc {
	return func(c *gin.Context) {
		if strings.Contains(c.GetHeader("Accept"), "text/html") {
			c.Redirect(http.StatusSeeOther, console.Prefix)
			return
		}
		notFound(c)
	}
}
