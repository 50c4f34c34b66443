package cli

import (
	"context"
	"errors"
	"net"
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
		return receiverError(sandbox.Command(ctx, args, m.Stdout, m.Stderr))
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
	return errors.New(strings.TrimPrefix(err.Error(), "receiver: "))
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
	return blueprints.Command(ctx, args, m.Stdout, m.Stderr)
}
