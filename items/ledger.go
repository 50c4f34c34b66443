package items

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Ledger applies the contract's decision and classification tables to items kept in a Store.
type Ledger struct {
	store  Store
	cfg    Config
	secret []byte
	macs   sync.Pool // of hash.Hash: HMAC-SHA256 under secret
	now    func() time.Time
	// skew is the margin past its end at which a lease counts as expired: the configured MaxClockSkew for
	// a shared store, else zero (see leaseNow and ClockMargin).
	skew time.Duration
	// unwritable is the write the store could not record, while none has succeeded since (ready.go).
	unwritable atomic.Pointer[unwritable]
}

// NewLedger returns a ledger over store. It reads (or, on a new store, creates) the ledger secret.
func NewLedger(ctx context.Context, store Store, cfg Config) (*Ledger, error) {
	secret, err := store.LedgerSecret(ctx)
	if err != nil {
		return nil, err
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	l := &Ledger{store: store, cfg: cfg, secret: secret, now: func() time.Time { return now().UTC() }}
	if _, ok := store.(SharedStore); ok {
		l.skew = max(cfg.MaxClockSkew, 0)
	}
	return l, nil
}

// leaseNow returns the reading a decision that starts or judges a lease is made with. On a store that
// several processes share and that has a clock of its own, it is this process's clock moved by the
// store clock's offset, read now: every replica then stamps and judges leases on the store's clock, and a
// replica whose clock is 20 s ahead does not take another's live claim for expired. Otherwise it is this
// process's clock. On a shared store either way a lease is judged with the margin l.skew (ClockMargin,
// see expireLease).
//
// Transitions call it inside their TransitionFunc, as the store is about to write: a lease counts from
// the moment its claim is written, and time the request waited (in a group commit, or lost in retries
// after a conflicting write) is not taken out of the caller's lease.
func (l *Ledger) leaseNow(ctx context.Context) (time.Time, error) {
	now := l.now()
	if ss, ok := l.store.(SharedStore); ok && ss.HasClock() {
		off, err := ss.ClockOffset(ctx)
		if err != nil {
			return time.Time{}, err
		}
		now = now.Add(off)
	}
	return now, nil
}

// ClockMargin returns how long past its end a lease, or a claim another process stamped, still counts as
// held: max_clock_skew on a store several processes share (where their clocks, or the readings of the
// store's clock, may differ by that much), else zero.
func (l *Ledger) ClockMargin() time.Duration { return l.skew }

// Store returns the ledger's store.
func (l *Ledger) Store() Store { return l.store }

// Config returns the ledger's configuration.
func (l *Ledger) Config() Config { return l.cfg }

// Now returns the ledger's clock reading, in UTC.
func (l *Ledger) Now() time.Time { return l.now() }

// IdempotencyKey returns the idempotency key of tenant and key.
func (l *Ledger) IdempotencyKey(tenant, key string) string {
	// A batch derives one key per item: an HMAC's two hashes keyed with the secret are kept for the next.
	m, _ := l.macs.Get().(hash.Hash)
	if m == nil {
		m = hmac.New(sha256.New, l.secret)
	}
	defer l.macs.Put(m)
	return idempotencyKey(m, tenant, key)
}

// BeforeWriteParams is one before-write request. The handler has checked its syntax; Canonical is the
// canonical form of the payload, from which the ledger derives the keyed Fingerprint.
type BeforeWriteParams struct {
	Tenant string
	Key    string
	// Workflow, Object, Action and Sequence are labels; set when the key was derived from them.
	Workflow, Object, Action, Sequence string
	// Canonical is the canonical form of the payload (see Canonical). It is never stored: the ledger
	// keeps its keyed fingerprint, and uses it to recognise an item stored with an unkeyed one.
	Canonical []byte
	// Fingerprint is the keyed fingerprint of Canonical. The ledger sets it when it is empty (see
	// KeyFingerprints); a caller that sets it passes one from Ledger.Fingerprint.
	Fingerprint string
	Destination string
	// Dedupe is empty when the request names none.
	Dedupe      Dedupe
	Reference   string
	BatchID     string
	BatchIndex  *int
	ExecutionID string
	Owner       string
	// LeaseSeconds is 0 when the request names none.
	LeaseSeconds int
}

// Answer is the before-write answer.
type Answer struct {
	Key            string          `json:"key"`
	Decision       Decision        `json:"decision"`
	Reason         Reason          `json:"reason"`
	State          State           `json:"state"`
	Attempt        int             `json:"attempt"`
	Claim          string          `json:"claim,omitempty"`
	IdempotencyKey string          `json:"idempotency_key"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at,omitempty"`
	RetryAfter     int             `json:"retry_after,omitempty"`
	ExternalID     string          `json:"external_id,omitempty"`
	Result         json.RawMessage `json:"result,omitempty"`
	Reference      string          `json:"reference,omitempty"`
	NeedsPerson    bool            `json:"needs_person,omitempty"`
	Message        string          `json:"message"`
}

// BeforeWrite decides whether the caller may write now, and records a claim when it may. Of any number of
// concurrent calls for one tenant and key, exactly one gets Proceed. Returns ErrUnavailable when the
// claim cannot be durably recorded (never Proceed then).
func (l *Ledger) BeforeWrite(ctx context.Context, p BeforeWriteParams) (Answer, error) {
	if p.Fingerprint == "" && p.Canonical != nil {
		m := l.mac()
		p.Fingerprint = keyedFingerprint(m, p.Canonical)
		l.macs.Put(m)
	}
	if err := l.CheckBeforeWrite(p); err != nil {
		return Answer{}, err
	}
	var ans Answer
	it, err := l.transition(ctx, p.Tenant, p.Key, func(cur *Item) (*Item, error) {
		now, err := l.leaseNow(ctx)
		if err != nil {
			return nil, err
		}
		next, a := l.decide(cur, p, now)
		ans = a
		return next, nil
	})
	if err != nil {
		return Answer{}, err
	}
	return l.finishAnswer(ans, it), nil
}

// BeforeWriteMany decides a batch of requests in order, each against the state the earlier ones left.
// All requests must be for one tenant. It sets the keyed fingerprint of the requests in ps that have none
// (KeyFingerprints).
func (l *Ledger) BeforeWriteMany(ctx context.Context, tenant string, ps []BeforeWriteParams) ([]Answer, error) {
	keys := make([]string, len(ps))
	for i, p := range ps {
		if p.Tenant != tenant {
			return nil, fmt.Errorf("items: batch mixes tenants %q and %q", tenant, p.Tenant)
		}
		if err := l.CheckBeforeWrite(p); err != nil {
			return nil, err
		}
		keys[i] = p.Key
	}
	l.KeyFingerprints(ps)
	answers := make([]Answer, len(ps))
	// The clock is read at the first item's decision, as the store is about to write, and again when the
	// store decides an item again (after a conflicting write), where the decisions start over.
	var now time.Time
	last := -1
	stored, err := l.TransitionMany(ctx, tenant, keys, func(i int, cur *Item) (*Item, error) {
		if i <= last || now.IsZero() {
			var err error
			if now, err = l.leaseNow(ctx); err != nil {
				return nil, err
			}
		}
		last = i
		next, a := l.decide(cur, ps[i], now)
		answers[i] = a
		return next, nil
	})
	if err != nil {
		return nil, err
	}
	for i := range answers {
		answers[i] = l.finishAnswer(answers[i], stored[i])
	}
	return answers, nil
}

func (l *Ledger) finishAnswer(a Answer, it *Item) Answer {
	a.State = it.State
	a.IdempotencyKey = l.IdempotencyKey(it.Tenant, it.Key)
	a.Reference = it.Reference
	a.NeedsPerson = it.NeedsPerson
	if a.Decision == Proceed {
		a.Attempt = it.Attempt
		a.Claim = it.Claim
		a.LeaseExpiresAt = it.LeaseExpiresAt
	}
	return a
}

// CheckBeforeWrite returns the first problem of a before-write request that makes it unusable under this
// ledger's configuration: checkBeforeWrite's, then a destination or owner its tenant may not name.
// Batches check every item with it before anything is written.
func (l *Ledger) CheckBeforeWrite(p BeforeWriteParams) error {
	if err := checkBeforeWrite(p); err != nil {
		return err
	}
	return l.cfg.checkAllowed(p)
}

func checkBeforeWrite(p BeforeWriteParams) error {
	for _, f := range [...]struct{ name, value string }{{"reference", p.Reference}, {"destination", p.Destination},
		{"owner", p.Owner}, {"workflow", p.Workflow}, {"execution_id", p.ExecutionID}} {
		if problem := TextProblem(f.value); problem != "" {
			return Invalid(f.name, problem)
		}
	}
	switch {
	case p.Tenant == "":
		return Invalid("tenant", "is required")
	case !ValidKey(p.Key):
		return Invalid("key", KeyRule)
	case p.Fingerprint == "" && p.Canonical == nil, p.Fingerprint != "" && len(p.Fingerprint) != 64:
		return Invalid("payload", "is required")
	case p.Dedupe != "" && !p.Dedupe.Valid():
		return Invalid("dedupe", "must be one of key, lookup, none")
	case p.LeaseSeconds != 0 && (p.LeaseSeconds < MinLeaseSeconds || p.LeaseSeconds > MaxLeaseSeconds):
		return Invalid("lease_seconds", fmt.Sprintf("must be %d-%d", MinLeaseSeconds, MaxLeaseSeconds))
	}
	return nil
}

// decide applies the before-write table (first matching row wins) to the stored item. It returns the item
// to write (nil for no change) and the answer.
func (l *Ledger) decide(cur *Item, p BeforeWriteParams, now time.Time) (*Item, Answer) {
	ans := Answer{Key: p.Key}
	if cur == nil {
		cur = newItem(p, now)
	}
	if cur.State == StatePrepared {
		l.claim(cur, p, now, ReasonNew)
		return cur, proceed(ans, ReasonNew, cur)
	}
	dest := l.cfg.Destination(cur.Destination)
	changed := l.expireLease(cur, now)
	keep := func() *Item {
		if changed {
			return cur
		}
		return nil
	}
	ans.Attempt = cur.Attempt

	if !samePayload(cur.Fingerprint, p) && cur.possiblyDispatched() {
		ans.Decision, ans.Reason = Conflict, ReasonFingerprintMismatch
		ans.Message = "this key was used with a different payload and may have been sent: stop, and use a new key for a new intent"
		return keep(), ans
	}
	switch cur.State {
	case StateSucceeded:
		ans.Decision, ans.Reason = Skip, ReasonSucceeded
		ans.ExternalID, ans.Result = cur.ExternalID, cur.Result
		ans.Message = "already done: use the stored result, do not write again"
		return keep(), ans
	case StateInFlight:
		ans.Decision, ans.Reason = Skip, ReasonInProgress
		ans.RetryAfter = secondsUntil(now, cur.LeaseExpiresAt.Add(l.skew))
		ans.Message = "another caller holds the claim; ask again after retry_after seconds"
		return keep(), ans
	case StateFailed:
		switch {
		case !cur.Retryable:
			ans.Decision, ans.Reason = Skip, ReasonFailedPermanent
			ans.Message = "the destination refused this write permanently; fix the input and use a new key"
			return keep(), ans
		case !l.attemptsLeft(cur, dest):
			ans.Decision, ans.Reason = Skip, ReasonAttemptsExhausted
			ans.Message = "no attempts left; the owner decides what happens next"
			if !cur.NeedsPerson {
				cur.markNeedsPerson(CauseAttemptsExhausted, now)
				changed = true
			}
			return keep(), ans
		case cur.RetryAt != nil && now.Before(*cur.RetryAt):
			ans.Decision, ans.Reason = Skip, ReasonRetryLater
			ans.RetryAfter = secondsUntil(now, *cur.RetryAt)
			ans.Message = "a retry is allowed after retry_after seconds"
			return keep(), ans
		}
		l.claim(cur, p, now, ReasonRetry)
		return cur, proceed(ans, ReasonRetry, cur)
	}
	// StateUnknown: the rows use the mode recorded for the attempt whose outcome is unknown.
	mode := cur.Dedupe
	if mode == DedupeLookup && !cur.LookupFailed {
		ans.Decision, ans.Reason = Reconcile, ReasonLookupRequired
		ans.Message = "the outcome is unknown: look the reference up in the destination, then POST /v1/reconcile"
		return keep(), ans
	}
	if mode == DedupeKey && l.attemptsLeft(cur, dest) {
		if first, ok := cur.firstDispatch(); !ok || now.Before(first.Add(time.Duration(dest.KeyRetentionSeconds)*time.Second)) {
			l.claim(cur, p, now, ReasonRetrySameKey)
			return cur, proceed(ans, ReasonRetrySameKey, cur)
		}
	}
	ans.Decision, ans.Reason = Skip, ReasonAwaitingOwner
	ans.Message = "the outcome is unknown and cannot be checked automatically; the owner decides, nothing is sent"
	if !cur.NeedsPerson {
		cur.markNeedsPerson(CauseAwaitingOwner, now)
		changed = true
	}
	return keep(), ans
}

func proceed(ans Answer, reason Reason, it *Item) Answer {
	ans.Decision, ans.Reason = Proceed, reason
	ans.Message = fmt.Sprintf("claimed attempt %d; write now with the idempotency key, then call after-write", it.Attempt)
	return ans
}

func (l *Ledger) attemptsLeft(it *Item, dest Destination) bool {
	return it.Attempt < dest.MaxAttempts+it.ExtraAttempts
}

func secondsUntil(now, t time.Time) int {
	s := int(math.Ceil(t.Sub(now).Seconds()))
	return max(s, 1)
}

func newItem(p BeforeWriteParams, now time.Time) *Item {
	it := &Item{
		Tenant:      p.Tenant,
		Key:         p.Key,
		Workflow:    p.Workflow,
		Object:      p.Object,
		Action:      p.Action,
		Sequence:    p.Sequence,
		Destination: p.Destination,
		Reference:   p.Reference,
		BatchID:     p.BatchID,
		BatchIndex:  p.BatchIndex,
		Owner:       p.Owner,
		Fingerprint: p.Fingerprint,
		State:       StatePrepared,
		CreatedAt:   now,
		UpdatedAt:   now,
		Attempts:    []Attempt{},
		History:     []Event{},
	}
	if it.Destination == "" {
		it.Destination = "default"
	}
	if it.Workflow == "" {
		if parts, ok := SplitKey(p.Key); ok {
			it.Workflow, it.Object, it.Action, it.Sequence = parts.Workflow, parts.Object, parts.Action, parts.Sequence
		}
	}
	return it
}

// NewPrepared returns a new item registered as prepared by a batch preparation: nothing is claimed.
// p must carry its keyed fingerprint (KeyFingerprints).
func NewPrepared(p BeforeWriteParams, now time.Time) (*Item, error) {
	if err := checkBeforeWrite(p); err != nil {
		return nil, err
	}
	if len(p.Fingerprint) != 64 {
		return nil, errors.New("items: NewPrepared needs the keyed fingerprint (Ledger.KeyFingerprints)")
	}
	it := newItem(p, now)
	it.Dedupe = p.Dedupe
	it.record(Event{At: now, Kind: EventPrepared, To: StatePrepared, BatchID: p.BatchID, ExecutionID: p.ExecutionID})
	return it, nil
}

// claim starts a new attempt: the item goes in flight under a fresh claim and lease.
func (l *Ledger) claim(it *Item, p BeforeWriteParams, now time.Time, reason Reason) {
	dest := l.cfg.Destination(it.Destination)
	mode := p.Dedupe
	if mode == "" {
		mode = dest.Dedupe
	}
	lease := p.LeaseSeconds
	if lease == 0 {
		lease = dest.LeaseSeconds
	}
	from := it.State
	if len(it.History) == 0 {
		from = "" // a brand-new item was never prepared; its history starts with this claim
	}
	// Every claim names its fingerprint, so the history keeps the old one when a retry replaces it.
	ev := Event{At: now, Kind: EventClaimed, Decision: Proceed, Reason: reason, From: from, To: StateInFlight,
		ExecutionID: p.ExecutionID, BatchID: p.BatchID, Fingerprint: p.Fingerprint}
	it.Attempt++
	ev.Attempt = it.Attempt
	it.Fingerprint = p.Fingerprint
	it.Claim = newClaim()
	it.State = StateInFlight
	it.LeaseExpiresAt = timePtr(now.Add(time.Duration(lease) * time.Second))
	it.Dedupe = mode
	it.Retryable, it.RetryAt = false, nil
	it.Cause, it.FailureClass, it.FailureMessage, it.HTTPStatus = "", "", "", 0
	it.LookupFailed = false
	it.clearNeedsPerson()
	if p.Reference != "" {
		it.Reference = p.Reference
	}
	if p.Owner != "" {
		it.Owner = p.Owner
	}
	it.ExecutionID = p.ExecutionID
	it.Attempts = append(it.Attempts, Attempt{Number: it.Attempt, Claim: it.Claim, ExecutionID: p.ExecutionID,
		BatchID: p.BatchID, Dedupe: mode, Fingerprint: p.Fingerprint, StartedAt: now})
	it.record(ev)
}

func newClaim() string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return "c_" + hex.EncodeToString(b)
}

// expireLease records an expired lease: the item becomes unknown (cause lease_expired). It reports
// whether it changed the item.
//
// now must come from leaseNow: on a shared store, a lease counts as expired only the configured skew
// after its end.
func (l *Ledger) expireLease(it *Item, now time.Time) bool {
	if !it.LeaseExpired(now.Add(-l.skew)) {
		return false
	}
	it.State = StateUnknown
	it.Cause = CauseLeaseExpired
	if a := it.CurrentAttempt(); a != nil && a.Outcome == "" {
		a.Outcome = StateUnknown
	}
	it.record(Event{At: now, Kind: EventLeaseExpired, Attempt: it.Attempt, From: StateInFlight, To: StateUnknown, Reason: CauseLeaseExpired})
	l.enteredUnknown(it, now)
	return true
}

// enteredUnknown marks an item that became unknown as needing a person when nothing automatic can settle
// it: its destination can neither dedupe nor be searched.
func (l *Ledger) enteredUnknown(it *Item, now time.Time) {
	if it.Dedupe == DedupeNone || it.Dedupe == "" {
		it.markNeedsPerson(CauseNoDedupe, now)
	}
}

// ExpireLease records the expiry of the item's lease if it has expired; the sweeper calls it. It reports
// whether the item changed.
func (l *Ledger) ExpireLease(ctx context.Context, tenant, key string) (bool, error) {
	changed := false
	_, err := l.transition(ctx, tenant, key, func(cur *Item) (*Item, error) {
		changed = false
		if cur == nil {
			return nil, nil
		}
		now, err := l.leaseNow(ctx)
		if err != nil {
			return nil, err
		}
		if !l.expireLease(cur, now) {
			return nil, nil
		}
		changed = true
		return cur, nil
	})
	return changed, err
}

// Get returns the item, recording an expired lease first (the first reader records it).
func (l *Ledger) Get(ctx context.Context, tenant, key string) (*Item, error) {
	it, err := l.store.Get(ctx, tenant, key)
	if err != nil {
		return nil, err
	}
	if !it.LeaseExpired(l.now().Add(-l.skew)) {
		return it, nil // on a store with a clock, ExpireLease judges the lease again on it
	}
	if _, err := l.ExpireLease(ctx, tenant, key); err != nil {
		return nil, err
	}
	return l.store.Get(ctx, tenant, key)
}

// AfterWriteParams is one after-write report.
type AfterWriteParams struct {
	Tenant string
	Key    string
	Claim  string
	Evidence
	ExternalID        string
	ReceiverRequestID string
	Result            json.RawMessage
	ErrorCode         string
	ErrorMessage      string
}

// Report is the answer to after-write, reconcile and resolve.
type Report struct {
	Key           string `json:"key"`
	State         State  `json:"state"`
	Reason        Reason `json:"reason"`
	Attempt       int    `json:"attempt"`
	Message       string `json:"message"`
	ResultDropped bool   `json:"result_dropped,omitempty"`
}

// CheckAfterWrite returns the first problem of an after-write report that makes it unusable.
func CheckAfterWrite(p AfterWriteParams) error {
	switch {
	case !ValidKey(p.Key):
		return Invalid("key", KeyRule)
	case p.Claim == "":
		return Invalid("claim", "is required")
	case !p.Outcome.Valid():
		return Invalid("outcome", "must be one of succeeded, failed, unknown")
	case p.Class != "" && !p.Class.Valid():
		return Invalid("error.class", "must be one of "+errorClassWords)
	case p.HTTPStatus != 0 && (p.HTTPStatus < 100 || p.HTTPStatus > 599):
		return Invalid("http_status", "must be 100-599")
	case p.RetryAfter != nil && *p.RetryAfter < 0:
		return Invalid("retry_after", "must be 0 or more seconds")
	}
	if field, problem := CheckEvidence(p.Evidence); problem != "" {
		return Invalid(field, problem)
	}
	return nil
}

// AfterWrite records what a workflow saw of its write, classified by the after-write table. An unknown
// claim is a conflict; a missing item ErrNotFound. Knowledge only grows: a success from any attempt wins.
func (l *Ledger) AfterWrite(ctx context.Context, p AfterWriteParams) (Report, error) {
	if err := CheckAfterWrite(p); err != nil {
		return Report{}, err
	}
	now := l.now()
	var rep Report
	it, err := l.transition(ctx, p.Tenant, p.Key, func(cur *Item) (*Item, error) {
		if cur == nil {
			return nil, ErrNotFound
		}
		var next *Item
		var err error
		next, rep, err = l.applyReport(cur, p, now)
		return next, err
	})
	if err != nil {
		return Report{}, err
	}
	rep.Key, rep.State = it.Key, it.State
	return rep, nil
}

func reportDigest(p AfterWriteParams) string {
	ra := -1
	if p.RetryAfter != nil {
		ra = *p.RetryAfter
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00%s\x00%s\x00%s\x00%d\x00%s\x00", p.Outcome, p.ExternalID, p.HTTPStatus, p.Class,
		p.ErrorCode, p.ReceiverRequestID, ra, p.ErrorMessage)
	h.Write(p.Result)
	return hex.EncodeToString(h.Sum(nil))[:32]
}

func (l *Ledger) applyReport(it *Item, p AfterWriteParams, now time.Time) (*Item, Report, error) {
	att := it.attemptByClaim(p.Claim)
	if att == nil {
		return nil, Report{}, &Error{Code: CodeConflict, Message: "claim: not a claim of this item; send the claim of its before-write answer (proceed)"}
	}
	rep := Report{Attempt: att.Number}
	digest := reportDigest(p)
	repeat := false
	for _, d := range att.Reports {
		repeat = repeat || d == digest
	}
	ev := Event{At: now, Kind: EventAfterWrite, Attempt: att.Number, From: it.State, Outcome: string(p.Outcome),
		ErrorClass: p.Class, HTTPStatus: p.HTTPStatus, ExternalID: p.ExternalID, Note: Redact(p.ErrorMessage)}
	if p.HTTPStatus != 0 {
		ev.ErrorClass = ClassHTTP
	}
	finish := func(reason Reason, msg string) (*Item, Report, error) {
		rep.Reason, rep.Message = reason, msg
		ev.Reason, ev.To = reason, it.State
		if !repeat {
			att.Reports = keepEnds(append(att.Reports, digest))
		} else if len(att.Reports) > KeptFirstRepeats+KeptLatestRepeats {
			// An older attempt's report replayed is recorded again (history_only), its digest is kept once.
			// A build without the bound kept it once per replay: those copies go now.
			att.Reports = keepEnds(att.Reports)
		}
		it.record(ev)
		return it, rep, nil
	}

	switch {
	case p.Outcome == OutcomeSucceeded && it.State != StateSucceeded:
		reason := ReasonRecorded
		if att.Number != it.Attempt || it.State == StateUnknown {
			reason = ReasonLateSuccess
		}
		it.State = StateSucceeded
		it.ExternalID = p.ExternalID
		if p.ReceiverRequestID != "" {
			it.ReceiverRequestID = p.ReceiverRequestID
		}
		it.Result = nil
		if len(p.Result) > MaxResultBytes {
			rep.ResultDropped = true
		} else if len(p.Result) > 0 && string(p.Result) != "null" {
			it.Result = p.Result
		}
		it.Retryable, it.RetryAt, it.LeaseExpiresAt = false, nil, nil
		it.Cause, it.FailureClass, it.FailureMessage, it.HTTPStatus = "", "", "", 0
		it.clearNeedsPerson()
		att.Outcome, att.EndedAt = StateSucceeded, timePtr(now)
		msg := "recorded: the write succeeded"
		if rep.ResultDropped {
			msg += "; the result was larger than 4 KiB and was not stored"
		}
		return finish(reason, msg)
	case p.Outcome == OutcomeSucceeded && p.ExternalID != "" && it.ExternalID != "" && p.ExternalID != it.ExternalID:
		rep.Reason = ReasonDuplicateEffect
		rep.Message = "this item already succeeded with another external id: a duplicate effect may exist; the owner is told"
		if repeat {
			return nil, rep, nil
		}
		it.DuplicateEffect = true
		it.markNeedsPerson(CauseDuplicateEffect, now)
		return finish(ReasonDuplicateEffect, rep.Message)
	case repeat && att.Number == it.Attempt:
		// Only a repeat for the current attempt is idempotent; an older attempt's repeat goes to the history.
		rep.Reason, rep.Message = ReasonUnchanged, "this report was already recorded"
		return nil, rep, nil
	case p.Outcome != OutcomeSucceeded && att.Number == it.Attempt && (it.State == StateInFlight || it.State == StateUnknown):
		dest := l.cfg.Destination(it.Destination)
		c := Classify(p.Evidence, att.Number, dest, now)
		class := p.Class
		if p.HTTPStatus != 0 {
			class = ClassHTTP
		}
		att.FailureClass, att.HTTPStatus = class, p.HTTPStatus
		it.FailureClass, it.HTTPStatus, it.FailureMessage = class, p.HTTPStatus, Redact(p.ErrorMessage)
		if p.ReceiverRequestID != "" {
			it.ReceiverRequestID = p.ReceiverRequestID
		}
		// A failure speaks for this attempt only: while an earlier attempt's outcome is unknown, the effect
		// may exist, and the item stays unknown (knowledge only grows).
		settles := c.State == StateFailed && (it.State == StateInFlight || c.Definitive)
		earlierUnknown := settles && it.earlierAttemptUnknown(att.Number)
		if settles && !earlierUnknown {
			if it.State == StateUnknown {
				// The person was needed because the outcome was unknown; definitive evidence settled it.
				it.clearNeedsPerson()
			}
			it.State, it.Retryable, it.Cause, it.LeaseExpiresAt = StateFailed, c.Retryable, "", nil
			it.RetryAt = nil
			if c.Retryable {
				it.RetryAt = timePtr(c.RetryAt)
			}
			att.Outcome, att.EndedAt = StateFailed, timePtr(now)
			if c.Retryable && !l.attemptsLeft(it, dest) {
				it.markNeedsPerson(CauseAttemptsExhausted, now)
			}
			return finish(ReasonRecorded, "recorded: the write failed and nothing was committed")
		}
		wasUnknown := it.State == StateUnknown
		it.State, it.LeaseExpiresAt = StateUnknown, nil
		it.Cause = unknownCause(p.Evidence)
		att.Outcome, att.EndedAt = StateUnknown, timePtr(now)
		msg := "recorded: the outcome is unknown; do not write again with a new key"
		if earlierUnknown {
			it.Retryable, it.RetryAt = false, nil
			it.Cause = CauseEarlierAttemptUnknown
			att.Outcome = StateFailed
			msg = "recorded: this attempt failed, but an earlier attempt's outcome is unknown, so the item stays unknown"
		}
		if !wasUnknown {
			l.enteredUnknown(it, now)
		}
		return finish(ReasonRecorded, msg)
	}
	return finish(ReasonHistoryOnly, "recorded in the history only: this report does not change the item")
}

func unknownCause(e Evidence) string {
	if e.HTTPStatus != 0 {
		return fmt.Sprintf("http_%d", e.HTTPStatus)
	}
	if e.Class != "" {
		return string(e.Class)
	}
	return CauseUnknownOutcome
}

// Findings of a reconcile lookup.
const (
	FindingFound        = "found"
	FindingAbsent       = "absent"
	FindingLookupFailed = "lookup_failed"
)

// MinEvidenceLength is the shortest evidence (after trimming) a reconcile or resolution accepts.
const MinEvidenceLength = 10

// ReconcileParams is the workflow's lookup of an unknown item's reference in the destination.
type ReconcileParams struct {
	Tenant     string
	Key        string
	Finding    string
	ExternalID string
	Evidence   string
	By         string
	// Attempt, when not 0, limits the finding to that attempt: the item must still be at it (a probe's
	// finding is about the attempt it read for).
	Attempt int
}

// Reconcile records a lookup finding for an unknown item whose recorded dedupe is lookup. found settles it
// as succeeded; absent as failed and retryable once more; lookup_failed leaves it unknown for a person. A
// finding identical to the one recorded for the current attempt answers ReasonUnchanged and writes
// nothing; on a later attempt the same finding and evidence are new evidence.
func (l *Ledger) Reconcile(ctx context.Context, p ReconcileParams) (Report, error) {
	switch {
	case !ValidKey(p.Key):
		return Report{}, Invalid("key", KeyRule)
	case p.Finding != FindingFound && p.Finding != FindingAbsent && p.Finding != FindingLookupFailed:
		return Report{}, Invalid("finding", "must be one of found, absent, lookup_failed")
	case len(strings.TrimSpace(p.Evidence)) < MinEvidenceLength:
		return Report{}, Invalid("evidence", fmt.Sprintf("must be at least %d characters", MinEvidenceLength))
	case p.Finding == FindingFound && p.ExternalID == "":
		return Report{}, Invalid("external_id", "is required when the finding is found")
	}
	evidence := EscapeControls(strings.TrimSpace(p.Evidence)) // never refused for its characters (text.go)
	var rep Report
	it, err := l.transition(ctx, p.Tenant, p.Key, func(it *Item) (*Item, error) {
		if it == nil {
			return nil, ErrNotFound
		}
		rep = Report{Attempt: it.Attempt}
		// The clock is read as the store is about to write: a lease is judged on the store's clock.
		now, err := l.leaseNow(ctx)
		if err != nil {
			return nil, err
		}
		// A finding repeats only the one recorded for the current attempt, and never while the item waits
		// for a lookup: the same evidence text for a later attempt is new evidence.
		if last := lastEvent(it, EventReconcile); last != nil && last.Attempt == it.Attempt && !awaitingLookup(it, now.Add(-l.skew)) &&
			last.Outcome == p.Finding && last.ExternalID == p.ExternalID && last.Note == evidence {
			rep.Reason, rep.Message = ReasonUnchanged, "this finding was already recorded"
			return nil, nil
		}
		l.expireLease(it, now)
		if it.State != StateUnknown || it.Dedupe != DedupeLookup || it.LookupFailed || (p.Attempt != 0 && p.Attempt != it.Attempt) {
			return nil, &Error{Code: CodeConflict, Message: fmt.Sprintf(
				"reconcile is only for an unknown item with dedupe lookup and no failed lookup; this item is %s (dedupe %s)", it.State, it.Dedupe)}
		}
		ev := Event{At: now, Kind: EventReconcile, Attempt: it.Attempt, From: it.State, Outcome: p.Finding,
			ExternalID: p.ExternalID, Note: evidence, By: p.By, Reason: ReasonRecorded}
		switch p.Finding {
		case FindingFound:
			it.State, it.ExternalID, it.Cause = StateSucceeded, p.ExternalID, ""
			it.clearNeedsPerson()
			rep.Message = "recorded: the destination has it; the item succeeded"
		case FindingAbsent:
			it.State, it.Retryable, it.RetryAt, it.Cause = StateFailed, true, timePtr(now), ""
			it.ExtraAttempts++
			it.settleUnknownAttempts(now)
			it.clearNeedsPerson()
			rep.Message = "recorded: the destination does not have it; the next before-write proceeds once with the same key"
		case FindingLookupFailed:
			it.LookupFailed, it.Cause = true, CauseLookupFailed
			it.markNeedsPerson(CauseLookupFailed, now)
			rep.Message = "recorded: the lookup failed; the item stays unknown and its owner decides"
		}
		if a := it.CurrentAttempt(); a != nil && p.Finding != FindingLookupFailed {
			a.Outcome, a.EndedAt = it.State, timePtr(now)
		}
		ev.To = it.State
		it.record(ev)
		rep.Reason = ReasonRecorded
		return it, nil
	})
	if err != nil {
		return Report{}, err
	}
	rep.Key, rep.State = it.Key, it.State
	return rep, nil
}

// awaitingLookup reports whether before-write would answer reconcile/lookup_required: the item is unknown
// (or in flight past its lease) under dedupe lookup, and no lookup failed yet.
func awaitingLookup(it *Item, now time.Time) bool {
	return (it.State == StateUnknown || it.LeaseExpired(now)) && it.Dedupe == DedupeLookup && !it.LookupFailed
}

func lastEvent(it *Item, kind string) *Event {
	for i := len(it.History) - 1; i >= 0; i-- {
		if it.History[i].Kind == kind {
			return &it.History[i]
		}
	}
	return nil
}

// Resolution outcomes an operator can give.
const (
	ResolveSucceeded    = "succeeded"
	ResolveNotCommitted = "not_committed"
	// ResolveAcknowledged: a person has seen an item that neither other outcome can settle (a duplicate
	// effect, or a retryable failure unresolved for too long) and takes it from here. Nothing changes but
	// the need for a person.
	ResolveAcknowledged = "acknowledged"
)

// ResolveParams is an operator's resolution of an item.
type ResolveParams struct {
	Tenant     string
	Key        string
	Outcome    string
	Evidence   string
	ExternalID string
	// By is who resolves: the token's name or the Slack user.
	By string
}

// CheckResolve returns the first problem of a resolution's body.
func CheckResolve(p ResolveParams) error {
	switch {
	case p.Outcome != ResolveSucceeded && p.Outcome != ResolveNotCommitted && p.Outcome != ResolveAcknowledged:
		return Invalid("outcome", "must be one of succeeded, not_committed, acknowledged")
	case len(strings.TrimSpace(p.Evidence)) < MinEvidenceLength:
		return Invalid("evidence", fmt.Sprintf("must be at least %d characters", MinEvidenceLength))
	case p.ExternalID != "" && len(p.ExternalID) > 500:
		return Invalid("external_id", "must be at most 500 characters")
	case p.ExternalID != "" && p.Outcome == ResolveAcknowledged:
		return Invalid("external_id", "must be empty when the outcome is acknowledged: an acknowledgement changes no result")
	}
	return nil
}

// Resolve settles an unknown item, or a failed one with no attempts left, on a person's evidence:
// succeeded, or not_committed (failed, retryable at once, plus one attempt). acknowledged takes a person's
// word that they have seen a succeeded item flagged duplicate_effect, or a retryable failed item flagged
// unresolved_too_long: it clears the need for a person and changes nothing else. Any other item is a
// conflict. It returns the item and ReasonUnchanged for an identical repeat: the same resolution, recorded
// for the item's current attempt, and still in force (nothing has asked for a person since).
func (l *Ledger) Resolve(ctx context.Context, p ResolveParams) (*Item, Reason, error) {
	if !ValidKey(p.Key) {
		return nil, "", Invalid("key", KeyRule)
	}
	if err := CheckResolve(p); err != nil {
		return nil, "", err
	}
	evidence := EscapeControls(strings.TrimSpace(p.Evidence)) // never refused for its characters (text.go)
	reason := ReasonRecorded
	it, err := l.transition(ctx, p.Tenant, p.Key, func(it *Item) (*Item, error) {
		if it == nil {
			return nil, ErrNotFound
		}
		reason = ReasonRecorded
		if r := it.Resolution; r != nil && it.ResolveOfCurrentAttempt() != nil && !it.NeedsPerson &&
			r.Outcome == p.Outcome && r.Evidence == evidence && r.ExternalID == p.ExternalID {
			reason = ReasonUnchanged
			return nil, nil
		}
		// The clock is read as the store is about to write: a lease is judged on the store's clock.
		now, err := l.leaseNow(ctx)
		if err != nil {
			return nil, err
		}
		// An in-flight item past its lease counts as unknown, and is recorded so.
		l.expireLease(it, now)
		ev := Event{At: now, Kind: EventResolve, Attempt: it.Attempt, From: it.State, Outcome: p.Outcome,
			ExternalID: p.ExternalID, Note: evidence, By: p.By, Reason: ReasonRecorded}
		if p.Outcome == ResolveAcknowledged {
			if !it.Acknowledgeable() {
				return nil, &Error{Code: CodeConflict, Message: fmt.Sprintf("only a succeeded item flagged duplicate_effect, or a retryable "+
					"failed item flagged unresolved_too_long, that needs a person can be acknowledged; this item is %s%s%s", it.State, flagNote(it),
					resolvedBefore(it))}
			}
		} else {
			if !l.Settleable(it) {
				return nil, &Error{Code: CodeConflict, Message: fmt.Sprintf(
					"only an unknown item, or a failed one with no attempts left, can be resolved; this item is %s%s%s", it.State, flagNote(it),
					resolvedBefore(it))}
			}
			switch p.Outcome {
			case ResolveSucceeded:
				it.State, it.Cause, it.Retryable, it.RetryAt = StateSucceeded, "", false, nil
				if p.ExternalID != "" {
					it.ExternalID = p.ExternalID
				}
			case ResolveNotCommitted:
				it.State, it.Retryable, it.RetryAt, it.Cause = StateFailed, true, timePtr(now), ""
				it.ExtraAttempts++
				it.settleUnknownAttempts(now)
			}
			if a := it.CurrentAttempt(); a != nil {
				a.Outcome, a.EndedAt = it.State, timePtr(now)
			}
		}
		it.clearNeedsPerson()
		it.AlertStatus = ""
		it.Resolution = &Resolution{Outcome: p.Outcome, Evidence: evidence, ExternalID: p.ExternalID, By: p.By, At: now}
		ev.To = it.State
		it.record(ev)
		return it, nil
	})
	if err != nil {
		return nil, "", err
	}
	return it, reason, nil
}

// Acknowledgeable reports whether resolve outcome acknowledged applies to the item: it needs a person for
// a reason that neither succeeded nor not_committed settles (a succeeded item flagged duplicate_effect, or
// a retryable failed item flagged unresolved_too_long). Slack offers the Acknowledge button on such items.
func (it *Item) Acknowledgeable() bool {
	if !it.NeedsPerson {
		return false
	}
	return (it.State == StateSucceeded && it.DuplicateEffect) ||
		(it.State == StateFailed && it.Retryable && it.NeedsPersonCause == CauseStale)
}

// Settleable reports whether Resolve takes succeeded or not_committed for the item: it is unknown, or
// failed with no attempts left. (An in-flight item past its lease counts as unknown: Resolve, and a Get,
// record it so first.)
func (l *Ledger) Settleable(it *Item) bool {
	return it.State == StateUnknown || (it.State == StateFailed && !l.attemptsLeft(it, l.cfg.Destination(it.Destination)))
}

// acknowledged reports whether a person acknowledged the item in its current attempt: the sweeper does not
// ask for a person again for the flags they acknowledged.
func (it *Item) acknowledged() bool {
	e := it.ResolveOfCurrentAttempt()
	return e != nil && e.Outcome == ResolveAcknowledged
}

// ResolveOfCurrentAttempt returns the item's last resolution event when a person recorded it in the
// item's current attempt, else nil (none, or one of an earlier attempt: a before-write started another
// since).
func (it *Item) ResolveOfCurrentAttempt() *Event {
	if e := lastEvent(it, EventResolve); e != nil && e.Attempt == it.Attempt {
		return e
	}
	return nil
}

// flagNote names what the item needs a person for, for a conflict's message.
func flagNote(it *Item) string {
	switch {
	case it.Acknowledgeable():
		return " and needs a person for " + it.NeedsPersonCause + ": resolve it as acknowledged"
	case it.NeedsPerson:
		return " and needs a person for " + it.NeedsPersonCause
	case it.DuplicateEffect:
		return " with a duplicate effect that was acknowledged"
	}
	return " and needs no person"
}

// resolvedBefore says who settled an item already resolved, for the conflict of a second resolution:
// " (resolved as not_committed by anna at 2026-11-29T19:40:00Z)", or "" for an item never resolved.
func resolvedBefore(it *Item) string {
	r := it.Resolution
	if r == nil {
		return ""
	}
	return fmt.Sprintf(" (resolved as %s by %s at %s)", r.Outcome, r.By, r.At.UTC().Format(time.RFC3339))
}
