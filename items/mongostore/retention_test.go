package mongostore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/mongostore"
	"github.com/replaysafe/companion/items/mongostore/mongotest"
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
		Reopen: func(*testing.T, itemstest.OperatorStore) itemstest.OperatorStore {
			s := e.open()
			mongostore.WaitSweepCandidatesRefreshed(s)
			return s
		},
	})
}

// TestUndoWritesAnEarlierBuildsDocumentAsThisBuild: a claim of a retryable failure stored by an earlier
// build (no sweep_candidate) whose write is applied but answered with an error is taken back by writing
// the document as read; it must come back a sweep candidate (sweep_candidate true), not false, the value
// a missing field decodes to, which would hide it from the sweeper.
func TestUndoWritesAnEarlierBuildsDocumentAsThisBuild(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open()
	l := newLedger(t, s, nil)
	a, err := l.BeforeWrite(t.Context(), claimParams("retry"))
	if err != nil {
		t.Fatal(err)
	}
	zero := 0
	if _, err := l.AfterWrite(t.Context(), items.AfterWriteParams{Tenant: "acme", Key: "retry", Claim: a.Claim,
		Evidence: items.Evidence{Outcome: items.OutcomeFailed, HTTPStatus: 429, Class: items.ClassHTTP, RetryAfter: &zero}}); err != nil {
		t.Fatal(err)
	}
	coll := e.collection(mongostore.ItemsCollection)
	if _, err := coll.UpdateOne(t.Context(), bson.D{{Key: "key", Value: "retry"}},
		bson.D{{Key: "$unset", Value: bson.D{{Key: "sweep_candidate", Value: ""}}}}); err != nil {
		t.Fatal(err)
	}
	mongostore.FailAfterWrite(s, 1, errLost)
	_, err = l.BeforeWrite(t.Context(), claimParams("retry"))
	mongostore.FailAfterWrite(s, 0, nil)
	if !errors.Is(err, items.ErrUnavailable) {
		t.Fatalf("the retry's claim: err = %v, want ErrUnavailable", err)
	}
	var d struct {
		State          string `bson:"state"`
		SweepCandidate *bool  `bson:"sweep_candidate"`
	}
	if err := coll.FindOne(t.Context(), bson.D{{Key: "key", Value: "retry"}}).Decode(&d); err != nil {
		t.Fatal(err)
	}
	if d.State != string(items.StateFailed) || d.SweepCandidate == nil || !*d.SweepCandidate {
		field := "absent"
		if d.SweepCandidate != nil {
			field = fmt.Sprint(*d.SweepCandidate)
		}
		t.Fatalf("after the undo: state %s, sweep_candidate %s; want failed, true", d.State, field)
	}
	if keys := sweepCandidateKeys(t, s); fmt.Sprint(keys) != "[retry]" {
		t.Fatalf("sweep candidates after the undo: %v; want the retry", keys)
	}
}

// sweepCandidateKeys returns the keys of the first ten sweep candidates of s, in the store's order.
func sweepCandidateKeys(t *testing.T, s *mongostore.Store) []string {
	t.Helper()
	found, err := s.SweepCandidates(t.Context(), items.ItemRef{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{}
	for _, it := range found {
		keys = append(keys, it.Key)
	}
	return keys
}

// BenchmarkOpenRefreshesSweepCandidates measures Open and the background pass it starts
// (refreshSweepCandidates, waited for) on a ledger of 300 items, a tenth of them retryable failures (on
// the in-process FerretDB, or the MongoDB of COMPANION_TEST_MONGODB_URI): LaterStart is every start after the first (the marker's read), FirstStart
// the first start of this build (the marker removed before each run: one pass over the items whose last
// resolution is acknowledged, without an index).
//
//	go test ./items/mongostore -run '^$' -bench OpenRefreshesSweepCandidates -benchtime 10x
func BenchmarkOpenRefreshesSweepCandidates(b *testing.B) {
	uri, db := realURI(), fmt.Sprintf("companion_bench_%d", time.Now().UnixNano())
	if uri == "" {
		uri, db = sharedSrv.URI(), sharedSrv.Database()
	} else {
		defer dropDatabase(uri, db)
	}
	open := func(b *testing.B) *mongostore.Store {
		s, err := mongostore.Open(b.Context(), uri, db, mongostore.WithTimeout(mongotest.StoreTimeout()))
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	s := open(b)
	l, err := items.NewLedger(b.Context(), s, items.Config{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 300 {
		a, err := l.BeforeWrite(b.Context(), claimParams(fmt.Sprintf("bench-%d", i)))
		if err != nil {
			b.Fatal(err)
		}
		ev := items.Evidence{Outcome: items.OutcomeSucceeded}
		if i%10 == 0 {
			ev = items.Evidence{Outcome: items.OutcomeFailed, HTTPStatus: 429, Class: items.ClassHTTP}
		}
		if _, err := l.AfterWrite(b.Context(), items.AfterWriteParams{Tenant: "acme", Key: a.Key, Claim: a.Claim, Evidence: ev}); err != nil {
			b.Fatal(err)
		}
	}
	s.Close()
	c, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Disconnect(context.Background())
	meta := c.Database(db).Collection(mongostore.MetaCollection)
	for _, first := range []bool{false, true} {
		name := "LaterStart"
		if first {
			name = "FirstStart"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if first {
					b.StopTimer()
					if _, err := meta.DeleteOne(b.Context(), bson.D{{Key: "_id", Value: "sweep_candidates_refreshed"}}); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				s := open(b)
				mongostore.WaitSweepCandidatesRefreshed(s)
				s.Close()
			}
		})
	}
}

// TestEarlierBuildsWriteAfterThisBuildStaysASweepCandidate: an earlier build run again on the ledger (a
// rollback) writes documents with a $set of the fields it knows, which leaves the sweep_candidate this
// build wrote as it was. An item this build stored in flight (sweep_candidate false) that the earlier
// build then recorded as unknown, or as a retryable failure, must still be read by this build's sweeper
// when it runs again: an unknown item nobody is told about is what the ledger exists to prevent. So is one
// whose resolution it wrote as acknowledged: this build did not write it as an acknowledgement of the
// current attempt (its history here holds none), so sweep_candidate false is not its word.
func TestEarlierBuildsWriteAfterThisBuildStaysASweepCandidate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open()
	l := newLedger(t, s, nil)
	coll := e.collection(mongostore.ItemsCollection)
	for key, set := range map[string]bson.D{
		"unknown": {{Key: "state", Value: items.StateUnknown}},
		"failed":  {{Key: "state", Value: items.StateFailed}, {Key: "retryable", Value: true}},
		"acked": {{Key: "state", Value: items.StateFailed}, {Key: "retryable", Value: true},
			{Key: "resolution", Value: bson.D{{Key: "outcome", Value: items.ResolveAcknowledged}, {Key: "evidence", Value: "checked by hand"},
				{Key: "by", Value: "ops"}, {Key: "at", Value: time.Now().UTC()}}}},
	} {
		if _, err := l.BeforeWrite(t.Context(), claimParams(key)); err != nil {
			t.Fatal(err)
		}
		res, err := coll.UpdateOne(t.Context(), bson.D{{Key: "key", Value: key}, {Key: "sweep_candidate", Value: false}}, bson.D{{Key: "$set", Value: set}})
		if err != nil || res.ModifiedCount != 1 {
			t.Fatalf("the earlier build's write of %s: %+v, %v", key, res, err)
		}
	}
	if keys := sweepCandidateKeys(t, s); fmt.Sprint(keys) != "[acked failed unknown]" {
		t.Fatalf("sweep candidates %v, want [acked failed unknown]: every item the earlier build changed", keys)
	}
}

// TestEarlierBuildsRetryOfAnAcknowledgedItemIsASweepCandidate: a person acknowledged a retryable failure
// flagged unresolved_too_long in its first attempt (this build wrote sweep_candidate false); then an
// earlier build run again on the ledger retried it into another retryable failure, with a $set of the
// fields it knows: the resolution, still acknowledged, without current_attempt, and sweep_candidate left
// false. That is a failure of a new attempt, nobody's acknowledgement (items: acknowledged): this build's
// sweeper must read it, and flag it unresolved_too_long an hour on, and retention must keep it. The item
// acknowledged and not retried is no sweep candidate, and is removed.
func TestEarlierBuildsRetryOfAnAcknowledgedItemIsASweepCandidate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open()
	l, clock := escalatingLedger(t, s)
	acknowledgedFailure(t, l, clock, "acked")
	acknowledgedFailure(t, l, clock, "retried")
	coll := e.collection(mongostore.ItemsCollection)
	read := func() bson.M {
		var d bson.M
		if err := coll.FindOne(t.Context(), bson.D{{Key: "key", Value: "retried"}}).Decode(&d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	acked := read()
	// The retry as this build records it; the earlier build's is the same $set without the fields it does
	// not know, written over the acknowledged document.
	retryableFailure(t, l, "retried")
	earlier := asEarlierRelease(read())
	delete(earlier, "_id")
	if _, err := coll.ReplaceOne(t.Context(), bson.D{{Key: "_id", Value: acked["_id"]}}, acked); err != nil {
		t.Fatal(err)
	}
	if res, err := coll.UpdateOne(t.Context(), bson.D{{Key: "_id", Value: acked["_id"]}}, bson.D{{Key: "$set", Value: earlier}}); err != nil || res.ModifiedCount != 1 {
		t.Fatalf("the earlier build's retry: %+v, %v", res, err)
	}
	var stored struct {
		Attempt        int   `bson:"attempt"`
		SweepCandidate *bool `bson:"sweep_candidate"`
		Resolution     bson.M
	}
	if err := coll.FindOne(t.Context(), bson.D{{Key: "key", Value: "retried"}}).Decode(&stored); err != nil {
		t.Fatal(err)
	}
	if _, has := stored.Resolution["current_attempt"]; stored.Attempt != 2 || stored.SweepCandidate == nil || *stored.SweepCandidate ||
		stored.Resolution["outcome"] != items.ResolveAcknowledged || has {
		t.Fatalf("the earlier build's document: %+v; want attempt 2, sweep_candidate false, an acknowledged resolution without current_attempt", stored)
	}
	if it, err := s.Get(t.Context(), "acme", "retried"); err != nil || it.State != items.StateFailed || !it.Retryable || !it.Facts().SweepCandidate {
		t.Fatalf("the retried item reads %+v, %v; want a retryable failure and a sweep candidate", it, err)
	}

	if keys := sweepCandidateKeys(t, s); fmt.Sprint(keys) != "[retried]" {
		t.Fatalf("sweep candidates %v, want [retried]: the earlier build's retry, not the item acknowledged in its attempt", keys)
	}

	removed, _, err := s.RemoveSettled(t.Context(), items.RemoveParams{DestinationRef: items.DestinationRef{Tenant: "acme", Destination: "billing"},
		State: items.StateFailed, ChangedBefore: clock.at.Add(time.Hour), Limit: 10})
	if err != nil || removed != 1 {
		t.Fatalf("RemoveSettled = %d, %v; want 1 (the acknowledged item)", removed, err)
	}
	if _, err := s.Get(t.Context(), "acme", "acked"); !errors.Is(err, items.ErrNotFound) {
		t.Errorf("the acknowledged item was not removed: %v", err)
	}
	if it, err := s.Get(t.Context(), "acme", "retried"); err != nil || it.State != items.StateFailed {
		t.Fatalf("the retried item after retention: %+v, %v; want it kept, failed", it, err)
	}

	clock.at = clock.at.Add(time.Hour + time.Second)
	if cause, err := l.MarkNeedsPerson(t.Context(), "acme", "retried"); err != nil || cause != items.CauseStale {
		t.Errorf("the sweeper's rule on the retried item an hour on: %q, %v; want %s", cause, err, items.CauseStale)
	}
}

// TestRefreshSweepCandidatesWritesWhatThisBuildWrites: the start's pass over the documents a person
// acknowledged that lack sweep_candidate or resolution.current_attempt (refreshSweepCandidates) reads only
// some of their fields; what it writes must be what this build writes with the whole item (toDoc:
// items.Facts.SweepCandidate, the attempt of the last resolve event). Items acknowledged in their attempt,
// acknowledged and retried into another retryable failure, and acknowledged and retried into a success
// are stored by this build, stored again as the release before the fields (both removed), or as that
// release leaves them when it writes (current_attempt removed), and the pass is run by a start.
func TestRefreshSweepCandidatesWritesWhatThisBuildWrites(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open()
	l, clock := escalatingLedger(t, s)
	for _, key := range []string{"acked", "retried-failing", "retried-succeeded"} {
		acknowledgedFailure(t, l, clock, key)
	}
	retryableFailure(t, l, "retried-failing")
	succeededItem(t, l, "retried-succeeded")
	type written struct {
		Key            string `bson:"key"`
		SweepCandidate *bool  `bson:"sweep_candidate"`
		Resolution     struct {
			CurrentAttempt *bool `bson:"current_attempt"`
		} `bson:"resolution"`
	}
	coll := e.collection(mongostore.ItemsCollection)
	readAll := func() map[string]string {
		var docs []written
		cur, err := coll.Find(t.Context(), bson.D{})
		if err == nil {
			err = cur.All(t.Context(), &docs)
		}
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, d := range docs {
			show := func(b *bool) string {
				if b == nil {
					return "absent"
				}
				return fmt.Sprint(*b)
			}
			out[d.Key] = fmt.Sprintf("sweep_candidate %s, current_attempt %s", show(d.SweepCandidate), show(d.Resolution.CurrentAttempt))
		}
		return out
	}
	want := readAll()
	if fmt.Sprint(want) != "map[acked:sweep_candidate false, current_attempt true retried-failing:sweep_candidate true, current_attempt false "+
		"retried-succeeded:sweep_candidate false, current_attempt false]" {
		t.Fatalf("this build wrote %v", want)
	}
	// As the release before both fields stores them, then as it leaves them when it writes a document this
	// build wrote (sweep_candidate as it was: here what this build wrote).
	for _, unset := range []bson.D{{{Key: "sweep_candidate", Value: ""}, {Key: "resolution.current_attempt", Value: ""}},
		{{Key: "resolution.current_attempt", Value: ""}}} {
		if _, err := coll.UpdateMany(t.Context(), bson.D{}, bson.D{{Key: "$unset", Value: unset}}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.collection(mongostore.MetaCollection).DeleteOne(t.Context(), bson.D{{Key: "_id", Value: "sweep_candidates_refreshed"}}); err != nil {
			t.Fatal(err)
		}
		mongostore.WaitSweepCandidatesRefreshed(e.open())
		if got := readAll(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("without %v, after the start's pass %v, want what this build wrote %v", unset, got, want)
		}
	}
}
