package cli

import (
	"context"

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
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		done <- sandbox.Command(ctx, args, m.Stdout, m.Stderr)
	}()
	m.keep(daemon{name: "receiver", done: done, stop: func(stopCtx context.Context) error {
		cancel()
		select {
		case <-finished:
			return nil
		case <-stopCtx.Done():
			return stopCtx.Err()
		}
	}})
	return nil
}

func (m *Main) templates(ctx context.Context, args []string) error {
	return blueprints.Command(ctx, args, m.Stdout, m.Stderr)
}
