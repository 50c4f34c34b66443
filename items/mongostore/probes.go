package mongostore

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/replaysafe/companion/items"
)

// ProbesCollection holds the claims of probe reads (package probes): one document per item, attempt and
// read, apart from the items so that a claim never rewrites an item or moves its version.
const ProbesCollection = "probes"

func (s *Store) probes() *mongo.Collection { return s.items.Database().Collection(ProbesCollection) }

// ClaimProbe takes read c.Read of attempt c.Attempt of an item for c.Claim until c.Until, when the item
// is unknown at that attempt (so no lease is live) and nobody holds a live claim on that read. It reports
// whether the claim is c.Claim's. Returns ErrUnavailable.
//
// ATOMICITY: the claim is one upsert whose filter holds "the read's claim has ended": when a live claim
// exists the filter matches nothing, the upsert's insert of the same _id fails on the unique _id index, and
// the claim is lost; so of any number of concurrent claims of one read, one wins. The item's state is read
// just before, not in the same statement (MongoDB's atomicity is per document): a probe's findings are
// checked again by the ledger's guarded transitions, so a claim on an item that settled meanwhile changes
// nothing.
func (s *Store) ClaimProbe(ctx context.Context, c items.ProbeClaim) (bool, error) {
	if err := checkID(c.Tenant, c.Key); err != nil {
		return false, err
	}
	n, err := s.items.CountDocuments(ctx, bson.D{{Key: "_id", Value: itemID(c.Tenant, c.Key)},
		{Key: "state", Value: items.StateUnknown}, {Key: "attempt", Value: c.Attempt}})
	if err != nil {
		return false, unavailable("claim probe", err)
	}
	if n == 0 {
		return false, nil
	}
	res, err := s.probes().UpdateOne(ctx,
		bson.D{{Key: "_id", Value: probeID(c)}, {Key: "claimed_until", Value: bson.D{{Key: "$lte", Value: msTime(c.Now)}}}},
		bson.D{
			{Key: "$set", Value: bson.D{{Key: "claim", Value: c.Claim}, {Key: "claimed_until", Value: msTime(c.Until)}}},
			{Key: "$setOnInsert", Value: bson.D{{Key: "tenant", Value: c.Tenant}, {Key: "key", Value: c.Key},
				{Key: "attempt", Value: c.Attempt}, {Key: "read", Value: c.Read}}},
		}, options.UpdateOne().SetUpsert(true))
	var we mongo.WriteException
	switch {
	case mongo.IsDuplicateKeyError(err) || (errors.As(err, &we) && mongo.IsDuplicateKeyError(we)):
		return false, nil
	case err != nil:
		return false, unavailable("claim probe", err)
	}
	return res.MatchedCount+res.UpsertedCount == 1, nil
}

// ReleaseProbe gives back read c.Read of attempt c.Attempt of an item, only while c.Claim still holds it:
// a claim that ran out and was taken over is another prober's, and stays. The read is then claimable at
// once, instead of when the claim would have run out. It reports whether the claim was given back.
// Returns ErrUnavailable.
//
// ATOMICITY: one delete whose filter names the read's document and the claim, so it removes the claim
// only while it is c.Claim's.
func (s *Store) ReleaseProbe(ctx context.Context, c items.ProbeClaim) (bool, error) {
	if err := checkID(c.Tenant, c.Key); err != nil {
		return false, err
	}
	res, err := s.probes().DeleteOne(ctx, bson.D{{Key: "_id", Value: probeID(c)}, {Key: "claim", Value: c.Claim}})
	if err != nil {
		return false, unavailable("release probe", err)
	}
	return res.DeletedCount == 1, nil
}

// probeID is the _id of the claim document of one read of an item's attempt.
func probeID(c items.ProbeClaim) string {
	return fmt.Sprintf("%s\x00%s\x00%d\x00%d", c.Tenant, c.Key, c.Attempt, c.Read)
}
