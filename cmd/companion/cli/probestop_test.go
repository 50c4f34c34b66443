package cli_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestServeStopLetsALookupInProgressFinish: serve is stopped while the destination takes its time to
// answer a probe's lookup. The stop lets the lookup finish and records its finding before the ledger
// closes: the restarted serve finds the item settled, and the destination is not read again.
func TestServeStopLetsALookupInProgressFinish(t *testing.T) {
	var reads atomic.Int64
	reading := make(chan struct{})
	var once sync.Once
	lookup := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		reads.Add(1)
		once.Do(func() { close(reading) })
		time.Sleep(700 * time.Millisecond) // the destination is slow; the answer comes whether the caller waits or not
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"records":[{"id":"rec_77"}]}`)
	}))
	t.Cleanup(lookup.Close)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	yaml := "destinations:\n  billing:\n    lookup:\n      url: " + lookup.URL + "/records?reference={reference}\n" +
		"      found: {path: records.0.id}\n      settle_after: [1s]\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": filepath.Join(dir, "d"), "COMPANION_CONFIG": cfg,
		"COMPANION_SWEEP_EVERY": "@every 1s"}
	svc := start(t, env)
	_, a := call(t, svc, "POST", "/v1/before-write", "", `{"key":"inv-1","payload":{"n":1},"destination":"billing","reference":"QT-1"}`)
	call(t, svc, "POST", "/v1/after-write", "", `{"key":"inv-1","claim":"`+a["claim"].(string)+`","outcome":"unknown","error":{"class":"timeout"}}`)
	select {
	case <-reading:
	case <-time.After(15 * time.Second):
		t.Fatalf("serve's probes read nothing in 15 s:\n%s", svc.err)
	}
	if err := svc.Close(); err != nil { // while the destination has not answered
		t.Fatalf("stop: %v\n%s", err, svc.err)
	}

	env["COMPANION_SWEEP_EVERY"] = "@every 1h"
	again := start(t, env)
	status, it := call(t, again, "GET", "/v1/items/inv-1", "", "")
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
	if status != 200 || it["state"] != "succeeded" || it["external_id"] != "rec_77" {
		t.Fatalf("after the restart inv-1 is %d %v; want it settled by the stopped serve's lookup\n%s", status, it, svc.err)
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("%d lookups in all, want 1", n)
	}
}
