package cli_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/sandbox"
)

func TestBadLookupConfigNamesLineAndField(t *testing.T) {
	const head = "destinations:\n  billing:\n    lookup:\n"
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"inline header value", head + "      url: https://b.example/x?q={reference}\n      found: {path: id}\n      headers:\n        Authorization: {value: Bearer sk_live_INLINE}\n",
			[]string{"line 7", "destinations.billing.lookup.headers.Authorization.value", "not written in the config file"}},
		{"unset env", head + "      url: https://b.example/x?q={reference}\n      found: {path: id}\n      headers:\n        Authorization: {env: NOT_SET}\n",
			[]string{"line 7", "headers.Authorization", "NOT_SET"}},
		{"secret with a line break", head + "      url: https://b.example/x?q={reference}\n      found: {path: id}\n      headers:\n        X-Key: {env: BROKEN_SECRET}\n",
			[]string{"line 7", "headers.X-Key", "line break"}},
		{"unknown placeholder", head + "      url: https://b.example/x?q={ref}\n      found: {path: id}\n", []string{"line 4", "lookup.url", "{ref}"}},
		{"no path", head + "      url: https://b.example/x?q={reference}\n", []string{"lookup.found.path", "is required"}},
		{"delays shrink", head + "      url: https://b.example/x?q={reference}\n      found: {path: id}\n      settle_after: [2m, 30s]\n",
			[]string{"line 6", "lookup.settle_after", "must grow"}},
		{"bad delay", head + "      url: https://b.example/x?q={reference}\n      found: {path: id}\n      settle_after: [soon]\n",
			[]string{"line 6", "lookup.settle_after", "duration"}},
		{"dedupe key", "destinations:\n  billing:\n    dedupe: key\n    lookup:\n      url: https://b.example/x?q={reference}\n      found: {path: id}\n",
			[]string{"line 3", "destinations.billing.dedupe", "dedupe: lookup"}},
		{"under defaults", "defaults:\n  lookup:\n    url: https://b.example/x?q={reference}\n", []string{"line 3", "defaults.lookup"}},
		{"unknown lookup field", head + "      urll: https://b.example/x\n", []string{"line 4", "unknown field urll"}},
		{"timeout out of range", head + "      url: https://b.example/x?q={reference}\n      found: {path: id}\n      timeout: 10m\n",
			[]string{"line 6", "lookup.timeout", "100ms-2m"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := startWithBadConfig(t, tc.yaml, map[string]string{"BROKEN_SECRET": "sk_live_BROKEN\nline"})
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if strings.Contains(err.Error(), "sk_live_") {
				t.Errorf("the error shows a secret: %v", err)
			}
		})
	}
}

// recorder keeps every request body a fake server received.
type recorder struct {
	mu     sync.Mutex
	bodies []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bodies = append(r.bodies, s)
}

func (r *recorder) all() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.bodies, "\n")
}

// TestProbesSettleItemsAndNoSecretShows runs serve with a lookup whose Authorization header comes from the
// environment, against the sandbox receiver behind a check of that header: an item whose write committed
// and dropped is settled found, one whose lookup answers 500 goes to lookup_failed and to Slack with its
// reads. The header's value then appears nowhere: not in the logs, the items, the alerts, the metrics or
// an error.
func TestProbesSettleItemsAndNoSecretShows(t *testing.T) {
	const secret = "sk_live_6f1d9c0a-very-secret"
	rc, err := sandbox.New(sandbox.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.Header.Get("Authorization") != "Bearer "+secret {
			http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
			return
		}
		rc.Handler().ServeHTTP(w, r)
	}))
	defer receiver.Close()
	slackSaw := &recorder{}
	slackAPI := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		form, _ := url.ParseQuery(string(b))
		slackSaw.add(form.Get("blocks") + form.Get("text"))
		fmt.Fprint(w, `{"ok":true,"channel":"C1","ts":"1700000000.000100"}`)
	}))
	defer slackAPI.Close()

	dir := t.TempDir()
	cfg := filepath.Join(dir, "companion.yaml")
	yaml := "alerts:\n  default_owner: U0OWNER\ndestinations:\n  billing:\n    lease_seconds: 5\n    lookup:\n" +
		"      url: " + receiver.URL + "/records?reference={reference}\n" +
		"      headers:\n        Authorization: {env: BILLING_LOOKUP_AUTH}\n" +
		"      found: {status: 200, path: records.0.id}\n" +
		"      settle_after: [1s, 2s]\n      max_failed_reads: 2\n      retry_after: 1s\n      rate_per_second: 50\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, map[string]string{"COMPANION_CONFIG": cfg, "COMPANION_DATA_DIR": filepath.Join(dir, "data"),
		"BILLING_LOOKUP_AUTH": "Bearer " + secret, "SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "signing",
		"SLACK_API_URL": slackAPI.URL + "/"}, "--addr", "127.0.0.1:0", "--sweep-every", "@every 1s")

	// inv-1: the write commits and the answer is dropped. inv-2: the lookup answers 500 every time.
	for _, key := range []string{"inv-1", "inv-2"} {
		status, ans := call(t, p, "POST", "/v1/before-write", "", `{"key":"`+key+`","payload":{"n":1},"destination":"billing","reference":"QT-`+key+`"}`)
		if status != 200 || ans["decision"] != "proceed" {
			t.Fatalf("before-write %s: %d %v", key, status, ans)
		}
		if key == "inv-1" {
			req, _ := http.NewRequest("POST", receiver.URL+"/records", strings.NewReader(`{"reference":"QT-inv-1"}`))
			req.Header.Set(sandbox.HeaderFault, string(sandbox.FaultCommitThenDrop))
			if _, err := http.DefaultClient.Do(req); err == nil {
				t.Fatal("commit_then_drop answered")
			}
		}
		status, _ = call(t, p, "POST", "/v1/after-write", "", `{"key":"`+key+`","claim":"`+ans["claim"].(string)+`","outcome":"unknown","error":{"class":"connection_reset"}}`)
		if status != 200 {
			t.Fatalf("after-write %s: %d", key, status)
		}
	}
	req, _ := http.NewRequest("POST", receiver.URL+"/control/faults", strings.NewReader(`{"fault":"lookup_500","count":100,"reference":"QT-inv-2"}`))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("queueing lookup_500: %v", err)
	}

	var one, two map[string]any
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		_, one = call(t, p, "GET", "/v1/items/inv-1", "", "")
		_, two = call(t, p, "GET", "/v1/items/inv-2", "", "")
		if one["state"] == "succeeded" && two["alert_status"] == "sent" {
			break
		}
	}
	if one["state"] != "succeeded" || one["external_id"] != "rec_1" {
		t.Errorf("inv-1 is %v with external id %v, want succeeded with rec_1 (found by a probe)", one["state"], one["external_id"])
	}
	if two["state"] != "unknown" || two["needs_person_cause"] != "lookup_failed" || two["alert_status"] != "sent" {
		t.Errorf("inv-2: state %v cause %v alert %v; want unknown, lookup_failed, sent", two["state"], two["needs_person_cause"], two["alert_status"])
	}
	if s := slackSaw.all(); !strings.Contains(s, "read 1/2") || !strings.Contains(s, "probe:billing") {
		t.Errorf("the Slack alert lacks the reads:\n%s", s)
	}
	_, metrics := callText(t, p, "/metrics")
	if !strings.Contains(metrics, `companion_probe_settled_total{destination="billing",finding="found"} 1`) ||
		!strings.Contains(metrics, `companion_probe_reads_total{destination="billing",outcome="failed"} 2`) {
		t.Errorf("metrics lack the probes:\n%s", grepLines(metrics, "probe"))
	}
	p.Close()
	for where, text := range map[string]string{"logs": p.err.String() + p.out.String(), "Slack": slackSaw.all(), "metrics": metrics,
		"items": fmt.Sprint(one, two)} {
		if strings.Contains(text, secret) || strings.Contains(text, "sk_live_") {
			t.Errorf("the header's secret shows in the %s", where)
		}
	}
}

// callText returns a GET's body as text.
func callText(t *testing.T, p program, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + p.Addr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func grepLines(text, word string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestSweepOnceProbes: `companion sweep --once` makes the probes that are due, and says what they did.
func TestSweepOnceProbes(t *testing.T) {
	rc, err := sandbox.New(sandbox.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	receiver := httptest.NewServer(rc.Handler())
	defer receiver.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "companion.yaml")
	yaml := "destinations:\n  billing:\n    lookup:\n      url: " + receiver.URL + "/records?reference={reference}\n" +
		"      found: {path: records.0.id}\n      settle_after: [1s]\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"COMPANION_CONFIG": cfg, "COMPANION_DATA_DIR": filepath.Join(dir, "data")}
	svc := start(t, env, "--addr", "127.0.0.1:0")
	if !strings.Contains(svc.err.String(), "probes billing") {
		t.Errorf("the start line does not name the probed destination:\n%s", svc.err)
	}
	_, a := call(t, svc, "POST", "/v1/before-write", "", `{"key":"inv-1","payload":{"n":1},"destination":"billing","reference":"QT-1"}`)
	if a["decision"] != "proceed" {
		t.Fatalf("before-write: %v", a)
	}
	req, _ := http.NewRequest("POST", receiver.URL+"/records", strings.NewReader(`{"reference":"QT-1"}`))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("write: %v", err)
	}
	call(t, svc, "POST", "/v1/after-write", "", `{"key":"inv-1","claim":"`+a["claim"].(string)+`","outcome":"unknown","error":{"class":"timeout"}}`)
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the settle delay
	p := newProgram(env)
	if err := p.Run(context.Background(), []string{"sweep", "--once"}); err != nil {
		t.Fatal(err)
	}
	if out := p.out.String(); !strings.Contains(out, "probes of billing: 1 read(s), 1 item(s) settled") {
		t.Errorf("sweep --once printed:\n%s", out)
	}
	p = newProgram(env)
	if err := p.Run(context.Background(), []string{"sweep", "--once", "--json"}); err != nil {
		t.Fatal(err)
	}
	if out := p.out.String(); !strings.Contains(out, `"probes":{"looked":0,"reads":{},"settled":{},"lost":0}`) {
		t.Errorf("a second sweep --once --json: %s", out)
	}
}
