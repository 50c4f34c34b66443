package console

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/replaysafe/companion/batches"
	"github.com/replaysafe/companion/items"
)

// QueuePageSize is how many items one page of the queue shows; QueueLimit how deep the queue's pages go
// by default (Config.QueueLimit): the oldest QueueLimit items needing a person, 100 pages.
//
// The queue reads the items needing a person in the order a person should take them, the one waiting
// longest first (items.ListByNeedsPersonSince: needs_person_since ascending, key breaking ties; an item
// without a recorded since first), from an index of the store that holds that order. A page reads only as
// far as its own end: page 1, the one everybody sees and that reloads itself, reads 51 items whatever
// the length of the queue, and page n reads n×50 (the store has a cursor, not an offset). Its count and
// its number of pages come from the store's kept counts (NeedsPersonCount). Past QueueLimit there are no
// more pages: what they would leave out is always the newest, never the oldest. BenchmarkQueue measures
// the first and the last page of a queue longer than QueueLimit.
const (
	QueuePageSize = 50
	QueueLimit    = 5000
)

// page is what the layout renders around a page's body.
type page struct {
	Title   string
	Nav     string
	Who     *Principal
	CSRF    string
	Refresh bool
	Body    any
	Open    bool // open mode: no Sign out, as there is no sign-in to go back to
}

// itemURL, batchURL and findURL are the console's pages of an item, a batch and a search for a term.
func itemURL(key string) string { return Prefix + "item?key=" + url.QueryEscape(key) }
func batchURL(id string) string { return Prefix + "batch?id=" + url.QueryEscape(id) }
func findURL(q string) string   { return Prefix + "find?q=" + url.QueryEscape(q) }

type pageTemplate struct{ t *template.Template }

var funcs = template.FuncMap{
	"time": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return stamp(t)
	},
	"timep": func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return stamp(*t)
	},
	"age":            items.Age,
	"itemURL":        itemURL,
	"batchURL":       batchURL,
	"alertText":      alertText,
	"classText":      func(c items.ErrorClass) string { return wordOf(classWords, string(c)) },
	"resolutionText": func(o string) string { return wordOf(resolutionWords, o) },
	"stateText":      func(s items.State) string { return wordOf(stateWords, string(s)) },
	"stateName":      func(s items.State) string { return strings.ReplaceAll(string(s), "_", " ") },
	"stateClass": func(s items.State) string {
		return "state state-" + strings.ReplaceAll(string(s), "_", "-")
	},
}

// parsePages parses each page with the layout.
func parsePages() map[string]*pageTemplate {
	out := map[string]*pageTemplate{}
	for _, name := range []string{"signin", "queue", "item", "batch", "find", "overview", "error"} {
		files := []string{"templates/layout.html", "templates/" + name + ".html"}
		if name == "overview" {
			files = append(files, "templates/charts.html")
		}
		t := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, files...))
		out[name] = &pageTemplate{t: t}
	}
	return out
}

// render writes a page; a template error is logged and answered with a plain 500.
func (c *Console) render(w http.ResponseWriter, r *http.Request, name string, p page) {
	p.Refresh = p.Refresh && r.URL.Query().Get("norefresh") == ""
	var buf bytes.Buffer
	if err := c.pages[name].t.Execute(&buf, struct {
		page
		RefreshSeconds int
		Prefix         string
	}{p, int(c.cfg.Refresh / time.Second), Prefix}); err != nil {
		c.cfg.Logger.ErrorContext(r.Context(), "console page failed", "page", name, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	// html/template escapes what HTML would read as markup, not control characters or bidi overrides: a
	// reference stored before the API refused them is shown with them escaped (\u001b), as the CLI does.
	_, _ = io.WriteString(w, items.EscapeControls(buf.String()))
}

func (c *Console) frame(s *session, title, nav string, body any) page {
	p := page{Title: title, Nav: nav, Body: body, Open: c.cfg.Open}
	if s != nil {
		p.Who, p.CSRF = &s.who, s.csrf
	}
	return p
}

// fail shows an error page with the status of the public error.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *session, e PublicError, links ...link) {
	if e.Status >= 500 {
		c.cfg.Logger.ErrorContext(r.Context(), "console request failed", "path", r.URL.Path, "code", e.Code)
	}
	c.errorPage(w, r, s, e, links)
}

func (c *Console) failErr(w http.ResponseWriter, r *http.Request, s *session, err error, links ...link) {
	e := c.cfg.Errors(err)
	if e.Status >= 500 {
		c.cfg.Logger.ErrorContext(r.Context(), "console request failed", "path", r.URL.Path, "code", e.Code, "cause", err.Error())
	}
	c.errorPage(w, r, s, e, links)
}

// errorTitles head an error page: what happened, in words (the status and code stand beside it).
var errorTitles = map[int]string{
	http.StatusBadRequest:            "This request is not valid",
	http.StatusUnauthorized:          "Sign in first",
	http.StatusForbidden:             "Not allowed",
	http.StatusNotFound:              "Not found",
	http.StatusMethodNotAllowed:      "Not allowed here",
	http.StatusConflict:              "The item's state does not allow this",
	http.StatusRequestEntityTooLarge: "Too large",
	http.StatusInternalServerError:   "Something went wrong inside the service",
	http.StatusServiceUnavailable:    "The ledger is unavailable",
}

// errorView is an error page: the public error, a title in words, and links to where to go on.
type errorView struct {
	PublicError
	Title string
	Links []link
}

type link struct{ Text, URL string }

// errorPage renders e. A page the store could not read (503 on a GET) says that nothing was changed and
// reloads itself, so it recovers on its own once the store answers again.
func (c *Console) errorPage(w http.ResponseWriter, r *http.Request, s *session, e PublicError, links []link) {
	v := errorView{PublicError: e, Title: errorTitles[e.Status], Links: links}
	if v.Title == "" {
		v.Title = http.StatusText(e.Status)
	}
	retry := e.Status == http.StatusServiceUnavailable && r.Method != http.MethodPost
	if retry {
		v.Message = fmt.Sprintf("The ledger cannot be read right now (its store is unavailable or busy). Nothing was changed; "+
			"this page tries again every %d s.", int(c.cfg.Refresh/time.Second))
		w.Header().Set("Retry-After", strconv.Itoa(int(c.cfg.Refresh/time.Second)))
	}
	w.WriteHeader(e.Status)
	p := c.frame(s, v.Title, "", v)
	p.Refresh = retry
	c.render(w, r, "error", p)
}

// row is one item in a list.
type row struct {
	Key, Reference, Destination, Cause, Why, CheckHint, LastError string
	State                                                         items.State
	Attempt                                                       int
	Age                                                           string
	// NeedsPerson marks an item waiting for its owner; Alert says its alert status in words.
	NeedsPerson bool
	Alert       string
}

type group struct {
	Owner, BatchID string
	Rows           []row
}

type queueView struct {
	// Total counts the items needing a person (the store's kept count, or what the pages read if more).
	Total int
	// Truncated: there are more than Limit, and the pages show only the oldest Limit.
	Truncated bool
	Limit     int
	// Unreadable names items needing a person, up to the end of this page, that the store holds but
	// cannot read (a corrupt document).
	Unreadable []string
	Groups     []group
	Page, Last int
	PrevURL    string
	NextURL    string
}

func (c *Console) row(it *items.Item, now time.Time) row {
	since := it.UpdatedAt
	if it.NeedsPersonSince != nil {
		since = *it.NeedsPersonSince
	}
	rw := row{Key: it.Key, Reference: it.Reference, Destination: it.Destination, Cause: it.NeedsPersonCause,
		State: it.State, Attempt: it.Attempt, Age: items.Age(max(now.Sub(since), 0)), LastError: lastError(it)}
	if rw.Cause != "" {
		rw.Why = c.cfg.CauseText(rw.Cause)
	}
	rw.CheckHint = c.cfg.Target(it).CheckHint
	rw.NeedsPerson = it.NeedsPerson
	if it.AlertStatus != "" {
		rw.Alert = alertText(it.AlertStatus, it.AlertedTo())
	}
	return rw
}

// lastError names the item's last error briefly: its class in words ("connection refused", "timeout"),
// with the HTTP status.
func lastError(it *items.Item) string {
	class := strings.ReplaceAll(string(it.FailureClass), "_", " ")
	switch {
	case it.HTTPStatus != 0 && it.FailureClass == items.ClassHTTP:
		return fmt.Sprintf("HTTP %d", it.HTTPStatus)
	case it.HTTPStatus != 0 && it.FailureClass != "":
		return fmt.Sprintf("%s (HTTP %d)", class, it.HTTPStatus)
	case it.HTTPStatus != 0:
		return fmt.Sprintf("HTTP %d", it.HTTPStatus)
	}
	return class
}

// queue shows the items that need a person, oldest first, grouped by owner and batch: one page, read
// from the store in that order as far as the page's end (see QueuePageSize).
func (c *Console) queue(w http.ResponseWriter, r *http.Request, s *session) {
	now := c.cfg.Ledger.Now()
	total, err := c.cfg.Store.NeedsPersonCount(r.Context(), s.who.Tenant)
	if err != nil {
		c.failErr(w, r, s, err)
		return
	}
	limit := c.cfg.QueueLimit
	v := queueView{Total: total, Limit: limit, Page: 1}
	pages := func(n int) int { return max((min(n, limit)+QueuePageSize-1)/QueuePageSize, 1) }
	v.Last = pages(v.Total)
	if n, err := strconv.Atoi(r.URL.Query().Get("page")); err == nil && n >= 1 {
		v.Page = min(n, v.Last)
	}
	// Read through the end of the page, and one item more: whether there is another page.
	end := min(v.Page*QueuePageSize, limit)
	needs := true
	p := items.ListParams{Tenant: s.who.Tenant, NeedsPerson: &needs, Order: items.ListByNeedsPersonSince}
	var read []*items.Item
	for len(read) <= end {
		p.Limit = min(end+1-len(read), items.MaxListLimit)
		pg, err := c.cfg.Store.ListItems(r.Context(), p)
		if err != nil {
			c.failErr(w, r, s, err)
			return
		}
		read = append(read, pg.Items...)
		v.Unreadable = append(v.Unreadable, pg.Unreadable...)
		if pg.NextCursor == "" {
			break
		}
		p.Cursor = pg.NextCursor
	}
	if len(v.Unreadable) > 0 {
		c.cfg.Logger.ErrorContext(r.Context(), "queue items that cannot be read were left out", "tenant", s.who.Tenant, "keys", v.Unreadable)
	}
	// The count and the list are read one after the other, and items come and go in between: the pages
	// follow what the list holds.
	switch more := len(read) > end; {
	case !more: // the whole queue was read: its count is exact
		v.Total = len(read) + len(v.Unreadable)
		v.Page = min(v.Page, pages(len(read)))
		v.Last = v.Page
	case end < limit:
		v.Total = max(v.Total, len(read)+len(v.Unreadable))
		v.Last = max(v.Last, v.Page+1)
	default:
		v.Total = max(v.Total, len(read)+len(v.Unreadable))
	}
	v.Truncated = v.Total > limit
	if v.Page > 1 {
		v.PrevURL = Prefix + "?page=" + strconv.Itoa(v.Page-1)
	}
	if v.Page < v.Last {
		v.NextURL = Prefix + "?page=" + strconv.Itoa(v.Page+1)
	}
	// Groups keep the order of their oldest item on the page.
	index := map[[2]string]int{}
	for _, it := range read[min((v.Page-1)*QueuePageSize, len(read)):min(v.Page*QueuePageSize, end, len(read))] {
		k := [2]string{c.cfg.Target(it).Owner, it.BatchID}
		i, ok := index[k]
		if !ok {
			i = len(v.Groups)
			index[k] = i
			v.Groups = append(v.Groups, group{Owner: k[0], BatchID: k[1]})
		}
		v.Groups[i].Rows = append(v.Groups[i].Rows, c.row(it, now))
	}
	p2 := c.frame(s, "Needs a person", "queue", v)
	p2.Refresh = true
	c.render(w, r, "queue", p2)
}

// event is one line of an item's timeline.
type event struct {
	At, Kind, Title string
	Attempt         int
	Details         []detail
	Note            string
	Class           string
}

// detail is one value of an event: in words, and the ledger's word when it differs.
type detail struct{ Name, Value, Word string }

type itemView struct {
	Item           *items.Item
	IdempotencyKey string
	Owner          string
	CheckHint      string
	Why            string
	// Situation says what the state means and what to do next; CauseText explains Item.Cause.
	Situation string
	CauseText string
	Events    []event
	// Dropped says how many repeated reports the history no longer holds (Item.HistoryDropped); "" when none.
	Dropped  string
	Attempts []attemptView
	// Alerts are the item's alert outbox records in words, newest first; Posting is set while a post of
	// one is under way (its landing not recorded yet).
	Alerts  []alertView
	Posting *time.Time
	// Resolvable: resolve accepts an outcome; Settle: succeeded and not_committed; Acknowledge: acknowledged.
	Resolvable  bool
	Settle      bool
	Acknowledge bool
	Form        resolveForm
	Refused     *PublicError
	Done        string
	Now         time.Time
}

type attemptView struct {
	items.Attempt
	Lease string
}

type resolveForm struct {
	Outcome, Evidence, ExternalID string
}

func (c *Console) item(w http.ResponseWriter, r *http.Request, s *session) {
	key := r.URL.Query().Get("key")
	if key == "" {
		// An address without its key (typed, or cut short): say which page it is, as the batch page does.
		c.fail(w, r, s, PublicError{Status: http.StatusBadRequest, Code: string(items.CodeInvalid),
			Message: "Which item? This page shows one item, named by its key (item?key=…); Find looks one up."}, link{"Find", Prefix + "find"})
		return
	}
	v, err := c.itemView(r, s, key)
	if errors.Is(err, items.ErrNotFound) {
		c.fail(w, r, s, PublicError{Status: http.StatusNotFound, Code: string(items.CodeNotFound),
			Message: "No item has the key " + key + " in tenant " + s.who.Tenant + ". An item is known by the key its workflow gave; Find looks a term up as a key, a batch id, a business reference and an execution id."},
			link{"Find " + key, findURL(key)})
		return
	}
	if err != nil {
		c.failErr(w, r, s, err)
		return
	}
	switch r.URL.Query().Get("done") {
	case "recorded":
		v.Done = "Resolution recorded."
	case "unchanged":
		v.Done = "This resolution was already recorded; nothing changed."
	}
	p := c.frame(s, "Item "+key, "", v)
	p.Refresh = true
	c.render(w, r, "item", p)
}

func (c *Console) itemView(r *http.Request, s *session, key string) (*itemView, error) {
	if !items.ValidKey(key) {
		return nil, items.Invalid("key", items.KeyRule)
	}
	it, err := c.cfg.Ledger.Get(r.Context(), s.who.Tenant, key)
	if err != nil {
		return nil, err
	}
	t := c.cfg.Target(it)
	v := &itemView{Item: it, IdempotencyKey: c.cfg.Ledger.IdempotencyKey(it.Tenant, it.Key), Owner: t.Owner,
		CheckHint: t.CheckHint, Now: c.cfg.Ledger.Now()}
	if it.NeedsPersonCause != "" {
		v.Why = c.cfg.CauseText(it.NeedsPersonCause)
	}
	// The form offers exactly the outcomes resolve accepts (API.md): succeeded and not_committed for an
	// unknown item (Get recorded an expired lease) or a failed one with no attempts left, acknowledged for
	// what Acknowledgeable says. An item that needs a person but takes none of them says so instead.
	v.Settle = c.cfg.Ledger.Settleable(it)
	v.Acknowledge = it.Acknowledgeable()
	v.Resolvable = v.Settle || v.Acknowledge
	v.Form.Outcome = items.ResolveSucceeded
	if v.Acknowledge && !v.Settle {
		v.Form.Outcome = items.ResolveAcknowledged
	}
	v.Situation = c.situation(it, v)
	if it.Cause != "" {
		v.CauseText = c.causeText(it.Cause)
	}
	for _, a := range it.Attempts {
		av := attemptView{Attempt: a}
		if a.Number == it.Attempt && it.LeaseExpiresAt != nil && it.State == items.StateInFlight {
			av.Lease = "until " + it.LeaseExpiresAt.UTC().Format("15:04:05Z")
		}
		v.Attempts = append(v.Attempts, av)
	}
	for i := len(it.History) - 1; i >= 0; i-- {
		v.Events = append(v.Events, c.timelineEvent(it.History[i]))
	}
	if it.HistoryDropped > 0 {
		v.Dropped = fmt.Sprintf("%d repeated reports are not shown: of the reports after the write that changed nothing "+
			"(the same attempt and reason again), the ledger keeps the first %d and the latest %d (of duplicate effects, %d and %d), "+
			"and counts the others.",
			it.HistoryDropped, items.KeptFirstRepeats, items.KeptLatestRepeats, items.KeptFirstDuplicates, items.KeptLatestDuplicates)
	}
	as, err := c.cfg.Store.ItemAlerts(r.Context(), s.who.Tenant, key)
	if err != nil {
		return nil, err
	}
	for _, a := range as {
		if a.PostAttemptAt != nil && a.Status != items.AlertClosed {
			v.Posting = a.PostAttemptAt
		}
	}
	v.Alerts = c.alertViews(as, v.Now)
	return v, nil
}

// timelineEvent describes one history event, each value in words with the ledger's word beside it.
func (c *Console) timelineEvent(e items.Event) event {
	ev := event{At: stamp(e.At), Kind: e.Kind, Attempt: e.Attempt, Note: e.Note, Class: "ev-" + strings.ReplaceAll(e.Kind, "_", "-")}
	titles := map[string]string{
		items.EventClaimed: "Claimed", items.EventPrepared: "Prepared", items.EventAfterWrite: "Report after the write",
		items.EventLeaseExpired: "Lease expired (sweep)", items.EventReconcile: "Lookup", items.EventResolve: "Resolved by a person",
		items.EventNeedsPerson: "Needs a person", items.EventEscalated: "Escalated", items.EventAlerted: "Alert sent",
		items.EventProbe: "Probe (the service's own lookup)",
	}
	ev.Title = titles[e.Kind]
	if ev.Title == "" {
		ev.Title = e.Kind
	}
	if e.Kind == items.EventAlerted || e.Kind == items.EventEscalated {
		if _, logged := toTheLog(strings.TrimPrefix(e.Note, "to ")); logged {
			ev.Title = "Alert written to the service's log (nobody was notified)"
			if e.Kind == items.EventEscalated {
				ev.Title = "Escalation written to the service's log (nobody was notified)"
			}
		}
	}
	add := func(name, value string) {
		if value != "" {
			ev.Details = append(ev.Details, detail{Name: name, Value: value})
		}
	}
	// addWord adds a value in words, with the ledger's word beside it when they differ.
	addWord := func(name, word, text string) {
		if word == "" {
			return
		}
		d := detail{Name: name, Value: text}
		if text != word {
			d.Word = word
		}
		ev.Details = append(ev.Details, d)
	}
	state := func(s items.State) string { return strings.ReplaceAll(string(s), "_", " ") }
	if e.From != "" || e.To != "" {
		add("state", strings.TrimSpace(state(e.From)+" → "+state(e.To)))
	}
	add("execution", e.ExecutionID)
	add("batch", e.BatchID)
	addWord("decision", string(e.Decision), wordOf(decisionWords, string(e.Decision)))
	switch r := string(e.Reason); {
	case e.Kind == items.EventProbe && strings.HasPrefix(r, "read_"):
		add("read", strings.TrimPrefix(r, "read_"))
	case e.Kind == items.EventNeedsPerson || e.Kind == items.EventAlerted || e.Kind == items.EventEscalated || e.Kind == items.EventLeaseExpired:
		addWord("why", r, c.causeText(r))
	default:
		addWord("reason", r, wordOf(reasonWords, r))
	}
	name := "outcome"
	switch e.Kind {
	case items.EventReconcile:
		name = "finding"
	case items.EventResolve:
		name = "resolved as"
	}
	addWord(name, e.Outcome, wordOf(outcomeWords[e.Kind], e.Outcome))
	addWord("error", string(e.ErrorClass), wordOf(classWords, string(e.ErrorClass)))
	if e.HTTPStatus != 0 {
		add("HTTP status", strconv.Itoa(e.HTTPStatus))
	}
	add("external id", e.ExternalID)
	add("by", e.By)
	return ev
}

// resolve settles an item with the form's outcome and evidence, through the same Resolver as the API.
func (c *Console) resolve(w http.ResponseWriter, r *http.Request, s *session) {
	key := r.PostFormValue("key")
	form := resolveForm{Outcome: r.PostFormValue("outcome"), Evidence: r.PostFormValue("evidence"), ExternalID: strings.TrimSpace(r.PostFormValue("external_id"))}
	var err error
	var reason items.Reason
	switch {
	case !items.ValidKey(key):
		err = items.Invalid("key", items.KeyRule)
	case len(form.Evidence) > 2000:
		err = items.Invalid("evidence", "must be at most 2000 characters")
	case len(form.ExternalID) > 500:
		err = items.Invalid("external_id", "must be at most 500 characters")
	default:
		_, reason, err = c.cfg.Resolver.Resolve(r.Context(), items.ResolveParams{Tenant: s.who.Tenant, Key: key,
			Outcome: form.Outcome, Evidence: form.Evidence, ExternalID: form.ExternalID, By: s.who.Name})
	}
	if err == nil {
		http.Redirect(w, r, itemURL(key)+"&done="+url.QueryEscape(string(reason)), http.StatusSeeOther)
		return
	}
	e := c.cfg.Errors(err)
	if e.Status >= 500 || e.Status == http.StatusNotFound || !items.ValidKey(key) {
		c.failErr(w, r, s, err)
		return
	}
	v, verr := c.itemView(r, s, key)
	if verr != nil {
		c.failErr(w, r, s, verr)
		return
	}
	var ie *items.Error
	if errors.As(err, &ie) && len(ie.Fields) > 0 {
		for _, f := range ie.Fields {
			// The message often names the field's problem already ("evidence: must be …"): say it once.
			if !strings.Contains(e.Message, f.Problem) {
				e.Message += "; " + f.Field + " " + f.Problem
			}
		}
	}
	v.Refused, v.Form = &e, form
	w.WriteHeader(e.Status)
	c.render(w, r, "item", c.frame(s, "Item "+key, "", v))
}

type batchView struct {
	Status batches.Status
	States []stateCount
	Rows   []batchRow
	// Waiting counts this page's items that need a person.
	Waiting int
	NextURL string
	First   string
}

// batchRow is one item of a batch page; Why and Alert say in words why it needs a person and its alert
// status.
type batchRow struct {
	batches.StatusItem
	Why, Alert string
}

type stateCount struct {
	State items.State
	N     int
}

func (c *Console) batch(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	id := q.Get("id")
	if id == "" {
		c.fail(w, r, s, PublicError{Status: http.StatusBadRequest, Code: string(items.CodeInvalid),
			Message: "Which batch? This page shows one batch, named by its id (batch?id=…); Find looks one up."}, link{"Find", Prefix + "find"})
		return
	}
	st, err := c.cfg.Batches.Status(r.Context(), batches.StatusParams{Tenant: s.who.Tenant, BatchID: id, Cursor: q.Get("cursor"), Limit: 50})
	switch {
	case errors.Is(err, items.ErrNotFound):
		c.fail(w, r, s, PublicError{Status: http.StatusNotFound, Code: string(items.CodeNotFound),
			Message: "No batch has the id " + id + " in tenant " + s.who.Tenant + "."}, link{"Find " + id, findURL(id)})
		return
	case err != nil && q.Get("cursor") != "" && items.ErrorCode(err) == items.CodeInvalid:
		c.failErr(w, r, s, err, link{"The batch's first page", batchURL(id)})
		return
	case err != nil:
		c.failErr(w, r, s, err)
		return
	}
	v := batchView{Status: st, States: []stateCount{{items.StatePrepared, st.Counts.Prepared}, {items.StateInFlight, st.Counts.InFlight},
		{items.StateSucceeded, st.Counts.Succeeded}, {items.StateFailed, st.Counts.Failed}, {items.StateUnknown, st.Counts.Unknown}}}
	for _, it := range st.Items {
		br := batchRow{StatusItem: it}
		if it.NeedsPerson {
			v.Waiting++
			if it.NeedsPersonCause != "" {
				br.Why = c.causeText(it.NeedsPersonCause)
			}
			if it.AlertStatus != "" {
				br.Alert = alertText(it.AlertStatus, it.AlertedTo)
			}
		}
		v.Rows = append(v.Rows, br)
	}
	if st.NextCursor != "" {
		v.NextURL = batchURL(id) + "&cursor=" + url.QueryEscape(st.NextCursor)
	}
	if q.Get("cursor") != "" {
		v.First = batchURL(id)
	}
	p := c.frame(s, "Batch "+id, "", v)
	p.Refresh = true
	c.render(w, r, "batch", p)
}

// FindListLimit is how many items the find page lists by reference and by execution id.
const FindListLimit = 50

// findList is the items a find term names as a business reference or an execution id.
type findList struct {
	Rows []row
	// More is true when the store has more than FindListLimit; CLI is the command that lists them all.
	More bool
	CLI  string
}

type findView struct {
	Query     string
	Item      *row
	BatchID   string
	Counts    int
	Reference findList
	Execution findList
	Nothing   bool
}

// find looks a term up as an item key, a batch id, a business reference and an execution id (the
// latest claim's), each through an index of the store; it shows every kind that matches.
func (c *Console) find(w http.ResponseWriter, r *http.Request, s *session) {
	v := findView{Query: strings.TrimSpace(r.URL.Query().Get("q"))}
	if v.Query != "" {
		if items.ValidKey(v.Query) {
			it, err := c.cfg.Ledger.Get(r.Context(), s.who.Tenant, v.Query)
			switch {
			case err == nil:
				rw := c.row(it, c.cfg.Ledger.Now())
				v.Item = &rw
			case !errors.Is(err, items.ErrNotFound):
				c.failErr(w, r, s, err)
				return
			}
		}
		if len(v.Query) <= batches.MaxStoredBatchIDLength {
			st, err := c.cfg.Batches.Status(r.Context(), batches.StatusParams{Tenant: s.who.Tenant, BatchID: v.Query, Limit: 1})
			switch {
			case err == nil:
				v.BatchID, v.Counts = v.Query, st.Counts.Total()
			case !errors.Is(err, items.ErrNotFound) && items.ErrorCode(err) != items.CodeInvalid:
				c.failErr(w, r, s, err)
				return
			}
		}
		// A reference or an execution id is at most 500 characters (the API's limit on list filters).
		if len(v.Query) <= 500 {
			for _, f := range []struct {
				into *findList
				p    items.ListParams
				flag string
			}{
				{&v.Reference, items.ListParams{Reference: v.Query}, "--reference"},
				{&v.Execution, items.ListParams{ExecutionID: v.Query}, "--execution"},
			} {
				f.p.Tenant, f.p.Limit = s.who.Tenant, FindListLimit
				pg, err := c.cfg.Store.ListItems(r.Context(), f.p)
				if err != nil {
					c.failErr(w, r, s, err)
					return
				}
				now := c.cfg.Ledger.Now()
				for _, it := range pg.Items {
					f.into.Rows = append(f.into.Rows, c.row(it, now))
				}
				if pg.NextCursor != "" {
					f.into.More, f.into.CLI = true, "companion items list "+f.flag+" "+shellQuote(v.Query)+" --all"
				}
			}
		}
		v.Nothing = v.Item == nil && v.BatchID == "" && len(v.Reference.Rows) == 0 && len(v.Execution.Rows) == 0
	}
	c.render(w, r, "find", c.frame(s, "Find", "find", v))
}

// shellQuote quotes s for a POSIX shell, so that a command the page shows can be pasted as it is.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

type overviewView struct {
	Stats  *items.Stats
	Rows   []measureRow
	States []items.State
	// Tabs choose the destination of the charts (charts.go).
	Tabs   []tab
	Charts chartsView
}

type measureRow struct {
	Name string
	items.Measures
	Oldest string
	Total  bool
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request, s *session) {
	st, err := c.cfg.Store.Stats(r.Context(), s.who.Tenant, c.cfg.Ledger.Now())
	if err != nil {
		c.failErr(w, r, s, err)
		return
	}
	v := overviewView{Stats: st, States: items.States}
	names := make([]string, 0, len(st.Destinations))
	for n := range st.Destinations {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		v.Rows = append(v.Rows, measureRow{Name: n, Measures: st.Destinations[n], Oldest: oldest(st.Destinations[n])})
	}
	v.Rows = append(v.Rows, measureRow{Name: "all destinations", Measures: st.Measures, Oldest: oldest(st.Measures), Total: true})
	if v.Tabs, v.Charts, err = c.overviewCharts(r, s, names); err != nil {
		c.failErr(w, r, s, err)
		return
	}
	p := c.frame(s, "Overview", "overview", v)
	p.Refresh = true
	c.render(w, r, "overview", p)
}

func oldest(m items.Measures) string {
	if m.OldestUnresolvedAgeSeconds == 0 {
		return "–"
	}
	return items.Age(time.Duration(m.OldestUnresolvedAgeSeconds) * time.Second)
}
