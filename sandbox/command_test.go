package sandbox_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/sandbox"
)

// runCommand starts `companion receiver args...` and returns its base URL
// (from the start line), its stderr, and a stop function returning
// Command's result.
func runCommand(t *testing.T, args ...string) (url string, stderr *syncBuffer, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdoutR, stdoutW := io.Pipe()
	stderr = &syncBuffer{}
	result := make(chan error, 1)
	go func() {
		result <- sandbox.Command(ctx, args, stdoutW, stderr)
		stdoutW.Close()
	}()
	lines := bufio.NewScanner(stdoutR)
	if !lines.Scan() {
		cancel()
		t.Fatalf("no start line; stderr: %s; err: %v", stderr.String(), <-result)
	}
	startLine := lines.Text()
	go io.Copy(io.Discard, stdoutR)
	for _, field := range strings.Fields(startLine) {
		if strings.HasPrefix(field, "http://") {
			url = field
		}
	}
	if url == "" {
		cancel()
		t.Fatalf("start line %q names no address", startLine)
	}
	stopped := false
	var err error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case err = <-result:
			case <-time.After(10 * time.Second):
				t.Fatal("Command did not return after its context was cancelled")
			}
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return url, stderr, stop
}

func postRecord(t *testing.T, url, body, idempotencyKey string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/records", strings.NewReader(body))
	req.Header.Set("Idempotency-Key", idempotencyKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func getEffects(t *testing.T, url string) sandbox.Effects {
	t.Helper()
	resp, err := http.Get(url + "/effects")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e sandbox.Effects
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestCommandServesUntilCancelled(t *testing.T) {
	t.Parallel()
	url, stderr, stop := runCommand(t, "--addr", "127.0.0.1:0", "--dedupe", "none", "--key-retention", "90")
	postRecord(t, url, `{"reference":"R1"}`, "K")
	postRecord(t, url, `{"reference":"R1"}`, "K")
	if e := getEffects(t, url); e.Total != 2 {
		t.Errorf("--dedupe none: total %d, want 2", e.Total)
	}
	resp, err := http.Get(url + "/control/mode")
	if err != nil {
		t.Fatal(err)
	}
	var mode struct {
		Dedupe              string `json:"dedupe"`
		KeyRetentionSeconds int    `json:"key_retention_seconds"`
	}
	json.NewDecoder(resp.Body).Decode(&mode)
	resp.Body.Close()
	if mode.Dedupe != "none" || mode.KeyRetentionSeconds != 90 {
		t.Errorf("mode %+v, want none and 90 from the flags", mode)
	}
	if err := stop(); err != nil {
		t.Errorf("Command returned %v after a graceful stop", err)
	}
	if n := strings.Count(stderr.String(), "msg=request"); n != 4 {
		t.Errorf("%d request log lines on stderr, want 4:\n%s", n, stderr.String())
	}
	if _, err := http.Get(url + "/healthz"); err == nil {
		t.Error("still serving after Command returned")
	}
}

func TestCommandDataDirSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url, _, stop := runCommand(t, "--addr", "127.0.0.1:0", "--data-dir", dir)
	postRecord(t, url, `{"reference":"R1","amount":1}`, "K")
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	url, _, _ = runCommand(t, "--addr", "127.0.0.1:0", "--data-dir", dir)
	if e := getEffects(t, url); e.Total != 1 || e.ByIdempotencyKey["K"] != 1 {
		t.Fatalf("after restart: %+v, want the record kept", e)
	}
	if resp := postRecord(t, url, `{"amount":1,"reference":"R1"}`, "K"); resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the key was forgotten across the restart: %d", resp.StatusCode)
	}
	if resp := postRecord(t, url, `{"reference":"R1","amount":2}`, "K"); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("changed body after restart: %d, want 422", resp.StatusCode)
	}
	resp, err := http.Get(url + "/records?reference=R1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Records []sandbox.Record `json:"records"`
	}
	json.NewDecoder(resp.Body).Decode(&body)
	if len(body.Records) != 1 || body.Records[0].ID != "rec_1" {
		t.Errorf("records after restart %+v", body.Records)
	}
	postRecord(t, url, `{"reference":"R2"}`, "K2")
	if e := getEffects(t, url); e.Total != 2 {
		t.Errorf("total %d after a new record", e.Total)
	}
}

func TestCommandHelpAndBadFlags(t *testing.T) {
	t.Parallel()
	var stdout, stderr strings.Builder
	if err := sandbox.Command(context.Background(), []string{"--help"}, &stdout, &stderr); err != nil {
		t.Errorf("--help returned %v", err)
	}
	for _, flag := range []string{"--addr", "--dedupe", "--key-retention", "--data-dir"} {
		if !strings.Contains(stdout.String(), flag) {
			t.Errorf("usage lacks %s:\n%s", flag, stdout.String())
		}
	}

	for _, args := range [][]string{
		{"--dedupe", "lookup"},
		{"--key-retention", "-5"},
		{"--key-retention", "soon"},
		{"--no-such-flag"},
		{"extra"},
		{"--addr", "127.0.0.1:notaport"},
	} {
		var out, errOut strings.Builder
		if err := sandbox.Command(context.Background(), args, &out, &errOut); err == nil {
			t.Errorf("%v: Command succeeded", args)
		}
		if out.Len() != 0 {
			t.Errorf("%v: printed a start line %q", args, out.String())
		}
	}
}
