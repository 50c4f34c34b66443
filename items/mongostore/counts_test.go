package mongostore_test

import (
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/mongostore"
)

// TestCountsWithoutHistoryDropped: the item_counts documents an earlier build wrote lack history_dropped
// and history_dropped_items; they read as 0, the other counts as before, and a workflow's loop of reports
// afterwards is counted from there.
func TestCountsWithoutHistoryDropped(t *testing.T) {
	e := newEnv(t)
	s := e.open()
	ctx := t.Context()
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	l := newLedger(t, s, func() time.Time { return now })
	var claim string
	for i := range 3 {
		claim = succeededItem(t, l, fmt.Sprintf("k%d", i))
	}
	want, err := s.Stats(ctx, "acme", now)
	if err != nil {
		t.Fatal(err)
	}
	// What an earlier build wrote: no such fields.
	res, err := e.collection(mongostore.CountsCollection).UpdateMany(ctx, bson.D{},
		bson.D{{Key: "$unset", Value: bson.D{{Key: "history_dropped", Value: ""}, {Key: "history_dropped_items", Value: ""}}}})
	if err != nil || res.ModifiedCount == 0 {
		t.Fatalf("unset the fields: %+v, %v", res, err)
	}
	got, err := s.Stats(ctx, "acme", now)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want); g != w || got.Items != 3 || got.HistoryDropped != 0 {
		t.Fatalf("stats without the fields\n%s\nwant\n%s", g, w)
	}
	itemstest.CheckReportLoopCounted(t, l, s, "acme", "k2", claim, "billing", &now)
}
