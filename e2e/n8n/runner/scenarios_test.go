package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestDocsCountTheScenarios: the number of scenarios CONTRIBUTING.md gives for a whole run is the runner's,
// and no two scenarios share a name (E2E_ONLY selects by name).
func TestDocsCountTheScenarios(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "CONTRIBUTING.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`A whole run has (\d+) scenarios`).FindSubmatch(b)
	if m == nil {
		t.Fatal(`CONTRIBUTING.md no longer says "A whole run has N scenarios": update this test with the docs`)
	}
	list := scenarioList()
	if n, _ := strconv.Atoi(string(m[1])); n != len(list) {
		t.Errorf("CONTRIBUTING.md says %d scenarios, the runner has %d", n, len(list))
	}
	seen := map[string]bool{}
	for _, s := range list {
		if seen[s.name] {
			t.Errorf("scenario %q twice", s.name)
		}
		seen[s.name] = true
	}
}
