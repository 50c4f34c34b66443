package blueprints

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// makeClaims are the companion claims of each Make blueprint: every before-write, single or batch.
var makeClaims = map[string][]string{
	"guarded-write":       {"Claim trigger event", NodeBeforeWrite},
	"lookup-reconcile":    {NodeBeforeWrite, "Before-write again"},
	"batch-guarded-write": {"Batch before-write"},
}

// afterClaim is the router that takes the claim's answer: the module after it in its flow.
func afterClaim(t *testing.T, bp MakeBlueprint, claim *MakeModule) MakeModule {
	t.Helper()
	flow := makeFlowOf(bp.Flow, claim.ID)
	for i, m := range flow {
		if m.ID == claim.ID && i+1 < len(flow) && flow[i+1].Module == "builtin:BasicRouter" {
			return flow[i+1]
		}
	}
	t.Fatalf("no router takes the answer of %s", claim.Metadata.Designer.Name)
	return MakeModule{}
}

// claimRun is where a simulated run of the blueprint starts (a single-item blueprint at its trigger, the
// batch at the claim's route of Check delivery) and the mappings it has: the example delivery with a
// space in the field the key is built from, the trigger claim held (when c is another claim) and the
// batch's two aggregated keys; claim c answered status, with companion's error body unless it is 200
// (then the decision is proceed).
func claimRun(t *testing.T, tpl Template, bp MakeBlueprint, c int, status int) ([]MakeModule, map[string]any) {
	t.Helper()
	var ev map[string]any
	if err := json.Unmarshal([]byte(tpl.Example.Event), &ev); err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{}
	for k, v := range ev {
		vals["1."+k] = v
	}
	vals["1.invoice"], vals["1.reference"] = "INV 742", "QT 417"
	if status != 0 {
		vals[fmt.Sprintf("%d.statusCode", c)] = float64(status)
	}
	if status == 200 {
		vals[fmt.Sprintf("%d.data.decision", c)] = "proceed"
	} else {
		vals[fmt.Sprintf("%d.data.error.code", c)] = "invalid_request"
		vals[fmt.Sprintf("%d.data.error.message", c)] = "key: must be 1-200 characters of A-Z a-z 0-9 . _ : @ + = ~ -"
		vals[fmt.Sprintf("%d.data.error.fields", c)] = []any{map[string]any{"field": "key", "problem": "a space"}}
	}
	if trig := findMakeModule(bp.Flow, "Claim trigger event"); trig != nil && trig.ID != c {
		vals[fmt.Sprintf("%d.statusCode", trig.ID)] = 200.0
		vals[fmt.Sprintf("%d.data.decision", trig.ID)] = "proceed"
	}
	if tpl.Shape != Batch {
		if again := findMakeModule(bp.Flow, "Before-write again"); again != nil && again.ID == c {
			// The second claim is asked after a lookup that found no record.
			bw, lk := findMakeModule(bp.Flow, NodeBeforeWrite).ID, findMakeModule(bp.Flow, "YOUR LOOKUP: find by reference").ID
			vals[fmt.Sprintf("%d.statusCode", bw)] = 200.0
			vals[fmt.Sprintf("%d.data.decision", bw)] = "reconcile"
			vals[fmt.Sprintf("%d.statusCode", lk)] = 200.0
			vals[fmt.Sprintf("%d.data.records", lk)] = []any{}
		}
		return bp.Flow, vals
	}
	agg := findMakeModule(bp.Flow, "All items")
	vals[fmt.Sprintf("%d.array", agg.ID)] = []any{map[string]any{"key": "invoice-INV 742:reminder:2", "missing": ""}, map[string]any{"key": "invoice-743:reminder:1", "missing": ""}}
	return findMakeModule(bp.Flow, "Check delivery").Routes[0].Flow, vals
}

// A claim companion refuses is answered with companion's status and words, like the n8n templates
// answer it: 400 and 413 as they are, 503 with a Retry-After, anything else 500; the body carries
// companion's error word, message and fields, and nothing after the answer writes. Before 2026-12-01
// every companion call ran with Evaluate all states as errors: a refused claim stopped the run with an
// error, and the sender got Make's own failure (no answer module ran).
func TestMakeRefusedClaimIsAnswered(t *testing.T) {
	for _, tpl := range Templates() {
		if tpl.N8nOnly {
			continue
		}
		bp := RenderMake(tpl, DefaultSettings())
		for _, name := range makeClaims[tpl.Slug] {
			claim := findMakeModule(bp.Flow, name)
			if claim == nil {
				t.Fatalf("%s: no %s", tpl.Slug, name)
			}
			if claim.Mapper.(MakeHTTPMapper).StopOnHTTPError {
				t.Errorf("%s: %s stops the run on a refused claim (Evaluate all states as errors is on)", tpl.Slug, name)
			}
			for status, want := range map[int]string{400: "400", 413: "413", 503: "503", 401: "500", 403: "500", 500: "500", 502: "500"} {
				flow, vals := claimRun(t, tpl, bp, claim.ID, status)
				run := simulateMake(t, flow, vals)
				if len(run.answers) != 1 {
					t.Errorf("%s: %s answered %d: %d webhook answers, want 1", tpl.Slug, name, status, len(run.answers))
					continue
				}
				a := run.answers[0]
				if a.status != want || a.body["status"] != any(float64(atoi(want))) {
					t.Errorf("%s: %s answered %d: the webhook is answered %s (body status %v), want %s", tpl.Slug, name, status, a.status, a.body["status"], want)
				}
				if (a.retryAfter != "") != (want == "503") || (want == "503" && a.retryAfter != "60") {
					t.Errorf("%s: %s answered %d: Retry-After %q", tpl.Slug, name, status, a.retryAfter)
				}
				msg, _ := a.body["message"].(string)
				if a.body["error"] != "invalid_request" || !strings.Contains(msg, "key: must be 1-200") || !strings.Contains(msg, "nothing was claimed") || a.body["fields"] == nil {
					t.Errorf("%s: %s answered %d: the body does not carry companion's words: %v", tpl.Slug, name, status, a.body)
				}
				for _, r := range run.reached {
					if !slices.Contains(makeClaims[tpl.Slug], r) && r != "YOUR LOOKUP: find by reference" && !strings.HasPrefix(r, "Record trigger outcome") && !strings.HasPrefix(r, "Reconcile: ") {
						t.Errorf("%s: %s answered %d: the run goes on to %s", tpl.Slug, name, status, r)
					}
				}
				if tpl.Shape == Batch {
					if keys, _ := a.body["items"].([]any); len(keys) != 2 {
						t.Errorf("%s: the refused call's answer does not name its items: %v", tpl.Slug, a.body)
					}
				} else if key, _ := a.body["key"].(string); !strings.Contains(key, " ") || !strings.Contains(msg, key) {
					t.Errorf("%s: %s answered %d: the answer names the key %v", tpl.Slug, name, status, a.body["key"])
				}
			}
			// A 200 is a decision: the refused route stays shut.
			flow, vals := claimRun(t, tpl, bp, claim.ID, 200)
			run := simulateMake(t, flow, vals)
			for _, a := range run.answers {
				if strings.Contains(a.name, "refused") || strings.Contains(a.name, "could not record") {
					t.Errorf("%s: %s answered 200 proceed, and %s answers it as refused", tpl.Slug, name, a.name)
				}
			}
		}
	}
}

// A companion that cannot be reached (a refused connection, DNS, a timeout) is answered 503 with a
// Retry-After, and the run ends with Ignore instead of stopping with an error (which left the sender
// with Make's own failure and, with Sequential processing and incomplete executions on, held up the
// scenario until a person resolved the stored run).
func TestMakeUnreachableCompanionIsAnswered(t *testing.T) {
	for _, tpl := range Templates() {
		if tpl.N8nOnly {
			continue
		}
		bp := RenderMake(tpl, DefaultSettings())
		for _, name := range makeClaims[tpl.Slug] {
			claim := findMakeModule(bp.Flow, name)
			if len(claim.OnError) == 0 || claim.OnError[len(claim.OnError)-1].Module != "builtin:Ignore" {
				t.Errorf("%s: %s has no error handler ending with Ignore", tpl.Slug, name)
				continue
			}
			flow, vals := claimRun(t, tpl, bp, claim.ID, 0)
			vals[fmt.Sprintf("%d.error.type", claim.ID)] = "ConnectionError"
			vals[fmt.Sprintf("%d.error.message", claim.ID)] = `connect ECONNREFUSED 127.0.0.1:8080 "quoted"`
			run := simulateMake(t, flow, vals)
			if len(run.answers) != 1 || run.answers[0].status != "503" || run.answers[0].retryAfter != "60" || run.reached[len(run.reached)-1] != name {
				t.Errorf("%s: %s unreachable: answers %+v, reached %v", tpl.Slug, name, run.answers, run.reached)
				continue
			}
			if msg, _ := run.answers[0].body["message"].(string); run.answers[0].body["error"] != "companion_unreachable" || !strings.Contains(msg, `ECONNREFUSED 127.0.0.1:8080 "quoted"`) {
				t.Errorf("%s: %s unreachable: body %v", tpl.Slug, name, run.answers[0].body)
			}
		}
	}
}

// Every end of lookup-reconcile's reconcile route answers the webhook: a found record 200, a lookup that
// failed 503, the second claim like the first. Until 2026-12-01 none of them did, so the sender got
// whatever Make answers a run that reaches no Webhook response.
func TestMakeReconcileRouteAnswers(t *testing.T) {
	bp := RenderMake(templateBySlug(t, "lookup-reconcile"), DefaultSettings())
	bw := findMakeModule(bp.Flow, NodeBeforeWrite).ID
	lk := findMakeModule(bp.Flow, "YOUR LOOKUP: find by reference")
	again := findMakeModule(bp.Flow, "Before-write again").ID
	finding := findMakeModule(bp.Flow, "Finding")
	base := map[string]any{fmt.Sprintf("%d.data.decision", bw): "reconcile", fmt.Sprintf("%d.data.key", bw): "quote-QT-1:create", fmt.Sprintf("%d.data.reference", bw): "QT-1"}
	for _, tc := range []struct {
		name    string
		vals    map[string]any
		flow    []MakeModule
		answers []string
		reached []string
	}{
		{"found", map[string]any{fmt.Sprintf("%d.statusCode", lk.ID): 200.0, fmt.Sprintf("%d.data.records", lk.ID): []any{map[string]any{"id": "rec-9"}}}, []MakeModule{*finding}, []string{"200"}, []string{"Reconcile: found"}},
		{"lookup answered 500", map[string]any{fmt.Sprintf("%d.statusCode", lk.ID): 500.0}, []MakeModule{*finding}, []string{"503"}, []string{"Reconcile: lookup failed"}},
		{"lookup failed", map[string]any{fmt.Sprintf("%d.error.type", lk.ID): "ConnectionError"}, lk.OnError, []string{"503"}, []string{"Reconcile: lookup failed"}},
		{"absent, then skip", map[string]any{fmt.Sprintf("%d.statusCode", again): 200.0, fmt.Sprintf("%d.data.decision", again): "skip", fmt.Sprintf("%d.data.reason", again): "awaiting_owner"}, afterClaimFlow(t, bp, again), []string{"503"}, nil},
		{"absent, then conflict", map[string]any{fmt.Sprintf("%d.statusCode", again): 200.0, fmt.Sprintf("%d.data.decision", again): "conflict"}, afterClaimFlow(t, bp, again), []string{"409"}, nil},
		{"absent, then proceed", map[string]any{fmt.Sprintf("%d.statusCode", again): 200.0, fmt.Sprintf("%d.data.decision", again): "proceed"}, afterClaimFlow(t, bp, again), nil, []string{NodeWrite}},
	} {
		vals := maps.Clone(base)
		maps.Copy(vals, tc.vals)
		run := simulateMake(t, tc.flow, vals)
		var got []string
		for _, a := range run.answers {
			got = append(got, a.status)
		}
		// The reports and the write are where the simulation stops; the answer comes after the report.
		if !slices.Equal(got, tc.answers) || !slices.Equal(run.reached, tc.reached) {
			t.Errorf("%s: answers %v reached %v, want %v %v", tc.name, got, run.reached, tc.answers, tc.reached)
		}
	}
}

// afterClaimFlow is the router after claim c, as a flow to simulate.
func afterClaimFlow(t *testing.T, bp MakeBlueprint, c int) []MakeModule {
	return []MakeModule{afterClaim(t, bp, findMakeModuleByID(bp.Flow, c))}
}

func findMakeModuleByID(flow []MakeModule, id int) *MakeModule {
	for i := range flow {
		if flow[i].ID == id {
			return &flow[i]
		}
		for _, r := range flow[i].Routes {
			if m := findMakeModuleByID(r.Flow, id); m != nil {
				return m
			}
		}
		if m := findMakeModuleByID(flow[i].OnError, id); m != nil {
			return m
		}
	}
	return nil
}

// The batch blueprint answers its webhook once for the whole delivery, after the batch after-write, by
// its items, first match wins: 409, 503 (the soonest Retry-After), 422, 200, as the n8n batch template
// does. Before 2026-12-01 it answered only a delivery with an incomplete item: every other run reached no
// Webhook response, so the sender got Make's default answer whatever happened to the items, and a
// delivery with an item refused 429 or dropped was never delivered again by the sender.
func TestMakeBatchAnswersTheDeliveryOnce(t *testing.T) {
	bp := RenderMake(templateBySlug(t, "batch-guarded-write"), DefaultSettings())
	c := findMakeModule(bp.Flow, "Batch before-write").ID
	all := findMakeModule(bp.Flow, "All evidence").ID
	reported := findMakeModule(bp.Flow, "Report, then answer")
	if reported == nil {
		t.Fatal("no router answering the delivery after the batch after-write")
	}
	dec := func(key, decision, reason string, retryAfter any) any {
		return map[string]any{"key": key, "decision": decision, "reason": reason, "retry_after": retryAfter, "claim": "c_" + key}
	}
	wrote := func(key, answer string, retryAfter float64) any {
		return map[string]any{"key": key, "answer": answer, "retry_after": retryAfter}
	}
	for _, tc := range []struct {
		name                string
		decisions, written  []any
		status, retryAfter  string
		answers             map[string]float64
		reportsBeforeAnswer bool
	}{
		{"three written", []any{dec("a", "proceed", "first", nil), dec("b", "proceed", "first", nil), dec("c", "proceed", "first", nil)},
			[]any{wrote("a", "ok", 60), wrote("b", "ok", 60), wrote("c", "ok", 60)}, "200", "", map[string]float64{"200": 3}, true},
		{"a re-run of a finished batch", []any{dec("a", "skip", "succeeded", nil), dec("b", "skip", "succeeded", nil)},
			[]any{}, "200", "", map[string]float64{"200": 2}, false},
		{"one refused 429 with Retry-After 2", []any{dec("a", "proceed", "first", nil), dec("b", "proceed", "first", nil)},
			[]any{wrote("a", "ok", 60), wrote("b", "later", 2)}, "503", "2", map[string]float64{"200": 1, "503": 1}, true},
		{"one dropped in transport (not aggregated)", []any{dec("a", "proceed", "first", nil), dec("b", "proceed", "first", nil), dec("c", "proceed", "first", nil)},
			[]any{wrote("a", "ok", 60), wrote("c", "ok", 60)}, "503", "60", map[string]float64{"200": 2, "503": 1}, true},
		{"every write dropped", []any{dec("a", "proceed", "first", nil)},
			[]any{}, "503", "60", map[string]float64{"503": 1}, false},
		{"a conflict beside a write", []any{dec("a", "conflict", "fingerprint_mismatch", nil), dec("b", "proceed", "first", nil), dec("c", "skip", "retry_later", 7.0)},
			[]any{wrote("b", "ok", 60)}, "409", "", map[string]float64{"409": 1, "200": 1, "503": 1}, true},
		{"one refused for good", []any{dec("a", "proceed", "first", nil), dec("b", "proceed", "first", nil)},
			[]any{wrote("a", "ok", 60), wrote("b", "final", 60)}, "422", "", map[string]float64{"200": 1, "422": 1}, true},
		{"failed for good before", []any{dec("a", "skip", "failed_permanent", nil), dec("b", "skip", "succeeded", nil)},
			[]any{}, "422", "", map[string]float64{"200": 1, "422": 1}, false},
		{"one still in progress", []any{dec("a", "skip", "in_progress", 12.0), dec("b", "proceed", "first", nil)},
			[]any{wrote("b", "ok", 60)}, "503", "12", map[string]float64{"200": 1, "503": 1}, true},
		{"a reconcile (the batch does no lookups)", []any{dec("a", "reconcile", "lookup_required", nil)},
			[]any{}, "503", "60", map[string]float64{"503": 1}, false},
	} {
		vals := map[string]any{
			fmt.Sprintf("%d.statusCode", c): 200.0, fmt.Sprintf("%d.data.items", c): tc.decisions,
			fmt.Sprintf("%d.data.counts", c): map[string]any{"proceed": 1.0}, fmt.Sprintf("%d.array", all): tc.written,
		}
		run := simulateMake(t, []MakeModule{*reported}, vals)
		if len(run.answers) != 1 {
			t.Errorf("%s: %d answers, want 1", tc.name, len(run.answers))
			continue
		}
		a := run.answers[0]
		if a.status != tc.status || a.body["status"] != any(float64(atoi(tc.status))) || (tc.status == "503" && a.retryAfter != tc.retryAfter) {
			t.Errorf("%s: answered %s (body %v) Retry-After %s, want %s %s", tc.name, a.status, a.body["status"], a.retryAfter, tc.status, tc.retryAfter)
		}
		got := map[string]float64{}
		for k, v := range a.body["answers"].(map[string]any) {
			if v.(float64) != 0 {
				got[k] = v.(float64)
			}
		}
		if !maps.Equal(got, tc.answers) {
			t.Errorf("%s: answers per status %v, want %v", tc.name, got, tc.answers)
		}
		if reported := slices.Contains(run.reached, "Batch after-write"); reported != tc.reportsBeforeAnswer {
			t.Errorf("%s: the batch after-write ran %v before the answer, want %v", tc.name, reported, tc.reportsBeforeAnswer)
		}
		if b, _ := json.Marshal(a.body); strings.Contains(string(b), "c_") {
			t.Errorf("%s: the answer shows the sender a claim: %s", tc.name, b)
		}
	}
}

// makeIDs are the ids of every module named name (lookup-reconcile has two writes).
func makeIDs(flow []MakeModule, name string) []int {
	var ids []int
	for _, m := range flow {
		if m.Metadata.Designer.Name == name {
			ids = append(ids, m.ID)
		}
		for _, r := range m.Routes {
			ids = append(ids, makeIDs(r.Flow, name)...)
		}
		ids = append(ids, makeIDs(m.OnError, name)...)
	}
	return ids
}

// Every run of a single-item blueprint answers its webhook exactly once, whatever the claims, the write and
// the lookup answer: a run with no answer gets Make's own default answer (a silent 200 for a sender), and
// a second answer never reaches the sender. The delivery is one bundle (the webhook's); several events in
// one delivery belong in the batch blueprint, which answers once for all of them.
func TestMakeEveryRunAnswersOnce(t *testing.T) {
	type answer map[string]any // N.path → value, for the modules named below
	claim := func(status int, decision, reason string) answer {
		a := answer{"statusCode": float64(status)}
		if status == 200 {
			a["data.decision"], a["data.reason"], a["data.key"], a["data.claim"] = decision, reason, "k", "c_1"
		} else if status != 0 {
			a["data.error.code"], a["data.error.message"] = "invalid_request", "refused"
		} else {
			a = answer{"error.type": "ConnectionError", "error.message": "connect ECONNREFUSED"}
		}
		return a
	}
	unreachable := claim(0, "", "")
	written := answer{"statusCode": 201.0, "data.id": "rec-1"}
	refused429 := answer{"statusCode": 429.0}
	dropped := answer{"error.type": "ConnectionError", "error.message": "socket hang up ECONNRESET"}
	for _, tpl := range Templates() {
		if tpl.N8nOnly || tpl.Shape == Batch {
			continue
		}
		bp := RenderMake(tpl, DefaultSettings())
		if strings.Contains(string(must(encode(bp))), "builtin:BasicFeeder") {
			t.Errorf("%s: a single-item blueprint iterates: each bundle would reach its own answer", tpl.Slug)
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(tpl.Example.Event), &ev); err != nil {
			t.Fatal(err)
		}
		type step struct {
			module string
			answer answer
		}
		var runs [][]step
		triggers := [][]step{nil}
		if tpl.TriggerGuard {
			triggers = [][]step{{{"Claim trigger event", claim(200, "proceed", "first")}}, {{"Claim trigger event", claim(200, "skip", "succeeded")}},
				{{"Claim trigger event", claim(200, "skip", "in_progress")}}, {{"Claim trigger event", claim(200, "conflict", "fingerprint_mismatch")}},
				{{"Claim trigger event", claim(200, "skip", "attempts_exhausted")}}, {{"Claim trigger event", claim(400, "", "")}}, {{"Claim trigger event", unreachable}}}
		}
		for _, trig := range triggers {
			for _, w := range [][]step{
				{{NodeBeforeWrite, claim(200, "proceed", "first")}, {NodeWrite, written}},
				{{NodeBeforeWrite, claim(200, "proceed", "first")}, {NodeWrite, refused429}},
				{{NodeBeforeWrite, claim(200, "proceed", "first")}, {NodeWrite, dropped}},
				{{NodeBeforeWrite, claim(200, "skip", "succeeded")}}, {{NodeBeforeWrite, claim(200, "skip", "retry_later")}},
				{{NodeBeforeWrite, claim(200, "conflict", "fingerprint_mismatch")}}, {{NodeBeforeWrite, claim(400, "", "")}},
				{{NodeBeforeWrite, claim(413, "", "")}}, {{NodeBeforeWrite, claim(503, "", "")}}, {{NodeBeforeWrite, unreachable}},
			} {
				runs = append(runs, append(append([]step{}, trig...), w...))
			}
		}
		if tpl.Dedupe == DedupeLookup {
			reconcile := step{NodeBeforeWrite, claim(200, "reconcile", "lookup_required")}
			found := answer{"statusCode": 200.0, "data.records": []any{map[string]any{"id": "rec-9"}}}
			absent := answer{"statusCode": 200.0, "data.records": []any{}}
			for _, tail := range [][]step{
				{{"YOUR LOOKUP: find by reference", found}},
				{{"YOUR LOOKUP: find by reference", answer{"statusCode": 500.0}}},
				{{"YOUR LOOKUP: find by reference", dropped}},
				{{"YOUR LOOKUP: find by reference", absent}, {"Before-write again", claim(200, "proceed", "retry")}, {NodeWrite, written}},
				{{"YOUR LOOKUP: find by reference", absent}, {"Before-write again", claim(200, "proceed", "retry")}, {NodeWrite, dropped}},
				{{"YOUR LOOKUP: find by reference", absent}, {"Before-write again", claim(200, "skip", "in_progress")}},
				{{"YOUR LOOKUP: find by reference", absent}, {"Before-write again", claim(400, "", "")}},
				{{"YOUR LOOKUP: find by reference", absent}, {"Before-write again", unreachable}},
			} {
				runs = append(runs, append([]step{reconcile}, tail...))
			}
		}
		for _, run := range runs {
			vals := map[string]any{}
			for k, v := range ev {
				vals["1."+k] = v
			}
			var names []string
			for _, s := range run {
				names = append(names, fmt.Sprintf("%s %v", s.module, s.answer["statusCode"]))
				for _, id := range makeIDs(bp.Flow, s.module) {
					for k, v := range s.answer {
						vals[fmt.Sprintf("%d.%s", id, k)] = v
					}
				}
			}
			got := simulateMake(t, bp.Flow, vals)
			if len(got.answers) != 1 {
				var as []string
				for _, a := range got.answers {
					as = append(as, a.name+" "+a.status)
				}
				t.Errorf("%s: run %v: %d answers %v, want 1", tpl.Slug, names, len(got.answers), as)
			}
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
