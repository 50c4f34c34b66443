package blueprints

import (
	"encoding/json"
	"strings"
	"testing"
)

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestBeforeWriteHasNoNodeRetry: every n8n node that asks before-write (the single and lookup templates,
// the trigger guard, companion: claim, the batch call) runs with On Error → Continue (regular output) and
// without Retry On Fail. n8n 2.41.1 (workflow-execute.js) re-runs a failing node as a whole, for all its
// items, and also re-runs a node continuing on failure whose first item carries an error; a retry would
// ask again the items already claimed, which would meet their own claims (skip/in_progress) and expire
// into unknown. A report node keeps its Retry On Fail: an identical repeat is answered unchanged.
func TestBeforeWriteHasNoNodeRetry(t *testing.T) {
	seen := 0
	for _, tpl := range Templates() {
		for _, n := range RenderN8n(tpl, DefaultSettings()).Nodes {
			p, ok := n.Parameters.(HTTPParams)
			if !ok {
				continue
			}
			switch {
			case strings.HasSuffix(p.URL, PathBeforeWrite), strings.HasSuffix(p.URL, PathBatchBeforeWrite), tpl.Sub == SubClaim && n.Name == NodeBeforeWrite:
				seen++
				if n.RetryOnFail || n.MaxTries != 0 || n.OnError != "continueRegularOutput" {
					t.Errorf("%s: %s has retryOnFail %v maxTries %d onError %q, want no retry and continueRegularOutput", tpl.Slug, n.Name, n.RetryOnFail, n.MaxTries, n.OnError)
				}
			case strings.HasSuffix(p.URL, PathAfterWrite), strings.HasSuffix(p.URL, PathReconcile):
				if !n.RetryOnFail {
					t.Errorf("%s: report node %s lost its Retry On Fail", tpl.Slug, n.Name)
				}
			}
		}
	}
	if seen < 6 {
		t.Errorf("found %d before-write nodes, want at least 6 (single, trigger guard ×2, lookup ×2, claim, batch)", seen)
	}
}

// noAnswerItems are what n8n 2.41.1's HTTP Request node (V3, On Error → Continue) puts in place of a
// response when a request got none: {error: the request's rejection}, with the code where the error has one.
var noAnswerItems = []struct{ name, in, code string }{
	{"a reset with its code", `{"error": {"message": "socket hang up", "code": "ECONNRESET"}}`, "ECONNRESET"},
	{"a code in the cause", `{"error": {"message": "read failed", "cause": {"code": "ECONNREFUSED"}}}`, "ECONNREFUSED"},
	{"a code only in the message", `{"error": {"message": "connect ETIMEDOUT 10.0.0.1:443"}}`, "ETIMEDOUT"},
	{"n8n's own words", `{"error": {"message": "The connection to the server was closed unexpectedly, perhaps it is offline."}}`, ""},
	{"a bare string", `{"error": "timeout of 30000ms exceeded"}`, ""},
}

// TestClaimWithoutAnswer: a before-write that got no answer becomes, for its own item only, a refusal marked
// unanswered (error no_answer, http_status 503) in the single templates and in companion: claim, and the
// webhook answers it 503 with a Retry-After, saying nothing was written.
func TestClaimWithoutAnswer(t *testing.T) {
	code := nodeNamed(t, RenderN8n(Templates()[0], DefaultSettings()), NodeClaimAnswer).Parameters.(CodeParams).JSCode
	claim := nodeNamed(t, RenderN8n(subTemplate(t, SubClaim), DefaultSettings()), "Claim answer").Parameters.(CodeParams).JSCode
	settings := map[string]string{"Settings": `{"key": "invoice-742:reminder:2"}`}
	req := map[string]string{"Claim request": `{"companion_url": "http://c", "body": {"key": "invoice-742:reminder:2"}}`}
	for _, c := range noAnswerItems {
		got, thrown := runJS(t, code, c.in, settings)
		e, _ := got["error"].(map[string]any)
		if thrown != "" || got["refused"] != true || got["unanswered"] != true || got["http_status"] != 503.0 || got["key"] != "invoice-742:reminder:2" || e["code"] != "no_answer" {
			t.Fatalf("%s: %v %q", c.name, got, thrown)
		}
		msg, _ := e["message"].(string)
		if !strings.HasPrefix(msg, "companion gave no answer") || (c.code != "" && !strings.Contains(msg, "("+c.code+")")) {
			t.Errorf("%s: message %q, want the transport code %q", c.name, msg, c.code)
		}
		sub, thrown := runJS(t, claim, c.in, req)
		if thrown != "" || sub["refused"] != true || sub["unanswered"] != true || sub["decision"] != nil || !keyIn(sub, "decision") || sub["http_status"] != 503.0 || sub["key"] != "invoice-742:reminder:2" || sub["companion_url"] != "http://c" {
			t.Errorf("companion: claim, %s: %v %q", c.name, sub, thrown)
		}
		answer := runAnswer(t, mustJSON(t, got))
		body := answer["body"].(map[string]any)
		if answer["status"] != 503.0 || answer["retry_after"] != "60" || body["error"] != "no_answer" || !strings.Contains(body["message"].(string), "nothing was written: deliver it again") {
			t.Errorf("%s: answered %v", c.name, answer)
		}
	}
	// Among written items, the one without an answer makes the delivery 503 (the sender delivers it again; the
	// others are then skip/succeeded), and each keeps its own answer.
	written := `{"key": "a", "decision": "proceed", "state": "succeeded", "external_id": "rec-1", "evidence": {"outcome": "succeeded"}}`
	lost := `{"key": "b", "refused": true, "unanswered": true, "http_status": 503, "error": {"code": "no_answer", "message": "companion gave no answer (ECONNRESET): socket hang up"}, "retry_after": null}`
	got := runAnswer(t, written, lost, written)
	if got["status"] != 503.0 || got["retry_after"] != "60" {
		t.Errorf("two written and one without an answer: %v", got)
	}
}

// TestBatchCallWithoutAnswer: a batch before-write call that got no answer marks its own items unanswered
// (503); the items of a call that was answered keep their decisions.
func TestBatchCallWithoutAnswer(t *testing.T) {
	decided := runBatchCode(t, "One item per decision", decode(t, `[{"error": {"message": "socket hang up", "code": "ECONNRESET"}}]`), map[string][]any{
		"Settings":      decode(t, `[{"write_url": "w", "payload": {}, "reference": "r0", "companion_url": "c"}, {"write_url": "w", "payload": {}, "reference": "r1", "companion_url": "c"}]`),
		"Batch request": decode(t, `[{"batch_id": "b", "items": [{"key": "k0", "batch_index": 0}, {"key": "k1", "batch_index": 1}]}]`),
	})
	if len(decided) != 2 || decided[0]["unanswered"] != true || decided[1]["key"] != "k1" || decided[1]["http_status"] != 503.0 || decided[1]["error"].(map[string]any)["code"] != "no_answer" {
		t.Fatalf("decided %v", decided)
	}
}

// TestTriggerClaimAfterNoAnswer: in guarded-write, an item whose write claim got no answer reports its trigger
// claim failed (class validation: this run sent nothing), so the redelivery claims the trigger again at once.
func TestTriggerClaimAfterNoAnswer(t *testing.T) {
	var tpl Template
	for _, x := range Templates() {
		if x.TriggerGuard && x.Sub == NotSub {
			tpl = x
			break
		}
	}
	code := nodeNamed(t, RenderN8n(tpl, DefaultSettings()), "Run outcome").Parameters.(CodeParams).JSCode
	got, thrown := runJS(t, code, `{"key": "k", "refused": true, "unanswered": true, "http_status": 503, "error": {"code": "no_answer", "message": "companion gave no answer (ECONNRESET): socket hang up"}, "retry_after": null}`,
		map[string]string{"Trigger claim answer": `{"key": "k:trigger", "decision": "proceed", "claim": "c_t"}`})
	report, _ := got["report"].(map[string]any)
	e, _ := report["error"].(map[string]any)
	if thrown != "" || got["trigger"] != "claimed" || report["outcome"] != "failed" || report["claim"] != "c_t" || e["class"] != "validation" || e["code"] != "no_answer" || e["message"] != "this run sent nothing: before-write got no answer" {
		t.Errorf("the trigger claim's report: %v %q", got, thrown)
	}
}
