package mongostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/replaysafe/companion/items"
)

// Transition implements items.Store: read, decide, then one conditional single-document write; a write
// that finds the item changed since the read decides again on a fresh read. An answer that writes
// nothing (fn returns nil or an error) is given only once a linearizable read shows the item as fn saw
// it (confirm). If the write fails, a claim it may have made is taken back (undo.go).
func (s *Store) Transition(ctx context.Context, tenant, key string, fn items.TransitionFunc) (*items.Item, error) {
	log := newCallLog()
	d, err := s.transition(ctx, log, tenant, key, nil, fn)
	if err != nil {
		err = s.undo(ctx, log, err, false)
	}
	s.applyDue(ctx, log.due)
	if err != nil {
		return nil, err
	}
	return itemOf(d), nil
}

// newRev returns a revision token (itemDoc.Rev).
func newRev() string { return newToken() }

// seen is what a transition already knows of an item: the document last read or written (nil: none
// exists). It saves a read when a decision is made again; it is only a first guess, since the write's
// guard refuses it when another writer came in between. confirmed says it was read linearizably (confirm):
// a decision on it that writes nothing needs no other read.
type seen struct {
	doc       *itemDoc
	confirmed bool
}

// transition decides and writes one item, recording its writes in log, and returns the stored document
// afterwards (what it wrote, or what fn saw when it wrote nothing; nil or a tombstone for no item). hint,
// when set, is what was read already (TransitionMany's, or confirm's): the first decision is made on it
// without a read.
func (s *Store) transition(ctx context.Context, log *callLog, tenant, key string, hint *seen, fn items.TransitionFunc) (*itemDoc, error) {
	for race := 0; ; race++ {
		if race == maxRaces {
			return nil, fmt.Errorf("%w: mongodb: item %q changed under %d attempts to change it", items.ErrUnavailable, key, maxRaces)
		}
		if err := ctx.Err(); err != nil {
			return nil, unavailable("transition", err)
		}
		var cur *itemDoc
		confirmed := false
		if hint != nil {
			cur, confirmed, hint = hint.doc, hint.confirmed, nil
		} else {
			var err error
			if cur, err = s.read(ctx, tenant, key); err != nil {
				return nil, err
			}
		}
		// fn gets its own copy: the item as read stays intact if fn changes it and then writes nothing.
		next, err := fn(itemOf(cur))
		if err != nil || next == nil {
			if errors.Is(err, items.ErrUnavailable) {
				return nil, err // not an answer about the item
			}
			if confirmed {
				return cur, err
			}
			now, cerr := s.confirm(ctx, tenant, key, cur)
			if cerr != nil {
				return nil, cerr
			}
			if now != nil {
				hint = &seen{doc: now.doc, confirmed: true} // the item changed since the read: decide again on what is stored
				continue
			}
			return cur, err
		}
		if err := checkReturned(tenant, key, next); err != nil {
			return nil, err
		}
		stored, err := s.write(ctx, log, cur, s.prepare(cur, decided(next)))
		if err != nil {
			return nil, err
		}
		if stored == nil {
			continue // another writer created or changed the item since the read: decide again
		}
		return stored, nil
	}
}

// changed is what confirm found stored when it differs from what a decision saw.
type changed struct{ doc *itemDoc }

// confirm reads the item with read concern linearizable and reports whether it is still what cur is
// (nil: the same; else what is stored now). A decision that writes nothing was made on a read with the
// default read concern, which may come from a primary about to lose an election: a change applied there
// and rolled back (a report answered "unchanged" to its repeat), or a change another primary committed
// meanwhile (a claim answered "not a claim of this item") would be answered for good. A linearizable read
// returns the newest majority-committed document, from a primary that was still the primary after the
// read; it waits for a majority, bounded by the operation's deadline (the driver sends it as maxTimeMS).
func (s *Store) confirm(ctx context.Context, tenant, key string, cur *itemDoc) (*changed, error) {
	var d itemDoc
	err := s.confirmed.FindOne(ctx, bson.D{{Key: "_id", Value: itemID(tenant, key)}}).Decode(&d)
	var now *itemDoc
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
	case err != nil:
		return nil, unavailable("confirm item", err)
	default:
		now = &d
	}
	if sameDoc(cur, now) {
		return nil, nil
	}
	return &changed{doc: now}, nil
}

// sameDoc reports whether a and b are the same write of a document (nil: none).
func sameDoc(a, b *itemDoc) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Version == b.Version && a.Rev == b.Rev && a.UpdatedAt.Equal(b.UpdatedAt)
}

// checkReturned refuses an item fn returned for another tenant or key than the one it was called for.
func checkReturned(tenant, key string, next *items.Item) error {
	if next.Tenant != tenant || next.Key != key {
		return fmt.Errorf("mongostore: transition of %q returned item %q of tenant %q", key, next.Key, next.Tenant)
	}
	return nil
}

// write stores d, decided on cur (nil: no document): an insert, or a conditional update, first recorded
// in log. It returns the stored document, or nil when another writer created or changed the item since
// cur was read. An acknowledged write's kept counts are recorded for the call to apply (counts.go).
func (s *Store) write(ctx context.Context, log *callLog, cur *itemDoc, d itemDoc) (*itemDoc, error) {
	forget := log.wrote(cur, d)
	var stored *itemDoc
	var err error
	if cur == nil {
		stored, err = s.insert(ctx, d)
	} else {
		stored, err = s.update(ctx, cur, d)
	}
	switch {
	case err == nil && stored == nil:
		forget() // certainly not written: another writer came first
	case err == nil:
		log.acked(d)
		log.count(stored.ID, d.CountDue)
	}
	return stored, err
}

// prepare returns the document to write for next, decided on cur (nil, or a tombstone, for a new item):
// one version more than cur, a new rev, created_at kept, updated_at strictly later than cur's even when
// the clock stands still or steps back (the operator's list is ordered by it), and the changes to the
// kept counts from cur to next as its entries.
func (s *Store) prepare(cur *itemDoc, next written) itemDoc {
	d := toDoc(next.it, next.facts)
	d.ID = itemID(d.Tenant, d.Key)
	if d.CreatedAt.IsZero() {
		d.CreatedAt = msTime(time.Now())
	}
	if d.UpdatedAt.IsZero() {
		d.UpdatedAt = msTime(time.Now())
	}
	d.Version = 1
	if cur != nil {
		d.Version = cur.Version + 1
		if !d.UpdatedAt.After(cur.UpdatedAt) {
			d.UpdatedAt = cur.UpdatedAt.Add(time.Millisecond)
		}
	}
	d.Rev = newRev()
	changes := items.CountChanges{}
	next.move(changes, cur)
	d.CountDue = dueOf(changes, seriesOf(cur, &d), d.Rev, s.serverNow())
	return d
}

// insert creates the item. It returns nil, and writes nothing, when the item already exists.
//
// ATOMICITY: the unique _id index makes an insert of an existing _id fail as a whole, so of any number of
// concurrent creators exactly one inserts.
func (s *Store) insert(ctx context.Context, d itemDoc) (*itemDoc, error) {
	_, err := s.items.InsertOne(ctx, d)
	if err == nil {
		err = s.injected("insert")
	}
	if err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return nil, nil
		}
		return nil, unavailable("insert item", err)
	}
	return &d, nil
}

// guard is the filter of a write decided on cur: its _id, version and rev. A document of an earlier build
// has no rev: then its state is named too, as before.
func guard(cur *itemDoc) bson.D {
	f := bson.D{{Key: "_id", Value: cur.ID}, {Key: "version", Value: cur.Version}}
	if cur.Rev == "" {
		return append(f, bson.E{Key: "rev", Value: nil}, bson.E{Key: "state", Value: cur.State})
	}
	return append(f, bson.E{Key: "rev", Value: cur.Rev})
}

// replace is the update that makes the document cur d: a $set of every field of d but its entries, which
// are appended ($push, see itemDoc.CountDue), and, over a tombstone, the tombstone's mark removed.
func replace(cur *itemDoc, d itemDoc) bson.D {
	due := d.CountDue
	d.ID, d.CountDue = "", nil // _id is immutable; the filter names it
	u := bson.D{{Key: "$set", Value: d}}
	if len(due) > 0 {
		u = append(u, bson.E{Key: "$push", Value: bson.D{{Key: "count_due", Value: bson.D{{Key: "$each", Value: due}}}}})
	}
	if cur != nil && cur.Tombstone {
		u = append(u, bson.E{Key: "$unset", Value: bson.D{{Key: "tombstone", Value: ""}}})
	}
	return u
}

// update replaces the stored fields of the item with d, if the item is still the write cur was read at.
// It returns the stored document afterwards, or nil when the guard matched nothing (another writer changed
// the item since the read).
//
// ATOMICITY: one FindOneAndUpdate on one document. MongoDB evaluates the filter and applies the update
// atomically for a single document, so two writers that read the same version cannot both match: the
// second finds the version and rev moved and matches nothing. The rev cannot repeat, so neither can a
// guard: an item removed and created again reaches the same version with another rev.
func (s *Store) update(ctx context.Context, cur *itemDoc, d itemDoc) (*itemDoc, error) {
	var stored itemDoc
	err := s.items.FindOneAndUpdate(ctx, guard(cur), replace(cur, d),
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&stored)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err == nil {
		err = s.injected("update")
	}
	if err != nil {
		return nil, unavailable("update item", err)
	}
	return &stored, nil
}
