package mongostore

import (
	"context"
	"errors"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/replaysafe/companion/items"
)

// Retention (items.Retention). Settled items are removed by the retention loop, one guarded deleteOne
// each (the _id, the version and the state it was selected at), not by a TTL index: a TTL index deletes
// behind the service's back, and the kept counts (counts.go) would go on counting the deleted items. The
// selection reads the index tenant_state_changed from its oldest end.

// SettledDestinations implements items.RetentionStore.
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
		ref := items.DestinationRef{Tenant: d.Tenant, Destination: d.Destination}
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
		// Settled: nothing left for the sweeper (items.Facts.SweepCandidate), as sweep_candidate says, or,
		// on a document of an earlier build that lacks it, not retryable and no duplicate effect. (A
		// document whose sweep_candidate says true is never both.) Item.Settled checks each below.
		{Key: "$or", Value: bson.A{
			bson.D{{Key: "sweep_candidate", Value: false}},
			bson.D{{Key: "retryable", Value: false}, {Key: "duplicate_effect", Value: false}},
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
	changes := items.CountChanges{}
	defer func() { _ = s.addCounts(context.WithoutCancel(ctx), changes) }()
	removed := 0
	for _, d := range docs {
		it := d.item()
		if !it.Settled() {
			continue
		}
		res, err := s.items.DeleteOne(ctx, bson.D{{Key: "_id", Value: itemID(d.Tenant, d.Key)}, {Key: "version", Value: d.Version},
			{Key: "state", Value: d.State}})
		if err != nil {
			return removed, nil, unavailable("remove settled item", err)
		}
		if res.DeletedCount == 0 {
			continue // it changed since: not removed
		}
		changes.Remove(it)
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
// sweep_candidate (refreshSweepCandidates).
const sweepCandidatesRefreshedID = "sweep_candidates_refreshed"

// refreshSweepCandidates gives the documents of an earlier build that a person acknowledged their
// sweep_candidate, once per ledger (a marker in meta), so that an acknowledged retryable failure or
// duplicate effect stops being a sweep candidate and becomes settled (items.Item.Settled) without a
// person touching it again. Only those can be candidates by their other fields and none by their facts:
// an acknowledgement is what changed. It reads the documents whose last resolution is acknowledged and
// that lack the field (one pass over the items, which have no index for it: once), and sets the field,
// guarded by the version, on those that still lack it. Documents of other kinds get the field at their
// next write, and until then the fields the queries read for them say the same. It returns how many it
// set.
func (s *Store) refreshSweepCandidates(ctx context.Context) (int, error) {
	err := s.meta.FindOne(ctx, bson.D{{Key: "_id", Value: sweepCandidatesRefreshedID}}).Err()
	if err == nil {
		return 0, nil
	}
	if !errors.Is(err, mongo.ErrNoDocuments) {
		return 0, unavailable("read meta", err)
	}
	lacking := bson.D{{Key: "sweep_candidate", Value: bson.D{{Key: "$exists", Value: false}}}}
	cur, err := s.items.Find(ctx, append(bson.D{{Key: "needs_person", Value: false},
		{Key: "resolution.outcome", Value: items.ResolveAcknowledged}}, lacking...))
	if err != nil {
		return 0, unavailable("refresh sweep candidates", err)
	}
	defer cur.Close(ctx)
	n := 0
	for cur.Next(ctx) {
		var d itemDoc
		if err := cur.Decode(&d); err != nil {
			continue // a document that no longer decodes is left as it is: Get names it
		}
		candidate := d.item().Facts().SweepCandidate
		res, err := s.items.UpdateOne(ctx, append(bson.D{{Key: "_id", Value: itemID(d.Tenant, d.Key)}, {Key: "version", Value: d.Version}}, lacking...),
			bson.D{{Key: "$set", Value: bson.D{{Key: "sweep_candidate", Value: candidate}}}})
		if err != nil {
			return n, unavailable("refresh sweep candidates", err)
		}
		if !candidate {
			n += int(res.ModifiedCount)
		}
	}
	if err := cur.Err(); err != nil {
		return n, unavailable("refresh sweep candidates", err)
	}
	if _, err := s.meta.InsertOne(ctx, bson.D{{Key: "_id", Value: sweepCandidatesRefreshedID}}); err != nil && !mongo.IsDuplicateKeyError(err) {
		return n, unavailable("write meta", err)
	}
	return n, nil
}
