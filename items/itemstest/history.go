package itemstest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// exerciseHistoryBound covers the bound on an item's history (items.KeptFirstRepeats): a workflow stuck in
// a loop that reports again and again must not grow the item's stored document for ever (a MongoDB
// document stops being writable at 16 MB, and the item could then never be resolved). Repeated reports
// that change nothing are kept up to the bound and counted in history_dropped; every event that changes
// the state, the attempt, the result, the need for a person or a resolution stays.
func exerciseHistoryBound(t *testing.T, open func(t *testing.T) items.Store, opts Options) {
	const bound = items.KeptFirstRepeats + items.KeptLatestRepeats
	// loop is how many reports a loop sends: full, or short where the store's test server is slow
	// (Options.ShortLoops). Either is well past the bound.
	loop := func(full, short int) int {
		if opts.ShortLoops {
			return short
		}
		return full
	}

	// docBytes returns the size of the item's stored document, as the store measures it, or -1 when the
	// suite's caller gave no way to measure it.
	docBytes := func(h *harness, key string) int {
		h.t.Helper()
		if opts.DocumentBytes == nil {
			return -1
		}
		return opts.DocumentBytes(h.t, h.store, h.tenant, key)
	}
	// checkBounded checks that events were recorded in all (what the history holds, and what it counts
	// as dropped), that the history holds the essential events and bound repeats, and that no attempt
	// keeps more report digests than the bound.
	checkBounded := func(h *harness, key string, recorded, essential int) *items.Item {
		h.t.Helper()
		it := h.item(key)
		if len(it.History)+it.HistoryDropped != recorded {
			h.t.Errorf("history holds %d events and counts %d dropped, want %d in all", len(it.History), it.HistoryDropped, recorded)
		}
		if len(it.History) != essential+bound {
			h.t.Errorf("history holds %d events, want the %d that change the item and %d repeats", len(it.History), essential, bound)
		}
		for _, a := range it.Attempts {
			if len(a.Reports) > bound {
				h.t.Errorf("attempt %d keeps %d report digests, want at most %d", a.Number, len(a.Reports), bound)
			}
		}
		return it
	}
	// checkSize checks that the stored document did not grow between a size taken early (once the bound
	// was reached) and now, beyond what longer numbers take (the counter, the kept events' times from the
	// item's creation): 64 bytes, where each repeat kept would add tens; and that it is at most limit.
	checkSize := func(h *harness, key string, early, limit int) {
		h.t.Helper()
		late := docBytes(h, key)
		h.t.Logf("stored document of %s: %d bytes once the bound was reached, %d at the end", key, early, late)
		if late > early+64 || late > limit {
			h.t.Errorf("stored document grew from %d to %d bytes", early, late)
		}
	}

	// The loop: a workflow replays late reports every few seconds, of an older attempt and after
	// success, each with another message (so none is an identical repeat): each answers history_only.
	t.Run("HistoryOnlyReportsLoop", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		a1 := h.claim("k", payloadA, dest(destKeyed))
		h.aw("k", failedStatusRetryAfter(a1.Claim, 429, 5))
		h.advance(5 * time.Second)
		a2 := h.claim("k", payloadA, dest(destKeyed))
		h.aw("k", succeeded(a2.Claim, "r-1"))
		n := loop(1000, 200)
		early := 0
		var last items.AfterWriteParams
		for i := range n {
			h.advance(3 * time.Second)
			last = failedStatus(a1.Claim, 503)
			attempt := 1
			if i%2 == 1 {
				last, attempt = failedStatus(a2.Claim, 500), 2
			}
			last.ErrorMessage = fmt.Sprintf("late report #%05d", i)
			r := h.aw("k", last)
			if r.Reason != items.ReasonHistoryOnly || r.State != items.StateSucceeded || r.Attempt != attempt {
				t.Fatalf("report #%d answered %s, %s, attempt %d; want history_only, succeeded, attempt %d", i, r.Reason, r.State, r.Attempt, attempt)
			}
			if i == 2*bound {
				early = docBytes(h, "k")
			}
		}
		// claimed, failed, claimed, succeeded, and the first history_only of each attempt.
		it := checkBounded(h, "k", 4+n, 6)
		checkSize(h, "k", early, 16<<10)
		for i, w := range []struct {
			kind string
			to   items.State
		}{{items.EventClaimed, items.StateInFlight}, {items.EventAfterWrite, items.StateFailed},
			{items.EventClaimed, items.StateInFlight}, {items.EventAfterWrite, items.StateSucceeded}} {
			if e := it.History[i]; e.Kind != w.kind || e.To != w.to {
				t.Errorf("history[%d] = %s to %s, want %s to %s", i, e.Kind, e.To, w.kind, w.to)
			}
		}
		if e := lastEvent(it); e.Note != last.ErrorMessage || e.Reason != items.ReasonHistoryOnly {
			t.Errorf("the latest event is %q (%s), want the latest report %q", e.Note, e.Reason, last.ErrorMessage)
		}
		if e := it.History[4]; e.Note != "late report #00000" {
			t.Errorf("the first repeated report is not kept: history[4] is %q", e.Note)
		}
		if it.State != items.StateSucceeded || it.ExternalID != "r-1" {
			t.Errorf("the item is %s with external id %q, want succeeded r-1", it.State, it.ExternalID)
		}
		// An identical repeat of the latest report is still unchanged and writes nothing.
		before := h.item("k")
		h.checkReport("k", h.aw("k", last), wantReport{State: items.StateSucceeded, Reason: items.ReasonUnchanged, Attempt: 2})
		h.checkUnchanged("k", before)
		// The item is still writable and resolvable: a duplicate effect, then its acknowledgement.
		h.checkReport("k", h.aw("k", succeeded(a2.Claim, "r-2")), wantReport{State: items.StateSucceeded, Reason: items.ReasonDuplicateEffect, Attempt: 2})
		if _, reason, err := h.resolve("k", items.ResolveAcknowledged, "both invoices exist, r-2 credited", ""); err != nil || reason != items.ReasonRecorded {
			t.Fatalf("acknowledge after the loop: %s, %v", reason, err)
		}
		it = h.item("k")
		got := kinds(it)[len(it.History)-3:]
		if strings.Join(got, ",") != "needs_person,after_write,resolve" || it.NeedsPerson || it.Resolution == nil {
			t.Errorf("after the duplicate and its acknowledgement: last events %v, needs_person %v, resolution %+v", got, it.NeedsPerson, it.Resolution)
		}
		// The facts the stores index, derived from the history, read the same from the bounded one.
		if f := it.Facts(); f.Resolutions != 1 || f.EnteredUnknown || !f.DuplicateEffect || f.Attempt != 2 {
			t.Errorf("facts after the loop: %+v", f)
		}
	})

	// The loop in its plainest form: the very same late report of an older attempt, replayed every
	// few seconds. An older attempt's repeat goes to the history (history_only), never unchanged, so each
	// one is recorded, and the bound holds it.
	t.Run("IdenticalLateReportReplayed", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		a1 := h.claim("k", payloadA, dest(destKeyed))
		late := failedClass(a1.Claim, items.ClassTimeout)
		h.aw("k", late)
		a2 := h.claim("k", payloadA, dest(destKeyed))
		h.aw("k", succeeded(a2.Claim, "r-1"))
		n := loop(600, 150)
		early := 0
		for i := range n {
			h.advance(5 * time.Second)
			if r := h.aw("k", late); r.Reason != items.ReasonHistoryOnly || r.State != items.StateSucceeded || r.Attempt != 1 {
				t.Fatalf("replay #%d answered %s, %s, attempt %d; want history_only, succeeded, attempt 1", i, r.Reason, r.State, r.Attempt)
			}
			if i == 2*bound {
				early = docBytes(h, "k")
			}
		}
		// claimed, the timeout (in_flight to unknown), claimed (same key), succeeded, the first replay.
		it := checkBounded(h, "k", 4+n, 5)
		checkSize(h, "k", early, 16<<10)
		if d := it.Attempts[0].Reports; len(d) != 1 {
			t.Errorf("attempt 1 keeps %d digests of one report replayed", len(d))
		}
		if it.State != items.StateSucceeded || it.ExternalID != "r-1" || it.Attempt != 2 {
			t.Errorf("the item is %s at attempt %d with external id %q, want succeeded r-1 at 2", it.State, it.Attempt, it.ExternalID)
		}
	})

	// An unknown attempt whose workflow reports unknown outcomes in a loop, each another: recorded, and the
	// item stays unknown; before-write asks for a lookup each time and writes nothing; the lookup's finding
	// still settles the item.
	t.Run("UnknownReportsLoopStaysResolvable", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		a := h.unknownAfterTimeout("k", dest(destSearchable), reference("QT-7"))
		n := loop(500, 150)
		early := 0
		for i := range n {
			h.advance(2 * time.Second)
			p := unknownOutcome(a.Claim)
			p.ErrorMessage = fmt.Sprintf("socket hang up #%05d", i)
			if r := h.aw("k", p); r.Reason != items.ReasonRecorded || r.State != items.StateUnknown {
				t.Fatalf("report #%d answered %s, %s; want recorded, unknown", i, r.Reason, r.State)
			}
			if i == 2*bound {
				early = docBytes(h, "k")
			}
		}
		before := h.item("k")
		for range 200 {
			h.advance(time.Second)
			if ans := h.bw("k", payloadA); ans.Decision != items.Reconcile || ans.Reason != items.ReasonLookupRequired {
				t.Fatalf("before-write answered %s/%s, want reconcile/lookup_required", ans.Decision, ans.Reason)
			}
		}
		h.checkUnchanged("k", before)
		// claimed and the timeout (in_flight to unknown): each unknown outcome after it repeats its reason.
		checkBounded(h, "k", 2+n, 2)
		checkSize(h, "k", early, 16<<10)
		r, err := h.reconcile("k", items.FindingFound, "INV-7", "billing lists QT-7 as INV-7")
		if err != nil {
			t.Fatal(err)
		}
		h.checkReport("k", r, wantReport{State: items.StateSucceeded, Reason: items.ReasonRecorded, Attempt: 1})
		it := h.item("k")
		if e := lastEvent(it); e.Kind != items.EventReconcile || e.To != items.StateSucceeded {
			t.Errorf("the finding is not the last event: %+v", e)
		}
		if e := it.History[1]; e.Kind != items.EventAfterWrite || e.From != items.StateInFlight || e.To != items.StateUnknown {
			t.Errorf("the report that made the item unknown is gone: history[1] = %+v", e)
		}
		if f := it.Facts(); !f.EnteredUnknown || f.Resolutions != 0 {
			t.Errorf("facts after the loop: %+v", f)
		}
	})

	// A succeeded item reported again and again with other external ids: each answers duplicate_effect; the
	// first duplicate (its external id is the evidence) and the need for a person stay, and of the others
	// the first 50 and the latest 50 (items.KeptFirstDuplicates).
	t.Run("DuplicateEffectReportsLoop", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		a := h.claim("k", payloadA, dest(destKeyed))
		h.aw("k", succeeded(a.Claim, "r-1"))
		n := loop(300, 160)
		const kept = items.KeptFirstDuplicates + items.KeptLatestDuplicates
		early := 0
		for i := range n {
			h.advance(time.Second)
			if r := h.aw("k", succeeded(a.Claim, fmt.Sprintf("r-dup-%05d", i))); r.Reason != items.ReasonDuplicateEffect {
				t.Fatalf("report #%d answered %s, want duplicate_effect", i, r.Reason)
			}
			if i == kept+50 {
				early = docBytes(h, "k")
			}
		}
		// claimed, succeeded, needs_person, the first duplicate; then the first and latest duplicates of the
		// repeats, a longer bound than other repeats': each names a record a person may have to void.
		it := h.item("k")
		if len(it.History) != 4+kept || it.HistoryDropped != n-1-kept {
			t.Errorf("history holds %d events and counts %d dropped, want %d and %d", len(it.History), it.HistoryDropped, 4+kept, n-1-kept)
		}
		checkSize(h, "k", early, 48<<10) // 100 duplicates kept: about 33 KB in BSON
		if e := it.History[3]; e.Kind != items.EventAfterWrite || e.ExternalID != "r-dup-00000" {
			t.Errorf("the first duplicate's report is gone: history[3] = %+v", e)
		}
		for i, want := range map[int]string{4: "r-dup-00001", 3 + items.KeptFirstDuplicates: "r-dup-00050",
			4 + items.KeptFirstDuplicates: fmt.Sprintf("r-dup-%05d", n-items.KeptLatestDuplicates), 3 + kept: fmt.Sprintf("r-dup-%05d", n-1)} {
			if e := it.History[i]; e.ExternalID != want {
				t.Errorf("history[%d] names %q, want %q", i, e.ExternalID, want)
			}
		}
		if !it.NeedsPerson || it.NeedsPersonCause != items.CauseDuplicateEffect || countEvents(it, items.EventNeedsPerson, items.CauseDuplicateEffect) != 1 {
			t.Errorf("needs_person %v (%s), %d needs_person events", it.NeedsPerson, it.NeedsPersonCause, countEvents(it, items.EventNeedsPerson, items.CauseDuplicateEffect))
		}
		if _, reason, err := h.resolve("k", items.ResolveAcknowledged, "r-dup-* credited by hand", ""); err != nil || reason != items.ReasonRecorded {
			t.Fatalf("acknowledge after the loop: %s, %v", reason, err)
		}
		if it := h.item("k"); it.NeedsPerson || lastEvent(it).Kind != items.EventResolve || it.HistoryDropped != n-1-kept {
			t.Errorf("after the acknowledgement: needs_person %v, last event %+v, dropped %d", it.NeedsPerson, lastEvent(it), it.HistoryDropped)
		}
	})

	// The one case the bound changes an answer (api.md): an attempt with more than 15 different reports,
	// and a report older than the latest 10 of them sent again. For a duplicate effect a person already
	// acknowledged that is the conservative answer: the report is a duplicate again (duplicate_effect, as
	// its identical repeat answered), and the item needs a person again. A duplicate whose digest is kept
	// (among the first 5 or the latest 10) stays an identical repeat: nothing written, still acknowledged.
	t.Run("OldDuplicateReplayedAfterMoreThanBoundReports", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		a := h.claim("k", payloadA, dest(destKeyed))
		h.aw("k", succeeded(a.Claim, "r-1"))
		late := func(i int) items.AfterWriteParams {
			p := failedStatus(a.Claim, 500)
			p.ErrorMessage = fmt.Sprintf("late report #%02d", i)
			return p
		}
		for i := range 4 { // with the success, the first 5 digests
			h.advance(time.Second)
			h.checkReport("k", h.aw("k", late(i)), wantReport{State: items.StateSucceeded, Reason: items.ReasonHistoryOnly, Attempt: 1})
		}
		h.advance(time.Second)
		dup := succeeded(a.Claim, "r-dup")
		h.checkReport("k", h.aw("k", dup), wantReport{State: items.StateSucceeded, Reason: items.ReasonDuplicateEffect, Attempt: 1})
		if _, reason, err := h.resolve("k", items.ResolveAcknowledged, "r-dup credited by hand", ""); err != nil || reason != items.ReasonRecorded {
			t.Fatalf("acknowledge: %s, %v", reason, err)
		}
		// While its digest is kept, the duplicate sent again is an identical repeat.
		before := h.item("k")
		h.checkReport("k", h.aw("k", dup), wantReport{State: items.StateSucceeded, Reason: items.ReasonDuplicateEffect, Attempt: 1})
		h.checkUnchanged("k", before)
		for i := 4; i < 4+items.KeptLatestRepeats; i++ {
			h.advance(time.Second)
			h.checkReport("k", h.aw("k", late(i)), wantReport{State: items.StateSucceeded, Reason: items.ReasonHistoryOnly, Attempt: 1})
		}
		if it := h.item("k"); it.NeedsPerson || !it.Settled() || len(it.Attempts[0].Reports) != bound {
			t.Fatalf("after %d different reports: needs_person %v, settled %v, %d digests", bound+1, it.NeedsPerson, it.Settled(), len(it.Attempts[0].Reports))
		}
		// The latest 10 are kept: the latest late report is still an identical repeat.
		before = h.item("k")
		h.checkReport("k", h.aw("k", late(4+items.KeptLatestRepeats-1)), wantReport{State: items.StateSucceeded, Reason: items.ReasonUnchanged, Attempt: 1})
		h.checkUnchanged("k", before)
		// The duplicate's digest is gone: it is a duplicate effect again, for a person.
		h.advance(time.Second)
		h.checkReport("k", h.aw("k", dup), wantReport{State: items.StateSucceeded, Reason: items.ReasonDuplicateEffect, Attempt: 1})
		if it := h.item("k"); !it.NeedsPerson || it.NeedsPersonCause != items.CauseDuplicateEffect || it.Settled() || it.State != items.StateSucceeded || it.ExternalID != "r-1" {
			t.Errorf("the old duplicate sent again: needs_person %v (%s), settled %v, %s %q; want a person asked again, still succeeded r-1",
				it.NeedsPerson, it.NeedsPersonCause, it.Settled(), it.State, it.ExternalID)
		}
	})

	// A build without the bound also kept a digest of each replay of an older attempt's report: the item's
	// next report of that attempt trims those too, and keeps every different digest.
	t.Run("UnboundedStoredDigestsAreTrimmedOnNextRepeat", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		a1 := h.claim("k", payloadA, dest(destKeyed))
		first := failedStatusRetryAfter(a1.Claim, 429, 5)
		h.aw("k", first)
		h.advance(5 * time.Second)
		h.claim("k", payloadA, dest(destKeyed))
		other := failedStatus(a1.Claim, 503)
		h.aw("k", other)
		it := h.item("k")
		d := it.Attempts[0].Reports
		if len(d) != 2 {
			t.Fatalf("attempt 1 holds %d digests, want 2", len(d))
		}
		next := it.Clone()
		const n = 3000
		next.Attempts[0].Reports = nil
		for i := range n {
			next.Attempts[0].Reports = append(next.Attempts[0].Reports, d[i%2])
		}
		if _, err := h.store.Transition(h.ctx, h.tenant, "k", func(cur *items.Item) (*items.Item, error) { return next, nil }); err != nil {
			t.Fatal(err)
		}
		big := docBytes(h, "k")
		h.advance(time.Second)
		h.checkReport("k", h.aw("k", first), wantReport{State: items.StateInFlight, Reason: items.ReasonHistoryOnly, Attempt: 1})
		it = h.item("k")
		if got := it.Attempts[0].Reports; len(got) != 2 || got[0] != d[0] || got[1] != d[1] {
			t.Errorf("attempt 1 holds %d digests after the next report, want its 2 different ones", len(got))
		}
		if small := docBytes(h, "k"); big >= 0 && small > big {
			t.Errorf("the stored document went from %d to %d bytes", big, small)
		}
	})

	// An item stored by a build without the bound, with thousands of repeats: its next repeat trims it.
	t.Run("UnboundedStoredHistoryIsTrimmedOnNextRepeat", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		a := h.claim("k", payloadA, dest(destKeyed))
		h.aw("k", succeeded(a.Claim, "r-1"))
		it := h.item("k")
		next := it.Clone()
		const n = 3000
		for i := range n {
			next.History = append(next.History, items.Event{At: h.now(), Kind: items.EventAfterWrite, Attempt: 1,
				From: items.StateSucceeded, To: items.StateSucceeded, Outcome: "failed", Reason: items.ReasonHistoryOnly,
				Note: fmt.Sprintf("old build #%d", i)})
		}
		if _, err := h.store.Transition(h.ctx, h.tenant, "k", func(cur *items.Item) (*items.Item, error) { return next, nil }); err != nil {
			t.Fatal(err)
		}
		big := docBytes(h, "k")
		h.advance(time.Second)
		p := failedStatus(a.Claim, 500)
		p.ErrorMessage = "one more"
		h.checkReport("k", h.aw("k", p), wantReport{State: items.StateSucceeded, Reason: items.ReasonHistoryOnly, Attempt: 1})
		// claimed, succeeded, and the first old repeat.
		it = checkBounded(h, "k", 2+n+1, 3)
		if small := docBytes(h, "k"); big >= 0 && small*10 > big {
			t.Errorf("the stored document went from %d to %d bytes, want a tenth or less", big, small)
		}
		if e := lastEvent(it); e.Note != "one more" {
			t.Errorf("the latest report is not the last event: %+v", e)
		}
	})
}
