package blueprints

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// Folders the rendered templates are written to, relative to the output directory.
const (
	N8nDir  = "n8n-templates"
	MakeDir = "make-templates"
)

// encode renders v as indented JSON with a trailing newline. HTML escaping is off so the
// JavaScript and mappings inside stay readable (`&&`, `<`).
func encode(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// HandWritten are the files in the template folders that the generator does not produce: the
// template using the n8n community node (n8n-node/, package n8n-nodes-companion). It needs that
// package installed in n8n, so it stays out of Templates(), whose every n8n workflow the e2e imports
// into a plain n8n. go test ./blueprints checks it structurally instead of byte for byte.
var HandWritten = []string{N8nDir + "/guarded-write-node.json"}

// Render returns every generated file, keyed by its slash-separated path relative to the output
// directory. The same settings always give the same bytes.
func Render(s Settings) (map[string][]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, t := range Templates() {
		b, err := encode(RenderN8n(t, s))
		if err != nil {
			return nil, fmt.Errorf("render %s for n8n: %w", t.Slug, err)
		}
		files[N8nDir+"/"+t.Slug+".json"] = b
		if t.N8nOnly {
			continue
		}
		b, err = encode(RenderMake(t, s))
		if err != nil {
			return nil, fmt.Errorf("render %s for Make: %w", t.Slug, err)
		}
		files[MakeDir+"/"+t.Slug+".blueprint.json"] = b
	}
	files[N8nDir+"/README.md"] = []byte(n8nReadme(s))
	files[MakeDir+"/README.md"] = []byte(makeReadme(s))
	return files, nil
}

// WriteFiles writes the rendered files below dir and returns their paths, sorted. A file that already holds
// the bytes it would write is left as it is; any other file of the same name is replaced (Changed finds
// those first).
func WriteFiles(dir string, files map[string][]byte) ([]string, error) {
	paths := sortedPaths(files)
	for _, p := range paths {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if have, err := os.ReadFile(full); err == nil && bytes.Equal(have, files[p]) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(full, files[p], 0o644); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

// Changed returns the paths, sorted, of the files below dir that exist and hold other bytes than files
// would write there: a rendering of other settings, or a copy someone edited. A file that does not exist,
// or holds the same bytes, is not changed. It fails only when an existing file cannot be read.
func Changed(dir string, files map[string][]byte) ([]string, error) {
	var changed []string
	for _, p := range sortedPaths(files) {
		have, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p)))
		switch {
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
			// Not there, or --out (or a folder in it) is a file: WriteFiles says so.
		case err != nil:
			return nil, err
		case !bytes.Equal(have, files[p]):
			changed = append(changed, p)
		}
	}
	return changed, nil
}

func sortedPaths(files map[string][]byte) []string {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return paths
}

// changedFiles is render's refusal to replace files that differ from what it would write; it matches
// ErrUsage, as the command line lacks --force.
type changedFiles struct {
	out   string
	paths []string
}

func (e changedFiles) Is(target error) bool { return target == ErrUsage }

func (e changedFiles) Error() string {
	const shown = 8
	names := make([]string, 0, shown)
	for _, p := range e.paths[:min(len(e.paths), shown)] {
		names = append(names, filepath.Join(e.out, filepath.FromSlash(p)))
	}
	more := ""
	if len(e.paths) > shown {
		more = fmt.Sprintf(" and %d more", len(e.paths)-shown)
	}
	what := fmt.Sprintf("%d files differ", len(e.paths))
	if len(e.paths) == 1 {
		what = "1 file differs"
	}
	return fmt.Sprintf("templates render: %s from what it would write, so it wrote nothing: %s%s (edited copies, or a rendering "+
		"with other flags); render into a new folder to keep them, or give --force to replace them", what, strings.Join(names, ", "), more)
}

// ErrUsage is wrapped by the errors Command returns for a mistake in the command line (an unknown flag, a
// missing --out, a --url that is not an absolute http(s) URL), which the program answers with exit 2.
var ErrUsage = errors.New("usage")

// usageError is a command-line mistake: its message is the mistake, and it matches ErrUsage.
type usageError struct{ error }

func (e usageError) Is(target error) bool { return target == ErrUsage }

// Command runs `companion templates …`. The only subcommand is render:
//
//	companion templates render --url http://companion:8080 --out DIR [--write-url …] [--lookup-url …]
//	    [--credential companion] [--credential-id ID] [--token …] [--write-timeout-ms 10000]
//	    [--error-workflow-id ID] [--claim-workflow-id ID] [--report-workflow-id ID] [--force]
//
// A file in --out that exists and differs from what render would write is not replaced without --force:
// render then writes nothing and names them (ErrUsage). Rendering the same files again writes nothing and
// succeeds.
//
// args may start with "templates" (the word the main binary dispatched on) or with "render". Help
// (-h, --help, no subcommand, or "help") goes to stdout and is not an error.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "templates" {
		args = args[1:]
	}
	if len(args) == 0 || isHelp(args[0]) || args[0] == "help" {
		fmt.Fprint(stdout, commandSynopsis+forEveryFlag)
		return nil
	}
	if args[0] != "render" {
		return usageError{fmt.Errorf("templates: unknown subcommand %q; the only one is render (run \"companion templates --help\")", args[0])}
	}
	d := DefaultSettings()
	fs := flag.NewFlagSet("templates render", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s := d
	fs.StringVar(&s.ServiceURL, "url", d.ServiceURL, "companion's base URL as the workflows reach it")
	out := fs.String("out", "", "directory to write n8n-templates/ and make-templates/ into (required)")
	force := fs.Bool("force", false, "replace files in --out that differ from what it would write (edited copies); without it render refuses and writes nothing")
	fs.StringVar(&s.WriteURL, "write-url", d.WriteURL, "the example write in the slot (POST, creates one record)")
	fs.StringVar(&s.LookupURL, "lookup-url", d.LookupURL, "the example lookup of the lookup-reconcile template (GET ?reference=)")
	fs.StringVar(&s.CredentialName, "credential", d.CredentialName, "name of the n8n Bearer Auth credential holding the companion token")
	fs.StringVar(&s.CredentialID, "credential-id", d.CredentialID, "id of that credential in your n8n (optional)")
	fs.StringVar(&s.Token, "token", d.Token, "what the Make blueprints put after \"Bearer \" (a placeholder by default)")
	fs.IntVar(&s.WriteTimeoutMillis, "write-timeout-ms", d.WriteTimeoutMillis, "how long the write may take before it counts as a timeout (unknown)")
	fs.StringVar(&s.ErrorWorkflowID, "error-workflow-id", d.ErrorWorkflowID, "id of the imported error workflow, set as the n8n workflows' error workflow")
	fs.StringVar(&s.ClaimWorkflowID, "claim-workflow-id", d.ClaimWorkflowID, "id of the imported sub-workflow companion: claim, called by guarded-write-subworkflows")
	fs.StringVar(&s.ReportWorkflowID, "report-workflow-id", d.ReportWorkflowID, "id of the imported sub-workflow companion: report, called by guarded-write-subworkflows")
	if err := fs.Parse(args[1:]); errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, commandSynopsis+"\nflags:\n")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return nil
	} else if err != nil {
		return usageError{fmt.Errorf("templates render: %w (run \"companion templates render --help\")", err)}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("templates render: unexpected argument %q (run \"companion templates render --help\")", fs.Arg(0))}
	}
	// "https://companion.example.com/" names the same service; the workflows append paths to it.
	s.ServiceURL = strings.TrimRight(s.ServiceURL, "/")
	if *out == "" {
		return usageError{errors.New("templates render: --out is required: the folder to write n8n-templates/ and make-templates/ into " +
			"(e.g. companion templates render --url https://companion.example.com --out ./my-templates)")}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.Validate(); err != nil {
		return usageError{fmt.Errorf("templates render: %w", err)}
	}
	files, err := Render(s)
	if err != nil {
		return err
	}
	if !*force {
		changed, err := Changed(*out, files)
		if err != nil {
			return fmt.Errorf("templates render: cannot read what is in --out %s (%w): give a folder this user can read and write", *out, err)
		}
		if len(changed) > 0 {
			return usageError{changedFiles{out: *out, paths: changed}}
		}
	}
	paths, err := WriteFiles(*out, files)
	if err != nil {
		return fmt.Errorf("templates render: cannot write into --out %s (%w): give a folder this user can write, or one that does not exist yet", *out, err)
	}
	for _, p := range paths {
		fmt.Fprintln(stdout, filepath.Join(*out, filepath.FromSlash(p)))
	}
	return nil
}

func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

const commandSynopsis = `usage: companion templates render --url URL --out DIR [flags]

Renders the n8n workflows (n8n-templates/) and Make blueprints (make-templates/) with your own
defaults written into every file: companion's URL as the workflows reach it, the example write and
lookup, the n8n credential, the error workflow's id. The files are the ones in this repository,
byte for byte when rendered with the defaults; docs/templates.md is the guide. A file in --out that
differs from what it would write (an edited copy) is kept: render then writes nothing and names it;
--force replaces it.
`

// forEveryFlag ends the group's help ("templates --help"), which does not list render's flags.
const forEveryFlag = `Run "companion templates render --help" for every flag.
`
