//go:build !unix

package main

import (
	"os"
	"os/exec"
)

// ownGroup does nothing where there are no process groups: the runner runs on unix (install.sh, run.sh);
// this file only keeps `GOOS=windows go build ./...` building.
func ownGroup(*exec.Cmd) {}

// stopGroup ends p alone.
func stopGroup(p *os.Process, _ bool) { _ = p.Kill() }
