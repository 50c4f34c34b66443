package blueprints

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The template using the community node is hand-written (HandWritten); this checks its graph the
// way the generated ones are checked: names unique and every connection between existing nodes,
// the four Before write outputs wired, the write's two outputs into After write, Continue (using
// error output) on the write and no Retry On Fail there, the idempotency key forwarded, and the
// After write expressions pointing at the Before write node.
func TestCommunityNodeTemplate(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(HandWritten[0])))
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Nodes []struct {
			Name        string          `json:"name"`
			Type        string          `json:"type"`
			Parameters  json.RawMessage `json:"parameters"`
			OnError     string          `json:"onError"`
			RetryOnFail bool            `json:"retryOnFail"`
			Credentials map[string]any  `json:"credentials"`
		} `json:"nodes"`
		Connections map[string]struct {
			Main [][]struct {
				Node string `json:"node"`
			} `json:"main"`
		} `json:"connections"`
		Settings map[string]any `json:"settings"`
	}
	if err := json.Unmarshal(raw, &wf); err != nil {
		t.Fatal(err)
	}
	types := map[string]string{}
	params := map[string]map[string]any{}
	for _, n := range wf.Nodes {
		if _, dup := types[n.Name]; dup {
			t.Errorf("node %q twice", n.Name)
		}
		types[n.Name] = n.Type
		var p map[string]any
		if err := json.Unmarshal(n.Parameters, &p); err != nil {
			t.Errorf("%s: parameters: %v", n.Name, err)
		}
		params[n.Name] = p
		if n.Type == "n8n-nodes-companion.companion" && n.Credentials["companionApi"] == nil {
			t.Errorf("%s: no companionApi credential", n.Name)
		}
		if n.Name == NodeWrite {
			if n.OnError != "continueErrorOutput" || n.RetryOnFail {
				t.Errorf("the write must have On Error = Continue (using error output) and no Retry On Fail, got %q %v", n.OnError, n.RetryOnFail)
			}
		}
	}
	for from, c := range wf.Connections {
		if _, ok := types[from]; !ok {
			t.Errorf("connection from unknown node %q", from)
		}
		for _, out := range c.Main {
			for _, to := range out {
				if _, ok := types[to.Node]; !ok {
					t.Errorf("connection %q → unknown node %q", from, to.Node)
				}
			}
		}
	}
	if wf.Settings["executionOrder"] != "v1" {
		t.Errorf("executionOrder %v, want v1", wf.Settings["executionOrder"])
	}

	if types["Before write"] != "n8n-nodes-companion.companion" || params["Before write"]["operation"] != "beforeWrite" {
		t.Fatalf("no Before write node of the community node: %v", types["Before write"])
	}
	outs := wf.Connections["Before write"].Main
	if len(outs) != 4 || outs[0][0].Node != NodeWrite {
		t.Fatalf("Before write must wire Proceed, Already done, Wait, Needs attention with Proceed into the write: %+v", outs)
	}
	for i, o := range outs {
		if len(o) == 0 {
			t.Errorf("Before write output %d is not connected", i)
		}
	}
	w := wf.Connections[NodeWrite].Main
	if len(w) != 2 || len(w[0]) != 1 || len(w[1]) != 1 || w[0][0].Node != "After write" || w[1][0].Node != "After write" {
		t.Errorf("both outputs of the write must go to After write: %+v", w)
	}
	if params["After write"]["operation"] != "afterWrite" {
		t.Errorf("After write operation %v", params["After write"]["operation"])
	}
	for _, f := range []string{"key", "claim"} {
		if v, _ := params["After write"][f].(string); !strings.Contains(v, "$('Before write').item.json.companion."+f) {
			t.Errorf("After write %s = %q, want it read from the Before write node", f, v)
		}
	}
	hdr, _ := json.Marshal(params[NodeWrite]["headerParameters"])
	if !strings.Contains(string(hdr), `"name":"Idempotency-Key","value":"={{ $json.companion.idempotency_key }}"`) {
		t.Errorf("the write does not forward the idempotency key: %s", hdr)
	}
	if params[NodeWrite]["url"] != DefaultSettings().WriteURL {
		t.Errorf("write url %v, want the default %s", params[NodeWrite]["url"], DefaultSettings().WriteURL)
	}
}

// The community node classifies transport failures with its own copy of TransportErrors
// (n8n-node/nodes/Companion/evidence.ts); the two must not drift apart.
func TestCommunityNodeTransportClassesMatch(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "n8n-node", "nodes", "Companion", "evidence.ts"))
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(src), "TRANSPORT_CLASSES")
	end := strings.Index(string(src)[start:], "};")
	if start < 0 || end < 0 {
		t.Fatal("TRANSPORT_CLASSES not found in evidence.ts")
	}
	var got []string
	for _, m := range regexp.MustCompile(`(?m)^\s*([A-Z_]+): '([a-z_]+)',`).FindAllStringSubmatch(string(src)[start:start+end], -1) {
		got = append(got, m[1]+"="+m[2])
	}
	var want []string
	for _, e := range TransportErrors {
		want = append(want, e.Code+"="+e.Class)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("evidence.ts TRANSPORT_CLASSES %v\nblueprints TransportErrors %v", got, want)
	}
	pre := regexp.MustCompile(`PRE_DISPATCH_CLASSES[^=]*= new Set\(\[([^\]]*)\]\)`).FindStringSubmatch(string(src))
	if pre == nil {
		t.Fatal("PRE_DISPATCH_CLASSES not found in evidence.ts")
	}
	var wantPre []string
	for _, e := range TransportErrors {
		if !e.Dispatched && !slices.Contains(wantPre, "'"+e.Class+"'") {
			wantPre = append(wantPre, "'"+e.Class+"'")
		}
	}
	gotPre := strings.Split(strings.ReplaceAll(pre[1], " ", ""), ",")
	slices.Sort(gotPre)
	slices.Sort(wantPre)
	if !slices.Equal(gotPre, wantPre) {
		t.Errorf("PRE_DISPATCH_CLASSES %v, want %v", gotPre, wantPre)
	}
}
