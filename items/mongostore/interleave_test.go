package mongostore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/mongostore"
)

// Deterministic interleavings: what another replica does between a transition's read and its guarded
// write, run from inside the transition's decision (fn is called between the two). FerretDB, the test
// server, serves each replica's commands one after the other here, so these hold there as on MongoDB;
// SQLite and PostgreSQL decide inside one transaction, where no other writer comes between the read and
// the write, and the cases do not arise.

// TestGuardDoesNotMatchARecreatedItem (ABA): a sweeper reads a claim whose lease ran out (version 1, in
// flight) and decides to record it unknown. Before its write, the claim's holder reports success,
// retention removes the settled item, its tombstone is removed an hour on, and a new request creates the
// key again and claims it: version 1, in flight, as the sweeper read. The sweeper's write is guarded by
// the rev of the document it read, which no other write repeats: it matches nothing, the sweeper decides
// again on the new claim (its lease is live) and writes nothing. The new claim stays.
func TestGuardDoesNotMatchARecreatedItem(t *testing.T) {
	t.Parallel()
	s, openReplica := openStore(t)
	other := openReplica()
	l := newLedger(t, other, nil)
	first, err := l.BeforeWrite(t.Context(), claimParams("aba"))
	if err != nil || first.Decision != items.Proceed {
		t.Fatalf("first claim: %+v, %v", first, err)
	}
	type read struct {
		version int64
		state   items.State
		claim   string
	}
	var seen []read
	var second items.Answer
	_, err = s.Transition(t.Context(), "acme", "aba", func(cur *items.Item) (*items.Item, error) {
		if cur == nil {
			seen = append(seen, read{})
		} else {
			seen = append(seen, read{cur.Version, cur.State, cur.Claim})
		}
		if len(seen) == 1 {
			// Between the sweeper's read and its write.
			if _, err := l.AfterWrite(t.Context(), items.AfterWriteParams{Tenant: "acme", Key: "aba", Claim: first.Claim,
				Evidence: items.Evidence{Outcome: items.OutcomeSucceeded}}); err != nil {
				t.Fatal(err)
			}
			if n, _, err := other.RemoveSettled(t.Context(), items.RemoveParams{DestinationRef: items.DestinationRef{Tenant: "acme", Destination: "billing"}, State: items.StateSucceeded,
				ChangedBefore: time.Now().Add(time.Hour), Limit: 10}); err != nil || n != 1 {
				t.Fatalf("retention removed %d (%v), want the settled item", n, err)
			}
			if err := mongostore.RemoveSettled(t.Context(), other, time.Now().Add(2*time.Hour)); err != nil {
				t.Fatal(err)
			}
			if second, err = l.BeforeWrite(t.Context(), claimParams("aba")); err != nil || second.Decision != items.Proceed {
				t.Fatalf("the new claim: %+v, %v", second, err)
			}
		}
		if cur == nil || cur.State != items.StateInFlight || cur.Claim != first.Claim {
			return nil, nil // the sweeper finds no expired claim of its own read: nothing to record
		}
		cur.State = items.StateUnknown
		cur.Cause = items.CauseLeaseExpired
		return cur, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	it, err := s.Get(t.Context(), "acme", "aba")
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[1].claim != second.Claim {
		t.Fatalf("the sweeper decided %d times (the second on %+v), want twice, the second on the new claim", len(seen), seen[len(seen)-1])
	}
	if seen[0].version != it.Version || seen[0].state != it.State {
		t.Fatalf("the new item is at version %d, %s; the case needs the version and state the sweeper read (%d, %s)",
			it.Version, it.State, seen[0].version, seen[0].state)
	}
	if it.State != items.StateInFlight || it.Claim != second.Claim {
		t.Fatalf("after the sweeper: %s under claim %q, want the new claim %q in flight", it.State, it.Claim, second.Claim)
	}
}

// capture records the commands of one name a store sends, to send one again later: a write still on
// its way when its caller gave up.
type capture struct {
	mu   sync.Mutex
	name string
	cmds []bson.Raw
}

func (c *capture) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if e.CommandName == c.name && !strings.Contains(e.Command.String(), `"`+mongostore.MetaCollection+`"`) {
			c.cmds = append(c.cmds, slices.Clone(e.Command))
		}
	}}
}

// resend sends the last captured command again, as it was, without the fields the driver adds per
// session and connection, and returns the server's answer (a write error as an error).
func (c *capture) resend(t *testing.T, e env) (bson.Raw, error) {
	t.Helper()
	c.mu.Lock()
	last := c.cmds[len(c.cmds)-1]
	c.mu.Unlock()
	elems, err := last.Elements()
	if err != nil {
		t.Fatal(err)
	}
	cmd := bson.D{}
	for _, el := range elems {
		switch el.Key() {
		case "$db", "lsid", "txnNumber", "$clusterTime", "maxTimeMS", "writeConcern":
			continue
		}
		cmd = append(cmd, bson.E{Key: el.Key(), Value: el.Value()})
	}
	return e.collection(mongostore.ItemsCollection).Database().RunCommand(t.Context(), cmd).Raw()
}

// TestUndoFencesAWriteStillOnItsWay: a claim's write whose answer was lost may still be on its way to the
// server, and land after the undo that answered 503 has run. Here the write is held back (the server's
// copy of it is taken back before the store sees the error) and sent again, exactly as it was, once the
// undo has run: for a new item (an insert) and for a prepared one (a guarded findAndModify). The undo
// fenced both: the insert finds the _id taken by a tombstone, the update's guard matches nothing, and no
// claim comes back.
func TestUndoFencesAWriteStillOnItsWay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ key, command string }{{"fence-new", "insert"}, {"fence-prepared", "findAndModify"}} {
		t.Run(tc.command, func(t *testing.T) {
			e := newEnv(t)
			c := &capture{name: tc.command}
			s, err := mongostore.Open(t.Context(), e.uri, e.db, mongostore.WithCommandMonitor(c.monitor()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if tc.key == "fence-prepared" {
				create(t, s, tc.key)
			}
			before, _ := s.Get(t.Context(), "acme", tc.key)
			var beforeDoc bson.Raw
			if before != nil {
				beforeDoc = storedDoc(t, e, before)
			}
			raw := e.collection(mongostore.ItemsCollection)
			mongostore.SetFault(s, func(string) error {
				// The write has not reached the server yet: what it did is taken back here, by hand.
				if before == nil {
					if _, err := raw.DeleteOne(t.Context(), bson.D{{Key: "_id", Value: "acme\x00" + tc.key}}); err != nil {
						t.Error(err)
					}
				} else if _, err := raw.ReplaceOne(t.Context(), bson.D{{Key: "_id", Value: "acme\x00" + tc.key}}, beforeDoc); err != nil {
					t.Error(err)
				}
				return errLost
			})
			l := newLedger(t, s, nil)
			_, err = l.BeforeWrite(t.Context(), claimParams(tc.key))
			mongostore.SetFault(s, nil)
			if !errors.Is(err, items.ErrUnavailable) {
				t.Fatalf("err = %v, want ErrUnavailable", err)
			}
			res, err := c.resend(t, e) // the write lands now
			if tc.command == "insert" && !mongo.IsDuplicateKeyError(err) {
				t.Fatalf("the late insert: %s, %v; want a duplicate key (the tombstone holds the _id)", res, err)
			}
			if tc.command == "findAndModify" {
				if err != nil {
					t.Fatalf("the late update: %v", err)
				}
				if v, err := res.LookupErr("value"); err != nil || v.Type != bson.TypeNull {
					t.Fatalf("the late update matched: %s; want no document (its guard is fenced)", res)
				}
			}
			it, err := s.Get(t.Context(), "acme", tc.key)
			switch {
			case before == nil && !errors.Is(err, items.ErrNotFound):
				t.Fatalf("after the late insert: %+v, %v; want no item", it, err)
			case before != nil && (err != nil || it.State != items.StatePrepared || it.Claim != ""):
				t.Fatalf("after the late update: %+v, %v; want the item prepared, with no claim", it, err)
			}
		})
	}
}

// storedDoc returns the document of it as the items collection holds it now (read raw).
func storedDoc(t *testing.T, e env, it *items.Item) bson.Raw {
	t.Helper()
	raw, err := e.collection(mongostore.ItemsCollection).FindOne(t.Context(), bson.D{{Key: "_id", Value: it.Tenant + "\x00" + it.Key}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestAnswerThatWritesNothingIsConfirmed: a decision that writes nothing (here: a report's repeat, fn
// returning nil) is answered only after a linearizable read, bounded by maxTimeMS, shows the item as the
// decision saw it. When another replica changed the item between the read and that confirming read, the
// decision is made again on what the confirming read found, and the answer is about the item as it is.
func TestAnswerThatWritesNothingIsConfirmed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mu sync.Mutex
	var finds []bson.Raw
	s, err := mongostore.Open(t.Context(), e.uri, e.db, mongostore.WithCommandMonitor(&event.CommandMonitor{
		Started: func(_ context.Context, ev *event.CommandStartedEvent) {
			if ev.CommandName == "find" {
				mu.Lock()
				finds = append(finds, slices.Clone(ev.Command))
				mu.Unlock()
			}
		}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	other := e.open()
	create(t, s, "confirmed")
	var saw []int64
	it, err := s.Transition(t.Context(), "acme", "confirmed", func(cur *items.Item) (*items.Item, error) {
		saw = append(saw, cur.Version)
		if len(saw) == 1 {
			if _, err := other.Transition(t.Context(), "acme", "confirmed", note("the other replica's change")); err != nil {
				t.Fatal(err)
			}
		}
		return nil, nil // nothing to write: an answer about the item as it is
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(saw) != "[1 2]" || it.Version != 2 || len(notes(it)) != 1 {
		t.Fatalf("decided on versions %v, answered version %d with notes %q; want 1, then 2, answering the other replica's change", saw, it.Version, notes(it))
	}
	mu.Lock()
	defer mu.Unlock()
	linearizable := 0
	for _, f := range finds {
		level, _ := f.Lookup("readConcern", "level").StringValueOK()
		if level != "linearizable" {
			continue
		}
		linearizable++
		if _, err := f.LookupErr("maxTimeMS"); err != nil {
			t.Errorf("a linearizable read without maxTimeMS: %s", f)
		}
	}
	if linearizable != 1 {
		t.Errorf("%d linearizable reads, want 1 (the first decision's confirmation; the second is made on what it read)", linearizable)
	}
}

// errFnFailed is a decision's own failure.
var errFnFailed = errors.New("the decision failed")

// TestTransitionManyTakesBackItsWritesWhenFnFailsAgain (items.Store: if fn fails for any item, nothing
// is written): a batch writes a new item and a change to an existing one; a third item's write loses to
// another replica, which changed it between the batch's read and its write, and fn fails when the batch
// decides that item again. The batch returns fn's error, and takes back what it wrote: the new item is
// gone, the changed one is as it was; the other replica's change stays. The kept counts follow.
func TestTransitionManyTakesBackItsWritesWhenFnFailsAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open()
	other := e.open()
	create(t, s, "kept")
	create(t, s, "raced")
	before, _ := s.Get(t.Context(), "acme", "kept")
	keys := []string{"new", "kept", "raced"}
	calls := map[string]int{}
	_, err := s.TransitionMany(t.Context(), "acme", keys, func(i int, cur *items.Item) (*items.Item, error) {
		calls[keys[i]]++
		switch {
		case keys[i] == "new":
			return &items.Item{Tenant: "acme", Key: "new", State: items.StatePrepared, Fingerprint: fp1, Attempts: []items.Attempt{},
				History: []items.Event{{At: time.Now(), Kind: items.EventPrepared}}}, nil
		case keys[i] == "raced" && calls["raced"] == 1:
			if _, err := other.Transition(t.Context(), "acme", "raced", note("the other replica's change")); err != nil {
				t.Fatal(err)
			}
		case keys[i] == "raced":
			return nil, errFnFailed
		}
		cur.State = items.StateFailed
		return note("this batch")(cur)
	})
	if !errors.Is(err, errFnFailed) {
		t.Fatalf("err = %v, want fn's error", err)
	}
	if calls["raced"] != 2 {
		t.Fatalf("fn decided raced %d times, want twice", calls["raced"])
	}
	if _, err := s.Get(t.Context(), "acme", "new"); !errors.Is(err, items.ErrNotFound) {
		t.Errorf("the new item: %v, want it taken back", err)
	}
	kept, _ := s.Get(t.Context(), "acme", "kept")
	if kept.State != items.StatePrepared || len(notes(kept)) != 0 || kept.Version <= before.Version {
		t.Errorf("kept: %s, notes %q, version %d; want it prepared again, without the batch's note, at a later version", kept.State, notes(kept), kept.Version)
	}
	raced, _ := s.Get(t.Context(), "acme", "raced")
	if fmt.Sprint(notes(raced)) != "[the other replica's change]" || raced.State != items.StatePrepared {
		t.Errorf("raced: %s, notes %q; want the other replica's change only", raced.State, notes(raced))
	}
	if want, got := recounted(t, s, time.Now()); want != got {
		t.Errorf("the counts\n%s\nwant (a recount)\n%s", got, want)
	}
}
