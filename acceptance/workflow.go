package acceptance

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/replaysafe/companion/sandbox"
)

// caseRun is one case in progress: it acts as the workflow (before-write, the write, after-write,
// lookups) and records every check against the ledger and the receiver.
type caseRun struct {
	*runner
	c Case

	mu     sync.Mutex
	checks []Check
	saw    []string
}

// item is one intended business effect of a case.
type item struct {
	Key         string
	Reference   string
	Destination string
	Payload     json.RawMessage
}

// honoursKey reports whether writes to the item's destination carry the Idempotency-Key header. A
// destination that cannot dedupe has no such header to set, so a repeat reaches it as a new request.
func (it *item) honoursKey() bool { return destination(it.Destination).Dedupe == "key" }

// newItem returns the n-th item of the case, unique to this run.
func (cr *caseRun) newItem(n int, dest string) *item {
	key := fmt.Sprintf("%s.c%s:record:%d", cr.runID, cr.c.ID, n)
	ref := fmt.Sprintf("%s-%s-%d", strings.ToUpper(cr.runID), cr.c.ID, n)
	return &item{Key: key, Reference: ref, Destination: dest, Payload: payload(ref, "120.50", "c-19")}
}

// payload is the record a case writes: the payload the before-write fingerprints is exactly the body the
// write sends, so a same-key retry sends the same body.
func payload(reference, amount, recipient string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"reference":%q,"amount":%s,"recipient":%q}`, reference, amount, recipient))
}

// step is one pass of the workflow over an item: before-write, then whatever the decision calls for.
type step struct {
	// label names the step in the checks.
	label string
	// want is the expected "decision/reason"; empty checks nothing.
	want string
	// execution is the execution id sent with the before-write.
	execution string
	// payload replaces the item's payload for this pass.
	payload json.RawMessage
	// invalid: local validation refuses the write, nothing is sent.
	invalid bool
	// target replaces the receiver's address for the write (DNS failure, closed port).
	target string
	// fault is injected into the write.
	fault sandbox.Fault
	// crash: the workflow dies after the write, before its after-write.
	crash bool
	// lookupFail: the lookup of a reconcile decision fails.
	lookupFail bool
	// lost: the write never reaches the receiver, and the workflow sees a timeout.
	lost bool
}

// outcome is what one pass did.
type outcome struct {
	ans  Answer
	seen *Seen
	// report is the after-write or reconcile answer; nil when none was sent.
	report *Report
}

// maxFollowSeconds is the longest retry_after a pass waits out by itself.
const maxFollowSeconds = 10

// pass runs one step over it as a workflow would: it asks before-write and acts on the answer it gets,
// not on the one the case expects. proceed: write (with the step's fault), then report what was seen;
// reconcile: look the reference up, then report the finding; skip and conflict: do nothing. A ledger
// that answers wrongly therefore leads to the effects a real workflow would cause.
func (cr *caseRun) pass(ctx context.Context, it *item, s step) (outcome, error) {
	body := it.Payload
	if s.payload != nil {
		body = s.payload
	}
	var out outcome
	var ans Answer
	var answers []string
	for {
		var err error
		ans, err = cr.opts.Service.BeforeWrite(ctx, BeforeWrite{Key: it.Key, Payload: body, Destination: it.Destination,
			Reference: it.Reference, ExecutionID: s.execution, LeaseSeconds: cr.opts.Settings.LeaseSeconds})
		if err != nil {
			return out, err
		}
		answers = append(answers, ans.Decision+"/"+ans.Reason)
		// A workflow told to retry later comes back when told to (a scheduled retry), unless the case is
		// about that answer itself.
		if ans.Decision != "skip" || ans.Reason != "retry_later" || s.want == "skip/retry_later" ||
			len(answers) > 2 || ans.RetryAfter > maxFollowSeconds {
			break
		}
		if err := waitSeconds(ctx, ans.RetryAfter); err != nil {
			return out, err
		}
	}
	out.ans = ans
	if s.want != "" {
		cr.expect(s.label, sideLedger, s.want, strings.Join(answers, " → "))
	}
	switch ans.Decision {
	case "proceed":
		seen := cr.write(ctx, it, ans, s, body)
		out.seen = &seen
		if s.crash {
			return out, nil
		}
		rep, err := cr.opts.Service.AfterWrite(ctx, seen.Report(it.Key, ans.Claim))
		if err != nil {
			return out, err
		}
		out.report = &rep
	case "reconcile":
		rep, err := cr.reconcile(ctx, it, s.lookupFail)
		if err != nil {
			return out, err
		}
		out.report = &rep
	}
	return out, nil
}

// write sends the write a proceed calls for and records what the client saw.
func (cr *caseRun) write(ctx context.Context, it *item, ans Answer, s step, body json.RawMessage) Seen {
	var seen Seen
	switch {
	case s.invalid:
		// The workflow's own validation refuses the input: no request leaves it.
		seen = Seen{Class: "validation", Detail: "local validation: amount must be positive"}
	case s.lost:
		// A proxy in the way holds the request until the client gives up: nothing reached the receiver.
		seen = Seen{Class: "timeout", Detail: "timed out; the request never reached the receiver"}
	default:
		w := Write{Target: s.target, Body: body, Fault: s.fault, Timeout: cr.opts.Settings.WriteTimeout,
			RetryAfter: cr.opts.Settings.RetryAfterSeconds, DelayMs: cr.opts.Settings.DelayMs}
		if it.honoursKey() {
			w.IdempotencyKey = ans.IdempotencyKey
		}
		seen = cr.opts.Receiver.Write(ctx, w)
	}
	what := seen.String()
	if seen.Replayed {
		what += " (replayed)"
	}
	if s.crash {
		what += ", then the workflow died"
	}
	cr.mu.Lock()
	cr.saw = append(cr.saw, what)
	cr.mu.Unlock()
	return seen
}

// reconcile looks the item's reference up in the destination and reports the finding.
func (cr *caseRun) reconcile(ctx context.Context, it *item, fail bool) (Report, error) {
	req := Reconcile{Key: it.Key}
	records, err := cr.opts.Receiver.Lookup(ctx, it.Reference, fail)
	switch {
	case err != nil:
		req.Finding, req.Evidence = "lookup_failed", "GET /records?reference="+it.Reference+" failed: "+err.Error()
	case len(records) == 0:
		req.Finding, req.Evidence = "absent", "GET /records?reference="+it.Reference+" found no record"
	default:
		req.Finding, req.ExternalID = "found", records[0].ID
		req.Evidence = fmt.Sprintf("GET /records?reference=%s found %d record(s), first %s", it.Reference, len(records), records[0].ID)
	}
	cr.mu.Lock()
	cr.saw = append(cr.saw, "lookup: "+req.Finding)
	cr.mu.Unlock()
	return cr.opts.Service.Reconcile(ctx, req)
}

// expect records one check.
func (cr *caseRun) expect(stepLabel, side, want, got string) bool {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	ok := want == got
	cr.checks = append(cr.checks, Check{Step: stepLabel, Side: side, Expected: want, Observed: got, OK: ok})
	return ok
}

// expectSeen checks what the client saw of a write: the fault must have produced the evidence the case
// is about (a DNS failure, a reset), or the case proves nothing.
func (cr *caseRun) expectSeen(stepLabel string, out outcome, want string) {
	got := "no write"
	if out.seen != nil {
		got = out.seen.String()
	}
	cr.expect(stepLabel, sideEvidence, want, got)
}

// expectReport checks the reason of the after-write or reconcile answer of a pass.
func (cr *caseRun) expectReport(stepLabel string, out outcome, wantReason string) {
	got := "no report"
	if out.report != nil {
		got = out.report.State + "/" + out.report.Reason
	}
	cr.expect(stepLabel, sideLedger, wantReason, got)
}

// want is an expectation of an item in the ledger. Only the fields set are checked and shown.
type want struct {
	State       string
	Retryable   *bool
	Class       string
	Status      int
	Cause       string
	NeedsPerson *bool
	Attempt     int
	// ExternalID is the record id the ledger must hold.
	ExternalID string
	// Resolved is the outcome of a person's resolution.
	Resolved string
}

var (
	yes = func() *bool { b := true; return &b }()
	no  = func() *bool { b := false; return &b }()
)

// describe renders the fields w checks, with w's values and with it's.
func (w want) describe(it Item) (expected, observed string) {
	e, o := []string{w.State}, []string{it.State}
	flag := func(b bool, on, off string) string {
		if b {
			return on
		}
		return off
	}
	if w.Retryable != nil {
		e, o = append(e, flag(*w.Retryable, "retryable", "permanent")), append(o, flag(it.Retryable, "retryable", "permanent"))
	}
	if w.Class != "" {
		e, o = append(e, "class "+w.Class), append(o, "class "+orNone(it.FailureClass))
	}
	if w.Status != 0 {
		e, o = append(e, "http "+strconv.Itoa(w.Status)), append(o, "http "+strconv.Itoa(it.HTTPStatus))
	}
	if w.Cause != "" {
		e, o = append(e, "cause "+w.Cause), append(o, "cause "+orNone(it.Cause))
	}
	if w.NeedsPerson != nil {
		e, o = append(e, flag(*w.NeedsPerson, "needs person", "no person")), append(o, flag(it.NeedsPerson, "needs person", "no person"))
	}
	if w.Attempt != 0 {
		e, o = append(e, "attempt "+strconv.Itoa(w.Attempt)), append(o, "attempt "+strconv.Itoa(it.Attempt))
	}
	if w.ExternalID != "" {
		e, o = append(e, "external_id "+w.ExternalID), append(o, "external_id "+orNone(it.ExternalID))
	}
	if w.Resolved != "" {
		got := "none"
		if it.Resolution != nil {
			got = it.Resolution.Outcome
		}
		e, o = append(e, "resolved "+w.Resolved), append(o, "resolved "+got)
	}
	return strings.Join(e, ", "), strings.Join(o, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// expectItem reads the item from the ledger (GET /v1/items/{key}) and checks it.
func (cr *caseRun) expectItem(ctx context.Context, stepLabel string, it *item, w want) error {
	got, err := cr.opts.Service.Item(ctx, it.Key)
	if err != nil {
		return err
	}
	e, o := w.describe(got)
	cr.expect(stepLabel, sideLedger, e, o)
	return nil
}

// expectEffects reads GET /effects and checks the number of records created per item, by business
// reference. For items whose writes carry the idempotency key, the count per key must agree: a record
// under the reference but another key would be a duplicate made with a fresh key.
func (cr *caseRun) expectEffects(ctx context.Context, stepLabel string, want []int, items ...*item) error {
	eff, err := cr.opts.Receiver.Effects(ctx)
	if err != nil {
		return err
	}
	ws, gs := make([]string, len(items)), make([]string, len(items))
	for i, it := range items {
		ws[i], gs[i] = strconv.Itoa(want[i]), strconv.Itoa(eff.ByReference[it.Reference])
	}
	cr.expect(stepLabel, sideEffects, strings.Join(ws, ","), strings.Join(gs, ","))
	return nil
}

// recordOf returns the id of the first record the receiver holds under it's reference, "" when none.
func (cr *caseRun) recordOf(ctx context.Context, it *item) (string, error) {
	records, err := cr.opts.Receiver.Lookup(ctx, it.Reference, false)
	if err != nil {
		return "", err
	}
	if len(records) == 0 {
		return "", nil
	}
	return records[0].ID, nil
}

// sleep waits d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitSeconds waits the retry_after of an answer (whole seconds, rounded up by the service) plus a margin
// for the clocks of two processes.
func waitSeconds(ctx context.Context, seconds int) error {
	return sleep(ctx, time.Duration(seconds)*time.Second+250*time.Millisecond)
}
