package blueprints

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func subTemplate(t *testing.T, sub SubWorkflow) Template {
	t.Helper()
	for _, tpl := range Templates() {
		if tpl.Sub == sub {
			return tpl
		}
	}
	t.Fatalf("no template is sub-workflow part %d", sub)
	return Template{}
}

func nodeNamed(t *testing.T, wf N8nWorkflow, name string) N8nNode {
	t.Helper()
	for _, n := range wf.Nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("%s has no node %q", wf.Name, name)
	return N8nNode{}
}

// The caller's two Execute Workflow nodes map exactly the inputs the two sub-workflows declare, with the
// same types, call them by the ids `templates render` was given (else leave them to be picked by name), run
// once with all items and wait; both outputs of the write reach the report.
func TestSubWorkflowsFitTheirCaller(t *testing.T) {
	s := DefaultSettings()
	s.ClaimWorkflowID, s.ReportWorkflowID, s.ErrorWorkflowID = "wfClaim", "wfReport", "wfError"
	caller := RenderN8n(subTemplate(t, SubCaller), s)
	for _, c := range []struct {
		sub  SubWorkflow
		node string
		id   string
	}{{SubClaim, NodeCallClaim, "wfClaim"}, {SubReport, NodeCallReport, "wfReport"}} {
		sub := RenderN8n(subTemplate(t, c.sub), s)
		if sub.Settings.ErrorWorkflow != "" {
			t.Errorf("%s names an error workflow: a failure in it fails the caller, whose error workflow runs", sub.Name)
		}
		var triggers []N8nNode
		for _, n := range sub.Nodes {
			if n.Type == n8nExecuteWorkflowTrigger {
				triggers = append(triggers, n)
			}
		}
		if len(triggers) != 1 || triggers[0].Name != NodeSubTrigger {
			t.Fatalf("%s: want one Execute Workflow Trigger named %q, got %v", sub.Name, NodeSubTrigger, triggers)
		}
		tp := triggers[0].Parameters.(ExecuteWorkflowTriggerParams)
		if tp.InputSource != "workflowInputs" {
			t.Errorf("%s: input source %q, want declared inputs", sub.Name, tp.InputSource)
		}
		declared := map[string]string{}
		for _, in := range tp.WorkflowInputs.Values {
			declared[in.Name] = in.Type
		}
		p := nodeNamed(t, caller, c.node).Parameters.(ExecuteWorkflowParams)
		if p.Source != "database" || p.Mode != "once" || !p.Options.WaitForSubWorkflow {
			t.Errorf("%s: source %q mode %q wait %v, want database, once, true", c.node, p.Source, p.Mode, p.Options.WaitForSubWorkflow)
		}
		if !p.WorkflowID.RL || p.WorkflowID.Value != c.id || p.WorkflowID.CachedResultName != sub.Name {
			t.Errorf("%s calls %+v, want the id %s and the name %q", c.node, p.WorkflowID, c.id, sub.Name)
		}
		mapped := map[string]string{}
		for _, f := range p.WorkflowInputs.Schema {
			mapped[f.ID] = f.Type
			if _, ok := p.WorkflowInputs.Value[f.ID]; !ok || f.Removed || f.DisplayName != f.ID {
				t.Errorf("%s: input %s is in the schema but not mapped", c.node, f.ID)
			}
		}
		if len(p.WorkflowInputs.Value) != len(mapped) || len(mapped) != len(declared) {
			t.Errorf("%s maps %v, the sub-workflow declares %v", c.node, mapped, declared)
		}
		for name, typ := range declared {
			if mapped[name] != typ {
				t.Errorf("%s: input %s is %q in the caller, %q in %s", c.node, name, mapped[name], typ, sub.Name)
			}
		}
	}
	if got := RenderN8n(subTemplate(t, SubCaller), DefaultSettings()); nodeNamed(t, got, NodeCallClaim).Parameters.(ExecuteWorkflowParams).WorkflowID.Value != "" {
		t.Error("the committed caller names a claim workflow id: a builder's n8n gives its own")
	}
	if caller.Settings.ErrorWorkflow != "wfError" {
		t.Errorf("the caller's error workflow is %q, want wfError", caller.Settings.ErrorWorkflow)
	}
	// Both outputs reach the report through one Merge, so it runs once for all items.
	outs := caller.Connections[NodeWrite].Main
	if len(outs) != 2 {
		t.Fatalf("the write has %d outputs connected, want 2 (success and error)", len(outs))
	}
	for i, out := range outs {
		if len(out) != 1 || out[0] != (N8nConnection{Node: "Both outcomes", Type: "main", Index: i}) {
			t.Errorf("the write's output %d goes to %v, want input %d of Both outcomes", i, out, i)
		}
	}
	if m := caller.Connections["Both outcomes"].Main; len(m) != 1 || len(m[0]) != 1 || m[0][0].Node != NodeCallReport {
		t.Errorf("Both outcomes goes to %v, want %s", m, NodeCallReport)
	}
	if w := nodeNamed(t, caller, NodeWrite); w.OnError != "continueErrorOutput" || w.RetryOnFail {
		t.Errorf("the write: onError %q retryOnFail %v", w.OnError, w.RetryOnFail)
	}
	// The report judges with the templates' Evidence, not a copy of it.
	report := RenderN8n(subTemplate(t, SubReport), s)
	if got := nodeNamed(t, report, "Evidence").Parameters.(CodeParams).JSCode; got != evidenceJSFrom("Claim", "Claim") {
		t.Error("the report's Evidence is not the templates' evidence code")
	}
}

// runJS runs a Code node's JavaScript in Node.js as n8n would for one item: $json is input and $('Name')
// answers with nodes[Name] (item and first()). It returns what the code returned, or the message it threw.
func runJS(t *testing.T, code, input string, nodes map[string]string) (map[string]any, string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node (Node.js) is not on PATH: the sub-workflows' code cannot be run here")
	}
	ns, _ := json.Marshal(nodes)
	prog := `const $json = ` + input + `;
const nodes = ` + string(ns) + `;
const $ = (name) => { const v = JSON.parse(nodes[name]); return { item: { json: v }, first: () => ({ json: v }) }; };
try {
  const out = (() => {` + code + `})();
  process.stdout.write(JSON.stringify({ json: out.json }));
} catch (e) {
  process.stdout.write(JSON.stringify({ thrown: e.message }));
}`
	var got struct {
		JSON   map[string]any `json:"json"`
		Thrown string         `json:"thrown"`
	}
	runNode(t, node, prog, &got)
	return got.JSON, got.Thrown
}

// companion: claim builds a before-write request from its inputs (empty optional inputs left out), and
// refuses missing required inputs with an error that names them and where to map them.
func TestSubClaimRequest(t *testing.T) {
	code := nodeNamed(t, RenderN8n(subTemplate(t, SubClaim), DefaultSettings()), "Claim request").Parameters.(CodeParams).JSCode
	got, thrown := runJS(t, code, `{"companion_url": "http://c:8080/", "key": "invoice-742:reminder:2", "payload": {"amount": 120.5}, "destination": "billing", "dedupe": null, "reference": "", "batch_id": "n8n-w-exec-9", "batch_index": 0, "execution_id": 9}`, nil)
	if thrown != "" {
		t.Fatalf("a complete input threw %q", thrown)
	}
	want := `{"body":{"batch_id":"n8n-w-exec-9","batch_index":0,"destination":"billing","execution_id":"9","key":"invoice-742:reminder:2","payload":{"amount":120.5}},"companion_url":"http://c:8080","url":"http://c:8080` + PathBeforeWrite + `"}`
	if b, _ := json.Marshal(got); string(b) != want {
		t.Errorf("request\n got %s\nwant %s", b, want)
	}
	for in, want := range map[string]string{
		`{"companion_url": "http://c", "key": null, "payload": null}`:       "the inputs key, payload are empty; map them in the Execute Workflow node",
		`{"companion_url": "", "key": "k", "payload": {}}`:                  "the input companion_url is empty",
		`{"companion_url": "http://c", "key": "k", "payload": [1, 2]}`:      "payload must be an object",
		`{"companion_url": "http://c", "key": "  ", "payload": {"a": "b"}}`: "the input key is empty",
		`{"companion_url": "http://c", "key": "k", "payload": "not a map"}`: "payload must be an object",
	} {
		if _, thrown := runJS(t, code, in, nil); !strings.Contains(thrown, want) {
			t.Errorf("%s: threw %q, want it to say %q", in, thrown, want)
		}
	}
}

// companion: report judges the write node's output the way the templates do, from either output, and
// refuses a claim that is not a proceed claim.
func TestSubReportJudgesEitherOutput(t *testing.T) {
	wf := RenderN8n(subTemplate(t, SubReport), DefaultSettings())
	claimCode := nodeNamed(t, wf, "Claim").Parameters.(CodeParams).JSCode
	writeCode := nodeNamed(t, wf, "Write output").Parameters.(CodeParams).JSCode
	evidence := nodeNamed(t, wf, "Evidence").Parameters.(CodeParams).JSCode
	const claimAnswer = `{"key": "invoice-742:reminder:2", "decision": "proceed", "reason": "new", "claim": "c_1", "idempotency_key": "ik_1", "companion_url": "http://c:8080"}`
	for _, c := range []struct {
		name, write string
		want        map[string]any
	}{
		{"HTTP Request success", `{"statusCode": 201, "headers": {}, "body": {"id": "rec-9"}}`,
			map[string]any{"outcome": "succeeded", "http_status": 201.0, "external_id": "rec-9"}},
		{"Send Email success", `{"messageId": "<m-1@n8n>", "accepted": ["a@b"]}`,
			map[string]any{"outcome": "succeeded", "external_id": "<m-1@n8n>"}},
		{"error output: refused before dispatch", `{"key": "invoice-742:reminder:2", "claim": "c_1", "idempotency_key": "ik_1", "error": "connect ECONNREFUSED 127.0.0.1:9"}`,
			map[string]any{"outcome": "failed", "error": map[string]any{"class": "connection_refused", "code": "ECONNREFUSED", "message": "connect ECONNREFUSED 127.0.0.1:9"}}},
		{"error output: SMTP 451", `{"claim": "c_1", "error": "Message failed: 451 4.3.0 try later", "message": "Message failed"}`,
			map[string]any{"outcome": "failed", "error": map[string]any{"class": "connection_refused", "code": "smtp_451", "message": "Message failed: 451 4.3.0 try later"}}},
		{"error output: reset after dispatch", `{"key": "invoice-742:reminder:2", "claim": "c_1", "error": {"code": "ECONNRESET", "message": "socket hang up"}}`,
			map[string]any{"outcome": "unknown", "error": map[string]any{"class": "connection_reset", "code": "ECONNRESET", "message": "socket hang up"}}},
		{"error output n8n could not pair: error and message alone", `{"error": "socket hang up", "message": "socket hang up"}`,
			map[string]any{"outcome": "unknown", "error": map[string]any{"class": "other", "code": "", "message": "socket hang up"}}},
		{"a success carrying its own error field is a success", `{"id": 7, "error": "none"}`,
			map[string]any{"outcome": "succeeded", "external_id": "7"}},
		{"a success passing its input through is a success", `{"id": 8, "claim": "c_1", "error": null}`,
			map[string]any{"outcome": "succeeded", "external_id": "8"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			trigger := `{"claim": ` + claimAnswer + `, "write": ` + c.write + `, "external_id_fields": null}`
			claim, thrown := runJS(t, claimCode, trigger, nil)
			if thrown != "" {
				t.Fatalf("Claim threw %q", thrown)
			}
			cj, _ := json.Marshal(claim)
			marked, thrown := runJS(t, writeCode, string(cj), map[string]string{NodeSubTrigger: trigger})
			if thrown != "" {
				t.Fatalf("Write output threw %q", thrown)
			}
			mj, _ := json.Marshal(marked)
			got, thrown := runJS(t, evidence, string(mj), map[string]string{"Claim": string(cj)})
			if thrown != "" {
				t.Fatalf("Evidence threw %q", thrown)
			}
			if got["key"] != "invoice-742:reminder:2" || got["claim"] != "c_1" {
				t.Errorf("the report does not name the claim: %v", got)
			}
			for _, k := range []string{"key", "claim", "result"} {
				delete(got, k)
			}
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(c.want)
			if string(g) != string(w) {
				t.Errorf("evidence\n got %s\nwant %s", g, w)
			}
		})
	}
	for in, want := range map[string]string{
		`{"claim": {"key": "k", "decision": "skip", "reason": "succeeded", "claim": null, "companion_url": "http://c"}}`: "only a proceed claim is reported",
		`{"claim": null, "write": {}}`: "the claim input lacks key, claim, companion_url",
	} {
		if _, thrown := runJS(t, claimCode, in, nil); !strings.Contains(thrown, want) {
			t.Errorf("%s: threw %q, want it to say %q", in, thrown, want)
		}
	}
}

// The README tells a builder how to import the sub-workflows before the caller and how to point the caller
// at them, and lists their inputs.
func TestReadmeExplainsSubWorkflowImport(t *testing.T) {
	text := n8nReadme(DefaultSettings())
	for _, want := range []string{"## Reusable sub-workflows", "companion-claim.json", "companion-report.json", "guarded-write-subworkflows.json", "--claim-workflow-id", "From list", "`execution_id`", "Both outcomes"} {
		if !strings.Contains(text, want) {
			t.Errorf("the n8n README does not say %q", want)
		}
	}
	if i, j := strings.Index(text, "companion-claim.json"), strings.Index(text, "guarded-write-subworkflows.json"); i < 0 || j < 0 || i > j {
		t.Error("the README names the caller before the sub-workflows it needs")
	}
}

// `templates render --claim-workflow-id --report-workflow-id` writes the imported sub-workflows' ids into the
// caller's two nodes: the documented step after importing them.
func TestCommandRendersSubWorkflowIDs(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	if err := Command(context.Background(), []string{"render", "--out", dir, "--claim-workflow-id", "wfClaim7", "--report-workflow-id", "wfReport7"}, &out, &errOut); err != nil {
		t.Fatalf("render: %v (%s)", err, errOut.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, N8nDir, "guarded-write-subworkflows.json"))
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Nodes []struct {
			Name       string `json:"name"`
			Parameters struct {
				WorkflowID ResourceLocator `json:"workflowId"`
			} `json:"parameters"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(b, &wf); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, n := range wf.Nodes {
		if n.Parameters.WorkflowID.RL {
			got[n.Name] = n.Parameters.WorkflowID.Value
		}
	}
	if got[NodeCallClaim] != "wfClaim7" || got[NodeCallReport] != "wfReport7" || len(got) != 2 {
		t.Errorf("the caller calls %v, want %s → wfClaim7 and %s → wfReport7", got, NodeCallClaim, NodeCallReport)
	}
}
