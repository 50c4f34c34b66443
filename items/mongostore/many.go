package mongostore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/replaysafe/companion/items"
)

// batchItemAllowance is what a batch's deadline grows by per item, over the store's timeout: the server's
// work for one item (its document read, written with the batch's others, and read again), not a round
// trip: a batch costs the same few round trips whatever its size.
const batchItemAllowance = 10 * time.Millisecond

// batchTimeout is the deadline of a batch of n items: 10 s for 500.
func (s *Store) batchTimeout(n int) time.Duration {
	return s.timeout + time.Duration(n)*batchItemAllowance
}

// TransitionMany implements items.Store without a transaction (the ledger uses none), in a fixed number
// of round trips whatever the batch's size:
//
//  1. one query reads every key; fn runs for every key in order, each call on what the earlier calls left
//     (a key may repeat). If fn fails, nothing has been written.
//  2. the new items go in one unordered insert of many (each insert atomic on its own), the changes to
//     existing items in one unordered bulk write of updates, one per key (its calls' last document), each
//     guarded by the version and rev its first call saw, as Transition's.
//  3. one linearizable read of the keys not inserted confirms which updates landed, and that the items
//     the calls wrote nothing to are as they saw them (see confirm).
//
// A key whose write lost to another writer (its insert found the _id taken, its guard matched nothing), or
// whose item changed although its calls wrote nothing, has its calls decided again, one by one as
// Transition decides them, on what the confirming read found. Should fn fail then, the call takes back
// every write it made (undo.go) before it returns fn's error: nothing of the batch stays written, but
// where another writer has changed an item since (its change built on this one, and stays). When the store
// fails after writing, the claims it wrote (or may have written) are taken back before it answers, so that
// a batch answered 503 leaves no claim held by nobody.
//
// The whole call has a deadline sized to the batch (batchTimeout); the undo has one of its own.
func (s *Store) TransitionMany(ctx context.Context, tenant string, keys []string, fn func(i int, cur *items.Item) (*items.Item, error)) ([]*items.Item, error) {
	ctx, cancel := context.WithTimeout(ctx, s.batchTimeout(len(keys)))
	defer cancel()
	log := newCallLog()
	defer func() { s.applyDue(ctx, log.due) }()
	out, err := s.transitionMany(ctx, log, tenant, keys, func(i int, cur *items.Item) (*items.Item, error) {
		next, err := fn(i, cur)
		if err != nil {
			return nil, fnFailed{err}
		}
		return next, nil
	})
	var failed fnFailed
	switch {
	case err == nil:
		return out, nil
	case errors.As(err, &failed):
		return nil, s.undo(ctx, log, failed.err, true)
	}
	return nil, s.undo(ctx, log, err, false)
}

// fnFailed is an error of a batch's fn, as TransitionMany returns it.
type fnFailed struct{ err error }

func (e fnFailed) Error() string { return e.err.Error() }
func (e fnFailed) Unwrap() error { return e.err }

// plan is what the first pass decided for one key of a batch.
type plan struct {
	// stored is the document read (nil: none), last what the key's calls leave (stored when none writes).
	stored, last *itemDoc
	// decided is what last was made of, when a call wrote.
	decided *written
	calls   []int
	// lost: the key's calls are decided again, on fresh.
	lost  bool
	fresh *itemDoc
}

// transitionMany is TransitionMany, recording its writes in log.
func (s *Store) transitionMany(ctx context.Context, log *callLog, tenant string, keys []string, fn func(i int, cur *items.Item) (*items.Item, error)) ([]*items.Item, error) {
	view, err := s.readMany(ctx, s.items, tenant, keys)
	if err != nil {
		return nil, err
	}
	var plans map[string]*plan
	var order []string
	after := make([]*itemDoc, len(keys)) // the document right after each call
	for race := 0; ; race++ {
		if race == maxRaces {
			return nil, fmt.Errorf("%w: mongodb: the batch's items changed under %d attempts to decide it", items.ErrUnavailable, maxRaces)
		}
		plans, order, err = s.decideMany(tenant, keys, view, after, fn)
		var failed fnFailed
		if err == nil || !errors.As(err, &failed) || errors.Is(err, items.ErrUnavailable) {
			break
		}
		// fn refused on what the first read saw, and nothing is written: an answer that writes nothing, so
		// given only when a linearizable read shows the items unchanged.
		now, rerr := s.readMany(ctx, s.confirmed, tenant, keys)
		if rerr != nil {
			return nil, rerr
		}
		same := true
		for k, d := range view {
			same = same && sameDoc(d, now[k])
		}
		if same {
			return nil, err
		}
		view = now
	}
	if err != nil {
		return nil, err
	}

	// The writes: the new items in one insert of many, the changes to existing ones in one bulk write.
	var newDocs []itemDoc
	var newKeys, updKeys []string
	var updates []mongo.WriteModel
	forget := map[string]func(){}
	for _, key := range order {
		p := plans[key]
		if p.decided == nil {
			continue
		}
		// The key's calls are written as one write of their last document, from the stored one: its kept
		// counts are the change from the stored document to the last.
		final := *p.last
		changes := items.CountChanges{}
		p.decided.move(changes, p.stored)
		final.CountDue = dueOf(changes, seriesOf(p.stored, &final), final.Rev, s.serverNow())
		p.last = &final
		forget[key] = log.wrote(p.stored, final)
		if p.stored == nil {
			newDocs, newKeys = append(newDocs, final), append(newKeys, key)
		} else {
			updates, updKeys = append(updates, mongo.NewUpdateOneModel().SetFilter(guard(p.stored)).SetUpdate(replace(p.stored, final))), append(updKeys, key)
		}
	}
	inserted, err := s.insertMany(ctx, newDocs)
	if err != nil {
		return nil, err
	}
	for j, key := range newKeys {
		if inserted[j] == nil {
			forget[key]() // certainly not written: another writer created the item first
			plans[key].lost = true
			continue
		}
		log.acked(*inserted[j])
		log.count(inserted[j].ID, inserted[j].CountDue)
	}
	var matched int64
	if len(updates) > 0 {
		r, err := bulk(ctx, s.items, updates, false)
		if err == nil && len(r.failed) > 0 {
			err = fmt.Errorf("%d of %d updates refused", len(r.failed), len(updates))
		}
		if err == nil {
			err = s.injected("bulk update")
		}
		if err != nil {
			return nil, unavailable("update items", err)
		}
		matched = r.matched
	}

	// The confirming read: every key but those inserted.
	var toRead []string
	for _, key := range order {
		if p := plans[key]; p.stored != nil || p.decided == nil || p.lost {
			toRead = append(toRead, key)
		}
	}
	fresh, err := s.readMany(ctx, s.confirmed, tenant, toRead)
	if err != nil {
		return nil, err
	}
	landed, unsure := 0, []string{}
	for _, key := range updKeys {
		p, r := plans[key], fresh[key]
		switch {
		case r != nil && r.Rev == p.last.Rev:
			landed++
		case r == nil || r.Version <= p.last.Version:
			p.lost = true // another writer came first (the version it wrote, or none, is not this one)
		case len(p.last.CountDue) > 0:
			// Written over since: the write's own entries, which only this call applies, are still on the
			// document if and only if it landed.
			if hasEntry(r, p.last.CountDue[0].ID) {
				landed++
			} else {
				p.lost = true
			}
		default:
			unsure = append(unsure, key)
		}
	}
	// A write written over since that carried no entry: the bulk write's count of matches tells, unless some
	// of these landed and some did not (two writers each wrote twice over the batch's items within its round
	// trip): then the call fails, and its claims are taken back.
	switch n := int(matched) - landed; {
	case len(unsure) == 0:
	case n == len(unsure):
	case n == 0:
		for _, key := range unsure {
			plans[key].lost = true
		}
	default:
		return nil, fmt.Errorf("%w: mongodb: cannot tell which of the batch's writes landed", items.ErrUnavailable)
	}
	for _, key := range order {
		p := plans[key]
		switch {
		case p.lost:
			p.fresh = fresh[key]
			if p.decided != nil && p.stored != nil {
				forget[key]() // the guard matched nothing: certainly not written
			}
		case p.decided != nil && p.stored != nil:
			log.acked(*p.last)
			log.count(p.last.ID, present(fresh[key], p.last.CountDue))
		case p.decided == nil && !sameDoc(p.stored, fresh[key]):
			p.lost, p.fresh = true, fresh[key] // changed although nothing was written: decided again
		}
	}

	out := make([]*items.Item, len(keys))
	for i, key := range keys {
		if !plans[key].lost {
			out[i] = itemOf(after[i])
		}
	}
	for _, key := range order {
		p := plans[key]
		if !p.lost {
			continue
		}
		hint := p.fresh
		for _, i := range p.calls {
			// The first decision is made on the confirming read's document, linearizable; the next ones on
			// what the one before stored.
			d, err := s.transition(ctx, log, tenant, key, &seen{doc: hint, confirmed: i == p.calls[0]}, func(cur *items.Item) (*items.Item, error) { return fn(i, cur) })
			if err != nil {
				return nil, err
			}
			out[i], hint = itemOf(d), d
		}
	}
	return out, nil
}

// decideMany is the first pass of a batch: fn for every key in order, on view and on what the earlier
// calls left, writing nothing. It sets after[i] to the document right after call i.
func (s *Store) decideMany(tenant string, keys []string, view map[string]*itemDoc, after []*itemDoc,
	fn func(i int, cur *items.Item) (*items.Item, error)) (map[string]*plan, []string, error) {
	plans := map[string]*plan{}
	var order []string
	for i, key := range keys {
		p := plans[key]
		if p == nil {
			p = &plan{stored: view[key], last: view[key]}
			plans[key] = p
			order = append(order, key)
		}
		p.calls = append(p.calls, i)
		next, err := fn(i, itemOf(p.last))
		if err != nil {
			return nil, nil, err
		}
		if next != nil {
			if err := checkReturned(tenant, key, next); err != nil {
				return nil, nil, err
			}
			w := decided(next)
			d := s.prepare(p.last, w)
			p.last, p.decided = &d, &w
		}
		after[i] = p.last
	}
	return plans, order, nil
}

// hasEntry reports whether d holds the kept-counts entry id.
func hasEntry(d *itemDoc, id string) bool {
	return slices.ContainsFunc(d.CountDue, func(e dueEntry) bool { return e.ID == id })
}

// present returns the entries of mine that d holds.
func present(d *itemDoc, mine []dueEntry) []dueEntry {
	if d == nil {
		return nil
	}
	var out []dueEntry
	for _, e := range mine {
		if hasEntry(d, e.ID) {
			out = append(out, e)
		}
	}
	return out
}

// readMany returns the stored document of every key (nil for a key without one; a tombstone too) in one
// query of coll (the items, or the items read linearizably), where reading them one by one cost a round
// trip each. Returns ErrUnavailable.
func (s *Store) readMany(ctx context.Context, coll *mongo.Collection, tenant string, keys []string) (map[string]*itemDoc, error) {
	view := make(map[string]*itemDoc, len(keys))
	ids := make([]string, 0, len(keys))
	for _, key := range keys {
		if err := checkID(tenant, key); err != nil {
			return nil, err
		}
		if _, ok := view[key]; !ok {
			view[key] = nil
			ids = append(ids, itemID(tenant, key))
		}
	}
	byID, err := s.readIDs(ctx, coll, ids)
	if err != nil {
		return nil, err
	}
	for _, key := range keys {
		view[key] = byID[itemID(tenant, key)]
	}
	return view, nil
}

// insertMany creates new items in one round trip. It returns the stored document of each one it
// created, and nil for each one whose _id existed already (another writer created the item since it was
// read): that one is decided again by the caller. Returns ErrUnavailable when the server did not
// acknowledge the inserts; some of them may have been made then, each one whole.
//
// ATOMICITY: the inserts are unordered and independent; each one is atomic on its own, and the unique _id
// index lets exactly one of any number of concurrent creators of an item insert it, as in insert.
func (s *Store) insertMany(ctx context.Context, docs []itemDoc) ([]*itemDoc, error) {
	out := make([]*itemDoc, len(docs))
	if len(docs) == 0 {
		return out, nil
	}
	for i := range docs {
		out[i] = &docs[i]
	}
	_, err := s.items.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	if err == nil {
		err = s.injected("insert many")
	}
	var bwe mongo.BulkWriteException
	switch {
	case err == nil:
		return out, nil
	case !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0:
		return nil, unavailable("insert items", err)
	}
	for _, we := range bwe.WriteErrors {
		if !mongo.IsDuplicateKeyError(we.WriteError) || we.Index < 0 || we.Index >= len(out) {
			return nil, unavailable("insert items", err)
		}
		out[we.Index] = nil
	}
	return out, nil
}
