package blueprints

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestDocsNodeCountsAreTrue: the counts docs/templates.md states about the shipped n8n templates (nodes
// without the sticky notes, Code nodes) are the rendered templates'.
func TestDocsNodeCountsAreTrue(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "templates.md"))
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string][2]int{} // slug → nodes, Code nodes
	for _, tpl := range Templates() {
		var nodes, code int
		for _, n := range RenderN8n(tpl, DefaultSettings()).Nodes {
			switch n.Type {
			case n8nStickyNote:
				continue
			case n8nCode:
				code++
			}
			nodes++
		}
		counts[tpl.Slug] = [2]int{nodes, code}
	}
	for _, c := range []struct {
		pattern string
		want    []int
	}{
		{"`guarded-write` is (\\d+) nodes \\((\\d+) of them Code nodes\\)", []int{counts["guarded-write"][0], counts["guarded-write"][1]}},
		{"the claim (\\d+) nodes, the report (\\d+)", []int{counts["companion-claim"][0], counts["companion-report"][0]}},
		{"`n8n-templates/guarded-write-subworkflows.json`: (\\d+) nodes", []int{counts["guarded-write-subworkflows"][0]}},
	} {
		m := regexp.MustCompile(c.pattern).FindSubmatch(b)
		if m == nil {
			t.Errorf("docs/templates.md no longer says %q: update this test with the docs", c.pattern)
			continue
		}
		for i, w := range c.want {
			if got, _ := strconv.Atoi(string(m[i+1])); got != w {
				t.Errorf("docs/templates.md: %q says %d, the rendered template has %d", m[0], got, w)
			}
		}
	}
}
