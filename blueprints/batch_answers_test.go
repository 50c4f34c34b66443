package blueprints

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// batchNode returns the rendered batch template's node by name.
func batchNode(t *testing.T, name string) N8nNode {
	t.Helper()
	for _, tpl := range Templates() {
		if tpl.Shape != Batch {
			continue
		}
		for _, n := range RenderN8n(tpl, DefaultSettings()).Nodes {
			if n.Name == name {
				return n
			}
		}
	}
	t.Fatalf("batch-guarded-write has no node %q", name)
	return N8nNode{}
}

// runBatchCode runs a Code node of the rendered batch template in Node.js as n8n does: $input.all() and
// $json are the given input items, $('Name').all() / .first() answer from nodes, and the items it
// returns (one for a run once for each item) come back as their json.
func runBatchCode(t *testing.T, name string, input []any, nodes map[string][]any) []map[string]any {
	t.Helper()
	bin, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node (Node.js) is not on PATH: the template's code cannot be run here")
	}
	n := batchNode(t, name)
	p := n.Parameters.(CodeParams)
	in, _ := json.Marshal(input)
	code, _ := json.Marshal(p.JSCode)
	ns, _ := json.Marshal(nodes)
	prog := `const INPUT = ` + string(in) + `;
const NODES = ` + string(ns) + `;
const wrap = (j) => ({ json: j });
const $input = { all: () => INPUT.map(wrap), first: () => wrap(INPUT[0]) };
const $ = (name) => {
  if (!(name in NODES)) throw new Error('the code reads node ' + name + ' that the test does not give');
  return { all: () => NODES[name].map(wrap), first: () => wrap(NODES[name][0]), item: wrap(NODES[name][0]) };
};
const $execution = { id: '7' };
const run = (code, $json) => eval('(() => {' + code + '\n})()');
const CODE = ` + string(code) + `;
let out;
if ('` + p.Mode + `' === 'runOnceForEachItem') out = INPUT.map(($json) => run(CODE, $json));
else out = run(CODE, undefined);
process.stdout.write(JSON.stringify(out.map((o) => o.json)));`
	var got []map[string]any
	runNode(t, bin, prog, &got)
	return got
}

func decode(t *testing.T, s string) []any {
	t.Helper()
	var v []any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return v
}

// TestBatchDeliveryIsCheckedBeforeTheKey: a delivery whose items miss a field the key, reference or
// payload is built from is refused as a whole, naming each item and field, before any key exists.
func TestBatchDeliveryIsCheckedBeforeTheKey(t *testing.T) {
	const ok = `{"invoice": "742", "recipient": "c-19", "amount": 120.5, "reminder": 2}`
	for _, c := range []struct {
		name, body string
		missing    string
		total      float64
	}{
		{"every item complete", `{"items": [` + ok + `, ` + ok + `]}`, "[]", 0},
		{"the fourth item misses its invoice", `{"items": [` + ok + `, ` + ok + `, ` + ok + `, {"recipient": "c-19", "amount": 1, "reminder": 2}]}`, "[items[3].invoice]", 1},
		{"empty values count as missing", `{"items": [{"invoice": " ", "recipient": "c-19", "amount": null, "reminder": 2}]}`, "[items[0].amount items[0].invoice]", 2},
		{"an item that is not an object", `{"items": [` + ok + `, "742"]}`, "[items[1]]", 1},
		{"no items", `{"items": []}`, "[items]", 1},
		{"items not a list", `{"items": {"invoice": "742"}}`, "[items]", 1},
		{"no body", `null`, "[items]", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := runBatchCode(t, NodeCheckDelivery, decode(t, `[{"headers": {}, "body": `+c.body+`}]`), nil)
			if len(got) != 1 {
				t.Fatalf("%d items out, want 1", len(got))
			}
			want := "complete"
			if c.total > 0 {
				want = "incomplete"
			}
			if got[0]["delivery"] != want || fmt.Sprint(got[0]["missing"]) != c.missing || got[0]["missing_total"] != c.total {
				t.Errorf("got delivery %v missing %v (%v), want %s %s (%v)", got[0]["delivery"], got[0]["missing"], got[0]["missing_total"], want, c.missing, c.total)
			}
			if want == "complete" && got[0]["body"] == nil {
				t.Error("a complete delivery lost its body on the way to the items slot")
			}
		})
	}
	t.Run("a thousand bad items are counted, a hundred named", func(t *testing.T) {
		t.Parallel()
		items := make([]any, 1000)
		for i := range items {
			items[i] = map[string]any{"invoice": "1", "recipient": "r", "reminder": 1}
		}
		got := runBatchCode(t, NodeCheckDelivery, []any{map[string]any{"body": map[string]any{"items": items}}}, nil)
		if m, _ := got[0]["missing"].([]any); len(m) != 100 || m[99] != "items[99].amount" || got[0]["missing_total"] != 1000.0 {
			t.Errorf("missing %d names (last %v), total %v; want 100 named of 1000", len(m), m[len(m)-1], got[0]["missing_total"])
		}
		ans := runBatchCode(t, "Answer", []any{got[0]}, nil)
		if msg, _ := ans[0]["body"].(map[string]any)["message"].(string); ans[0]["status"] != 400.0 || !strings.Contains(msg, "and 900 more") {
			t.Errorf("answer %v", ans[0])
		}
	})
}

// TestBatchWrittenItems: each written item carries what the ledger recorded and its position, never
// the claim, and an item the after-write could not record says so.
func TestBatchWrittenItems(t *testing.T) {
	got := runBatchCode(t, "Written",
		decode(t, `[{"items": [{"key": "a", "state": "succeeded", "reason": "recorded", "attempt": 1}, {"key": "b", "error": {"code": "conflict", "message": "claim"}}]}, {"items": [{"key": "c", "state": "failed", "reason": "recorded"}]}]`),
		map[string][]any{
			"One item per decision": decode(t, `[{"key": "a", "decision": "proceed", "batch_index": 0}, {"key": "x", "decision": "skip", "batch_index": 1}, {"key": "b", "decision": "proceed", "batch_index": 2}, {"key": "c", "decision": "proceed", "batch_index": 3}]`),
			"Evidence": decode(t, `[{"key": "a", "claim": "c_1", "outcome": "succeeded", "http_status": 201, "external_id": "rec-1", "result": {"id": "rec-1"}},
				{"key": "b", "claim": "c_2", "outcome": "unknown", "error": {"class": "connection_reset", "code": "ECONNRESET"}},
				{"key": "c", "claim": "c_3", "outcome": "failed", "http_status": 429, "retry_after": 7, "error": {"class": "http"}}]`),
		})
	want := `[{"batch_index":0,"decision":"proceed","evidence":{"error_class":null,"http_status":201,"outcome":"succeeded","retry_after":null},"external_id":"rec-1","key":"a","reason":"recorded","state":"succeeded"},` +
		`{"batch_index":2,"decision":"proceed","error":"conflict","evidence":{"error_class":"connection_reset","http_status":null,"outcome":"unknown","retry_after":null},"external_id":null,"key":"b","reason":null,"state":null},` +
		`{"batch_index":3,"decision":"proceed","evidence":{"error_class":"http","http_status":429,"outcome":"failed","retry_after":7},"external_id":null,"key":"c","reason":"recorded","state":"failed"}]`
	if b, _ := json.Marshal(got); string(b) != want {
		t.Errorf("written\n got %s\nwant %s", b, want)
	}
}

// TestBatchWebhookAnswers runs the batch Answer on every row of the table in docs/templates.md ("Webhook
// answers (batch)"): the status, Retry-After and whether the execution then fails, for the delivery
// as a whole, and the per-item list in the body.
func TestBatchWebhookAnswers(t *testing.T) {
	const (
		written  = `{"key": "k0", "batch_index": 0, "decision": "proceed", "reason": "recorded", "state": "succeeded", "external_id": "rec-0", "evidence": {"outcome": "succeeded", "http_status": 201}}`
		stored   = `{"key": "k1", "batch_index": 1, "decision": "skip", "reason": "succeeded", "state": "succeeded", "external_id": "rec-1"}`
		conflict = `{"key": "k2", "batch_index": 2, "decision": "conflict", "reason": "fingerprint_mismatch", "state": "succeeded"}`
		later40  = `{"key": "k3", "batch_index": 3, "decision": "skip", "reason": "retry_later", "state": "failed", "retry_after": 40}`
		running  = `{"key": "k4", "batch_index": 4, "decision": "skip", "reason": "in_progress", "state": "in_flight"}`
		unknown  = `{"key": "k5", "batch_index": 5, "decision": "proceed", "reason": "recorded", "state": "unknown", "evidence": {"outcome": "unknown", "error_class": "connection_reset"}}`
		got429   = `{"key": "k6", "batch_index": 6, "decision": "proceed", "reason": "recorded", "state": "failed", "evidence": {"outcome": "failed", "http_status": 429, "retry_after": 7}}`
		refused  = `{"key": "k7", "batch_index": 7, "decision": "proceed", "reason": "recorded", "state": "failed", "evidence": {"outcome": "failed", "http_status": 422}}`
		permFail = `{"key": "k8", "batch_index": 8, "decision": "skip", "reason": "failed_permanent", "state": "failed"}`
		owner    = `{"key": "k9", "batch_index": 9, "decision": "skip", "reason": "awaiting_owner", "state": "unknown"}`
		lookup   = `{"key": "k10", "batch_index": 10, "decision": "reconcile", "reason": "lookup_required", "state": "unknown"}`
		lost     = `{"key": "k11", "batch_index": 11, "decision": "proceed", "reason": null, "state": null, "error": "conflict", "evidence": {"outcome": "succeeded", "http_status": 201}}`
		// k0 delivered a second time in the same delivery: claimed once, the repeat waits on the first.
		repeat = `{"key": "k0", "batch_index": 12, "decision": "skip", "reason": "in_progress", "state": "in_flight", "retry_after": 290}`
	)
	for _, c := range []struct {
		name       string
		items      []string
		status     float64
		retryAfter any
		end        string
		answers    string // per item, in batch_index order
	}{
		{"every item written", []string{written}, 200, nil, "done", "[200]"},
		{"written and stored", []string{stored, written}, 200, nil, "done", "[200 200]"},
		{"a key delivered twice ends as its first", []string{written, repeat}, 200, nil, "done", "[200 200]"},
		{"a conflict wins over items to deliver later", []string{written, later40, conflict, refused}, 409, nil, "surface", "[200 409 503 422]"},
		{"an unknown write", []string{written, unknown}, 503, "60", "surface", "[200 503]"},
		{"the soonest retry time: in progress (30 s) before retry later (40 s)", []string{later40, running}, 503, "30", "surface", "[503 503]"},
		{"a 429's Retry-After", []string{unknown, got429}, 503, "7", "surface", "[503 503]"},
		{"awaiting owner", []string{owner, stored}, 503, "60", "surface", "[200 503]"},
		{"a lookup the batch does not do", []string{lookup}, 503, "60", "surface", "[503]"},
		{"a report the ledger could not record", []string{lost}, 503, "60", "surface", "[503]"},
		{"items to deliver later win over items refused for good", []string{permFail, later40}, 503, "40", "surface", "[503 422]"},
		{"refused for good and none can finish", []string{written, refused, permFail}, 422, nil, "surface", "[200 422 422]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := runBatchCode(t, "Answer", decode(t, "["+strings.Join(c.items, ",")+"]"), map[string][]any{
				"Batch before-write": decode(t, `[{"statusCode": 200, "body": {"batch_id": "n8n-w-exec-7", "counts": {"proceed": 2, "skip": 1}}}, {"statusCode": 200, "body": {"batch_id": "n8n-w-exec-7", "counts": {"proceed": 1}}}]`),
				"Batch request":      decode(t, `[{"batch_id": "n8n-w-exec-7"}, {"batch_id": "n8n-w-exec-7"}]`),
			})
			if len(got) != 1 {
				t.Fatalf("%d answers, want 1", len(got))
			}
			a := got[0]
			if a["status"] != c.status || a["retry_after"] != c.retryAfter || a["end"] != c.end || (a["later"] == "later") != (c.status == 503) {
				t.Errorf("status %v retry_after %v end %v later %v, want %v %v %s", a["status"], a["retry_after"], a["end"], a["later"], c.status, c.retryAfter, c.end)
			}
			body := a["body"].(map[string]any)
			var answers []string
			for _, it := range body["items"].([]any) {
				it := it.(map[string]any)
				answers = append(answers, fmt.Sprint(it["answer"]))
				if it["key"] == nil || !keyIn(it, "state") || !keyIn(it, "external_id") {
					t.Errorf("item %v does not say its key, state and external id", it)
				}
			}
			if got := "[" + strings.Join(answers, " ") + "]"; got != c.answers {
				t.Errorf("items answered %s, want %s", got, c.answers)
			}
			if body["status"] != c.status || body["batch_id"] != "n8n-w-exec-7" || fmt.Sprint(body["counts"]) != "map[proceed:3 skip:1]" {
				t.Errorf("body %v", body)
			}
			if msg, _ := body["message"].(string); !strings.Contains(msg, fmt.Sprintf("answered %v", c.status)) {
				t.Errorf("message %q", msg)
			}
		})
	}
	t.Run("a delivery missing fields", func(t *testing.T) {
		t.Parallel()
		got := runBatchCode(t, "Answer", decode(t, `[{"delivery": "incomplete", "missing": ["items[3].invoice"], "missing_total": 1}]`), nil)
		a := got[0]
		body := a["body"].(map[string]any)
		if a["status"] != 400.0 || a["retry_after"] != nil || a["end"] != "done" || a["later"] != "now" ||
			body["error"] != "missing_fields" || body["execution_id"] != "7" || fmt.Sprint(body["missing"]) != "[items[3].invoice]" || !strings.Contains(body["message"].(string), "nothing was claimed") {
			t.Errorf("answer %v", a)
		}
	})
	t.Run("Done continues with each item, and with none after a 400", func(t *testing.T) {
		t.Parallel()
		ok := runBatchCode(t, "Answer", decode(t, "["+stored+","+written+"]"), map[string][]any{"Batch before-write": decode(t, `[{"statusCode": 200, "body": {"batch_id": "b", "counts": {}}}]`), "Batch request": decode(t, `[{"batch_id": "b"}]`)})
		if got := runBatchCode(t, "Done", []any{ok[0]}, nil); len(got) != 2 || got[0]["key"] != "k0" {
			t.Errorf("Done after a 200 gave %v, want the two items in order", got)
		}
		refused := runBatchCode(t, "Answer", decode(t, `[{"delivery": "incomplete", "missing": ["items"], "missing_total": 1}]`), nil)
		if got := runBatchCode(t, "Done", []any{refused[0]}, nil); len(got) != 0 {
			t.Errorf("Done after a 400 gave %v, want nothing", got)
		}
	})
	t.Run("the written item's external id reaches the sender", func(t *testing.T) {
		t.Parallel()
		got := runBatchCode(t, "Answer", decode(t, "["+stored+","+written+"]"), map[string][]any{"Batch before-write": decode(t, `[{"statusCode": 200, "body": {"batch_id": "b", "counts": {}}}]`), "Batch request": decode(t, `[{"batch_id": "b"}]`)})
		items := got[0]["body"].(map[string]any)["items"].([]any)
		if items[0].(map[string]any)["external_id"] != "rec-0" || items[1].(map[string]any)["external_id"] != "rec-1" {
			t.Errorf("items %v, want rec-0 then rec-1 in batch order", items)
		}
	})
}

func keyIn(m map[string]any, k string) bool { _, ok := m[k]; return ok }

// TestBatchAnswersOnceAfterEveryItem: the batch webhook answers through Respond nodes, once: every
// branch of the decision meets in All items before the Answer, a delivery missing fields goes straight
// to the Answer (no companion call on the way), and the run stops for a person only after answering.
func TestBatchAnswersOnceAfterEveryItem(t *testing.T) {
	var tpl Template
	for _, x := range Templates() {
		if x.Shape == Batch {
			tpl = x
		}
	}
	wf := RenderN8n(tpl, DefaultSettings())
	into := map[string][]string{}
	for from, c := range wf.Connections {
		for out, edges := range c.Main {
			for _, e := range edges {
				into[e.Node] = append(into[e.Node], fmt.Sprintf("%s/%d->%d", from, out, e.Index))
			}
		}
	}
	for _, n := range wf.Nodes {
		if n.Name == "Webhook" && n.Parameters.(WebhookParams).ResponseMode != "responseNode" {
			t.Errorf("the webhook answers by %q, want responseNode", n.Parameters.(WebhookParams).ResponseMode)
		}
		if n.Name == "All items" && n.Parameters.(MergeParams).NumberInputs != 4 {
			t.Errorf("All items has %d inputs, want 4", n.Parameters.(MergeParams).NumberInputs)
		}
	}
	for node, want := range map[string]string{
		"All items":                      "[Other answer/0->3 Stored result/0->1 Surface/0->2 Written/0->0]",
		"Answer":                         "[All items/0->0 Delivery complete?/1->0]",
		"Stop: needs a person":           "[Needs a person?/1->0]",
		"Needs a person?":                "[Respond/0->0 Respond: redeliver later/0->0]",
		"Surface":                        "[Decision/2->0]",
		"Other answer":                   "[Decision/3->0]",
		"Settings":                       "[YOUR ITEMS: one item per write/0->0]",
		"YOUR ITEMS: one item per write": "[Delivery complete?/0->0]",
	} {
		got := into[node]
		slices.Sort(got)
		if fmt.Sprint(got) != want {
			t.Errorf("%s is fed by %v, want %s", node, got, want)
		}
	}
}
