package cli

import (
	"context"
	"errors"
	"io"

	"github.com/replaysafe/companion/acceptance"
)

// The file sorts after main.go, whose init sets the table this one appends to.
func init() {
	commands = append(commands,
		command{"acceptance", "run the replay-safety acceptance suite against a service and a sandbox receiver", (*Main).acceptance})
}

// acceptance runs the suite (docs/acceptance.md); a failed case makes the program exit with status 1.
func (m *Main) acceptance(ctx context.Context, args []string) error {
	err := acceptance.CommandEnv(ctx, args, m.Stdout, m.Stderr, m.Getenv)
	if errors.Is(err, acceptance.ErrUsage) {
		return m.delegatedUsage("acceptance", err, func(w io.Writer) { _ = acceptance.CommandEnv(ctx, []string{"--help"}, w, io.Discard, m.Getenv) })
	}
	return err
}
