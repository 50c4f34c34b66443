package mongostore_test

import (
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/replaysafe/companion/items"
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
		a, err := l.BeforeWrite(ctx, claimParams(fmt.Sprintf("k%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.AfterWrite(ctx, items.AfterWriteParams{Tenant: "acme", Key: a.Key, Claim: a.Claim,
			Evidence: items.Evidence{Outcome: items.OutcomeSucceeded}}); err != nil {
			t.Fatal(err)
		}
		claim = a.Claim
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
	// A workflow replays a late failure of k2's attempt after its success, each with another message.
	for i := range 40 {
		now = now.Add(3 * time.Second)
		if _, err := l.AfterWrite(ctx, items.AfterWriteParams{Tenant: "acme", Key: "k2", Claim: claim, ErrorMessage: fmt.Sprintf("late report #%d", i),
			Evidence: items.Evidence{Outcome: items.OutcomeFailed, Class: items.ClassHTTP, HTTPStatus: 503}}); err != nil {
			t.Fatal(err)
		}
	}
	it, err := s.Get(ctx, "acme", "k2")
	if err != nil {
		t.Fatal(err)
	}
	if got, err = s.Stats(ctx, "acme", now); err != nil {
		t.Fatal(err)
	}
	if it.HistoryDropped != 40-items.KeptFirstRepeats-items.KeptLatestRepeats-1 || got.HistoryDropped != it.HistoryDropped ||
		got.HistoryDroppedItems != 1 || got.Destinations["billing"].HistoryDropped != it.HistoryDropped {
		t.Fatalf("after a loop of 40 reports: the item dropped %d, the stats count %d in %d items (billing: %d)",
			it.HistoryDropped, got.HistoryDropped, got.HistoryDroppedItems, got.Destinations["billing"].HistoryDropped)
	}
}
