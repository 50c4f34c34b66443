package cli_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/replaysafe/companion/cmd/companion/cli"
	"github.com/replaysafe/companion/items/mongostore/mongotest"
)

// metric reads one unlabelled sample from GET /metrics (open mode: no token needed).
func metric(t *testing.T, p program, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, b)
	}
	if !strings.Contains(string(b), "# HELP "+name+" ") {
		t.Errorf("GET /metrics has no HELP for %s", name)
	}
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("GET /metrics has no %s:\n%s", name, b)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestItemCacheSettingAndMetrics runs serve with the item cache at its default, off, and at a bound given
// by flag over the environment: a before-write then an after-write of one key is a miss then a hit with
// the cache, two misses without it; GET /metrics and the start line show the bound.
func TestItemCacheSettingAndMetrics(t *testing.T) {
	for _, tc := range []struct {
		name         string
		env          map[string]string
		args         []string
		bound        float64
		hits, misses float64
		startLine    string
	}{
		{"default", nil, nil, 2048, 1, 1, "(item cache 2048 items)"},
		{"off", map[string]string{"COMPANION_ITEM_CACHE": "0"}, nil, 0, 0, 2, "(item cache off)"},
		{"flag over env", map[string]string{"COMPANION_ITEM_CACHE": "0"}, []string{"--item-cache", "16"}, 16, 1, 1, "(item cache 16 items)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": t.TempDir(), "COMPANION_SWEEP_EVERY": "@every 1h"}
			for k, v := range tc.env {
				env[k] = v
			}
			p := start(t, env, tc.args...)
			if !strings.Contains(p.err.String(), tc.startLine) {
				t.Errorf("the start line does not say %q:\n%s", tc.startLine, p.err)
			}
			if got := metric(t, p, "companion_sqlite_item_cache_bound_items"); got != tc.bound {
				t.Errorf("bound %v, want %v", got, tc.bound)
			}
			status, a := call(t, p, "POST", "/v1/before-write", "", `{"key":"k1","payload":{"a":1}}`)
			if status != 200 || a["decision"] != "proceed" {
				t.Fatalf("before-write: %d %v", status, a)
			}
			if status, r := call(t, p, "POST", "/v1/after-write", "", `{"key":"k1","claim":"`+a["claim"].(string)+`","outcome":"succeeded"}`); status != 200 || r["state"] != "succeeded" {
				t.Fatalf("after-write: %d %v", status, r)
			}
			hits, misses := metric(t, p, "companion_sqlite_item_cache_hits_total"), metric(t, p, "companion_sqlite_item_cache_misses_total")
			if hits != tc.hits || misses != tc.misses {
				t.Errorf("after a before-write and an after-write: %v hits, %v misses; want %v, %v", hits, misses, tc.hits, tc.misses)
			}
			if got, want := metric(t, p, "companion_sqlite_item_cache_items"), min(tc.bound, 1); got != want {
				t.Errorf("items cached %v, want %v", got, want)
			}
		})
	}
}

// TestItemCacheSettingMistakesStopTheStart gives --item-cache (and its environment twin) values that are
// not a bound: the start stops with what to give instead, before the data dir is made.
func TestItemCacheSettingMistakesStopTheStart(t *testing.T) {
	for _, tc := range []struct {
		env  string
		args []string
		want string
	}{
		{"many", nil, `--item-cache (COMPANION_ITEM_CACHE) "many": give a whole number of items, e.g. 2048 (the default), or 0 to turn the cache off`},
		{"", []string{"--item-cache", "-1"}, `--item-cache (COMPANION_ITEM_CACHE) -1: it cannot be negative`},
		{"1.5", nil, `"1.5": give a whole number of items`},
		{"", []string{"--item-cache", "5000000"}, `--item-cache (COMPANION_ITEM_CACHE) 5000000: at most 1000000`},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		p := newProgram(map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": dir, "COMPANION_ITEM_CACHE": tc.env})
		err := p.Run(context.Background(), append([]string{"serve"}, tc.args...))
		p.Close()
		if err == nil || !strings.Contains(err.Error(), tc.want) || cli.ExitCode(err) != 2 {
			t.Errorf("COMPANION_ITEM_CACHE=%q %v: %v (exit %d); want %q", tc.env, tc.args, err, cli.ExitCode(err), tc.want)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("COMPANION_ITEM_CACHE=%q %v: the data dir was made", tc.env, tc.args)
		}
	}
}

// TestItemCacheSettingOnMongoDBIsIgnoredAndSaid: on MongoDB there is no item cache; a bound given says
// in the log that it is ignored, and GET /metrics has no SQLite measures.
func TestItemCacheSettingOnMongoDBIsIgnoredAndSaid(t *testing.T) {
	srv := mongotest.Start(t)
	for _, given := range []bool{false, true} {
		env := map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "MONGODB_URI": srv.URI(), "MONGODB_DATABASE": "companion_item_cache_test"}
		if given {
			env["COMPANION_ITEM_CACHE"] = "16"
		}
		p := start(t, env)
		if said := strings.Contains(p.err.String(), "--item-cache (COMPANION_ITEM_CACHE) is ignored"); said != given {
			t.Errorf("COMPANION_ITEM_CACHE given %v: the log says it is ignored: %v\n%s", given, said, p.err)
		}
		if strings.Contains(p.err.String(), "item cache off") {
			t.Errorf("the start line speaks of an item cache on MongoDB:\n%s", p.err)
		}
		resp, err := http.Get("http://" + p.Addr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.Contains(string(b), "companion_sqlite_item_cache") {
			t.Errorf("GET /metrics on MongoDB: %d, with the SQLite cache's measures: %v", resp.StatusCode, strings.Contains(string(b), "companion_sqlite_item_cache"))
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMetricsFollowPrometheusNaming lints serve's whole GET /metrics on SQLite (the writer's and the item
// cache's measures included) with Prometheus' own linter: _total only on counters and on every counter,
// base units, HELP on every metric, no reserved suffix.
func TestMetricsFollowPrometheusNaming(t *testing.T) {
	p := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": t.TempDir(), "COMPANION_SWEEP_EVERY": "@every 1h"})
	resp, err := http.Get("http://" + p.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	problems, err := promlint.New(resp.Body).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range problems {
		t.Errorf("GET /metrics: %s: %s", pr.Metric, pr.Text)
	}
	if got := metric(t, p, "companion_sqlite_item_cache_bound_items"); got != 2048 {
		t.Errorf("the linted page has no item cache bound of 2048: %v", got)
	}
}
