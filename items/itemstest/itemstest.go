// Package itemstest is the conformance suite every items.Store passes, in the style of river's
// riverdrivertest: one Exercise function whose subtests are named for behaviour. Each subtest opens a
// fresh store, drives it through items.Ledger with a fake clock, and through the Store methods directly,
// and checks what a user would check: the decision, the reason, the state, the attempt, retry times,
// whether a person is needed, and the history.
//
// The rows of the contract's before-write table (API.md) are the subtests BeforeWrite/RowNN_…, the rows of
// the after-write classification table AfterWrite/ClassifyNN_…, and the table of which reports change an
// item Reports/….
package itemstest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// Options adapts the suite to a store.
type Options struct {
	// SkipConcurrency, when not empty, is the reason the concurrency subtests are skipped (for example a
	// test server that is known not to give single-document atomicity).
	SkipConcurrency string
	// DocumentBytes, when set, returns the size in bytes of the item's document as the store holds it (for
	// SQLite length(doc), for MongoDB the BSON document's): the history bound's subtests check that a
	// loop of repeated reports does not grow it.
	DocumentBytes func(t *testing.T, s items.Store, tenant, key string) int
	// ShortLoops makes the history bound's loops of reports send a fifth to a half as many (150–200
	// instead of 300–1000): still far past the bound (15, of duplicate effects 100), for a test server
	// whose every write is slow (FerretDB in process, under the race detector in CI).
	ShortLoops bool
}

// Exercise runs the conformance suite against the stores open returns. open must return a new, empty
// store on every call and arrange for it to be closed when t ends (t.Cleanup).
func Exercise(t *testing.T, open func(t *testing.T) items.Store, opts Options) {
	t.Helper()
	t.Run("BeforeWrite", func(t *testing.T) { exerciseBeforeWrite(t, open) })
	t.Run("AfterWrite", func(t *testing.T) { exerciseClassification(t, open) })
	t.Run("Reports", func(t *testing.T) { exerciseReports(t, open) })
	t.Run("Reconcile", func(t *testing.T) { exerciseReconcile(t, open) })
	t.Run("Resolve", func(t *testing.T) { exerciseResolve(t, open) })
	t.Run("RepeatsPerAttempt", func(t *testing.T) { exerciseRepeats(t, open) })
	t.Run("Acknowledge", func(t *testing.T) { exerciseAcknowledge(t, open) })
	t.Run("KnowledgeOnlyGrows", func(t *testing.T) { exerciseKnowledge(t, open) })
	t.Run("Store", func(t *testing.T) { exerciseStore(t, open) })
	t.Run("Leases", func(t *testing.T) { exerciseLeases(t, open) })
	t.Run("Fingerprints", func(t *testing.T) { exerciseFingerprints(t, open) })
	t.Run("HistoryBound", func(t *testing.T) { exerciseHistoryBound(t, open, opts) })
	t.Run("TextFields", func(t *testing.T) { exerciseTextFields(t, open) })
	t.Run("AllowLists", func(t *testing.T) { exerciseAllowLists(t, open) })
	t.Run("Concurrency", func(t *testing.T) {
		if opts.SkipConcurrency != "" {
			t.Skip(opts.SkipConcurrency)
		}
		exerciseConcurrency(t, open)
	})
}

// epoch is where every fake clock starts.
var epoch = time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)

// The suite's tenants.
const (
	tenantA = "acme"
	tenantB = "globex"
)

// The destinations of the suite's configuration. "default" has no entry: dedupe none, 3 attempts, 300 s
// lease, keys kept 86400 s.
const (
	destDefault           = "default"
	destKeyed             = "keyed"
	destSearchable        = "searchable"
	destShortRetention    = "keyed-short-retention"
	destOneShot           = "one-shot"
	destSearchableOneShot = "searchable-one-shot"
	destServerErrorsSafe  = "server-errors-not-committed"
	// destEscalating flags an unknown or retryable failed item nobody acts on for an hour (unresolved_too_long).
	destEscalating = "escalating"
)

// retention of destShortRetention, in seconds.
const shortRetention = 3600

func suiteConfig(now func() time.Time) items.Config {
	return items.Config{
		Destinations: map[string]items.Destination{
			destKeyed:             {Dedupe: items.DedupeKey},
			destSearchable:        {Dedupe: items.DedupeLookup},
			destShortRetention:    {Dedupe: items.DedupeKey, KeyRetentionSeconds: shortRetention},
			destOneShot:           {MaxAttempts: 1},
			destSearchableOneShot: {Dedupe: items.DedupeLookup, MaxAttempts: 1},
			destServerErrorsSafe:  {ServerErrorsNotCommitted: true},
			destEscalating:        {Dedupe: items.DedupeKey, EscalateAfter: time.Hour},
		},
		Now: now,
	}
}

// Payloads of the suite: payloadA and payloadB are two different intents, payloadA2 is payloadA with its
// members in another order and whitespace (the same fingerprint).
const (
	payloadA  = `{"invoice":"742","recipient":"c-19","amount":120.5}`
	payloadA2 = `{ "amount": 120.5, "recipient": "c-19", "invoice": "742" }`
	payloadB  = `{"invoice":"742","recipient":"c-19","amount":120.50}`
)

// Clock is a fake clock that tests move by hand; the ledger and services read it through Now.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock standing at a fixed, whole-second time.
func NewClock() *Clock { return &Clock{now: time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// harness is one fresh store, a ledger over it with a fake clock, and the tenant requests are made for.
type harness struct {
	t      *testing.T
	ctx    context.Context
	store  items.Store
	ledger *items.Ledger
	clock  *Clock
	tenant string
}

func newHarness(t *testing.T, open func(t *testing.T) items.Store) *harness {
	t.Helper()
	return newHarnessWith(t, open, nil)
}

// newHarnessWith is newHarness with the suite's configuration changed by change first.
func newHarnessWith(t *testing.T, open func(t *testing.T) items.Store, change func(*items.Config)) *harness {
	t.Helper()
	c := &Clock{now: epoch}
	store := open(t)
	ctx := context.Background()
	cfg := suiteConfig(c.Now)
	if change != nil {
		change(&cfg)
	}
	l, err := items.NewLedger(ctx, store, cfg)
	if err != nil {
		t.Fatalf("NewLedger: %v", err)
	}
	return &harness{t: t, ctx: ctx, store: store, ledger: l, clock: c, tenant: tenantA}
}

// as returns a harness on the same store and ledger that makes its requests for another tenant.
func (h *harness) as(tenant string) *harness {
	c := *h
	c.tenant = tenant
	return &c
}

func (h *harness) now() time.Time { return h.clock.Now() }

func (h *harness) advance(d time.Duration) { h.clock.Advance(d) }

// fingerprint returns the keyed fingerprint of payload, as the ledger stores it.
func (h *harness) fingerprint(payload string) string {
	h.t.Helper()
	fp, err := h.ledger.Fingerprint([]byte(payload))
	if err != nil {
		h.t.Fatalf("Fingerprint(%s): %v", payload, err)
	}
	return fp
}

// canonical returns the canonical form of payload, as the handlers pass it to the ledger.
func canonical(t *testing.T, payload string) []byte {
	t.Helper()
	canon, err := items.Canonical([]byte(payload))
	if err != nil {
		t.Fatalf("Canonical(%s): %v", payload, err)
	}
	return canon
}

// bwOpt changes a before-write request.
type bwOpt func(*items.BeforeWriteParams)

func dest(name string) bwOpt { return func(p *items.BeforeWriteParams) { p.Destination = name } }

func dedupe(d items.Dedupe) bwOpt { return func(p *items.BeforeWriteParams) { p.Dedupe = d } }

func lease(seconds int) bwOpt { return func(p *items.BeforeWriteParams) { p.LeaseSeconds = seconds } }

func reference(ref string) bwOpt { return func(p *items.BeforeWriteParams) { p.Reference = ref } }

func execution(id string) bwOpt { return func(p *items.BeforeWriteParams) { p.ExecutionID = id } }

func (h *harness) params(key, payload string, opts ...bwOpt) items.BeforeWriteParams {
	// Both, as the handlers' requests carry them once the ledger has keyed them (KeyFingerprints): so the
	// params serve items.NewPrepared too. The ledger's own keying is exercised by the fingerprint tests and
	// the HTTP suites.
	p := items.BeforeWriteParams{Tenant: h.tenant, Key: key, Canonical: canonical(h.t, payload), Fingerprint: h.fingerprint(payload)}
	for _, o := range opts {
		o(&p)
	}
	return p
}

// bw asks before-write and fails the test on an error.
func (h *harness) bw(key, payload string, opts ...bwOpt) items.Answer {
	h.t.Helper()
	a, err := h.ledger.BeforeWrite(h.ctx, h.params(key, payload, opts...))
	if err != nil {
		h.t.Fatalf("BeforeWrite(%s): %v", key, err)
	}
	return a
}

// claim asks before-write and requires proceed.
func (h *harness) claim(key, payload string, opts ...bwOpt) items.Answer {
	h.t.Helper()
	a := h.bw(key, payload, opts...)
	if a.Decision != items.Proceed {
		h.t.Fatalf("BeforeWrite(%s) = %s/%s, want proceed", key, a.Decision, a.Reason)
	}
	return a
}

// Reports a workflow sends.

func succeeded(claim, externalID string) items.AfterWriteParams {
	return items.AfterWriteParams{Claim: claim, Evidence: items.Evidence{Outcome: items.OutcomeSucceeded}, ExternalID: externalID}
}

func failedStatus(claim string, status int) items.AfterWriteParams {
	return items.AfterWriteParams{Claim: claim, Evidence: items.Evidence{Outcome: items.OutcomeFailed, HTTPStatus: status, Class: items.ClassHTTP}}
}

func failedStatusRetryAfter(claim string, status, retryAfter int) items.AfterWriteParams {
	p := failedStatus(claim, status)
	p.RetryAfter = &retryAfter
	return p
}

func failedClass(claim string, class items.ErrorClass) items.AfterWriteParams {
	return items.AfterWriteParams{Claim: claim, Evidence: items.Evidence{Outcome: items.OutcomeFailed, Class: class}}
}

func unknownOutcome(claim string) items.AfterWriteParams {
	return items.AfterWriteParams{Claim: claim, Evidence: items.Evidence{Outcome: items.OutcomeUnknown}}
}

// aw reports after-write for key and fails the test on an error.
func (h *harness) aw(key string, p items.AfterWriteParams) items.Report {
	h.t.Helper()
	r, err := h.awErr(key, p)
	if err != nil {
		h.t.Fatalf("AfterWrite(%s, %s): %v", key, p.Outcome, err)
	}
	return r
}

func (h *harness) awErr(key string, p items.AfterWriteParams) (items.Report, error) {
	p.Tenant, p.Key = h.tenant, key
	return h.ledger.AfterWrite(h.ctx, p)
}

func (h *harness) reconcile(key, finding, externalID, evidence string) (items.Report, error) {
	return h.ledger.Reconcile(h.ctx, items.ReconcileParams{Tenant: h.tenant, Key: key, Finding: finding,
		ExternalID: externalID, Evidence: evidence, By: "wf-token"})
}

func (h *harness) resolve(key, outcome, evidence, externalID string) (*items.Item, items.Reason, error) {
	return h.ledger.Resolve(h.ctx, items.ResolveParams{Tenant: h.tenant, Key: key, Outcome: outcome,
		Evidence: evidence, ExternalID: externalID, By: "ops-anna"})
}

// item reads the stored item directly from the store (it records nothing, unlike Ledger.Get).
func (h *harness) item(key string) *items.Item {
	h.t.Helper()
	it, err := h.store.Get(h.ctx, h.tenant, key)
	if err != nil {
		h.t.Fatalf("Get(%s): %v", key, err)
	}
	return it
}

// unknownAfterTimeout claims key and reports a timeout: the item is unknown at attempt 1.
func (h *harness) unknownAfterTimeout(key string, opts ...bwOpt) items.Answer {
	h.t.Helper()
	a := h.claim(key, payloadA, opts...)
	if r := h.aw(key, failedClass(a.Claim, items.ClassTimeout)); r.State != items.StateUnknown {
		h.t.Fatalf("after a timeout %s is %s, want unknown", key, r.State)
	}
	return a
}

// want is what a before-write answer must say.
type want struct {
	Decision    items.Decision
	Reason      items.Reason
	State       items.State
	Attempt     int
	RetryAfter  int
	NeedsPerson bool
}

// checkAnswer compares an answer with w, and with the contract's rules about which fields come with
// which decision, and with the stored item.
func (h *harness) checkAnswer(key string, got items.Answer, w want) {
	h.t.Helper()
	t := h.t
	if got.Key != key || got.Decision != w.Decision || got.Reason != w.Reason || got.State != w.State ||
		got.Attempt != w.Attempt || got.RetryAfter != w.RetryAfter || got.NeedsPerson != w.NeedsPerson {
		t.Errorf("before-write %s = {key %s, %s/%s, state %s, attempt %d, retry_after %d, needs_person %v}, "+
			"want {%s/%s, state %s, attempt %d, retry_after %d, needs_person %v}", key, got.Key, got.Decision, got.Reason,
			got.State, got.Attempt, got.RetryAfter, got.NeedsPerson,
			w.Decision, w.Reason, w.State, w.Attempt, w.RetryAfter, w.NeedsPerson)
	}
	if want := h.ledger.IdempotencyKey(h.tenant, key); got.IdempotencyKey != want {
		t.Errorf("idempotency_key = %q, want %q", got.IdempotencyKey, want)
	}
	if got.Message == "" {
		t.Errorf("answer without a message")
	}
	proceed := got.Decision == items.Proceed
	if proceed != (got.Claim != "") || proceed != (got.LeaseExpiresAt != nil) {
		t.Errorf("%s answer: claim %q, lease_expires_at %v; want both exactly with proceed", got.Decision, got.Claim, got.LeaseExpiresAt)
	}
	if !(got.Decision == items.Skip && got.Reason == items.ReasonSucceeded) && (got.ExternalID != "" || len(got.Result) != 0) {
		t.Errorf("%s/%s answer carries external_id %q, result %s; only skip/succeeded does", got.Decision, got.Reason, got.ExternalID, got.Result)
	}
	it := h.item(key)
	if it.State != got.State || it.NeedsPerson != got.NeedsPerson {
		t.Errorf("stored item is %s (needs_person %v), the answer says %s (needs_person %v)", it.State, it.NeedsPerson, got.State, got.NeedsPerson)
	}
	if proceed && (it.Claim != got.Claim || it.Attempt != got.Attempt || !it.LeaseExpiresAt.Equal(*got.LeaseExpiresAt)) {
		t.Errorf("stored claim %q attempt %d lease %v, answer %q attempt %d lease %v", it.Claim, it.Attempt, it.LeaseExpiresAt,
			got.Claim, got.Attempt, got.LeaseExpiresAt)
	}
}

// wantReport is what an after-write, reconcile or resolve answer must say.
type wantReport struct {
	State         items.State
	Reason        items.Reason
	Attempt       int
	ResultDropped bool
}

func (h *harness) checkReport(key string, got items.Report, w wantReport) {
	h.t.Helper()
	if got.Key != key || got.State != w.State || got.Reason != w.Reason || got.Attempt != w.Attempt || got.ResultDropped != w.ResultDropped {
		h.t.Errorf("report on %s = {key %s, state %s, reason %s, attempt %d, result_dropped %v}, want {%s, %s, %d, %v}",
			key, got.Key, got.State, got.Reason, got.Attempt, got.ResultDropped, w.State, w.Reason, w.Attempt, w.ResultDropped)
	}
	if got.Message == "" {
		h.t.Errorf("report without a message")
	}
	if it := h.item(key); it.State != got.State {
		h.t.Errorf("stored item is %s, the report says %s", it.State, got.State)
	}
}

// checkUnchanged fails when the stored item differs from before: nothing was written.
func (h *harness) checkUnchanged(key string, before *items.Item) {
	h.t.Helper()
	after := h.item(key)
	if after.Version != before.Version || len(after.History) != len(before.History) || after.State != before.State {
		h.t.Errorf("%s was written: version %d→%d, history %d→%d, state %s→%s", key, before.Version, after.Version,
			len(before.History), len(after.History), before.State, after.State)
	}
}

// checkFailed checks a failed item's retry terms. retryAt is ignored when the failure is permanent.
func (h *harness) checkFailed(key string, retryable bool, retryAt time.Time) {
	h.t.Helper()
	it := h.item(key)
	if it.State != items.StateFailed || it.Retryable != retryable {
		h.t.Errorf("%s is %s retryable=%v, want failed retryable=%v", key, it.State, it.Retryable, retryable)
		return
	}
	switch {
	case !retryable && it.RetryAt != nil:
		h.t.Errorf("permanent failure with retry_at %v", it.RetryAt)
	case retryable && (it.RetryAt == nil || !it.RetryAt.Equal(retryAt)):
		h.t.Errorf("%s retry_at = %v, want %v", key, it.RetryAt, retryAt)
	}
}

// kinds lists the kinds of the item's history.
func kinds(it *items.Item) []string {
	out := make([]string, len(it.History))
	for i, e := range it.History {
		out[i] = e.Kind
	}
	return out
}

func (h *harness) checkHistory(key string, want ...string) *items.Item {
	h.t.Helper()
	it := h.item(key)
	if got := kinds(it); strings.Join(got, ",") != strings.Join(want, ",") {
		h.t.Errorf("history of %s = %v, want %v", key, got, want)
	}
	return it
}

// countEvents counts the item's events of a kind with a reason.
func countEvents(it *items.Item, kind string, reason items.Reason) int {
	n := 0
	for _, e := range it.History {
		if e.Kind == kind && e.Reason == reason {
			n++
		}
	}
	return n
}

func lastEvent(it *items.Item) items.Event {
	if len(it.History) == 0 {
		return items.Event{}
	}
	return it.History[len(it.History)-1]
}

// checkCode fails unless err is an error of the given code.
func checkCode(t *testing.T, err error, code items.Code) {
	t.Helper()
	if err == nil {
		t.Errorf("no error, want %s", code)
		return
	}
	if got := items.ErrorCode(err); got != code {
		t.Errorf("error %v has code %s, want %s", err, got, code)
	}
}

// jsonEqual reports whether got is want up to insignificant whitespace: numbers and member order as sent.
func jsonEqual(t *testing.T, got, want json.RawMessage) bool {
	t.Helper()
	var g, w bytes.Buffer
	if err := json.Compact(&w, want); err != nil {
		t.Fatalf("bad expected JSON %s: %v", want, err)
	}
	if err := json.Compact(&g, got); err != nil {
		return false
	}
	return bytes.Equal(g.Bytes(), w.Bytes())
}

var errFnFailed = errors.New("itemstest: the transition function failed")
