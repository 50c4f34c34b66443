package cli_test

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/replaysafe/companion/acceptance"
)

// The tests of this file keep the user docs (README.md and docs/*.md) whole, true and in the present
// tense: every relative link resolves (TestDocsLinks), nothing of the project's history is told there
// (TestDocsNoHistory), every count they state about a shipped file is the file's (TestDocsCountsAreTrue),
// and every variable, flag, field, endpoint and word of the contract is named in them
// (TestDocsNothingLost).

// userDocs returns the user docs: README.md and docs/*.md, by their names relative to the repository.
func userDocs(t *testing.T) map[string]string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range append(names, filepath.Join(repoRoot, "README.md")) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(repoRoot, p)
		out[filepath.ToSlash(name)] = string(b)
	}
	if len(out) < 20 {
		t.Fatalf("found %d user docs: the reading is wrong", len(out))
	}
	return out
}

// prose returns a Markdown text without its fenced blocks and inline code spans: what it says in words.
func prose(text string) string {
	var b strings.Builder
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimLeft(line, " "), "```") {
			inFence = !inFence
			continue
		}
		if !inFence {
			b.WriteString(inlineCode.ReplaceAllString(line, "") + "\n")
		}
	}
	return b.String()
}

var inlineCode = regexp.MustCompile("`[^`]*`")

// markdownLink is a link or an image of Markdown: [text](target) or ![alt](target).
var markdownLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)

// anchors returns the anchors GitHub makes of a Markdown file's headings: lower case, letters, digits,
// spaces, hyphens and underscores kept, spaces made hyphens, a repeated one numbered (-1, -2).
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimLeft(line, " "), "```") {
			inFence = !inFence
			continue
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var slug strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				slug.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				slug.WriteRune(r)
			}
		}
		s := slug.String()
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// TestDocsLinks: every relative link of every Markdown file of the repository (the generated template
// READMEs and the packages' included) names a file or folder that exists, and its #anchor, if any, a
// heading of that file.
func TestDocsLinks(t *testing.T) {
	var files []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && path != repoRoot) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	texts := map[string]string{}
	read := func(path string) string {
		if s, ok := texts[path]; ok {
			return s
		}
		b, _ := os.ReadFile(path)
		texts[path] = string(b)
		return texts[path]
	}
	links := 0
	for _, path := range files {
		name, _ := filepath.Rel(repoRoot, path)
		text := read(path)
		// Links in fenced blocks are code, not links.
		var outside strings.Builder
		inFence := false
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(strings.TrimLeft(line, " "), "```") {
				inFence = !inFence
			}
			if !inFence {
				outside.WriteString(inlineCode.ReplaceAllString(line, "") + "\n")
			}
		}
		for _, m := range markdownLink.FindAllStringSubmatch(outside.String(), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			file, anchor, _ := strings.Cut(target, "#")
			dest := path
			if file != "" {
				dest = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
			}
			st, err := os.Stat(dest)
			if err != nil {
				t.Errorf("%s: the link %s names no file", name, target)
				continue
			}
			if anchor != "" && (st.IsDir() || !strings.HasSuffix(dest, ".md") || !anchors(read(dest))[anchor]) {
				t.Errorf("%s: the link %s names no heading of %s", name, target, filepath.Base(dest))
			}
		}
	}
	if links < 100 {
		t.Fatalf("found %d relative links in %d Markdown files: the reading is wrong", links, len(files))
	}
}

// docReference is a page of the repository's docs named in code, a comment or a deploy file
// (docs/sizing.md, deploy/README.md, README.md), with its heading's anchor when it has one.
var docReference = regexp.MustCompile(`(?:^|[\s("'\x60])((?:docs|deploy|n8n-node|n8n-templates|items|e2e|console|blueprints)/(?:[a-z0-9-]+/)*[A-Za-z0-9-]+\.md|README\.md|CONTRIBUTING\.md|CHANGELOG\.md)(#[a-z0-9-]+)?`)

// TestDocsReferencesInCodeResolve: every page of the docs a source, script or deploy file names (and the
// heading it names) exists, so that a comment or a message that sends a reader to the docs sends them
// somewhere.
func TestDocsReferencesInCodeResolve(t *testing.T) {
	refs := 0
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && path != repoRoot) {
			return filepath.SkipDir
		}
		switch filepath.Ext(path) {
		case ".go", ".sh", ".yaml", ".yml", ".ts", ".mjs":
		default:
			if filepath.Base(path) != "Dockerfile" {
				return nil
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		name, _ := filepath.Rel(repoRoot, path)
		for _, m := range docReference.FindAllStringSubmatch(string(b), -1) {
			refs++
			page, anchor := m[1], strings.TrimPrefix(m[2], "#")
			// A path (docs/sizing.md) is the repository's; a page's name alone (README.md) is the nearest one
			// up from the file.
			file := filepath.Join(repoRoot, filepath.FromSlash(page))
			for dir := filepath.Dir(path); !strings.Contains(page, "/") && dir != repoRoot && strings.HasPrefix(dir, repoRoot); dir = filepath.Dir(dir) {
				if _, err := os.Stat(filepath.Join(dir, page)); err == nil {
					file = filepath.Join(dir, page)
					break
				}
			}
			text, err := os.ReadFile(file)
			if err != nil {
				t.Errorf("%s names %s, which does not exist", name, strings.TrimSpace(m[0]))
				continue
			}
			if anchor != "" && !anchors(string(text))[anchor] {
				t.Errorf("%s names %s: %s has no such heading", name, strings.TrimSpace(m[0]), page)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if refs < 50 {
		t.Fatalf("found %d references to the docs in the code: the reading is wrong", refs)
	}
}

// history is what tells the project's history rather than what the software does: an issue's number,
// "before issue", a test's name (CONTRIBUTING.md is where they belong).
var history = regexp.MustCompile(`(?i:\bissue #?\d+|\bbefore issue\b)|\b(Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*`)

// historyDate is a date of the project's history in prose: 2026-12-01, 1 December, December 2026. A
// time in an example (2026-12-01T10:00:00Z, in code) is not one.
var historyDate = regexp.MustCompile(`\b20\d\d-[01]\d-[0-3]\d\b|\b\d{1,2} (January|February|March|April|May|June|July|August|September|October|November|December)\b|\b(January|February|March|April|May|June|July|August|September|October|November|December) 20\d\d\b`)

// TestDocsNoHistory: the user docs say what the software does now. No issue numbers, "before issue" or
// test names anywhere in them, and no dates in their prose, but in docs/performance-log.md, the dated
// history of the measurements.
func TestDocsNoHistory(t *testing.T) {
	for name, text := range userDocs(t) {
		for i, line := range strings.Split(text, "\n") {
			if m := history.FindString(line); m != "" {
				t.Errorf("%s:%d: %q: the project's history (an issue, a test's name) belongs in CONTRIBUTING.md or the changelog", name, i+1, m)
			}
		}
		if name == "docs/performance-log.md" {
			continue
		}
		for i, line := range strings.Split(prose(text), "\n") {
			if m := historyDate.FindString(line); m != "" {
				t.Errorf("%s: %q in the prose (line %d without code): a date of the project's history belongs in the changelog", name, m, i+1)
			}
		}
	}
}

// nodeCount is a count of nodes the docs state: "37 nodes (16 of them Code nodes)", "a 20-node
// template", "4 Code nodes".
var nodeCount = regexp.MustCompile(`\b(\d+)(?: |-)(Code )?nodes?\b(?: \((\d+) of them Code nodes\))?`)

// templateName is a shipped n8n template named in the docs: `guarded-write`, guarded-write.json,
// n8n-templates/companion-claim.json, or the sub-workflows by their role (the claim, the report).
var templateName = regexp.MustCompile("`(?:n8n-templates/)?([a-z][a-z-]*?)(?:\\.json)?`|\\bthe (claim|report)\\b")

// TestDocsCountsAreTrue: every count the docs (user docs, CONTRIBUTING.md and the packages' READMEs)
// state about a shipped file is the file's: the nodes and Code nodes of an n8n template (sticky notes not
// counted), named by the nearest template before the count on its line; the cases of the acceptance
// suite; the scenarios of the n8n e2e (CONTRIBUTING.md's whole run, which the e2e's own test holds to the
// runner).
func TestDocsCountsAreTrue(t *testing.T) {
	counts := map[string][2]int{} // template → nodes, Code nodes
	paths, _ := filepath.Glob(filepath.Join(repoRoot, "n8n-templates", "*.json"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var wf struct {
			Nodes []struct{ Type string } `json:"nodes"`
		}
		if err := json.Unmarshal(b, &wf); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		var c [2]int
		for _, n := range wf.Nodes {
			switch n.Type {
			case "n8n-nodes-base.stickyNote":
				continue
			case "n8n-nodes-base.code":
				c[1]++
			}
			c[0]++
		}
		counts[strings.TrimSuffix(filepath.Base(p), ".json")] = c
	}
	counts["claim"], counts["report"] = counts["companion-claim"], counts["companion-report"]
	if len(counts) < 8 {
		t.Fatalf("read %d n8n templates: the reading is wrong", len(counts))
	}

	docs := userDocs(t)
	for _, extra := range []string{"CONTRIBUTING.md", "deploy/README.md", "n8n-node/README.md", "n8n-templates/README.md", "make-templates/README.md"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, extra))
		if err != nil {
			t.Fatal(err)
		}
		docs[extra] = string(b)
	}
	m := regexp.MustCompile(`A whole run has (\d+) scenarios`).FindStringSubmatch(docs["CONTRIBUTING.md"])
	if m == nil {
		t.Fatal(`CONTRIBUTING.md no longer says "A whole run has N scenarios": update this test with it`)
	}
	scenarios, _ := strconv.Atoi(m[1])
	cases := len(acceptance.Cases())
	checked := 0
	for name, text := range docs {
		if name == "docs/performance-log.md" {
			continue // a dated history: its counts were true on their day
		}
		for i, line := range strings.Split(text, "\n") {
			where := fmt.Sprintf("%s:%d", name, i+1)
			for _, loc := range nodeCount.FindAllStringSubmatchIndex(line, -1) {
				checked++
				var subject string
				for _, tm := range templateName.FindAllStringSubmatch(line[:loc[0]], -1) {
					if s := tm[1] + tm[2]; counts[s] != [2]int{} {
						subject = s
					}
				}
				if subject == "" {
					t.Errorf("%s: %q: a count of nodes with no template named before it on its line", where, line[loc[0]:loc[1]])
					continue
				}
				n, _ := strconv.Atoi(line[loc[2]:loc[3]])
				want := counts[subject][0]
				if loc[4] >= 0 { // "N Code nodes"
					want = counts[subject][1]
				}
				if n != want {
					t.Errorf("%s: %q: %s has %d", where, line[loc[0]:loc[1]], subject, want)
				}
				if loc[6] >= 0 {
					if c, _ := strconv.Atoi(line[loc[6]:loc[7]]); c != counts[subject][1] {
						t.Errorf("%s: %q: %s has %d Code nodes", where, line[loc[0]:loc[1]], subject, counts[subject][1])
					}
				}
			}
			for _, sm := range regexp.MustCompile(`\b(\d+) scenarios\b`).FindAllStringSubmatchIndex(line, -1) {
				checked++
				n, _ := strconv.Atoi(line[sm[2]:sm[3]])
				// CONTRIBUTING.md also times runs of a selection of them (E2E_ONLY), named so.
				if n != scenarios && !(name == "CONTRIBUTING.md" && strings.Contains(line, "E2E_ONLY")) {
					t.Errorf("%s: %q: a whole run of the n8n e2e has %d scenarios", where, line[sm[0]:sm[1]], scenarios)
				}
			}
			for _, cm := range regexp.MustCompile(`\b(\d+) (?:acceptance )?cases\b`).FindAllStringSubmatchIndex(line, -1) {
				checked++
				if n, _ := strconv.Atoi(line[cm[2]:cm[3]]); n != cases {
					t.Errorf("%s: %q: the acceptance suite has %d cases", where, line[cm[0]:cm[1]], cases)
				}
			}
		}
	}
	if checked < 4 {
		t.Fatalf("checked %d counts in the docs: the reading is wrong", checked)
	}
}

// TestDocsNothingLost: whatever a user may set or meet is named in the user docs: every environment
// variable the program reads (the tests' own aside, which CONTRIBUTING.md names), every flag of every
// command, every field of the configuration file, every endpoint, and every word of the contract
// (decisions, reasons, states, outcomes, error classes and codes, as /openapi.json lists them).
func TestDocsNothingLost(t *testing.T) {
	docs := userDocs(t)
	all := strings.Join(slices.Collect(mapValues(docs)), "\n")
	named := func(word string) bool {
		return strings.Contains(all, "`"+word+"`") || strings.Contains(all, word+":") || strings.Contains(all, "`"+word+" ") ||
			regexp.MustCompile(`(^|[^A-Za-z0-9_])`+regexp.QuoteMeta(word)+`([^A-Za-z0-9_]|$)`).MatchString(all)
	}
	n := 0
	contributing, err := os.ReadFile(filepath.Join(repoRoot, "CONTRIBUTING.md"))
	if err != nil {
		t.Fatal(err)
	}
	for v := range envTheCodeReads(t) {
		n++
		testsOnly := regexp.MustCompile(`^COMPANION_(TEST|MEASURE|BENCH|BYTES|UPDATE|SOAK|SHOW|FAULTS)_`).MatchString(v)
		switch {
		case testsOnly && !strings.Contains(string(contributing), v) && !named(v):
			t.Errorf("the tests read %s, which CONTRIBUTING.md does not name", v)
		case !testsOnly && !named(v):
			t.Errorf("the program reads %s, which the user docs do not name", v)
		}
	}
	for _, p := range commandPaths(cliCommands(t)) {
		help, _ := run(t, nil, append(slices.Clone(p), "--help")...)
		for _, f := range regexp.MustCompile(`(?m)^  --?([a-z][a-z0-9-]*)`).FindAllStringSubmatch(help, -1) {
			n++
			if !strings.Contains(all, "--"+f[1]) {
				t.Errorf("companion %s has the flag --%s, which the user docs do not name", strings.Join(p, " "), f[1])
			}
		}
	}
	for _, file := range []string{"config.go", "probes.go"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range regexp.MustCompile(`yaml:"([a-z0-9_]+)`).FindAllStringSubmatch(string(b), -1) {
			n++
			if !strings.Contains(all, "`"+f[1]+"`") && !strings.Contains(all, f[1]+":") {
				t.Errorf("the configuration file has the field %s (%s), which the user docs do not name", f[1], file)
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, "handlers", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	var api struct {
		Paths map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(b, &api); err != nil {
		t.Fatal(err)
	}
	for path := range api.Paths {
		n++
		if !strings.Contains(docs["docs/api.md"], path) {
			t.Errorf("the API serves %s, which docs/api.md does not name", path)
		}
	}
	for _, enum := range regexp.MustCompile(`"enum":\s*\[([^\]]*)\]`).FindAllStringSubmatch(string(b), -1) {
		for _, w := range regexp.MustCompile(`"([a-z_0-9]+)"`).FindAllStringSubmatch(enum[1], -1) {
			n++
			if !strings.Contains(all, "`"+w[1]+"`") && !strings.Contains(all, "`"+w[1]+"/") && !strings.Contains(all, "/"+w[1]+"`") {
				t.Errorf("the contract has the word %s, which the user docs do not name in code", w[1])
			}
		}
	}
	if n < 150 {
		t.Fatalf("checked %d names: the reading is wrong", n)
	}
}

func mapValues[K comparable, V any](m map[K]V) func(func(V) bool) {
	return func(yield func(V) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// userDocsWordBudget is how many words the user docs may hold, counted as `cat README.md docs/*.md | wc -w`
// counts them: 60% of the 64,652 they held when they were rewritten for users. A page that grows past it
// makes room elsewhere (history goes to CHANGELOG.md, contributor matters to CONTRIBUTING.md).
const userDocsWordBudget = 64652 * 60 / 100

// TestUserDocsStayWithinTheirWordBudget: the user docs, README.md and docs/*.md, stay at most
// userDocsWordBudget words.
func TestUserDocsStayWithinTheirWordBudget(t *testing.T) {
	words := 0
	for _, text := range userDocs(t) {
		words += len(strings.Fields(text))
	}
	if words > userDocsWordBudget {
		t.Errorf("the user docs hold %d words, over their budget of %d: make room before adding", words, userDocsWordBudget)
	}
	t.Logf("the user docs hold %d words of their %d", words, userDocsWordBudget)
}
