package sandbox_test

import (
	"bytes"
	"strconv"
	"sync"
)

func itoa(n int) string { return strconv.Itoa(n) }

// syncBuffer is a bytes.Buffer that a server goroutine may write while the
// test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
