package cli_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// commandPaths are the commands that parse flags, in order: each command without subcommands, and each
// subcommand (items list, slack manifest); not help, which takes none of its own.
func commandPaths(cmds map[string][]string) [][]string {
	var paths [][]string
	for _, name := range slices.Sorted(mapKeys(cmds)) {
		switch subs := cmds[name]; {
		case name == "help":
		case len(subs) == 0:
			paths = append(paths, []string{name})
		default:
			for _, sub := range subs {
				paths = append(paths, []string{name, sub})
			}
		}
	}
	return paths
}

// proseFlag is an inline span that begins with a flag: `--item-cache`, `--floor DIR`.
var proseFlag = regexp.MustCompile(`^--([a-z][a-z0-9-]*)`)

// otherPrograms are the programs whose flags the docs name in prose too; a flag span followed by one
// of them ("`--add-host=…` to `docker run`") is that program's.
var otherPrograms = regexp.MustCompile("^[^.;]{0,12}`?(docker|curl|npm|n8n|go test|openssl)\\b")

// TestDocsFlagsInProse: a flag the docs name in prose, out of a command (`--floor DIR`), is a flag of
// one of the commands at least: each is asked of every command's parser, as in TestDocsCommandsAndFlags.
func TestDocsFlagsInProse(t *testing.T) {
	paths := commandPaths(cliCommands(t))
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
	paths := commandPaths(cliCommands(t))
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
