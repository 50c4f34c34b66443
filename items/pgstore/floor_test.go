package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/replaysafe/companion/items/pgstore"
	"github.com/replaysafe/companion/items/pgstore/pgtest"
)

// TestFloorClaimsAndRecordsEveryItem: the floor makes two single-statement transactions per item, from
// its callers at once, and leaves no table behind.
func TestFloorClaimsAndRecordsEveryItem(t *testing.T) {
	url, schema := pgtest.Schema(t)
	res, err := pgstore.Floor(context.Background(), url, schema, 200, 8)
	if err != nil {
		t.Fatal(err)
	}
	if res.Items != 200 || len(res.Commits) != 400 || res.Took <= 0 || res.Callers != 8 {
		t.Fatalf("floor: %d items, %d commits, took %s, %d callers", res.Items, len(res.Commits), res.Took, res.Callers)
	}
	conn := connect(t, url)
	var left int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, schema).Scan(&left); err != nil || left != 0 {
		t.Fatalf("the floor left %d tables in %s (%v)", left, pgx.Identifier{schema}.Sanitize(), err)
	}
}
