package cli_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/replaysafe/companion/blueprints"
	"github.com/replaysafe/companion/cmd/companion/cli"
)

// The tests of this file keep what README.md and docs/*.md tell a newcomer to type or write in step with
// the code: the commands and their flags (TestDocsCommandsAndFlags), the environment variables
// (TestDocsEnvironmentVariables) and the configuration files (TestDocsConfigExamplesLoad). They read
// docs/performance-log.md not at all: it is a dated history, whose commands were right on the day they
// were run and are kept as they were.

const repoRoot = "../../.."

// docFile is one Markdown file of the docs, split into what the tests read.
type docFile struct {
	name   string // as the messages name it: README.md, docs/api.md
	blocks []readmeBlock
	// spans are its inline code spans, outside the fenced blocks.
	spans []docSpan
}

// docSpan is one inline code span and the line it starts on.
type docSpan struct {
	line int
	text string
	// after is the text that follows it in its paragraph, up to 40 bytes.
	after string
}

// docFiles returns README.md and docs/*.md but the performance log, each with its blocks and spans.
func docFiles(t *testing.T) []docFile {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	names = append([]string{filepath.Join(repoRoot, "README.md")}, names...)
	var out []docFile
	for _, path := range names {
		name, _ := filepath.Rel(repoRoot, path)
		name = filepath.ToSlash(name)
		if name == "docs/performance-log.md" {
			continue // a dated history: see above
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, docFile{name: name, blocks: readmeBlocks(t, path), spans: inlineSpans(string(b))})
	}
	if len(out) < 8 {
		t.Fatalf("found %d Markdown files in README.md and docs/", len(out))
	}
	return out
}

// inlineSpans returns the inline code spans of Markdown text outside its fenced blocks. A span may run
// over a line break within a paragraph; a run of n backticks ends at the next run of exactly n. In a
// table a span writes | as \|, which is turned back here.
func inlineSpans(text string) []docSpan {
	var out []docSpan
	var para []string
	paraLine := 0
	flush := func() {
		p := strings.Join(para, "\n")
		para = nil
		for i := 0; i < len(p); {
			if p[i] != '`' {
				i++
				continue
			}
			n := 0
			for i+n < len(p) && p[i+n] == '`' {
				n++
			}
			end := -1
			for j := i + n; j < len(p); {
				if p[j] != '`' {
					j++
					continue
				}
				m := 0
				for j+m < len(p) && p[j+m] == '`' {
					m++
				}
				if m == n {
					end = j
					break
				}
				j += m
			}
			if end < 0 {
				i += n
				continue
			}
			span := strings.ReplaceAll(strings.TrimSpace(strings.ReplaceAll(p[i+n:end], "\n", " ")), `\|`, "|")
			after := strings.ReplaceAll(p[end+n:], "\n", " ")
			after = after[:min(len(after), 40)]
			out = append(out, docSpan{line: paraLine + strings.Count(p[:i], "\n"), text: span, after: after})
			i = end + n
		}
	}
	inFence := false
	for i, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "```"):
			flush()
			inFence = !inFence
		case inFence:
		case strings.TrimSpace(line) == "":
			flush()
		default:
			if len(para) == 0 {
				paraLine = i + 1
			}
			para = append(para, line)
		}
	}
	flush()
	return out
}

// docCommand is one companion command line of the docs: the words after "companion".
type docCommand struct {
	where string // file:line
	args  []string
	// mistake: the docs show it as a mistake on the command line, which the program refuses (exit 2).
	mistake bool
}

// shellLangs are the fenced blocks whose lines are commands to type.
var shellLangs = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true}

// synopsisLangs are the fenced blocks that show output, diagrams and synopses: only their lines that
// begin with a command are read ("companion templates render --url URL \ [--force]").
var synopsisLangs = map[string]bool{"": true, "text": true}

// outputLine is a line of the program's output that begins with its name: "companion acceptance, run …".
var outputLine = regexp.MustCompile(`^companion \S+,`)

// commandStart matches an inline span that begins with a command: environment assignments, then
// companion itself (./companion, go run ./cmd/companion) or time running it.
var commandStart = regexp.MustCompile(`^([A-Z_][A-Z0-9_]*=\S*\s+)*(companion|\S*/companion|go run \S*/companion|\S*time\s.*\scompanion)(\s|$)`)

// companionCommands returns every companion command of the docs: in shell blocks, and in the inline
// code spans that begin with one (a span in prose such as `companion refused the claim` inside a JSON
// message is no command).
func companionCommands(t *testing.T, docs []docFile, cmds map[string][]string) []docCommand {
	t.Helper()
	var out []docCommand
	credentials := blueprints.DefaultSettings()
	add := func(where, text string, mistake bool) {
		for _, words := range shellCommands(t, text) {
			if args, ok := afterCompanion(words); ok {
				out = append(out, docCommand{where: where, args: args, mistake: mistake})
			}
		}
	}
	for _, d := range docs {
		for _, b := range d.blocks {
			if synopsisLangs[b.lang] {
				// Output and synopses: a line that begins with a command (and its continuation lines) is
				// one, but the program's output naming itself ("companion acceptance, run acc-…").
				lines := strings.Split(b.text, "\n")
				for i := 0; i < len(lines); i++ {
					from, text := i, lines[i]
					for strings.HasSuffix(text, `\`) && i+1 < len(lines) {
						i++
						text += "\n" + lines[i]
					}
					if commandStart.MatchString(text) && !outputLine.MatchString(text) {
						add(fmt.Sprintf("%s:%d", d.name, b.line+1+from), text, false)
					}
				}
				continue
			}
			if !shellLangs[b.lang] {
				continue
			}
			// The block as one text, as a quote may run over lines (curl -d '{…}'); each command is told
			// by the first line from the previous one's that runs companion with its first word.
			lines := strings.Split(b.text, "\n")
			at := 0
			for _, words := range shellCommands(t, b.text) {
				args, ok := afterCompanion(words)
				if !ok {
					continue
				}
				for i := at; i < len(lines); i++ {
					if strings.Contains(lines[i], "companion") && (len(args) == 0 || strings.Contains(lines[i], args[0])) {
						at = i
						break
					}
				}
				out = append(out, docCommand{where: fmt.Sprintf("%s:%d", d.name, b.line+1+at), args: args})
				at++
			}
		}
		for _, s := range d.spans {
			if withoutName(s.text, cmds) {
				add(fmt.Sprintf("%s:%d", d.name, s.line), "companion "+s.text, false)
				continue
			}
			switch after := strings.TrimSpace(s.after); {
			case !commandStart.MatchString(s.text), !strings.Contains(s.text, " "):
				// Not a command, or the program's name or path alone (`./cmd/companion`,
				// `https://ops.example.com/companion`): a name in prose.
			case s.text == credentials.CredentialName || s.text == credentials.OperatorCredentialName:
				// `companion operator`: the name of the templates' n8n credential, not a command.
			default:
				// `companion items` alone: an example of a mistake, which the program must refuse.
				add(fmt.Sprintf("%s:%d", d.name, s.line), s.text, strings.HasPrefix(after, "alone"))
			}
		}
	}
	return out
}

// afterCompanion returns the words of a command line after companion, when the line runs companion:
// after environment assignments, exec, go run, or time and its options. go build/install
// ./cmd/companion builds it and is not a run. The words end at a pipe, a redirection or a list operator.
func afterCompanion(words []string) ([]string, bool) {
	i := 0
	for i < len(words) {
		w := words[i]
		switch {
		case regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(w), w == "exec", w == "sudo", w == "nohup":
			i++
		case w == "go" && i+1 < len(words) && words[i+1] == "run":
			i += 2
		case w == "time" || strings.HasSuffix(w, "/time"):
			i++
			for i+1 < len(words) && strings.HasPrefix(words[i], "-") {
				i += 2 // /usr/bin/time -f "%U %S"
			}
		case w == "companion" || strings.HasSuffix(w, "/companion"):
			var args []string
			for _, a := range words[i+1:] {
				redirect := strings.HasPrefix(a, ">") || strings.HasPrefix(a, "2>") || strings.HasPrefix(a, "<") && !strings.HasSuffix(a, ">")
				if a == "|" || a == "||" || a == "&&" || a == ";" || a == "&" || redirect {
					break
				}
				args = append(args, a)
			}
			return args, true
		default:
			return nil, false
		}
	}
	return nil, false
}

// placeholder reports whether a word of the docs stands for something the reader fills in: KEY, <id>,
// [command], …, DIR.
func placeholder(w string) bool {
	return w == "" || strings.HasPrefix(w, "<") || strings.HasPrefix(w, "[") || strings.Contains(w, "…") ||
		upperWord.MatchString(w)
}

// upperWord is a placeholder in capitals: KEY, DIR, URL, N.
var upperWord = regexp.MustCompile(`^[A-Z][A-Z_]*$`)

// cliCommands asks the program its commands (companion help) and, for each, its subcommands, from the
// first line of its --help: "usage: companion items list|show|resolve [flags]" has three,
// "usage: companion serve [flags]" none.
func cliCommands(t *testing.T) map[string][]string {
	t.Helper()
	out, err := run(t, nil, "help")
	if err != nil {
		t.Fatal(err)
	}
	_, list, ok := strings.Cut(out, "\ncommands:\n")
	if !ok {
		t.Fatalf("companion help lists no commands:\n%s", out)
	}
	cmds := map[string][]string{}
	for _, line := range strings.Split(list, "\n") {
		if !strings.HasPrefix(line, "  ") {
			break
		}
		name := strings.Fields(line)[0]
		if name == "help" {
			cmds[name] = nil // its --help is the program's, which lists the commands: no subcommands
			continue
		}
		help, err := run(t, nil, name, "--help")
		if err != nil {
			t.Fatalf("companion %s --help: %v", name, err)
		}
		usage := strings.Fields(strings.SplitN(help, "\n", 2)[0])
		if len(usage) < 3 || !strings.EqualFold(usage[0], "usage:") || usage[1] != "companion" || usage[2] != name {
			t.Fatalf("companion %s --help does not begin with its usage: %q", name, usage)
		}
		cmds[name] = nil
		if len(usage) > 3 && regexp.MustCompile(`^[a-z]+(\|[a-z]+)*$`).MatchString(usage[3]) {
			cmds[name] = strings.Split(usage[3], "|")
		}
	}
	if len(cmds) < 8 || len(cmds["items"]) != 3 {
		t.Fatalf("read the commands %v from companion help: the reading is wrong", cmds)
	}
	return cmds
}

// unknownFlagWords are how the program says it has no such flag: its own words (Main.parse,
// delegatedUsage) and the flag package's, which receiver --help returns as they are.
var unknownFlagWords = regexp.MustCompile(`unknown flag|flag provided but not defined`)

// TestDocsCommandsAndFlags: every companion command the docs write — in shell blocks and inline code —
// names a command the program has (companion help), a subcommand that command has (its usage line),
// and only flags that command accepts. A flag is asked of the real parser: the command runs with
// --flag=x --help, which parses the flag, then stops at --help before doing anything; it must not answer
// that the flag is unknown (a wrong value, "x" for a number or a bool, is another answer, and fine).
func TestDocsCommandsAndFlags(t *testing.T) {
	cmds := cliCommands(t)
	docCmds := companionCommands(t, docFiles(t), cmds)
	flags, values := 0, 0
	for _, c := range docCmds {
		if c.mistake {
			if _, err := run(t, nil, c.args...); cli.ExitCode(err) != 2 {
				t.Errorf("%s: companion %s, which the docs show as a mistake, is not refused as one (exit 2): %v", c.where, strings.Join(c.args, " "), err)
			}
			continue
		}
		args := c.args
		var path []string
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			name := args[0]
			args = args[1:]
			subs, ok := cmds[name]
			switch {
			case placeholder(name):
				path = nil // companion <command> --help: any command; only the flags every command has are checked
			case !ok:
				t.Errorf("%s: companion %s: the program has no command %q (companion help lists %v)", c.where, strings.Join(c.args, " "), name, slices.Sorted(mapKeys(cmds)))
				continue
			case len(subs) > 0:
				if len(args) == 0 || strings.HasPrefix(args[0], "-") {
					t.Errorf("%s: companion %s: %s needs a subcommand (%s)", c.where, strings.Join(c.args, " "), name, strings.Join(subs, ", "))
					continue
				}
				for _, sub := range strings.Split(args[0], "|") {
					if !placeholder(sub) && !slices.Contains(subs, sub) {
						t.Errorf("%s: companion %s: %s has no subcommand %q (it has %s)", c.where, strings.Join(c.args, " "), name, sub, strings.Join(subs, ", "))
					}
				}
				path = []string{name, strings.Split(args[0], "|")[0]}
				args = args[1:]
			case name == "help":
				for _, a := range args {
					if _, ok := cmds[a]; !ok && !placeholder(a) && !strings.HasPrefix(a, "-") {
						t.Errorf("%s: companion help %s: the program has no command %q", c.where, a, a)
					}
				}
				path = []string{name}
			default:
				path = []string{name}
			}
		}
		for i, a := range args {
			a = strings.Trim(a, "[]")
			if a == "--" {
				break
			}
			if !strings.HasPrefix(a, "-") || a == "-" {
				continue // a value or a positional argument
			}
			name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
			flags++
			if name == "help" || name == "h" || name == "version" {
				continue // every command has them (Main.Run)
			}
			if path == nil && len(c.args) > 0 && !strings.HasPrefix(c.args[0], "-") {
				t.Errorf("%s: companion %s: --%s of which command?", c.where, strings.Join(c.args, " "), name)
				continue
			}
			_, err := run(t, nil, append(slices.Clone(path), "--"+name+"=x", "--help")...)
			if err != nil && unknownFlagWords.MatchString(err.Error()) {
				t.Errorf("%s: companion %s: %v", c.where, strings.Join(c.args, " "), err)
				continue
			}
			// The value the docs give, written --flag=value or as the next word (not for a bool flag, which
			// answers "x" with "invalid boolean value"), must parse.
			boolFlag := err != nil && strings.Contains(err.Error(), "invalid boolean value")
			if !hasValue && !boolFlag && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				value, hasValue = strings.Trim(args[i+1], "[]"), true
			}
			if !hasValue || placeholder(value) || strings.ContainsAny(value, "$|") {
				continue
			}
			if _, err := run(t, nil, append(slices.Clone(path), "--"+name+"="+value, "--help")...); err != nil {
				t.Errorf("%s: companion %s: the value of --%s: %v", c.where, strings.Join(c.args, " "), name, err)
			}
			values++
		}
	}
	// The docs run more than thirty commands with more than forty flags; fewer means the reading lost some.
	if len(docCmds) < 30 || flags < 40 || values < 20 {
		t.Fatalf("found %d companion commands with %d flags and %d values in the docs: the reading is wrong", len(docCmds), flags, values)
	}
}

// withoutName reports whether an inline span is a command written without the program's name: a
// command and a flag (`sweep --once`), or a command and one of its subcommands (`items resolve`). A
// command's name alone is a word of the prose (`items`, the field).
func withoutName(span string, cmds map[string][]string) bool {
	words := strings.Fields(span)
	if len(words) < 2 {
		return false
	}
	subs, ok := cmds[words[0]]
	return ok && (strings.HasPrefix(words[1], "--") || slices.Contains(subs, words[1]))
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// envName is an environment variable of companion's own in the docs' words.
var envName = regexp.MustCompile(`\b(COMPANION|SLACK|MONGODB)_[A-Z0-9_]*[A-Z0-9]\b`)

// readsEnv are the functions of the code that read the environment variable their string argument
// names: os.Getenv, os.LookupEnv, Main.Getenv and Main.env, the getenv a command is given, the set and
// secretFromEnv of the Slack settings, the env of the proxy settings.
var readsEnv = regexp.MustCompile(`^(Getenv|LookupEnv|getenv|env|set|secretFromEnv)$`)

// envTheCodeReads returns the environment variables the Go code of the repository reads, tests
// included (their variables are documented too): the string arguments, or constants, of the calls of
// readsEnv; and NAME_FILE for NAME read by a function that also reads its argument + "_FILE".
func envTheCodeReads(t *testing.T) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && path != repoRoot) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "docs_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	str := func(e ast.Expr) string {
		if l, ok := e.(*ast.BasicLit); ok && l.Kind == token.STRING {
			s, _ := strconv.Unquote(l.Value)
			return s
		}
		return ""
	}
	consts := map[string]string{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if vs, ok := n.(*ast.ValueSpec); ok {
				for i, name := range vs.Names {
					if i < len(vs.Values) && str(vs.Values[i]) != "" {
						consts[name.Name] = str(vs.Values[i])
					}
				}
			}
			return true
		})
	}
	callee := func(c *ast.CallExpr) string {
		switch f := c.Fun.(type) {
		case *ast.Ident:
			return f.Name
		case *ast.SelectorExpr:
			return f.Sel.Name
		}
		return ""
	}
	value := func(e ast.Expr) string {
		switch e := e.(type) {
		case *ast.Ident:
			return consts[e.Name]
		case *ast.SelectorExpr:
			return consts[e.Sel.Name]
		}
		return str(e)
	}
	// withFile are the functions that read name + "_FILE" too.
	withFile := map[string]bool{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			var name string
			var body ast.Node
			switch n := n.(type) {
			case *ast.FuncDecl:
				name, body = n.Name.Name, n.Body
			case *ast.AssignStmt:
				if len(n.Lhs) == 1 && len(n.Rhs) == 1 {
					if id, ok := n.Lhs[0].(*ast.Ident); ok {
						if fl, ok := n.Rhs[0].(*ast.FuncLit); ok {
							name, body = id.Name, fl.Body
						}
					}
				}
			}
			if body == nil {
				return true
			}
			ast.Inspect(body, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok && readsEnv.MatchString(callee(c)) && len(c.Args) > 0 {
					if b, ok := c.Args[0].(*ast.BinaryExpr); ok && b.Op == token.ADD && str(b.Y) == "_FILE" {
						withFile[name] = true
					}
				}
				return true
			})
			return true
		})
	}
	read := map[string]bool{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			c, ok := n.(*ast.CallExpr)
			if !ok || !readsEnv.MatchString(callee(c)) {
				return true
			}
			for _, a := range c.Args {
				if v := value(a); envName.MatchString(v) {
					read[v] = true
					if withFile[callee(c)] {
						read[v+"_FILE"] = true
					}
				}
			}
			return true
		})
	}
	for _, must := range []string{"COMPANION_ADDR", "SLACK_BOT_TOKEN_FILE", "MONGODB_URI", "COMPANION_TEST_MONGODB_URI"} {
		if !read[must] {
			t.Fatalf("the code reads %s, and the reading of the code did not find it: it is wrong (found %v)", must, read)
		}
	}
	return read
}

// secretEnv is a configuration's secret_env: or a lookup header's {env: …}: the name of a variable that
// the deployment chooses, not one of companion's own.
var secretEnv = regexp.MustCompile(`(?:secret_env:|\{env:)\s*([A-Z_][A-Z0-9_]*)`)

// TestDocsEnvironmentVariables: every COMPANION_*, SLACK_* and MONGODB_* variable the docs name is one
// the code reads, but the names a configuration example chooses for its own secrets (secret_env:
// COMPANION_SECRET_N8N, and its _FILE form).
func TestDocsEnvironmentVariables(t *testing.T) {
	read := envTheCodeReads(t)
	docs := docFiles(t)
	chosen := map[string]bool{}
	for _, d := range docs {
		b, err := os.ReadFile(filepath.Join(repoRoot, d.name))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range secretEnv.FindAllStringSubmatch(string(b), -1) {
			chosen[m[1]], chosen[m[1]+"_FILE"] = true, true
		}
	}
	n := 0
	for _, d := range docs {
		b, err := os.ReadFile(filepath.Join(repoRoot, d.name))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, name := range envName.FindAllString(line, -1) {
				n++
				if !read[name] && !chosen[name] {
					t.Errorf("%s:%d: %s: the code reads no such environment variable", d.name, i+1, name)
				}
			}
		}
	}
	if n < 50 {
		t.Fatalf("found %d names of environment variables in the docs: the reading is wrong", n)
	}
}

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

// proseFlag is an inline span that begins with a flag: `--item-cache`, `--floor DIR`.
var proseFlag = regexp.MustCompile(`^--([a-z][a-z0-9-]*)`)

// otherPrograms are the programs whose flags the docs name in prose too; a flag span followed by one
// of them ("`--add-host=…` to `docker run`") is that program's.
var otherPrograms = regexp.MustCompile("^[^.;]{0,12}`?(docker|curl|npm|n8n|go test|openssl)\\b")

// TestDocsFlagsInProse: a flag the docs name in prose, out of a command (`--floor DIR`), is a flag of
// one of the commands at least: each is asked of every command's parser, as in TestDocsCommandsAndFlags.
func TestDocsFlagsInProse(t *testing.T) {
	cmds := cliCommands(t)
	var paths [][]string
	for name, subs := range cmds {
		switch {
		case name == "help":
		case len(subs) == 0:
			paths = append(paths, []string{name})
		default:
			for _, sub := range subs {
				paths = append(paths, []string{name, sub})
			}
		}
	}
	known := map[string]bool{"help": true, "h": true, "version": true} // every command's (Main.Run)
	accepted := func(name string) bool {
		if v, ok := known[name]; ok {
			return v
		}
		known[name] = false
		for _, p := range paths {
			if _, err := run(t, nil, append(slices.Clone(p), "--"+name+"=x", "--help")...); err == nil || !unknownFlagWords.MatchString(err.Error()) {
				known[name] = true
				break
			}
		}
		return known[name]
	}
	n := 0
	for _, d := range docFiles(t) {
		for _, s := range d.spans {
			m := proseFlag.FindStringSubmatch(s.text)
			if m == nil || otherPrograms.MatchString(strings.TrimSpace(s.after)) {
				continue
			}
			n++
			if !accepted(m[1]) {
				t.Errorf("%s:%d: `%s`: no command of the program has the flag --%s", d.name, s.line, s.text, m[1])
			}
		}
	}
	if n < 50 {
		t.Fatalf("found %d flags in the prose of the docs: the reading is wrong", n)
	}
}

// helpFlag is one flag of a command's --help as the flag package prints it: "  -addr host:port" and its
// description on the lines below, with "(env NAME)" and "(default "…")" in it.
var helpFlag = regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)[^\n]*\n((?:    \t[^\n]*\n?)+)`)

// TestDocsServeSettingsTable: the table "Flags and environment" of docs/configuration.md, and the
// shorter one of README.md's Configuration, agree with serve's own --help: every flag of the table is
// one of serve's, with the environment variable and the default serve names for it (the default cell
// begins with it: "none (YAML file)" for no default); configuration.md's has a row for every flag of serve.
func TestDocsServeSettingsTable(t *testing.T) {
	help, err := run(t, nil, "serve", "--help")
	if err != nil {
		t.Fatal(err)
	}
	type flagHelp struct{ env, def string }
	serve := map[string]flagHelp{}
	for _, m := range helpFlag.FindAllStringSubmatch(help, -1) {
		var f flagHelp
		if e := regexp.MustCompile(`\(env ([A-Z0-9_]+(?:=\S+)?)\)`).FindStringSubmatch(m[2]); e != nil {
			f.env = e[1]
		}
		if d := regexp.MustCompile(`\(default "([^"]*)"\)`).FindStringSubmatch(m[2]); d != nil {
			f.def = d[1]
		}
		serve[m[1]] = f
	}
	if len(serve) < 5 || serve["addr"].env != "COMPANION_ADDR" {
		t.Fatalf("read serve's flags %v from its --help: the reading is wrong", serve)
	}
	for _, doc := range []struct{ name, section string }{
		{"docs/configuration.md", "## Flags and environment\n"}, {"README.md", "## Configuration\n"},
	} {
		b, err := os.ReadFile(filepath.Join(repoRoot, doc.name))
		if err != nil {
			t.Fatal(err)
		}
		_, table, ok := strings.Cut(string(b), doc.section)
		if !ok {
			t.Fatalf("%s has no section %s", doc.name, strings.TrimSpace(doc.section))
		}
		row := regexp.MustCompile("^\\| `--([a-z][a-z0-9-]*)` \\| `([^`]*)` \\| ([^|]*) \\|")
		seen := map[string]bool{}
		for _, line := range strings.Split(table, "\n") {
			if strings.HasPrefix(line, "## ") {
				break
			}
			m := row.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			name, env, def := m[1], m[2], strings.TrimSpace(m[3])
			seen[name] = true
			f, ok := serve[name]
			switch {
			case !ok:
				t.Errorf("%s: the row of --%s: serve has no such flag", doc.name, name)
				continue
			case env != f.env:
				t.Errorf("%s: the row of --%s names the environment variable %s; serve --help names %q", doc.name, name, env, f.env)
			}
			switch want := "`" + f.def + "`"; {
			case f.def == "" && !strings.HasPrefix(def, "none") && !strings.HasPrefix(def, "off"):
				t.Errorf("%s: the row of --%s gives the default %s; serve has none (write none or off)", doc.name, name, def)
			case f.def != "" && !strings.HasPrefix(def, want):
				t.Errorf("%s: the row of --%s gives the default %s; serve's is %s", doc.name, name, def, want)
			}
		}
		if len(seen) < 3 {
			t.Errorf("%s: found %d rows of serve's flags in its table: the reading is wrong", doc.name, len(seen))
		}
		for name := range serve {
			if !seen[name] && doc.name == "docs/configuration.md" {
				t.Errorf("%s: serve's flag --%s has no row in the table Flags and environment", doc.name, name)
			}
		}
	}
}

// TestDocsFlagTables: every table of the docs whose first column is "flag" lists the flags of one
// command: some command of the program accepts every flag of it (asked of its parser, as in
// TestDocsCommandsAndFlags). A row whose flag is "–" is a setting with no flag.
func TestDocsFlagTables(t *testing.T) {
	cmds := cliCommands(t)
	var paths [][]string
	for name, subs := range cmds {
		switch {
		case name == "help":
		case len(subs) == 0:
			paths = append(paths, []string{name})
		default:
			for _, sub := range subs {
				paths = append(paths, []string{name, sub})
			}
		}
	}
	slices.SortFunc(paths, func(a, b []string) int { return strings.Compare(strings.Join(a, " "), strings.Join(b, " ")) })
	cell := regexp.MustCompile("^\\| `--([a-z][a-z0-9-]*)[^`]*` \\|")
	tables := 0
	for _, d := range docFiles(t) {
		b, err := os.ReadFile(filepath.Join(repoRoot, d.name))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		for i, line := range lines {
			if !strings.HasPrefix(line, "| flag |") {
				continue
			}
			tables++
			var flags []string
			for _, row := range lines[i+1:] {
				if !strings.HasPrefix(row, "|") {
					break
				}
				if m := cell.FindStringSubmatch(row); m != nil && m[1] != "help" && m[1] != "version" {
					flags = append(flags, m[1])
				}
			}
			var owner []string
			for _, p := range paths {
				all := true
				for _, f := range flags {
					if _, err := run(t, nil, append(slices.Clone(p), "--"+f+"=x", "--help")...); err != nil && unknownFlagWords.MatchString(err.Error()) {
						all = false
						break
					}
				}
				if all {
					owner = p
					break
				}
			}
			if owner == nil {
				t.Errorf("%s:%d: no command of the program has all the flags of the table: %v", d.name, i+1, flags)
			}
		}
	}
	if tables < 4 {
		t.Fatalf("found %d tables of flags in the docs: the reading is wrong", tables)
	}
}

// TestDocsCommandsRunAsWritten: the operator commands the docs write whole (items list|show|resolve,
// stats, slack manifest, which only prints, and templates render, which writes into a directory of the
// test instead of its --out; a synopsis with placeholders, KEY or '…', or the command's name alone, `items resolve`, is not run) run as written against a fresh service: a
// value the flag parser takes but the command or the API refuses (a state that does not exist, evidence
// too short) fails here. The items the examples name are not in the fresh ledger: show and resolve
// answer not_found, which is fine; any other refusal is not.
func TestDocsCommandsRunAsWritten(t *testing.T) {
	cmds := cliCommands(t)
	svc := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": t.TempDir(), "COMPANION_SWEEP_EVERY": "@every 1h"})
	env := map[string]string{"COMPANION_URL": "http://" + svc.Addr()}
	n := 0
	for _, c := range companionCommands(t, docFiles(t), cmds) {
		if c.mistake || len(c.args) == 0 || !slices.Contains([]string{"items", "stats", "slack", "templates"}, c.args[0]) {
			continue
		}
		args := make([]string, len(c.args))
		whole := true
		for i, a := range c.args {
			args[i] = strings.Trim(a, "[]")
			whole = whole && !placeholder(a) && !strings.Contains(a, "|")
			if i > 0 && c.args[i-1] == "--out" {
				args[i] = t.TempDir() // templates render writes there: into the test's directory instead
			}
		}
		pathLen := 1
		if len(cmds[c.args[0]]) > 0 {
			pathLen = 2 // items list, slack manifest
		}
		if !whole || len(c.args) <= pathLen {
			continue // a synopsis, or the command's name alone, in prose (`items resolve`)
		}
		n++
		if _, err := run(t, env, args...); err != nil && !strings.HasPrefix(err.Error(), "not_found ") {
			t.Errorf("%s: companion %s: %v", c.where, strings.Join(c.args, " "), err)
		}
	}
	if n < 8 {
		t.Fatalf("ran %d operator commands of the docs: the reading is wrong", n)
	}
}
