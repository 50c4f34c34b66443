package mongostore

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/replaysafe/companion/items"
)

// BatchItems returns up to limit items of tenant whose batch is batchID, ordered by batch_index (an item
// without one, null, first: MongoDB sorts null before numbers) and then key, after the position
// (afterIndex, afterKey) when afterKey is set. The tenant_batch index serves the filter and the order.
// Returns ErrUnavailable.
func (s *Store) BatchItems(ctx context.Context, tenant, batchID string, afterIndex *int, afterKey string, limit int) ([]*items.Item, error) {
	filter := bson.D{{Key: "tenant", Value: tenant}, {Key: "batch_id", Value: batchID}}
	switch {
	case afterKey == "":
	case afterIndex == nil:
		filter = append(filter, bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: "batch_index", Value: bson.D{{Key: "$ne", Value: nil}}}},
			bson.D{{Key: "batch_index", Value: nil}, {Key: "key", Value: bson.D{{Key: "$gt", Value: afterKey}}}},
		}})
	default:
		// $gt on a number never matches null, so the items without an index stay behind.
		filter = append(filter, bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: "batch_index", Value: bson.D{{Key: "$gt", Value: *afterIndex}}}},
			bson.D{{Key: "batch_index", Value: *afterIndex}, {Key: "key", Value: bson.D{{Key: "$gt", Value: afterKey}}}},
		}})
	}
	cur, err := s.items.Find(ctx, filter, options.Find().
		SetSort(bson.D{{Key: "batch_index", Value: 1}, {Key: "key", Value: 1}}).
		SetLimit(int64(limit)))
	if err != nil {
		return nil, unavailable("read batch", err)
	}
	var docs []itemDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, unavailable("read batch", err)
	}
	out := make([]*items.Item, len(docs))
	for i := range docs {
		out[i] = docs[i].item()
	}
	return out, nil
}

// BatchCounts returns the number of tenant's items of batch batchID per state, counting an in-flight item
// whose lease ended at or before now as unknown. It reads twice (the counts, then the expired leases),
// not atomically: a change between the two reads can show in the counts until the next call. Returns
// ErrUnavailable.
func (s *Store) BatchCounts(ctx context.Context, tenant, batchID string, now time.Time) (map[items.State]int, error) {
	match := bson.D{{Key: "tenant", Value: tenant}, {Key: "batch_id", Value: batchID}}
	cur, err := s.items.Aggregate(ctx, mongo.Pipeline{
		{{Key: "$match", Value: match}},
		{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$state"}, {Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}}},
	})
	if err != nil {
		return nil, unavailable("count batch", err)
	}
	var groups []struct {
		State items.State `bson:"_id"`
		N     int         `bson:"n"`
	}
	if err := cur.All(ctx, &groups); err != nil {
		return nil, unavailable("count batch", err)
	}
	counts := make(map[items.State]int, len(groups))
	for _, g := range groups {
		counts[g.State] += g.N
	}
	if counts[items.StateInFlight] == 0 {
		return counts, nil
	}
	expiredFilter := append(bson.D{}, match...)
	expiredFilter = append(expiredFilter, bson.E{Key: "state", Value: items.StateInFlight},
		bson.E{Key: "lease_expires_at", Value: bson.D{{Key: "$lte", Value: now}}})
	expired, err := s.items.CountDocuments(ctx, expiredFilter)
	if err != nil {
		return nil, unavailable("count batch", err)
	}
	if n := min(int(expired), counts[items.StateInFlight]); n > 0 {
		counts[items.StateInFlight] -= n
		counts[items.StateUnknown] += n
		if counts[items.StateInFlight] == 0 {
			delete(counts, items.StateInFlight)
		}
	}
	return counts, nil
}
