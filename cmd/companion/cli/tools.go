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
	m.keepRunning(ctx, "receiver", func(ctx context.Context) error {
		return sandbox.Command(ctx, args, m.Stdout, m.Stderr)
	})
	return nil
}

func (m *Main) templates(ctx context.Context, args []string) error {
	return blueprints.Command(ctx, args, m.Stdout, m.Stderr)
}
