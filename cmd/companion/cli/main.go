// Package cli is the companion command: its subcommands, flags, environment and configuration file,
// and the wiring of the service. It lives outside package main so that tests can start the whole program
// in-process: NewMain, Run, Wait, Close. Nothing below cmd/ reads the environment; this package reads it
// only through Main.Getenv.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/replaysafe/companion/internal/typo"
)

// Version is the release, set at build time with -ldflags "-X github.com/replaysafe/companion/cmd/companion/cli.Version=v1.2.3".
var Version = "dev"

// ShutdownTimeout bounds a graceful stop: requests still running after it are cut off.
const ShutdownTimeout = 20 * time.Second

// Main is one run of the companion program.
type Main struct {
	// Stdin is what a command reads when told to (items resolve -); nil reads nothing.
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Getenv reads the environment. Tests give it a map instead of touching the process environment.
	Getenv func(string) string

	mu      sync.Mutex
	daemons []daemon
	addr    string
	// debugAddr is where --debug-addr serves the profiles, once it does.
	debugAddr string
}

// daemon is what a long-running command leaves running when Run returns.
type daemon struct {
	name string
	// done receives the error that stopped it before Close was called.
	done <-chan error
	// stop ends it gracefully within the context's deadline.
	stop func(ctx context.Context) error
}

// NewMain returns a Main on the process's standard streams and environment.
func NewMain() *Main {
	return &Main{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
}

// stdin is Stdin, or an empty reader when there is none.
func (m *Main) stdin() io.Reader {
	if m.Stdin == nil {
		return strings.NewReader("")
	}
	return m.Stdin
}

// command is one subcommand. run does the work of a one-shot command and returns; a long-running
// command starts, registers a daemon (m.keep) and returns once it serves.
type command struct {
	name    string
	summary string
	run     func(m *Main, ctx context.Context, args []string) error
}

// commands is the dispatch table. Further subcommands (receiver, templates, sweep, items, stats,
// acceptance) are added here, each in its own file. A one-shot command does its work in run. A command
// that serves until stopped starts in a goroutine under its own cancellable context and registers
// itself with m.keep (done: its result; stop: cancel and wait), so that Wait and Close handle it as they
// handle serve. The table is filled in init because help lists it.
var commands []command

func init() {
	commands = []command{
		{"serve", "run the HTTP service (the default)", (*Main).serve},
		{"version", "print the version", (*Main).version},
		{"help", "show help for a command", (*Main).help},
	}
}

func findCommand(name string) (command, bool) {
	i := slices.IndexFunc(commands, func(c command) bool { return c.name == name })
	if i < 0 {
		return command{}, false
	}
	return commands[i], true
}

// UsageError is a mistake in the command line; the program exits with status 2.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usageErrorf(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// ExitCode is the process status for the error Run, Wait or Close returned: 0, 2 for usage mistakes,
// 1 for anything else.
func ExitCode(err error) int {
	var ue *UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		return 2
	}
	return 1
}

// Run runs the command named by args (serve when none is named, or when args start with a flag). A
// long-running command returns once it is ready; Wait then blocks until it should stop.
func (m *Main) Run(ctx context.Context, args []string) error {
	if m.Getenv == nil {
		m.Getenv = os.Getenv
	}
	if len(args) > 0 && isHelpFlag(args[0]) {
		return m.help(ctx, nil) // "companion --help" is the program's help; "companion serve --help" is serve's
	}
	// "companion --version" and "companion <command> --version" print the version, as "companion version"
	// does, whatever the command: the flag is asked of every program and no command has one of its own.
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--version" || a == "-version" {
			return m.version(ctx, nil)
		}
	}
	name := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	cmd, ok := findCommand(name)
	if !ok {
		return unknownCommand(name)
	}
	return cmd.run(m, ctx, args)
}

// unknownCommand words a command the program does not have, with the one it most likely meant (sever:
// serve, two letters swapped) when one is at most two edits away: the commands are few and far apart.
func unknownCommand(name string) error {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	if guess := typo.Nearest(name, names, 3); guess != "" {
		return usageErrorf("unknown command %q (did you mean %s? run \"companion help\" for the list)", name, guess)
	}
	return usageErrorf("unknown command %q; run \"companion help\" for the list", name)
}

func isHelpFlag(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

// keep registers a long-running part that Wait watches and Close stops.
func (m *Main) keep(d daemon) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.daemons = append(m.daemons, d)
}

// keepRunning runs fn in a goroutine as a long-running part named name: Wait sees it end, Close cancels
// its context and waits for it.
func (m *Main) keepRunning(ctx context.Context, name string, fn func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		done <- fn(ctx)
	}()
	m.keep(daemon{name: name, done: done, stop: func(stopCtx context.Context) error {
		cancel()
		select {
		case <-finished:
			return nil
		case <-stopCtx.Done():
			return stopCtx.Err()
		}
	}})
}

// Addr returns the address the service listens on, once serve has started.
func (m *Main) Addr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addr
}

// DebugAddr is the address serve's --debug-addr listens on for the profiles, once it does ("" when off).
func (m *Main) DebugAddr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.debugAddr
}

// Wait blocks until ctx ends (a signal) or a long-running part stops by itself, and returns that part's
// error. It returns at once when nothing runs.
func (m *Main) Wait(ctx context.Context) error {
	m.mu.Lock()
	ds := slices.Clone(m.daemons)
	m.mu.Unlock()
	if len(ds) == 0 {
		return nil
	}
	stopped := make(chan error, len(ds))
	for _, d := range ds {
		if d.done == nil {
			continue
		}
		go func() {
			if err := <-d.done; err != nil {
				stopped <- fmt.Errorf("%s: %w", d.name, err)
			}
		}()
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-stopped:
		return err
	}
}

// Close stops what Run started, in reverse order, each within ShutdownTimeout: the HTTP server lets
// running requests finish, then the store closes. It is safe to call more than once.
func (m *Main) Close() error {
	m.mu.Lock()
	ds := m.daemons
	m.daemons = nil
	m.mu.Unlock()
	var errs []error
	for i := len(ds) - 1; i >= 0; i-- {
		ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
		if err := ds[i].stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ds[i].name, err))
		}
		cancel()
	}
	return errors.Join(errs...)
}

// flagSet is a subcommand's flags with what its help says.
type flagSet struct {
	*flag.FlagSet
	name     string
	synopsis string
}

// newFlags returns the flag set of a subcommand. Parsing prints nothing: help goes to Stdout on
// request, mistakes come back as errors.
func (m *Main) newFlags(name, synopsis string) *flagSet {
	fs := flag.NewFlagSet("companion "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, name: name, synopsis: synopsis}
}

func (m *Main) usage(fs *flagSet) {
	fmt.Fprintf(m.Stdout, "usage: companion %s [flags]\n\n%s\n", fs.name, fs.synopsis)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintln(m.Stdout, "\nflags:")
		fs.SetOutput(m.Stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
}

// parse parses args; it reports done when nothing more should happen: help was asked for (and
// printed), or the arguments are wrong (the error says how).
func (m *Main) parse(fs *flagSet, args []string) (done bool, err error) {
	err = fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		m.usage(fs)
		return true, nil
	case err != nil:
		if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
			var known []string
			fs.VisitAll(func(f *flag.Flag) { known = append(known, f.Name) })
			return true, unknownFlag(fs.name, name, known)
		}
		return true, usageErrorf("%s: %s (run \"companion %s --help\")", fs.name, flagMistake(fs.FlagSet, err), fs.name)
	case fs.NArg() > 0:
		return true, usageErrorf("%s: unexpected argument %q (run \"companion %s --help\")", fs.name, fs.Arg(0), fs.name)
	}
	return false, nil
}

// flagValue and flagWithoutValue are the flag package's words for a value it cannot parse and for a
// flag given last without its value.
var (
	flagValue        = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-([^\s:]+): (.*)$`)
	flagWithoutValue = regexp.MustCompile(`^flag needs an argument: -(\S+)$`)
)

// flagMistake words the flag package's parse error in the program's terms: the flag with two dashes, and
// what its value must be rather than Go's parser's words ("strconv.ParseBool: parsing …: invalid syntax").
func flagMistake(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if m := flagWithoutValue.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("--%s needs a value (--%s VALUE or --%s=VALUE)", m[1], m[1], m[1])
	}
	m := flagValue.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	value, name, why := m[1], m[2], m[3]
	var kind any
	if strings.HasPrefix(msg, "invalid boolean value") {
		kind = true
	}
	var f *flag.Flag
	if fs != nil { // nil: a command whose flags another package parses (delegatedUsage)
		f = fs.Lookup(name)
	}
	if f != nil {
		if g, ok := f.Value.(flag.Getter); ok {
			kind = g.Get()
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			kind = true // a bool of its own kind (items list --needs-person)
		}
	}
	switch kind.(type) {
	case bool:
		return fmt.Sprintf("--%s %q is not true or false (--%s alone is true; --%s=false)", name, value, name, name)
	case int, int64, uint, uint64:
		return fmt.Sprintf("--%s %q is not a whole number", name, value)
	case float64:
		return fmt.Sprintf("--%s %q is not a number", name, value)
	case time.Duration:
		return fmt.Sprintf("--%s %q is not a duration such as 90s or 4h", name, value)
	}
	if why == "parse error" {
		// A flag another package parses (templates render, receiver): its kind is not known here.
		return fmt.Sprintf("--%s %q is not a value it takes (its line in --help says what it takes)", name, value)
	}
	return fmt.Sprintf("--%s %q: %s", name, value, why)
}

// unknownFlag words an unknown flag of command cmd: with the known flag it most likely meant, one a
// letter or two away (--adr: --addr) or the only one it begins (--data: --data-dir).
func unknownFlag(cmd, name string, known []string) error {
	name = strings.TrimLeft(name, "-")
	guess := likely(name, known)
	if guess == "" && len(name) >= 2 {
		for _, k := range known {
			if strings.HasPrefix(k, name) {
				if guess != "" {
					guess = ""
					break
				}
				guess = k
			}
		}
	}
	if guess == "" && slices.Contains(known, "addr") && slices.Contains(addrSynonyms, strings.ToLower(name)) {
		// Other servers take a port or a host on its own: this one takes both in --addr.
		return usageErrorf("%s: unknown flag --%s (did you mean --addr? it takes host:port, such as --addr 127.0.0.1:8080; "+
			"run \"companion %s --help\")", cmd, name, cmd)
	}
	if guess != "" {
		return usageErrorf("%s: unknown flag --%s (did you mean --%s? run \"companion %s --help\")", cmd, name, guess, cmd)
	}
	return usageErrorf("%s: unknown flag --%s (run \"companion %s --help\" for its flags)", cmd, name, cmd)
}

// addrSynonyms are the flags other servers listen by, which --addr stands for here.
var addrSynonyms = []string{"port", "p", "listen", "bind", "host", "address", "listen-addr", "http-addr"}

// likely is the name of known that name most likely meant: one a letter or two away (nearest), or the
// same letters with two neighbours swapped (--itmes: --items), which an edit distance counts as two
// edits and so misses in a short name; "" when none is.
func likely(name string, known []string) string {
	if guess := nearest(name, known); guess != "" {
		return guess
	}
	lower := strings.ToLower(name)
	for _, k := range known {
		if len(k) != len(lower) || len(k) < 2 {
			continue
		}
		for i := 0; i+1 < len(k); i++ {
			if lower[i] != k[i] {
				if lower[i] == k[i+1] && lower[i+1] == k[i] && lower[i+2:] == k[i+2:] {
					return k
				}
				break
			}
		}
	}
	return ""
}

func (m *Main) version(_ context.Context, args []string) error {
	fs := m.newFlags("version", "Prints the version of companion and of the Go toolchain that built it.")
	if done, err := m.parse(fs, args); done {
		return err
	}
	fmt.Fprintf(m.Stdout, "companion %s (%s, %s/%s)\n", versionString(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}

func versionString() string {
	if Version != "dev" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return Version
}

func (m *Main) help(_ context.Context, args []string) error {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, ok := findCommand(args[0])
		if !ok {
			return unknownCommand(args[0])
		}
		// "companion help items list" is "companion items list --help": the subcommand's flags, not the
		// group's summary. The words after the command are passed on; the flags are left out.
		rest := slices.DeleteFunc(slices.Clone(args[1:]), func(a string) bool { return strings.HasPrefix(a, "-") })
		return cmd.run(m, context.Background(), append(rest, "--help"))
	}
	fmt.Fprint(m.Stdout, `companion makes the external writes of n8n and Make workflows replay-safe: ask before each
write (POST /v1/before-write), write with the returned idempotency key, report what happened
(POST /v1/after-write). A durable per-item ledger makes sure one intended effect is never told
"proceed" twice, and "we don't know" never turns into "not sent".

usage: companion [command] [flags]

commands:
`)
	for _, c := range commands {
		fmt.Fprintf(m.Stdout, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprint(m.Stdout, "\nRun \"companion <command> --help\" (or \"companion help <command>\") for a command's flags and\n"+
		"environment; \"companion --version\" prints the version. Without installing: go run ./cmd/companion <command>.\n")
	return nil
}
