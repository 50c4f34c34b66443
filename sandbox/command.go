package sandbox

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"time"
)

// ErrUsage is wrapped by the errors Command returns for a mistake in the command line (an unknown flag,
// a bad value, an argument it does not take), which the program answers with exit 2.
var ErrUsage = errors.New("usage")

// usageError is a command-line mistake: its message is the mistake, and it matches ErrUsage.
type usageError struct{ error }

func (e usageError) Is(target error) bool { return target == ErrUsage }

// Command runs `companion receiver`: it parses args (the arguments after
// "receiver"), listens, prints one start line to stdout, logs one line per
// request to stderr, and serves until ctx is done, then shuts down gracefully.
//
// --help prints the usage to stdout and returns nil. Any other problem (a bad
// flag, an address in use) is returned for the caller to print and turn into
// an exit status; a bad flag's error says to run --help.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("companion receiver", flag.ContinueOnError)
	// The flag package's own printing is replaced by usage below, so that
	// --help goes to stdout and errors to stderr.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	addr := fs.String("addr", DefaultAddr, "address to listen on (host:port; port 0 picks a free one)")
	dedupe := fs.String("dedupe", string(DedupeKey), "how a repeated Idempotency-Key is treated: key (replay or 422) or none (always create)")
	var retention retentionFlag
	fs.Var(&retention, "key-retention", "forget an Idempotency-Key this long after its record was created: seconds (3600) or a duration (1h); 0 keeps keys forever")
	var lag retentionFlag
	fs.Var(&lag, "lookup-lag", "show a created record in GET /records only this long after its creation, as a lagging search index: seconds (30) or a duration (2m); 0 shows it at once")
	smtpAddr := fs.String("smtp-addr", "", "also answer SMTP on this address (host:port): a mail destination counted at GET /mail; empty: no SMTP")
	dataDir := fs.String("data-dir", "", "directory where records and keys are kept as JSON so a restart keeps them; empty keeps them in memory only")

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout, fs)
			return nil
		}
		return usageError{fmt.Errorf("receiver: %w (run \"companion receiver --help\")", err)}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("receiver: unexpected argument %q (run \"companion receiver --help\")", fs.Arg(0))}
	}

	if d := Dedupe(*dedupe); d != DedupeKey && d != DedupeNone {
		return usageError{fmt.Errorf("receiver: --dedupe must be %s or %s, not %q", DedupeKey, DedupeNone, *dedupe)}
	}
	rc, err := New(Config{
		Dedupe:       Dedupe(*dedupe),
		KeyRetention: retention.d,
		LookupLag:    lag.d,
		Logger:       slog.New(slog.NewTextHandler(stderr, nil)),
		DataDir:      *dataDir,
	})
	if err != nil {
		return fmt.Errorf("receiver: %w", err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", *addr)
	if err != nil {
		return fmt.Errorf("receiver: %w", err)
	}
	keys := "forever"
	if retention.d > 0 {
		keys = retention.d.String()
	}
	storage := "memory"
	if *dataDir != "" {
		storage = *dataDir
	}
	fmt.Fprintf(stdout, "companion receiver listening on http://%s (dedupe=%s, key_retention=%s, data=%s)\n",
		ln.Addr(), Dedupe(*dedupe), keys, storage)
	if *smtpAddr == "" {
		return rc.Serve(ctx, ln)
	}
	sl, err := lc.Listen(ctx, "tcp", *smtpAddr)
	if err != nil {
		ln.Close()
		return fmt.Errorf("receiver: smtp: %w", err)
	}
	fmt.Fprintf(stdout, "companion receiver answering SMTP on %s (messages counted at GET /mail)\n", sl.Addr())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	smtpDone := make(chan error, 1)
	go func() { smtpDone <- rc.ServeSMTP(ctx, sl) }()
	err = rc.Serve(ctx, ln)
	cancel()
	return errors.Join(err, <-smtpDone)
}

func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `Usage: companion receiver [flags]

Runs the sandbox receiver: a fake destination for tests and demos that creates
records (POST /records), honours or ignores Idempotency-Key, counts what it
created (GET /effects) and injects faults at named boundaries
(X-Sandbox-Fault header or POST /control/faults). See docs/sandbox-receiver.md.

Flags:
`)
	fs.VisitAll(func(f *flag.Flag) {
		def := ""
		if f.DefValue != "" {
			def = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "  --%s\n        %s%s\n", f.Name, f.Usage, def)
	})
}

// retentionFlag reads --key-retention as whole seconds or a Go duration.
type retentionFlag struct{ d time.Duration }

func (f *retentionFlag) String() string {
	if f == nil || f.d == 0 {
		return "0"
	}
	return f.d.String()
}

func (f *retentionFlag) Set(s string) error {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		f.d = time.Duration(n) * time.Second
	} else if f.d, err = time.ParseDuration(s); err != nil {
		return errors.New("want seconds (3600) or a duration (1h)")
	}
	if f.d < 0 {
		return errors.New("must not be negative")
	}
	return nil
}
