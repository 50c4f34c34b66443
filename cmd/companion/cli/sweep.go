package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/replaysafe/companion/alerts"
	"github.com/replaysafe/companion/console"
	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/mongostore"
	"github.com/replaysafe/companion/items/pgstore"
	"github.com/replaysafe/companion/items/sqlitestore"
	"github.com/replaysafe/companion/probes"
)

func init() {
	commands = append(commands,
		command{"sweep", "sweep the ledger and send due alerts once (--once)", (*Main).sweep},
	)
}

// alertsConfig is the "alerts" section of the configuration file: who gets the alerts of items that need
// a person. Destinations add their own owner, escalate_to, escalate_after and check_hint.
type alertsConfig struct {
	DefaultOwner field[string] `yaml:"default_owner"`
	Routes       []routeConfig `yaml:"routes"`
}

// routeConfig is one route: items whose workflow matches the glob (and destination, when given) go to
// owner.
type routeConfig struct {
	Workflow      field[string]        `yaml:"workflow"`
	Destination   field[string]        `yaml:"destination"`
	Owner         field[string]        `yaml:"owner"`
	EscalateTo    field[string]        `yaml:"escalate_to"`
	EscalateAfter field[durationValue] `yaml:"escalate_after"`
	CheckHint     field[string]        `yaml:"check_hint"`
}

func (ac alertsConfig) routing(probs *configProblems) alerts.Routing {
	var r alerts.Routing
	if check(ac.DefaultOwner, "alerts.default_owner", probs) {
		r.DefaultOwner = ac.DefaultOwner.Value
	}
	for i, rc := range ac.Routes {
		where := fmt.Sprintf("alerts.routes[%d]", i)
		var rt alerts.Route
		for _, s := range []struct {
			f    field[string]
			name string
			dst  *string
		}{{rc.Workflow, "workflow", &rt.Workflow}, {rc.Destination, "destination", &rt.Destination}, {rc.Owner, "owner", &rt.Owner},
			{rc.EscalateTo, "escalate_to", &rt.EscalateTo}, {rc.CheckHint, "check_hint", &rt.CheckHint}} {
			if check(s.f, where+"."+s.name, probs) {
				*s.dst = s.f.Value
			}
		}
		if _, err := path.Match(rt.Workflow, ""); err != nil {
			probs.add(rc.Workflow.Line, where+".workflow", fmt.Sprintf("%q is not a valid glob (* ? [...])", rt.Workflow))
		}
		if check(rc.EscalateAfter, where+".escalate_after", probs) {
			if rc.EscalateAfter.Value < 0 {
				probs.add(rc.EscalateAfter.Line, where+".escalate_after", "must not be negative")
			}
			rt.EscalateAfter = time.Duration(rc.EscalateAfter.Value)
		}
		if rt.Owner == "" && rt.EscalateTo == "" && rt.CheckHint == "" && rt.EscalateAfter == 0 {
			line := max(rc.Workflow.Line, rc.Destination.Line)
			probs.add(line, where, "names no owner, escalate_to, escalate_after or check_hint")
		}
		r.Routes = append(r.Routes, rt)
	}
	return r
}

// slackClient is the Slack client of serve and sweep --once, built once from the environment: the token
// check at the start and the alert services (the posts, the buttons' actions) share it.
type slackClient struct {
	*alerts.Slack
	// apiURL is SLACK_API_URL as given (or Slack's own), for the start line.
	apiURL string
}

// slack reads SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET (each also as a file through _FILE) and SLACK_API_URL,
// and builds the client. It returns nil when neither secret is set: alerts then go to the log.
func (m *Main) slack() (*slackClient, error) {
	set := func(name string) bool { return m.Getenv(name) != "" || m.Getenv(name+"_FILE") != "" }
	token, secret := set("SLACK_BOT_TOKEN"), set("SLACK_SIGNING_SECRET")
	switch {
	case !token && !secret:
		return nil, nil
	case !token || !secret:
		return nil, errors.New("both SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET (or their _FILE forms) are needed for Slack; only one is set")
	}
	cfg := alerts.SlackConfig{APIURL: m.env("SLACK_API_URL", alerts.DefaultSlackAPIURL)}
	var err error
	if cfg.BotToken, err = secretFromEnv("SLACK_BOT_TOKEN", m.Getenv); err != nil {
		return nil, fmt.Errorf("SLACK_BOT_TOKEN: %w", err)
	}
	if cfg.SigningSecret, err = secretFromEnv("SLACK_SIGNING_SECRET", m.Getenv); err != nil {
		return nil, fmt.Errorf("SLACK_SIGNING_SECRET: %w", err)
	}
	s, err := alerts.NewSlack(cfg)
	if err != nil {
		return nil, err
	}
	return &slackClient{Slack: s, apiURL: cfg.APIURL}, nil
}

// slackCheckTimeout bounds each check of the Slack bot token: a Slack that does not answer delays serve's
// start by no more than this.
var slackCheckTimeout = 5 * time.Second

// slackRecheckEvery is how often serve asks Slack again about a bot token it could not check at its
// start, until Slack answers once.
var slackRecheckEvery = time.Minute

// The values of SLACK_TOKEN_CHECK: what serve does when Slack refuses the bot token at the start.
const (
	slackCheckRefuse = "refuse" // stop the start (the default)
	slackCheckWarn   = "warn"   // log an error and start; the alerts wait until the token works
)

// checkSlack asks Slack who the bot token is (auth.test) before serve or sweep --once opens the ledger, and
// returns the words for the start line: `as bot "companion" (U…) in workspace "Acme" (T…)`, or why it is
// unchecked; when Slack could not be asked and recheck is set (serve, which runs on), it also returns the
// check to repeat after the start (slackCheck.recheck).
//
// A token Slack refuses (invalid_auth, token_revoked, account_inactive, …) stops the start: Slack's
// answer is certain, every alert would be refused the same way, and the start is when someone watches
// (a log line of a running service is read, at the earliest, when the first alert fails to come; a cron
// job's sweep that posts nothing exits 0). Nothing has been opened yet, so nothing is left behind.
// SLACK_TOKEN_CHECK=warn starts anyway, for the case where the ledger must come back (or be swept) before
// the token can be fixed: the alerts wait in the outbox and are posted once it works. A Slack that cannot
// be asked (unreachable, slow past slackCheckTimeout, rate-limited, failing) proves nothing about the
// token and must not keep the ledger down: a warning, and the start.
//
// The same answer names the scopes the token was granted (X-OAuth-Scopes), checked against those the
// alerts to owners (the configuration's) need (alerts.MissingScopes): a token without chat:write is
// as good as refused and stops the start the same way; a missing history scope is one warning line that
// names each scope and what its lack costs, and the start goes on.
func (m *Main) checkSlack(ctx context.Context, slack *slackClient, owners []string, recheck bool, log *slog.Logger) (string, *slackCheck, error) {
	if slack == nil {
		return "", nil, nil
	}
	mode := m.env("SLACK_TOKEN_CHECK", slackCheckRefuse)
	if mode != slackCheckRefuse && mode != slackCheckWarn {
		return "", nil, fmt.Errorf("SLACK_TOKEN_CHECK=%q: write %s (the default: a bot token Slack refuses stops the start) "+
			"or %s (start anyway; the alerts wait until the token works)", mode, slackCheckRefuse, slackCheckWarn)
	}
	check := &slackCheck{slack: slack.Slack, timeout: slackCheckTimeout, every: slackRecheckEvery, owners: owners}
	id, err := check.ask(ctx)
	switch {
	case err == nil:
		warnPersonToken(id, log)
		essential, others := reportScopes(id, owners, log)
		if len(essential) == 0 {
			return "as " + id.String(), nil, nil
		}
		if mode == slackCheckRefuse {
			return "", nil, errors.New(tokenLacks(id, essential, others, lacksRefused))
		}
		log.Error(tokenLacks(id, essential, others, lacksStartingAnyway), slog.String("missing_scopes", scopeList(essential)))
		return "as " + id.String() + " (the bot token LACKS " + scopeList(essential) + ": no alert is posted until it is added)", nil, nil
	case errors.Is(err, alerts.ErrTokenRefused) && mode == slackCheckRefuse:
		return "", nil, fmt.Errorf("SLACK_BOT_TOKEN: %w. Nothing was started. Fix the token (or SLACK_BOT_TOKEN_FILE's file); "+
			"to start anyway, the alerts waiting until the token works, set SLACK_TOKEN_CHECK=warn; "+
			"to send the alerts to the log instead of Slack, unset SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET", err)
	case errors.Is(err, alerts.ErrTokenRefused):
		log.Error("SLACK_BOT_TOKEN was refused by Slack; starting anyway (SLACK_TOKEN_CHECK=warn): no alert can be posted "+
			"until the token is fixed (and a running serve restarted); they wait in the ledger", slog.String("error", err.Error()))
		return "(the bot token was REFUSED by Slack: no alert is posted until it is fixed)", nil, nil
	}
	why := check.unchecked(err)
	if !recheck {
		log.Warn("the Slack bot token could not be checked at the start; starting anyway: the alerts are posted if Slack answers "+
			"their posts, and wait in the ledger for the next sweep if not", slog.String("error", why))
		return "(bot token not checked at the start: " + why + ")", nil, nil
	}
	every := check.every.String() // "every minute", not "every 1m0s"
	if m := check.every / time.Minute; check.every%time.Minute == 0 && m == 1 {
		every = "minute"
	} else if check.every%time.Minute == 0 && m > 1 {
		every = fmt.Sprintf("%d minutes", m)
	}
	log.Warn(fmt.Sprintf("the Slack bot token could not be checked at the start; starting anyway, and asking Slack again every %s "+
		"until it answers: the alerts are posted once it does", every), slog.String("error", why))
	return "(bot token not checked at the start: " + why + ")", check, nil
}

// reportScopes says, in one line, what the token's scopes lack for alerts to owners and what each lack
// costs, or that Slack did not name them; it returns the essential scopes the token certainly lacks
// (chat:write, with none of its older names and no umbrella scope), which the caller treats as a refused
// token, and the others it lacks. An essential scope missing where the token has a variant of it
// (chat:write.public) is only a warning: that is not certain. A token with every scope logs nothing.
// Without an essential scope it logs nothing about the others either: "starting anyway, and the alerts
// are posted" would be untrue (and read before a refusal's "Nothing was started"), so the caller names
// them in its refusal or error line (lacksEssential), to be added in the same reinstall.
func reportScopes(id alerts.SlackIdentity, owners []string, log *slog.Logger) (essential, others []alerts.SlackScope) {
	if !id.ScopesKnown {
		log.Info("the Slack bot token's scopes were not checked: Slack's answer did not name them (no X-OAuth-Scopes header; " +
			"a proxy in between may drop it); the scopes the alerts need are listed in docs/slack.md")
		return nil, nil
	}
	for _, s := range alerts.MissingScopes(id.Scopes, owners) {
		switch variants := s.Variants(id.Scopes); {
		case s.Essential && len(variants) > 0:
			// Not certain: a false refusal would keep down a ledger that works.
			log.Warn(fmt.Sprintf("the Slack bot token names %s but not %s; Slack's docs say %s needs %s besides, and without it %s. "+
				"Starting anyway, as the token may post all the same: if the alerts are refused with missing_scope, add %s under the app's "+
				"OAuth & Permissions → Bot Token Scopes and reinstall the app to the workspace",
				strings.Join(variants, ", "), s.Name, strings.Join(variants, ", "), s.Name, s.Without, s.Name),
				slog.String("missing_scopes", s.Name), slog.String("granted_scopes", strings.Join(id.Scopes, ",")))
		case s.Essential:
			essential = append(essential, s)
		default:
			others = append(others, s)
		}
	}
	if len(others) > 0 && len(essential) == 0 {
		var costs []string
		for _, s := range others {
			costs = append(costs, s.Name+": "+s.Without)
		}
		log.Warn(fmt.Sprintf("the Slack bot token lacks %s; starting anyway, and the alerts are posted, but %s. "+
			"Add the scope(s) under the app's OAuth & Permissions → Bot Token Scopes and reinstall the app to the workspace",
			scopeList(others), strings.Join(costs, "; ")),
			slog.String("missing_scopes", scopeList(others)), slog.String("granted_scopes", strings.Join(id.Scopes, ",")))
	}
	return essential, others
}

// lacksWhen is where a bot token without an essential scope (chat:write) was found. tokenLacks words the
// message of each; only what the program does about it differs.
type lacksWhen int

const (
	// lacksRefused: the check at the start, SLACK_TOKEN_CHECK=refuse: the start stops, nothing opened.
	lacksRefused lacksWhen = iota
	// lacksStartingAnyway: the check at the start, SLACK_TOKEN_CHECK=warn: the start goes on.
	lacksStartingAnyway
	// lacksAfterStart: the check asked again after a start Slack did not answer: the service runs on.
	lacksAfterStart
)

// tokenLacks is the one wording of a bot token without an essential scope, for the refusal at the start,
// the start that goes on (SLACK_TOKEN_CHECK=warn) and the check after a start Slack did not answer: what
// is missing and what that costs (lacksEssential), what happens now (when), and what to do.
func tokenLacks(id alerts.SlackIdentity, essential, others []alerts.SlackScope, when lacksWhen) string {
	fix := "Add " + scopeList(slices.Concat(essential, others)) + " under the app's OAuth & Permissions → Bot Token Scopes and " +
		"reinstall the app to the workspace (a token gets a new scope only then)"
	const waiting = "the alerts wait in the ledger and are tried at every sweep until the token has it"
	lacks := "SLACK_BOT_TOKEN: " + lacksEssential(id, essential, others)
	switch when {
	case lacksRefused:
		return lacks + ". Nothing was started. " + fix + "; to start anyway, the alerts waiting until the token has it, " +
			"set SLACK_TOKEN_CHECK=warn; to send the alerts to the log instead of Slack, unset SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET"
	case lacksStartingAnyway:
		return lacks + "; starting anyway (SLACK_TOKEN_CHECK=warn): " + waiting + ". " + fix + "; restart companion if that gave the app a new token"
	default:
		return lacks + " (checked once Slack answered, after the start): the service goes on, and " + waiting + ". " + fix +
			"; restart companion if that gave the app a new token"
	}
}

// lacksEssential words the lack of essential scopes for the refusal and its error line, and of the other
// scopes the owners' alerts need, which are best added in the same reinstall.
func lacksEssential(id alerts.SlackIdentity, essential, others []alerts.SlackScope) string {
	var costs []string
	for _, s := range essential {
		costs = append(costs, s.Without)
	}
	granted := strings.Join(id.Scopes, ",")
	if granted == "" {
		granted = "none"
	}
	also := ""
	if len(others) > 0 {
		also = fmt.Sprintf("; it also lacks %s, which the alerts' owners need too (without them a post whose answer "+
			"was lost cannot be found, and may be posted twice: docs/slack.md)", scopeList(others))
	}
	return fmt.Sprintf("the bot token of %s lacks the scope %s (Slack names its scopes: %s): %s%s", id.String(), scopeList(essential),
		granted, strings.Join(costs, "; "), also)
}

// scopeList names scopes for a log line: "im:write, im:history".
func scopeList(scopes []alerts.SlackScope) string {
	names := make([]string, len(scopes))
	for i, s := range scopes {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

// configOwners are the Slack ids the configuration sends alerts to: the defaults', the destinations',
// the routes' (owners and escalate_to) and the routing's default owner. A before-write may name others.
func configOwners(cfg items.Config, routing alerts.Routing) []string {
	owners := []string{cfg.Defaults.Owner, cfg.Defaults.EscalateTo, routing.DefaultOwner}
	for _, d := range cfg.Destinations {
		owners = append(owners, d.Owner, d.EscalateTo)
	}
	for _, r := range routing.Routes {
		owners = append(owners, r.Owner, r.EscalateTo)
	}
	return slices.DeleteFunc(owners, func(o string) bool { return o == "" })
}

// slackCheck is the check of a bot token, with the timeout of each call and the pause between two.
type slackCheck struct {
	slack          *alerts.Slack
	timeout, every time.Duration
	// owners are the configuration's (configOwners): which scopes the token needs.
	owners []string
}

// recheck asks Slack about the bot token every c.every until it answers, and logs the answer: who the
// token is, or an error line when Slack refuses it (the service goes on: the ledger is what the workflows
// need, and the alerts wait). It returns then, or when ctx ends.
func (c *slackCheck) recheck(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		id, err := c.ask(ctx)
		switch {
		case err == nil:
			log.Info("Slack answered the check of the bot token: alerts are posted as " + id.String())
			warnPersonToken(id, log)
			if essential, others := reportScopes(id, c.owners, log); len(essential) > 0 {
				log.Error(tokenLacks(id, essential, others, lacksAfterStart), slog.String("missing_scopes", scopeList(essential)))
			}
			return
		case errors.Is(err, alerts.ErrTokenRefused):
			log.Error("SLACK_BOT_TOKEN was refused by Slack (checked once Slack answered, after the start): no alert can be "+
				"posted until the token is fixed and companion restarted; they wait in the ledger", slog.String("error", err.Error()))
			return
		}
	}
}

// ask is one check of the bot token, within c.timeout.
func (c *slackCheck) ask(ctx context.Context) (alerts.SlackIdentity, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return c.slack.CheckToken(ctx)
}

// unchecked words why Slack could not be asked.
func (c *slackCheck) unchecked(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("slack auth.test: no answer within %s", c.timeout)
	}
	return err.Error()
}

// warnPersonToken warns when the token is a person's: it works, but every alert is posted in their name.
func warnPersonToken(id alerts.SlackIdentity, log *slog.Logger) {
	if id.BotID == "" {
		log.Warn("SLACK_BOT_TOKEN is not a bot token: alerts will be posted in the name of " + id.String() +
			"; use the app's Bot User OAuth Token (xoxb-…)")
	}
}

// operatorStore is what the sweeper, the alert outbox and the operator endpoints need from the store.
// Every store of the module provides it.
type operatorStore interface {
	items.Store
	alerts.SweepStore
	alerts.Outbox
	handlers.OperatorStore
}

var (
	_ operatorStore = (*sqlitestore.Store)(nil)
	_ operatorStore = (*mongostore.Store)(nil)
	_ operatorStore = (*pgstore.Store)(nil)
)

// alertServices are the sweeper, the dispatcher and (with Slack) the interactivity handler.
type alertServices struct {
	sweeper    *alerts.Sweeper
	dispatcher *alerts.Dispatcher
	actions    *alerts.Actions
	// where says where alerts go, for the start line.
	where string
}

// newAlertServices builds the alert services over the ledger's store, posting with slack (nil: to the log).
// slackIdentity (checkSlack's words) follows the Slack URL on the start line.
func newAlertServices(ledger *items.Ledger, routing alerts.Routing, slack *slackClient, slackIdentity, publicURL string,
	log *slog.Logger) (*alertServices, error) {
	store, ok := ledger.Store().(operatorStore)
	if !ok {
		return nil, fmt.Errorf("the store %T cannot keep the alert outbox", ledger.Store())
	}
	sw, err := alerts.NewSweeper(alerts.SweeperConfig{Ledger: ledger, Store: store, Logger: log})
	if err != nil {
		return nil, err
	}
	out := &alertServices{sweeper: sw, where: "log only (no SLACK_BOT_TOKEN / SLACK_SIGNING_SECRET; the operator API lists the items)"}
	var notifier alerts.Notifier
	if slack != nil {
		notifier = slack.Slack
		out.where = "Slack " + slack.apiURL
		if slackIdentity != "" {
			out.where += " " + slackIdentity
		}
		if !namesAnOwner(ledger.Config(), routing) {
			out.where += " (but the config names no owner: only the items whose before-write gives an \"owner\" reach Slack, " +
				"the others' alerts go to the log; set defaults.owner or alerts.default_owner to a Slack user id U… or channel id C…)"
		}
	}
	// A message being posted at a stop gets half the stop's time to land, so that recording it and giving
	// back the claims left end before serve closes the store.
	if out.dispatcher, err = alerts.NewDispatcher(alerts.DispatcherConfig{Ledger: ledger, Outbox: store, Routing: routing,
		Notifier: notifier, Logger: log, PublicURL: publicURL, StopGrace: ShutdownTimeout / 2}); err != nil {
		return nil, err
	}
	if slack != nil {
		if out.actions, err = alerts.NewActions(alerts.ActionsConfig{Slack: slack.Slack, Dispatcher: out.dispatcher, Logger: log}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// namesAnOwner reports whether the configuration gives any item an owner to alert: the defaults, a
// destination, a route or the routing's default owner. Without one, Slack is set up but silent.
func namesAnOwner(cfg items.Config, routing alerts.Routing) bool {
	if cfg.Defaults.Owner != "" || routing.DefaultOwner != "" {
		return true
	}
	for _, d := range cfg.Destinations {
		if d.Owner != "" {
			return true
		}
	}
	for _, r := range routing.Routes {
		if r.Owner != "" {
			return true
		}
	}
	return false
}

// handlersConfig adds the operator surface to the HTTP service's configuration.
func (a *alertServices) handlersConfig(hc *handlers.Config) {
	hc.Operators = hc.Ledger.Store().(operatorStore)
	hc.Resolver = a.dispatcher
	hc.Console.Target = func(it *items.Item) console.Target {
		t := a.dispatcher.Target(it)
		return console.Target{Owner: t.Owner, CheckHint: t.CheckHint}
	}
	hc.Console.CauseText = alerts.CauseText
	if a.actions != nil {
		hc.SlackActions = a.actions
	}
}

// runSweeps runs the sweeper and the dispatcher on the schedule until Close. Close cancels the loop's
// context and waits for it (alerts.Run): no new run starts, a message being posted lands and is recorded,
// the groups claimed and not posted are given back; only then does the store close (it stops after).
func (m *Main) runSweeps(a *alertServices, spec string) {
	m.keepRunning(context.Background(), "sweeper", func(ctx context.Context) error {
		return alerts.Run(ctx, spec, a.sweeper, a.dispatcher)
	})
}

const sweepSynopsis = `Sweeps the ledger once and sends the alerts that are due, then exits: records expired leases as
unknown, marks the items that need a person, makes the probes that are due (destinations with a
"lookup:"), and delivers the alert outbox (Slack with SLACK_BOT_TOKEN
and SLACK_SIGNING_SECRET, else the log). "companion serve" does the same on its --sweep-every schedule;
this command is for cron jobs and for trying a configuration. It opens the same ledger as serve: the
SQLite file in --data-dir, MongoDB with MONGODB_URI, or PostgreSQL with POSTGRES_URL. It refuses to start a new, empty ledger where
none is (run from the wrong directory, it would sweep nothing and say all is well) unless --create is
given. With Slack it checks the bot token and its scopes first, as serve does: a token Slack refuses, or
one without chat:write, stops it unless SLACK_TOKEN_CHECK=warn; a missing history scope, or a Slack
that does not answer, only warns.`

func (m *Main) sweep(ctx context.Context, args []string) error {
	fs := m.newFlags("sweep", sweepSynopsis)
	// A sweep's ledger keeps serve's default item cache (--item-cache is serve's: a sweep is short).
	o := serveOptions{itemCacheItems: sqlitestore.DefaultItemCache}
	var once, asJSON, create bool
	fs.BoolVar(&once, "once", false, "sweep once and exit (required)")
	fs.BoolVar(&create, "create", false, "start a new, empty ledger when --data-dir holds none")
	fs.BoolVar(&asJSON, "json", false, "print what the sweep did as JSON")
	fs.StringVar(&o.dataDir, "data-dir", m.env("COMPANION_DATA_DIR", "./companion-data"), "`directory` of the embedded ledger (env COMPANION_DATA_DIR)")
	fs.StringVar(&o.configPath, "config", m.env("COMPANION_CONFIG", ""), "YAML configuration `file` (env COMPANION_CONFIG)")
	if done, err := m.parse(fs, args); done {
		return err
	}
	if !once {
		return usageErrorf("sweep: give --once (serve sweeps on its own schedule, --sweep-every)")
	}
	settings, err := m.settings(o)
	if err != nil {
		return err
	}
	cfg, routing, publicURL, lookups := settings.cfg, settings.routing, settings.publicURL, settings.lookups
	slack, err := m.slack()
	if err != nil {
		return err
	}
	if err := m.ledgerExists(o); err != nil && !create {
		return err
	}
	log := m.logger()
	// The same check as serve's, before the ledger is opened: a cron job's sweep with a refused token
	// would otherwise exit 0 with every alert failing.
	slackIdentity, _, err := m.checkSlack(ctx, slack, configOwners(cfg, routing), false, log)
	if err != nil {
		return err
	}
	store, where, err := m.openStore(ctx, o)
	if errors.Is(err, sqlitestore.ErrInUse) {
		return fmt.Errorf("%w. If that is companion serve: it sweeps this ledger itself (--sweep-every, every 30 s by default), "+
			"so sweep --once is not needed beside it (it is for a SQLite ledger no serve has open, or a MongoDB or PostgreSQL one)", err)
	}
	if err != nil {
		return err
	}
	defer store.Close()
	ledger, err := items.NewLedger(ctx, store, cfg)
	if err != nil {
		return fmt.Errorf("cannot start the ledger in %s: %w", where, err)
	}
	a, err := newAlertServices(ledger, routing, slack, slackIdentity, publicURL, log)
	if err != nil {
		return err
	}
	swept, err := a.sweeper.RunOnce(ctx)
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	prober, err := newProber(ledger, lookups, log)
	if err != nil {
		return err
	}
	var probed probes.Counts
	if prober != nil {
		if probed, err = prober.RunOnce(ctx); err != nil {
			return fmt.Errorf("probes: %w", err)
		}
	}
	sent, err := a.dispatcher.RunOnce(ctx)
	a.dispatcher.Wait()
	if err != nil {
		return fmt.Errorf("alerts: %w", err)
	}
	if asJSON {
		return json.NewEncoder(m.Stdout).Encode(map[string]any{"sweep": swept, "probes": probed, "alerts": sent})
	}
	fmt.Fprintf(m.Stdout, "swept %s: %d lease(s) expired, %d item(s) newly need a person", where, swept.Expired, sum(swept.NeedsPerson))
	for _, cause := range slices.Sorted(maps.Keys(swept.NeedsPerson)) {
		fmt.Fprintf(m.Stdout, " (%s %d)", cause, swept.NeedsPerson[cause])
	}
	if prober != nil {
		fmt.Fprintf(m.Stdout, "\nprobes of %s: %d read(s), %d item(s) settled", probesDescription(prober), sum(probed.Reads), sum(probed.Settled))
	}
	fmt.Fprintf(m.Stdout, "\nalerts to %s: %d queued, %d message(s) with %d alert(s), %d escalated, %d closed unsent, "+
		"%d message(s) updated for items settled elsewhere, %d failed delivery\n",
		a.where, sent.Queued, sent.Messages, sent.Alerted, sent.Escalated, sent.Closed, sent.Updated, sent.Failed)
	return nil
}

// ledgerExists returns why a one-shot command should not open the ledger of o: the SQLite file is not in
// the data dir, so opening would create a new, empty ledger. A MongoDB or PostgreSQL ledger is named by its
// URL and is not checked.
func (m *Main) ledgerExists(o serveOptions) error {
	if shared, err := m.sharedStore(); shared != "" || err != nil {
		return err
	}
	dir, err := filepath.Abs(o.dataDir)
	if err != nil {
		return fmt.Errorf("data dir %s: %w", o.dataDir, err)
	}
	file := filepath.Join(dir, sqlitestore.FileName)
	if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no ledger in %s (%s does not exist): give the data dir serve uses (--data-dir or COMPANION_DATA_DIR), "+
			"or --create to start a new, empty ledger there", dir, sqlitestore.FileName)
	} else if err != nil {
		return fmt.Errorf("cannot read the ledger in data dir %s: %w", dir, err)
	}
	return nil
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
