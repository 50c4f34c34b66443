package acceptance

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/replaysafe/companion/sandbox"
)

// The cases of the service's own lookups (probes) of DestinationProbe: the workflow writes and reports
// what it saw, and then makes no further call until the service has settled the item by itself.

// probeWait bounds how long a case waits for the service's probes: the last settle delay (3 s) plus the
// failed reads' retries, on a one-second schedule, with room for a loaded machine.
const probeWait = 20 * time.Second

// waitItem polls the item until done says it is there, or probeWait passes; it returns the last reading.
func (cr *caseRun) waitItem(ctx context.Context, it *item, done func(Item) bool) (Item, error) {
	deadline := time.Now().Add(probeWait)
	for {
		got, err := cr.opts.Service.Item(ctx, it.Key)
		if err != nil || done(got) || time.Now().After(deadline) {
			return got, err
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return got, err
		}
	}
}

// probeVerdict describes the item's last reconcile by a probe ("probe:acceptance-probe found"), and
// returns its evidence; "none" when there is none.
func probeVerdict(got Item) (verdict, evidence string) {
	for i := len(got.History) - 1; i >= 0; i-- {
		if e := got.History[i]; e.Kind == "reconcile" && strings.HasPrefix(e.By, "probe:") {
			return e.By + " " + e.Outcome, e.Note
		}
	}
	return "none", ""
}

func probeReads(got Item) int {
	n := 0
	for _, e := range got.History {
		if e.Kind == "probe" {
			n++
		}
	}
	return n
}

// Case 21: the receiver commits and drops the answer; the service's probe finds the record and the item
// succeeds without any further call of the workflow; a replay gets the stored id.
func caseProbeFound(ctx context.Context, cr *caseRun) error {
	it := cr.newItem(1, DestinationProbe)
	out, err := cr.pass(ctx, it, step{label: "write", want: "proceed/new", fault: sandbox.FaultCommitThenDrop})
	if err != nil {
		return err
	}
	cr.expectSeen("write", out, "connection_reset")
	got, err := cr.waitItem(ctx, it, func(i Item) bool { return i.State != "unknown" })
	if err != nil {
		return err
	}
	verdict, _ := probeVerdict(got)
	cr.expect("the service's probe", sideLedger, "probe:"+DestinationProbe+" found", verdict)
	if _, err := cr.pass(ctx, it, step{label: "replay", want: "skip/succeeded"}); err != nil {
		return err
	}
	return cr.finishWithRecord(ctx, "after the probe", it, want{State: "succeeded", Attempt: 1, NeedsPerson: no}, 1)
}

// Case 22: the write never reached the receiver. An absent read before the last settle delay changes
// nothing; the read after it settles the item absent, and the next pass writes once, with the same key.
func caseProbeAbsent(ctx context.Context, cr *caseRun) error {
	it := cr.newItem(1, DestinationProbe)
	out, err := cr.pass(ctx, it, step{label: "write", want: "proceed/new", lost: true})
	if err != nil {
		return err
	}
	cr.expectSeen("write", out, "timeout")
	got, err := cr.waitItem(ctx, it, func(i Item) bool { return probeReads(i) > 0 || i.State != "unknown" })
	if err != nil {
		return err
	}
	cr.expect("after the first read", sideLedger, "unknown, 1 read", fmt.Sprintf("%s, %d read", got.State, probeReads(got)))
	got, err = cr.waitItem(ctx, it, func(i Item) bool { return i.State != "unknown" })
	if err != nil {
		return err
	}
	verdict, _ := probeVerdict(got)
	cr.expect("after the last delay", sideLedger, "failed, probe:"+DestinationProbe+" absent", got.State+", "+verdict)
	if cr.opts.AwaitProbeRun != nil {
		// The verdict is visible before the probe's call is over: on a test server whose updates are not
		// atomic, what the store does after the verdict's write could undo the replay's claim (Options).
		if err := cr.opts.AwaitProbeRun(ctx); err != nil {
			return err
		}
	}
	first := out.ans
	out, err = cr.pass(ctx, it, step{label: "replay", want: "proceed/retry"})
	if err != nil {
		return err
	}
	cr.expect("replay", sideLedger, "same idempotency key", sameKey(first, out.ans))
	return cr.finishWithRecord(ctx, "after the replay", it, want{State: "succeeded", Attempt: 2}, 1)
}

// Case 23: the lookup endpoint answers 500 at every read: the item waits for a person (lookup_failed),
// with every read in the evidence, and nothing is written again.
func caseProbeLookupFails(ctx context.Context, cr *caseRun) error {
	it := cr.newItem(1, DestinationProbe)
	if err := cr.opts.Receiver.QueueFault(ctx, sandbox.FaultLookup500, 100, it.Reference); err != nil {
		return err
	}
	out, err := cr.pass(ctx, it, step{label: "write", want: "proceed/new", fault: sandbox.FaultCommitThenDrop})
	if err != nil {
		return err
	}
	cr.expectSeen("write", out, "connection_reset")
	got, err := cr.waitItem(ctx, it, func(i Item) bool { return i.LookupFailed || i.State != "unknown" })
	if err != nil {
		return err
	}
	verdict, ev := probeVerdict(got)
	cr.expect("the service's probes", sideLedger, "probe:"+DestinationProbe+" lookup_failed, 2 reads of 500 in the evidence",
		fmt.Sprintf("%s, %d reads of 500 in the evidence", verdict, strings.Count(ev, "→ 500")))
	if _, err := cr.pass(ctx, it, step{label: "replay", want: "skip/awaiting_owner"}); err != nil {
		return err
	}
	return cr.finish(ctx, "after the failed lookups", it, want{State: "unknown", Cause: "lookup_failed", NeedsPerson: yes, Attempt: 1}, 1)
}
