// Package pgtest gives tests a PostgreSQL to run against: the server COMPANION_TEST_POSTGRES_URL names
// (scripts/postgres-test.sh starts one and prints its URL), and a schema of their own in it, dropped
// with everything in it when the test ends.
package pgtest

import (
	"os"
	"testing"
)

// URLEnv names the test server's connection string.
const URLEnv = "COMPANION_TEST_POSTGRES_URL"

// URL returns the test server's connection string. Without one the test is skipped, except in CI
// (CI=true), where it fails: a suite that silently skips its PostgreSQL tests proves nothing.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(URLEnv)
	if u == "" {
		const why = URLEnv + " is not set: run `export " + URLEnv + "=\"$(bash scripts/postgres-test.sh)\"` " +
			"(it installs and starts Debian's PostgreSQL when needed, and prints the URL)"
		if os.Getenv("CI") == "true" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	return u
}

// Schema returns the test server's connection string and the name of a schema of the test's own, which
// does not exist yet and is dropped, with everything in it, when the test ends (after the cleanups
// registered later, such as closing a store opened on it).
func Schema(t testing.TB) (url, schema string) {
	t.Helper()
	url = URL(t)
	schema = newSchemaName()
	t.Cleanup(func() {
		if err := dropSchema(url, schema); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return url, schema
}
