package pgstore

import (
	"context"

	"github.com/replaysafe/companion/items"
)

// Probes' claims of reads (package probes) are rows of the probes table, one per item, attempt and read,
// beside the items so that a claim never rewrites an item or moves its version.

// ClaimProbe takes read c.Read of attempt c.Attempt of an item for c.Claim until c.Until, in one guarded
// statement: only while the item is unknown at that attempt (so no lease is live), and only when nobody
// holds a live claim on that read. Of any number of concurrent claims of one read, one wins (the primary
// key's ON CONFLICT, which waits for a concurrent insert of the same read). It reports whether the claim
// is c.Claim's. Returns ErrUnavailable.
func (s *Store) ClaimProbe(ctx context.Context, c items.ProbeClaim) (bool, error) {
	n, err := s.execRetrying(ctx, s.q.ClaimProbe, c.Tenant, c.Key, c.Attempt, c.Read, c.Claim, c.Until, c.Now)
	return n == 1, err
}

// ReleaseProbe gives back read c.Read of attempt c.Attempt of an item, only while c.Claim still holds it:
// a claim that ran out and was taken over is another prober's, and stays. The read is then claimable at
// once. It reports whether the claim was given back. Returns ErrUnavailable.
func (s *Store) ReleaseProbe(ctx context.Context, c items.ProbeClaim) (bool, error) {
	n, err := s.execRetrying(ctx, s.q.ReleaseProbe, c.Tenant, c.Key, c.Attempt, c.Read, c.Claim)
	return n == 1, err
}
