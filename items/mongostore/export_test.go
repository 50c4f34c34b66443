package mongostore

import (
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
func WaitSweepCandidatesRefreshed(s *Store) { <-s.refreshed }
