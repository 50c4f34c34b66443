//go:build unix

package sqlitestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LockName is the file in the data dir that the process holding the ledger keeps locked.
const LockName = "companion.lock"

// ErrInUse says that another process holds the ledger in the data dir.
var ErrInUse = errors.New("the ledger is open in another process")

// lockDataDir takes the data dir's lock, so that only one process at a time holds the ledger: the store
// judges leases on its process's clock, and its sweeps, prober limits and alert claims assume one process
// (SQLite itself would keep two processes' writes apart, one transaction at a time, but they would
// double every rate and every background run). The lock is an flock on LockName, which the kernel
// releases when the process ends, however it ends; the file holds the holder's pid, for the message.
func lockDataDir(dataDir string) (*os.File, error) {
	path := filepath.Join(dataDir, LockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			pid := strings.TrimSpace(string(holder))
			if _, err := strconv.Atoi(pid); err != nil {
				pid = "unknown"
			}
			return nil, fmt.Errorf("sqlitestore: %w (pid %s holds %s): one process keeps a SQLite ledger; stop that one first, "+
				"or give this one another data dir", ErrInUse, pid, path)
		}
		return nil, fmt.Errorf("sqlitestore: lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
