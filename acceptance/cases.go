package acceptance

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/replaysafe/companion/sandbox"
)

// Case is one fixture of the suite: an injected situation, the workflow's passes over it, and what the
// ledger and the receiver must show afterwards.
type Case struct {
	// ID is "1".."12" for the cases of seed 000's table, "13" and up for the cases this suite adds.
	ID string
	// Title is the injected situation, in the seed's words where the seed has the case.
	Title string
	// Fault is the fault and the boundary it is injected at.
	Fault string
	// Slow cases wait out a lease; they start first so that they overlap.
	Slow bool
	// Exclusive cases change the receiver's mode for every key, so they run alone, last.
	Exclusive bool
	// run is the case's script: the workflow's passes and the checks.
	run func(context.Context, *caseRun) error
}

// ConcurrencyCase is the id of the case with simultaneous duplicate triggers: the one a store without
// atomic conditional updates (FerretDB) cannot pass.
const ConcurrencyCase = "14"

// Cases returns the suite's cases in order.
func Cases() []Case {
	return []Case{
		{ID: "1", Title: "Input validation rejects before dispatch", Fault: "local validation refuses the input @ before dispatch", run: caseValidation},
		{ID: "2", Title: "DNS lookup fails before the client can connect", Fault: "host under .invalid @ before connection", run: caseDNS},
		{ID: "3", Title: "Receiver returns a documented 429 before processing", Fault: "reject_429, Retry-After 1 @ before_commit", run: case429},
		{ID: "4", Title: "Receiver returns a permanent 400 validation rejection", Fault: "reject_400 @ before_commit", run: case400},
		{ID: "5", Title: "Receiver commits, then response is dropped", Fault: "commit_then_drop @ after_commit", run: caseCommitThenDrop},
		{ID: "6", Title: "Receiver returns success; workflow crashes before ledger result is saved", Fault: "workflow dies @ after the response, before after-write", Slow: true, run: caseCrashBeforeAfterWrite},
		{ID: "7", Title: "Receiver returns success and ledger persists, then later node fails", Fault: "later node fails @ after after-write", run: caseLaterNodeFails},
		{ID: "8", Title: "Batch of three items commits first two; third returns error", Fault: "item 3: reject_500 @ before_commit", run: caseBatch},
		{ID: "9", Title: "Same operation key is replayed with identical payload", Fault: "none: two replays, payload reformatted", run: caseIdenticalReplay},
		{ID: "10", Title: "Same key is replayed with a changed amount or recipient", Fault: "none: same key, amount then recipient changed", run: caseChangedPayload},
		{ID: "11", Title: "Operator clicks retry on both original and retry execution", Fault: "none: two executions claim one item", run: caseTwoRetryOwners},
		{ID: "12", Title: "Receiver has no key and lookup returns no reliable result", Fault: "commit_then_delay > client timeout @ after_commit", run: caseNoKeyNoLookup},
		{ID: "13", Title: "Connection refused before the request is sent", Fault: "closed loopback port @ before connection", run: caseConnectionRefused},
		{ID: ConcurrencyCase, Title: "Simultaneous duplicate triggers of one item", Fault: "none: simultaneous before-writes, destination without dedupe", run: caseConcurrentTriggers},
		{ID: "15", Title: "Lease expires with no after-write, destination without dedupe", Fault: "workflow dies @ after dispatch; lease expires", Slow: true, run: caseLeaseExpiryNoDedupe},
		{ID: "16", Title: "Late success reported after the lease expired", Fault: "after-write delayed @ past the lease", Slow: true, run: caseLateSuccess},
		{ID: "17", Title: "Lookup-based reconcile finds the record", Fault: "commit_then_500 @ after_commit", run: caseLookupFound},
		{ID: "18", Title: "Lookup-based reconcile finds nothing", Fault: "reject_500 @ before_commit", run: caseLookupAbsent},
		{ID: "19", Title: "Lookup-based reconcile: the lookup fails", Fault: "commit_then_drop @ after_commit; lookup_fail @ lookup", run: caseLookupFails},
		{ID: "20", Title: "Key reuse after the receiver forgot the key", Fault: "commit_then_drop @ after_commit; receiver keeps keys 1 s", Exclusive: true, run: caseKeyRetention},
		{ID: "21", Title: "The service's probe finds a committed write", Fault: "commit_then_drop @ after_commit; no workflow call after", Slow: true, run: caseProbeFound},
		{ID: "22", Title: "The service's probe settles a lost write absent after the last delay", Fault: "write lost before the receiver @ before commit", Slow: true, run: caseProbeAbsent},
		{ID: "23", Title: "The service's probes meet a failing lookup", Fault: "commit_then_drop @ after_commit; lookup_500 @ lookup", Slow: true, run: caseProbeLookupFails},
	}
}

// Case 1: the workflow's own validation refuses the input, so nothing is sent; the corrected input is a
// new attempt under the same intent, allowed only because no request was sent.
func caseValidation(ctx context.Context, cr *caseRun) error {
	it := cr.newItem(1, DestinationKey)
	bad := payload(it.Reference, "-5", "c-19")
	out, err := cr.pass(ctx, it, step{label: "invalid input", want: "proceed/new", payload: bad, invalid: true})
	if err != nil {
		return err
	}
	cr.expectSeen("invalid input", out, "validation")
	if err := cr.expectItem(ctx, "after the local rejection", it, want{State: "failed", Retryable: yes, Class: "validation"}); err != nil {
		return err
	}
	if err := cr.expectEffects(ctx, "after the local rejection", []int{0}, it); err != nil {
		return err
	}
	if _, err := cr.pass(ctx, it, step{label: "corrected input", want: "proceed/retry"}); err != nil {
		return err
	}
	return cr.finish(ctx, "after the corrected write", it, want{State: "succeeded", Attempt: 2}, 1)
}

// Case 2: the name does not resolve, so nothing was sent: a bounded retry after the backoff.
func caseDNS(ctx context.Context, cr *caseRun) error {
	return cr.failsBeforeConnecting(ctx, "http://receiver.acceptance.invalid", "dns")
}

// Case 13: the port is closed, so nothing was sent: a bounded retry after the backoff.
func caseConnectionRefused(ctx context.Context, cr *caseRun) error {
	target, err := closedPort()
	if err != nil {
		return err
	}
	return cr.failsBeforeConnecting(ctx, target, "connection_refused")
}

// failsBeforeConnecting writes to target, which fails before a connection exists, then retries once the
// ledger allows it.
func (cr *caseRun) failsBeforeConnecting(ctx context.Context, target, class string) error {
	it := cr.newItem(1, DestinationKey)
	out, err := cr.pass(ctx, it, step{label: "write", want: "proceed/new", target: target})
	if err != nil {
		return err
	}
	cr.expectSeen("write", out, class)
	// An immediate replay must wait for the backoff; then the same intent proceeds once more. The replay
	// comes right after the failure, before the checks below: the first backoff is only 0.8-1.2 s, and
	// on a slow machine (the race detector, a loaded CI runner) the checks alone can take that long.
	replay, err := cr.pass(ctx, it, step{label: "immediate replay", want: "skip/retry_later"})
	if err != nil {
		return err
	}
	if err := cr.expectItem(ctx, "after the failure", it, want{State: "failed", Retryable: yes, Class: class}); err != nil {
		return err
	}
	if err := cr.expectEffects(ctx, "after the failure", []int{0}, it); err != nil {
		return err
	}
	if err := waitSeconds(ctx, replay.ans.RetryAfter); err != nil {
		return err
	}
	if _, err := cr.pass(ctx, it, step{label: "replay after the backoff", want: "proceed/retry"}); err != nil {
		return err
	}
	return cr.finish(ctx, "after the retry", it, want{State: "succeeded", Attempt: 2}, 1)
}

// Case 3: a 429 before commit is a retryable failure at exactly Retry-After, under the same key.
func case429(ctx context.Context, cr *caseRun) error {
	it := cr.newItem(1, DestinationKey)
	first, err := cr.pass(ctx, it, step{label: "write", want: "proceed/new", fault: sandbox.FaultReject429})
	if err != nil {
		return err
	}
	cr.expectSeen("write", first, fmt.Sprintf("429 retry-after %d", cr.opts.Settings.RetryAfterSeconds))
	if err := cr.expectItem(ctx, "after the 429", it, want{State: "failed", Retryable: yes, Status: 429}); err != nil {
		return err
	}
	if err := cr.expectEffects(ctx, "after the 429", []int{0}, it); err != nil {
		return err
	}
	out, err := cr.pass(ctx, it, step{label: "immediate replay", want: "skip/retry_later"})
	if err != nil {
		return err
	}
	if err := waitSeconds(ctx, out.ans.RetryAfter); err != nil {
		return err
	}
	out, err = cr.pass(ctx, it, step{label: "replay after Retry-After", want: "proceed/retry"})
	if err != nil {
		return err
	}
	cr.expect("replay after Retry-After", sideEvidence, "same idempotency key", sameKey(first.ans, out.ans))
	return cr.finish(ctx, "after the retry", it, want{State: "succeeded", Attempt: 2}, 1)
}

// Case 4: a 400 is a permanent refusal; no replay writes again.
func case400(ctx context.Context, cr *caseRun) error {
	it := cr.newItem(1, DestinationKey)
	out, err := cr.pass(ctx, it, step{label: "write", want: "proceed/new", fault: sandbox.FaultReject400})
	if err != nil {
		return err
	}
	cr.expectSeen("write", out, "400")
	if err := cr.expectItem(ctx, "after the 400", it, want{State: "failed", Retryable: no, Status: 400}); err != nil {
		return err
	}
	if err := cr.expectEffects(ctx, "after the 400", []int{0}, it); err != nil {
		return err
	}
	if _, err := cr.pass(ctx, it, step{label: "replay", want: "skip/failed_permanent"}); err != nil {
		return err
	}
	return cr.finish(ctx, "after the replay", it, want{State: "failed", Retryable: no}, 0)
}

// Case 5: the receiver committed and the answer was lost: unknown, then a same-key retry, which the
// receiver answers with the first result.
func caseCommitThenDrop(ctx context.Context, cr *caseRun) error {
	it := cr.newItem(1, DestinationKey)
	out, err := cr.pass(ctx, it, step{label: "write", want: "proceed/new", fault: sandbox.FaultCommitThenDrop})
	if err != nil {
		return err
	}
	cr.expectSeen("write", out, "connection_reset")
	if err := cr.expectItem(ctx, "after the dropped response", it, want{State: "unknown", Class: "connection_reset"}); err != nil {
		return err
	}
	if err := cr.expectEffects(ctx, "after the dropped response", []int{1}, it); err != nil {
		return err
	}
	out, err = cr.pass(ctx, it, step{label: "same-key replay", want: "proceed/retry_same_key"})
	if err != nil {
		return err
	}
	cr.expectSeen("same-key replay", out, "201")
	return cr.finishWithRecord(ctx, "after the replay", it, want{State: "succeeded", Attempt: 2}, 1)
}

// Case 6: the receiver answered 201 but the workflow died before its after-write: in_flight while the
// lease lives, unknown after it, then a same-key replay that the receiver answers with the first result.
func caseCrashBeforeAfterWrite(ctx context.Context, cr *caseRun) error {
	it := cr.newItem(1, DestinationKey)
	out, err := cr.pass(ctx, it, step{label: "write", want: "proceed/new", crash: true})
	if err != nil {
		return err
	}
	cr.expectSeen("write", out, "201")
	if err := cr.expectItem(ctx, "on recovery", it, want{State: "in_flight"}); err != nil {
		return err
	}
	if err := cr.expectEffects(ctx, "on recovery", []int{1}, it); err != nil {
		return err
	}
	out, err = cr.pass(ctx, it, step{label: "replay while the lease lives", want: "skip/in_progress"})
	if err != nil {
		return err
	}
	if err := waitSeconds(ctx, out.ans.RetryAfter); err != nil {
		return err
	}
	if err := cr.expectItem(ctx, "after the lease", it, want{State: "unknown", Cause: "lease_expired"}); err != nil {
		return err
	}
	out, err = cr.pass(ctx, it, step{label: "recovery replay", want: "proceed/retry_same_key"})
	if err != nil {
		return err
	}
	cr.expectSeen("recovery replay", out, "201")
	return cr.finishWithRecord(ctx, "after the recovery", it, want{State: "succeeded", Attempt: 2}, 1)
}

// Case 7: the result is stored; a rerun after a later node failed reuses it and skips the write.
func caseLaterNodeFails(ctx context.Context, cr *caseRun) error {
	it := cr.newItem(1, DestinationKey)
	if _, err := cr.pass(ctx, it, step{label: "write", want: "proceed/new"}); err != nil {
		return err
	}
	if err := cr.expectItem(ctx, "after the write", it, want{State: "succeeded"}); err != nil {
		return err
	}
	// The later node fails; the execution is retried from the start.
	out, err := cr.pass(ctx, it, step{label: "rerun", want: "skip/succeeded"})
	if err != nil {
		return err
	}
	rec, err := cr.recordOf(ctx, it)
	if err != nil {
		return err
	}
	cr.expect("rerun", sideEvidence, "stored external_id "+orNone(rec), "stored external_id "+orNone(out.ans.ExternalID))
	return cr.finishWithRecord(ctx, "after the rerun", it, want{State: "succeeded", Attempt: 1}, 1)
}

// Case 8: a batch node writes three items, the third fails; the node is retried with all three, and only
// the third is written again.
func caseBatch(ctx context.Context, cr *caseRun) error {
	its := []*item{cr.newItem(1, DestinationKey), cr.newItem(2, DestinationKey), cr.newItem(3, DestinationKey)}
	batchID := cr.runID + ":case 8:Create records"
	faults := []sandbox.Fault{"", "", sandbox.FaultReject500}
	run := func(label string, wantDecisions []string) error {
		reqs := make([]BeforeWrite, len(its))
		for i, it := range its {
			reqs[i] = BeforeWrite{Key: it.Key, Payload: it.Payload, Destination: it.Destination, Reference: it.Reference,
				ExecutionID: label, LeaseSeconds: cr.opts.Settings.LeaseSeconds}
		}
		answers, err := cr.opts.Service.BatchBeforeWrite(ctx, batchID, reqs)
		if err != nil {
			return err
		}
		got := make([]string, len(answers))
		var reports []AfterWrite
		for i, ans := range answers {
			got[i] = ans.Decision + "/" + ans.Reason
			if ans.Decision != "proceed" {
				continue
			}
			s := step{label: label}
			if label == "first run" {
				s.fault = faults[i]
			}
			seen := cr.write(ctx, its[i], ans, s, its[i].Payload)
			reports = append(reports, seen.Report(its[i].Key, ans.Claim))
		}
		cr.expect(label, sideLedger, strings.Join(wantDecisions, ", "), strings.Join(got, ", "))
		if len(reports) == 0 {
			return nil
		}
		results, err := cr.opts.Service.BatchAfterWrite(ctx, reports)
		if err != nil {
			return err
		}
		for _, r := range results {
			if r.Error != nil {
				return fmt.Errorf("batch after-write refused %s: %v", r.Key, r.Error)
			}
		}
		return nil
	}
	if err := run("first run", []string{"proceed/new", "proceed/new", "proceed/new"}); err != nil {
		return err
	}
	if err := cr.expectBatch(ctx, "after the first run", its, []string{"succeeded", "succeeded", "unknown"}); err != nil {
		return err
	}
	if err := cr.expectEffects(ctx, "before recovery", []int{1, 1, 0}, its...); err != nil {
		return err
	}
	if err := run("node retried with all items", []string{"skip/succeeded", "skip/succeeded", "proceed/retry_same_key"}); err != nil {
		return err
	}
	status, err := cr.opts.Service.Batch(ctx, batchID)
	if err != nil {
		return err
	}
	cr.expect("batch status", sideLedger, "3 succeeded", fmt.Sprintf("%d succeeded", status.Counts["succeeded"]))
	if err := cr.expectBatch(ctx, "after recovery", its, []string{"succeeded", "succeeded", "succeeded"}); err != nil {
		return err
	}
	return cr.expectEffects(ctx, "after recovery", []int{1, 1, 1}, its...)
}

// expectBatch checks the states of several items at once.
func (cr *caseRun) expectBatch(ctx context.Context, stepLabel string, its []*item, states []string) error {
	got := make([]string, len(its))
	for i, it := range its {
		item, err := cr.opts.Service.Item(ctx, it.Key)
		if err != nil {
			return err
		}
		got[i] = item.State
	}
	cr.expect(stepLabel, sideLedger, strings.Join(states, ", "), strings.Join(got, ", "))
	return nil
}

// Case 9: replays of the same intent (the payload only reformatted) get the stored result.
func caseIdenticalReplay(ctx context.Context, cr *caseRun) error {
	it := cr.newItem(1, DestinationKey)
	if _, err := cr.pass(ctx, it, step{label: "write", want: "proceed/new"}); err != nil {
		return err
	}
	// The same JSON object, members reordered and spaced: the canonical fingerprint is the same.
	var m map[string]any
	if err := json.Unmarshal(it.Payload, &m); err != nil {
		return err
	}
	reformatted := json.RawMessage(fmt.Sprintf(`{ "recipient": %q, "amount": 120.50, "reference": %q }`, m["recipient"], m["reference"]))
	for _, label := range []string{"first replay", "second replay"} {
		if _, err := cr.pass(ctx, it, step{label: label, want: "skip/succeeded", payload: reformatted}); err != nil {
			return err
		}
	}
	return cr.finishWithRecord(ctx, "after the replays", it, want{State: "succeeded", Attempt: 1}, 1)
}

// Case 10: the same key with a changed amount, then a changed recipient, fails closed.
func caseChangedPayload(ctx context.Context, cr *caseRun) error {
	it := cr.newItem(1, DestinationKey)
	if _, err := cr.pass(ctx, it, step{label: "write", want: "proceed/new"}); err != nil {
		return err
	}
	if _, err := cr.pass(ctx, it, step{label: "changed amount", want: "conflict/fingerprint_mismatch",
		payload: payload(it.Reference, "999.00", "c-19")}); err != nil {
		return err
	}
	if _, err := cr.pass(ctx, it, step{label: "changed recipient", want: "conflict/fingerprint_mismatch",
		payload: payload(it.Reference, "120.50", "c-77")}); err != nil {
		return err
	}
	return cr.finishWithRecord(ctx, "after the changed replays", it, want{State: "succeeded", Attempt: 1}, 1)
}

// Case 11: the original execution holds the claim while a retried execution asks: the second caller
// observes in_progress, and after the original reported, reuses its result.
func caseTwoRetryOwners(ctx context.Context, cr *caseRun) error {
	it := cr.newItem(1, DestinationNone)
	ans, err := cr.opts.Service.BeforeWrite(ctx, BeforeWrite{Key: it.Key, Payload: it.Payload, Destination: it.Destination,
		Reference: it.Reference, ExecutionID: "original", LeaseSeconds: cr.opts.Settings.LeaseSeconds})
	if err != nil {
		return err
	}
	cr.expect("original claims", sideLedger, "proceed/new", ans.Decision+"/"+ans.Reason)
	if _, err := cr.pass(ctx, it, step{label: "retry execution while the original writes", want: "skip/in_progress", execution: "retry"}); err != nil {
		return err
	}
	if ans.Decision == "proceed" {
		seen := cr.write(ctx, it, ans, step{}, it.Payload)
		if _, err := cr.opts.Service.AfterWrite(ctx, seen.Report(it.Key, ans.Claim)); err != nil {
			return err
		}
	}
	if _, err := cr.pass(ctx, it, step{label: "retry execution again", want: "skip/succeeded", execution: "retry"}); err != nil {
		return err
	}
	return cr.finishWithRecord(ctx, "after both executions", it, want{State: "succeeded", Attempt: 1}, 1)
}

// Case 12: the answer came too late (a timeout after dispatch) from a destination with no key and no
// lookup: unknown, for a person; replays send nothing.
func caseNoKeyNoLookup(ctx context.Context, cr *caseRun) error {
	it := cr.newItem(1, DestinationNone)
	out, err := cr.pass(ctx, it, step{label: "write", want: "proceed/new", fault: sandbox.FaultCommitThenDelay})
	if err != nil {
		return err
	}
	cr.expectSeen("write", out, "timeout")
	if err := cr.expectItem(ctx, "after the timeout", it, want{State: "unknown", Class: "timeout", NeedsPerson: yes}); err != nil {
		return err
	}
	if err := cr.expectEffects(ctx, "after the timeout", []int{1}, it); err != nil {
		return err
	}
	for _, label := range []string{"first replay", "second replay"} {
		if _, err := cr.pass(ctx, it, step{label: label, want: "skip/awaiting_owner"}); err != nil {
			return err
		}
	}
	return cr.finish(ctx, "after the replays", it, want{State: "unknown", NeedsPerson: yes}, 1)
}

// Case 14: many triggers of one item at once, to a destination that cannot dedupe: exactly one claim,
// one write, one effect. Twice: on a new item (the race to create it) and on an existing one whose
// first attempt failed before dispatch (the race to change it, a compare-and-set on its version).
func caseConcurrentTriggers(ctx context.Context, cr *caseRun) error {
	fresh, existing := cr.newItem(1, DestinationNone), cr.newItem(2, DestinationNone)
	n := cr.opts.Settings.Triggers
	if err := cr.triggers(ctx, fresh, n, fmt.Sprintf("1× proceed/new, %d× skip/in_progress", n-1)); err != nil {
		return err
	}
	bad := payload(existing.Reference, "-5", "c-19")
	if _, err := cr.pass(ctx, existing, step{label: "existing item: invalid input", want: "proceed/new", payload: bad, invalid: true}); err != nil {
		return err
	}
	if err := cr.triggers(ctx, existing, n, fmt.Sprintf("1× proceed/retry, %d× skip/in_progress", n-1)); err != nil {
		return err
	}
	if err := cr.expectBatch(ctx, "after the triggers", []*item{fresh, existing}, []string{"succeeded", "succeeded"}); err != nil {
		return err
	}
	return cr.expectEffects(ctx, "after the triggers", []int{1, 1}, fresh, existing)
}

// triggers sends n before-writes for it at once and checks the tally of their answers. Every answer is
// in before any trigger writes, so the losers all observe the claim in progress; then every trigger
// told to proceed writes and reports, as its workflow would.
func (cr *caseRun) triggers(ctx context.Context, it *item, n int, wantTally string) error {
	answers := make([]Answer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			answers[i], errs[i] = cr.opts.Service.BeforeWrite(ctx, BeforeWrite{Key: it.Key, Payload: it.Payload,
				Destination: it.Destination, Reference: it.Reference, ExecutionID: fmt.Sprintf("trigger-%d", i+1),
				LeaseSeconds: cr.opts.Settings.LeaseSeconds})
		})
	}
	close(start)
	wg.Wait()
	counts := map[string]int{}
	for i, ans := range answers {
		if errs[i] != nil {
			return errs[i]
		}
		counts[ans.Decision+"/"+ans.Reason]++
	}
	cr.expect(fmt.Sprintf("%d simultaneous triggers", n), sideLedger, wantTally, tally(counts))
	for _, ans := range answers {
		if ans.Decision != "proceed" {
			continue
		}
		seen := cr.write(ctx, it, ans, step{}, it.Payload)
		// A second winner's report may be refused (its claim was overwritten); the case goes on to count
		// the effects, which is what shows the damage.
		if _, err := cr.opts.Service.AfterWrite(ctx, seen.Report(it.Key, ans.Claim)); err != nil {
			cr.expect("after-write of "+ans.Claim, sideEvidence, "recorded", err.Error())
		}
	}
	return nil
}

// tally renders decision counts, proceed first.
func tally(counts map[string]int) string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		pi, pj := strings.HasPrefix(keys[i], "proceed"), strings.HasPrefix(keys[j], "proceed")
		if pi != pj {
			return pi
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d× %s", counts[k], k)
	}
	return strings.Join(parts, ", ")
}

// Case 15: the workflow died after dispatch and never reported; its lease expires: unknown, for a
// person, and never sent again to a destination that cannot dedupe.
func caseLeaseExpiryNoDedupe(ctx context.Context, cr *caseRun) error {
	it := cr.newItem(1, DestinationNone)
	if _, err := cr.pass(ctx, it, step{label: "write", want: "proceed/new", crash: true}); err != nil {
		return err
	}
	out, err := cr.pass(ctx, it, step{label: "replay while the lease lives", want: "skip/in_progress"})
	if err != nil {
		return err
	}
	if err := cr.expectEffects(ctx, "while the lease lives", []int{1}, it); err != nil {
		return err
	}
	if err := waitSeconds(ctx, out.ans.RetryAfter); err != nil {
		return err
	}
	if err := cr.expectItem(ctx, "after the lease", it, want{State: "unknown", Cause: "lease_expired", NeedsPerson: yes}); err != nil {
		return err
	}
	for _, label := range []string{"first replay", "second replay"} {
		if _, err := cr.pass(ctx, it, step{label: label, want: "skip/awaiting_owner"}); err != nil {
			return err
		}
	}
	return cr.finish(ctx, "after the replays", it, want{State: "unknown", NeedsPerson: yes}, 1)
}

// Case 16: the write succeeded but its after-write arrived only after the lease had expired and the item
// was recorded unknown: the late success wins, because knowledge only grows.
func caseLateSuccess(ctx context.Context, cr *caseRun) error {
	it := cr.newItem(1, DestinationNone)
	out, err := cr.pass(ctx, it, step{label: "write", want: "proceed/new", crash: true})
	if err != nil {
		return err
	}
	claim, seen := out.ans.Claim, out.seen
	held, err := cr.pass(ctx, it, step{label: "replay while the lease lives", want: "skip/in_progress"})
	if err != nil {
		return err
	}
	if err := waitSeconds(ctx, held.ans.RetryAfter); err != nil {
		return err
	}
	if err := cr.expectItem(ctx, "after the lease", it, want{State: "unknown", Cause: "lease_expired"}); err != nil {
		return err
	}
	if _, err := cr.pass(ctx, it, step{label: "replay after the lease", want: "skip/awaiting_owner"}); err != nil {
		return err
	}
	if seen == nil {
		return fmt.Errorf("the first pass did not write")
	}
	rep, err := cr.opts.Service.AfterWrite(ctx, seen.Report(it.Key, claim))
	if err != nil {
		return err
	}
	cr.expectReport("late after-write", outcome{report: &rep}, "succeeded/late_success")
	return cr.finishWithRecord(ctx, "after the late success", it, want{State: "succeeded", NeedsPerson: no}, 1)
}

// Case 17: a 500 after commit from a destination searchable by reference: the lookup finds the record.
func caseLookupFound(ctx context.Context, cr *caseRun) error {
	it := cr.newItem(1, DestinationLookup)
	out, err := cr.pass(ctx, it, step{label: "write", want: "proceed/new", fault: sandbox.FaultCommitThen500})
	if err != nil {
		return err
	}
	cr.expectSeen("write", out, "500")
	if err := cr.expectItem(ctx, "after the 500", it, want{State: "unknown", Status: 500}); err != nil {
		return err
	}
	if err := cr.expectEffects(ctx, "after the 500", []int{1}, it); err != nil {
		return err
	}
	out, err = cr.pass(ctx, it, step{label: "replay", want: "reconcile/lookup_required"})
	if err != nil {
		return err
	}
	cr.expectReport("reconcile found", out, "succeeded/recorded")
	if _, err := cr.pass(ctx, it, step{label: "replay after reconcile", want: "skip/succeeded"}); err != nil {
		return err
	}
	return cr.finishWithRecord(ctx, "after the reconcile", it, want{State: "succeeded", Attempt: 1}, 1)
}

// Case 18: the same 500, but this time before commit: the lookup finds nothing, and the item is written
// once more.
func caseLookupAbsent(ctx context.Context, cr *caseRun) error {
	it := cr.newItem(1, DestinationLookup)
	out, err := cr.pass(ctx, it, step{label: "write", want: "proceed/new", fault: sandbox.FaultReject500})
	if err != nil {
		return err
	}
	cr.expectSeen("write", out, "500")
	if err := cr.expectItem(ctx, "after the 500", it, want{State: "unknown", Status: 500}); err != nil {
		return err
	}
	if err := cr.expectEffects(ctx, "after the 500", []int{0}, it); err != nil {
		return err
	}
	out, err = cr.pass(ctx, it, step{label: "replay", want: "reconcile/lookup_required"})
	if err != nil {
		return err
	}
	cr.expectReport("reconcile absent", out, "failed/recorded")
	if _, err := cr.pass(ctx, it, step{label: "replay after reconcile", want: "proceed/retry"}); err != nil {
		return err
	}
	return cr.finishWithRecord(ctx, "after the retry", it, want{State: "succeeded", Attempt: 2}, 1)
}

// Case 19: the lookup itself fails: the item stays unknown for a person, nothing is sent automatically;
// the owner checks the destination and resolves it on that evidence.
func caseLookupFails(ctx context.Context, cr *caseRun) error {
	it := cr.newItem(1, DestinationLookup)
	out, err := cr.pass(ctx, it, step{label: "write", want: "proceed/new", fault: sandbox.FaultCommitThenDrop})
	if err != nil {
		return err
	}
	cr.expectSeen("write", out, "connection_reset")
	out, err = cr.pass(ctx, it, step{label: "replay", want: "reconcile/lookup_required", lookupFail: true})
	if err != nil {
		return err
	}
	cr.expectReport("reconcile lookup_failed", out, "unknown/recorded")
	if err := cr.expectItem(ctx, "after the failed lookup", it, want{State: "unknown", Cause: "lookup_failed", NeedsPerson: yes}); err != nil {
		return err
	}
	if err := cr.expectEffects(ctx, "after the failed lookup", []int{1}, it); err != nil {
		return err
	}
	if _, err := cr.pass(ctx, it, step{label: "replay after the failed lookup", want: "skip/awaiting_owner"}); err != nil {
		return err
	}
	// The owner looks in the destination and records what they found.
	rec, err := cr.recordOf(ctx, it)
	if err != nil {
		return err
	}
	if rec == "" {
		return fmt.Errorf("the owner's lookup of %s found no record", it.Reference)
	}
	rep, err := cr.opts.Service.Resolve(ctx, it.Key, Resolve{Outcome: "succeeded", ExternalID: rec,
		Evidence: "owner found " + rec + " in the sandbox receiver under reference " + it.Reference})
	if err != nil {
		return err
	}
	cr.expect("owner resolves", sideLedger, "succeeded", rep.State)
	return cr.finishWithRecord(ctx, "after the resolution", it, want{State: "succeeded", Resolved: "succeeded", NeedsPerson: no}, 1)
}

// Case 20: an unknown outcome under a key the receiver has forgotten by the time of the replay: the
// ledger must not retry with that key (the receiver would take it as new), and waits for a person.
func caseKeyRetention(ctx context.Context, cr *caseRun) (err error) {
	before, err := cr.opts.Receiver.Mode(ctx)
	if err != nil {
		return err
	}
	if err := cr.opts.Receiver.SetKeyRetention(ctx, ReceiverRetentionSeconds); err != nil {
		return err
	}
	defer func() {
		restore := int64(0)
		if before.KeyRetentionSeconds != nil {
			restore = *before.KeyRetentionSeconds
		}
		if rerr := cr.opts.Receiver.SetKeyRetention(context.WithoutCancel(ctx), restore); rerr != nil && err == nil {
			err = rerr
		}
	}()
	it := cr.newItem(1, DestinationRetention)
	out, err := cr.pass(ctx, it, step{label: "write", want: "proceed/new", fault: sandbox.FaultCommitThenDrop})
	if err != nil {
		return err
	}
	cr.expectSeen("write", out, "connection_reset")
	if err := cr.expectEffects(ctx, "after the dropped response", []int{1}, it); err != nil {
		return err
	}
	// Past the retention of both the receiver and the destination's configuration.
	if err := sleep(ctx, ReceiverRetentionSeconds*time.Second+500*time.Millisecond); err != nil {
		return err
	}
	if _, err := cr.pass(ctx, it, step{label: "replay after the key expired", want: "skip/awaiting_owner"}); err != nil {
		return err
	}
	return cr.finish(ctx, "after the replay", it, want{State: "unknown", NeedsPerson: yes, Attempt: 1}, 1)
}

// finish makes a case's last checks: the item in the ledger and its effects at the receiver.
func (cr *caseRun) finish(ctx context.Context, stepLabel string, it *item, w want, effects int) error {
	if err := cr.expectItem(ctx, stepLabel, it, w); err != nil {
		return err
	}
	return cr.expectEffects(ctx, stepLabel, []int{effects}, it)
}

// finishWithRecord is finish for an item that must hold the id of the record the receiver created.
func (cr *caseRun) finishWithRecord(ctx context.Context, stepLabel string, it *item, w want, effects int) error {
	rec, err := cr.recordOf(ctx, it)
	if err != nil {
		return err
	}
	w.ExternalID = orNone(rec)
	return cr.finish(ctx, stepLabel, it, w, effects)
}

// sameKey says whether two answers carry the same idempotency key.
func sameKey(a, b Answer) string {
	if a.IdempotencyKey != "" && a.IdempotencyKey == b.IdempotencyKey {
		return "same idempotency key"
	}
	return fmt.Sprintf("%q then %q", a.IdempotencyKey, b.IdempotencyKey)
}

// closedPort returns the URL of a loopback port nothing listens on: a connection to it is refused.
func closedPort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return "", err
	}
	return "http://" + addr, nil
}
