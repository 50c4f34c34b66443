package mongostore

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/replaysafe/companion/items"
)

// A refused request leaves nothing behind (API.md, "Additions of 2026-12-01"). A Transition or
// TransitionMany that fails after writing (a write concern error, a timeout after the primary applied a
// write, a stepdown between two writes of a batch) answers ErrUnavailable, and its caller (a before-write
// answered 503) never writes to the destination: a claim it wrote would be held by nobody, and the item
// would sit in flight until its lease expired into unknown. So before answering, the store takes back the
// claims the call wrote, or may have written: each is guarded by the version and claim of the call's own
// write, so an item another writer changed since stays as that writer left it. Only if the undo fails too
// (the server is gone) is a claim left to expire.

// undoLog is what one call wrote or may have written (a write whose answer was lost), by _id. A write
// that certainly did not happen (its guard matched nothing, its insert found the _id taken) is forgotten,
// so an entry's last write is always the call's own, or unknown.
type undoLog map[string]*undoEntry

type undoEntry struct {
	// base is what the call's first write of the item replaced (nil: the item did not exist).
	base *itemDoc
	// last is the call's last write of the item, applied or not.
	last itemDoc
	// counted is the state the kept counts (counts.go) hold the item in: base, or the call's last
	// acknowledged write (each is counted once acknowledged).
	counted *itemDoc
}

// wrote records a write of d over replaced (nil: an insert), before it is sent. It returns the function
// that forgets it again, for a write that certainly did not happen.
func (u undoLog) wrote(replaced *itemDoc, d itemDoc) (forget func()) {
	id := itemID(d.Tenant, d.Key)
	prev, had := u[id]
	forget = func() {
		if had {
			u[id] = prev
		} else {
			delete(u, id)
		}
	}
	if had && replaced != nil && replaced.Version == prev.last.Version {
		// The call's own earlier write is what this one replaces: the base stays.
		u[id] = &undoEntry{base: prev.base, last: d, counted: prev.counted}
		return forget
	}
	u[id] = &undoEntry{base: replaced, last: d, counted: replaced}
	return forget
}

// acked records that the write of d was acknowledged, and so counted.
func (u undoLog) acked(d *itemDoc) {
	if e, ok := u[itemID(d.Tenant, d.Key)]; ok && e.last.Version == d.Version {
		e.counted = d
	}
}

// claimed reports whether e's last write holds a claim its base did not.
func (e *undoEntry) claimed() bool {
	return e.last.State == items.StateInFlight && (e.base == nil || e.base.Claim != e.last.Claim)
}

// undo takes back the claims in log and returns err, which made the call fail; an undo that fails too is
// added to it. It runs even when ctx has ended (a timeout is one of the failures it repairs), one
// conditional write per claim, all under one deadline (the store's timeout), so that a server that is
// gone costs one timeout, not one per claim. The kept counts follow each undo that matched.
func (s *Store) undo(ctx context.Context, log undoLog, err error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	counts := items.CountChanges{}
	var failed error
	for id, e := range log {
		if !e.claimed() {
			continue
		}
		// ATOMICITY: one conditional single-document write, as update: it matches only while the item is
		// still at the call's own write, under its claim.
		guard := bson.D{{Key: "_id", Value: id}, {Key: "version", Value: e.last.Version}, {Key: "claim", Value: e.last.Claim}}
		var matched bool
		if e.base == nil {
			res, uerr := s.items.DeleteOne(ctx, guard)
			if uerr != nil {
				failed = uerr
				continue
			}
			matched = res.DeletedCount == 1
		} else {
			// The base as read may be a document of an earlier build, without sweep_candidate (read as
			// false) and resolution.current_attempt: write it as this build would.
			it := e.base.item()
			back := toDoc(it, it.Facts())
			back.Version = e.last.Version + 1
			back.UpdatedAt = msTime(time.Now())
			if !back.UpdatedAt.After(e.last.UpdatedAt) {
				back.UpdatedAt = e.last.UpdatedAt.Add(time.Millisecond)
			}
			res, uerr := s.items.UpdateOne(ctx, guard, bson.D{{Key: "$set", Value: back}})
			if uerr != nil {
				failed = uerr
				continue
			}
			matched = res.MatchedCount == 1
		}
		if matched {
			counts.Move(itemOf(e.counted), itemOf(e.base))
		}
	}
	_ = s.addCounts(context.WithoutCancel(ctx), counts) // a count that fails is off by the item: see counts.go
	if failed != nil {
		return fmt.Errorf("%w (taking back its claims failed too; they expire into unknown: %v)", err, failed)
	}
	return err
}

// injected returns the failure a test's fault hook gives for a write of op that the server applied.
func (s *Store) injected(op string) error {
	if s.fault == nil {
		return nil
	}
	return s.fault(op)
}
