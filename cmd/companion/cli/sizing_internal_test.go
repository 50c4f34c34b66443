package cli

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
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
