package cli_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/replaysafe/companion/items/pgstore"
	"github.com/replaysafe/companion/items/pgstore/pgtest"
)

// POSTGRES_URL selects the PostgreSQL store: the same API answers, the ledger lives in the schema
// POSTGRES_SCHEMA names (a restart on another data dir still knows the claim), the start line names the
// server without the password and gives the item cache's bound, and sweep --once and the bench's floor work on it.
func TestServeOnPostgreSQL(t *testing.T) {
	url, schema := pgtest.Schema(t)
	env := map[string]string{"POSTGRES_URL": url, "POSTGRES_SCHEMA": schema}
	again := checkSharedStore(t, env, "postgres", "store postgres "+pgstore.Describe(url)+" schema "+schema)
	if strings.Contains(again.err.String(), "companion_test:companion_test") {
		t.Errorf("the start line shows the password:\n%s", again.err)
	}
	if !strings.Contains(again.err.String(), "schema "+schema+" (item cache 2048 items)") {
		t.Errorf("the start line does not give the item cache's bound:\n%s", again.err)
	}

	out, err := run(t, env, "sweep", "--once")
	if err != nil || !strings.Contains(out, "swept postgres "+pgstore.Describe(url)+" schema "+schema) {
		t.Errorf("sweep --once on PostgreSQL: %v\n%s", err, out)
	}

	benchEnv := map[string]string{"COMPANION_URL": "http://" + again.Addr(), "POSTGRES_URL": url, "POSTGRES_SCHEMA": schema}
	out, err = run(t, benchEnv, "bench", "--items", "40", "--callers", "4", "--prefix", "bench-pg", "--floor", "postgres", "--floor-items", "20")
	if err != nil {
		t.Fatalf("bench --floor postgres: %v\n%s", err, out)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^\s+single, 4 callers\s+40\s+[0-9]+\s+0\s*$`),
		regexp.MustCompile(`(?m)^\s+floor \(PostgreSQL, 2 commits/item, 4 callers\)\s+40\s+20\s+[0-9]+`),
		regexp.MustCompile(`× the floor \([0-9]+ items/s; [0-9]+ before the run, [0-9]+ after it\)`),
	} {
		if !want.MatchString(out) {
			t.Errorf("bench --floor postgres: no %s in\n%s", want, out)
		}
	}
}

// TestServeRefusesTwoStores: MONGODB_URI and POSTGRES_URL both set is a mistake the start names, before it
// opens either; so is --floor postgres without POSTGRES_URL.
func TestServeRefusesTwoStores(t *testing.T) {
	env := map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "MONGODB_URI": "mongodb://127.0.0.1:1/", "POSTGRES_URL_FILE": "/run/secrets/pg"}
	for _, args := range [][]string{{"serve"}, {"sweep", "--once"}} {
		_, err := run(t, env, args...)
		if err == nil || !strings.Contains(err.Error(), "both MONGODB_URI and POSTGRES_URL are set: the ledger lives in one store") {
			t.Errorf("%v with both stores: %v", args, err)
		}
	}
	_, err := run(t, map[string]string{"COMPANION_URL": "http://127.0.0.1:1"}, "bench", "--items", "0", "--floor", "postgres")
	if err == nil || !strings.Contains(err.Error(), "--floor postgres measures the PostgreSQL of POSTGRES_URL") {
		t.Errorf("--floor postgres without POSTGRES_URL: %v", err)
	}
}
