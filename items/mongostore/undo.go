package mongostore

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/replaysafe/companion/items"
)

// A refused request leaves nothing behind (API.md, "Additions of 2026-12-01"). A Transition or
// TransitionMany that fails after writing (a write concern error, a timeout after the primary applied a
// write, a stepdown between two writes of a batch) answers ErrUnavailable, and its caller (a before-write
// answered 503) never writes to the destination: a claim it wrote would be held by nobody, and the item
// would sit in flight until its lease expired into unknown. So before answering, the store takes back the
// claims the call wrote, or may have written; a batch whose fn fails after it wrote (an item decided again)
// takes back every write, so that nothing of it stays (items.Store). Each is guarded by the version and rev
// of the call's own write, so an item another writer changed since stays as that writer left it. Only if the
// undo fails too (the server is gone) is a claim left to expire.
//
// A write whose answer was lost may also still be on its way to the server (delayed in the network, or
// queued behind others), and land after the undo: a claim brought back, held by nobody. So a write whose
// outcome is unknown is fenced first: the document it was decided on gets another rev (or, where there was
// none, a tombstone takes the _id), so that its guard, or its insert, cannot match any more. The fences and
// the undos of a call are one ordered bulk write, one round trip, each fence before its undo: whether the
// write lands before the fence (the undo takes it back) or after it (it matches nothing), nothing of it
// stays.

// callLog is what one call (a Transition, a TransitionMany) wrote or may have written (a write whose
// answer was lost), by _id, for the undo; and the kept counts of its acknowledged writes, which it applies
// before it answers (applyDue). A write that certainly did not happen (its guard matched nothing, its
// insert found the _id taken) is forgotten, so an entry's last write is always the call's own, or unknown.
type callLog struct {
	writes map[string]*undoEntry
	due    []countJob
}

func newCallLog() *callLog { return &callLog{writes: map[string]*undoEntry{}} }

// count records the entries of the document id that a write of the call is known to have left on it.
func (c *callLog) count(id string, entries []dueEntry) {
	if len(entries) > 0 {
		c.due = append(c.due, countJob{id: id, entries: entries})
	}
}

type undoEntry struct {
	// base is what the call's first write of the item replaced (nil: no document).
	base *itemDoc
	// last is the call's last write of the item, applied or not; acked says it was acknowledged (and its
	// kept counts queued).
	last  itemDoc
	acked bool
}

// wrote records a write of d over replaced (nil: an insert), before it is sent. It returns the function
// that forgets it again, for a write that certainly did not happen.
func (c *callLog) wrote(replaced *itemDoc, d itemDoc) (forget func()) {
	u := c.writes
	id := d.ID
	prev, had := u[id]
	forget = func() {
		if had {
			u[id] = prev
		} else {
			delete(u, id)
		}
	}
	if had && replaced != nil && replaced.Version == prev.last.Version && replaced.Rev == prev.last.Rev {
		// The call's own earlier write is what this one replaces: the base stays.
		u[id] = &undoEntry{base: prev.base, last: d}
		return forget
	}
	u[id] = &undoEntry{base: replaced, last: d}
	return forget
}

// acked records that the write of d was acknowledged.
func (c *callLog) acked(d itemDoc) {
	if e, ok := c.writes[d.ID]; ok && e.last.Rev == d.Rev {
		e.acked = true
	}
}

// claimed reports whether e's last write holds a claim its base did not.
func (e *undoEntry) claimed() bool {
	base := live(e.base)
	return e.last.State == items.StateInFlight && (base == nil || base.Claim != e.last.Claim)
}

// undo takes back what log holds (only the claims, unless all) and returns err, which made the call
// fail; an undo that fails too is added to it. It runs even when ctx has ended (a timeout is one of the
// failures it repairs), as one ordered bulk write under one deadline (the store's timeout, and 10 ms for
// each item it takes back, as a batch's), so that a server that is gone costs one timeout, not one per
// claim. The kept counts follow from the entries its writes carry; a read
// afterwards finds which of them, and of the call's unacknowledged writes, landed, for the call to apply
// (if it fails, the repair pass applies them).
func (s *Store) undo(ctx context.Context, log *callLog, err error, all bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.batchTimeout(len(log.writes)))
	defer cancel()
	var models []mongo.WriteModel
	var ids []string
	backs := map[string]itemDoc{}
	for _, id := range slices.Sorted(maps.Keys(log.writes)) {
		e := log.writes[id]
		if !all && !e.claimed() {
			continue
		}
		if !e.acked {
			models = append(models, s.fence(e))
		}
		back, model := s.takeBack(e)
		models = append(models, model)
		ids = append(ids, id)
		backs[id] = back
	}
	if len(models) == 0 {
		return err
	}
	r, uerr := bulk(ctx, s.items, models, true)
	if uerr == nil && len(r.failed) > 0 {
		uerr = fmt.Errorf("%d writes refused", len(r.failed))
	}
	if uerr != nil {
		return fmt.Errorf("%w (taking back its claims failed too; they expire into unknown: %v)", err, uerr)
	}
	if docs, rerr := s.readIDs(ctx, s.items, ids); rerr == nil {
		for _, id := range ids {
			e, d := log.writes[id], docs[id]
			if !e.acked {
				log.count(id, present(d, e.last.CountDue))
			}
			log.count(id, present(d, backs[id].CountDue))
		}
	}
	return err
}

// fence is the write that keeps e's last write, whose outcome is unknown, from landing later: the document
// it was decided on gets a new rev (and version), or, where there was none, a tombstone takes the _id. It
// changes no item, and matches nothing once the write has landed.
func (s *Store) fence(e *undoEntry) mongo.WriteModel {
	if e.base == nil {
		return mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: e.last.ID}}).SetUpsert(true).
			SetUpdate(bson.D{{Key: "$setOnInsert", Value: tombstone(e.last.Version, newRev(), msTime(time.Now()))}})
	}
	return mongo.NewUpdateOneModel().SetFilter(guard(e.base)).
		SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "version", Value: e.base.Version + 1}, {Key: "rev", Value: newRev()}}}})
}

// takeBack returns the document that puts e's base back over its last write, and the write, guarded by
// the last write's version and rev: where there was no item, a tombstone (itemDoc.Tombstone), whose
// entries take the item out of the kept counts.
func (s *Store) takeBack(e *undoEntry) (itemDoc, mongo.WriteModel) {
	at := msTime(time.Now())
	if !at.After(e.last.UpdatedAt) {
		at = e.last.UpdatedAt.Add(time.Millisecond)
	}
	rev := newRev()
	changes := items.CountChanges{}
	changes.Move(itemOf(&e.last), itemOf(e.base))
	// The events the call's writes added to the item are taken out of the series again.
	series := seriesEntries(seriesOf(e.base, &e.last), msTime(s.serverNow()), true)
	filter := bson.D{{Key: "_id", Value: e.last.ID}, {Key: "version", Value: e.last.Version}, {Key: "rev", Value: e.last.Rev}}
	if live(e.base) == nil {
		d := itemDoc{ID: e.last.ID, Tombstone: true, Version: e.last.Version + 1, Rev: rev, UpdatedAt: at,
			CountDue: dueWith(changes, series, rev, s.serverNow())}
		return d, mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(toTombstone(d))
	}
	// The base as read may be a document of an earlier build, without sweep_candidate (read as false) and
	// resolution.current_attempt: it is written back as this build would.
	it := e.base.item()
	d := toDoc(it, it.Facts())
	d.ID, d.Version, d.Rev, d.UpdatedAt = e.last.ID, e.last.Version+1, rev, at
	d.CountDue = dueWith(changes, series, rev, s.serverNow())
	return d, mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(replace(&e.last, d))
}

// tombstone is the fields of a tombstone.
func tombstone(version int64, rev string, at time.Time) bson.D {
	return bson.D{{Key: "tombstone", Value: true}, {Key: "version", Value: version}, {Key: "rev", Value: rev}, {Key: "updated_at", Value: at}}
}

// toTombstone is the update that turns a document into the tombstone d: every field of an item removed,
// d's entries appended to those still due.
func toTombstone(d itemDoc) bson.D {
	u := bson.D{{Key: "$set", Value: tombstone(d.Version, d.Rev, d.UpdatedAt)}, {Key: "$unset", Value: itemFields()}}
	if len(d.CountDue) > 0 {
		u = append(u, bson.E{Key: "$push", Value: bson.D{{Key: "count_due", Value: bson.D{{Key: "$each", Value: d.CountDue}}}}})
	}
	return u
}

// itemFields is the $unset of every field of an item's document that a tombstone does not keep.
var itemFields = sync.OnceValue(func() bson.D {
	keep := []string{"_id", "version", "rev", "tombstone", "count_due", "updated_at"}
	var out bson.D
	t := reflect.TypeFor[itemDoc]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("bson"), ",")
		if name != "" && !slices.Contains(keep, name) {
			out = append(out, bson.E{Key: name, Value: ""})
		}
	}
	return out
})

// readIDs returns the documents of ids (nil for one without) in one query of coll.
func (s *Store) readIDs(ctx context.Context, coll *mongo.Collection, ids []string) (map[string]*itemDoc, error) {
	out := make(map[string]*itemDoc, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	cur, err := coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	if err != nil {
		return nil, unavailable("read items", err)
	}
	var docs []itemDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, unavailable("read items", err)
	}
	for i := range docs {
		out[docs[i].ID] = &docs[i]
	}
	return out, nil
}

// injected returns the failure a test's fault hook gives for a write of op that the server applied.
func (s *Store) injected(op string) error {
	if s.fault == nil {
		return nil
	}
	return s.fault(op)
}
