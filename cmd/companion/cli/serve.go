package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/replaysafe/companion/alerts"
	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/internal/loopback"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/mongostore"
	"github.com/replaysafe/companion/items/pgstore"
	"github.com/replaysafe/companion/items/sqlitestore"
)

const serveSynopsis = `Runs the HTTP service: the before-write / after-write protocol over a durable per-item ledger.

Each flag has an environment twin; a flag given on the command line wins over it.
Tokens come from COMPANION_TOKENS ("name:tenant:role:secret,…", role workflow or operator; each
secret at least 16 characters, without spaces or ';'), or from the file COMPANION_TOKENS_FILE names,
and/or from "tokens:" in the config file; the start line names them (never their secrets). Without tokens
the service runs open (tenant "default", role operator) and listens on loopback addresses only.
SIGINT or SIGTERM stops it gracefully: running requests finish; the sweeps stop, an alert being posted
finishes and alerts claimed but not yet posted are given back (another replica, or the restarted
service, sends them at once); the probes stop the same way, a lookup in progress finishes and is
recorded and reads claimed but not started are given back; then the ledger closes.

The sweeper runs inside serve on --sweep-every: it records expired leases as unknown, marks the items
that need a person, and sends their alerts — to Slack with SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET
(each also as a file through SLACK_BOT_TOKEN_FILE, SLACK_SIGNING_SECRET_FILE; SLACK_API_URL for a proxy),
else to the log. At the start serve asks Slack who the bot token is (auth.test, at most 5 s) and names
the bot on the start line; a token Slack refuses (invalid_auth, token_revoked, …), or one without the
chat:write scope, stops the start unless SLACK_TOKEN_CHECK=warn; a missing history scope is a warning
naming it (docs/slack.md); a Slack that does not answer only warns, and is asked again
every minute until it answers. Slack's buttons call POST /v1/slack/actions ("companion slack manifest"
prints the Slack app with it as the request URL). On the same schedule the probes look up the unknown
items of the destinations that have a "lookup:" in the config file. Every 10
minutes serve removes the settled items past their destination's retention (default 30 days;
docs/configuration.md).

The Go garbage collector runs at GOGC=400 unless GOGC is set (see docs/configuration.md).`

// RetentionEvery is how often serve removes the settled items past their destination's retention
// (items.Retention), starting at start.
const RetentionEvery = 10 * time.Minute

// serveOptions are serve's settings from flags and environment.
type serveOptions struct {
	addr       string
	dataDir    string
	configPath string
	sweepEvery string
	// metricsOpen serves GET /metrics without a token.
	metricsOpen bool
	// debugAddr serves the Go profiles (/debug/pprof/) on a loopback address of their own; "" is off.
	debugAddr string
	// itemCache is the bound of the committer's item cache (SQLite, PostgreSQL) as given; itemCacheItems the number
	// (itemCacheBound); itemCacheGiven whether the flag or its environment twin gave it.
	itemCache      string
	itemCacheItems int
	itemCacheGiven bool
}

// given reports whether the command line gave the flag name.
func given(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// env returns the environment variable name, or def when it is unset or empty.
func (m *Main) env(name, def string) string {
	if v := m.Getenv(name); v != "" {
		return v
	}
	return def
}

func (m *Main) serve(ctx context.Context, args []string) error {
	fs := m.newFlags("serve", serveSynopsis)
	var o serveOptions
	fs.StringVar(&o.addr, "addr", m.env("COMPANION_ADDR", "127.0.0.1:8080"), "`host:port` to listen on (env COMPANION_ADDR)")
	fs.StringVar(&o.dataDir, "data-dir", m.env("COMPANION_DATA_DIR", "./companion-data"), "`directory` of the embedded ledger (env COMPANION_DATA_DIR)")
	fs.StringVar(&o.configPath, "config", m.env("COMPANION_CONFIG", ""), "YAML configuration `file` (env COMPANION_CONFIG)")
	fs.StringVar(&o.sweepEvery, "sweep-every", m.env("COMPANION_SWEEP_EVERY", alerts.DefaultSweepEvery),
		"cron `schedule` of the sweeper and the alerts, five fields or a descriptor such as \"@every 30s\" (env COMPANION_SWEEP_EVERY)")
	metricsOpen, metricsOpenErr := strconv.ParseBool(m.env("COMPANION_METRICS_OPEN", "false"))
	fs.BoolVar(&o.metricsOpen, "metrics-open", metricsOpen,
		"serve GET /metrics without a token, every tenant together (env COMPANION_METRICS_OPEN=true)")
	fs.StringVar(&o.debugAddr, "debug-addr", m.env("COMPANION_DEBUG_ADDR", ""),
		"loopback `host:port` serving Go's CPU and heap profiles at /debug/pprof/; off when empty (env COMPANION_DEBUG_ADDR)")
	fs.StringVar(&o.itemCache, "item-cache", m.env("COMPANION_ITEM_CACHE", strconv.Itoa(sqlitestore.DefaultItemCache)),
		"`items` the ledger's writer keeps of those it wrote, so that their after-writes do not read them again (SQLite; PostgreSQL, where the writes check them); 0 turns the cache off (env COMPANION_ITEM_CACHE)")
	if done, err := m.parse(fs, args); done {
		return err
	}
	if metricsOpenErr != nil && !given(fs.FlagSet, "metrics-open") {
		// Not silently off: whoever set it meant something, and an open /metrics is a choice to see made.
		return usageErrorf("COMPANION_METRICS_OPEN %q is not true or false (true opens GET /metrics to every caller; leave it unset to keep it closed)",
			m.Getenv("COMPANION_METRICS_OPEN"))
	}

	var err error
	if o.itemCacheItems, err = itemCacheBound(o.itemCache); err != nil {
		return err
	}
	o.itemCacheGiven = m.Getenv("COMPANION_ITEM_CACHE") != "" || given(fs.FlagSet, "item-cache")
	if err := alerts.ParseSchedule(o.sweepEvery); err != nil {
		if _, derr := time.ParseDuration(strings.TrimSpace(o.sweepEvery)); derr == nil {
			return usageErrorf("--sweep-every (COMPANION_SWEEP_EVERY): %v; did you mean \"@every %s\"?", err, strings.TrimSpace(o.sweepEvery))
		}
		return usageErrorf("--sweep-every (COMPANION_SWEEP_EVERY): %v; write five cron fields (\"*/2 * * * *\") or a descriptor (\"@every 30s\", \"@hourly\")", err)
	}
	if _, _, err := net.SplitHostPort(o.addr); err != nil {
		return usageErrorf("--addr (COMPANION_ADDR) %q: %v; give host:port, e.g. --addr %s", o.addr, err, addrSuggestion(o.addr))
	}
	if o.debugAddr != "" && !loopbackAddr(o.debugAddr) {
		return usageErrorf("--debug-addr (COMPANION_DEBUG_ADDR) %q: the profiles are served on a loopback address only (127.0.0.1:6060)", o.debugAddr)
	}
	if m.Getenv("GOGC") == "" {
		debug.SetGCPercent(handlers.GCPercent)
	}
	settings, err := m.settings(o)
	if err != nil {
		return err
	}
	cfg, routing, tokens, publicURL, lookups := settings.cfg, settings.routing, settings.tokens, settings.publicURL, settings.lookups
	slack, err := m.slack()
	if err != nil {
		return err
	}
	if len(tokens) == 0 && !loopbackAddr(o.addr) {
		// Never a quiet fallback to loopback: in a container nothing could reach it there.
		return fmt.Errorf("refusing to listen on %s without tokens: anyone who can reach it could claim, report and "+
			"resolve items. Give tokens as a secret file: COMPANION_TOKENS_FILE=/run/secrets/companion_tokens (a Docker or "+
			"Kubernetes secret) holding name:tenant:role:secret lines, e.g. n8n:default:workflow:SECRET1,ops:default:operator:SECRET2 "+
			"with secrets of 16 characters or more (openssl rand -hex 16 prints one; callers send the secret alone as Bearer); "+
			"or set COMPANION_TOKENS to the same, or tokens: in the config file; "+
			"or listen on a loopback address such as 127.0.0.1:8080", o.addr)
	}

	log := m.logger()
	// The listeners are bound before the ledger is opened, so that a taken port stops the start before it
	// creates the data dir or takes the ledger's lock; nothing is served before the ledger is open (a
	// connection made meanwhile waits in the listen backlog). They are closed on every way out below
	// until the servers own them.
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return listenError(o.addr, "--addr (COMPANION_ADDR)", err)
	}
	debugLn, err := listenDebug(o.debugAddr)
	if err != nil {
		ln.Close()
		return err
	}
	serving, debugServing := false, debugLn == nil
	defer func() {
		if !serving {
			ln.Close()
		}
		if !debugServing {
			debugLn.Close()
		}
	}()
	slackIdentity, slackUnchecked, err := m.checkSlack(ctx, slack, configOwners(cfg, routing), true, log)
	if err != nil {
		return err
	}
	store, where, err := m.openStore(ctx, o)
	if err != nil {
		return err
	}
	ledger, err := items.NewLedger(ctx, store, cfg)
	if err != nil {
		store.Close()
		return fmt.Errorf("cannot start the ledger in %s: %w", where, err)
	}
	recordRelease(ctx, store, versionString(), ledger.Now(), log)
	alertSvc, err := newAlertServices(ledger, routing, slack, slackIdentity, publicURL, log)
	if err != nil {
		store.Close()
		return err
	}
	prober, err := newProber(ledger, lookups, log)
	if err != nil {
		store.Close()
		return err
	}
	var ret *items.Retention
	if rs, ok := store.(items.RetentionStore); ok {
		// Made before the server starts: a failure here closes the store, with nothing running yet.
		if ret, err = items.NewRetention(items.RetentionConfig{Store: rs, Config: ledger.Config(), Logger: log}); err != nil {
			store.Close()
			return err
		}
	}
	hc := handlers.Config{Ledger: ledger, Tokens: tokens, Open: len(tokens) == 0, Logger: log, MetricsOpen: o.metricsOpen,
		Version: versionString(), StoreKind: strings.Fields(where)[0],
		AllowedHosts: settings.allowedHosts, TrustedProxies: settings.trustedProxies, PublicURL: publicURL}
	alertSvc.handlersConfig(&hc)
	hc.Metrics = handlers.NewMetrics()
	if err := hc.Metrics.Register(alertsCollector{alertSvc}); err != nil {
		store.Close()
		return err
	}
	if prober != nil {
		if err := hc.Metrics.Register(proberCollector{prober}); err != nil {
			store.Close()
			return err
		}
	}
	if s, ok := store.(*sqlitestore.Store); ok {
		if err := hc.Metrics.Register(writerCollector{s}); err != nil {
			store.Close()
			return err
		}
	}
	srv := &http.Server{
		Handler:           handlers.New(hc),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	serving = true // the server closes ln from here on
	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		served <- err
	}()
	// Close stops these in reverse: first the server (running requests finish), then the prober (no new
	// read; a lookup in progress finishes and is recorded, the read claims left are given back), then the
	// sweeps (no new run; an alert being posted lands and is recorded, the alert claims left are given back
	// on a context of their own), then the store.
	m.keep(daemon{name: "store", stop: func(context.Context) error {
		err := store.Close()
		log.Info("companion stopped", slog.String("store", where))
		return err
	}})
	m.runSweeps(alertSvc, o.sweepEvery) // stopped before the store closes
	if ret != nil {
		m.keepRunning(context.Background(), "retention", func(ctx context.Context) error { return ret.Run(ctx, RetentionEvery) })
	}
	m.runProbes(prober, o.sweepEvery) // stopped before the store closes
	m.keep(daemon{name: "http server", done: served, stop: srv.Shutdown})
	m.serveDebug(debugLn, log)
	debugServing = true
	if slackUnchecked != nil {
		m.keepRunning(context.Background(), "slack token check", func(ctx context.Context) error {
			slackUnchecked.recheck(ctx, log)
			return nil
		})
	}

	addr := ln.Addr().String()
	m.mu.Lock()
	m.addr = addr
	m.mu.Unlock()
	auth := "off (open mode: tenant default, role operator, loopback only)"
	if len(tokens) > 0 {
		auth = fmt.Sprintf("on (%d token(s): %s)", len(tokens), tokenNames(tokens))
		if o.metricsOpen {
			// Whoever reaches --addr reads every tenant's measures: the start line says so.
			auth += ", except GET /metrics (--metrics-open: no token, every tenant)"
		}
	}
	storeLine := where
	cache := -1
	switch s := store.(type) {
	case *sqlitestore.Store:
		cache = s.ItemCacheTotals().Bound
	case *pgstore.Store:
		cache = s.ItemCacheBound()
	}
	switch {
	case cache == 0:
		storeLine += " (item cache off)"
	case cache > 0:
		storeLine = fmt.Sprintf("%s (item cache %d items)", where, cache)
	}
	// The file by its absolute path, in the message and the config field alike: the one read, whatever
	// the directory serve was started in.
	configFile := absPath(o.configPath)
	warnings := settings.warnings()
	warned := ""
	if len(warnings) > 0 {
		warned = "; warnings: " + strings.Join(warnings, "; ")
	}
	log.Info(fmt.Sprintf("companion %s serving on http://%s; store %s; %s; auth %s; sweep %s; alerts %s; probes %s%s", versionString(), addr, storeLine,
		configLine(configFile, cfg), auth, o.sweepEvery, alertSvc.where, probesDescription(prober), warned),
		slog.String("addr", addr), slog.String("store", where), slog.String("config", configFile), slog.Bool("auth", len(tokens) > 0),
		slog.Bool("metrics_open", o.metricsOpen || len(tokens) == 0), slog.String("sweep", o.sweepEvery), slog.Bool("slack", slack != nil),
		slog.String("slack_identity", slackIdentity), slog.Any("warnings", warnings))
	return nil
}

// warnings are what the start line says about the service's exposure that the operator may not mean:
// request owners nobody restricts, a lookup any tenant can make read with its credentials, a tenant the
// configuration names that no token has, allowed_hosts without tokens.
func (f fileSettings) warnings() []string {
	tenants := []string{handlers.OpenPrincipal.Tenant}
	if len(f.tokens) > 0 {
		tenants = nil
		for _, t := range f.tokens {
			if !slices.Contains(tenants, t.Tenant) {
				tenants = append(tenants, t.Tenant)
			}
		}
		slices.Sort(tenants)
	}
	var out []string
	var free []string
	for _, t := range tenants {
		if _, limited := f.cfg.OwnersOf(t); !limited {
			free = append(free, t)
		}
	}
	if len(free) > 0 {
		out = append(out, fmt.Sprintf("request owners are unrestricted for tenant %s: a workflow may send its items' alerts to any Slack user or channel "+
			"(list them under tenants.<tenant>.owners, or name owners in the alert routes)", strings.Join(free, ", ")))
	}
	if len(tenants) > 1 {
		for _, name := range slices.Sorted(maps.Keys(f.lookups)) {
			if len(f.cfg.Destination(name).Tenants) == 0 {
				out = append(out, fmt.Sprintf("destination %s has a lookup and no tenants list while tokens of %d tenants (%s) are configured: "+
					"each of them can make it read with its credentials (give it tenants: [...])", name, len(tenants), strings.Join(tenants, ", ")))
			}
		}
	}
	if len(f.tokens) == 0 && len(f.allowedHosts) > 0 {
		out = append(out, "allowed_hosts is ignored without tokens: the service answers localhost and loopback addresses only")
	}
	if len(f.tokens) > 0 && f.publicURL == "" && len(f.allowedHosts) == 0 {
		out = append(out, "the console accepts forms only when opened as localhost or a loopback address: "+
			"set public_url (COMPANION_PUBLIC_URL) to the address people open it at")
	}
	if len(f.tokens) > 0 {
		named := map[string][]string{}
		for t := range f.cfg.Owners {
			named[t] = append(named[t], "tenants."+t)
		}
		for _, d := range slices.Sorted(maps.Keys(f.cfg.Destinations)) {
			for _, t := range f.cfg.Destinations[d].Tenants {
				named[t] = append(named[t], "destinations."+d+".tenants")
			}
		}
		for _, t := range slices.Sorted(maps.Keys(named)) {
			if !slices.Contains(tenants, t) {
				out = append(out, fmt.Sprintf("%s names tenant %s, which no token has", strings.Join(named[t], " and "), t))
			}
		}
	}
	return out
}

// settings combines the configuration file (lookups included), the token sources and the environment's
// overrides: the public URL (alert lines link to the console under it) is COMPANION_PUBLIC_URL, else the
// file's public_url; the allowed hosts COMPANION_ALLOWED_HOSTS, else allowed_hosts; the trusted proxies
// COMPANION_TRUSTED_PROXIES, else trusted_proxies.
func (m *Main) settings(o serveOptions) (fileSettings, error) {
	f := fileSettings{cfg: items.Config{MaxClockSkew: items.DefaultMaxClockSkew}}
	if o.configPath != "" {
		var err error
		if f, err = readConfig(o.configPath, m.Getenv); err != nil {
			return fileSettings{}, err
		}
	}
	if v := m.Getenv("COMPANION_PUBLIC_URL"); v != "" {
		if err := checkPublicURL(v); err != nil {
			return fileSettings{}, fmt.Errorf("COMPANION_PUBLIC_URL: %w", err)
		}
		f.publicURL = v
	}
	var err error
	if v := m.Getenv("COMPANION_ALLOWED_HOSTS"); v != "" {
		if f.allowedHosts, err = splitList("COMPANION_ALLOWED_HOSTS", v, handlers.CheckAllowedHost); err != nil {
			return fileSettings{}, err
		}
	}
	if v := m.Getenv("COMPANION_TRUSTED_PROXIES"); v != "" {
		if f.trustedProxies, err = splitList("COMPANION_TRUSTED_PROXIES", v, checkTrustedProxy); err != nil {
			return fileSettings{}, err
		}
	}
	envTokens, err := m.envTokens()
	if err != nil {
		return fileSettings{}, err
	}
	f.tokens = append(envTokens, f.tokens...)
	if err := handlers.CheckTokens(f.tokens); err != nil {
		return fileSettings{}, fmt.Errorf("tokens (COMPANION_TOKENS and the config file together): %w", err)
	}
	return f, nil
}

// envTokens reads COMPANION_TOKENS, or the file COMPANION_TOKENS_FILE names.
func (m *Main) envTokens() ([]handlers.Token, error) {
	v, file := m.Getenv("COMPANION_TOKENS"), m.Getenv("COMPANION_TOKENS_FILE")
	source := "COMPANION_TOKENS"
	switch {
	case v != "" && file != "":
		return nil, errors.New("set COMPANION_TOKENS or COMPANION_TOKENS_FILE, not both")
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("COMPANION_TOKENS_FILE: %w", err)
		}
		v, source = string(b), "COMPANION_TOKENS_FILE "+file
	}
	tokens, err := handlers.ParseTokens(v)
	if err == nil {
		err = handlers.CheckTokens(tokens) // here, so that the message names the source
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return tokens, nil
}

// configLine says which configuration file the service read and which destinations it configured, for
// the start line: "config /etc/companion.yaml (destinations billing, crm)".
func configLine(path string, cfg items.Config) string {
	if path == "" {
		return fmt.Sprintf("config none (every destination on the defaults: dedupe none, %d attempts, %d s leases)",
			items.DefaultMaxAttempts, items.DefaultLeaseSeconds)
	}
	if len(cfg.Destinations) == 0 {
		return "config " + path + " (no destinations: the defaults for every one)"
	}
	return fmt.Sprintf("config %s (destinations %s)", path, strings.Join(slices.Sorted(maps.Keys(cfg.Destinations)), ", "))
}

// absPath is path made absolute ("" stays ""; a path the working directory cannot complete stays as given).
func absPath(path string) string {
	if path == "" {
		return ""
	}
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// tokenNames lists the tokens for the start line, "ops (acme, operator), n8n (acme, workflow)": their
// names, tenants and roles, never their secrets.
func tokenNames(tokens []handlers.Token) string {
	parts := make([]string, len(tokens))
	for i, t := range tokens {
		parts[i] = fmt.Sprintf("%s (%s, %s)", t.Name, t.Tenant, t.Role)
	}
	return strings.Join(parts, ", ")
}

// loopbackAddr reports whether addr listens on a loopback interface only.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	return loopback.Name(host)
}

// Stores a ledger may live in besides the embedded SQLite file: sharedStore's answers.
const (
	storeMongoDB  = "mongodb"
	storePostgres = "postgres"
)

// sharedStore returns the store the environment chooses for the ledger: storeMongoDB when MONGODB_URI (or
// MONGODB_URI_FILE) is set, storePostgres when POSTGRES_URL (or POSTGRES_URL_FILE) is, "" (the embedded
// SQLite file in the data dir) when neither is; both is an error.
func (m *Main) sharedStore() (string, error) {
	mongo := m.Getenv("MONGODB_URI") != "" || m.Getenv("MONGODB_URI_FILE") != ""
	postgres := m.Getenv("POSTGRES_URL") != "" || m.Getenv("POSTGRES_URL_FILE") != ""
	switch {
	case mongo && postgres:
		return "", errors.New("both MONGODB_URI and POSTGRES_URL are set: the ledger lives in one store; unset the variables of the " +
			"one you do not use (MONGODB_URI, MONGODB_URI_FILE or POSTGRES_URL, POSTGRES_URL_FILE)")
	case mongo:
		return storeMongoDB, nil
	case postgres:
		return storePostgres, nil
	}
	return "", nil
}

// openStore opens the store the ledger lives in. It is the one place the store is chosen: MongoDB when
// MONGODB_URI (or MONGODB_URI_FILE) is set, PostgreSQL when POSTGRES_URL (or POSTGRES_URL_FILE) is, else
// the embedded SQLite file in the data dir. It returns a description for the start line, without
// credentials.
func (m *Main) openStore(ctx context.Context, o serveOptions) (items.Store, string, error) {
	shared, err := m.sharedStore()
	if err != nil {
		return nil, "", err
	}
	if shared == storeMongoDB && o.itemCacheGiven {
		m.logger().Warn("--item-cache (COMPANION_ITEM_CACHE) is ignored: it sizes the item cache of the SQLite and PostgreSQL ledgers, and the ledger is on MongoDB, " +
			"where no replica keeps the items")
	}
	switch shared {
	case storeMongoDB:
		uri, err := secretFromEnv("MONGODB_URI", m.Getenv)
		if err != nil {
			return nil, "", err
		}
		db := m.env("MONGODB_DATABASE", mongostore.DefaultDatabase)
		s, err := mongostore.Open(ctx, uri, db, mongostore.WithLogger(m.logger()))
		if err != nil {
			return nil, "", fmt.Errorf("cannot open the ledger on MongoDB %s (database %s): %w", mongostore.Redacted(uri), db, err)
		}
		return s, fmt.Sprintf("mongodb %s database %s", mongostore.Redacted(uri), db), nil
	case storePostgres:
		url, err := secretFromEnv("POSTGRES_URL", m.Getenv)
		if err != nil {
			return nil, "", err
		}
		schema := m.env("POSTGRES_SCHEMA", pgstore.DefaultSchema)
		s, err := pgstore.Open(ctx, url, schema, pgstore.WithLogger(m.logger()), pgstore.WithItemCache(o.itemCacheItems))
		if err != nil {
			where := pgstore.Describe(url) + " "
			if strings.HasPrefix(where, "(") { // it cannot be parsed, which err says
				where = ""
			}
			return nil, "", fmt.Errorf("cannot open the ledger on PostgreSQL %s(schema %s): %w", where, schema, err)
		}
		return s, fmt.Sprintf("postgres %s schema %s", pgstore.Describe(url), schema), nil
	}
	dir, err := filepath.Abs(o.dataDir)
	if err != nil {
		return nil, "", fmt.Errorf("data dir %s: %w", o.dataDir, err)
	}
	if err := dataDirWritable(dir); err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return nil, "", fmt.Errorf("cannot open the ledger in data dir %s: %w; give this user write access to it, "+
				"or choose another directory with --data-dir (COMPANION_DATA_DIR)", dir, err)
		}
		return nil, "", fmt.Errorf("cannot open the ledger in data dir %s: %w; choose another directory with --data-dir (COMPANION_DATA_DIR)", dir, err)
	}
	s, err := sqlitestore.Open(ctx, dir, sqlitestore.WithLogger(m.logger()), sqlitestore.WithItemCache(o.itemCacheItems))
	if errors.Is(err, sqlitestore.ErrInUse) {
		return nil, "", fmt.Errorf("cannot open the ledger in data dir %s: %w", dir, ledgerInUse{err})
	}
	if err != nil {
		return nil, "", fmt.Errorf("cannot open the ledger in data dir %s (it must be a writable directory): %w", dir, err)
	}
	return s, "sqlite " + s.Path(), nil
}

// ledgerInUse is the store's ErrInUse said without the store's package name (docs/deploying.md shows it so).
type ledgerInUse struct{ err error }

func (e ledgerInUse) Error() string { return strings.TrimPrefix(e.err.Error(), "sqlitestore: ") }
func (e ledgerInUse) Unwrap() error { return e.err }

// itemCacheBound reads --item-cache: a whole number of items from 0 (no cache) to sqlitestore.MaxItemCache.
func itemCacheBound(v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	switch {
	case err != nil:
		return 0, usageErrorf("--item-cache (COMPANION_ITEM_CACHE) %q: give a whole number of items, e.g. %d (the default), or 0 to turn the cache off", v, sqlitestore.DefaultItemCache)
	case n < 0:
		return 0, usageErrorf("--item-cache (COMPANION_ITEM_CACHE) %d: it cannot be negative; give a number of items, e.g. %d (the default), or 0 to turn the cache off", n, sqlitestore.DefaultItemCache)
	case n > sqlitestore.MaxItemCache:
		return 0, usageErrorf("--item-cache (COMPANION_ITEM_CACHE) %d: at most %d; an item costs about 2.2 KB of heap, about 12 KB of RSS at the service's GOGC=400 (the default %d: about 25 MB), "+
			"and the after-writes it serves read the items of the last seconds (%d holds four batches of 500)",
			n, sqlitestore.MaxItemCache, sqlitestore.DefaultItemCache, sqlitestore.DefaultItemCache)
	}
	return n, nil
}

// dataDirWritable says, in plain words, why this user cannot keep the ledger in a data dir: without it,
// SQLite's own words ("unable to open database file (14)", under the name of the step that met them
// first) or the store's ("sqlitestore: data dir: mkdir …") are all a newcomer sees. A dir that does not
// exist yet is created here, as the store would (0700); an error wrapping fs.ErrPermission is one that
// write access fixes.
func dataDirWritable(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%s, on its path, is a file, not a directory", fileOnPath(dir))
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o700); err != nil {
			if errors.Is(err, fs.ErrPermission) {
				return fmt.Errorf("this user (uid %d) cannot create it (%w)", os.Geteuid(), err)
			}
			return fmt.Errorf("it cannot be created (%w)", err)
		}
	case err != nil:
		return err
	case !fi.IsDir():
		return errors.New("it is a file, not a directory")
	}
	f, err := os.CreateTemp(dir, ".companion-write-check-*")
	if err != nil {
		return fmt.Errorf("this user (uid %d) cannot create files in it (%w)", os.Geteuid(), errors.Unwrap(err))
	}
	f.Close()
	_ = os.Remove(f.Name())
	for _, name := range []string{sqlitestore.FileName, sqlitestore.FileName + "-wal", sqlitestore.FileName + "-shm"} {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR, 0)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("this user (uid %d) cannot write %s (%w)", os.Geteuid(), name, errors.Unwrap(err))
		}
		f.Close()
	}
	return nil
}

// fileOnPath is the first of dir's parents that is a file (the reason a stat of dir says "not a
// directory"), or dir itself when none is found.
func fileOnPath(dir string) string {
	for p := filepath.Dir(dir); p != filepath.Dir(p); p = filepath.Dir(p) {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	return dir
}

// listenError says why a command cannot listen on addr and what to do about it; flag names the setting
// that chooses the address ("--addr (COMPANION_ADDR)").
func listenError(addr, flag string, err error) error {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("cannot listen on %s: the address is already in use (another companion, or another program, "+
			"listens there): stop it, or choose another address with %s, e.g. %s %s", addr, flag, strings.Fields(flag)[0], nextPort(addr))
	case errors.Is(err, syscall.EACCES):
		return fmt.Errorf("cannot listen on %s: this user may not listen on that port (ports below 1024 need privileges): "+
			"choose a port of 1024 or above with %s", addr, flag)
	}
	return fmt.Errorf("cannot listen on %s: %w", addr, err)
}

// addrSuggestion is the host:port a malformed --addr most likely meant: a port alone on loopback
// ("8080"), a host alone on port 8080 ("localhost"), a URL without its scheme and path.
func addrSuggestion(addr string) string {
	a := addr
	if _, rest, ok := strings.Cut(a, "://"); ok {
		a = rest
	}
	a, _, _ = strings.Cut(a, "/")
	if _, _, err := net.SplitHostPort(a); err == nil {
		return a
	}
	if n, err := strconv.Atoi(strings.TrimPrefix(a, ":")); err == nil && n > 0 && n < 65536 {
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(n))
	}
	if a != "" && !strings.Contains(a, ":") {
		return net.JoinHostPort(a, "8080")
	}
	return "127.0.0.1:8080"
}

// nextPort is addr with the port after its own (127.0.0.1:8081 for 127.0.0.1:8080), for a suggestion.
func nextPort(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	n, perr := strconv.Atoi(port)
	if err != nil || perr != nil || n <= 0 || n >= 65535 {
		return "127.0.0.1:8081"
	}
	return net.JoinHostPort(host, strconv.Itoa(n+1))
}

// logger writes JSON lines, or text when standard error is a terminal (a person is reading).
func (m *Main) logger() *slog.Logger {
	if f, ok := m.Stderr.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			return slog.New(slog.NewTextHandler(f, nil))
		}
	}
	return slog.New(slog.NewJSONHandler(m.Stderr, nil))
}
