package cli_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestServeStopLetsAnAlertBeingPostedLand: serve is stopped while Slack takes its time to answer the post
// of an alert. The stop lets the post land and records it before the ledger closes: the restarted serve
// finds the alert sent, and nothing is posted again.
func TestServeStopLetsAnAlertBeingPostedLand(t *testing.T) {
	var mu sync.Mutex
	posts := 0
	posting := make(chan struct{})
	var once sync.Once
	slack := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if !strings.HasSuffix(r.URL.Path, "chat.postMessage") {
			_, _ = io.WriteString(w, `{"ok":true,"channel":"D0OPS","ts":"1.1"}`)
			return
		}
		once.Do(func() { close(posting) })
		time.Sleep(700 * time.Millisecond) // Slack is slow; the post lands whether the caller waits or not
		mu.Lock()
		posts++
		mu.Unlock()
		_, _ = io.WriteString(w, `{"ok":true,"channel":"D0OPS","ts":"1.1"}`)
	}))
	t.Cleanup(slack.Close)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(cfg, []byte("alerts:\n  default_owner: U0OPS\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": filepath.Join(dir, "d"), "COMPANION_CONFIG": cfg,
		"COMPANION_SWEEP_EVERY": "@every 1s", "SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s", "SLACK_API_URL": slack.URL + "/api/"}
	svc := start(t, env)
	_, a := call(t, svc, "POST", "/v1/before-write", "", `{"key":"inv-1","payload":{"n":1},"dedupe":"none"}`)
	call(t, svc, "POST", "/v1/after-write", "", `{"key":"inv-1","claim":"`+a["claim"].(string)+`","outcome":"unknown"}`)
	select {
	case <-posting:
	case <-time.After(15 * time.Second):
		t.Fatalf("serve's sweeps posted no alert in 15 s:\n%s", svc.err)
	}
	if err := svc.Close(); err != nil { // while Slack has not answered
		t.Fatalf("stop: %v\n%s", err, svc.err)
	}
	mu.Lock()
	landed := posts
	mu.Unlock()
	if landed != 1 {
		t.Fatalf("%d posts landed by the end of the stop, want 1:\n%s", landed, svc.err)
	}

	env["COMPANION_SWEEP_EVERY"] = "@every 1h"
	again := start(t, env)
	if status, it := call(t, again, "GET", "/v1/items/inv-1", "", ""); status != 200 || it["alert_status"] != "sent" {
		t.Fatalf("after the restart inv-1 is %d %v; want its alert recorded as sent by the stopped serve\n%s", status, it, svc.err)
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if posts != 1 {
		t.Fatalf("%d posts in all, want 1", posts)
	}
}
