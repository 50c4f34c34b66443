package blueprints

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// writeEvidenceCase is one row of testdata/write-evidence.json: what a write node gave (its success or error
// output) and the evidence it means. The Companion community node's tests run the same table
// (n8n-node/test/evidence.test.ts), so the two classifiers cannot drift apart.
type writeEvidenceCase struct {
	Name   string          `json:"name"`
	Output string          `json:"output"`
	Item   json.RawMessage `json:"item"`
	Want   json.RawMessage `json:"want"`
}

func writeEvidenceCases(t *testing.T) []writeEvidenceCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "write-evidence.json"))
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		Cases []writeEvidenceCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &table); err != nil {
		t.Fatal(err)
	}
	if len(table.Cases) < 10 {
		t.Fatalf("testdata/write-evidence.json holds %d cases", len(table.Cases))
	}
	return table.Cases
}

// TestEvidenceJudgesAnyWriteNode runs the Evidence node's code of the rendered guarded-write template
// in Node.js, with $json and $() as n8n gives them, against what real write nodes return (the table of
// testdata/write-evidence.json): an HTTP Request's full response, Send Email's nodemailer info (no
// statusCode), and the error output of each (an error object, or only a message). Node.js runs n8n
// itself, so it is on every machine that runs the e2e; the test says so and skips where it is missing.
func TestEvidenceJudgesAnyWriteNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node (Node.js) is not on PATH: the Evidence code cannot be run here")
	}
	var code string
	for _, n := range RenderN8n(Templates()[0], DefaultSettings()).Nodes {
		if n.Name == "Evidence" {
			code = n.Parameters.(CodeParams).JSCode
		}
	}
	if code == "" {
		t.Fatal("guarded-write has no Evidence node")
	}
	const claim = `{"key": "invoice-742:reminder:2", "claim": "c_1"}`
	for _, c := range writeEvidenceCases(t) {
		// The template's Write error node marks an error-output item write_error.
		item := string(c.Item)
		if c.Output == "error" {
			item = `{"write_error": ` + item + `}`
		}
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			prog := `const $json = ` + item + `;
const $ = (name) => ({ item: { json: ` + claim + ` }, first: () => ({ json: { external_id_fields: '` + ExternalIDFields + `' } }) });
const out = (() => {` + code + `})();
process.stdout.write(JSON.stringify(out.json));`
			var got map[string]any
			b := runNode(t, node, prog, &got)
			if got["key"] != "invoice-742:reminder:2" || got["claim"] != "c_1" {
				t.Errorf("report does not name the claim: %s", b)
			}
			delete(got, "key")
			delete(got, "claim")
			delete(got, "result")
			var want map[string]any
			_ = json.Unmarshal(c.Want, &want)
			w, _ := json.Marshal(want)
			g, _ := json.Marshal(got)
			if string(w) != string(g) {
				t.Errorf("report\n got %s\nwant %s", g, w)
			}
		})
	}
	if !strings.Contains(code, "write_error") {
		t.Error("Evidence does not read the error output's mark")
	}
}

// runCode runs a Code node's JavaScript of the rendered guarded-write template in Node.js with $json
// as given and $() answering every node with self, and returns what it returned.
func runCode(t *testing.T, name, input, self string) map[string]any {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node (Node.js) is not on PATH: the template's code cannot be run here")
	}
	var code string
	for _, n := range RenderN8n(Templates()[0], DefaultSettings()).Nodes {
		if n.Name == name {
			code = n.Parameters.(CodeParams).JSCode
		}
	}
	if code == "" {
		t.Fatalf("guarded-write has no node %q", name)
	}
	// A Code node run once for all items (Answer) reads $input and returns a list: it gets input as its one item.
	prog := `const $json = ` + input + `;
const $input = { all: () => [{ json: $json }], first: () => ({ json: $json }) };
const $ = (name) => ({ item: { json: ` + self + ` }, first: () => ({ json: ` + self + ` }) });
const out = (() => {` + code + `})();
process.stdout.write(JSON.stringify(Array.isArray(out) ? out[0].json : out.json));`
	var got map[string]any
	runNode(t, node, prog, &got)
	return got
}

// TestWebhookAnswersMakeSendersRedeliver runs the Answer node's code against the ends a run can reach
// and checks the status, Retry-After and whether the execution then fails.
func TestWebhookAnswersMakeSendersRedeliver(t *testing.T) {
	for _, c := range []struct {
		name, in   string
		status     float64
		retryAfter any
		end        string
	}{
		{"written", `{"key": "k", "decision": "proceed", "state": "succeeded", "evidence": {"key": "k", "claim": "c_1", "outcome": "succeeded"}}`, 200, nil, "done"},
		{"stored result", `{"key": "k", "decision": "skip", "reason": "succeeded", "state": "succeeded"}`, 200, nil, "done"},
		{"duplicate of a finished delivery", `{"duplicate": true, "key": "k:trigger", "decision": "skip", "reason": "succeeded", "state": "succeeded"}`, 200, nil, "done"},
		{"duplicate of a running delivery", `{"duplicate": true, "key": "k:trigger", "decision": "skip", "reason": "in_progress", "state": "in_flight", "retry_after": 12}`, 503, "12", "done"},
		{"missing fields", `{"delivery": "incomplete", "missing": ["amount", "invoice"]}`, 400, nil, "done"},
		{"conflict", `{"key": "k", "decision": "conflict", "reason": "fingerprint_mismatch", "surface": true, "message": "m"}`, 409, nil, "surface"},
		{"conflict with an item that succeeded", `{"key": "k", "decision": "conflict", "reason": "fingerprint_mismatch", "state": "succeeded", "surface": true, "message": "m"}`, 409, nil, "surface"},
		{"retry later", `{"key": "k", "decision": "skip", "reason": "retry_later", "state": "failed", "retry_after": 40}`, 503, "40", "surface"},
		{"awaiting owner", `{"key": "k", "decision": "skip", "reason": "awaiting_owner", "state": "unknown"}`, 503, "60", "surface"},
		{"failed for good before", `{"key": "k", "decision": "skip", "reason": "failed_permanent", "state": "failed"}`, 422, nil, "surface"},
		{"written and unknown", `{"key": "k", "decision": "proceed", "state": "unknown", "evidence": {"outcome": "unknown"}}`, 503, "60", "surface"},
		{"written and 429", `{"key": "k", "decision": "proceed", "state": "failed", "evidence": {"outcome": "failed", "http_status": 429, "retry_after": 7}}`, 503, "7", "surface"},
		{"written and refused for good", `{"key": "k", "decision": "proceed", "state": "failed", "evidence": {"outcome": "failed", "http_status": 422}}`, 422, nil, "surface"},
		{"SMTP 451", `{"key": "k", "decision": "proceed", "state": "failed", "evidence": {"outcome": "failed", "error": {"class": "connection_refused", "code": "smtp_451"}}}`, 503, "60", "surface"},
		{"SMTP 550 (rejected: refused for good)", `{"key": "k", "decision": "proceed", "state": "failed", "evidence": {"outcome": "failed", "error": {"class": "rejected", "code": "smtp_550"}}}`, 422, nil, "surface"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := runCode(t, "Answer", c.in, `{}`)
			if got["status"] != c.status || got["retry_after"] != c.retryAfter || got["end"] != c.end {
				t.Errorf("answer status %v retry_after %v end %v, want %v %v %s", got["status"], got["retry_after"], got["end"], c.status, c.retryAfter, c.end)
			}
			if b, _ := json.Marshal(got["body"]); strings.Contains(string(b), `"claim"`) {
				t.Errorf("the answer shows the sender the claim: %s", b)
			}
			if later := got["later"] == "later"; later != (c.status == 503) {
				t.Errorf("later = %v for status %v", got["later"], c.status)
			}
		})
	}
}

// TestDeliveryIsCheckedBeforeTheKey: a delivery missing a field the key is built from is refused before
// any key exists.
func TestDeliveryIsCheckedBeforeTheKey(t *testing.T) {
	got := runCode(t, NodeCheckDelivery, `{"body": {"invoice": "742", "recipient": "c-19", "amount": 120.5, "reminder": 2}}`, `{}`)
	if got["delivery"] != "complete" {
		t.Errorf("a full delivery is %v", got)
	}
	got = runCode(t, NodeCheckDelivery, `{"body": {"invoice": "", "recipient": "c-19", "reminder": 2}}`, `{}`)
	if got["delivery"] != "incomplete" || fmt.Sprint(got["missing"]) != "[amount invoice]" {
		t.Errorf("a delivery without amount and with an empty invoice is %v", got)
	}
	got = runCode(t, NodeCheckDelivery, `{"headers": {}}`, `{}`)
	if got["delivery"] != "incomplete" {
		t.Errorf("a delivery without a body is %v", got)
	}
}

// runNode runs the JavaScript prog with node (bin) and decodes what it writes to standard output into
// out; it returns that output.
func runNode(t *testing.T, bin, prog string, out any) []byte {
	t.Helper()
	b, err := exec.Command(bin, "-e", prog).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("output %s: %v", b, err)
	}
	return b
}
