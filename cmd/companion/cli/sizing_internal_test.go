package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/items/sqlitestore"
)

// TestBenchBodiesAreTheJSONOfTheirValues holds the bodies the bench writes with append to what
// json.Marshal writes of the same values: the keys, the strings the service answered (escaped where JSON
// needs it), a before-write and an after-write.
func TestBenchBodiesAreTheJSONOfTheirValues(t *testing.T) {
	r := &benchRun{o: benchOptions{prefix: "bench-20261201T081420"}}
	for _, i := range []int{0, 7, 10, 999, 123456, 1000000, 9999999, 12345678} {
		if got, want := string(r.appendKey(nil, i)), fmt.Sprintf("%s:i%07d:write:0", r.o.prefix, i); got != want {
			t.Errorf("appendKey(%d) = %s; want %s", i, got, want)
		}
	}
	for _, s := range []string{"", "c_0123abcd", `a"b\c`, "<&>", "é\u2028\x01\x7f", "tab\there"} {
		want, _ := json.Marshal(s)
		if got := appendJSONString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Errorf("appendJSONString(%q) = %s; want x%s", s, got, want)
		}
	}
	var item, report map[string]any
	if err := json.Unmarshal(r.appendItem(nil, 42, 40), &item); err != nil {
		t.Fatal(err)
	}
	wantItem := map[string]any{"key": r.o.prefix + ":i0000042:write:0", "payload": map[string]any{"bench": r.o.prefix, "n": 42.0}, "execution_id": r.o.prefix + "-e40", "lease_seconds": 300.0}
	if !reflect.DeepEqual(item, wantItem) {
		t.Errorf("before-write body %v; want %v", item, wantItem)
	}
	if err := json.Unmarshal(appendReport(nil, benchAnswer{Key: "k\"1", Claim: "c<1>"}), &report); err != nil {
		t.Fatal(err)
	}
	wantReport := map[string]any{"key": "k\"1", "claim": "c<1>", "outcome": "succeeded", "external_id": "bench-k\"1"}
	if !reflect.DeepEqual(report, wantReport) {
		t.Errorf("after-write body %v; want %v", report, wantReport)
	}
}

// TestBenchSummaryComparesTheFloorsHalves: the floor runs half before the run and half after it; the
// summary gives the ratio to both together, each half's rate, and, when the halves differ by more than
// 1.5×, the range of the ratio. Halves within 1.5× print no range.
func TestBenchSummaryComparesTheFloorsHalves(t *testing.T) {
	half := func(items int, took time.Duration) sqlitestore.FloorResult {
		return sqlitestore.FloorResult{Items: items, Took: took, Commits: make([]time.Duration, 2*items)}
	}
	for _, tt := range []struct {
		name   string
		halves []sqlitestore.FloorResult
		want   []string
		absent string
	}{
		{"steady", []sqlitestore.FloorResult{half(1000, time.Second), half(1000, 800*time.Millisecond)},
			[]string{"4000 items/s is 3.60× the floor (1111 items/s; 1000 before the run, 1250 after it)."}, "uncertain"},
		{"moved", []sqlitestore.FloorResult{half(1000, time.Second), half(1000, 400*time.Millisecond)},
			[]string{"4000 items/s is 2.80× the floor (1429 items/s; 1000 before the run, 2500 after it).",
				"The floor moved 2.5× between before and after the run", "this ratio is uncertain (1.60× to 4.00×); run again, or compare several runs.\n"}, "runs)."},
		{"floor alone", []sqlitestore.FloorResult{half(1000, time.Second)}, []string{"floor (2 fsync'd SQLite commits/item)"}, "×"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			m := &Main{Stdout: &out}
			var run *benchRun
			if tt.name != "floor alone" {
				run = &benchRun{took: time.Second, calls: map[string][]time.Duration{}, cpuErr: errors.New("no token")}
				run.done.Store(4000)
			}
			m.benchSummary(benchOptions{mode: "single", callers: 32}, run, tt.halves)
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("no %q in\n%s", w, out.String())
				}
			}
			if tt.absent != "" && strings.Contains(out.String(), tt.absent) {
				t.Errorf("%q in\n%s", tt.absent, out.String())
			}
		})
	}
}

// TestBenchReadsTheSQLiteWriterAndNamesTheLimit: the bench reads the writer's counters from GET /metrics
// when the service has them (SQLite), not otherwise (MongoDB), and says which part of the writer's time
// limits the writes when it was busy nearly all the run.
func TestBenchReadsTheSQLiteWriterAndNamesTheLimit(t *testing.T) {
	sqlite := "# HELP process_cpu_seconds_total x\nprocess_cpu_seconds_total 12.5\n" +
		"companion_sqlite_writer_busy_seconds_total 9.5\ncompanion_sqlite_writer_commit_seconds_total 2\n" +
		"companion_sqlite_commits_total 100\ncompanion_sqlite_transitions_total 950\n"
	got, err := readServiceTotals(strings.NewReader(sqlite))
	if err != nil || got.cpu != 12.5 || got.writer == nil || *got.writer != (serviceWriter{busy: 9.5, committing: 2, commits: 100, transitions: 950}) {
		t.Errorf("SQLite's /metrics: %+v %+v, %v", got, got.writer, err)
	}
	if got, err := readServiceTotals(strings.NewReader("process_cpu_seconds_total 3\ncompanion_decisions_total 7\n")); err != nil || got.cpu != 3 || got.writer != nil {
		t.Errorf("MongoDB's /metrics: %+v, %v; want the CPU and no writer", got, err)
	}
	withCache := sqlite + "companion_sqlite_item_cache_bound_items 2048\ncompanion_sqlite_item_cache_hits_total 40\ncompanion_sqlite_item_cache_misses_total 60\n"
	got, err = readServiceTotals(strings.NewReader(withCache))
	if err != nil || got.writer == nil || *got.writer != (serviceWriter{busy: 9.5, committing: 2, commits: 100, transitions: 950,
		cache: true, cacheBound: 2048, cacheHits: 40, cacheMiss: 60}) {
		t.Errorf("SQLite's /metrics with the item cache: %+v %+v, %v", got, got.writer, err)
	}
	if _, err := readServiceTotals(strings.NewReader("companion_sqlite_commits_total 1\n")); err == nil {
		t.Error("a /metrics without process_cpu_seconds_total: no error")
	}
	if _, err := readServiceTotals(strings.NewReader("process_cpu_seconds_total 1\ncompanion_sqlite_commits_total many\n")); err == nil {
		t.Error("a counter that is not a number: no error")
	}

	for _, c := range []struct {
		name string
		w    serviceWriter
		want string // the verdict's first words; "" for none
	}{
		{"deciding", serviceWriter{busy: 9.5, committing: 2, commits: 100, transitions: 950}, "mostly deciding and writing: its one core"},
		{"committing", serviceWriter{busy: 9.5, committing: 6, commits: 100, transitions: 950}, "mostly committing: the disk's fsync"},
		{"idle", serviceWriter{busy: 5, committing: 1, commits: 100, transitions: 100}, ""},
	} {
		var out bytes.Buffer
		(&Main{Stdout: &out}).benchWriter(&c.w, 10*time.Second)
		text := strings.Join(strings.Fields(out.String()), " ")
		if !strings.Contains(text, fmt.Sprintf("busy %.0f%% of the run", c.w.busy*10)) ||
			!strings.Contains(text, fmt.Sprintf("%.1f transitions per commit", c.w.transitions/c.w.commits)) {
			t.Errorf("%s: %q", c.name, text)
		}
		if got := strings.Contains(text, "busy nearly all the time"); got != (c.want != "") || c.want != "" && !strings.Contains(text, c.want) {
			t.Errorf("%s: %q; want the verdict %q", c.name, text, c.want)
		}
		if strings.Contains(text, "item cache") {
			t.Errorf("%s: a service without the item cache's counters: %q", c.name, text)
		}
	}

	// The item cache's share of the lookups, or that it is off.
	for _, c := range []struct {
		w    serviceWriter
		want string
	}{
		{serviceWriter{busy: 5, commits: 100, transitions: 100, cache: true, cacheBound: 2048, cacheHits: 40, cacheMiss: 60},
			"Its item cache (--item-cache 2048) answered 40% of 100 item lookups"},
		{serviceWriter{busy: 5, commits: 100, transitions: 100, cache: true, cacheMiss: 100},
			"Its item cache is off (--item-cache 0, or a platform without the data dir's lock): all 100 item lookups read the database."},
	} {
		var out bytes.Buffer
		(&Main{Stdout: &out}).benchWriter(&c.w, 10*time.Second)
		if text := strings.Join(strings.Fields(out.String()), " "); !strings.Contains(text, c.want) {
			t.Errorf("%q; want %q", text, c.want)
		}
	}
}
