// Command companion makes the external writes of n8n and Make workflows replay-safe. The program lives
// in package cli; this file only wires it to the process: arguments, signals, exit status.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/replaysafe/companion/cmd/companion/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	m := cli.NewMain()
	err := m.Run(ctx, os.Args[1:])
	if err == nil {
		err = m.Wait(ctx)
	}
	stop() // a second signal now ends the process at once
	err = errors.Join(err, m.Close())
	if err != nil {
		fmt.Fprintln(os.Stderr, "companion:", err)
	}
	os.Exit(cli.ExitCode(err))
}
