package mongostore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/mongostore"
)

// benchItems is the ledger size of BenchmarkRefreshSweepCandidatesLargeLedger: COMPANION_BENCH_ITEMS, or
// 20,000.
func benchItems(b *testing.B) int {
	if v := os.Getenv("COMPANION_BENCH_ITEMS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 10 {
			b.Fatalf("COMPANION_BENCH_ITEMS=%q: want a number of items, at least 10", v)
		}
		return n
	}
	return 20000
}

// escalatingLedger returns a ledger over s whose destination billing flags a retryable failure nobody
// acted on for an hour unresolved_too_long, and the clock it runs on, moved by hand from 2026-11-02 09:00.
func escalatingLedger(tb testing.TB, s *mongostore.Store) (*items.Ledger, *ledgerClock) {
	tb.Helper()
	clock := &ledgerClock{at: time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)}
	l, err := items.NewLedger(tb.Context(), s, items.Config{Now: clock.now, Destinations: map[string]items.Destination{
		"billing": {Dedupe: items.DedupeKey, EscalateAfter: time.Hour},
	}})
	if err != nil {
		tb.Fatal(err)
	}
	return l, clock
}

// ledgerClock is a test's clock, moved by hand.
type ledgerClock struct{ at time.Time }

func (c *ledgerClock) now() time.Time { return c.at }

// acknowledgedFailure makes key a retryable failure (429, retry in 60 s) of billing that nobody acted on
// for an hour, flagged unresolved_too_long and acknowledged by a person, through l.
func acknowledgedFailure(tb testing.TB, l *items.Ledger, clock *ledgerClock, key string) {
	tb.Helper()
	retryableFailure(tb, l, key)
	clock.at = clock.at.Add(time.Hour + time.Second)
	if cause, err := l.MarkNeedsPerson(tb.Context(), "acme", key); err != nil || cause != items.CauseStale {
		tb.Fatalf("MarkNeedsPerson(%s) = %q, %v; want %s", key, cause, err, items.CauseStale)
	}
	if _, reason, err := l.Resolve(tb.Context(), items.ResolveParams{Tenant: "acme", Key: key, Outcome: items.ResolveAcknowledged,
		Evidence: "the CRM has it; we retry by hand", By: "ops-anna"}); err != nil || reason != items.ReasonRecorded {
		tb.Fatalf("acknowledging %s: %s, %v", key, reason, err)
	}
}

// retryableFailure claims key (again) and reports a 429 with retry in 60 s.
func retryableFailure(tb testing.TB, l *items.Ledger, key string) {
	tb.Helper()
	a, err := l.BeforeWrite(tb.Context(), claimParams(key))
	if err != nil || a.Decision != items.Proceed {
		tb.Fatalf("claim of %s: %+v, %v", key, a, err)
	}
	sixty := 60
	if _, err := l.AfterWrite(tb.Context(), items.AfterWriteParams{Tenant: "acme", Key: key, Claim: a.Claim,
		Evidence: items.Evidence{Outcome: items.OutcomeFailed, HTTPStatus: 429, Class: items.ClassHTTP, RetryAfter: &sixty}}); err != nil {
		tb.Fatalf("report of %s: %v", key, err)
	}
}

// succeededItem claims key (again) and reports it succeeded; it returns the claim.
func succeededItem(tb testing.TB, l *items.Ledger, key string) string {
	tb.Helper()
	a, err := l.BeforeWrite(tb.Context(), claimParams(key))
	if err != nil || a.Decision != items.Proceed {
		tb.Fatalf("claim of %s: %+v, %v", key, a, err)
	}
	if _, err := l.AfterWrite(tb.Context(), items.AfterWriteParams{Tenant: "acme", Key: key, Claim: a.Claim,
		Evidence: items.Evidence{Outcome: items.OutcomeSucceeded}}); err != nil {
		tb.Fatalf("report of %s: %v", key, err)
	}
	return a.Claim
}

// asEarlierRelease returns the raw document as the release before sweep_candidate stores it: without
// sweep_candidate, and with a resolution without current_attempt.
func asEarlierRelease(d bson.M) bson.M {
	out := bson.M{}
	for k, v := range d {
		if k != "sweep_candidate" {
			out[k] = v
		}
	}
	switch r := d["resolution"].(type) {
	case bson.M:
		res := bson.M{}
		for k, v := range r {
			if k != "current_attempt" {
				res[k] = v
			}
		}
		out["resolution"] = res
	case bson.D:
		var res bson.D
		for _, e := range r {
			if e.Key != "current_attempt" {
				res = append(res, e)
			}
		}
		out["resolution"] = res
	}
	return out
}

// benchTimeout is the store timeout of BenchmarkRefreshSweepCandidatesLargeLedger: on the in-process
// FerretDB a read of a whole 20,000-item collection (Open's own look for documents without execution_id,
// the pass's find, each of its updates) takes longer than the tests' 15 s on a loaded 2-core machine.
const benchTimeout = 10 * time.Minute

// BenchmarkRefreshSweepCandidatesLargeLedger measures the first start of this build on a ledger of an
// earlier release (documents without sweep_candidate) of 20,000 items (COMPANION_BENCH_ITEMS): Open and
// the background pass over the documents a person acknowledged (refreshSweepCandidates), waited for. In
// Acknowledged=all every item was acknowledged (each one read and written: the pass's worst case); in
// Acknowledged=tenth one item in ten, the others a retryable failure or a success. items/s is the ledger's
// items over the time; s/collection-read the time of one read of the whole collection (a count whose
// filter no index serves), for scale. The documents are copies of three an earlier build's writes give, inserted
// directly (20,000 items through the ledger would take minutes on the in-process FerretDB). On FerretDB
// v1.24 a write of one document costs about a second at 20,000 items (about 0.1 s at 1,000), so at the
// default size the pass's first update outlasts even this benchmark's timeout there; 1,000 items finish
// in two minutes.
//
//	go test ./items/mongostore -run '^$' -bench RefreshSweepCandidatesLargeLedger -benchtime 1x
func BenchmarkRefreshSweepCandidatesLargeLedger(b *testing.B) {
	n := benchItems(b)
	for _, every := range []int{1, 10} {
		name := "Acknowledged=all"
		if every != 1 {
			name = "Acknowledged=tenth"
		}
		b.Run(name, func(b *testing.B) {
			uri, db := realURI(), fmt.Sprintf("companion_bench_%d", time.Now().UnixNano())
			if uri == "" {
				uri, db = sharedSrv.URI(), sharedSrv.Database()
			} else {
				defer dropDatabase(uri, db)
			}
			open := func() *mongostore.Store {
				s, err := mongostore.Open(b.Context(), uri, db, mongostore.WithTimeout(benchTimeout))
				if err != nil {
					b.Fatal(err)
				}
				return s
			}
			s := open()
			l, clock := escalatingLedger(b, s)
			acknowledgedFailure(b, l, clock, "acked")
			retryableFailure(b, l, "failed")
			succeededItem(b, l, "done")
			s.Close()
			c, err := mongo.Connect(options.Client().ApplyURI(uri))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Disconnect(context.Background())
			coll := c.Database(db).Collection(mongostore.ItemsCollection)
			templates := map[string]bson.M{}
			for _, key := range []string{"acked", "failed", "done"} {
				var d bson.M
				if err := coll.FindOne(b.Context(), bson.D{{Key: "key", Value: key}}).Decode(&d); err != nil {
					b.Fatal(err)
				}
				templates[key] = asEarlierRelease(d)
			}
			if _, err := coll.DeleteMany(b.Context(), bson.D{}); err != nil {
				b.Fatal(err)
			}
			var batch []any
			for i := range n {
				kind := "acked"
				if i%every != 0 {
					kind = []string{"failed", "done"}[i%2]
				}
				d := bson.M{}
				for k, v := range templates[kind] {
					d[k] = v
				}
				key := fmt.Sprintf("bench-%06d", i)
				d["_id"], d["key"] = "acme\x00"+key, key
				batch = append(batch, d)
				if len(batch) == 1000 || i == n-1 {
					if _, err := coll.InsertMany(b.Context(), batch); err != nil {
						b.Fatal(err)
					}
					batch = nil
				}
			}
			// One read of the whole collection (no index serves the filter), for scale.
			start := time.Now()
			if _, err := coll.CountDocuments(b.Context(), bson.D{{Key: "needs_person", Value: false}, {Key: "resolution.outcome", Value: items.ResolveAcknowledged}}); err != nil {
				b.Fatal(err)
			}
			scan := time.Since(start)
			meta := c.Database(db).Collection(mongostore.MetaCollection)
			for b.Loop() {
				b.StopTimer()
				if _, err := meta.DeleteOne(b.Context(), bson.D{{Key: "_id", Value: "sweep_candidates_refreshed"}}); err != nil {
					b.Fatal(err)
				}
				if _, err := coll.UpdateMany(b.Context(), bson.D{}, bson.D{{Key: "$unset", Value: bson.D{{Key: "sweep_candidate", Value: ""}}}}); err != nil {
					b.Fatal(err)
				}
				if _, err := coll.UpdateMany(b.Context(), bson.D{{Key: "resolution.outcome", Value: items.ResolveAcknowledged}},
					bson.D{{Key: "$unset", Value: bson.D{{Key: "resolution.current_attempt", Value: ""}}}}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				s := open()
				mongostore.WaitSweepCandidatesRefreshed(s)
				s.Close()
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "items/s")
			b.ReportMetric(scan.Seconds(), "s/collection-read")
			acked, err := coll.CountDocuments(b.Context(), bson.D{{Key: "sweep_candidate", Value: false}})
			if err != nil || int(acked) != (n+every-1)/every {
				b.Fatalf("after the pass %d documents say sweep_candidate false (%v), want the %d acknowledged", acked, err, (n+every-1)/every)
			}
		})
	}
}
