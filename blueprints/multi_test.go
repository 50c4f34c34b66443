package blueprints

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The single-item templates fed several items, and claims companion refuses (400): the graph that reports
// every item before any answer, the one answer for all items, and the refusal answered with companion's words.

// feeds lists what feeds each node of wf, as "from/output->input", sorted.
func feeds(wf N8nWorkflow) map[string][]string {
	into := map[string][]string{}
	for from, c := range wf.Connections {
		for out, edges := range c.Main {
			for _, e := range edges {
				into[e.Node] = append(into[e.Node], fmt.Sprintf("%s/%d->%d", from, out, e.Index))
			}
		}
	}
	for _, v := range into {
		slices.Sort(v)
	}
	return into
}

// TestSingleTemplatesReportEveryItemBeforeAnswering: in guarded-write, lookup-reconcile and the
// sub-workflows' caller, both outputs of the write meet in one Merge before the report, and every node that
// ends an item feeds its own input of All items, the one Merge before the Answer, so that n8n runs the Answer
// (and the stop for a person) once, after every item of every route was reported.
func TestSingleTemplatesReportEveryItemBeforeAnswering(t *testing.T) {
	want := map[string]map[string]string{
		"guarded-write": {
			"Both outcomes": "[Write error/0->1 YOUR WRITE: create the record/0->0]",
			"Evidence":      "[Both outcomes/0->0]",
			"Ends":          "[Other answer/0->3 Stored result/0->1 Surface/0->2 Write outcome/0->0]",
			"All items":     "[Delivery complete?/1->4 Duplicate trigger: stop/0->2 Outcome/0->0 Outcome: trigger not claimed/0->1 Trigger: other answer/0->3]",
			"Answer":        "[All items/0->0]",
			// One run per node: each has one feeding output.
			"Claim the write":         "[Duplicate?/1->1 First delivery?/0->0]",
			NodeBeforeWrite:           "[Claim the write/0->0]",
			"Duplicate trigger: stop": "[Duplicate?/0->0]",
			"Surface":                 "[Decision/2->0]",
			"Other answer":            "[Decision/3->0]",
		},
		"lookup-reconcile": {
			"Both outcomes": "[Write error/0->1 YOUR WRITE: create the record/0->0]",
			"All items":     "[Delivery complete?/1->6 Other answer again/0->5 Other answer/0->3 Stored result again/0->4 Stored result/0->1 Surface/0->2 Write outcome/0->0]",
			"Answer":        "[All items/0->0]",
			"Other answer":  "[Decision/4->0]",
			// No loop: after the lookup, before-write is asked again by its own nodes, and the claims that
			// proceed either way meet before the write.
			NodeBeforeWrite:      "[Settings/0->0]",
			"Before-write again": "[Reconcile/0->0]",
			"To the write":       "[Decision again/0->1 Decision/0->0]",
			NodeWrite:            "[To the write/0->0]",
		},
		"guarded-write-subworkflows": {
			"Both outcomes": "[YOUR WRITE: create the record/0->0 YOUR WRITE: create the record/1->1]",
			"All items":     "[Delivery complete?/1->4 Other answer/0->3 Stored result/0->1 Surface/0->2 companion: report/0->0]",
			"Answer":        "[All items/0->0]",
			"Other answer":  "[Decision/3->0]",
		},
	}
	for _, tpl := range Templates() {
		w, ok := want[tpl.Slug]
		if !ok {
			continue
		}
		wf := RenderN8n(tpl, DefaultSettings())
		into := feeds(wf)
		for node, fed := range w {
			if got := fmt.Sprint(into[node]); got != fed {
				t.Errorf("%s: %s is fed by %s, want %s", tpl.Slug, node, got, fed)
			}
		}
		for _, n := range wf.Nodes {
			if n.Name == "All items" && n.Parameters.(MergeParams).NumberInputs != strings.Count(w["All items"], "->") {
				t.Errorf("%s: All items has %d inputs", tpl.Slug, n.Parameters.(MergeParams).NumberInputs)
			}
			if (n.Name == "Answer" || n.Name == "Done") && n.Parameters.(CodeParams).Mode != "runOnceForAllItems" {
				t.Errorf("%s: %s runs %s, want once for all items", tpl.Slug, n.Name, n.Parameters.(CodeParams).Mode)
			}
			if n.Name == NodeBeforeWrite || n.Name == "Claim trigger event" || n.Name == "Before-write again" {
				if r := n.Parameters.(HTTPParams).Options.Response; r == nil || !r.Response.NeverError || !r.Response.FullResponse {
					t.Errorf("%s: %s throws on a refusal (want Never Error with the full response)", tpl.Slug, n.Name)
				}
			}
		}
	}
}

// runAnswer runs guarded-write's Answer once for the given items and returns its one output item.
func runAnswer(t *testing.T, items ...string) map[string]any {
	t.Helper()
	bin, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node (Node.js) is not on PATH: the template's code cannot be run here")
	}
	var code string
	for _, n := range RenderN8n(Templates()[0], DefaultSettings()).Nodes {
		if n.Name == "Answer" {
			code = n.Parameters.(CodeParams).JSCode
		}
	}
	prog := `const ITEMS = [` + strings.Join(items, ",") + `];
const $input = { all: () => ITEMS.map((json) => ({ json })), first: () => ({ json: ITEMS[0] }) };
const out = (() => {` + code + `})();
if (out.length !== 1) throw new Error(out.length + ' answers');
process.stdout.write(JSON.stringify(out[0].json));`
	var got map[string]any
	runNode(t, bin, prog, &got)
	return got
}

// TestAnswerForSeveralItems: several items are answered once, by the item that most needs it (first match:
// 400, 409, 500, 503 with the soonest Retry-After, 422, 200), listing each item's own answer; the run stops
// for a person when any item needs one.
func TestAnswerForSeveralItems(t *testing.T) {
	const (
		written = `{"key": "a", "decision": "proceed", "state": "succeeded", "external_id": "rec-1", "evidence": {"key": "a", "claim": "c_1", "outcome": "succeeded"}}`
		got429  = `{"key": "b", "decision": "proceed", "state": "failed", "evidence": {"key": "b", "claim": "c_2", "outcome": "failed", "http_status": 429, "retry_after": 7}}`
		unknown = `{"key": "c", "decision": "proceed", "state": "unknown", "evidence": {"key": "c", "claim": "c_3", "outcome": "unknown"}}`
		gone    = `{"key": "d", "decision": "proceed", "state": "failed", "evidence": {"outcome": "failed", "http_status": 422}}`
		dup     = `{"duplicate": true, "key": "e:trigger", "decision": "skip", "reason": "succeeded", "state": "succeeded"}`
		refused = `{"key": "f g", "refused": true, "http_status": 400, "error": {"code": "invalid_request", "message": "key: must be 1-200 characters"}}`
		confl   = `{"key": "h", "decision": "conflict", "reason": "fingerprint_mismatch", "state": "succeeded", "surface": true, "message": "m"}`
	)
	for _, c := range []struct {
		name       string
		items      []string
		status     float64
		retryAfter any
		end        string
		each       string
	}{
		{"all written", []string{written, dup}, 200, nil, "done", "[200 200]"},
		{"one written, one 429, one unknown", []string{written, got429, unknown}, 503, "7", "surface", "[200 503 503]"},
		{"refused for good and written", []string{gone, written}, 422, nil, "surface", "[422 200]"},
		{"a conflict wins over later", []string{got429, confl}, 409, nil, "surface", "[503 409]"},
		{"a refused claim wins over the rest", []string{confl, refused, written}, 400, nil, "surface", "[409 400 200]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := runAnswer(t, c.items...)
			if got["status"] != c.status || got["retry_after"] != c.retryAfter || got["end"] != c.end || (got["later"] == "later") != (c.status == 503) {
				t.Errorf("answer status %v retry_after %v end %v later %v, want %v %v %s", got["status"], got["retry_after"], got["end"], got["later"], c.status, c.retryAfter, c.end)
			}
			body := got["body"].(map[string]any)
			var each []string
			for _, it := range body["items"].([]any) {
				each = append(each, fmt.Sprint(it.(map[string]any)["status"]))
			}
			if s := "[" + strings.Join(each, " ") + "]"; s != c.each {
				t.Errorf("items answered %s, want %s", s, c.each)
			}
			if b, _ := json.Marshal(body); strings.Contains(string(b), `"claim"`) {
				t.Errorf("the answer shows the sender a claim: %s", b)
			}
			if msg, _ := body["message"].(string); !strings.Contains(msg, fmt.Sprintf("answered %v", c.status)) {
				t.Errorf("message %q", msg)
			}
		})
	}
}

// TestRefusedClaimAnswered: a before-write companion refuses is answered with companion's error word and
// message: 400 (and 413) as they are, the execution done like a delivery missing fields; 503 (nothing
// recorded) with a Retry-After; anything else (a credential, a role) 500, stopping for a person.
func TestRefusedClaimAnswered(t *testing.T) {
	for _, c := range []struct {
		in         string
		status     float64
		retryAfter any
		end        string
	}{
		{`{"key": "f g", "refused": true, "http_status": 400, "error": {"code": "invalid_request", "message": "key: must be 1-200 characters", "fields": [{"field": "key", "problem": "p"}]}}`, 400, nil, "done"},
		{`{"key": "k", "refused": true, "http_status": 413, "error": {"code": "payload_too_large", "message": "over 1 MiB"}}`, 413, nil, "done"},
		{`{"key": "k", "refused": true, "http_status": 503, "error": {"code": "store_unavailable", "message": "m"}, "retry_after": 5}`, 503, "5", "surface"},
		{`{"key": "k", "refused": true, "http_status": 503, "error": {"code": "store_unavailable", "message": "m"}, "retry_after": null}`, 503, "60", "surface"},
		{`{"key": "k", "refused": true, "http_status": 401, "error": {"code": "unauthorized", "message": "m"}}`, 500, nil, "surface"},
	} {
		got := runAnswer(t, c.in)
		if got["status"] != c.status || got["retry_after"] != c.retryAfter || got["end"] != c.end {
			t.Errorf("%s: status %v retry_after %v end %v, want %v %v %s", c.in, got["status"], got["retry_after"], got["end"], c.status, c.retryAfter, c.end)
		}
		body := got["body"].(map[string]any)
		var in struct {
			Error struct{ Code, Message string }
		}
		_ = json.Unmarshal([]byte(c.in), &in)
		if body["error"] != in.Error.Code || !strings.Contains(body["message"].(string), in.Error.Message) || body["status"] != c.status {
			t.Errorf("%s: body %v, want companion's word and message", c.in, body)
		}
	}
	if got := runAnswer(t, `{"key": "f g", "refused": true, "http_status": 400, "error": {"code": "invalid_request", "message": "m", "fields": [{"field": "key", "problem": "p"}]}}`); fmt.Sprint(got["body"].(map[string]any)["fields"]) != "[map[field:key problem:p]]" {
		t.Errorf("the fields companion named are not in the answer: %v", got["body"])
	}
}

// TestClaimAnswerRoutesOrRefuses: the Code node after a before-write running with Never Error gives the
// decision of a 200 as it is, and any other status as a refusal with companion's error word, message,
// fields and Retry-After; the sub-workflow companion: claim does the same with its null fields.
func TestClaimAnswerRoutesOrRefuses(t *testing.T) {
	var code string
	for _, n := range RenderN8n(Templates()[0], DefaultSettings()).Nodes {
		if n.Name == NodeClaimAnswer {
			code = n.Parameters.(CodeParams).JSCode
		}
	}
	settings := map[string]string{"Settings": `{"key": "invoice-742:reminder:2"}`}
	got, thrown := runJS(t, code, `{"statusCode": 200, "headers": {}, "body": {"key": "invoice-742:reminder:2", "decision": "proceed", "claim": "c_1"}}`, settings)
	if thrown != "" || got["decision"] != "proceed" || got["claim"] != "c_1" || keyIn(got, "refused") {
		t.Errorf("a 200: %v %q", got, thrown)
	}
	got, thrown = runJS(t, code, `{"statusCode": 400, "headers": {}, "body": {"error": {"code": "invalid_request", "message": "key: must be", "fields": [{"field": "key"}]}}}`, settings)
	if thrown != "" || got["refused"] != true || got["http_status"] != 400.0 || got["key"] != "invoice-742:reminder:2" || keyIn(got, "decision") {
		t.Fatalf("a 400: %v %q", got, thrown)
	}
	if e := got["error"].(map[string]any); e["code"] != "invalid_request" || e["message"] != "key: must be" || fmt.Sprint(e["fields"]) != "[map[field:key]]" {
		t.Errorf("a 400's error: %v", e)
	}
	got, _ = runJS(t, code, `{"statusCode": 503, "headers": {"retry-after": "4"}, "body": {"error": {"code": "store_unavailable", "message": "m"}}}`, settings)
	if got["retry_after"] != 4.0 || got["http_status"] != 503.0 {
		t.Errorf("a 503: %v", got)
	}
	got, _ = runJS(t, code, `{"statusCode": 502, "headers": {}, "body": "<html>bad gateway</html>"}`, settings)
	if e := got["error"].(map[string]any); e["code"] != "http_502" || e["message"] != "companion answered HTTP 502" {
		t.Errorf("a proxy's 502 page: %v (its body must not reach the sender)", got)
	}

	claim := nodeNamed(t, RenderN8n(subTemplate(t, SubClaim), DefaultSettings()), "Claim answer").Parameters.(CodeParams).JSCode
	req := map[string]string{"Claim request": `{"companion_url": "http://c", "body": {"key": "f g"}}`}
	got, thrown = runJS(t, claim, `{"statusCode": 400, "headers": {}, "body": {"error": {"code": "invalid_request", "message": "key: must be"}}}`, req)
	if thrown != "" || got["refused"] != true || got["decision"] != nil || !keyIn(got, "decision") || got["key"] != "f g" || got["companion_url"] != "http://c" || got["http_status"] != 400.0 {
		t.Fatalf("companion: claim, a 400: %v %q", got, thrown)
	}
	got, _ = runJS(t, claim, `{"statusCode": 200, "headers": {}, "body": {"key": "k", "decision": "skip", "reason": "succeeded", "external_id": "rec-1"}}`, req)
	if got["decision"] != "skip" || got["external_id"] != "rec-1" || got["error"] != nil || got["claim"] != nil || got["companion_url"] != "http://c" {
		t.Errorf("companion: claim, a 200: %v", got)
	}
}

// TestBatchRefusedCall: a batch call companion refuses gives each of its items refused with companion's
// words, and the delivery is answered 400 with them; nothing of the call was claimed.
func TestBatchRefusedCall(t *testing.T) {
	decided := runBatchCode(t, "One item per decision", decode(t, `[{"statusCode": 400, "headers": {}, "body": {"error": {"code": "invalid_request", "message": "items[1].key: must be"}}}]`), map[string][]any{
		"Settings":      decode(t, `[{"write_url": "w", "payload": {}, "reference": "r0", "companion_url": "c"}, {"write_url": "w", "payload": {}, "reference": "r1", "companion_url": "c"}]`),
		"Batch request": decode(t, `[{"batch_id": "b", "items": [{"key": "k0", "batch_index": 0}, {"key": "k 1", "batch_index": 1}]}]`),
	})
	if len(decided) != 2 || decided[0]["refused"] != true || decided[1]["key"] != "k 1" || decided[1]["http_status"] != 400.0 {
		t.Fatalf("decided %v", decided)
	}
	var ends []any
	for _, d := range decided {
		ends = append(ends, runBatchCode(t, "Other answer", []any{d}, nil)[0])
	}
	got := runBatchCode(t, "Answer", ends, map[string][]any{
		"Batch before-write": decode(t, `[{"statusCode": 400, "body": {"error": {"code": "invalid_request"}}}]`),
		"Batch request":      decode(t, `[{"batch_id": "b"}]`),
	})[0]
	body := got["body"].(map[string]any)
	if got["status"] != 400.0 || got["end"] != "done" || body["error"] != "invalid_request" || !strings.Contains(body["message"].(string), "items[1].key: must be") {
		t.Errorf("answer %v", got)
	}
}
