package sqlitestore

import (
	"context"
	"database/sql"
	"testing"
)

// RefreshSweepCandidates runs the start's correction of the sweep candidates (refreshSweepCandidates), for
// BenchmarkOpenRefreshesSweepCandidates.
func (s *Store) RefreshSweepCandidates(ctx context.Context) (int, error) {
	return s.refreshSweepCandidates(ctx)
}

// WriteOutside is writeOutside, for the tests of package sqlitestore_test.
func (s *Store) WriteOutside(query string, args ...any) (sql.Result, error) {
	return s.writeOutside(query, args...)
}

// openTemp opens a new ledger in a temporary directory, closed when the test ends.
func openTemp(t testing.TB) *Store {
	t.Helper()
	s, err := Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
