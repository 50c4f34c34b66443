package acceptance_test

import (
	"context"
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
