package sqlitestore

import (
	"context"
	"database/sql"
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
