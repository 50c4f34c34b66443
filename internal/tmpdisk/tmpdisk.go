// Package tmpdisk gives tests a real file system that fills up: a small tmpfs mounted for the test, and
// a file that takes all of its room until the test gives it back. A disk that is full is what the
// ledger's readiness must see; a fault injected in the store's code would only show what the fault does.
package tmpdisk

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Fill writes a file in dir until the file system has no room left, and returns the function that
// removes it. The test fails if the disk never fills.
func Fill(t testing.TB, dir string) (free func()) {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for {
		if _, err = f.Write(chunk); err != nil {
			break
		}
	}
	f.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling %s: %v, want ENOSPC", dir, err)
	}
	return func() {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}
