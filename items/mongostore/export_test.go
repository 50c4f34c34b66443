package mongostore

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// StartWait is how long Open waits for the primary of uri.
func StartWait(uri string) time.Duration { return startWait(options.Client().ApplyURI(uri)) }

// WithCommandMonitor lets a test see every command the store's client sends.
func WithCommandMonitor(m *event.CommandMonitor) Option {
	return func(s *settings) { s.monitor = m }
}

// FailAfterWrite makes the k-th write of s (an insert, an insert of many, an update; counting from 1)
// that the server applies answer err instead, as a write whose acknowledgement is lost does; 0 turns the
// fault off. It returns the number of writes counted so far.
func FailAfterWrite(s *Store, k int, err error) func() int {
	n := 0
	s.fault = func(string) error {
		n++
		if n == k {
			return err
		}
		return nil
	}
	if k == 0 {
		s.fault = nil
	}
	return func() int { return n }
}

// SetFault makes every write of s that the server applies answer what f returns (nil: the write's own
// answer); nil turns it off.
func SetFault(s *Store, f func(op string) error) { s.fault = f }

// WaitSweepCandidatesRefreshed waits for the start's background pass over the documents of an earlier
// build (refreshSweepCandidates) to end.
func WaitSweepCandidatesRefreshed(s *Store) { <-s.refreshed() }

// WaitExecutionIDsFilled waits for the start's background pass that gives the items of an earlier build
// their execution_id (fillExecutionIDs) to end.
func WaitExecutionIDsFilled(s *Store) { <-s.filled() }

// DropCounts makes s drop the kept counts of its acknowledged writes for as long as drop returns true, as
// a replica stopped right after its write would (nil: count them).
func DropCounts(s *Store, drop func() bool) { s.dropCounts = drop }

// RepairCounts runs one pass of the kept counts' repair, applying the entries due for longer than age,
// once the pass s runs at its start has ended: that pass reads repairAge too, and on a server where the
// counts' lock is not exclusive (FerretDB) it could otherwise apply the same entries at the same time
// (on a loaded machine, an item counted twice).
func RepairCounts(ctx context.Context, s *Store, age time.Duration) (RepairReport, error) {
	<-s.repaired()
	s.repairAge = age
	return s.repairCounts(ctx)
}

// ClientOptions are the driver's options Open uses for uri.
func ClientOptions(uri string) *options.ClientOptions { return clientOptions(uri, DefaultTimeout) }

// SetCountFault makes step 1 or 2 of applying the kept counts (counts.go), once the server applied it,
// answer what f returns for that step (nil: its own answer); nil turns it off.
func SetCountFault(s *Store, f func(step int) error) { s.countFault = f }

// RemoveSettled runs the repair pass's removal of the marks and tombstones older than before.
func RemoveSettled(ctx context.Context, s *Store, before time.Time) error {
	return s.removeSettled(ctx, before)
}

// TopologyChanged tells s's clock reading that the driver saw the deployment change.
func TopologyChanged(s *Store, e *event.TopologyDescriptionChangedEvent) { s.offset.topologyChanged(e) }

// ClockFresh reports whether s would use its kept reading of the server's clock.
func ClockFresh(s *Store) bool {
	_, ok := s.offset.fresh()
	return ok
}

// BatchTimeout is the deadline of a batch of n items on s.
func BatchTimeout(s *Store, n int) time.Duration { return s.batchTimeout(n) }

// WaitFirstRepairPass waits for the end of the repair pass the store runs at its start.
func WaitFirstRepairPass(s *Store) { <-s.repaired() }
