package acceptance

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// ErrFailed is returned by Command when the suite ran and at least one case failed; the caller exits
// with status 1.
var ErrFailed = errors.New("acceptance: at least one case failed")

// ErrUsage is wrapped by the errors Command returns for a mistake in the command line.
var ErrUsage = errors.New("usage")

// usageError is a command-line mistake: its message is the mistake, and it matches ErrUsage.
type usageError struct{ msg string }

func (e usageError) Error() string        { return e.msg }
func (e usageError) Is(target error) bool { return target == ErrUsage }

func usagef(format string, args ...any) error {
	return usageError{msg: fmt.Sprintf("acceptance: "+format+" (run \"companion acceptance --help\")", args...)}
}

// Command runs `companion acceptance`: it parses args (the arguments after "acceptance"), starts an
// in-process service and receiver unless --service / --receiver name deployed ones, runs the suite,
// prints a progress line per case and then the table (or, with --json, one JSON document on stdout and
// the progress on stderr). It returns ErrFailed when a case failed, another error when the suite could
// not run, nil when every case passed. --help prints the usage to stdout and returns nil. --store mongodb
// reads MONGODB_URI from the process environment, --store postgres POSTGRES_URL.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return CommandEnv(ctx, args, stdout, stderr, os.Getenv)
}

// CommandEnv is Command reading the environment through getenv, for a caller that owns the environment.
// Errors for command-line mistakes match ErrUsage.
func CommandEnv(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("companion acceptance", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	service := fs.String("service", "", "URL of a deployed companion service (default: start one in-process on a temporary ledger)")
	token := fs.String("token", "", "bearer token for --service, role workflow or operator (default: COMPANION_TOKEN, as the other commands; "+
		"a secret in the environment stays out of the process list and the shell's history)")
	operatorToken := fs.String("operator-token", "", "bearer token of role operator for the cases where an owner resolves an item (default: --token)")
	receiver := fs.String("receiver", "", "URL of a running sandbox receiver (default: start one in-process)")
	store := fs.String("store", "sqlite", "store of the in-process service: sqlite (temporary file), mongodb (MONGODB_URI) or postgres (POSTGRES_URL)")
	asJSON := fs.Bool("json", false, "print the result as JSON on stdout (progress goes to stderr)")
	wide := fs.Bool("wide", false, "print the result as one table, a row per case (several hundred columns wide)")
	only := fs.String("only", "", "comma-separated case ids to run (default: all)")
	parallel := fs.Int("parallel", 4, "cases run at once (the key-retention case always runs alone)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout, fs)
			return nil
		}
		return usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if *service == "" && (*token != "" || *operatorToken != "") {
		return usagef("--token and --operator-token are for --service; the in-process service runs open on loopback")
	}
	if *service != "" && *token == "" {
		*token = getenv("COMPANION_TOKEN")
	}
	if *service != "" && *store != "sqlite" {
		return usagef("--store chooses the in-process service's store; a deployed service (--service) uses its own")
	}
	if *store != "sqlite" && *store != "mongodb" && *store != "postgres" {
		return usagef("--store must be sqlite, mongodb or postgres, not %q", *store)
	}

	opts := Options{Parallel: *parallel}
	if *only != "" {
		for _, id := range strings.Split(*only, ",") {
			id = strings.TrimSpace(id)
			if !slices.ContainsFunc(Cases(), func(c Case) bool { return c.ID == id }) {
				return usagef("--only: no case %q (cases are 1-%d)", id, len(Cases()))
			}
			opts.Only = append(opts.Only, id)
		}
	}
	if *service == "" {
		cfg := InProcessConfig{}
		switch *store {
		case "sqlite":
		case "mongodb":
			uri := getenv("MONGODB_URI")
			if uri == "" {
				return usagef("--store mongodb needs MONGODB_URI")
			}
			cfg.OpenStore, cfg.StoreName = mongoStore(uri), "mongodb (in-process service)"
		case "postgres":
			url := getenv("POSTGRES_URL")
			if url == "" {
				return usagef("--store postgres needs POSTGRES_URL")
			}
			cfg.OpenStore, cfg.StoreName = postgresStore(url), "postgres (in-process service)"
		}
		if *receiver == "" {
			p, err := StartReceiver(ctx, InProcessConfig{})
			if err != nil {
				return err
			}
			defer p.Close()
			*receiver = p.ReceiverURL
		}
		cfg.ReceiverURL = *receiver
		p, err := StartService(ctx, cfg)
		if err != nil {
			return err
		}
		defer p.Close()
		*service, opts.Store, opts.ServiceVersion = p.ServiceURL, p.Store, p.Version
	}
	if *receiver == "" {
		p, err := StartReceiver(ctx, InProcessConfig{})
		if err != nil {
			return err
		}
		defer p.Close()
		*receiver = p.ReceiverURL
	}
	svc, err := NewService(*service, *token, *operatorToken)
	if err != nil {
		return fmt.Errorf("acceptance: %w", err)
	}
	rcv, err := NewReceiver(*receiver)
	if err != nil {
		return fmt.Errorf("acceptance: %w", err)
	}
	opts.Service, opts.Receiver = svc, rcv

	out := stdout
	if *asJSON {
		out = stderr
	}
	opts.Progress = out
	opts.OnStart = func(h Header) {
		WriteHeader(out, h)
		fmt.Fprintln(out)
	}
	res, err := Run(ctx, opts)
	if err != nil {
		return err
	}
	if *asJSON {
		if err := WriteJSON(stdout, res); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(stdout)
		if *wide {
			WriteTable(stdout, res)
		} else {
			WriteReport(stdout, res)
		}
	}
	if res.Failed > 0 {
		return ErrFailed
	}
	return nil
}

func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `Usage: companion acceptance [flags]

Runs the replay-safety acceptance suite: the twelve cases of a published
replay-safety test ("Workflow Retries Can Duplicate Business Actions: A 12-Case
Replay-Safety Test", see docs/why-a-ledger.md) and the ones this project adds,
each as a workflow would run them (before-write, the
write with an injected fault, after-write, replays), asserting both the ledger
(GET /v1/items/{key}) and the receiver's effects (GET /effects).

By default it starts its own service on a temporary ledger and its own sandbox
receiver. Against a deployed service, configure the destinations of
docs/acceptance.md there first. Exit status 1 when a case fails.

Flags:
`)
	fs.VisitAll(func(f *flag.Flag) {
		def := ""
		if f.DefValue != "" && f.DefValue != "false" {
			def = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "  --%s\n        %s%s\n", f.Name, f.Usage, def)
	})
}
