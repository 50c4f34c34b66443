package mongostore_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/replaysafe/companion/internal/tcpproxy"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/mongostore"
	"github.com/replaysafe/companion/items/mongostore/mongotest"
)

// oneWay is the delay the latency tests' proxy adds to each message either way: 10 ms a round trip, as a
// majority write to a multi-zone cluster under load takes.
const oneWay = 5 * time.Millisecond

// commands counts the commands a store sends, by name, while counting is on (the repair pass's, on meta,
// are left out: they run beside the service).
type commands struct {
	mu    sync.Mutex
	on    bool
	names []string
}

func (c *commands) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.on && !strings.Contains(e.Command.String(), `"`+mongostore.MetaCollection+`"`) {
			c.names = append(c.names, e.CommandName)
		}
	}}
}

func (c *commands) count(f func()) []string {
	c.mu.Lock()
	c.on, c.names = true, nil
	c.mu.Unlock()
	f()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on = false
	return c.names
}

// slowStore opens a store on the env's database through a proxy that adds oneWay to every message.
func slowStore(t *testing.T, e env, timeout time.Duration, opts ...mongostore.Option) (*mongostore.Store, *tcpproxy.Proxy) {
	t.Helper()
	p := tcpproxy.Start(t, sharedSrv.Addr())
	p.Slow(oneWay)
	s, err := mongostore.Open(t.Context(), "mongodb://"+p.Addr+"/", e.db, append([]mongostore.Option{mongostore.WithTimeout(timeout)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, p
}

// prepared registers n prepared items, keys prefix-0…, through s (a batch prepare), and returns the
// claims of them all.
func prepared(t *testing.T, s items.Store, prefix string, n int) []items.BeforeWriteParams {
	t.Helper()
	ps := make([]items.BeforeWriteParams, n)
	keys := make([]string, n)
	for i := range ps {
		ps[i] = claimParams(fmt.Sprintf("%s-%d", prefix, i))
		keys[i] = ps[i].Key
	}
	if _, err := s.TransitionMany(t.Context(), "acme", keys, func(i int, cur *items.Item) (*items.Item, error) {
		if cur != nil {
			return nil, nil
		}
		return items.NewPrepared(ps[i], time.Now())
	}); err != nil {
		t.Fatal(err)
	}
	return ps
}

// TestBatchOf500ExistingItemsOverASlowLink: a before-write batch of 500 prepared items (prepare, then
// before-write: every item exists), through a link that adds 10 ms to every round trip, answers proceed
// for all 500 within its deadline, in a few round trips per 32 items, not one per item: one read, the
// guarded updates in bulk writes of 32, one linearizable read confirming them, and the kept counts'
// writes (the groups and the series' rows side by side, then the items' entries, 32 a command). One round
// trip per item cost 500 × 10 ms, the whole of the 5 s budget, at the link alone; here the link costs the
// batch at most 39 round trips.
//
// The batch's wall time on FerretDB is its server's work, not the link's: FerretDB finds a document by
// anything but its _id alone by reading the collection, so each of the 500 guarded updates reads up to 500
// documents (on MongoDB the _id index finds each at once): some 20 s on an idle 2-core machine. The
// store's timeout here leaves it that time. Under the race detector, which makes FerretDB five times
// slower again, the batch has 128 items (four bulk writes of updates).
func TestBatchOf500ExistingItemsOverASlowLink(t *testing.T) {
	if realURI() != "" {
		t.Skip("runs on the in-process FerretDB only (it needs the server's address to put a proxy before it)")
	}
	n := 500
	if mongotest.RaceDetector() {
		n = 128
	}
	e := newEnv(t)
	ps := prepared(t, e.open(), "slow", n)
	var cmds commands
	s, _ := slowStore(t, e, 20*mongotest.StoreTimeout(), mongostore.WithCommandMonitor(cmds.monitor()))
	mongostore.WaitFirstRepairPass(s) // its commands are the store's, not the batch's
	l := newLedger(t, s, nil)
	var answers []items.Answer
	var err error
	var took time.Duration
	sent := cmds.count(func() {
		start := time.Now()
		answers, err = l.BeforeWriteMany(t.Context(), "acme", ps)
		took = time.Since(start)
	})
	if err != nil {
		t.Fatalf("the batch: %v (after %s)", err, took)
	}
	for _, a := range answers {
		if a.Decision != items.Proceed || a.Attempt != 1 {
			t.Fatalf("%s: %s/%s attempt %d, want proceed at attempt 1", a.Key, a.Decision, a.Reason, a.Attempt)
		}
	}
	deadline := mongostore.BatchTimeout(s, len(ps))
	t.Logf("%d existing items through a link of 10 ms a round trip: %s (deadline %s), %d commands %v", n, took, deadline, len(sent), sent)
	if took > deadline {
		t.Errorf("the batch took %s, past its deadline %s", took, deadline)
	}
	// A few: the read and its getMore, the confirming read, the kept counts' writes, and a reading of the
	// server's clock (hello) when the last is over clockTTL old, which on a loaded machine, where the read
	// takes longer than that, comes in the middle of the batch.
	if chunks := (len(ps) + 31) / 32; len(sent) > 8+2*chunks {
		t.Errorf("the batch sent %d commands %v, want at most %d: a few, and two per 32 items", len(sent), sent, 8+2*chunks)
	}
}

// TestTimedOutBatchLeavesNoClaimHeldByNobody (API.md, "A refused request leaves nothing behind"): a batch
// whose bulk write of claims the server applies, and whose link then hangs until the batch's deadline has
// passed, answers ErrUnavailable, and before it answers takes every claim back in one round trip: no item
// is left in flight under a claim nobody holds, and the batch sent again proceeds at attempt 1.
func TestTimedOutBatchLeavesNoClaimHeldByNobody(t *testing.T) {
	if realURI() != "" {
		t.Skip("runs on the in-process FerretDB only (it needs the server's address to put a proxy before it)")
	}
	e := newEnv(t)
	ps := prepared(t, e.open(), "timeout", 10)
	// A timeout the server's work for ten items stays well within, on FerretDB too.
	s, p := slowStore(t, e, mongotest.StoreTimeout()/3)
	l := newLedger(t, s, nil)
	deadline := mongostore.BatchTimeout(s, len(ps))
	start := time.Now()
	var thaw *time.Timer
	mongostore.SetFault(s, func(op string) error {
		if op == "bulk update" {
			// The claims are written; the link hangs until just past the batch's deadline.
			p.Freeze()
			thaw = time.AfterFunc(time.Until(start.Add(deadline+100*time.Millisecond)), p.Thaw)
		}
		return nil
	})
	_, err := l.BeforeWriteMany(t.Context(), "acme", ps)
	took := time.Since(start)
	mongostore.SetFault(s, nil)
	if thaw == nil {
		t.Fatal("the batch wrote no claims")
	}
	thaw.Stop()
	p.Thaw()
	if !errors.Is(err, items.ErrUnavailable) || strings.Contains(err.Error(), "taking back its claims failed too") {
		t.Fatalf("err = %v, want ErrUnavailable with its claims taken back", err)
	}
	if took < deadline || took > 3*deadline {
		t.Errorf("the batch answered after %s, want its deadline %s and the undo (at most as long again)", took, deadline)
	}
	checkNoClaimHeld(t, l, ps, 1)
	again, err := l.BeforeWriteMany(t.Context(), "acme", ps)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range again {
		if a.Decision != items.Proceed || a.Attempt != 1 {
			t.Fatalf("after the timeout: %s got %s/%s attempt %d, want proceed at attempt 1", a.Key, a.Decision, a.Reason, a.Attempt)
		}
	}
}
