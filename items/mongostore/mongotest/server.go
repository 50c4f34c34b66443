// Package mongotest starts a MongoDB wire-protocol server for tests: FerretDB v1 embedded, on SQLite files
// in a test's temporary directory, listening on a free loopback port.
//
// Only _test files import this package, so the companion binary never links FerretDB. FerretDB is good
// enough to test the MongoDB store's functional behaviour (wire protocol, indexes, duplicate-key errors,
// queries, outages), and not its atomicity: its conditional updates are not atomic under concurrency
// (see docs/deploying.md). Tests of concurrent behaviour run only against a real MongoDB, named by the
// environment variable in RealURIEnv.
package mongotest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
)

// RealURIEnv names the environment variable that points tests at a real MongoDB (a replica set, so that
// majority writes work), e.g. mongodb://127.0.0.1:27017/?replicaSet=rs0.
const RealURIEnv = "COMPANION_TEST_MONGODB_URI"

// newMu serializes ferretdb.New, which writes package-level state (its version record).
var newMu sync.Mutex

// Server is one in-process FerretDB. It can be stopped and started again on the same files and port, to
// show what the store does while its server is gone.
type Server struct {
	dir  string
	addr string

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}

	dbs atomic.Int64
}

// Start starts a server on a fresh temporary directory and a free loopback port. It stops when the test
// ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := StartIn(tb.TempDir())
	if err != nil {
		tb.Fatalf("mongotest: start FerretDB: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// StartIn starts a server keeping its files in dir, on a free loopback port, for a TestMain that shares
// one server among a package's tests. The caller stops it.
func StartIn(dir string) (*Server, error) {
	s := &Server{dir: dir, addr: "127.0.0.1:0"}
	if err := s.start(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Server) start() error {
	newMu.Lock()
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: s.addr},
		Logger:    logger(),
		Handler:   "sqlite",
		SQLiteURL: "file:" + filepath.ToSlash(s.dir) + "/",
	})
	newMu.Unlock()
	if err != nil {
		return err
	}
	// New has bound the port; MongoDBURI reads it back (it names the real port when addr asked for 0).
	host := strings.TrimSuffix(strings.TrimPrefix(f.MongoDBURI(), "mongodb://"), "/")
	if _, _, err := net.SplitHostPort(host); err != nil {
		return fmt.Errorf("unexpected FerretDB URI %q", f.MongoDBURI())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.Run(ctx) // returns nil once ctx is done and every connection is closed
	}()
	s.mu.Lock()
	s.addr, s.cancel, s.done = host, cancel, done
	s.mu.Unlock()
	return nil
}

// LogEnv names the environment variable that, set to 1, makes the test servers log to stderr (they log
// nothing otherwise).
const LogEnv = "COMPANION_TEST_FERRETDB_LOG"

func logger() *slog.Logger {
	if os.Getenv(LogEnv) == "1" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// URI returns the server's connection string (no database in it).
func (s *Server) URI() string { return "mongodb://" + s.Addr() + "/" }

// Addr returns the server's host:port.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Database returns a database name not used before on this server, so tests can share one server.
func (s *Server) Database() string {
	return fmt.Sprintf("test_%d", s.dbs.Add(1))
}

// Stop stops the server and waits until it has closed every connection. FerretDB lets connected clients
// finish for up to three seconds, so Stop can take that long. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.cancel, s.done = nil, nil
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// Restart starts a stopped server again on the same files and port. It fails when something else took
// the port meanwhile.
func (s *Server) Restart() error {
	var err error
	for try := 0; try < 20; try++ {
		if err = s.start(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("mongotest: restart FerretDB on %s: %w", s.Addr(), err)
}
