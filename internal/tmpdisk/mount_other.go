//go:build !linux

package tmpdisk

import "testing"

// Mount skips the test: the full disk is a tmpfs, on Linux.
func Mount(t testing.TB, size int) string {
	t.Helper()
	t.Skip("a full disk is a tmpfs mounted for the test, on Linux")
	return ""
}
