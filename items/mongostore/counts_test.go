package mongostore_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/mongostore"
	"github.com/replaysafe/companion/items/mongostore/mongotest"
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

// someTraffic makes, through l, the writes of a few requests: single claims of new items, a batch of
// claims of new and prepared items, and a success.
func someTraffic(t *testing.T, l *items.Ledger, s items.Store, prefix string) {
	t.Helper()
	for i := range 2 {
		if a, err := l.BeforeWrite(t.Context(), claimParams(fmt.Sprintf("%s-single-%d", prefix, i))); err != nil || a.Decision != items.Proceed {
			t.Fatalf("claim: %+v, %v", a, err)
		}
	}
	var ps []items.BeforeWriteParams
	for i := range 3 {
		ps = append(ps, claimParams(fmt.Sprintf("%s-batch-new-%d", prefix, i)))
		key := fmt.Sprintf("%s-batch-prepared-%d", prefix, i)
		create(t, s, key)
		ps = append(ps, claimParams(key))
	}
	if _, err := l.BeforeWriteMany(t.Context(), "acme", ps); err != nil {
		t.Fatal(err)
	}
	succeededItem(t, l, prefix+"-done")
}

// recounted returns the tenant acme's stats as a recount of its items gives them (every one read back
// through the list), and the stats the store answers from its kept counts, both without the oldest
// unresolved age (which is not a count) and the fingerprint conflicts (which no item records:
// itemstest.CheckSeriesMatchesItems compares them with the series').
func recounted(t *testing.T, s *mongostore.Store, now time.Time) (want, got string) {
	t.Helper()
	groups := items.CountChanges{}
	for p := (items.ListParams{Tenant: "acme", Limit: items.MaxListLimit}); ; {
		page, err := s.ListItems(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Items {
			groups.Move(nil, it)
		}
		if page.NextCursor == "" {
			break
		}
		p.Cursor = page.NextCursor
	}
	st, err := s.Stats(t.Context(), "acme", now)
	if err != nil {
		t.Fatal(err)
	}
	w := items.StatsOf("acme", now, groups, nil, nil)
	st.OldestUnresolvedAgeSeconds, st.FingerprintConflicts = 0, 0
	for d, m := range st.Destinations {
		m.OldestUnresolvedAgeSeconds, m.FingerprintConflicts = 0, 0
		st.Destinations[d] = m
	}
	return fmt.Sprintf("%+v", *w), fmt.Sprintf("%+v", *st)
}

// dueLeft counts the items and counters that still hold kept counts or series to apply, and the marks
// of applied ones on the groups and the series' rows.
func dueLeft(t *testing.T, e env) (withDue, marks int) {
	t.Helper()
	for _, c := range []string{mongostore.ItemsCollection, mongostore.CountersCollection} {
		n, err := e.collection(c).CountDocuments(t.Context(), bson.D{{Key: "count_due.0", Value: bson.D{{Key: "$exists", Value: true}}}})
		if err != nil {
			t.Fatal(err)
		}
		withDue += int(n)
	}
	for _, c := range []string{mongostore.CountsCollection, mongostore.SeriesCollection} {
		cur, err := e.collection(c).Find(t.Context(), bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		var groups []struct {
			Applying map[string]time.Time `bson:"applying"`
		}
		if err := cur.All(t.Context(), &groups); err != nil {
			t.Fatal(err)
		}
		for _, g := range groups {
			marks += len(g.Applying)
		}
	}
	return withDue, marks
}

// TestCountsExactAfterAStopBetweenWriteAndCount (the kept counts and the series cannot drift): a replica
// stops after its writes are acknowledged and before their counts are applied (none applied), or after
// step 1 applied them to the groups and the series' rows and before step 2 took them off the items and
// the counter of conflicts (all applied, the entries still due: a count write whose answer was lost,
// which a second $inc would count twice). Another replica's repair pass then applies what is due, each
// entry once: the counts equal a recount, the series the items' events and the conflicts counted, no
// entry is left on an item, and once the marks are an hour old none is left on a group or a row.
func TestCountsExactAfterAStopBetweenWriteAndCount(t *testing.T) {
	for _, stop := range []string{"before step 1", "after step 1"} {
		t.Run(stop, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			stopped := e.open()
			if stop == "before step 1" {
				mongostore.DropCounts(stopped, func() bool { return true })
			} else {
				mongostore.SetCountFault(stopped, func(step int) error {
					if step == 1 {
						return errLost
					}
					return nil
				})
			}
			now := time.Now()
			someTraffic(t, newLedger(t, stopped, nil), stopped, "t")
			if err := stopped.CountConflicts(t.Context(), "acme", "billing", now, 2); err != nil {
				t.Fatal(err)
			}
			want, got := recounted(t, stopped, now)
			if (want == got) != (stop == "after step 1") {
				t.Fatalf("%s, before any repair, the counts %s the recount:\n%s\nrecount\n%s", stop,
					map[bool]string{true: "equal", false: "differ from"}[want == got], got, want)
			}
			if n, _ := dueLeft(t, e); n == 0 {
				t.Fatal("no item holds counts due: the stop left nothing to repair")
			}

			restarted := e.open()
			r, err := mongostore.RepairCounts(t.Context(), restarted, 0)
			if err != nil {
				t.Fatal(err)
			}
			if r.Applied == 0 || r.Items == 0 {
				t.Fatalf("the repair pass: %+v, want the entries left due", r)
			}
			if want, got := recounted(t, restarted, now); want != got {
				t.Fatalf("after the repair, the counts\n%s\nwant (a recount)\n%s", got, want)
			}
			itemstest.CheckSeriesMatchesItems(t, restarted, "acme", now.Add(-time.Hour), now.Add(time.Hour))
			if err := mongostore.RemoveSettled(t.Context(), restarted, time.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if n, marks := dueLeft(t, e); n != 0 || marks != 0 {
				t.Fatalf("after the repair, %d items hold counts due and the groups %d marks; want none", n, marks)
			}
			// A second pass finds nothing, and the counts stay.
			if r, err := mongostore.RepairCounts(t.Context(), restarted, 0); err != nil || r.Applied != 0 {
				t.Fatalf("a second pass: %+v, %v", r, err)
			}
			if want, got := recounted(t, restarted, now); want != got {
				t.Fatalf("after a second pass, the counts\n%s\nwant\n%s", got, want)
			}
			itemstest.CheckSeriesMatchesItems(t, restarted, "acme", now.Add(-time.Hour), now.Add(time.Hour))
		})
	}
}

// TestCountsAreBuiltOnceByReplicasStartingTogether: a ledger of a build before the kept counts (items,
// no item_counts, no marker) opened by two replicas at once is counted once: one builds the counts under
// the lock document, the other waits for its marker. (Two builds used to make 2N.)
func TestCountsAreBuiltOnceByReplicasStartingTogether(t *testing.T) {
	if realURI() == "" {
		t.Skip("needs a real MongoDB (set " + mongotest.RealURIEnv + "): the two replicas race for the lock document with " +
			"one conditional update each, which FerretDB v1, the test server here, does not apply atomically (both win)")
	}
	t.Parallel()
	e := newEnv(t)
	s := e.open()
	someTraffic(t, newLedger(t, s, nil), s, "old")
	now := time.Now()
	want, _ := recounted(t, s, now)
	s.Close()
	if err := e.collection(mongostore.CountsCollection).Drop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.collection(mongostore.MetaCollection).DeleteOne(t.Context(), bson.D{{Key: "_id", Value: "item_counts_built"}}); err != nil {
		t.Fatal(err)
	}
	stores := make([]*mongostore.Store, 2)
	var wg sync.WaitGroup
	for i := range stores {
		wg.Go(func() {
			st, err := mongostore.Open(t.Context(), e.uri, e.db, mongostore.WithTimeout(mongotest.StoreTimeout()))
			if err != nil {
				t.Error(err)
				return
			}
			t.Cleanup(func() { st.Close() })
			stores[i] = st
		})
	}
	wg.Wait()
	for i, st := range stores {
		if st == nil {
			t.FailNow()
		}
		if _, got := recounted(t, st, now); got != want {
			t.Fatalf("replica %d counts\n%s\nwant\n%s", i, got, want)
		}
	}
}

// BenchmarkRepairCounts measures the kept counts' repair pass, which every replica runs at its start and
// every minute: with nothing due (one query of the index count_due_at, and the lock), and with the
// entries of 1,000 claims a stopped replica left due (a page of the pass: two entries each).
//
//	go test ./items/mongostore -run '^$' -bench RepairCounts -benchtime 5x
func BenchmarkRepairCounts(b *testing.B) {
	if realURI() != "" {
		b.Skip("measured on the in-process FerretDB")
	}
	open := func(db string) *mongostore.Store {
		s, err := mongostore.Open(b.Context(), sharedSrv.URI(), db, mongostore.WithTimeout(10*time.Minute))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
	b.Run("nothing-due", func(b *testing.B) {
		s := open(sharedSrv.Database())
		for b.Loop() {
			if r, err := mongostore.RepairCounts(b.Context(), s, 0); err != nil || r.Applied != 0 {
				b.Fatalf("%+v, %v", r, err)
			}
		}
	})
	b.Run("1000-claims-due", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			db := sharedSrv.Database()
			stopped := open(db)
			mongostore.DropCounts(stopped, func() bool { return true })
			l, err := items.NewLedger(b.Context(), stopped, items.Config{})
			if err != nil {
				b.Fatal(err)
			}
			for chunk := range 2 {
				var ps []items.BeforeWriteParams
				for i := range 500 {
					ps = append(ps, claimParams(fmt.Sprintf("due-%d-%d", chunk, i)))
				}
				if _, err := l.BeforeWriteMany(b.Context(), "acme", ps); err != nil {
					b.Fatal(err)
				}
			}
			s := open(db)
			b.StartTimer()
			if r, err := mongostore.RepairCounts(b.Context(), s, 0); err != nil || r.Items != 1000 {
				b.Fatalf("%+v, %v", r, err)
			}
		}
	})
}
