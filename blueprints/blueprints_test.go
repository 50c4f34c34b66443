package blueprints

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the committed templates from the generator")

// The committed files in n8n-templates/ and make-templates/ are exactly what the generator
// produces with the default settings; `go test ./blueprints -update` rewrites them.
func TestCommittedTemplatesMatchGenerator(t *testing.T) {
	files, err := Render(DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	root := ".."
	if *update {
		if _, err := WriteFiles(root, files); err != nil {
			t.Fatal(err)
		}
	}
	for path, want := range files {
		got, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
		if err != nil {
			t.Errorf("%s: %v (run: go test ./blueprints -update)", path, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the generator's output (run: go test ./blueprints -update)", path)
		}
	}
	for _, dir := range []string{N8nDir, MakeDir} {
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if _, ok := files[dir+"/"+e.Name()]; !ok && !slices.Contains(HandWritten, dir+"/"+e.Name()) {
				t.Errorf("%s/%s is not produced by the generator", dir, e.Name())
			}
		}
	}
}

func TestRenderIsByteStable(t *testing.T) {
	a, err := Render(DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Render(DefaultSettings())
	for p := range a {
		if !bytes.Equal(a[p], b[p]) {
			t.Errorf("%s: two renders differ", p)
		}
	}
}

// TestCommandHelp: "templates --help", "templates render --help" and "templates" alone print a usage
// with a description to stdout, and are not errors.
func TestCommandHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"templates", "-h"}, {}, {"help"}, {"render", "--help"}, {"render", "-h"}} {
		var out, errOut bytes.Buffer
		if err := Command(context.Background(), args, &out, &errOut); err != nil {
			t.Errorf("%v: %v", args, err)
		}
		if !strings.Contains(out.String(), "usage: companion templates render") || !strings.Contains(out.String(), "Make blueprints") || errOut.Len() != 0 {
			t.Errorf("%v: stdout %q, stderr %q", args, out.String(), errOut.String())
		}
		listsFlags := strings.Contains(out.String(), "-write-timeout-ms")
		pointsToFlags := strings.Contains(out.String(), "for every flag")
		if args := strings.Join(args, " "); strings.Contains(args, "render") && (!listsFlags || pointsToFlags) {
			t.Errorf("%s: its help lists the flags (%t) and points to another help for them (%t):\n%s", args, listsFlags, pointsToFlags, out.String())
		} else if !strings.Contains(args, "render") && (listsFlags || !pointsToFlags) {
			t.Errorf("%s: the group's help lists render's flags (%t) or does not say where they are (%t):\n%s", args, listsFlags, !pointsToFlags, out.String())
		}
	}
}

// TestCommandTrimsTrailingSlash: --url https://x/ is the service https://x, as the workflows use it.
// Without --out, render says what --out is and shows a whole command.
func TestCommandWithoutOutSaysWhatToGive(t *testing.T) {
	var out, errOut bytes.Buffer
	err := Command(context.Background(), []string{"render", "--url", "https://companion.example.com"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "--out is required: the folder to write n8n-templates/ and make-templates/ into") ||
		!strings.Contains(err.Error(), "--out ./my-templates") {
		t.Fatalf("render without --out: %v", err)
	}
}

func TestCommandTrimsTrailingSlash(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	if err := Command(context.Background(), []string{"render", "--url", "https://companion.example.com/", "--out", dir}, &out, &errOut); err != nil {
		t.Fatalf("render: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, N8nDir, "guarded-write.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"value": "https://companion.example.com"`)) || bytes.Contains(b, []byte("example.com/\"")) {
		t.Errorf("the trailing slash was not trimmed")
	}
}

func TestCommandRendersWithOwnURL(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	err := Command(context.Background(), []string{"render", "--url", "https://companion.example.com", "--out", dir, "--error-workflow-id", "wf-err"}, &out, &errOut)
	if err != nil {
		t.Fatalf("render: %v (%s)", err, errOut.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, N8nDir, "guarded-write.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"value": "https://companion.example.com"`)) || !bytes.Contains(b, []byte(`"errorWorkflow": "wf-err"`)) {
		t.Errorf("rendered workflow does not carry the given url and error workflow")
	}
	if strings.Count(out.String(), "\n") != 12 {
		t.Errorf("want 12 files listed, got:\n%s", out.String())
	}
	readme, err := os.ReadFile(filepath.Join(dir, N8nDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if committed, err := os.ReadFile(filepath.Join("..", N8nDir, "README.md")); err != nil || !bytes.Equal(readme, committed) {
		t.Errorf("--url changed the rendered README's prose (%v)", err)
	}
	for _, bad := range [][]string{{"render", "--out", dir, "--url", "ftp://x"}, {"render", "--url", "http://x"}, {"publish"}, {"render", "--out", dir, "extra"}} {
		if err := Command(context.Background(), bad, &out, &errOut); err == nil {
			t.Errorf("%v: want an error", bad)
		}
	}
}

// n8n: node names unique, known node types and versions, every connection points at a node, and
// every $('Name') reference names a node of the workflow.
func TestN8nWorkflowsAreWellFormed(t *testing.T) {
	refRE := regexp.MustCompile(`\$\('([^']+)'\)`)
	for _, tpl := range Templates() {
		wf := RenderN8n(tpl, DefaultSettings())
		names := map[string]N8nNode{}
		for _, n := range wf.Nodes {
			if _, dup := names[n.Name]; dup {
				t.Errorf("%s: duplicate node name %q", tpl.Slug, n.Name)
			}
			names[n.Name] = n
			if v, ok := N8nNodeVersions[n.Type]; !ok || v != n.TypeVersion {
				t.Errorf("%s: node %q has unknown type/version %s %v", tpl.Slug, n.Name, n.Type, n.TypeVersion)
			}
			if n.Type == n8nHTTPRequest && n.Name == NodeWrite {
				if n.RetryOnFail {
					t.Errorf("%s: the write must not retry on fail", tpl.Slug)
				}
				if n.OnError != "continueErrorOutput" {
					t.Errorf("%s: the write must route errors to its error output", tpl.Slug)
				}
			}
		}
		for from, c := range wf.Connections {
			if _, ok := names[from]; !ok {
				t.Errorf("%s: connection from unknown node %q", tpl.Slug, from)
			}
			for _, out := range c.Main {
				for _, e := range out {
					if _, ok := names[e.Node]; !ok {
						t.Errorf("%s: connection to unknown node %q", tpl.Slug, e.Node)
					}
				}
			}
		}
		b, _ := json.Marshal(wf)
		for _, m := range refRE.FindAllStringSubmatch(string(b), -1) {
			if _, ok := names[m[1]]; !ok {
				t.Errorf("%s: expression refers to unknown node %q", tpl.Slug, m[1])
			}
		}
	}
}

// Make: every blueprint checked the way Make's own pattern validator does, plus the ordering rule
// it leaves out: a {{N.field}} mapping may only point at a module that runs before it.
func TestMakeBlueprintsAreWellFormed(t *testing.T) {
	for _, tpl := range Templates() {
		if tpl.N8nOnly {
			continue
		}
		bp := RenderMake(tpl, DefaultSettings())
		raw, err := encode(bp)
		if err != nil {
			t.Fatal(err)
		}
		for _, err := range checkMakeBlueprint(raw) {
			t.Errorf("%s: %s", tpl.Slug, err)
		}
	}
}

// The checker itself must catch what it claims to catch.
func TestMakeCheckerRejectsBrokenBlueprints(t *testing.T) {
	good, _ := encode(RenderMake(Templates()[0], DefaultSettings()))
	cases := map[string]func(string) string{
		"forward reference": func(s string) string {
			return regexp.MustCompile(`\{\{\d+\.data\.key\}\}`).ReplaceAllString(s, "{{99.data.key}}")
		},
		"unknown module": func(s string) string { return strings.Replace(s, `"builtin:Ignore"`, `"builtin:Break2"`, 1) },
		"duplicate id":   func(s string) string { return strings.Replace(s, `"id": 3,`, `"id": 2,`, 1) },
		"bad operator":   func(s string) string { return strings.Replace(s, `"text:equal"`, `"equals"`, 1) },
		"escaped quote in a formula": func(s string) string {
			return strings.Replace(s, `.data.decision = \"conflict\"`, `.data.decision = \\\"conflict\\\"`, 1)
		},
	}
	for name, breakIt := range cases {
		broken := breakIt(string(good))
		if broken == string(good) {
			t.Fatalf("%s: mutation did not apply", name)
		}
		if errs := checkMakeBlueprint([]byte(broken)); len(errs) == 0 {
			t.Errorf("%s: checker accepted a broken blueprint", name)
		}
	}
}

type anyModule struct {
	ID         int                          `json:"id"`
	Module     string                       `json:"module"`
	Version    int                          `json:"version"`
	Filter     *MakeFilter                  `json:"filter"`
	Mapper     json.RawMessage              `json:"mapper"`
	Parameters json.RawMessage              `json:"parameters"`
	Metadata   map[string]any               `json:"metadata"`
	Routes     []struct{ Flow []anyModule } `json:"routes"`
	OnError    []anyModule                  `json:"onerror"`
}

var (
	mappingRE  = regexp.MustCompile(`\{\{[^}]*?\b(\d+)\.`)
	operatorRE = regexp.MustCompile(`^(text|number|boolean|date|array):[a-z]+$|^(exist|notexist)$`)
)

func checkMakeBlueprint(raw []byte) []string {
	var bp struct {
		Name     string      `json:"name"`
		Flow     []anyModule `json:"flow"`
		Metadata struct {
			Version  int            `json:"version"`
			Scenario map[string]any `json:"scenario"`
			Designer struct {
				Orphans []any `json:"orphans"`
			} `json:"designer"`
		} `json:"metadata"`
	}
	var errs []string
	fail := func(f string, a ...any) { errs = append(errs, fmt.Sprintf(f, a...)) }
	if err := json.Unmarshal(raw, &bp); err != nil {
		return []string{err.Error()}
	}
	if bp.Name == "" || len(bp.Flow) == 0 || bp.Metadata.Version != 1 || bp.Metadata.Scenario == nil || bp.Metadata.Designer.Orphans == nil {
		fail("name, flow, metadata.version 1, metadata.scenario and metadata.designer.orphans are required")
	}
	if len(bp.Flow) > 0 && bp.Flow[0].Module != "gateway:CustomWebHook" {
		fail("the first module must be the webhook trigger, got %s", bp.Flow[0].Module)
	}
	ids := map[int]bool{}
	placed := map[string]int{} // designer position → module
	// walk visits modules in run order; before holds the ids that have run before the module.
	var walk func(flow []anyModule, before map[int]bool, beforeSeq []int, inHandlerOf int)
	walk = func(flow []anyModule, before map[int]bool, beforeSeq []int, inHandlerOf int) {
		ran := map[int]bool{}
		for k := range before {
			ran[k] = true
		}
		// seq is the order modules ran in: an aggregator closes everything from its feeder on.
		seq := append([]int(nil), beforeSeq...)
		for _, m := range flow {
			// Make writes strings inside {{…}} with bare quotes; a backslash before a quote is a literal
			// backslash in the formula.
			for _, str := range decodedStrings(m.Mapper, m.Parameters) {
				if badQuoteRE.MatchString(str) {
					fail("module %d: a formula has a backslash before a quote: %s", m.ID, str)
				}
				// Retry-After is seconds or an HTTP-date; pasted as it is, a date breaks the JSON body and
				// a service expecting seconds. A mapping of it must go through the parser.
				if strings.Contains(str, "headers.`retry-after`") && !strings.Contains(str, `parseDate(replace(`) {
					fail("module %d: Retry-After is mapped without parsing seconds or an HTTP-date: %s", m.ID, str)
				}
			}
			if ids[m.ID] || m.ID < 1 {
				fail("module id %d is duplicated or not positive", m.ID)
			}
			ids[m.ID] = true
			if v, ok := MakeModuleVersions[m.Module]; !ok || v != m.Version {
				fail("module %d: unknown module/version %s v%d", m.ID, m.Module, m.Version)
			}
			if d, ok := m.Metadata["designer"].(map[string]any); !ok || d["x"] == nil || d["y"] == nil {
				fail("module %d: metadata.designer x/y required", m.ID)
			} else if other, ok := placed[fmt.Sprint(d["x"], d["y"])]; ok {
				fail("module %d stands on module %d in the designer", m.ID, other)
			} else {
				placed[fmt.Sprint(d["x"], d["y"])] = m.ID
			}
			if m.Filter != nil {
				if len(m.Filter.Conditions) == 0 {
					fail("module %d: filter without conditions", m.ID)
				}
				for _, and := range m.Filter.Conditions {
					if len(and) == 0 {
						fail("module %d: empty AND-group in filter", m.ID)
					}
					for _, c := range and {
						if !strings.HasPrefix(c.A, "{{") || !operatorRE.MatchString(c.O) {
							fail("module %d: filter condition %+v: a must be a mapping and o an operator like text:equal", m.ID, c)
						}
					}
				}
			}
			// The module's own filter and mapper may use modules that ran before it; an error
			// handler may also use the module it handles (N.error).
			own := string(m.Mapper) + string(m.Parameters)
			if m.Filter != nil {
				b, _ := json.Marshal(m.Filter)
				own += string(b)
			}
			for _, mm := range mappingRE.FindAllStringSubmatch(own, -1) {
				n, _ := strconv.Atoi(mm[1])
				if !ran[n] && n != inHandlerOf {
					fail("module %d maps {{%d.…}}, which does not run before it", m.ID, n)
				}
			}
			switch m.Module {
			case "builtin:BasicRouter":
				if string(m.Mapper) != "null" || m.Filter != nil || len(m.Routes) < 2 {
					fail("router %d: mapper null, no filter, at least two routes", m.ID)
				}
			case "builtin:BasicAggregator":
				var p struct{ Feeder int }
				_ = json.Unmarshal(m.Parameters, &p)
				if !ran[p.Feeder] {
					fail("aggregator %d: feeder %d must be a module that ran before", m.ID, p.Feeder)
				}
				// Make outputs no bundle of the feeder or of the modules between it and the aggregator:
				// after the aggregator, only its own array may be mapped.
				for i, id := range seq {
					if id == p.Feeder {
						for _, closed := range seq[i:] {
							delete(ran, closed)
						}
						seq = seq[:i]
						break
					}
				}
			case "http:MakeRequest":
				var mp MakeHTTPMapper
				_ = json.Unmarshal(m.Mapper, &mp)
				// One place for URL and token: a call carrying an Authorization header maps its token and
				// its URL from the Settings modules instead of a pasted copy.
				for _, h := range mp.Headers {
					if strings.EqualFold(h.Name, "Authorization") {
						if !strings.Contains(h.Value, "{{") {
							fail("module %d: the token is pasted into its Authorization header; map it from the Settings module", m.ID)
						}
						if !strings.HasPrefix(mp.URL, "{{") {
							fail("module %d: companion's URL is pasted (%s); map it from the Settings module", m.ID, mp.URL)
						}
					}
				}
				if mp.InputMethod == "jsonString" {
					// A mapping-free rendering of the body must be JSON: replace each mapping by a number.
					plain := regexp.MustCompile(`\{\{.*?\}\}`).ReplaceAllString(mp.JSONStringBodyContent, "0")
					if !json.Valid([]byte(plain)) {
						fail("module %d: body is not JSON once mapped: %s", m.ID, mp.JSONStringBodyContent)
					}
				}
			}
			if len(m.OnError) > 0 {
				walk(m.OnError, ran, seq, m.ID)
				last := m.OnError[len(m.OnError)-1].Module
				if last == "builtin:Break" {
					fail("module %d: Break retries the module blindly", m.ID)
				}
			}
			ran[m.ID] = true
			seq = append(seq, m.ID)
			for _, r := range m.Routes {
				if len(r.Flow) == 0 {
					fail("router %d: empty route", m.ID)
				}
				walk(r.Flow, ran, seq, 0)
			}
		}
	}
	walk(bp.Flow, map[int]bool{}, nil, 0)
	return append(errs, checkMakeJSONBodies(raw)...)
}

var badQuoteRE = regexp.MustCompile(`\{\{[^}]*\\"`)

// decodedStrings returns every string inside the JSON values, as Make reads them.
func decodedStrings(raws ...json.RawMessage) []string {
	var out []string
	var visit func(v any)
	visit = func(v any) {
		switch x := v.(type) {
		case string:
			out = append(out, x)
		case []any:
			for _, e := range x {
				visit(e)
			}
		case map[string]any:
			for _, e := range x {
				visit(e)
			}
		}
	}
	for _, raw := range raws {
		var v any
		if json.Unmarshal(raw, &v) == nil {
			visit(v)
		}
	}
	return out
}

// Every Make blueprint holds companion's URL and token once, in its Settings modules, and every companion
// call maps them; a call with the token or the URL pasted back in fails the check.
func TestMakeURLAndTokenInOnePlace(t *testing.T) {
	s := DefaultSettings()
	for _, tpl := range Templates() {
		if tpl.N8nOnly {
			continue
		}
		raw, err := encode(RenderMake(tpl, s))
		if err != nil {
			t.Fatal(err)
		}
		text := string(raw)
		if n := strings.Count(text, s.Token); n != 1 {
			t.Errorf("%s: the token appears %d times, want once (the Settings module)", tpl.Slug, n)
		}
		if n := strings.Count(text, `"`+s.ServiceURL); n != 1 {
			t.Errorf("%s: companion's URL appears %d times, want once (the Settings module)", tpl.Slug, n)
		}
		tokenID := makeModuleID(t, raw, "Settings: companion token")
		urlID := makeModuleID(t, raw, "Settings: companion URL")
		mapped := fmt.Sprintf("Bearer {{%d.%s}}", tokenID, MakeTokenVariable)
		if !strings.Contains(text, mapped) {
			t.Fatalf("%s: no call maps %s", tpl.Slug, mapped)
		}
		for name, broken := range map[string]string{
			"pasted token": strings.Replace(text, mapped, "Bearer "+s.Token, 1),
			"pasted URL":   strings.Replace(text, fmt.Sprintf(`"{{%d.%s}}/v1/`, urlID, MakeURLVariable), `"`+s.ServiceURL+`/v1/`, 1),
		} {
			if broken == text {
				t.Fatalf("%s: %s: mutation did not apply", tpl.Slug, name)
			}
			if errs := checkMakeBlueprint([]byte(broken)); len(errs) == 0 {
				t.Errorf("%s: checker accepted a blueprint with a %s", tpl.Slug, name)
			}
		}
	}
}

// Retry-After reaches companion and the webhook's sender as whole seconds, whether the write's answer
// gave seconds or an HTTP-date; mapping the raw header (what the blueprints did before) fails the check.
func TestMakeRetryAfterParsed(t *testing.T) {
	parsed := regexp.MustCompile("\\{\\{if\\(contains\\(ifempty\\((\\d+)\\.headers\\.`retry-after`.*?\\)\\)\\}\\}")
	for _, tpl := range Templates() {
		if tpl.N8nOnly {
			continue
		}
		raw, err := encode(RenderMake(tpl, DefaultSettings()))
		if err != nil {
			t.Fatal(err)
		}
		text := string(raw)
		if n := strings.Count(text, "headers.`retry-after`"); n != 3*len(parsed.FindAllString(text, -1)) {
			t.Errorf("%s: %d mappings of Retry-After, not all through the parser", tpl.Slug, n)
		}
		if !strings.Contains(text, `retry_after\": {{if(contains(ifempty(`) {
			t.Errorf("%s: retry_after is not the parsed number of seconds", tpl.Slug)
		}
		broken := parsed.ReplaceAllString(text, "{{ifempty($1.headers.`retry-after`; 60)}}")
		if broken == text {
			t.Fatalf("%s: mutation did not apply", tpl.Slug)
		}
		if errs := checkMakeBlueprint([]byte(broken)); len(errs) == 0 {
			t.Errorf("%s: checker accepted a raw Retry-After mapping", tpl.Slug)
		}
	}
}

// The batch blueprint's write maps from the decision's aggregated item; mapping the feeder's bundle
// after its aggregator closed (what the write did before) must fail the check.
func TestMakeCheckerRejectsMappingFromAClosedAggregation(t *testing.T) {
	var batch Template
	for _, tpl := range Templates() {
		if tpl.Slug == "batch-guarded-write" {
			batch = tpl
		}
	}
	good, _ := encode(RenderMake(batch, DefaultSettings()))
	if errs := checkMakeBlueprint(good); len(errs) > 0 {
		t.Fatalf("the batch blueprint fails: %v", errs)
	}
	feeder := makeModuleID(t, good, "YOUR ITEMS: one bundle per write")
	closed := regexp.MustCompile(`\{\{first\(map\(\d+\.array; \\"invoice\\"; \\"key\\"; \d+\.key\)\)\}\}`)
	broken := closed.ReplaceAllString(string(good), fmt.Sprintf("{{%d.invoice}}", feeder))
	if broken == string(good) {
		t.Fatal("mutation did not apply: the write does not map invoice from aggregator 4 by the decision's key")
	}
	if errs := checkMakeBlueprint([]byte(broken)); len(errs) == 0 {
		t.Errorf("checker accepted a write mapping {{%d.invoice}} after the aggregator closed feeder %d", feeder, feeder)
	}
}

// makeModuleID is the id of the module named name in a rendered blueprint.
func makeModuleID(t *testing.T, raw []byte, name string) int {
	t.Helper()
	var bp MakeBlueprint
	if err := json.Unmarshal(raw, &bp); err != nil {
		t.Fatal(err)
	}
	var find func([]MakeModule) int
	find = func(flow []MakeModule) int {
		for _, m := range flow {
			if m.Metadata.Designer.Name == name {
				return m.ID
			}
			for _, r := range m.Routes {
				if id := find(r.Flow); id != 0 {
					return id
				}
			}
			if id := find(m.OnError); id != 0 {
				return id
			}
		}
		return 0
	}
	id := find(bp.Flow)
	if id == 0 {
		t.Fatalf("no module named %q", name)
	}
	return id
}

// The READMEs name the slots by their node names: no placeholder may be substituted inside another word.
func TestReadmesNameTheSlots(t *testing.T) {
	s := DefaultSettings()
	for name, text := range map[string]string{"n8n": n8nReadme(s), "make": makeReadme(s)} {
		if !strings.Contains(text, "**"+NodeWrite+"**") || strings.Contains(text, "YOUR "+s.WriteURL) {
			t.Errorf("%s README does not name the slot %q as it is", name, NodeWrite)
		}
	}
}

// evalMakeFilter evaluates a filter of text:equal/text:notequal conditions against mapped values.
func evalMakeFilter(f *MakeFilter, values map[string]string) bool {
	if f == nil {
		return true
	}
	for _, and := range f.Conditions {
		ok := true
		for _, c := range and {
			switch c.O {
			case "text:equal":
				ok = ok && values[c.A] == c.B
			case "text:notequal":
				ok = ok && values[c.A] != c.B
			default:
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// Make's trigger guard mirrors n8n's: only a finished or running delivery of the same event (or a
// conflict) stops at the guard; any other skip of the trigger claim (attempts spent, a retry time, an
// owner) goes on to the write's own before-write. Only a run holding the trigger claim reports it, after
// the webhook's answer, so a run that sent nothing uses up none of the trigger's attempts.
func TestMakeTriggerGuardFallsThrough(t *testing.T) {
	for _, tpl := range Templates() {
		if tpl.N8nOnly || !tpl.TriggerGuard {
			continue
		}
		raw, err := encode(RenderMake(tpl, DefaultSettings()))
		if err != nil {
			t.Fatal(err)
		}
		var bp MakeBlueprint
		if err := json.Unmarshal(raw, &bp); err != nil {
			t.Fatal(err)
		}
		trig := makeModuleID(t, raw, "Claim trigger event")
		guard := findMakeModule(bp.Flow, "First delivery?")
		if guard == nil || len(guard.Routes) != 3 {
			t.Fatalf("%s: no three-route First delivery? router (write, duplicate, refused)", tpl.Slug)
		}
		write, dup := guard.Routes[0].Flow[0], guard.Routes[1].Flow[0]
		if write.Metadata.Designer.Name != NodeBeforeWrite {
			t.Fatalf("%s: the first route does not start with %s", tpl.Slug, NodeBeforeWrite)
		}
		for _, tc := range []struct {
			decision, reason string
			stops            bool
		}{
			{"proceed", "", false},
			{"skip", "succeeded", true},
			{"skip", "in_progress", true},
			{"conflict", "payload_differs", true},
			{"skip", "retry_later", false},
			{"skip", "awaiting_owner", false},
			{"skip", "failed_permanent", false},
			{"skip", "attempts_exhausted", false},
		} {
			v := map[string]string{ref(trig, "data.decision"): tc.decision, ref(trig, "data.reason"): tc.reason}
			goesOn, stops := evalMakeFilter(write.Filter, v), evalMakeFilter(dup.Filter, v)
			if goesOn == stops || stops != tc.stops {
				t.Errorf("%s: trigger claim %s/%s: goes on to the write %v, stops as a duplicate %v", tpl.Slug, tc.decision, tc.reason, goesOn, stops)
			}
		}
		reports := 0
		var walk func(flow []MakeModule)
		walk = func(flow []MakeModule) {
			seenReport := false
			for _, m := range flow {
				if strings.HasPrefix(m.Metadata.Designer.Name, "Record trigger outcome") {
					reports++
					seenReport = true
					held := map[string]string{ref(trig, "data.decision"): "proceed"}
					spent := map[string]string{ref(trig, "data.decision"): "skip", ref(trig, "data.reason"): "retry_later"}
					if !evalMakeFilter(m.Filter, held) || evalMakeFilter(m.Filter, spent) {
						t.Errorf("%s: %q reports the trigger claim also when this run does not hold it", tpl.Slug, m.Metadata.Designer.Name)
					}
				}
				if m.Module == "gateway:WebhookRespond" && seenReport {
					t.Errorf("%s: %q comes after a filtered trigger report, so a run without the claim sends no answer", tpl.Slug, m.Metadata.Designer.Name)
				}
				for _, r := range m.Routes {
					walk(r.Flow)
				}
				walk(m.OnError)
			}
		}
		walk(bp.Flow)
		if reports < 5 {
			t.Errorf("%s: %d trigger reports, want one per ending (written, failed, transport, stored, nothing)", tpl.Slug, reports)
		}
	}
}

// Every decision of the batch takes exactly one route after the decision feeder: proceed to the write,
// skip/conflict/reconcile to their own route (before, they ended silently at the write's filter); and
// a batch where nothing proceeded reports nothing instead of {"items": []}.
func TestMakeBatchRoutesEveryDecision(t *testing.T) {
	var batch Template
	for _, tpl := range Templates() {
		if tpl.Slug == "batch-guarded-write" {
			batch = tpl
		}
	}
	raw, err := encode(RenderMake(batch, DefaultSettings()))
	if err != nil {
		t.Fatal(err)
	}
	var bp MakeBlueprint
	if err := json.Unmarshal(raw, &bp); err != nil {
		t.Fatal(err)
	}
	each := makeModuleID(t, raw, "One bundle per decision")
	var router *MakeModule
	flow := makeFlowOf(bp.Flow, each)
	for i, m := range flow {
		if m.ID == each && i+1 < len(flow) && flow[i+1].Module == "builtin:BasicRouter" {
			router = &flow[i+1]
		}
	}
	if router == nil {
		t.Fatal("no router after the decision feeder: skip and conflict bundles have no route")
	}
	for _, d := range []string{"proceed", "skip", "conflict", "reconcile"} {
		n := 0
		for _, r := range router.Routes {
			if evalMakeFilter(r.Flow[0].Filter, map[string]string{ref(each, "decision"): d}) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("decision %s takes %d routes, want 1", d, n)
		}
	}
	report := findMakeModule(router.Routes[0].Flow, "Batch after-write")
	if report == nil || report.Filter == nil || !strings.Contains(report.Filter.Conditions[0][0].A, "length(") {
		t.Errorf("the batch after-write is not stopped on an empty aggregation: %+v", report.Filter)
	}
}

// TestCommandKeepsEditedFiles: rendering into a folder whose files differ from what it would write (a copy
// someone edited, a rendering with other flags) refuses, names them, matches ErrUsage and changes nothing;
// the same rendering again is a quiet success that leaves the files as they are; --force replaces them.
func TestCommandKeepsEditedFiles(t *testing.T) {
	dir := t.TempDir()
	render := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := Command(context.Background(), append([]string{"render", "--url", "https://companion.example.com", "--out", dir}, args...), &out, &errOut)
		return out.String(), err
	}
	if _, err := render(); err != nil {
		t.Fatalf("first render: %v", err)
	}
	edited := filepath.Join(dir, N8nDir, "guarded-write.json")
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	for _, p := range []string{edited, filepath.Join(dir, MakeDir, "README.md")} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	// The same rendering again: no error, every file listed, none rewritten.
	out, err := render()
	if err != nil || strings.Count(out, "\n") != 12 {
		t.Fatalf("the same render again: %v\n%s", err, out)
	}
	if fi, err := os.Stat(edited); err != nil || !fi.ModTime().Equal(old) {
		t.Errorf("the same render again rewrote %s (%v)", edited, err)
	}

	mine := []byte(`{"edited": "by hand"}`)
	if err := os.WriteFile(edited, mine, 0o644); err != nil {
		t.Fatal(err)
	}
	readme := filepath.Join(dir, MakeDir, "README.md")
	before, _ := os.ReadFile(readme)
	for _, tc := range []struct {
		args []string
		says string
	}{{nil, "1 file differs"}, {[]string{"--token", "another-token"}, " files differ"}} {
		args := tc.args
		out, err = render(args...)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), edited) ||
			!strings.Contains(err.Error(), "--force") || out != "" {
			t.Errorf("render %v over an edited file: %v\n%s", args, err, out)
		}
		if got, _ := os.ReadFile(edited); !bytes.Equal(got, mine) {
			t.Errorf("render %v replaced the edited file", args)
		}
		// --token changes the Make README too; nothing is written while one file is refused.
		if got, _ := os.ReadFile(readme); !bytes.Equal(got, before) {
			t.Errorf("render %v wrote %s although it refused", args, readme)
		}
	}

	if _, err := render("--force"); err != nil {
		t.Fatalf("render --force: %v", err)
	}
	if got, _ := os.ReadFile(edited); bytes.Equal(got, mine) {
		t.Errorf("render --force kept the edited file")
	}
}
