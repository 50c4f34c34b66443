package pgstore

import (
	"context"
	"time"
)

// The database's clock. Replicas' clocks differ, and a lease must be judged on one clock: every group's
// transaction reads clock_timestamp() as it begins (ReadClock), and ClockOffset gives the ledger the
// database's clock from the latest such reading. The ledger decides a transition's leases (stamps a new
// one, judges an old one expired) on that clock, inside fn, and the write is guarded by the state the
// decision was made on (the item locked from the read to the commit, or the version and time of change
// the item cache held): a lease the database's clock showed expired is still expired when the write
// commits, since that clock only moves forward, and no other replica can act on the item in between
// without the guard failing.
//
// The expiry is judged by the ledger, in Go, and not inside the statement with clock_timestamp(): the
// lease rules are the ledger's (its decision table, with its fake clock in the conformance suite), and
// the statement's guard is the version the decision was made on, which the row lock makes certain.
//
// A reading is kept on this process's monotonic clock: the database's clock now is the reading plus the
// time elapsed since, whatever happens to this process's wall clock meanwhile (an NTP step of the replica
// moves its offset, not the leases). It is known to within half its round trip.

// clockResolution is the smallest difference between the database's clock and this process's that
// ClockOffset reports: below it, it is below what a lease (5 s at least) can tell, and a test's fake
// clock stays exact.
const clockResolution = 100 * time.Millisecond

// clockRefresh is the age at which a reading is replaced by the next one, however wide its round trip.
const clockRefresh = 30 * time.Second

// clockReading is one reading of the database's clock: db, read between sent and received on this
// process's monotonic clock.
type clockReading struct {
	db             time.Time
	sent, received time.Time
}

// dbNow is the database's clock now, as this reading tells it, and how uncertain it is.
func (r *clockReading) dbNow() (time.Time, time.Duration) {
	half := r.received.Sub(r.sent) / 2
	return r.db.Add(time.Since(r.sent.Add(half))), half
}

// noteClock keeps a reading of the database's clock, unless the one kept is narrower and recent.
func (s *Store) noteClock(db, sent, received time.Time) {
	r := &clockReading{db: db, sent: sent, received: received}
	for {
		cur := s.reading.Load()
		if cur != nil && cur.received.Sub(cur.sent) <= received.Sub(sent) && time.Since(cur.sent) < clockRefresh {
			return
		}
		if s.reading.CompareAndSwap(cur, r) {
			return
		}
	}
}

// readClock reads the database's clock on its own (when no group has read it lately).
func (s *Store) readClock(ctx context.Context) error {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	var db time.Time
	sent := time.Now()
	if err := s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&db); err != nil {
		return interpretError(err)
	}
	s.reading.Store(&clockReading{db: db, sent: sent, received: time.Now()})
	return nil
}

// HasClock implements items.SharedStore: the ledger judges leases on the database's clock.
func (s *Store) HasClock() bool { return true }

// ClockOffset implements items.SharedStore: how far the database's clock is ahead of this process's
// (WithClock), from the latest reading (read again when it is older than clockRefresh). An offset no
// larger than the reading's uncertainty, or smaller than clockResolution, is returned as zero.
func (s *Store) ClockOffset(ctx context.Context) (time.Duration, error) {
	r := s.reading.Load()
	if r == nil || time.Since(r.sent) > clockRefresh {
		if err := s.readClock(ctx); err != nil {
			return 0, err
		}
		r = s.reading.Load()
	}
	db, uncertain := r.dbNow()
	off := db.Sub(s.clock())
	if off.Abs() <= max(uncertain+time.Millisecond, clockResolution) {
		return 0, nil
	}
	return off, nil
}
