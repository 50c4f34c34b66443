package blueprints

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The template using the community node is hand-written (HandWritten); this checks its graph the
// way the generated ones are checked: names unique and every connection between existing nodes,
// the four Before write outputs wired, the write's two outputs into After write, Continue (using
// error output) on the write and no Retry On Fail there, the idempotency key forwarded, and After
// write's Key and Claim left to paired items (no node named).
func TestCommunityNodeTemplate(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(HandWritten[0])))
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Nodes []struct {
			Name        string          `json:"name"`
			Type        string          `json:"type"`
			Parameters  json.RawMessage `json:"parameters"`
			OnError     string          `json:"onError"`
			RetryOnFail bool            `json:"retryOnFail"`
			Credentials map[string]any  `json:"credentials"`
		} `json:"nodes"`
		Connections map[string]struct {
			Main [][]struct {
				Node  string `json:"node"`
				Index int    `json:"index"`
			} `json:"main"`
		} `json:"connections"`
		Settings map[string]any `json:"settings"`
	}
	if err := json.Unmarshal(raw, &wf); err != nil {
		t.Fatal(err)
	}
	types := map[string]string{}
	onError := map[string]string{}
	params := map[string]map[string]any{}
	for _, n := range wf.Nodes {
		onError[n.Name] = n.OnError
		if _, dup := types[n.Name]; dup {
			t.Errorf("node %q twice", n.Name)
		}
		types[n.Name] = n.Type
		var p map[string]any
		if err := json.Unmarshal(n.Parameters, &p); err != nil {
			t.Errorf("%s: parameters: %v", n.Name, err)
		}
		params[n.Name] = p
		if n.Type == "n8n-nodes-companion.companion" && n.Credentials["companionApi"] == nil {
			t.Errorf("%s: no companionApi credential", n.Name)
		}
		if n.Name == NodeWrite {
			if n.OnError != "continueErrorOutput" || n.RetryOnFail {
				t.Errorf("the write must have On Error = Continue (using error output) and no Retry On Fail, got %q %v", n.OnError, n.RetryOnFail)
			}
		}
	}
	for from, c := range wf.Connections {
		if _, ok := types[from]; !ok {
			t.Errorf("connection from unknown node %q", from)
		}
		for _, out := range c.Main {
			for _, to := range out {
				if _, ok := types[to.Node]; !ok {
					t.Errorf("connection %q → unknown node %q", from, to.Node)
				}
			}
		}
	}
	if wf.Settings["executionOrder"] != "v1" {
		t.Errorf("executionOrder %v, want v1", wf.Settings["executionOrder"])
	}

	if types["Before write"] != "n8n-nodes-companion.companion" || params["Before write"]["operation"] != "beforeWrite" {
		t.Fatalf("no Before write node of the community node: %v", types["Before write"])
	}
	// Proceed, Already done, Wait, Needs attention, and the error output (On Error: Continue (using error
	// output)): a refused request is answered with companion's words, not n8n's 500.
	outs := wf.Connections["Before write"].Main
	if len(outs) != 5 || outs[0][0].Node != NodeWrite {
		t.Fatalf("Before write must wire Proceed, Already done, Wait, Needs attention and its error output with Proceed into the write: %+v", outs)
	}
	if onError["Before write"] != "continueErrorOutput" {
		t.Errorf("Before write: On Error %q, want continueErrorOutput", onError["Before write"])
	}
	for i, o := range outs {
		if len(o) == 0 {
			t.Errorf("Before write output %d is not connected", i)
		}
	}
	w := wf.Connections[NodeWrite].Main
	if len(w) != 2 || len(w[0]) != 1 || len(w[1]) != 1 || w[0][0].Node != "Both outcomes" || w[0][0].Index != 0 || w[1][0].Node != "Both outcomes" || w[1][0].Index != 1 {
		t.Errorf("both outputs of the write must meet in Both outcomes, one input each: %+v", w)
	}
	if m := wf.Connections["Both outcomes"].Main; len(m) != 1 || len(m[0]) != 1 || m[0][0].Node != "After write" {
		t.Errorf("Both outcomes must go to After write: %+v", m)
	}
	if params["After write"]["operation"] != "afterWrite" {
		t.Errorf("After write operation %v", params["After write"]["operation"])
	}
	// Key and Claim left empty: After write finds each item's claim through paired items, so renaming Before write
	// breaks nothing. An expression naming a node would.
	for _, f := range []string{"key", "claim"} {
		if v, ok := params["After write"][f]; ok && v != "" {
			t.Errorf("After write %s = %q, want it empty (found through paired items, whatever Before write is called)", f, v)
		}
	}
	hdr, _ := json.Marshal(params[NodeWrite]["headerParameters"])
	if !strings.Contains(string(hdr), `"name":"Idempotency-Key","value":"={{ $json.companion.idempotency_key }}"`) {
		t.Errorf("the write does not forward the idempotency key: %s", hdr)
	}
	if params[NodeWrite]["url"] != DefaultSettings().WriteURL {
		t.Errorf("write url %v, want the default %s", params[NodeWrite]["url"], DefaultSettings().WriteURL)
	}
}

// The community node classifies transport failures and SMTP replies with its own copies of TransportErrors
// and SMTPReplies (n8n-node/nodes/Companion/evidence.ts); they must not drift apart. (Both classifiers also
// run the one table of testdata/write-evidence.json.)
func TestCommunityNodeTransportClassesMatch(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "n8n-node", "nodes", "Companion", "evidence.ts"))
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(src), "TRANSPORT_CLASSES")
	end := strings.Index(string(src)[start:], "};")
	if start < 0 || end < 0 {
		t.Fatal("TRANSPORT_CLASSES not found in evidence.ts")
	}
	var got []string
	for _, m := range regexp.MustCompile(`(?m)^\s*([A-Z_]+): '([a-z_]+)',`).FindAllStringSubmatch(string(src)[start:start+end], -1) {
		got = append(got, m[1]+"="+m[2])
	}
	var want []string
	for _, e := range TransportErrors {
		want = append(want, e.Code+"="+e.Class)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("evidence.ts TRANSPORT_CLASSES %v\nblueprints TransportErrors %v", got, want)
	}
	pre := regexp.MustCompile(`PRE_DISPATCH_CLASSES[^=]*= new Set\(\[([^\]]*)\]\)`).FindStringSubmatch(string(src))
	if pre == nil {
		t.Fatal("PRE_DISPATCH_CLASSES not found in evidence.ts")
	}
	var wantPre []string
	for _, e := range TransportErrors {
		if !e.Dispatched && !slices.Contains(wantPre, "'"+e.Class+"'") {
			wantPre = append(wantPre, "'"+e.Class+"'")
		}
	}
	gotPre := strings.Split(strings.ReplaceAll(pre[1], " ", ""), ",")
	slices.Sort(gotPre)
	slices.Sort(wantPre)
	if !slices.Equal(gotPre, wantPre) {
		t.Errorf("PRE_DISPATCH_CLASSES %v, want %v", gotPre, wantPre)
	}
	smtp := regexp.MustCompile(`SMTP_REPLY_CLASSES[^=]*= \{([^}]*)\}`).FindStringSubmatch(string(src))
	if smtp == nil {
		t.Fatal("SMTP_REPLY_CLASSES not found in evidence.ts")
	}
	var gotSMTP, wantSMTP []string
	for _, m := range regexp.MustCompile(`'(\d)': '([a-z_]+)'`).FindAllStringSubmatch(smtp[1], -1) {
		gotSMTP = append(gotSMTP, m[1]+"="+m[2])
	}
	for _, r := range SMTPReplies {
		wantSMTP = append(wantSMTP, r.Digit+"="+r.Class)
	}
	if !slices.Equal(gotSMTP, wantSMTP) {
		t.Errorf("evidence.ts SMTP_REPLY_CLASSES %v\nblueprints SMTPReplies %v", gotSMTP, wantSMTP)
	}
}

// TestCommunityNodeTemplateAnswers: the community-node template answers its webhook as guarded-write
// does: the same Check delivery before Before write (a missing field answers 400 with nothing
// claimed), every output of Before write and After write ending at an Answer whose decision is the
// single template's, Respond nodes (Retry-After on the 503 one), and a stop only after answering.
// The Answer's code is run in Node.js on each end a run can reach.
func TestCommunityNodeTemplateAnswers(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(HandWritten[0])))
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Nodes []struct {
			Name       string         `json:"name"`
			Type       string         `json:"type"`
			Parameters map[string]any `json:"parameters"`
		} `json:"nodes"`
		Connections map[string]struct {
			Main [][]struct {
				Node string `json:"node"`
			} `json:"main"`
		} `json:"connections"`
	}
	if err := json.Unmarshal(raw, &wf); err != nil {
		t.Fatal(err)
	}
	params := map[string]map[string]any{}
	for _, n := range wf.Nodes {
		params[n.Name] = n.Parameters
	}
	single := map[string]string{}
	for _, n := range RenderN8n(Templates()[0], DefaultSettings()).Nodes {
		if p, ok := n.Parameters.(CodeParams); ok {
			single[n.Name] = p.JSCode
		}
	}
	if params["Webhook"]["responseMode"] != "responseNode" {
		t.Errorf("the webhook answers by %v, want responseNode (the Respond nodes)", params["Webhook"]["responseMode"])
	}
	if params[NodeCheckDelivery]["jsCode"] != single[NodeCheckDelivery] {
		t.Errorf("Check delivery differs from guarded-write's:\n%v", params[NodeCheckDelivery]["jsCode"])
	}
	answer, _ := params["Answer"]["jsCode"].(string)
	tail := single["Answer"][strings.Index(single["Answer"], "// Refused for good"):]
	if !strings.HasSuffix(answer, tail) || !strings.Contains(answer, "const itemOf = (j) =>") {
		t.Errorf("the Answer does not decide as guarded-write's Answer does (its code from %q on must be the same, after its own itemOf)", "// Refused for good")
	}
	to := func(from string, out int) string {
		c := wf.Connections[from].Main
		if out >= len(c) || len(c[out]) != 1 {
			return fmt.Sprintf("%d edges", len(c))
		}
		return c[out][0].Node
	}
	for _, e := range []struct {
		from string
		out  int
		to   string
	}{
		{"Webhook", 0, NodeCheckDelivery}, {NodeCheckDelivery, 0, "Delivery complete?"},
		{"Delivery complete?", 0, "Before write"}, {"Delivery complete?", 1, "All items"},
		{"After write", 0, "All items"}, {"Already done: stored result", 0, "All items"}, {"Wait: in progress or retry later", 0, "All items"},
		{"Before write", 3, "All items"}, {"Before write", 4, "All items"}, {"All items", 0, "Answer"}, {"Answer", 0, "Redeliver later?"},
		{"Redeliver later?", 0, "Respond"}, {"Redeliver later?", 1, "Respond: redeliver later"},
		{"Respond", 0, "Needs a person?"}, {"Respond: redeliver later", 0, "Needs a person?"},
		{"Needs a person?", 0, "Done"}, {"Needs a person?", 1, "Stop: needs a person"},
	} {
		if got := to(e.from, e.out); got != e.to {
			t.Errorf("%s output %d goes to %s, want %s", e.from, e.out, got, e.to)
		}
	}
	if h, _ := json.Marshal(params["Respond: redeliver later"]); !strings.Contains(string(h), `"name":"Retry-After","value":"={{ $json.retry_after }}"`) {
		t.Errorf("Respond: redeliver later sends no Retry-After: %s", h)
	}

	bin, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node (Node.js) is not on PATH: the Answer's code cannot be run here")
	}
	for _, c := range []struct {
		name, in   string
		status     float64
		retryAfter any
		end        string
	}{
		{"written (After write)", `{"key": "k", "state": "succeeded", "reason": "recorded", "attempt": 1, "evidence": {"outcome": "succeeded", "http_status": 201, "external_id": "rec-1"}}`, 200, nil, "done"},
		{"Already done", `{"body": {}, "companion": {"key": "k", "decision": "skip", "reason": "succeeded", "state": "succeeded", "external_id": "rec-1"}}`, 200, nil, "done"},
		{"Check delivery refused", `{"body": {}, "delivery": "incomplete", "missing": ["amount", "invoice"]}`, 400, nil, "done"},
		{"conflict (Needs attention)", `{"body": {}, "companion": {"key": "k", "decision": "conflict", "reason": "fingerprint_mismatch", "state": "succeeded"}}`, 409, nil, "surface"},
		{"Wait: in progress", `{"body": {}, "companion": {"key": "k", "decision": "skip", "reason": "in_progress", "state": "in_flight"}}`, 503, "30", "surface"},
		{"Wait: retry later", `{"body": {}, "companion": {"key": "k", "decision": "skip", "reason": "retry_later", "state": "failed", "retry_after": 12}}`, 503, "12", "surface"},
		{"awaiting owner (Needs attention)", `{"body": {}, "companion": {"key": "k", "decision": "skip", "reason": "awaiting_owner", "state": "unknown"}}`, 503, "60", "surface"},
		{"lookup required (Needs attention)", `{"body": {}, "companion": {"key": "k", "decision": "reconcile", "reason": "lookup_required", "state": "unknown"}}`, 503, "60", "surface"},
		{"failed for good before (Needs attention)", `{"body": {}, "companion": {"key": "k", "decision": "skip", "reason": "failed_permanent", "state": "failed"}}`, 422, nil, "surface"},
		{"written and unknown", `{"key": "k", "state": "unknown", "reason": "recorded", "evidence": {"outcome": "unknown", "error": {"class": "connection_reset"}}}`, 503, "60", "surface"},
		{"written and 429", `{"key": "k", "state": "failed", "reason": "recorded", "evidence": {"outcome": "failed", "http_status": 429, "retry_after": 3}}`, 503, "3", "surface"},
		{"written and refused for good", `{"key": "k", "state": "failed", "reason": "recorded", "evidence": {"outcome": "failed", "http_status": 422}}`, 422, nil, "surface"},
		{"a report the ledger could not take", `{"key": "k", "evidence": {"outcome": "succeeded"}, "error": "companion answered 503"}`, 503, "60", "surface"},
		{"refused by companion (Needs attention, 400)", `{"body": {}, "delivery": "complete", "companion": {"key": "f g", "error": "companion POST /v1/batches/before-write failed (400 invalid_request): items[0].key: must be", "http_status": 400, "code": "invalid_request"}}`, 400, nil, "done"},
		{"companion unreachable (Needs attention, no status)", `{"body": {}, "delivery": "complete", "companion": {"key": "k", "error": "connect ECONNREFUSED", "http_status": null, "code": null}}`, 500, nil, "surface"},
		{"Before write's error output", `{"body": {}, "delivery": "complete", "error": {"message": "companion answered 1 decisions for 2 items"}}`, 500, nil, "surface"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, _ := json.Marshal(answer)
			prog := `const $json = ` + c.in + `;
const $input = { all: () => [{ json: $json }], first: () => ({ json: $json }) };
const out = eval('(() => {' + ` + string(code) + ` + '\n})()');
process.stdout.write(JSON.stringify(out[0].json));`
			var got map[string]any
			b := runNode(t, bin, prog, &got)
			if got["status"] != c.status || got["retry_after"] != c.retryAfter || got["end"] != c.end || (got["later"] == "later") != (c.status == 503) {
				t.Errorf("answer status %v retry_after %v end %v later %v, want %v %v %s", got["status"], got["retry_after"], got["end"], got["later"], c.status, c.retryAfter, c.end)
			}
			body, _ := got["body"].(map[string]any)
			if msg, _ := body["message"].(string); msg == "" || strings.Contains(string(b), `"claim"`) {
				t.Errorf("body %v: wants a message for the stop, and never the claim", body)
			}
		})
	}
}
