package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/replaysafe/companion/cmd/companion/cli"
)

// foreignYAML are top-level keys of the YAML files the docs may show that are not companion's
// configuration: a Slack app manifest, docker compose, Kubernetes, Prometheus. A block with one of them
// is skipped; every other yaml block is a companion configuration file and must load.
var foreignYAML = map[string]bool{
	"display_information": true, "features": true, "oauth_config": true, "settings": true, "_metadata": true,
	"services": true, "volumes": true, "networks": true,
	"apiVersion": true, "kind": true, "metadata": true, "spec": true,
	"scrape_configs": true, "global": true, "rule_files": true, "groups": true,
}

// fragmentOf is the first line of a yaml block that is part of a configuration file, not a whole one:
// "# under destinations.billing:" says where it goes; the test indents it under those keys.
var fragmentOf = regexp.MustCompile(`^#\s*under\s+([a-z_.]+):?\s*$`)

// loaderLine is how the loader names a line of the file.
var loaderLine = regexp.MustCompile(`\bline \d+`)

// secretFile is a configuration's secret_file: or a lookup header's {file: …}.
var secretFile = regexp.MustCompile(`((?:secret_file|\bfile):\s*)([^\s,}#]+)`)

// TestDocsConfigExamplesLoad: every yaml block of the docs that is a companion configuration file loads
// with the loader serve uses (unknown keys refused, every value checked). The secrets the examples name
// are given: each environment variable has a value of its own, and each file (secret_file:, {file: …})
// is replaced, on the same line, by a file of the test that holds one.
func TestDocsConfigExamplesLoad(t *testing.T) {
	dir := t.TempDir()
	getenv := func(name string) string { return "doc-example-secret-of-" + strings.ToLower(name) + "-0123456789" }
	n := 0
	for _, d := range docFiles(t) {
		for _, b := range d.blocks {
			if b.lang != "yaml" && b.lang != "yml" {
				continue
			}
			where := fmt.Sprintf("%s:%d", d.name, b.line)
			var top map[string]any
			if err := yaml.Unmarshal([]byte(b.text), &top); err != nil {
				t.Errorf("%s: the yaml block is not YAML: %v", where, err)
				continue
			}
			if slices.ContainsFunc(slices.Collect(mapKeys(top)), func(k string) bool { return foreignYAML[k] }) {
				continue
			}
			// offset is how many lines the test wrote above the block's first line (a fragment's parents).
			text, offset := b.text, 0
			if first, _, _ := strings.Cut(text, "\n"); fragmentOf.MatchString(first) {
				var w strings.Builder
				keys := strings.Split(fragmentOf.FindStringSubmatch(first)[1], ".")
				offset = len(keys)
				for i, k := range keys {
					fmt.Fprintf(&w, "%s%s:\n", strings.Repeat("  ", i), k)
				}
				for _, line := range strings.Split(text, "\n") {
					fmt.Fprintf(&w, "%s%s\n", strings.Repeat("  ", len(keys)), line)
				}
				text = w.String()
			}
			files := 0
			text = secretFile.ReplaceAllStringFunc(text, func(s string) string {
				m := secretFile.FindStringSubmatch(s)
				files++
				path := filepath.Join(dir, fmt.Sprintf("secret-%d-%d", b.line, files))
				if err := os.WriteFile(path, []byte(fmt.Sprintf("doc-example-file-secret-%d-%d-0123456789\n", b.line, files)), 0o600); err != nil {
					t.Fatal(err)
				}
				return m[1] + path
			})
			path := filepath.Join(dir, fmt.Sprintf("config-%d.yaml", b.line))
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			n++
			if err := cli.ReadConfig(path, getenv); err != nil {
				msg := strings.ReplaceAll(err.Error(), path, "(the block)")
				// The loader's "line N" of the file is line b.line+N-offset of the Markdown file (the secrets'
				// files replace their paths on the same line).
				msg = loaderLine.ReplaceAllStringFunc(msg, func(l string) string {
					n, _ := strconv.Atoi(strings.TrimPrefix(l, "line "))
					return fmt.Sprintf("%s:%d", d.name, b.line+n-offset)
				})
				t.Errorf("%s: the configuration does not load: %s", where, msg)
			}
		}
	}
	if n < 5 {
		t.Fatalf("loaded %d configuration examples of the docs: the reading is wrong", n)
	}
}
