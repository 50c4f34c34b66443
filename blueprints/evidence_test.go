package blueprints

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// TestEvidenceJudgesAnyWriteNode runs the Evidence node's code of the rendered guarded-write template
// in Node.js, with $json and $() as n8n gives them, against what real write nodes return: an HTTP
// Request's full response, Send Email's nodemailer info (no statusCode), and the error output of each
// (an error object, or only a message). Node.js runs n8n itself, so it is on every machine that runs
// the e2e; the test says so and skips where it is missing.
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
	for _, c := range []struct {
		name, item string
		want       map[string]any
	}{
		{"HTTP 201 with an id", `{"statusCode": 201, "headers": {"x-request-id": "r-1"}, "body": {"id": "rec-9"}}`,
			map[string]any{"outcome": "succeeded", "http_status": 201.0, "external_id": "rec-9", "receiver_request_id": "r-1"}},
		{"HTTP 503 with Retry-After", `{"statusCode": 503, "headers": {"retry-after": "30"}, "body": "busy"}`,
			map[string]any{"outcome": "failed", "http_status": 503.0, "retry_after": 30.0, "error": map[string]any{"class": "http", "code": "503", "message": "busy"}}},
		{"HTTP 302 proves nothing", `{"statusCode": 302, "headers": {}, "body": ""}`,
			map[string]any{"outcome": "unknown", "http_status": 302.0}},
		{"Send Email success has no statusCode", `{"accepted": ["c-19@example.com"], "rejected": [], "messageId": "<m-1@n8n>", "response": "250 OK queued"}`,
			map[string]any{"outcome": "succeeded", "external_id": "<m-1@n8n>"}},
		{"a record node's success", `{"id": 42, "name": "row"}`,
			map[string]any{"outcome": "succeeded", "external_id": "42"}},
		{"SMTP 451 is refused, nothing committed", `{"write_error": "Message failed: 451 4.3.0 try again later"}`,
			map[string]any{"outcome": "failed", "error": map[string]any{"class": "connection_refused", "code": "smtp_451", "message": "Message failed: 451 4.3.0 try again later"}}},
		{"SMTP 550 is refused", `{"write_error": "Can't send mail - all recipients were rejected: 550 5.1.1 no such user"}`,
			map[string]any{"outcome": "failed", "error": map[string]any{"class": "connection_refused", "code": "smtp_550", "message": "Can't send mail - all recipients were rejected: 550 5.1.1 no such user"}}},
		{"SMTP 421 greeting", `{"write_error": "Invalid greeting. response=421 busy: 421 busy"}`,
			map[string]any{"outcome": "failed", "error": map[string]any{"class": "connection_refused", "code": "smtp_421", "message": "Invalid greeting. response=421 busy: 421 busy"}}},
		{"a connection dropped after the message is unknown", `{"write_error": "Connection closed unexpectedly"}`,
			map[string]any{"outcome": "unknown", "error": map[string]any{"class": "other", "code": "", "message": "Connection closed unexpectedly"}}},
		{"refused in the message is not dispatched", `{"write_error": "connect ECONNREFUSED 127.0.0.1:2525"}`,
			map[string]any{"outcome": "failed", "error": map[string]any{"class": "connection_refused", "code": "ECONNREFUSED", "message": "connect ECONNREFUSED 127.0.0.1:2525"}}},
		{"a transport code on an error object", `{"write_error": {"code": "ECONNRESET", "message": "socket hang up"}}`,
			map[string]any{"outcome": "unknown", "error": map[string]any{"class": "connection_reset", "code": "ECONNRESET", "message": "socket hang up"}}},
		{"an API error with its HTTP status", `{"write_error": {"httpCode": "429", "message": "Too many requests"}}`,
			map[string]any{"outcome": "failed", "http_status": 429.0, "error": map[string]any{"class": "http", "code": "429", "message": "Too many requests"}}},
		{"an error that says nothing is unknown", `{"write_error": "Something went wrong"}`,
			map[string]any{"outcome": "unknown", "error": map[string]any{"class": "other", "code": "", "message": "Something went wrong"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			prog := `const $json = ` + c.item + `;
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
			w, _ := json.Marshal(c.want)
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
