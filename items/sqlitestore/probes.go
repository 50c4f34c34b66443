package sqlitestore

import (
	"context"

	"github.com/replaysafe/companion/items"
)

// probesSchema holds the claims of probe reads (package probes): one row per item, attempt and read,
// beside the items table so that a claim never rewrites an item or moves its version.
const probesSchema = `
CREATE TABLE IF NOT EXISTS probes (
	tenant        TEXT NOT NULL,
	key           TEXT NOT NULL,
	attempt       INTEGER NOT NULL,
	read          INTEGER NOT NULL,
	claim         TEXT NOT NULL,
	claimed_until INTEGER NOT NULL,
	PRIMARY KEY (tenant, key, attempt, read)
) WITHOUT ROWID;
`

// claimProbeSQL inserts a read's claim while the item is unknown at the attempt, or takes over a claim
// that has ended: one statement, so the item's state and the claim are checked together.
const claimProbeSQL = `INSERT INTO probes (tenant, key, attempt, read, claim, claimed_until)
	SELECT ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM items WHERE tenant = ? AND key = ? AND attempt = ? AND state = 'unknown')
	ON CONFLICT (tenant, key, attempt, read) DO UPDATE SET claim = excluded.claim, claimed_until = excluded.claimed_until
	WHERE probes.claimed_until <= ?`

// ClaimProbe takes read c.Read of attempt c.Attempt of an item for c.Claim until c.Until, in one guarded
// statement: only while the item is unknown at that attempt (so no lease is live), and only when nobody
// holds a live claim on that read. Of any number of concurrent claims of one read, one wins. It reports
// whether the claim is c.Claim's. Returns ErrUnavailable.
func (s *Store) ClaimProbe(ctx context.Context, c items.ProbeClaim) (bool, error) {
	res, err := s.w.ExecContext(ctx, claimProbeSQL,
		c.Tenant, c.Key, c.Attempt, c.Read, c.Claim, nanos(c.Until), c.Tenant, c.Key, c.Attempt, nanos(c.Now))
	if err != nil {
		return false, unavailable(err)
	}
	n, err := res.RowsAffected()
	return n == 1, unavailable(err)
}

// ReleaseProbe gives back read c.Read of attempt c.Attempt of an item, only while c.Claim still holds it:
// a claim that ran out and was taken over is another prober's, and stays. The read is then claimable at
// once, instead of when the claim would have run out. It reports whether the claim was given back.
// Returns ErrUnavailable.
func (s *Store) ReleaseProbe(ctx context.Context, c items.ProbeClaim) (bool, error) {
	res, err := s.w.ExecContext(ctx, `DELETE FROM probes WHERE tenant = ? AND key = ? AND attempt = ? AND read = ? AND claim = ?`,
		c.Tenant, c.Key, c.Attempt, c.Read, c.Claim)
	if err != nil {
		return false, unavailable(err)
	}
	n, err := res.RowsAffected()
	return n == 1, unavailable(err)
}
