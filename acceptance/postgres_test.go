package acceptance_test

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"

	"github.com/replaysafe/companion/acceptance"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/pgstore"
	"github.com/replaysafe/companion/items/pgstore/pgtest"
)

// The whole suite on the PostgreSQL store, every case (the concurrent one included), on the real server
// COMPANION_TEST_POSTGRES_URL names, in a schema of the test's own.
func TestSuitePassesOnPostgreSQL(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	p := startInProcess(t, acceptance.InProcessConfig{
		OpenStore: func(ctx context.Context) (items.Store, error) { return pgstore.Open(ctx, url, schema) },
		StoreName: "postgres (" + pgtest.URLEnv + ")",
	})
	res, table := runSuite(t, p, acceptance.Options{})
	t.Log("\n" + table)
	if res.Failed > 0 || res.Passed != len(acceptance.Cases()) {
		t.Fatalf("%d passed, %d failed, %d skipped; want all %d passed", res.Passed, res.Failed, res.Skipped, len(acceptance.Cases()))
	}
}

// --store postgres where nothing listens stops with one line naming the host and port and what it said,
// without the password.
func TestCommandNamesAnUnreachablePostgreSQL(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	url := "postgres://ledger:hunter2@" + addr + "/companion?connect_timeout=1"
	var stdout, stderr bytes.Buffer
	err = acceptance.CommandEnv(context.Background(), []string{"--store", "postgres", "--only", "5"}, &stdout, &stderr,
		func(k string) string { return map[string]string{"POSTGRES_URL": url}[k] })
	if err == nil || !strings.Contains(err.Error(), "no PostgreSQL answered at "+addr) || !strings.Contains(err.Error(), "connection refused") ||
		strings.Contains(err.Error(), "hunter2") {
		t.Errorf("--store postgres where nothing listens: %v", err)
	}
}
