package cli_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The monitoring files for Prometheus users: the alert rules (deploy/prometheus/alerts.yml, with their
// unit tests alerts_test.yml and alerts_week_test.yml) and the Grafana dashboard (deploy/grafana/companion.json).
var (
	rulesFile      = filepath.Join("..", "..", "..", "deploy", "prometheus", "alerts.yml")
	rulesTestFiles = []string{"alerts_test.yml", "alerts_week_test.yml"} // beside rulesFile
	dashboardFile  = filepath.Join("..", "..", "..", "deploy", "grafana", "companion.json")
)

// TestPrometheusRulesPassPromtool runs Prometheus's own checker on the alert rules (promtool check rules)
// and their unit tests (promtool test rules: each rule fires on the series that should fire it, and not on
// the others). promtool comes with Debian's prometheus package (scripts/install-promtool.sh, which .ci/run
// calls); without it the test skips, except in CI (CI=true), where it fails.
func TestPrometheusRulesPassPromtool(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool is not installed (run scripts/install-promtool.sh): %v", err)
		}
		t.Skip("promtool is not installed: run scripts/install-promtool.sh (in CI, CI=true, this test fails instead)")
	}
	for _, args := range [][]string{{"check", "rules", filepath.Base(rulesFile)}, append([]string{"test", "rules"}, rulesTestFiles...)} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = filepath.Dir(rulesFile)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestMonitoringNamesOnlyServedMetrics reads every metric name in the alert rules and in the dashboard's
// queries and finds each in the answer of GET /metrics of a real companion serve (SQLite, a destination
// with a lookup, items, its sweeper and dispatcher run): a rule or a panel over a name the service does
// not serve would never fire, or stay empty, without anyone noticing. The one name allowed besides is
// Prometheus's own up.
func TestMonitoringNamesOnlyServedMetrics(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	config := filepath.Join(dir, "companion.yaml")
	if err := os.WriteFile(config, []byte("destinations:\n  crm:\n    escalate_after: 1h\n    lookup:\n"+
		"      url: http://127.0.0.1:9/deals?reference={reference}\n      found: {path: id}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const ops = "op-secret-0123456789"
	p := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": filepath.Join(dir, "data"),
		"COMPANION_CONFIG": config, "COMPANION_TOKENS": "ops:default:operator:" + ops + ",n8n:default:workflow:wf-secret-0123456789"})
	for _, key := range []string{"inv-1", "inv-2"} {
		if status, body := call(t, p, "POST", "/v1/before-write", "wf-secret-0123456789",
			`{"key":"`+key+`","destination":"crm","reference":"QT-`+key+`","payload":{"n":1}}`); status != 200 {
			t.Fatalf("before-write %s: %d %v", key, status, body)
		}
	}
	// The sweeper and the dispatcher run once at the start; their timestamps are set when each run ends.
	for _, name := range []string{"companion_sweep_last_success_timestamp_seconds", "companion_alert_dispatch_last_success_timestamp_seconds"} {
		deadline := time.Now().Add(30 * time.Second)
		for metricValue(t, p.Addr(), ops, name) <= 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if v := metricValue(t, p.Addr(), ops, name); v < float64(time.Now().Add(-time.Minute).Unix()) {
			t.Errorf("%s is %v after the start, want the time of the run at the start", name, v)
		}
	}
	served := servedMetrics(t, p.Addr(), ops)
	if v := metricValue(t, p.Addr(), ops, "companion_store_ready"); v != 1 {
		t.Errorf("companion_store_ready is %v", v)
	}

	names := map[string][]string{} // metric name → where it is used
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	// use records where the metric names of an expression are used.
	use := func(where, expr string) {
		for _, n := range promqlMetricNames(expr) {
			names[n] = append(names[n], where)
		}
	}
	nRules := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			nRules++
			use("rule "+r.Alert, r.Expr)
		}
	}
	var dashboard struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	b, err = os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dashboard); err != nil {
		t.Fatalf("%s is not JSON: %v", dashboardFile, err)
	}
	nQueries := 0
	for _, panel := range dashboard.Panels {
		for _, target := range panel.Targets {
			nQueries++
			use("panel "+panel.Title, target.Expr)
		}
	}
	if nRules < 7 || nQueries < 20 {
		t.Fatalf("read %d rules and %d dashboard queries: the files were not read as they are written", nRules, nQueries)
	}
	for name, where := range names {
		if !served[name] && name != "up" {
			t.Errorf("%s is not served by GET /metrics, yet %s use(s) it", name, strings.Join(slices.Compact(where), ", "))
		}
	}
	t.Logf("%d metric names in %d rules and %d dashboard queries", len(names), nRules, nQueries)
}

// servedMetrics returns the names of the samples GET /metrics answers (a histogram's _bucket, _sum and
// _count each).
func servedMetrics(t *testing.T, addr, token string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for line := range strings.SplitSeq(scrape(t, addr, token), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		names[line[:strings.IndexAny(line, "{ ")]] = true
	}
	return names
}

// metricValue returns the value of the first sample named name (-1 when there is none).
func metricValue(t *testing.T, addr, token, name string) float64 {
	t.Helper()
	for line := range strings.SplitSeq(scrape(t, addr, token), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err == nil {
				return v
			}
		}
	}
	return -1
}

func scrape(t *testing.T, addr, token string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d\n%s", resp.StatusCode, b)
	}
	return string(b)
}

// promqlMetricNames returns the metric names a PromQL expression reads: its identifiers, less functions
// (an identifier before "("), keywords and the label lists of by, without, on, ignoring, group_left and
// group_right, label matchers ({…}), ranges ([…]), strings and Grafana's variables ($…).
func promqlMetricNames(expr string) []string {
	keywords := map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true, "without": true,
		"on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true,
		// Aggregations, which may be followed by by (…) or without (…) before their "(".
		"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true, "count": true,
		"count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true}
	labelLists := map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
	isStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isPart := func(c byte) bool { return isStart(c) || c >= '0' && c <= '9' }
	// skip returns the index after the group that opens at i and closes with end (strings inside it skipped).
	skip := func(i int, end byte) int {
		for i++; i < len(expr) && expr[i] != end; i++ {
			if expr[i] == '"' {
				for i++; i < len(expr) && expr[i] != '"'; i++ {
					if expr[i] == '\\' {
						i++
					}
				}
			}
		}
		return i + 1
	}
	var names []string
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '{':
			i = skip(i, '}')
		case c == '[':
			i = skip(i, ']')
		case c == '"':
			i = skip(i, '"')
		case c == '$':
			for i++; i < len(expr) && (isPart(expr[i]) || expr[i] == '{' || expr[i] == '}'); i++ {
			}
		case c >= '0' && c <= '9' || c == '.':
			for i++; i < len(expr) && (isPart(expr[i]) || expr[i] == '.'); i++ { // numbers, 1e-9, durations
			}
		case isStart(c):
			j := i
			for j < len(expr) && isPart(expr[j]) {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && (expr[k] == ' ' || expr[k] == '\n' || expr[k] == '\t') {
				k++
			}
			switch {
			case labelLists[word] && k < len(expr) && expr[k] == '(':
				j = skip(k, ')')
			case keywords[word] || k < len(expr) && expr[k] == '(':
			default:
				if !slices.Contains(names, word) {
					names = append(names, word)
				}
			}
			i = j
		default:
			i++
		}
	}
	return names
}

// The reader of metric names finds the metrics of an expression and nothing else.
func TestPromqlMetricNames(t *testing.T) {
	t.Parallel()
	got := promqlMetricNames(`max by (tenant, destination) (rate(a_total{x="y}",z=~"b"}[1h] offset 1d)) > on (destination) group_left ` +
		`max by (destination) (b_seconds > 0) and sum without (instance) (c) / clamp_min(d, 1e-9) unless ` +
		`histogram_quantile(0.95, sum by (le) (rate(e_bucket[$__rate_interval]))) or time() - f{job="companion"} > bool 3`)
	if want := []string{"a_total", "b_seconds", "c", "d", "e_bucket", "f"}; !slices.Equal(got, want) {
		t.Errorf("metric names %q, want %q", got, want)
	}
}
