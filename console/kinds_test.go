package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// kinds fills the env's ledger with an item of every kind an owner can meet, and returns their keys by
// kind: each state, each reason for needing a person, each alert status and each probe finding.
func (e *env) kinds() map[string]string {
	e.t.Helper()
	k := map[string]string{}
	dest := "billing"
	claim := func(key string, dedupe items.Dedupe, ref string) items.Answer {
		e.t.Helper()
		a, err := e.ledger.BeforeWrite(e.ctx, items.BeforeWriteParams{Tenant: "default", Key: key, Fingerprint: fingerprint,
			Destination: dest, Dedupe: dedupe, Reference: ref, ExecutionID: "exec-" + key})
		if err != nil {
			e.t.Fatalf("before-write %s: %v", key, err)
		}
		return a
	}
	report := func(key string, a items.Answer, ev items.Evidence, ext string) {
		e.t.Helper()
		if _, err := e.ledger.AfterWrite(e.ctx, items.AfterWriteParams{Tenant: "default", Key: key, Claim: a.Claim,
			ExternalID: ext, Evidence: ev}); err != nil {
			e.t.Fatalf("after-write %s: %v", key, err)
		}
	}
	e.succeededItem("k-succeeded", "", 0)
	k["succeeded"] = "k-succeeded"

	report("k-retryable", claim("k-retryable", items.DedupeKey, "QT-R"), items.Evidence{Outcome: items.OutcomeFailed, Class: items.ClassDNS}, "")
	k["failed retryable"] = "k-retryable"

	report("k-permanent", claim("k-permanent", items.DedupeKey, "QT-P"), items.Evidence{Outcome: items.OutcomeFailed, HTTPStatus: 422, Class: items.ClassHTTP}, "")
	k["failed permanent"] = "k-permanent"

	for range items.DefaultMaxAttempts {
		a := claim("k-exhausted", items.DedupeKey, "QT-E")
		report("k-exhausted", a, items.Evidence{Outcome: items.OutcomeFailed, Class: items.ClassConnectionRefused}, "")
		e.clock.Advance(time.Hour)
	}
	claim("k-exhausted", items.DedupeKey, "QT-E")
	k["attempts exhausted"] = "k-exhausted"

	e.unknownItem("k-unknown", "QT-U", "", 0)
	k["unknown, no dedupe"] = "k-unknown"

	e.unknownItem("k-alerted", "QT-A", "", 0)
	mark := []items.AlertMark{{Key: "k-alerted", Attempt: 1, Cause: items.CauseNoDedupe}}
	if _, err := e.ledger.RecordAlerts(e.ctx, "default", mark, items.AlertSent, "U0BILLING"); err != nil {
		e.t.Fatal(err)
	}
	k["unknown, alert sent"] = "k-alerted"
	e.unknownItem("k-escalated", "QT-X", "", 0)
	mark = []items.AlertMark{{Key: "k-escalated", Attempt: 1, Cause: items.CauseNoDedupe}}
	if _, err := e.ledger.RecordAlerts(e.ctx, "default", mark, items.AlertEscalated, "U0LEAD"); err != nil {
		e.t.Fatal(err)
	}
	k["unknown, escalated"] = "k-escalated"

	// A lookup destination: an unknown outcome, probe reads found/absent/failed, then a failed lookup.
	a := claim("k-lookup", items.DedupeLookup, "QT-L")
	report("k-lookup", a, items.Evidence{Outcome: items.OutcomeUnknown, Class: items.ClassTimeout}, "")
	for i, o := range []string{items.ProbeAbsent, items.ProbeFailed} {
		if _, err := e.ledger.RecordProbe(e.ctx, "default", "k-lookup", 1, items.ProbeRead{Read: i + 1, Of: 3,
			URL: "https://billing.example/search?ref=QT-L", Status: 200, Outcome: o, Detail: "records.0.id empty", At: e.clock.Now()}, "probe:billing"); err != nil {
			e.t.Fatal(err)
		}
	}
	k["unknown, lookup pending, probes absent and failed"] = "k-lookup"
	a = claim("k-lookupfailed", items.DedupeLookup, "QT-LF")
	report("k-lookupfailed", a, items.Evidence{Outcome: items.OutcomeUnknown, Class: items.ClassTimeout}, "")
	if _, err := e.ledger.Reconcile(e.ctx, items.ReconcileParams{Tenant: "default", Key: "k-lookupfailed", Finding: items.FindingLookupFailed,
		Evidence: "the search API answered 500 twice"}); err != nil {
		e.t.Fatal(err)
	}
	k["lookup failed"] = "k-lookupfailed"
	a = claim("k-found", items.DedupeLookup, "QT-F")
	report("k-found", a, items.Evidence{Outcome: items.OutcomeUnknown, Class: items.ClassTimeout}, "")
	if _, err := e.ledger.Reconcile(e.ctx, items.ReconcileParams{Tenant: "default", Key: "k-found", Finding: items.FindingFound,
		ExternalID: "in_found", Evidence: "probe: found records.0.id=in_found", By: "probe:billing"}); err != nil {
		e.t.Fatal(err)
	}
	k["found by a lookup"] = "k-found"

	// A duplicate effect, and one acknowledged.
	for _, key := range []string{"k-duplicate", "k-acknowledged"} {
		a := claim(key, items.DedupeKey, "QT-D")
		report(key, a, items.Evidence{Outcome: items.OutcomeSucceeded, HTTPStatus: 201}, "in_1")
		report(key, a, items.Evidence{Outcome: items.OutcomeSucceeded, HTTPStatus: 201}, "in_2")
	}
	k["duplicate effect"] = "k-duplicate"
	if _, _, err := e.ledger.Resolve(e.ctx, items.ResolveParams{Tenant: "default", Key: "k-acknowledged", Outcome: items.ResolveAcknowledged,
		Evidence: "refunded the second invoice", By: "ops-alice"}); err != nil {
		e.t.Fatal(err)
	}
	k["acknowledged"] = "k-acknowledged"

	e.unknownItem("k-settled", "QT-S", "", 0)
	if _, _, err := e.ledger.Resolve(e.ctx, items.ResolveParams{Tenant: "default", Key: "k-settled", Outcome: items.ResolveNotCommitted,
		Evidence: "no invoice in billing for QT-S", By: "ops-alice"}); err != nil {
		e.t.Fatal(err)
	}
	k["settled by a person"] = "k-settled"

	// Unresolved for longer than the destination's escalate_after: a retryable failure (acknowledged by a
	// person) and an unknown outcome a same-key retry could settle (resolved by a person).
	dest = "slow"
	report("k-stalefailed", claim("k-stalefailed", items.DedupeKey, "QT-SF"), items.Evidence{Outcome: items.OutcomeFailed, Class: items.ClassDNS}, "")
	report("k-staleunknown", claim("k-staleunknown", items.DedupeKey, "QT-SU"), items.Evidence{Outcome: items.OutcomeUnknown, Class: items.ClassTimeout}, "")
	dest = "billing"
	e.clock.Advance(2 * time.Hour)
	for _, key := range []string{"k-stalefailed", "k-staleunknown"} {
		if cause, err := e.ledger.MarkNeedsPerson(e.ctx, "default", key); err != nil || cause != items.CauseStale {
			e.t.Fatalf("mark %s: %q %v", key, cause, err)
		}
	}
	k["failed retryable, unresolved too long"] = "k-stalefailed"
	k["unknown, unresolved too long"] = "k-staleunknown"

	// Items of a batch.
	e.unknownItem("k-batch-0", "QT-B0", "b-1", 0)
	e.succeededItem("k-batch-1", "b-1", 1)
	k["unknown, of a batch"] = "k-batch-0"
	k["succeeded, of a batch"] = "k-batch-1"

	e.claimIn("k-expired", "QT-EX", "exec-ex")
	e.clock.Advance(time.Hour)
	k["in flight past its lease"] = "k-expired"
	e.claimIn("k-inflight", "QT-I", "exec-i")
	k["in flight"] = "k-inflight"
	return k
}

var outcomeRadio = regexp.MustCompile(`name="outcome" value="([a-z_]+)"`)

// offered returns the outcomes an item page's resolve form offers.
func offered(body string) []string {
	var out []string
	for _, m := range outcomeRadio.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

// The item page offers exactly the outcomes POST /v1/items/{key}/resolve accepts (API.md: succeeded and
// not_committed for an unknown item, an in-flight one past its lease, or a failed one with no attempts
// left; acknowledged for a duplicate effect or a stale retryable failure): every outcome it leaves out is
// refused with 409, and the one it offers first is recorded. It used to offer all three on every item
// that needed a person, and none on an in-flight item past its lease.
func TestTheResolveFormOffersExactlyWhatResolveAccepts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{open: true})
	k := e.kinds()
	settle := []string{items.ResolveSucceeded, items.ResolveNotCommitted}
	want := map[string][]string{
		"succeeded": nil, "failed retryable": nil, "failed permanent": nil, "attempts exhausted": settle,
		"unknown, no dedupe": settle, "unknown, alert sent": settle, "unknown, escalated": settle,
		"unknown, lookup pending, probes absent and failed": settle, "lookup failed": settle, "found by a lookup": nil,
		"duplicate effect": {items.ResolveAcknowledged}, "acknowledged": nil, "settled by a person": nil,
		"in flight": nil, "in flight past its lease": settle,
		"failed retryable, unresolved too long": {items.ResolveAcknowledged}, "unknown, unresolved too long": settle,
		"unknown, of a batch": settle, "succeeded, of a batch": nil,
	}
	c := e.client()
	csrf := ""
	for kind, key := range k {
		w, ok := want[kind]
		if !ok {
			t.Fatalf("no expectation for %s", kind)
		}
		status, body, tok := e.page(c, "/console/item?key="+key)
		if status != http.StatusOK {
			t.Fatalf("%s: item page answered %d", kind, status)
		}
		if tok != "" { // only an item with a resolve form carries one; the map's order is random
			csrf = tok
		}
		if got := offered(body); !slices.Equal(got, w) {
			t.Errorf("%s (%s): the form offers %v, want %v", kind, key, got, w)
		}
		if len(w) == 0 && strings.Contains(body, `id="resolve"`) {
			t.Errorf("%s: a resolve form with no outcome", kind)
		}
	}
	if csrf == "" {
		t.Fatal("no CSRF token on any item page")
	}
	evidence := "checked the billing tool for the reference"
	for kind, key := range k {
		for _, o := range []string{items.ResolveSucceeded, items.ResolveNotCommitted, items.ResolveAcknowledged} {
			if slices.Contains(want[kind], o) {
				continue
			}
			resp, body := e.post(c, "/console/item/resolve", url.Values{"csrf": {csrf}, "key": {key}, "outcome": {o}, "evidence": {evidence}}, nil)
			if resp.StatusCode != http.StatusConflict {
				t.Errorf("%s: %s, not offered, answered %d, want 409:\n%s", kind, o, resp.StatusCode, body)
			}
		}
	}
	for kind, key := range k {
		if len(want[kind]) == 0 {
			continue
		}
		resp, body := e.post(c, "/console/item/resolve", url.Values{"csrf": {csrf}, "key": {key}, "outcome": {want[kind][0]}, "evidence": {evidence}}, nil)
		if resp.StatusCode != http.StatusSeeOther {
			t.Errorf("%s: %s, offered, answered %d, want 303:\n%s", kind, want[kind][0], resp.StatusCode, body)
		}
	}
}

// A resolution refused because the item changed since the page was loaded (another person settled it)
// answers 409 with the contract's reason on the item as it is now; the reason used to sit inside the
// resolve form, which a settled item no longer shows, so the page said nothing.
func TestAResolutionRefusedAfterAnotherPersonSettledTheItemSaysWhy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{open: true})
	e.unknownItem("inv-9", "QT-9", "", 0)
	c := e.client()
	_, _, csrf := e.page(c, "/console/item?key=inv-9")
	if _, _, err := e.ledger.Resolve(e.ctx, items.ResolveParams{Tenant: "default", Key: "inv-9", Outcome: items.ResolveSucceeded,
		Evidence: "found invoice 9 in billing", By: "ops-bob"}); err != nil {
		t.Fatal(err)
	}
	resp, body := e.post(c, "/console/item/resolve", url.Values{"csrf": {csrf}, "key": {"inv-9"}, "outcome": {"not_committed"},
		"evidence": {"no invoice 9 in billing"}}, nil)
	i := strings.Index(body, `id="refused"`)
	if resp.StatusCode != http.StatusConflict || i < 0 || !strings.Contains(body[i:], "this item is succeeded") {
		t.Fatalf("a resolution of an item settled meanwhile answered %d without the reason:\n%s", resp.StatusCode, body)
	}
	if strings.Contains(body, `id="resolve"`) {
		t.Error("the page still offers a resolve form for a settled item")
	}
}

// Every kind of item tells its owner in words what its state means and what to do next, and says its alert
// status, its cause, its lookups' and probe reads' findings and its resolution in words, with the ledger's
// word beside them (it used to show the bare words: "pending", "lease_expired", "read_2", "absent").
func TestTheItemPageSaysEveryKindInWords(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{open: true})
	k := e.kinds()
	c := e.client()
	bodies := map[string]string{}
	for kind, key := range k {
		status, body, _ := e.page(c, "/console/item?key="+key)
		if status != http.StatusOK {
			t.Fatalf("%s: %d", kind, status)
		}
		bodies[kind] = body
		if m := regexp.MustCompile(`id="situation">([^<]+)<`).FindStringSubmatch(body); m == nil || len(m[1]) < 30 {
			t.Errorf("%s: no sentence says what the state means and what to do next", kind)
		}
	}
	for _, w := range []struct{ kind, id, want string }{
		{"unknown, no dedupe", "alert", "due, not sent yet"},
		{"unknown, alert sent", "alert", "sent to the owner"},
		{"unknown, escalated", "alert", "escalated: sent on to the escalation contact"},
		{"in flight past its lease", "cause", "the workflow&#39;s lease ran out before it reported"},
		{"lookup failed", "cause", "the lookup by reference failed"},
		{"unknown, lookup pending, probes absent and failed", "timeline", "not found (yet)"},
		{"unknown, lookup pending, probes absent and failed", "timeline", "the read failed: proves nothing"},
		{"lookup failed", "timeline", "the lookup failed: proves nothing"},
		{"found by a lookup", "timeline", "found in the destination"},
		{"acknowledged", "resolution-outcome", "acknowledged"},
		{"acknowledged", "duplicate", "(acknowledged)"},
		{"duplicate effect", "situation", "undo the duplicate if there is one, then acknowledge it"},
		{"settled by a person", "resolution-outcome", "not committed: a retry may write it"},
		{"attempts exhausted", "situation", "no attempts are left"},
		{"attempts exhausted", "failure", "the connection was refused: nothing was sent"},
		{"failed permanent", "situation", "refused the write for good"},
		{"failed retryable", "situation", "will be retried"},
		{"in flight", "situation", "A workflow holds this item"},
		{"unknown, no dedupe", "timeline", "the outcome is unknown and the destination can neither dedupe nor be searched"},
		{"failed retryable, unresolved too long", "situation", "nothing has moved for too long"},
		{"unknown, unresolved too long", "situation", "nothing has moved for too long (no run retried it or looked it up)"},
	} {
		body := bodies[w.kind]
		i := strings.Index(body, `id="`+w.id+`"`)
		if i < 0 {
			t.Errorf("%s: no #%s", w.kind, w.id)
			continue
		}
		if !strings.Contains(body[i:], w.want) {
			t.Errorf("%s: #%s does not say %q", w.kind, w.id, w.want)
		}
	}
	for kind, body := range bodies {
		if strings.Contains(body, operatorSecret) || strings.Contains(body, `"invoice":"742"`) {
			t.Errorf("%s: the page shows a secret or a payload", kind)
		}
	}
}

// The queue says of each item whether its alert went out (pending, sent, escalated) and its last error in
// words, and Find marks the items that need a person (a duplicate effect is "succeeded" and needs one).
func TestTheQueueSaysTheAlertAndFindMarksWhoNeedsAPerson(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{open: true})
	e.kinds()
	c := e.client()
	_, queue, _ := e.page(c, "/console/")
	rowOf := func(body, key string) string {
		i := strings.Index(body, `data-key="`+key+`"`)
		if i < 0 {
			t.Fatalf("no row for %s", key)
		}
		j := strings.Index(body[i:], "</tr>")
		return body[i : i+j]
	}
	for key, want := range map[string]string{
		"k-unknown":   "Alert: due, not sent yet",
		"k-alerted":   "Alert: sent to the owner",
		"k-escalated": "Alert: escalated: sent on to the escalation contact",
		"k-exhausted": "attempt 3 · connection refused",
	} {
		if r := rowOf(queue, key); !strings.Contains(r, want) {
			t.Errorf("the queue's row of %s does not say %q:\n%s", key, want, r)
		}
	}
	_, find, _ := e.page(c, "/console/find?q=QT-D")
	if r := rowOf(find, "k-duplicate"); !strings.Contains(r, "needs a person") {
		t.Errorf("Find does not mark the duplicate effect as needing a person:\n%s", r)
	}
	if r := rowOf(find, "k-acknowledged"); strings.Contains(r, "needs a person") {
		t.Errorf("Find marks the acknowledged item as needing a person:\n%s", r)
	}
}
