package cli_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/cmd/companion/cli"
)

// TestStatsSinceOverTheAPI runs companion stats --since against a real service: the current day's row
// holds the traffic just sent, the total says the same, the release this service recorded at its start is
// listed, and every line fits 100 columns.
func TestStatsSinceOverTheAPI(t *testing.T) {
	svc := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": t.TempDir(), "COMPANION_SWEEP_EVERY": "@every 1h"})
	if !strings.Contains(svc.err.String(), "a new release on this ledger") {
		t.Errorf("the first start does not record its release:\n%s", svc.err)
	}
	for i := range 3 {
		key := fmt.Sprintf("inv-%d", i)
		_, a := call(t, svc, "POST", "/v1/before-write", "", `{"key":"`+key+`","payload":{"n":1},"destination":"billing"}`)
		outcome := `"outcome":"succeeded"`
		if i == 2 {
			outcome = `"outcome":"unknown","error":{"class":"timeout"}`
		}
		call(t, svc, "POST", "/v1/after-write", "", `{"key":"`+key+`","claim":"`+a["claim"].(string)+`",`+outcome+`}`)
	}
	env := map[string]string{"COMPANION_URL": "http://" + svc.Addr()}
	out, err := run(t, env, "stats", "--since", "7d", "--step", "1d")
	if err != nil {
		t.Fatalf("stats --since 7d --step 1d: %v\n%s", err, out)
	}
	today := time.Now().UTC().Format("2006-01-02")
	var row, total, releases string
	for _, l := range strings.Split(out, "\n") {
		if len(l) > 100 {
			t.Errorf("a line of %d columns:\n%s", len(l), l)
		}
		switch f := strings.Fields(l); {
		case len(f) == 6 && f[0] == today:
			row = strings.Join(f[1:], " ")
		case len(f) == 6 && f[0] == "total":
			total = strings.Join(f[1:], " ")
		case strings.HasPrefix(l, "  "+today) && strings.HasSuffix(l, " dev"):
			releases = l
		}
	}
	// 3 claims, 2 succeeded, 0 failed, 1 unknown that needs a person (dedupe none).
	if row != "3 2 0 1 1" || total != row || releases == "" || !strings.Contains(out, "all destinations, by day (UTC), ") {
		t.Errorf("today's row %q, total %q, release %q:\n%s", row, total, releases, out)
	}
	if n := strings.Count(out, "\n  "+time.Now().UTC().Add(-24*time.Hour).Format("2006-01-02")+" "); n != 2 {
		t.Errorf("yesterday is in %d tables, want both (an empty day has its row):\n%s", n, out)
	}
	out, err = run(t, env, "stats", "--since", "3h", "--destination", "billing", "--json")
	var s struct {
		Step   string           `json:"step"`
		Series []map[string]any `json:"series"`
	}
	if err != nil || json.Unmarshal([]byte(out), &s) != nil || s.Step != "1h" || len(s.Series) != 4 || s.Series[3]["destination"] != "billing" {
		t.Errorf("stats --since 3h --destination billing --json: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"--since", "2000h", "--step", "1h"}, {"--since", "7d", "--step", "1w"}, {"--since", "a week"}} {
		if _, err := run(t, env, append([]string{"stats"}, args...)...); cli.ExitCode(err) != 2 || !strings.Contains(err.Error(), "--s") {
			t.Errorf("stats %v: %v; want a mistake of the command line naming the flag", args, err)
		}
	}
}

// TestStatsSeriesTableFitsAHundredColumns prints a thousand hours whose counts are as wide as a busy
// ledger's, and resolutions a week long: no line is wider than 100 columns.
func TestStatsSeriesTableFitsAHundredColumns(t *testing.T) {
	var s struct {
		Step     string           `json:"step"`
		From     time.Time        `json:"from"`
		To       time.Time        `json:"to"`
		Series   []map[string]any `json:"series"`
		Releases []map[string]any `json:"releases"`
	}
	s.Step, s.From = "1h", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	s.To = s.From.Add(1000 * time.Hour)
	for i := range 1000 {
		p := map[string]any{"start": s.From.Add(time.Duration(i) * time.Hour), "destination": "billing-and-invoices",
			"resolution_seconds": map[string]any{"count": 99999, "sum": 604800 * 99999, "p50": 3*3600 + 300, "p90": 604800}}
		for _, f := range []string{"proceeds", "succeeded", "failed", "unknown", "needs_person", "resolved_by_person", "settled_by_lookup",
			"same_key_recoveries", "conflicts", "duplicate_effects"} {
			p[f] = 999999
		}
		s.Series = append(s.Series, p)
	}
	s.Releases = []map[string]any{{"version": "v0.0.0-20261207101500-0123456789ab+dirty", "at": s.From.Add(5 * time.Hour)}}
	b, _ := json.Marshal(s)
	var out bytes.Buffer
	if err := cli.WriteSeries(&out, b, "billing-and-invoices"); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(out.String(), "\n") {
		if len(l) > 100 {
			t.Errorf("a line of %d columns:\n%s", len(l), l)
		}
	}
	if os.Getenv("COMPANION_SHOW_TABLE") != "" {
		_ = os.WriteFile(filepath.Join(t.TempDir(), "table.txt"), out.Bytes(), 0o644)
		t.Log("\n" + strings.Join(strings.Split(out.String(), "\n")[:8], "\n"))
	}
}

// The series section of the configuration file reaches the ledger's configuration, which retention reads;
// without it the defaults hold: 35 days of hours, 2 years of days.
func TestSeriesKeepingFromTheConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "companion.yaml")
	if err := os.WriteFile(path, []byte("series:\n  hours_kept: 2160h\n  days_kept: 43800h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := cli.LedgerConfig(path, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if h, d := cfg.SeriesKept(); h != 90*24*time.Hour || d != 5*365*24*time.Hour {
		t.Errorf("kept %s of hours and %s of days; want 90 days and 5 years", h, d)
	}
	if err := os.WriteFile(path, []byte("defaults:\n  dedupe: key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, err = cli.LedgerConfig(path, os.Getenv); err != nil {
		t.Fatal(err)
	}
	if h, d := cfg.SeriesKept(); h != 35*24*time.Hour || d != 730*24*time.Hour {
		t.Errorf("by default %s of hours and %s of days; want 35 days and 2 years", h, d)
	}
}
