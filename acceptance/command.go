package acceptance

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// ErrFailed is returned by Command when the suite ran and at least one case failed; the caller exits
// with status 1.
var ErrFailed = errors.New("acceptance: at least one case failed")

// Command runs `companion acceptance`: it parses args (the arguments after "acceptance"), starts an
// in-process service and receiver unless --service / --receiver name deployed ones, runs the suite,
// prints a progress line per case and then the table (or, with --json, one JSON document on stdout and
// the progress on stderr). It returns ErrFailed when a case failed, another error when the suite could
// not run, nil when every case passed. --help prints the usage to stdout and returns nil.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("companion acceptance", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	service := fs.String("service", "", "URL of a deployed companion service (default: start one in-process on a temporary ledger)")
	token := fs.String("token", "", "bearer token for --service, role workflow or operator")
	operatorToken := fs.String("operator-token", "", "bearer token of role operator for the cases where an owner resolves an item (default: --token)")
	receiver := fs.String("receiver", "", "URL of a running sandbox receiver (default: start one in-process)")
	store := fs.String("store", "sqlite", "store of the in-process service: sqlite (temporary file) or mongodb (MONGODB_URI)")
	asJSON := fs.Bool("json", false, "print the result as JSON on stdout (progress goes to stderr)")
	only := fs.String("only", "", "comma-separated case ids to run (default: all)")
	parallel := fs.Int("parallel", 4, "cases run at once (the key-retention case always runs alone)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout, fs)
			return nil
		}
		printUsage(stderr, fs)
		return fmt.Errorf("acceptance: %w", err)
	}
	if fs.NArg() > 0 {
		printUsage(stderr, fs)
		return fmt.Errorf("acceptance: unexpected argument %q", fs.Arg(0))
	}
	if *service == "" && (*token != "" || *operatorToken != "") {
		return errors.New("acceptance: --token and --operator-token are for --service; the in-process service runs open on loopback")
	}
	if *service != "" && *store != "sqlite" {
		return errors.New("acceptance: --store chooses the in-process service's store; a deployed service (--service) uses its own")
	}

	opts := Options{Parallel: *parallel}
	if *only != "" {
		for _, id := range strings.Split(*only, ",") {
			opts.Only = append(opts.Only, strings.TrimSpace(id))
		}
	}
	if *service == "" {
		cfg := InProcessConfig{}
		switch *store {
		case "sqlite":
		case "mongodb":
			uri := os.Getenv("MONGODB_URI")
			if uri == "" {
				return errors.New("acceptance: --store mongodb needs MONGODB_URI")
			}
			cfg.OpenStore, cfg.StoreName = mongoStore(uri), "mongodb (in-process service)"
		default:
			return fmt.Errorf("acceptance: --store must be sqlite or mongodb, not %q", *store)
		}
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
		WriteTable(stdout, res)
	}
	if res.Failed > 0 {
		return ErrFailed
	}
	return nil
}

func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `Usage: companion acceptance [flags]

Runs the replay-safety acceptance suite: the twelve cases of seed 000 and the
ones this project adds, each as a workflow would run them (before-write, the
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
