package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/replaysafe/companion/sandbox"
)

// TestTutorialWalkThrough follows docs/tutorial.md from its first step to its last, against a real
// companion serve (open mode, a fresh ledger) and the sandbox receiver, in the tutorial's order:
//   - every curl to companion (localhost:8080) and to the receiver (localhost:9090) is sent as written,
//     and the JSON shown under it is checked against the answer (every field shown has that value);
//   - every companion command (items resolve) runs as written, against that service;
//   - n8n cannot run in a Go test, so each delivery to n8n's webhook (localhost:5678) is played: the
//     test checks it against the template the tutorial imports (n8n-templates/guarded-write.json: its
//     webhook path, the fields Check delivery requires), builds the key, reference and payload with
//     the template's Settings expressions, and makes the template's requests of the write path (the
//     before-write, the write to the receiver with the idempotency key, the after-write with the
//     evidence: the record's id, or the transport error). The template's trigger claim is not played:
//     the tutorial shows only the write's item. A comment "<!-- tutorial: settings dedupe=none -->"
//     stands for the step that edits the Settings node.
func TestTutorialWalkThrough(t *testing.T) {
	tpl := readTemplate(t, repoRoot+"/n8n-templates/guarded-write.json")
	rc, err := sandbox.New(sandbox.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = rc.Serve(ctx, ln) }()
	receiver := "http://" + ln.Addr().String()
	svc := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": t.TempDir()})
	companion := "http://" + svc.Addr()
	env := map[string]string{"COMPANION_URL": companion}

	path := repoRoot + "/docs/tutorial.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "`n8n-templates/guarded-write.json`") {
		t.Fatal("docs/tutorial.md no longer imports n8n-templates/guarded-write.json: update this test with it")
	}
	settings := map[string]string{"dedupe": tpl.settings["dedupe"], "destination": tpl.settings["destination"]}
	for _, u := range []string{tpl.settings["companion_url"], tpl.settings["write_url"]} {
		if !strings.Contains(string(doc), "`"+u+"`") {
			t.Errorf("the template's Settings hold %s, which docs/tutorial.md does not name", u)
		}
	}
	edits := settingsEdit.FindAllStringSubmatchIndex(string(doc), -1)
	blocks := readmeBlocks(t, path)
	deliveries, checked, commands := 0, 0, 0
	for i, b := range blocks {
		// The Settings edits written before this block apply from it on.
		for len(edits) > 0 && strings.Count(string(doc[:edits[0][0]]), "\n")+1 < b.line {
			settings[string(doc[edits[0][2]:edits[0][3]])] = string(doc[edits[0][4]:edits[0][5]])
			edits = edits[1:]
		}
		if b.lang != "sh" {
			continue
		}
		var answer *readmeBlock
		if i+1 < len(blocks) && blocks[i+1].lang == "json" {
			answer = &blocks[i+1]
		}
		cmds := shellCommands(t, b.text)
		if len(cmds) != 1 {
			t.Fatalf("docs/tutorial.md line %d: %d commands in one block; give each its own", b.line, len(cmds))
		}
		words := cmds[0]
		where := fmt.Sprintf("docs/tutorial.md line %d", b.line)
		var got []byte
		switch {
		case len(words) > 1 && words[0] == "companion" && (words[1] == "serve" || words[1] == "receiver"):
			continue // started above, on free ports
		case words[0] == "npx":
			continue // n8n: played below
		case words[0] == "companion":
			commands++
			if _, err := run(t, env, words[1:]...); err != nil {
				t.Fatalf("%s: companion %s: %v", where, strings.Join(words[1:], " "), err)
			}
			continue
		case words[0] == "curl":
			r := parseCurl(t, words)
			switch host, rest, _ := strings.Cut(r.url, "/"); host {
			case "localhost:5678":
				if "/"+rest != "/webhook/"+tpl.webhook {
					t.Fatalf("%s: the delivery goes to /%s; the template's webhook is /webhook/%s", where, rest, tpl.webhook)
				}
				deliveries++
				playDelivery(t, where, tpl, settings, r.body, companion, receiver)
				continue
			case "localhost:8080":
				got = sendTutorial(t, where, r, companion+"/"+rest)
			case "localhost:9090":
				got = sendTutorial(t, where, r, receiver+"/"+rest)
			default:
				t.Fatalf("%s: curl to %s: the tutorial's services are companion (localhost:8080), the receiver (localhost:9090) and n8n (localhost:5678)", where, host)
			}
		default:
			t.Fatalf("%s: %q: the test knows curl and companion", where, words[0])
		}
		if answer == nil {
			continue
		}
		var want, have map[string]any
		if err := json.Unmarshal([]byte(answer.text), &want); err != nil {
			t.Fatalf("docs/tutorial.md line %d: the answer shown is not JSON: %v", answer.line, err)
		}
		if err := json.Unmarshal(got, &have); err != nil {
			t.Fatalf("%s: %v: %s", where, err, got)
		}
		for _, problem := range compareShown("", want, have, map[string]string{}) {
			t.Errorf("docs/tutorial.md line %d: %s\nanswer: %s", answer.line, problem, got)
		}
		checked++
	}
	if deliveries < 5 || checked < 5 || commands < 1 || settings["dedupe"] != "none" {
		t.Fatalf("played %d deliveries, checked %d answers, ran %d commands, dedupe %s at the end: the tutorial was not found",
			deliveries, checked, commands, settings["dedupe"])
	}
}

// settingsEdit is the tutorial's mark of a step that edits the template's Settings node.
var settingsEdit = regexp.MustCompile(`<!-- tutorial: settings ([a-z_]+)=([a-z_]+) -->`)

// sendTutorial makes one curl request of the tutorial and returns the answer, which must be 2xx.
func sendTutorial(t *testing.T, where string, r curlRequest, url string) []byte {
	t.Helper()
	req, err := http.NewRequest(r.method, url, strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = r.header
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s: %s %s answered %d: %s", where, r.method, url, resp.StatusCode, b)
	}
	return b
}

// template is what the test reads of an n8n template: its webhook path, the fields Check delivery
// requires, and its Settings node's fixed values.
type template struct {
	webhook  string
	required []string
	settings map[string]string
}

func readTemplate(t *testing.T, path string) template {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Nodes []struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(b, &wf); err != nil {
		t.Fatal(err)
	}
	tpl := template{settings: map[string]string{}}
	for _, n := range wf.Nodes {
		var p struct {
			Path        string `json:"path"`
			JSCode      string `json:"jsCode"`
			Assignments struct {
				Assignments []struct {
					Name  string `json:"name"`
					Value any    `json:"value"`
				} `json:"assignments"`
			} `json:"assignments"`
		}
		_ = json.Unmarshal(n.Parameters, &p)
		switch n.Name {
		case "Webhook":
			tpl.webhook = p.Path
		case "Check delivery":
			if m := regexp.MustCompile(`const required = \[([^\]]*)\]`).FindStringSubmatch(p.JSCode); m != nil {
				for _, f := range strings.Split(m[1], ",") {
					tpl.required = append(tpl.required, strings.Trim(strings.TrimSpace(f), "'"))
				}
			}
		case "Settings":
			for _, a := range p.Assignments.Assignments {
				if s, ok := a.Value.(string); ok {
					tpl.settings[a.Name] = s
				}
			}
		}
	}
	// The expressions the test plays: if the template builds its key, reference or payload otherwise, the
	// played deliveries would not be the template's.
	for name, want := range map[string]string{
		"key":       "={{ 'invoice-' + $json.body.invoice + ':reminder:' + $json.body.reminder }}",
		"reference": "={{ 'invoice-' + $json.body.invoice + '-reminder-' + $json.body.reminder }}",
	} {
		if tpl.settings[name] != want {
			t.Fatalf("guarded-write.json's Settings build %s as %q; the test plays %q: update it with the template", name, tpl.settings[name], want)
		}
	}
	if tpl.webhook == "" || len(tpl.required) == 0 || tpl.settings["write_url"] == "" || tpl.settings["companion_url"] == "" {
		t.Fatalf("read %+v from %s: the reading is wrong", tpl, path)
	}
	return tpl
}

// playDelivery makes the requests the template makes for one delivery on its write path.
func playDelivery(t *testing.T, where string, tpl template, settings map[string]string, body, companion, receiver string) {
	t.Helper()
	var d map[string]any
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatalf("%s: the delivery is not JSON: %v", where, err)
	}
	for _, f := range tpl.required {
		if d[f] == nil {
			t.Fatalf("%s: the delivery lacks %s, which the template's Check delivery requires", where, f)
		}
	}
	str := func(v any) string { return fmt.Sprint(v) }
	key := "invoice-" + str(d["invoice"]) + ":reminder:" + str(d["reminder"])
	reference := "invoice-" + str(d["invoice"]) + "-reminder-" + str(d["reminder"])
	payload := map[string]any{"invoice": str(d["invoice"]), "recipient": d["recipient"], "amount": d["amount"], "reminder": d["reminder"]}
	post := func(url string, v any, header http.Header) (*http.Response, []byte, error) {
		b, _ := json.Marshal(v)
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range header {
			req.Header[k] = v
		}
		// A connection of its own per request: Go's client sends a request with an Idempotency-Key again
		// on a reused connection that breaks, which n8n's HTTP Request node does not.
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp, out, nil
	}
	resp, out, err := post(companion+"/v1/before-write", map[string]any{"key": key, "payload": payload, "reference": reference,
		"destination": settings["destination"], "dedupe": settings["dedupe"]}, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: before-write: %v %s", where, err, out)
	}
	var claim struct{ Decision, Claim, IdempotencyKey string }
	_ = json.Unmarshal(out, &claim)
	if claim.Decision != "proceed" {
		return // the template answers from the decision; nothing is written
	}
	report := map[string]any{"key": key, "claim": claim.Claim}
	// The template writes to the receiver's /records; the test's receiver listens on a free port.
	writeURL := receiver + strings.TrimPrefix(tpl.settings["write_url"], "http://127.0.0.1:9090")
	write, out, err := post(writeURL, map[string]any{"reference": reference, "invoice": payload["invoice"],
		"recipient": payload["recipient"], "amount": payload["amount"]}, http.Header{"Idempotency-Key": {claim.IdempotencyKey}})
	switch {
	case err != nil:
		report["outcome"], report["error"] = "failed", map[string]any{"class": "connection_reset", "message": err.Error()}
	case write.StatusCode/100 == 2:
		var rec struct{ ID string }
		_ = json.Unmarshal(out, &rec)
		report["outcome"], report["external_id"] = "succeeded", rec.ID
	default:
		report["outcome"], report["http_status"] = "failed", write.StatusCode
	}
	if resp, out, err := post(companion+"/v1/after-write", report, nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: after-write: %v %s", where, err, out)
	}
}
