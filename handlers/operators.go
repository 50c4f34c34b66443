package handlers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/replaysafe/companion/alerts"
	"github.com/replaysafe/companion/items"
)

// OperatorStore is what the operator endpoints read beside the ledger. Every method returns
// ErrUnavailable when the store cannot be read.
type OperatorStore interface {
	// ListItems returns one page of a tenant's items, newest change first. Returns an invalid_request
	// error for a cursor it did not issue.
	ListItems(ctx context.Context, p items.ListParams) (items.ItemPage, error)
	// NeedsPersonCount counts a tenant's items needing a person (the console's queue).
	NeedsPersonCount(ctx context.Context, tenant string) (int, error)
	// Stats measures a tenant's items at now; the empty tenant measures every tenant together.
	Stats(ctx context.Context, tenant string, now time.Time) (*items.Stats, error)
	// ItemAlerts returns the alert outbox records about an item, oldest first (the console's item page).
	ItemAlerts(ctx context.Context, tenant, key string) ([]items.Alert, error)
	// AddCounter adds to a named counter of a tenant and destination (fingerprint conflicts).
	AddCounter(ctx context.Context, tenant, destination, name string, delta int) error
}

// Resolver settles an item on a person's evidence. The alert dispatcher is one (it also closes the
// item's alerts and updates their messages); the ledger is the default.
type Resolver interface {
	Resolve(ctx context.Context, p items.ResolveParams) (*items.Item, items.Reason, error)
}

// SlackActions answers Slack's interactivity requests (alerts.Actions).
type SlackActions interface {
	Handle(ctx context.Context, header http.Header, body []byte) (alerts.Reply, error)
}

// listQuery names the query parameters of GET /v1/items; any other is refused, so that a misspelt
// filter ("needs-person") cannot silently list everything.
var listQuery = map[string]bool{"state": true, "needs_person": true, "destination": true, "workflow": true,
	"batch_id": true, "execution_id": true, "reference": true, "owner": true, "older_than": true, "limit": true, "cursor": true}

// listParams reads the filters of GET /v1/items.
func (s *server) listParams(c *gin.Context, tenant string) (items.ListParams, error) {
	q := c.Request.URL.Query()
	p := items.ListParams{Tenant: tenant, Limit: items.DefaultListLimit}
	ps := queryProblems(q, listQuery, "is not a filter of this list; use state, needs_person, destination, workflow, batch_id, execution_id, reference, owner, older_than, limit, cursor")
	if v := q.Get("state"); v != "" {
		for st := range strings.SplitSeq(v, ",") {
			if state := items.State(strings.TrimSpace(st)); state.Valid() {
				p.States = append(p.States, state)
			} else {
				ps.add("state", "must be one or more of prepared, in_flight, succeeded, failed, unknown, separated by commas")
			}
		}
	}
	if v := q.Get("needs_person"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			ps.add("needs_person", "must be true or false")
		}
		p.NeedsPerson = &b
	}
	if v := q.Get("older_than"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > 100*365*86400 {
			ps.add("older_than", "must be whole seconds, 0 or more")
		}
		at := s.ledger.Now().Add(-time.Duration(n) * time.Second)
		p.ChangedBefore = &at
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > items.MaxListLimit {
			ps.add("limit", fmt.Sprintf("must be 1-%d", items.MaxListLimit))
		}
		p.Limit = n
	}
	p.Destination, p.Workflow, p.BatchID, p.Owner, p.Cursor = q.Get("destination"), q.Get("workflow"), q.Get("batch_id"), q.Get("owner"), q.Get("cursor")
	p.ExecutionID, p.Reference = q.Get("execution_id"), q.Get("reference")
	return p, ps.err()
}

// listView is the answer of GET /v1/items.
type listView struct {
	Items      []ItemView `json:"items"`
	NextCursor string     `json:"next_cursor"`
	// Unreadable names the items of the page the store could not read; see items.ItemPage.
	Unreadable []string `json:"unreadable,omitempty"`
}

// byExecutionOnly are the query parameters a workflow token may give GET /v1/items: the list of one
// execution's items, which an error workflow reads (API.md, additions of 2026-12-07).
var byExecutionOnly = map[string]bool{"execution_id": true, "limit": true, "cursor": true}

// workflowListRefusal is the 403 of a workflow token's list with a filter other than execution_id, or
// without it; nil for an operator, and for the list a workflow token may read.
func workflowListRefusal(p Principal, q url.Values) error {
	if p.Role == RoleOperator {
		return nil
	}
	allowed := q.Get("execution_id") != ""
	for name := range q {
		allowed = allowed && byExecutionOnly[name]
	}
	if allowed {
		return nil
	}
	return &items.Error{Code: CodeForbidden, Message: "a workflow token lists only by execution, GET /v1/items?execution_id=ID " +
		"(with limit and cursor); every other filter needs an operator token; " + p.Name + " is a " + string(p.Role) + " token"}
}

func (s *server) listItems(c *gin.Context) {
	if err := workflowListRefusal(principal(c), c.Request.URL.Query()); err != nil {
		s.writeError(c, err)
		return
	}
	if s.operators == nil {
		s.writeError(c, errNoOperatorStore)
		return
	}
	p, err := s.listParams(c, principal(c).Tenant)
	if err != nil {
		s.writeError(c, err)
		return
	}
	page, err := s.operators.ListItems(c.Request.Context(), p)
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := listView{Items: make([]ItemView, len(page.Items)), NextCursor: page.NextCursor, Unreadable: page.Unreadable}
	if len(page.Unreadable) > 0 {
		s.log.ErrorContext(c.Request.Context(), "listed items that cannot be read were left out", "tenant", p.Tenant, "keys", page.Unreadable)
	}
	for i, it := range page.Items {
		out.Items[i] = ItemView{Item: it, IdempotencyKey: s.ledger.IdempotencyKey(it.Tenant, it.Key)}
	}
	c.Render(http.StatusOK, jsonLine{out})
}

// errNoOperatorStore answers the operator routes of a service built without an operator store (a
// wiring mistake the tests of other packages may make on purpose).
var errNoOperatorStore = &items.Error{Code: items.CodeNotFound, Message: "this service has no operator store"}

func (s *server) stats(c *gin.Context) {
	if s.operators == nil {
		s.writeError(c, errNoOperatorStore)
		return
	}
	st, err := s.operators.Stats(c.Request.Context(), principal(c).Tenant, s.ledger.Now())
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.Render(http.StatusOK, jsonLine{st})
}

// metrics serves the Prometheus text format: the process's measures and the ledger's, with a tenant label
// on each tenant's series: the caller's tenant alone for an operator token, every tenant of the
// service's tokens when the endpoint is open (in open mode, tenant default).
func (s *server) metrics(c *gin.Context) {
	if s.operators == nil || s.metricsOf == nil {
		s.writeError(c, errNoOperatorStore)
		return
	}
	tenants, only := s.auth.tenants(), ""
	if p, ok := principalOf(c); ok && !s.auth.open {
		tenants, only = []string{p.Tenant}, p.Tenant
	}
	// The process's measures and companion_store_ready 0 are served all the same when the ledger cannot be
	// read: a store that cannot be read is what an alert rule must see, rather than a scrape that fails like
	// a process that is down.
	ctx := c.Request.Context()
	stats := make([]*items.Stats, 0, len(tenants))
	var err error
	for _, tenant := range tenants {
		var st *items.Stats
		if st, err = s.operators.Stats(ctx, tenant, s.ledger.Now()); err != nil {
			s.log.WarnContext(ctx, "metrics: the ledger's measures could not be read; served without them (companion_store_ready 0)", "error", err)
			stats = nil
			break
		}
		stats = append(stats, st)
	}
	sc := scrapeCollector{ready: err == nil && s.ready(ctx) == nil, stats: stats, cfg: s.ledger.Config()}
	promhttp.HandlerFor(s.metricsOf.gatherer(sc, only), promhttp.HandlerOpts{}).ServeHTTP(c.Writer, c.Request)
}

// observeDecision counts a before-write decision, and keeps a fingerprint conflict in the ledger's
// counters (a conflict changes no item, so the item cannot remember it).
func (s *server) observeDecision(ctx context.Context, p items.BeforeWriteParams, a items.Answer) {
	s.observeDecisions(ctx, p.Tenant, []items.BeforeWriteParams{p}, 1, func(int) *items.Answer { return &a })
}

// observeDecisions counts the n decisions of a batch (answer(i) answers ps[i]), keeping its fingerprint
// conflicts with one counter update per destination. A counter that cannot be kept is logged: the answer
// to the workflow matters more.
func (s *server) observeDecisions(ctx context.Context, tenant string, ps []items.BeforeWriteParams, n int, answer func(i int) *items.Answer) {
	// A batch has few distinct decisions and reasons: each is counted once, with its number.
	type decisionCount struct {
		decision items.Decision
		reason   items.Reason
		n        int
	}
	counts := make([]decisionCount, 0, 8)
	var conflicts map[string]int
	for i := range n {
		a := answer(i)
		found := false
		for j := range counts {
			if counts[j].decision == a.Decision && counts[j].reason == a.Reason {
				counts[j].n++
				found = true
				break
			}
		}
		if !found {
			counts = append(counts, decisionCount{a.Decision, a.Reason, 1})
		}
		if a.Decision == items.Conflict && i < len(ps) {
			dest := ps[i].Destination
			if dest == "" {
				dest = "default"
			}
			if conflicts == nil {
				conflicts = map[string]int{}
			}
			conflicts[dest]++
		}
	}
	for _, c := range counts {
		s.metricsOf.observeDecisions(tenant, c.decision, c.reason, c.n)
	}
	if s.operators == nil {
		return
	}
	series, _ := s.operators.(items.SeriesStore)
	for dest, n := range conflicts {
		var err error
		if series != nil { // the counter and the series' hour and day, in one write
			err = series.CountConflicts(ctx, tenant, dest, s.ledger.Now(), n)
		} else {
			err = s.operators.AddCounter(ctx, tenant, dest, items.CounterFingerprintConflicts, n)
		}
		if err != nil {
			s.log.WarnContext(ctx, "fingerprint conflicts not counted", "tenant", tenant, "destination", dest, "conflicts", n, "error", err)
		}
	}
}

func (s *server) openAPI(c *gin.Context) {
	c.Data(http.StatusOK, "application/json", openAPIDocument)
}

// slackActions answers POST /v1/slack/actions. Slack's signature authenticates it, not a token: a bad
// signature or an old timestamp is 401 and nothing is read further.
func (s *server) slackActions(c *gin.Context) {
	if s.slack == nil {
		s.writeError(c, &items.Error{Code: items.CodeNotFound, Message: "Slack is not configured (SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET)"})
		return
	}
	if mt, _, err := mime.ParseMediaType(c.GetHeader("Content-Type")); err != nil || mt != "application/x-www-form-urlencoded" {
		s.writeError(c, &items.Error{Code: CodeUnsupportedMediaType, Message: "Slack sends application/x-www-form-urlencoded"})
		return
	}
	if c.Request.ContentLength > MaxBodyBytes {
		s.writeError(c, &items.Error{Code: CodePayloadTooLarge, Message: fmt.Sprintf("the body is larger than %d bytes", MaxBodyBytes)})
		return
	}
	body, err := io.ReadAll(io.LimitReader(c.Request.Body, MaxBodyBytes+1))
	if err != nil || len(body) > MaxBodyBytes {
		s.writeError(c, &items.Error{Code: CodePayloadTooLarge, Message: fmt.Sprintf("the body is larger than %d bytes", MaxBodyBytes)})
		return
	}
	reply, err := s.slack.Handle(c.Request.Context(), c.Request.Header, body)
	switch {
	case errors.Is(err, alerts.ErrStaleRequest):
		s.writeError(c, &items.Error{Code: CodeUnauthorized, Message: "the request's timestamp is missing or older than five minutes", Err: err})
		return
	case errors.Is(err, alerts.ErrUnverified):
		s.writeError(c, &items.Error{Code: CodeUnauthorized, Message: "the request is not signed with the Slack signing secret", Err: err})
		return
	case err != nil:
		s.writeError(c, err)
		return
	}
	// An empty body acknowledges (and closes the modal); a JSON body carries the modal's errors.
	if reply.Body == nil {
		c.Data(http.StatusOK, "text/plain; charset=utf-8", nil)
		return
	}
	c.Data(http.StatusOK, "application/json", reply.Body)
}
