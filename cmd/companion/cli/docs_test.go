package cli_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/cmd/companion/cli"
)

// The tests of docs*_test.go keep what README.md, docs/*.md and the packages' READMEs tell a newcomer to type or write in step
// with the code: the commands and their flags (TestDocsCommandsAndFlags, TestDocsCommandsRunAsWritten;
// docsflags_test.go: the flags named in prose and in tables), the environment variables
// (docsenv_test.go) and the configuration files (docsconfig_test.go). They read
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

// docFiles returns README.md, docs/*.md but the performance log, and the packages' README.md (the
// generated ones of the templates included: their generator is then what to fix), each with its blocks
// and spans.
func docFiles(t *testing.T) []docFile {
	t.Helper()
	names := []string{filepath.Join(repoRoot, "README.md")}
	for _, pattern := range []string{"docs/*.md", "*/README.md", "*/*/README.md"} {
		found, err := filepath.Glob(filepath.Join(repoRoot, pattern))
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, found...)
	}
	var out []docFile
	seen := map[string]bool{}
	for _, path := range names {
		name, _ := filepath.Rel(repoRoot, path)
		name = filepath.ToSlash(name)
		if name == "docs/performance-log.md" || seen[name] || strings.Contains(name, "node_modules/") || strings.Contains(name, "/.") {
			continue // a dated history (see above), docs/README.md found twice, or not ours
		}
		seen[name] = true
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, docFile{name: name, blocks: readmeBlocks(t, path), spans: inlineSpans(string(b))})
	}
	if len(out) < 15 {
		t.Fatalf("found %d Markdown files in README.md, docs/ and the packages", len(out))
	}
	return out
}

// backticks returns the length of the run of backticks at p[i:], 0 when p[i] is not one.
func backticks(p string, i int) int {
	n := 0
	for i+n < len(p) && p[i+n] == '`' {
		n++
	}
	return n
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
			n := backticks(p, i)
			if n == 0 {
				i++
				continue
			}
			end := -1
			for j := i + n; j < len(p); {
				m := backticks(p, j)
				if m == 0 {
					j++
					continue
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
		case strings.HasPrefix(strings.TrimLeft(line, " "), "```"):
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

// outputLine is a line of the program's output that begins with its name: "companion acceptance, run …",
// the receiver's start line "companion receiver listening on http://…".
var outputLine = regexp.MustCompile(`^companion (\S+,|receiver listening on )`)

// commandStart matches an inline span that begins with a command: environment assignments, then
// companion itself (./companion, go run ./cmd/companion) or time running it.
var commandStart = regexp.MustCompile(`^([A-Z_][A-Z0-9_]*=\S*\s+)*(companion|\S*/companion|go run \S*/companion|\S*time\s.*\scompanion)(\s|$)`)

// companionCommands returns every companion command of the docs: in shell blocks, and in the inline
// code spans that begin with one (a span in prose such as `companion refused the claim` inside a JSON
// message is no command).
func companionCommands(t *testing.T, docs []docFile, cmds map[string][]string) []docCommand {
	t.Helper()
	var out []docCommand
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
			case !commandStart.MatchString(s.text), !strings.Contains(s.text, " "), outputLine.MatchString(s.text):
				// Not a command, or the program's name or path alone (`./cmd/companion`,
				// `https://ops.example.com/companion`): a name in prose.
			default:
				// `companion items` alone: an example of a mistake, which the program must refuse.
				add(fmt.Sprintf("%s:%d", d.name, s.line), s.text, strings.HasPrefix(after, "alone"))
			}
		}
	}
	return out
}

// envAssignment is a shell word that sets an environment variable for the command after it.
var envAssignment = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`)

// afterCompanion returns the words of a command line after companion, when the line runs companion:
// after environment assignments, exec, go run, or time and its options. go build/install
// ./cmd/companion builds it and is not a run. The words end at a pipe, a redirection or a list operator.
func afterCompanion(words []string) ([]string, bool) {
	i := 0
	for i < len(words) {
		w := words[i]
		switch {
		case envAssignment.MatchString(w), w == "exec", w == "sudo", w == "nohup":
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
				// companion help COMMAND [SUBCOMMAND]: a command, then one of its subcommands.
				var of []string
				for _, a := range args {
					if placeholder(a) || strings.HasPrefix(a, "-") {
						continue
					}
					if of == nil {
						subs, ok := cmds[a]
						if !ok {
							t.Errorf("%s: companion help %s: the program has no command %q", c.where, a, a)
						}
						of = append(slices.Clone(subs), "") // not nil: the next word is a subcommand
					} else if !slices.Contains(of, a) {
						t.Errorf("%s: companion help %s: no subcommand %q", c.where, strings.Join(args, " "), a)
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
			// answers "x" with "is not true or false"), must parse.
			boolFlag := err != nil && strings.Contains(err.Error(), "is not true or false")
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

// allNotFound reports whether err and out are those of items resolve with several keys (or -) of which
// each one failed for not_found only.
func allNotFound(err error, out string) bool {
	if cli.ExitCode(err) != 1 || !strings.Contains(err.Error(), "keys not resolved") {
		return false
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if _, words, ok := strings.Cut(l, " not resolved: "); ok && !strings.HasPrefix(words, "not_found ") {
			return false
		}
	}
	return true
}

// TestDocsCommandsRunAsWritten: the commands the docs write whole (a synopsis with placeholders, KEY or
// '…', or a command's name alone in prose, `items resolve`, is not run) run as written, so that a value
// the flag parser takes but the command refuses after it (--mode, --dedupe, --outcome, a state that does
// not exist) fails here. Where running them as written would reach outside the test, the test changes
// one value, named in local: the directories they write (--out, --data-dir) are the test's, the
// addresses they listen on (--addr, --smtp-addr, and the receiver's when it names none) free loopback
// ports, bench's --url one where nothing listens, and --floor (bench's fsync measurement of a disk) is
// left out. How each runs:
//   - items list|show|resolve, stats, slack manifest, templates render: against a fresh service; the items
//     the examples name are not in its ledger, so show and resolve answer not_found, which is fine;
//   - bench: against an address where nothing listens, so that it stops at "cannot reach companion"
//     after checking its flags; any usage mistake (exit 2) fails;
//   - receiver: started until it says it listens, then stopped.
//
// serve, sweep and acceptance are not run: they need a configuration file, a ledger or the whole suite;
// their flags and values are checked by TestDocsCommandsAndFlags.
func TestDocsCommandsRunAsWritten(t *testing.T) {
	cmds := cliCommands(t)
	svc := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": t.TempDir(), "COMPANION_SWEEP_EVERY": "@every 1h"})
	env := map[string]string{"COMPANION_URL": "http://" + svc.Addr()}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := "http://" + l.Addr().String() // where nothing listens, once closed
	l.Close()
	local := map[string]func() string{
		"--out": func() string { return t.TempDir() }, "--data-dir": func() string { return t.TempDir() },
		"--addr": func() string { return "127.0.0.1:0" }, "--smtp-addr": func() string { return "127.0.0.1:0" },
		"--url": func() string { return nobody }, // bench's; templates render's --url is only written into the templates
	}
	ran := map[string]int{}
	for _, c := range companionCommands(t, docFiles(t), cmds) {
		if c.mistake || len(c.args) == 0 || !slices.Contains([]string{"items", "stats", "slack", "templates", "bench", "receiver"}, c.args[0]) {
			continue
		}
		var args []string
		whole := true
		for i := 0; i < len(c.args); i++ {
			a := strings.Trim(c.args[i], "[]")
			whole = whole && !placeholder(c.args[i]) && !strings.Contains(a, "|")
			switch name, _, _ := strings.Cut(a, "="); {
			case name == "--floor" && c.args[0] == "bench":
				if !strings.Contains(a, "=") {
					i++ // and its value
				}
				continue
			case local[name] != nil && (name != "--url" || c.args[0] == "bench"):
				args = append(args, name, local[name]())
				if !strings.Contains(a, "=") {
					i++
				}
				continue
			}
			args = append(args, a)
		}
		pathLen := 1
		if len(cmds[c.args[0]]) > 0 {
			pathLen = 2 // items list, slack manifest
		}
		if !whole || len(c.args) <= pathLen {
			continue // a synopsis, or the command's name alone, in prose (`items resolve`)
		}
		if c.args[0] == "receiver" && !slices.Contains(args, "--addr") {
			args = append(args, "--addr", local["--addr"]()) // not its default port, which may be taken
		}
		ran[c.args[0]]++
		where := fmt.Sprintf("%s: companion %s", c.where, strings.Join(c.args, " "))
		switch c.args[0] {
		case "bench":
			_, err := run(t, map[string]string{"COMPANION_URL": nobody}, args...)
			if err == nil || !strings.Contains(err.Error(), "cannot reach companion") {
				t.Errorf("%s: it should stop at cannot reach companion once its flags are checked: %v", where, err)
			}
		case "receiver":
			if err := runUntil(t, args, "companion receiver listening on"); err != nil {
				t.Errorf("%s: %v", where, err)
			}
		default:
			// items resolve - reads its keys from standard input, where the docs pipe them in: it gets one.
			out, err := runWithStdin(t, env, "doc-example-key\n", args...)
			if err != nil && !strings.HasPrefix(err.Error(), "not_found ") && !allNotFound(err, out) {
				t.Errorf("%s: %v", where, err)
			}
		}
	}
	for _, name := range []string{"items", "bench", "receiver", "templates", "slack"} {
		if ran[name] == 0 {
			t.Errorf("ran no %s command of the docs (ran %v): the reading is wrong", name, ran)
		}
	}
}

// runUntil runs a long-running command until it prints ready, and stops it; it returns the error that
// stopped it first, or that it never got ready.
func runUntil(t *testing.T, args []string, ready string) error {
	t.Helper()
	p := newProgram(nil)
	defer p.Close()
	if err := p.Run(context.Background(), args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- p.Wait(ctx) }()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if strings.Contains(p.out.String()+p.err.String(), ready) {
			return nil
		}
		select {
		case err := <-stopped:
			if err == nil {
				return fmt.Errorf("not %q within 10 s:\n%s%s", ready, p.out, p.err)
			}
			return err
		case <-tick.C:
		}
	}
}
