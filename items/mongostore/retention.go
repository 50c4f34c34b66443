package mongostore

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/replaysafe/companion/items"
)

// Retention (items.Retention). Settled items are removed by the retention loop, each by one guarded write
// (the _id, the version and the rev it was selected at) that turns it into a tombstone carrying its last
// change to the kept counts (counts.go: the tombstone goes once they are applied), not by a TTL index: a TTL
// index deletes behind the service's back, and the kept counts would go on counting the deleted items. The
// selection reads the index tenant_state_changed from its oldest end.

// SettledDestinations implements items.RetentionStore, from the kept counts.
func (s *Store) SettledDestinations(ctx context.Context) ([]items.DestinationRef, error) {
	cur, err := s.countsColl().Find(ctx, bson.D{{Key: "items", Value: bson.D{{Key: "$gt", Value: 0}}}, {Key: "needs_person", Value: false},
		{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{string(items.StateSucceeded), string(items.StateFailed)}}}}})
	if err != nil {
		return nil, unavailable("settled destinations", err)
	}
	var docs []countsDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, unavailable("settled destinations", err)
	}
	seen := map[items.DestinationRef]bool{}
	var out []items.DestinationRef
	for _, d := range docs {
		ref := items.DestinationRef{Tenant: d.Group.Tenant, Destination: d.Group.Destination}
		if !seen[ref] {
			seen[ref] = true
			out = append(out, ref)
		}
	}
	return out, nil
}

// RemoveSettled implements items.RetentionStore.
func (s *Store) RemoveSettled(ctx context.Context, p items.RemoveParams) (int, *items.RemovePosition, error) {
	filter := bson.D{{Key: "tenant", Value: p.Tenant}, {Key: "state", Value: string(p.State)},
		{Key: "updated_at", Value: bson.D{{Key: "$lte", Value: p.ChangedBefore}}}, {Key: "destination", Value: p.Destination},
		{Key: "needs_person", Value: false},
		// Settled: nothing left for the sweeper (items.Facts.SweepCandidate): not retryable and no duplicate
		// effect, or acknowledged by a person in the current attempt, as this build wrote the document
		// (acknowledgedNow). Not by sweep_candidate false alone: an earlier build run again on the ledger
		// leaves it as this build wrote it, also on an acknowledged item it retried into another retryable
		// failure, which is a new attempt's failure, not settled. Item.Settled checks each below.
		{Key: "$or", Value: bson.A{
			bson.D{{Key: "retryable", Value: false}, {Key: "duplicate_effect", Value: false}},
			acknowledgedNow,
		}}}
	if a := p.After; a != nil {
		filter = bson.D{{Key: "$and", Value: bson.A{filter, bson.D{{Key: "$or", Value: bson.A{
			bson.D{{Key: "updated_at", Value: bson.D{{Key: "$gt", Value: a.UpdatedAt}}}},
			bson.D{{Key: "updated_at", Value: a.UpdatedAt}, {Key: "key", Value: bson.D{{Key: "$gt", Value: a.Key}}}},
		}}}}}}
	}
	cur, err := s.items.Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "updated_at", Value: 1}, {Key: "key", Value: 1}}).
		SetLimit(int64(p.Limit)))
	if err != nil {
		return 0, nil, unavailable("find settled items", err)
	}
	var docs []itemDoc
	if err := cur.All(ctx, &docs); err != nil {
		return 0, nil, unavailable("find settled items", err)
	}
	if len(docs) == 0 {
		return 0, nil, nil
	}
	removed := 0
	var due []countJob
	defer func() { s.applyDue(ctx, due) }()
	for i := range docs {
		d := &docs[i]
		it := d.item()
		if !it.Settled() {
			continue
		}
		changes := items.CountChanges{}
		changes.Remove(it)
		rev := newRev()
		at := msTime(time.Now())
		if !at.After(d.UpdatedAt) {
			at = d.UpdatedAt.Add(time.Millisecond)
		}
		t := itemDoc{ID: d.ID, Tombstone: true, Version: d.Version + 1, Rev: rev, UpdatedAt: at, CountDue: dueOf(changes, nil, rev, s.serverNow())}
		res, err := s.items.UpdateOne(ctx, guard(d), toTombstone(t))
		if err != nil {
			return removed, nil, unavailable("remove settled item", err)
		}
		if res.MatchedCount == 0 {
			continue // it changed since: not removed
		}
		due = append(due, countJob{id: t.ID, entries: t.CountDue})
		removed++
		// The item's alerts and probe claims go with it.
		for _, c := range []*mongo.Collection{s.alerts(), s.probes()} {
			if _, err := c.DeleteMany(ctx, bson.D{{Key: "tenant", Value: d.Tenant}, {Key: "key", Value: d.Key}}); err != nil {
				return removed, nil, unavailable("remove the alerts and probes of an item", err)
			}
		}
	}
	if len(docs) < p.Limit {
		return removed, nil, nil
	}
	last := docs[len(docs)-1]
	return removed, &items.RemovePosition{UpdatedAt: last.UpdatedAt, Key: last.Key}, nil
}

// sweepCandidatesRefreshedID marks, in meta, a ledger whose documents a person acknowledged carry their
// sweep_candidate and resolution.current_attempt (refreshSweepCandidates).
const sweepCandidatesRefreshedID = "sweep_candidates_refreshed"

// refreshBatch bounds the documents one update of refreshSweepCandidates writes.
const refreshBatch = 1000

// refreshFields are the fields refreshSweepCandidates reads of a document: those items.Facts.SweepCandidate
// and resolution.current_attempt are derived from (the need for a person, the state, retryable, the
// duplicate effect, the attempt, and of the history only each event's kind, outcome and attempt), and
// those its guarded update names. The rest of the document (the attempts, the history's other fields:
// most of its bytes) stays on the server.
var refreshFields = bson.D{{Key: "tenant", Value: 1}, {Key: "key", Value: 1}, {Key: "version", Value: 1}, {Key: "needs_person", Value: 1},
	{Key: "state", Value: 1}, {Key: "retryable", Value: 1}, {Key: "duplicate_effect", Value: 1}, {Key: "attempt", Value: 1},
	{Key: "history.kind", Value: 1}, {Key: "history.outcome", Value: 1}, {Key: "history.attempt", Value: 1}}

// refreshSweepCandidates gives the documents a person acknowledged that lack sweep_candidate or
// resolution.current_attempt (this build writes both) the two fields, once per ledger (a marker in meta): those of an
// earlier build, so that an acknowledged retryable failure or duplicate effect stops being a sweep
// candidate and becomes settled (items.Item.Settled) without a person touching it again, and those an
// earlier build run again on the ledger wrote since (its writes drop current_attempt), if the marker was
// removed for it (docs/configuration.md). Only those can be candidates by their other fields and none
// by their facts: an acknowledgement is what changed. It reads the documents whose last resolution is
// acknowledged and that lack either field (one pass over the items, which have no index for it: once;
// only the fields refreshFields names; it keeps only their _ids, versions and the values to write), and
// then writes both fields on those that are still at the version it read and still lack one: one update
// per version read and values, of up to refreshBatch documents, guarded by their _ids, that version and
// the lack. (One update per document costs a round trip each on MongoDB, and on FerretDB v1.24, the
// test server, a read of the whole collection each, as it looks a document up by its _id only for a
// filter of _id alone.) Documents of other kinds get the fields
// at their next write, and until then the fields the queries read for them say the same. It returns how
// many it made no sweep candidates.
func (s *Store) refreshSweepCandidates(ctx context.Context) (int, error) {
	err := s.meta.FindOne(ctx, bson.D{{Key: "_id", Value: sweepCandidatesRefreshedID}}).Err()
	if err == nil {
		return 0, nil
	}
	if !errors.Is(err, mongo.ErrNoDocuments) {
		return 0, unavailable("read meta", err)
	}
	lacking := bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "sweep_candidate", Value: bson.D{{Key: "$exists", Value: false}}}},
		bson.D{{Key: "resolution.current_attempt", Value: bson.D{{Key: "$exists", Value: false}}}},
	}}}
	cur, err := s.items.Find(ctx, and(bson.D{{Key: "needs_person", Value: false}, {Key: "resolution.outcome", Value: items.ResolveAcknowledged}}, lacking),
		options.Find().SetProjection(refreshFields))
	if err != nil {
		return 0, unavailable("refresh sweep candidates", err)
	}
	// Of each document only its _id, version and the values to write are kept (some fifty bytes: 5 MB for
	// 100,000 acknowledged items), all of them before the first write, so that each update carries up to
	// refreshBatch documents of one group whatever order they were read in, and no cursor stays open while
	// the pass writes.
	type group struct {
		version                   int64
		candidate, currentAttempt bool
	}
	batch := map[group][]string{}
	for cur.Next(ctx) {
		var d itemDoc
		if err := cur.Decode(&d); err != nil {
			continue // a document that no longer decodes is left as it is: Get names it
		}
		it := d.item()
		g := group{version: d.Version, candidate: it.Facts().SweepCandidate, currentAttempt: it.ResolveOfCurrentAttempt() != nil}
		batch[g] = append(batch[g], itemID(d.Tenant, d.Key))
	}
	err = cur.Err()
	cur.Close(ctx)
	if err != nil {
		return 0, unavailable("refresh sweep candidates", err)
	}
	n := 0
	for g, ids := range batch {
		for len(ids) > 0 {
			some := ids[:min(len(ids), refreshBatch)]
			ids = ids[len(some):]
			res, err := s.items.UpdateMany(ctx, and(bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: some}}}, {Key: "version", Value: g.version}}, lacking),
				bson.D{{Key: "$set", Value: bson.D{{Key: "sweep_candidate", Value: g.candidate}, {Key: "resolution.current_attempt", Value: g.currentAttempt}}}})
			if err != nil {
				return n, unavailable("refresh sweep candidates", err)
			}
			if !g.candidate {
				n += int(res.ModifiedCount)
			}
		}
	}
	if _, err := s.meta.InsertOne(ctx, bson.D{{Key: "_id", Value: sweepCandidatesRefreshedID}}); err != nil && !mongo.IsDuplicateKeyError(err) {
		return n, unavailable("write meta", err)
	}
	return n, nil
}
