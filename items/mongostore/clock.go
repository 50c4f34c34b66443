package mongostore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"

	"github.com/replaysafe/companion/items"
)

// One clock for leases. Every replica stamps and judges leases on the primary's clock: the ledger reads
// ClockOffset inside a transition, between the read and the guarded write, and decides on its own clock
// moved by it. A lease the primary's clock shows expired when the offset is read is still expired when the
// write lands, since that clock only moves forward.
//
// A reading costs a round trip (hello), so it is kept for clockTTL and read again after that, and at once
// when the driver sees another primary (a failover: the new primary's clock may differ from the old one's).
// What a reading cannot tell is covered by the ledger's margin (items.Ledger.ClockMargin, max_clock_skew):
// the server's clock is known to within half the round trip, an offset below clockResolution reads as none
// (so that a test's fake clock stays exact against a server on another host), the process's clock drifts
// a little within clockTTL, and after a failover leases stamped on the old primary's clock are judged on
// the new one's.
//
// MongoDB could judge an expiry with $$NOW inside the guarded update instead; FerretDB v1.24, the test
// server, knows neither $$NOW nor pipeline updates (TestFerretDBRefusesNowAndPipelineUpdates), so the
// store reads the clock, and the same code runs on both.

// clockTTL is how long a reading of the primary's clock is used.
const clockTTL = time.Second

// clockResolution is the smallest difference between the server's clock and this process's that
// ClockOffset reports.
const clockResolution = 100 * time.Millisecond

// errNoServerClock is the answer of a server that does not report its clock.
var errNoServerClock = fmt.Errorf("%w: mongodb: the server does not report its clock", items.ErrUnavailable)

// clockReading is the last reading of the primary's clock.
type clockReading struct {
	mu     sync.Mutex
	offset time.Duration
	// at is when it was read, on this process's monotonic clock; valid is false until the first reading,
	// and again once the primary changed.
	at    time.Time
	valid bool
	// primary names the primary the driver last saw (its address and election).
	primary string
}

// fresh returns the kept offset, if it may still be used.
func (c *clockReading) fresh() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset, c.valid && time.Since(c.at) < clockTTL
}

// last returns the kept offset, however old (zero before the first reading).
func (c *clockReading) last() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

func (c *clockReading) keep(off time.Duration, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset, c.at, c.valid = off, at, true
}

// topologyChanged is the driver's news of the deployment: when the primary changed, the next ClockOffset
// reads the clock again.
func (c *clockReading) topologyChanged(e *event.TopologyDescriptionChangedEvent) {
	p := ""
	for _, srv := range e.NewDescription.Servers {
		if srv.Kind == "RSPrimary" || srv.Kind == "Standalone" {
			p = srv.Addr.String() + "/" + srv.ElectionID.Hex()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p != c.primary {
		c.primary, c.valid = p, false
	}
}

// HasClock implements items.SharedStore: whether the server reports its clock (every MongoDB does; see
// WithoutServerClock).
func (s *Store) HasClock() bool { return s.serverClock }

// ClockOffset implements items.SharedStore: how far the primary's clock is ahead of this process's, from
// a reading at most clockTTL old and of the present primary (one hello command, its localTime, which
// MongoDB and FerretDB both answer).
func (s *Store) ClockOffset(ctx context.Context) (time.Duration, error) {
	if off, ok := s.offset.fresh(); ok {
		return off, nil
	}
	return s.readClock(ctx)
}

// readClock reads the primary's clock, keeps the reading, and returns the offset. The server's clock is
// known to within half the round trip (and its millisecond): an offset no larger, or smaller than
// clockResolution, is kept as zero.
func (s *Store) readClock(ctx context.Context) (time.Duration, error) {
	began := time.Now()
	before := s.clock()
	var hello struct {
		LocalTime time.Time `bson:"localTime"`
	}
	err := s.items.Database().RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello)
	after := s.clock()
	if err != nil {
		return 0, unavailable("read the server's clock", err)
	}
	if hello.LocalTime.IsZero() {
		return 0, errNoServerClock
	}
	half := after.Sub(before) / 2
	off := hello.LocalTime.Sub(before.Add(half))
	if off.Abs() <= max(half+time.Millisecond, clockResolution) {
		off = 0
	}
	s.offset.keep(off, began)
	return off, nil
}

// serverNow is the primary's clock as this store last read it: this process's clock moved by the last
// offset read (none before the first reading, or without a server clock). It costs no round trip; the
// kept counts' entries and the lock documents are stamped with it.
func (s *Store) serverNow() time.Time {
	return s.clock().Add(s.offset.last()).UTC()
}
