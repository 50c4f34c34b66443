package sqlitestore

import "context"

// RefreshSweepCandidates runs the start's correction of the sweep candidates (refreshSweepCandidates), for
// BenchmarkOpenRefreshesSweepCandidates.
func (s *Store) RefreshSweepCandidates(ctx context.Context) (int, error) {
	return s.refreshSweepCandidates(ctx)
}
