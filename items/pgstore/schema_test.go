package pgstore_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/replaysafe/companion/items/pgstore"
	"github.com/replaysafe/companion/items/pgstore/pgtest"
)

// TestReplicasStartingTogetherMigrateOnce: four stores open one new schema at the same moment, as four
// replicas starting together do. Every one opens, the schema is created once, and each migration is
// applied and recorded once (the advisory lock makes the others wait, then find nothing to do).
func TestReplicasStartingTogetherMigrateOnce(t *testing.T) {
	url, schema := pgtest.Schema(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			s, err := pgstore.Open(context.Background(), url, schema, pgstore.WithLogger(quiet))
			if err == nil {
				t.Cleanup(func() { s.Close() })
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
	}
	conn := connect(t, url)
	var versions, applied int
	if err := conn.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT version) FROM `+pgx.Identifier{schema}.Sanitize()+
		`.schema_migrations`).Scan(&applied, &versions); err != nil {
		t.Fatal(err)
	}
	if applied != versions || versions == 0 {
		t.Fatalf("schema_migrations holds %d rows of %d versions: a migration was applied more than once", applied, versions)
	}
}

// TestLedgerStaysInItsSchema: the ledger shares a database with another application (n8n) that has tables
// of the same names in its own schema; opening the ledger creates its objects in its schema only, and
// leaves the other schema's tables as they were.
func TestLedgerStaysInItsSchema(t *testing.T) {
	url, schema := pgtest.Schema(t)
	_, other := pgtest.Schema(t)
	conn := connect(t, url)
	ctx := context.Background()
	o := pgx.Identifier{other}.Sanitize()
	if _, err := conn.Exec(ctx, `CREATE SCHEMA `+o+`; CREATE TABLE `+o+`.items (id int); CREATE TABLE `+o+`.meta (name text);
		INSERT INTO `+o+`.items VALUES (1), (2)`); err != nil {
		t.Fatal(err)
	}
	objects := func(ns string) string {
		var names []string
		rows, err := conn.Query(ctx, `SELECT c.relname || ':' || c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 ORDER BY 1`, ns)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			names = append(names, n)
		}
		return strings.Join(names, " ")
	}
	before := objects(other)
	s, err := pgstore.Open(ctx, url, schema, pgstore.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if after := objects(other); after != before {
		t.Errorf("the other schema's objects changed:\n%s\n%s", before, after)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+o+`.items`).Scan(&n); err != nil || n != 2 {
		t.Errorf("the other schema's items: %d rows, %v", n, err)
	}
	if mine := objects(schema); !strings.Contains(mine, "items:r") || !strings.Contains(mine, "item_counts:r") {
		t.Errorf("the ledger's schema holds %s", mine)
	}
}

// TestSchemaOfALaterBuildIsRefused: a schema migrated by a later build (a version this build does not
// know) is not opened: the start says so, rather than running old code on a newer layout.
func TestSchemaOfALaterBuildIsRefused(t *testing.T) {
	url, schema := pgtest.Schema(t)
	s, err := pgstore.Open(context.Background(), url, schema, pgstore.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	conn := connect(t, url)
	if _, err := conn.Exec(context.Background(), `INSERT INTO `+pgx.Identifier{schema}.Sanitize()+`.schema_migrations (version, name) VALUES (999, 'later')`); err != nil {
		t.Fatal(err)
	}
	_, err = pgstore.Open(context.Background(), url, schema, pgstore.WithLogger(quiet))
	if err == nil || !strings.Contains(err.Error(), "version 999, which a later build of companion made") {
		t.Fatalf("opening a schema of a later build: %v", err)
	}
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}
