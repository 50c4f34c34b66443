package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"syscall"

	"github.com/replaysafe/companion/blueprints"
	"github.com/replaysafe/companion/sandbox"
)

func init() {
	commands = append(commands,
		command{"receiver", "run the sandbox receiver, a fake destination with fault injection", (*Main).receiver},
		command{"templates", "render the n8n workflows and Make blueprints with your own defaults", (*Main).templates},
	)
}

// receiver runs the sandbox receiver until the program is stopped.
func (m *Main) receiver(ctx context.Context, args []string) error {
	for _, a := range args {
		if isHelpFlag(a) {
			return sandbox.Command(ctx, args, m.Stdout, m.Stderr)
		}
	}
	m.keepRunning(ctx, "receiver", func(ctx context.Context) error {
		err := sandbox.Command(ctx, args, m.Stdout, m.Stderr)
		if errors.Is(err, sandbox.ErrUsage) {
			err = m.delegatedUsage("receiver", err, func(w io.Writer) { _ = sandbox.Command(ctx, []string{"--help"}, w, io.Discard) })
			// The running part's name says "receiver: " already.
			return &UsageError{Err: errors.New(strings.TrimPrefix(err.Error(), "receiver: "))}
		}
		return receiverError(err)
	})
	return nil
}

// receiverError words the receiver's error for the command line: without the "receiver: " that the
// running part's name already gives it, and with what to do when an address it listens on is taken. The
// address is the listen error's own (net.OpError), and the flag the one that chose it: --smtp-addr for the
// SMTP listener (its error is "receiver: smtp: …"), --addr otherwise.
func receiverError(err error) error {
	if err == nil {
		return nil
	}
	var op *net.OpError
	if (errors.Is(err, syscall.EADDRINUSE) || errors.Is(err, syscall.EACCES)) && errors.As(err, &op) && op.Addr != nil {
		flag := "--addr"
		if strings.HasPrefix(err.Error(), "receiver: smtp: ") {
			flag = "--smtp-addr"
		}
		return listenError(op.Addr.String(), flag, err)
	}
	msg := strings.TrimPrefix(strings.TrimPrefix(err.Error(), "receiver: "), "sandbox: ") // the library's name says nothing here
	if rest, ok := strings.CutPrefix(msg, "data dir: "); ok {
		return fmt.Errorf("--data-dir: %s; give a directory this user can write, or leave --data-dir out to keep the records in memory", rest)
	}
	return errors.New(msg)
}

// templates runs "companion templates render". Without a subcommand, or with one it does not know, it is a
// usage mistake as anywhere else: the usage on standard error and exit 2.
func (m *Main) templates(ctx context.Context, args []string) error {
	if len(args) == 0 {
		_ = blueprints.Command(ctx, nil, m.Stderr, m.Stderr) // prints the usage
		return usageErrorf("templates: name a subcommand: render")
	}
	if a := args[0]; a != "render" && a != "help" && !isHelpFlag(a) {
		return usageErrorf("templates: unknown subcommand %q; the only one is render (run \"companion templates --help\")", a)
	}
	err := blueprints.Command(ctx, args, m.Stdout, m.Stderr)
	if errors.Is(err, blueprints.ErrUsage) {
		return m.delegatedUsage("templates render", err, func(w io.Writer) { _ = blueprints.Command(ctx, []string{"render", "--help"}, w, io.Discard) })
	}
	return err
}

// undefinedFlag is the flag package's word for an unknown flag, as the commands whose flags another
// package parses (receiver, templates render, acceptance) return it.
var undefinedFlag = regexp.MustCompile(`flag provided but not defined: -{1,2}([^\s)]+)`)

// delegatedFlagMistake is the flag package's error for a value of a known flag it cannot parse, or for a
// flag given last without its value, inside the message of a command whose flags another package parses.
var delegatedFlagMistake = regexp.MustCompile(`invalid (?:boolean )?value "[^"]*" for (?:flag )?-[^\s:]+: parse error|flag needs an argument: -[^\s)]+`)

// flagLine is a flag's line in a command's --help: "  --addr" or "  -url string".
var flagLine = regexp.MustCompile(`(?m)^\s+-{1,2}([a-z][a-z0-9-]*)\b`)

// delegatedUsage makes a command-line mistake of a command whose flags another package parses read as
// the program's own do (Main.parse): an unknown flag named with two dashes and the one it most likely
// meant, from the flags its --help (printed by help) lists; any mistake exits 2.
func (m *Main) delegatedUsage(name string, err error, help func(io.Writer)) error {
	found := undefinedFlag.FindStringSubmatch(err.Error())
	if found == nil {
		// A value the flag package cannot parse, or none, worded as the program's own flags word it (flagMistake).
		msg := delegatedFlagMistake.ReplaceAllStringFunc(err.Error(), func(s string) string { return flagMistake(nil, errors.New(s)) })
		return &UsageError{Err: errors.New(msg)}
	}
	var b bytes.Buffer
	help(&b)
	var known []string
	for _, f := range flagLine.FindAllStringSubmatch(b.String(), -1) {
		known = append(known, f[1])
	}
	return unknownFlag(name, found[1], known)
}
