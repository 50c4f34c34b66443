package mongostore_test

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/mongostore"
)

// TestEarlierBuildAcknowledgedItemsAreSettled: documents written by a build without the top-level
// sweep_candidate (unset here, and the start's marker removed) that a person acknowledged get the field
// at the next start, so that they are no sweep candidates and retention removes them
// (refreshSweepCandidates).
func TestEarlierBuildAcknowledgedItemsAreSettled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	itemstest.CheckEarlierBuildAcknowledged(t, itemstest.EarlierBuild{
		Open: func(*testing.T) itemstest.OperatorStore { return e.open() },
		StoreAsEarlierBuild: func(t *testing.T, _ itemstest.OperatorStore, tenant string) {
			res, err := e.collection(mongostore.ItemsCollection).UpdateMany(t.Context(), bson.D{{Key: "tenant", Value: tenant}},
				bson.D{{Key: "$unset", Value: bson.D{{Key: "sweep_candidate", Value: ""}}}})
			if err != nil || res.ModifiedCount != 4 {
				t.Fatalf("storing as an earlier build: %+v, %v", res, err)
			}
			if _, err := e.collection(mongostore.MetaCollection).DeleteOne(t.Context(), bson.D{{Key: "_id", Value: "sweep_candidates_refreshed"}}); err != nil {
				t.Fatal(err)
			}
		},
		Reopen: func(*testing.T, itemstest.OperatorStore) itemstest.OperatorStore { return e.open() },
	})
}
