package itemstest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// OperatorStore is a store that also serves the sweeper, the alert outbox and the operator surface. The
// consumers declare narrower interfaces (alerts.SweepStore, alerts.Outbox, the handlers' stores); this one
// is their union, so one suite checks every store against all of them.
type OperatorStore interface {
	items.Store
	ExpiredLeases(ctx context.Context, now time.Time, after items.ItemRef, limit int) ([]items.ItemRef, error)
	SweepCandidates(ctx context.Context, after items.ItemRef, limit int) ([]*items.Item, error)
	PendingAlertItems(ctx context.Context, after items.ItemRef, limit int) ([]*items.Item, error)
	AddAlerts(ctx context.Context, as []items.Alert) (int, error)
	AlertGroups(ctx context.Context, now time.Time, limit int) ([]items.AlertGroup, error)
	ClaimAlerts(ctx context.Context, c items.AlertClaim) ([]items.Alert, error)
	FinishAlerts(ctx context.Context, f items.AlertDelivery) (int, error)
	ReleaseAlerts(ctx context.Context, claim string) error
	RenewAlertClaim(ctx context.Context, claim string, until time.Time) (int, error)
	NoteAlertMessage(ctx context.Context, as []items.Alert, m items.AlertDelivery) (int, error)
	MarkAlertPost(ctx context.Context, claim string, at time.Time) (int, error)
	CloseAlert(ctx context.Context, a items.Alert, now time.Time) (bool, error)
	CloseItemAlerts(ctx context.Context, tenant, key string, now time.Time) (int, error)
	RequestEscalation(ctx context.Context, tenant, key, by string, now time.Time) (int, error)
	ItemAlerts(ctx context.Context, tenant, key string) ([]items.Alert, error)
	MessageAlerts(ctx context.Context, channel, ts string) ([]items.Alert, error)
	SettledAlerts(ctx context.Context, limit int) ([]items.Alert, error)
	ListItems(ctx context.Context, p items.ListParams) (items.ItemPage, error)
	// NeedsPersonCount counts a tenant's items needing a person (the kept counts).
	NeedsPersonCount(ctx context.Context, tenant string) (int, error)
	// Stats measures a tenant's items; the empty tenant measures every tenant together.
	Stats(ctx context.Context, tenant string, now time.Time) (*items.Stats, error)
	AddCounter(ctx context.Context, tenant, destination, name string, delta int) error
	items.RetentionStore
	// ClaimProbe takes one read of a probe (package probes).
	ClaimProbe(ctx context.Context, c items.ProbeClaim) (bool, error)
	// ReleaseProbe gives a read's claim back while the claim still holds it (a prober's graceful stop).
	ReleaseProbe(ctx context.Context, c items.ProbeClaim) (bool, error)
}

// ExerciseOperators runs the operator part of the suite against the stores open returns (new and empty
// on every call, closed by t.Cleanup).
func ExerciseOperators(t *testing.T, open func(t *testing.T) OperatorStore, opts Options) {
	t.Helper()
	t.Run("List", func(t *testing.T) { exerciseList(t, open) })
	t.Run("Sweep", func(t *testing.T) { exerciseSweepQueries(t, open) })
	t.Run("Outbox", func(t *testing.T) { exerciseOutbox(t, open, opts) })
	t.Run("Stats", func(t *testing.T) { exerciseStats(t, open) })
	t.Run("KeptCounts", func(t *testing.T) { exerciseKeptCounts(t, open) })
	t.Run("Retention", func(t *testing.T) { exerciseRetention(t, open) })
	t.Run("Probes", func(t *testing.T) { exerciseProbes(t, open, opts) })
}

type opsHarness struct {
	*harness
	ops OperatorStore
}

func newOpsHarness(t *testing.T, open func(t *testing.T) OperatorStore) *opsHarness {
	t.Helper()
	s := open(t)
	return &opsHarness{harness: newHarness(t, func(*testing.T) items.Store { return s }), ops: s}
}

func keysOf(its []*items.Item) []string {
	out := make([]string, len(its))
	for i, it := range its {
		out[i] = it.Key
	}
	return out
}

func (h *opsHarness) list(p items.ListParams) items.ItemPage {
	h.t.Helper()
	if p.Tenant == "" {
		p.Tenant = h.tenant
	}
	page, err := h.ops.ListItems(h.ctx, p)
	if err != nil {
		h.t.Fatalf("ListItems(%+v): %v", p, err)
	}
	return page
}

func (h *opsHarness) listKeys(p items.ListParams) []string {
	h.t.Helper()
	return keysOf(h.list(p).Items)
}

func batch(id string, index int) bwOpt {
	return func(p *items.BeforeWriteParams) { p.BatchID, p.BatchIndex = id, &index }
}

func owner(o string) bwOpt { return func(p *items.BeforeWriteParams) { p.Owner = o } }

func exerciseList(t *testing.T, open func(t *testing.T) OperatorStore) {
	t.Run("NewestChangeFirst", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		claims := map[string]string{}
		for _, k := range []string{"a", "b", "c"} {
			claims[k] = h.claim(k, payloadA).Claim
			h.advance(time.Second)
		}
		h.aw("a", succeeded(claims["a"], "x-1"))
		if got, want := h.listKeys(items.ListParams{}), []string{"a", "c", "b"}; !slices.Equal(got, want) {
			t.Errorf("list = %v, want %v (newest change first)", got, want)
		}
	})

	t.Run("Filters", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		ok := h.claim("wf1:inv-1:send:0", payloadA, dest(destKeyed), batch("exec-1", 0))
		h.aw("wf1:inv-1:send:0", succeeded(ok.Claim, "x-1"))
		h.unknownAfterTimeout("wf1:inv-2:send:0", batch("exec-1", 1), owner("U0ANNA")) // dedupe none: needs a person
		h.advance(time.Hour)
		h.claim("wf2:inv-3:send:0", payloadA, dest(destKeyed))
		h.as(tenantB).claim("wf1:inv-9:send:0", payloadA, batch("exec-1", 0))
		if _, err := h.ops.AddAlerts(h.ctx, []items.Alert{{Tenant: tenantA, Key: "wf1:inv-1:send:0", Attempt: 1, Cause: "x",
			Owner: "U0BORIS", Status: items.AlertPending, CreatedAt: h.now()}}); err != nil {
			t.Fatal(err)
		}
		yes, no := true, false
		quietSince := h.now().Add(-59 * time.Minute) // unchanged for 59 minutes or more
		for _, c := range []struct {
			name string
			p    items.ListParams
			want []string
		}{
			{"state", items.ListParams{States: []items.State{items.StateUnknown}}, []string{"wf1:inv-2:send:0"}},
			{"states", items.ListParams{States: []items.State{items.StateSucceeded, items.StateInFlight}}, []string{"wf2:inv-3:send:0", "wf1:inv-1:send:0"}},
			{"needs_person", items.ListParams{NeedsPerson: &yes}, []string{"wf1:inv-2:send:0"}},
			{"needs_person=false", items.ListParams{NeedsPerson: &no}, []string{"wf2:inv-3:send:0", "wf1:inv-1:send:0"}},
			{"destination", items.ListParams{Destination: destKeyed}, []string{"wf2:inv-3:send:0", "wf1:inv-1:send:0"}},
			// inv-1 and inv-2 changed last at the same moment: the key breaks the tie, descending too.
			{"workflow", items.ListParams{Workflow: "wf1"}, []string{"wf1:inv-2:send:0", "wf1:inv-1:send:0"}},
			{"batch_id", items.ListParams{BatchID: "exec-1"}, []string{"wf1:inv-2:send:0", "wf1:inv-1:send:0"}},
			{"owner of the request", items.ListParams{Owner: "U0ANNA"}, []string{"wf1:inv-2:send:0"}},
			{"owner of an alert", items.ListParams{Owner: "U0BORIS"}, []string{"wf1:inv-1:send:0"}},
			{"older_than", items.ListParams{ChangedBefore: &quietSince}, []string{"wf1:inv-2:send:0", "wf1:inv-1:send:0"}},
			{"combined", items.ListParams{BatchID: "exec-1", NeedsPerson: &yes, Owner: "U0ANNA"}, []string{"wf1:inv-2:send:0"}},
			{"nothing", items.ListParams{Destination: "nowhere"}, []string{}},
		} {
			if got := h.listKeys(c.p); !slices.Equal(got, c.want) {
				t.Errorf("%s: list = %v, want %v", c.name, got, c.want)
			}
		}
		if got := h.listKeys(items.ListParams{Tenant: tenantB}); !slices.Equal(got, []string{"wf1:inv-9:send:0"}) {
			t.Errorf("tenant %s sees %v, want only its own item", tenantB, got)
		}
	})

	t.Run("ByExecutionOfTheLatestClaim", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		// Run 1 registers a and b in its batch; a fails retryably, and run 2 claims it again, so a belongs
		// to run 1's batch but to run 2's execution. c is run 2's own.
		first := h.claim("a", payloadA, dest(destKeyed), execution("run-1"), batch("run-1:Send", 0))
		h.claim("b", payloadA, execution("run-1"), batch("run-1:Send", 1))
		h.aw("a", failedStatus(first.Claim, 503))
		h.advance(time.Hour)
		h.claim("a", payloadA, dest(destKeyed), execution("run-2"), batch("run-2:Send", 0))
		h.advance(time.Second)
		h.claim("c", payloadA, execution("run-2"), batch("run-2:Send", 1))
		h.as(tenantB).claim("d", payloadA, execution("run-2"))
		for _, c := range []struct {
			p    items.ListParams
			want []string
		}{
			{items.ListParams{ExecutionID: "run-1"}, []string{"b"}},
			{items.ListParams{ExecutionID: "run-2"}, []string{"c", "a"}},
			{items.ListParams{ExecutionID: "run-2", States: []items.State{items.StateInFlight}, Limit: 1}, []string{"c"}},
			{items.ListParams{ExecutionID: "run-2", BatchID: "run-1:Send"}, []string{"a"}},
			{items.ListParams{ExecutionID: "run-3"}, []string{}},
		} {
			if got := h.listKeys(c.p); !slices.Equal(got, c.want) {
				t.Errorf("list %+v = %v, want %v", c.p, got, c.want)
			}
		}
		page := h.list(items.ListParams{ExecutionID: "run-2", Limit: 1})
		if next := h.list(items.ListParams{ExecutionID: "run-2", Limit: 1, Cursor: page.NextCursor}); !slices.Equal(keysOf(next.Items), []string{"a"}) {
			t.Errorf("second page = %v, want [a]", keysOf(next.Items))
		}
		if it := h.item("a"); it.ExecutionID != "run-2" || it.BatchID != "run-1:Send" {
			t.Errorf("a: execution_id %q batch_id %q, want run-2 and the batch that registered it, run-1:Send", it.ExecutionID, it.BatchID)
		}
	})

	t.Run("ExecutionCursorPagesThroughTheRunOnce", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		// Run 1's seven items, among another run's, items without an execution and another tenant's item of
		// the same run; some change at the same moment (the key breaks the tie), and r-1's report, last,
		// makes it the run's newest change.
		claims := map[string]string{}
		for i := range 7 {
			k := fmt.Sprintf("r-%d", i)
			claims[k] = h.claim(k, payloadA, execution("run-1")).Claim
			h.claim(fmt.Sprintf("o-%d", i), payloadA, execution("run-2"))
			h.claim(fmt.Sprintf("n-%d", i), payloadA)
			if i%3 == 0 {
				h.advance(time.Second)
			}
		}
		h.as(tenantB).claim("r-7", payloadA, execution("run-1"))
		h.advance(time.Second)
		h.aw("r-1", succeeded(claims["r-1"], "INV-1"))
		want := []string{"r-0", "r-1", "r-2", "r-3", "r-4", "r-5", "r-6"}
		slices.SortStableFunc(want, func(a, b string) int {
			ia, ib := h.item(a), h.item(b)
			if c := ib.UpdatedAt.Compare(ia.UpdatedAt); c != 0 {
				return c
			}
			return strings.Compare(b, a)
		})
		if want[0] != "r-1" {
			t.Fatalf("r-1's report is not the run's newest change: %v", want)
		}
		if got, pages := h.listAll(items.ListParams{ExecutionID: "run-1"}, 3); !slices.Equal(got, want) || pages != 3 {
			t.Errorf("run-1 in pages of 3 gave %v in %d pages, want %v in 3", got, pages, want)
		}
	})

	t.Run("ByReference", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		// a and b carry the same quote (two reminders of it), c another, d none; tenant B reuses the reference.
		h.claim("a", payloadA, reference("QT-2026-0417"))
		h.advance(time.Second)
		h.claim("b", payloadA, reference("QT-2026-0417"))
		h.advance(time.Second)
		h.claim("c", payloadA, reference("QT-2026-0418"))
		h.claim("d", payloadA)
		h.as(tenantB).claim("e", payloadA, reference("QT-2026-0417"))
		for _, c := range []struct {
			p    items.ListParams
			want []string
		}{
			{items.ListParams{Reference: "QT-2026-0417"}, []string{"b", "a"}},
			{items.ListParams{Reference: "QT-2026-0418"}, []string{"c"}},
			{items.ListParams{Reference: "qt-2026-0417"}, []string{}},
			{items.ListParams{Reference: "QT-2026"}, []string{}},
			{items.ListParams{Reference: "QT-2026-0417", States: []items.State{items.StateInFlight}, Limit: 1}, []string{"b"}},
		} {
			if got := h.listKeys(c.p); !slices.Equal(got, c.want) {
				t.Errorf("list %+v = %v, want %v", c.p, got, c.want)
			}
		}
		page := h.list(items.ListParams{Reference: "QT-2026-0417", Limit: 1})
		if next := h.list(items.ListParams{Reference: "QT-2026-0417", Limit: 1, Cursor: page.NextCursor}); !slices.Equal(keysOf(next.Items), []string{"a"}) || next.NextCursor != "" {
			t.Errorf("second page = %v (next %q), want [a] and the last page", keysOf(next.Items), next.NextCursor)
		}
	})

	t.Run("CursorPagesThroughEveryItemOnce", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		var want []string
		for i := range 8 {
			k := fmt.Sprintf("k-%d", i)
			h.claim(k, payloadA)
			want = append([]string{k}, want...)
			if i%3 == 0 {
				h.advance(time.Second) // some items share a change time: the key breaks the tie
			}
		}
		// Newest change first; of items changed at the same moment, the greater key first.
		slices.SortStableFunc(want, func(a, b string) int {
			ia, ib := h.item(a), h.item(b)
			if c := ib.UpdatedAt.Compare(ia.UpdatedAt); c != 0 {
				return c
			}
			return strings.Compare(b, a)
		})
		if got, pages := h.listAll(items.ListParams{}, 3); !slices.Equal(got, want) || pages != 3 {
			t.Errorf("pages of 3 gave %v in %d pages, want %v in 3", got, pages, want)
		}
	})

	// The list without a state filter reads each state's items apart (a store may keep no index of every
	// item by change time alone) and must still give them in one order, each once, across pages whose
	// edges fall between states and inside a change time that several states share.
	t.Run("CursorPagesAcrossStates", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		for i := range 12 {
			k := fmt.Sprintf("k-%02d", i)
			switch i % 4 {
			case 0:
				h.claim(k, payloadA) // in_flight
			case 1:
				h.aw(k, succeeded(h.claim(k, payloadA, dest(destKeyed)).Claim, "x-"+k))
			case 2:
				h.aw(k, failedStatus(h.claim(k, payloadA, dest(destKeyed)).Claim, 503))
			case 3:
				h.unknownAfterTimeout(k) // needs a person
			}
			if i%5 == 4 {
				h.advance(time.Second) // runs of items in several states share a change time
			}
		}
		yes, no := true, false
		for _, p := range []items.ListParams{{}, {NeedsPerson: &no},
			{States: []items.State{items.StateSucceeded, items.StateUnknown, items.StateInFlight}}} {
			var want []string
			for _, k := range h.listKeys(items.ListParams{Limit: items.MaxListLimit}) {
				it := h.item(k)
				if (p.NeedsPerson == nil || it.NeedsPerson == *p.NeedsPerson) && (len(p.States) == 0 || slices.Contains(p.States, it.State)) {
					want = append(want, k)
				}
			}
			if !slices.IsSortedFunc(want, func(a, b string) int {
				ia, ib := h.item(a), h.item(b)
				if c := ib.UpdatedAt.Compare(ia.UpdatedAt); c != 0 {
					return c
				}
				return strings.Compare(b, a)
			}) {
				t.Fatalf("list %+v in one page: %v, not newest change first (ties: greater key first)", p, want)
			}
			for _, limit := range []int{1, 2, 5} {
				if got, _ := h.listAll(p, limit); !slices.Equal(got, want) {
					t.Errorf("list %+v in pages of %d: %v, want %v", p, limit, got, want)
				}
			}
		}
		if got := h.listKeys(items.ListParams{NeedsPerson: &yes}); len(got) != 3 {
			t.Errorf("needs_person list = %v, want the 3 unknown items", got)
		}
	})

	t.Run("ByNeedsPersonSince", func(t *testing.T) { exerciseListBySince(t, open) })

	t.Run("ForeignCursorIsInvalid", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		_, err := h.ops.ListItems(h.ctx, items.ListParams{Tenant: tenantA, Cursor: "not-a-cursor"})
		if items.ErrorCode(err) != items.CodeInvalid {
			t.Errorf("ListItems with a foreign cursor: %v, want invalid_request", err)
		}
	})
}

func exerciseSweepQueries(t *testing.T, open func(t *testing.T) OperatorStore) {
	t.Run("ExpiredLeasesInPages", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		for i := range 5 {
			h.claim(fmt.Sprintf("k-%d", i), payloadA, lease(60))
		}
		h.as(tenantB).claim("k-0", payloadA, lease(60))
		h.claim("live", payloadA, lease(600))
		h.advance(60 * time.Second)
		var got []items.ItemRef
		var after items.ItemRef
		for range 10 {
			refs, err := h.ops.ExpiredLeases(h.ctx, h.now(), after, 2)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, refs...)
			if len(refs) < 2 {
				break
			}
			after = refs[len(refs)-1]
		}
		want := []items.ItemRef{{Tenant: tenantA, Key: "k-0"}, {Tenant: tenantA, Key: "k-1"}, {Tenant: tenantA, Key: "k-2"}, {Tenant: tenantA, Key: "k-3"}, {Tenant: tenantA, Key: "k-4"}, {Tenant: tenantB, Key: "k-0"}}
		if !slices.Equal(got, want) {
			t.Errorf("expired leases %v, want %v", got, want)
		}
	})

	t.Run("SweepCandidatesAreUnsettledItemsNobodyWaitsFor", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		h.unknownAfterTimeout("unknown-keyed", dest(destKeyed))
		h.unknownAfterTimeout("unknown-none") // needs a person already
		a := h.claim("failed-retryable", payloadA)
		h.aw("failed-retryable", failedClass(a.Claim, items.ClassDNS))
		a = h.claim("failed-permanent", payloadA)
		h.aw("failed-permanent", failedStatus(a.Claim, 422))
		a = h.claim("succeeded", payloadA)
		h.aw("succeeded", succeeded(a.Claim, "x-1"))
		h.claim("in-flight", payloadA)
		if got, want := h.sweepCandidateKeys(), []string{"failed-retryable", "unknown-keyed"}; !slices.Equal(got, want) {
			t.Errorf("candidates %v, want %v", got, want)
		}
	})
}

func exerciseOutbox(t *testing.T, open func(t *testing.T) OperatorStore, opts Options) {
	alert := func(h *opsHarness, key, cause, owner, batch string) items.Alert {
		return items.Alert{Tenant: tenantA, Key: key, Attempt: 1, Cause: cause, Owner: owner, BatchID: batch,
			Destination: destDefault, EscalateTo: "U0BOSS", EscalateAfter: time.Hour, Status: items.AlertPending, CreatedAt: h.now()}
	}
	add := func(h *opsHarness, a items.Alert) bool {
		h.t.Helper()
		added, err := h.ops.AddAlerts(h.ctx, []items.Alert{a})
		if err != nil {
			h.t.Fatal(err)
		}
		return added == 1
	}
	claim := func(h *opsHarness, g items.AlertGroup, token string) []items.Alert {
		h.t.Helper()
		got, err := h.ops.ClaimAlerts(h.ctx, items.AlertClaim{Group: g, Claim: token, Now: h.now(), Until: h.now().Add(time.Minute)})
		if err != nil {
			h.t.Fatal(err)
		}
		return got
	}
	akeys := func(as []items.Alert) []string {
		out := make([]string, len(as))
		for i, a := range as {
			out[i] = a.Key
		}
		return out
	}

	t.Run("OneAlertPerItemAttemptAndCause", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		a := alert(h, "k", items.CauseNoDedupe, "U0ANNA", "")
		if !add(h, a) || add(h, a) {
			t.Fatal("the same alert was added twice, or not at all")
		}
		b := a
		b.Cause = items.CauseStale
		c := a
		c.Attempt = 2
		if n, err := h.ops.AddAlerts(h.ctx, []items.Alert{a, b, c, b}); err != nil || n != 2 {
			t.Fatalf("adding the alert again with two others (one twice) added %d (%v), want 2: another cause or attempt is another alert", n, err)
		}
		got, err := h.ops.ItemAlerts(h.ctx, tenantA, "k")
		if err != nil || len(got) != 3 || got[0].Status != items.AlertPending {
			t.Fatalf("item alerts %+v (%v), want 3 pending", got, err)
		}
	})

	t.Run("PendingAlertItemsAreThoseWaitingForTheirAlert", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		h.unknownAfterTimeout("a")
		h.unknownAfterTimeout("b")
		h.unknownAfterTimeout("c", dest(destKeyed)) // a same-key retry may settle it: no person yet
		n, err := h.ledger.RecordAlerts(h.ctx, tenantA, []items.AlertMark{{Key: "b", Attempt: 1, Cause: items.CauseNoDedupe},
			{Key: "a", Attempt: 1, Cause: items.CauseStale}, {Key: "c", Attempt: 1, Cause: items.CauseNoDedupe}}, items.AlertSent, "U0ANNA")
		if err != nil || n != 1 {
			t.Fatalf("RecordAlerts changed %d (%v), want only b (a needs a person for another cause, c for none)", n, err)
		}
		found, err := h.ops.PendingAlertItems(h.ctx, items.ItemRef{}, 10)
		if err != nil {
			t.Fatal(err)
		}
		if got := keysOf(found); !slices.Equal(got, []string{"a"}) {
			t.Errorf("pending alert items %v, want [a]", got)
		}
	})

	t.Run("GroupsAndClaims", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		for _, k := range []string{"k3", "k1", "k2"} {
			add(h, alert(h, k, items.CauseNoDedupe, "U0ANNA", "exec-1"))
		}
		add(h, alert(h, "k4", items.CauseNoDedupe, "U0BORIS", "exec-1"))
		groups, err := h.ops.AlertGroups(h.ctx, h.now(), 10)
		if err != nil || len(groups) != 2 {
			t.Fatalf("groups %+v (%v), want 2", groups, err)
		}
		g := items.AlertGroup{Tenant: tenantA, Owner: "U0ANNA", BatchID: "exec-1"}
		if !slices.Contains(groups, g) {
			t.Fatalf("groups %+v lack %+v", groups, g)
		}
		if got := akeys(claim(h, g, "c1")); !slices.Equal(got, []string{"k1", "k2", "k3"}) {
			t.Fatalf("claimed %v, want k1 k2 k3 in key order", got)
		}
		if got := claim(h, g, "c2"); len(got) != 0 {
			t.Fatalf("a second claim took %v while the first holds the group", akeys(got))
		}
		groups, _ = h.ops.AlertGroups(h.ctx, h.now(), 10)
		if slices.Contains(groups, g) {
			t.Fatalf("a claimed group is offered again: %+v", groups)
		}
		h.advance(2 * time.Minute) // the first claimer died: its claim runs out
		if got := akeys(claim(h, g, "c3")); len(got) != 3 {
			t.Fatalf("after the claim ran out, claimed %v, want all 3", got)
		}
		if err := h.ops.ReleaseAlerts(h.ctx, "c3"); err != nil {
			t.Fatal(err)
		}
		if got := claim(h, g, "c4"); len(got) != 3 {
			t.Fatalf("after a release, claimed %v, want all 3", akeys(got))
		}
		if n, err := h.ops.FinishAlerts(h.ctx, items.AlertDelivery{Claim: "c3", Channel: "D1", TS: "1.1", At: h.now()}); err != nil || n != 0 {
			t.Fatalf("finishing a released claim changed %d (%v), want 0", n, err)
		}
		sentAt := h.now()
		if n, err := h.ops.FinishAlerts(h.ctx, items.AlertDelivery{Claim: "c4", Channel: "D1", TS: "1.1", At: sentAt}); err != nil || n != 3 {
			t.Fatalf("finish changed %d (%v), want 3", n, err)
		}
		sent, err := h.ops.MessageAlerts(h.ctx, "D1", "1.1")
		if err != nil || len(sent) != 3 {
			t.Fatalf("message alerts %+v (%v), want 3", sent, err)
		}
		if a := sent[0]; a.Status != items.AlertSent || a.SentAt == nil || !a.SentAt.Equal(sentAt) || a.EscalateAt == nil || !a.EscalateAt.Equal(sentAt.Add(time.Hour)) {
			t.Fatalf("sent alert %+v, want sent at %v, escalating an hour later", a, sentAt)
		}
	})

	t.Run("RenewedClaimAndNotedMessage", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		for _, k := range []string{"k1", "k2"} {
			add(h, alert(h, k, items.CauseNoDedupe, "U0ANNA", "exec-1"))
		}
		g := items.AlertGroup{Tenant: tenantA, Owner: "U0ANNA", BatchID: "exec-1"}
		held := claim(h, g, "c1") // until now + 1 minute
		if n, err := h.ops.RenewAlertClaim(h.ctx, "c1", h.now().Add(3*time.Minute)); err != nil || n != 2 {
			t.Fatalf("renewing the claim held %d (%v), want 2", n, err)
		}
		h.advance(2 * time.Minute) // past the first term, within the renewed one
		if got := claim(h, g, "c2"); len(got) != 0 {
			t.Fatalf("a renewed claim was taken over: %v", akeys(got))
		}
		if n, err := h.ops.RenewAlertClaim(h.ctx, "nobody", h.now().Add(time.Hour)); err != nil || n != 0 {
			t.Fatalf("renewing a claim nobody holds held %d (%v), want 0", n, err)
		}
		// The claimer's post took too long: its claim runs out and the group is claimed again before it
		// can finish. It notes its message; the new claimer finds it on the alerts it claims.
		h.advance(2 * time.Minute)
		again := claim(h, g, "c3")
		if len(again) != 2 {
			t.Fatalf("after the renewed claim ran out, claimed %v, want both", akeys(again))
		}
		if n, err := h.ops.FinishAlerts(h.ctx, items.AlertDelivery{Claim: "c1", Channel: "D1", TS: "1.1", At: h.now()}); err != nil || n != 0 {
			t.Fatalf("finishing a claim taken over changed %d (%v), want 0", n, err)
		}
		if n, err := h.ops.NoteAlertMessage(h.ctx, held, items.AlertDelivery{Channel: "D1", TS: "1.1"}); err != nil || n != 2 {
			t.Fatalf("noting the message changed %d (%v), want 2", n, err)
		}
		if n, _ := h.ops.NoteAlertMessage(h.ctx, held, items.AlertDelivery{Channel: "D1", TS: "9.9"}); n != 0 {
			t.Fatalf("a second message was noted over the first on %d alerts", n)
		}
		if err := h.ops.ReleaseAlerts(h.ctx, "c3"); err != nil {
			t.Fatal(err)
		}
		got := claim(h, g, "c4")
		if len(got) != 2 || got[0].Status != items.AlertPending || got[0].Channel != "D1" || got[0].TS != "1.1" {
			t.Fatalf("claimed %+v, want both pending, carrying the noted message D1/1.1", got)
		}
		if n, err := h.ops.FinishAlerts(h.ctx, items.AlertDelivery{Claim: "c4", Channel: "D1", TS: "1.1", At: h.now()}); err != nil || n != 2 {
			t.Fatalf("finish changed %d (%v), want 2", n, err)
		}
		if n, _ := h.ops.NoteAlertMessage(h.ctx, got, items.AlertDelivery{Channel: "D1", TS: "9.9"}); n != 0 {
			t.Fatalf("a message was noted on %d sent alerts", n)
		}
		// An escalation's message is noted as the escalation message of sent alerts.
		if n, err := h.ops.NoteAlertMessage(h.ctx, got[:1], items.AlertDelivery{Channel: "D9", TS: "2.2", Escalation: true}); err != nil || n != 1 {
			t.Fatalf("noting an escalation message changed %d (%v), want 1", n, err)
		}
		if esc, err := h.ops.MessageAlerts(h.ctx, "D9", "2.2"); err != nil || len(esc) != 1 || esc[0].Key != "k1" || esc[0].Status != items.AlertSent {
			t.Fatalf("escalation message alerts %+v (%v), want k1, still sent", esc, err)
		}
	})

	t.Run("PostAttemptMarkedUntilFinished", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		for _, k := range []string{"k1", "k2"} {
			add(h, alert(h, k, items.CauseNoDedupe, "U0ANNA", "exec-1"))
		}
		g := items.AlertGroup{Tenant: tenantA, Owner: "U0ANNA", BatchID: "exec-1"}
		if got := claim(h, g, "c1"); len(got) != 2 || got[0].PostAttemptAt != nil {
			t.Fatalf("claimed %+v, want both, no post attempted", got)
		}
		at := h.now().Add(1500 * time.Microsecond) // kept at least to the millisecond
		if n, err := h.ops.MarkAlertPost(h.ctx, "c1", at); err != nil || n != 2 {
			t.Fatalf("marking the post changed %d (%v), want 2", n, err)
		}
		if n, err := h.ops.MarkAlertPost(h.ctx, "nobody", at); err != nil || n != 0 {
			t.Fatalf("marking for a claim nobody holds changed %d (%v), want 0", n, err)
		}
		// A refused post clears the mark; the next post marks again.
		if n, err := h.ops.MarkAlertPost(h.ctx, "c1", time.Time{}); err != nil || n != 2 {
			t.Fatalf("clearing the mark changed %d (%v), want 2", n, err)
		}
		if as, _ := h.ops.ItemAlerts(h.ctx, tenantA, "k1"); len(as) != 1 || as[0].PostAttemptAt != nil {
			t.Fatalf("alerts %+v, want the mark cleared", as)
		}
		if n, err := h.ops.MarkAlertPost(h.ctx, "c1", at); err != nil || n != 2 {
			t.Fatalf("marking the post again changed %d (%v), want 2", n, err)
		}
		// The post's answer was lost: the claim is given back, the mark stays for the next sender.
		if err := h.ops.ReleaseAlerts(h.ctx, "c1"); err != nil {
			t.Fatal(err)
		}
		got := claim(h, g, "c2")
		if len(got) != 2 || got[0].PostAttemptAt == nil || got[0].PostAttemptAt.UnixMilli() != at.UnixMilli() {
			t.Fatalf("claimed again %+v, want both carrying the post attempted at %v", got, at)
		}
		if n, err := h.ops.FinishAlerts(h.ctx, items.AlertDelivery{Claim: "c2", Channel: "D1", TS: "1.1", At: h.now()}); err != nil || n != 2 {
			t.Fatalf("finish changed %d (%v), want 2", n, err)
		}
		sent, err := h.ops.MessageAlerts(h.ctx, "D1", "1.1")
		if err != nil || len(sent) != 2 || sent[0].PostAttemptAt != nil || sent[1].PostAttemptAt != nil {
			t.Fatalf("sent alerts %+v (%v), want both with no post in doubt", sent, err)
		}
		// An escalation's post is marked and cleared the same way.
		h.advance(2 * time.Hour)
		esc := claim(h, items.AlertGroup{Tenant: tenantA, Owner: "U0BOSS", BatchID: "exec-1", Escalation: true}, "c3")
		if len(esc) != 2 {
			t.Fatalf("escalation claimed %v, want both", akeys(esc))
		}
		if n, err := h.ops.MarkAlertPost(h.ctx, "c3", h.now()); err != nil || n != 2 {
			t.Fatalf("marking the escalation post changed %d (%v), want 2", n, err)
		}
		if n, err := h.ops.FinishAlerts(h.ctx, items.AlertDelivery{Claim: "c3", Channel: "D9", TS: "2.2", At: h.now(), Escalation: true}); err != nil || n != 2 {
			t.Fatalf("finish escalation changed %d (%v), want 2", n, err)
		}
		if esc, err := h.ops.MessageAlerts(h.ctx, "D9", "2.2"); err != nil || len(esc) != 2 || esc[0].PostAttemptAt != nil {
			t.Fatalf("escalated alerts %+v (%v), want both with no post in doubt", esc, err)
		}
	})

	t.Run("ConcurrentClaimsOneWinner", func(t *testing.T) {
		if opts.SkipConcurrency != "" {
			t.Skip(opts.SkipConcurrency)
		}
		t.Parallel()
		h := newOpsHarness(t, open)
		for i := range 20 {
			add(h, alert(h, fmt.Sprintf("k-%02d", i), items.CauseNoDedupe, "U0ANNA", "exec-1"))
		}
		g := items.AlertGroup{Tenant: tenantA, Owner: "U0ANNA", BatchID: "exec-1"}
		var mu sync.Mutex
		total, winners := 0, 0
		race(8, func(i int) {
			got, err := h.ops.ClaimAlerts(h.ctx, items.AlertClaim{Group: g, Claim: fmt.Sprintf("c%d", i), Now: h.now(), Until: h.now().Add(time.Minute)})
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			defer mu.Unlock()
			total += len(got)
			if len(got) > 0 {
				winners++
			}
		})
		if total != 20 {
			t.Errorf("8 concurrent claims took %d alerts in all (%d claimers got some), want each of 20 once", total, winners)
		}
	})

	t.Run("EscalationAndClosing", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		add(h, alert(h, "k1", items.CauseNoDedupe, "U0ANNA", ""))
		add(h, alert(h, "k2", items.CauseNoDedupe, "U0ANNA", ""))
		g := items.AlertGroup{Tenant: tenantA, Owner: "U0ANNA"}
		claim(h, g, "c1")
		if _, err := h.ops.FinishAlerts(h.ctx, items.AlertDelivery{Claim: "c1", Channel: "D1", TS: "1.1", At: h.now()}); err != nil {
			t.Fatal(err)
		}
		esc := items.AlertGroup{Tenant: tenantA, Owner: "U0BOSS", Escalation: true}
		// Somebody asks for k2's escalation now; k1 escalates when its hour is up.
		if n, err := h.ops.RequestEscalation(h.ctx, tenantA, "k2", "slack:U0ANNA", h.now()); err != nil || n != 1 {
			t.Fatalf("request escalation changed %d (%v), want 1", n, err)
		}
		if n, _ := h.ops.RequestEscalation(h.ctx, tenantA, "k2", "slack:U0ANNA", h.now()); n != 0 {
			t.Fatalf("a repeated request changed %d alerts", n)
		}
		groups, _ := h.ops.AlertGroups(h.ctx, h.now(), 10)
		if !slices.Contains(groups, esc) {
			t.Fatalf("groups %+v lack the escalation %+v", groups, esc)
		}
		if got := akeys(claim(h, esc, "e1")); !slices.Equal(got, []string{"k2"}) {
			t.Fatalf("escalation claimed %v, want [k2]", got)
		}
		if n, err := h.ops.FinishAlerts(h.ctx, items.AlertDelivery{Claim: "e1", Channel: "D9", TS: "2.2", At: h.now(), Escalation: true}); err != nil || n != 1 {
			t.Fatalf("finishing the escalation changed %d (%v)", n, err)
		}
		got, _ := h.ops.MessageAlerts(h.ctx, "D9", "2.2")
		if len(got) != 1 || got[0].Status != items.AlertEscalated || got[0].EscalatedBy != "slack:U0ANNA" || got[0].TS != "1.1" {
			t.Fatalf("escalated alert %+v", got)
		}
		if n, err := h.ops.CloseItemAlerts(h.ctx, tenantA, "k1", h.now()); err != nil || n != 1 {
			t.Fatalf("closing k1 changed %d (%v)", n, err)
		}
		h.advance(2 * time.Hour)
		groups, _ = h.ops.AlertGroups(h.ctx, h.now(), 10)
		if len(groups) != 0 {
			t.Fatalf("groups %+v after everything was escalated or closed, want none", groups)
		}
		if closed, _ := h.ops.CloseAlert(h.ctx, got[0], h.now()); !closed {
			t.Fatal("an escalated alert could not be closed")
		}
		if closed, _ := h.ops.CloseAlert(h.ctx, got[0], h.now()); closed {
			t.Fatal("a closed alert was closed again")
		}
	})

	// SettledAlerts finds the messages that may still carry live buttons: alerts that went out (sent or
	// escalated) and are open, whose item no longer waits for a person in their attempt (settled by a
	// lookup, a report or a person elsewhere, claimed again, or gone). Not those still waiting, nor
	// pending or closed ones.
	t.Run("SettledAlertsAreTheDeliveredOnesWhoseItemNoLongerWaits", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		for _, k := range []string{"waiting", "settled", "escalated", "pending", "closed", "claimed-again"} {
			h.unknownAfterTimeout(k)
			add(h, alert(h, k, items.CauseNoDedupe, "U0ANNA", ""))
		}
		add(h, alert(h, "gone", items.CauseNoDedupe, "U0ANNA", ""))
		// Every alert but pending's goes out in one message.
		if n, err := h.ops.CloseAlert(h.ctx, items.Alert{Tenant: tenantA, Key: "pending", Attempt: 1, Cause: items.CauseNoDedupe}, h.now()); err != nil || !n {
			t.Fatalf("set pending's alert aside: %v %v", n, err)
		}
		claim(h, items.AlertGroup{Tenant: tenantA, Owner: "U0ANNA"}, "c1")
		if n, err := h.ops.FinishAlerts(h.ctx, items.AlertDelivery{Claim: "c1", Channel: "D1", TS: "1.1", At: h.now()}); err != nil || n != 6 {
			t.Fatalf("finish: %d %v, want 6", n, err)
		}
		// pending's alert is due again (a later cause of the same attempt), not delivered.
		add(h, alert(h, "pending", items.CauseStale, "U0ANNA", ""))
		if _, err := h.ops.RequestEscalation(h.ctx, tenantA, "escalated", "slack:U0ANNA", h.now()); err != nil {
			t.Fatal(err)
		}
		claim(h, items.AlertGroup{Tenant: tenantA, Owner: "U0BOSS", Escalation: true}, "e1")
		if n, err := h.ops.FinishAlerts(h.ctx, items.AlertDelivery{Claim: "e1", Channel: "D9", TS: "2.2", At: h.now(), Escalation: true}); err != nil || n != 1 {
			t.Fatalf("finish the escalation: %d %v", n, err)
		}
		if n, err := h.ops.CloseItemAlerts(h.ctx, tenantA, "closed", h.now()); err != nil || n != 1 {
			t.Fatalf("close: %d %v", n, err)
		}
		if got, err := h.ops.SettledAlerts(h.ctx, 10); err != nil || len(got) != 1 || got[0].Key != "gone" {
			t.Fatalf("before any item is settled: %v (%v), want only the alert of the item that is gone", akeys(got), err)
		}
		for _, k := range []string{"settled", "escalated", "pending", "closed", "claimed-again"} {
			outcome := items.ResolveSucceeded
			if k == "claimed-again" {
				outcome = items.ResolveNotCommitted
			}
			if _, _, err := h.ledger.Resolve(h.ctx, items.ResolveParams{Tenant: tenantA, Key: k, Outcome: outcome,
				Evidence: "checked the destination", By: "ops"}); err != nil {
				t.Fatalf("resolve %s: %v", k, err)
			}
		}
		h.unknownAfterTimeout("claimed-again") // attempt 2 waits for a person: not the attempt of its alert
		got, err := h.ops.SettledAlerts(h.ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if keys := akeys(got); !slices.Equal(keys, []string{"claimed-again", "escalated", "gone", "settled"}) {
			t.Fatalf("settled alerts %v, want [claimed-again escalated gone settled]", keys)
		}
		if got[1].Status != items.AlertEscalated || got[1].EscalationTS != "2.2" || got[3].TS != "1.1" || got[3].Channel != "D1" {
			t.Errorf("settled alerts lack where their messages are: %+v", got)
		}
		if got, err := h.ops.SettledAlerts(h.ctx, 2); err != nil || len(got) != 2 {
			t.Fatalf("limit 2: %d alerts (%v)", len(got), err)
		}
		for _, a := range got {
			if _, err := h.ops.CloseAlert(h.ctx, a, h.now()); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := h.ops.SettledAlerts(h.ctx, 10); err != nil || len(got) != 0 {
			t.Fatalf("after closing them: %v (%v)", akeys(got), err)
		}
	})
}

func exerciseStats(t *testing.T, open func(t *testing.T) OperatorStore) {
	t.Run("MeasuresMatchTheLedger", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		// default: one success, one unknown needing a person (an hour old), one resolved by hand.
		a := h.claim("ok", payloadA)
		h.aw("ok", succeeded(a.Claim, "x-1"))
		h.unknownAfterTimeout("lost")
		h.unknownAfterTimeout("resolved")
		if _, _, err := h.resolve("resolved", items.ResolveNotCommitted, "nothing in the destination's log", ""); err != nil {
			t.Fatal(err)
		}
		// keyed: a same-key recovery (2 attempts) and a duplicate effect.
		a = h.unknownAfterTimeout("recovered", dest(destKeyed))
		a2 := h.claim("recovered", payloadA, dest(destKeyed))
		if a2.Reason != items.ReasonRetrySameKey {
			t.Fatalf("second claim %s, want retry_same_key", a2.Reason)
		}
		h.aw("recovered", succeeded(a2.Claim, "x-2"))
		a = h.claim("twice", payloadA, dest(destKeyed))
		h.aw("twice", succeeded(a.Claim, "x-3"))
		h.aw("twice", succeeded(a.Claim, "x-4"))
		// searchable: a retryable failure retried once, still in flight.
		a = h.claim("retrying", payloadA, dest(destSearchable))
		h.aw("retrying", failedClass(a.Claim, items.ClassDNS))
		h.advance(time.Hour)
		h.claim("retrying", payloadA, dest(destSearchable))
		h.as(tenantB).unknownAfterTimeout("other-tenant")
		if err := h.ops.AddCounter(h.ctx, tenantA, destKeyed, items.CounterFingerprintConflicts, 1); err != nil {
			t.Fatal(err)
		}
		if err := h.ops.AddCounter(h.ctx, tenantA, destKeyed, items.CounterFingerprintConflicts, 1); err != nil {
			t.Fatal(err)
		}

		st, err := h.ops.Stats(h.ctx, tenantA, h.now())
		if err != nil {
			t.Fatal(err)
		}
		total := st.Measures
		check := func(name string, got, want any) {
			t.Helper()
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s = %v, want %v", name, got, want)
			}
		}
		check("items", total.Items, 6)
		check("states", total.States, map[items.State]int{items.StatePrepared: 0, items.StateInFlight: 1, items.StateSucceeded: 3, items.StateFailed: 1, items.StateUnknown: 1})
		check("needs_person", total.NeedsPerson, 2) // lost, twice
		check("entered_unknown", total.EnteredUnknown, 3)
		check("oldest_unresolved_age_seconds", total.OldestUnresolvedAgeSeconds, 3600)
		check("retries", total.Retries, 2)
		check("retries_per_operation", total.RetriesPerOperation, 2.0/6)
		check("fingerprint_conflicts", total.FingerprintConflicts, 2)
		check("same_key_recoveries", total.SameKeyRecoveries, 1)
		check("manual_resolutions", total.ManualResolutions, 1)
		check("duplicate_effects", total.DuplicateEffects, 1)
		keyed := st.Destinations[destKeyed]
		check("keyed items", keyed.Items, 2)
		check("keyed retries", keyed.Retries, 1)
		check("keyed same_key_recoveries", keyed.SameKeyRecoveries, 1)
		check("keyed fingerprint_conflicts", keyed.FingerprintConflicts, 2)
		check("keyed needs_person", keyed.NeedsPerson, 1)
		check("default oldest", st.Destinations[destDefault].OldestUnresolvedAgeSeconds, 3600)
		check("searchable in_flight", st.Destinations[destSearchable].States[items.StateInFlight], 1)
		other, err := h.ops.Stats(h.ctx, tenantB, h.now())
		if err != nil {
			t.Fatal(err)
		}
		check("other tenant items", other.Items, 1)
		all, err := h.ops.Stats(h.ctx, "", h.now())
		if err != nil {
			t.Fatal(err)
		}
		check("all tenants' items", all.Items, 7)
		check("all tenants' needs_person", all.NeedsPerson, 3)
		check("all tenants' fingerprint_conflicts", all.FingerprintConflicts, 2)
		empty, err := h.ops.Stats(h.ctx, "nobody", h.now())
		if err != nil || empty.Items != 0 || len(empty.States) != len(items.States) {
			t.Errorf("stats of an empty tenant %+v (%v)", empty, err)
		}
	})

	t.Run("AcknowledgedCountsAsResolutionAndStopsTheAge", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		h.duplicateEffect("dup")
		h.staleFailure("stale") // an hour on the clock; "dup" has needed a person since
		h.advance(time.Hour)
		measure := func() items.Measures {
			t.Helper()
			st, err := h.ops.Stats(h.ctx, tenantA, h.now())
			if err != nil {
				t.Fatal(err)
			}
			return st.Measures
		}
		if m := measure(); m.NeedsPerson != 2 || m.OldestUnresolvedAgeSeconds < 7200 || m.ManualResolutions != 0 {
			t.Fatalf("before: needs_person %d, oldest %d s, manual_resolutions %d", m.NeedsPerson, m.OldestUnresolvedAgeSeconds, m.ManualResolutions)
		}
		if _, _, err := h.resolve("dup", items.ResolveAcknowledged, evidenceAck, ""); err != nil {
			t.Fatal(err)
		}
		if m := measure(); m.NeedsPerson != 1 || m.OldestUnresolvedAgeSeconds != 3600 || m.ManualResolutions != 1 || m.DuplicateEffects != 1 {
			t.Errorf("after acknowledging dup: needs_person %d, oldest %d s (want 3600), manual_resolutions %d, duplicate_effects %d",
				m.NeedsPerson, m.OldestUnresolvedAgeSeconds, m.ManualResolutions, m.DuplicateEffects)
		}
		if _, _, err := h.resolve("stale", items.ResolveAcknowledged, evidenceAck, ""); err != nil {
			t.Fatal(err)
		}
		if m := measure(); m.NeedsPerson != 0 || m.OldestUnresolvedAgeSeconds != 0 || m.ManualResolutions != 2 ||
			m.States[items.StateSucceeded] != 1 || m.States[items.StateFailed] != 1 {
			t.Errorf("after acknowledging both: needs_person %d, oldest %d s, manual_resolutions %d, states %v", m.NeedsPerson,
				m.OldestUnresolvedAgeSeconds, m.ManualResolutions, m.States)
		}
		// Neither is a sweep candidate's new need: the sweeper leaves them alone.
		for _, key := range []string{"dup", "stale"} {
			if cause := h.markNeedsPerson(key); cause != "" {
				t.Errorf("the sweeper flags acknowledged %s again: %s", key, cause)
			}
		}
	})
}
