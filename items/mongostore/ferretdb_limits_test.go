package mongostore_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/mongostore"
)

// MeasureEnv names the environment variable that, set to 1, runs the measurements behind the claim in
// docs/mongodb.md that FerretDB v1 must not be the production store. They take about a minute and a
// half, so they do not run by default.
const MeasureEnv = "COMPANION_MEASURE_FERRETDB"

// TestFerretDBLimits measures, through this store on the in-process FerretDB: rounds of 50 concurrent
// before-writes on one prepared item (the conditional update) and on one new item (the insert), counting
// the rounds with more than one proceed; and Get throughput at two collection sizes. It fails if FerretDB
// turns out atomic under concurrent conditional updates, because then the documentation is wrong.
func TestFerretDBLimits(t *testing.T) {
	if os.Getenv(MeasureEnv) != "1" || realURI() != "" {
		t.Skipf("a measurement of FerretDB: set %s=1 (and no %s) to run it", MeasureEnv, "COMPANION_TEST_MONGODB_URI")
	}
	const callers, rounds = 50, 20
	for _, prepared := range []bool{true, false} {
		s := newEnv(t).open()
		ledger := newLedger(t, s, nil)
		multi, total := 0, 0
		for round := 0; round < rounds; round++ {
			p := claimParams(fmt.Sprintf("race-%d", round))
			if prepared {
				if _, err := s.Transition(t.Context(), p.Tenant, p.Key, func(*items.Item) (*items.Item, error) {
					return items.NewPrepared(p, time.Now())
				}); err != nil {
					t.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			proceeds := 0
			for i := 0; i < callers; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					a, err := ledger.BeforeWrite(context.Background(), p)
					mu.Lock()
					defer mu.Unlock()
					if err == nil && a.Decision == items.Proceed {
						proceeds++
					}
				}()
			}
			wg.Wait()
			total += proceeds
			if proceeds > 1 {
				multi++
			}
		}
		what := "a new item (insert)"
		if prepared {
			what = "a prepared item (conditional update)"
		}
		t.Logf("%d concurrent before-writes on %s: more than one proceed in %d of %d rounds (%d proceeds in all)",
			callers, what, multi, rounds, total)
		if prepared && multi == 0 {
			t.Errorf("FerretDB applied every round of concurrent conditional updates atomically; docs/mongodb.md says it does not")
		}
	}
	for _, n := range []int{100, 2000} {
		s := newEnv(t).open()
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("k-%d", i)
		}
		if _, err := s.TransitionMany(t.Context(), "acme", keys, func(i int, _ *items.Item) (*items.Item, error) {
			return items.NewPrepared(claimParams(keys[i]), time.Now())
		}); err != nil {
			t.Fatal(err)
		}
		start, gets := time.Now(), 0
		for time.Since(start) < 3*time.Second {
			if _, err := s.Get(t.Context(), "acme", keys[gets%n]); err != nil {
				t.Fatal(err)
			}
			gets++
		}
		t.Logf("Get by key with %d items: %.0f/s", n, float64(gets)/time.Since(start).Seconds())
	}
}

// TestFerretDBLacksWhatMongoDBHas records what FerretDB v1.24, the test server, does with the constructs
// a real MongoDB offers and the store chose not to rely on, so that the documentation's reasons stay true
// (it fails when FerretDB starts doing them, and the choice may be made again):
//   - $$NOW in a query ($expr): refused. Leases are judged on the server's clock read with hello, with a
//     margin, rather than inside the guarded update.
//   - an update given as a pipeline: refused.
//   - $pull with a condition: answered as applied, and changes nothing. The kept counts' entries are taken
//     off an item with $pullAll of the exact entries instead.
//   - read concern linearizable: accepted (it has one server; MongoDB waits for a majority).
func TestFerretDBLacksWhatMongoDBHas(t *testing.T) {
	if realURI() != "" {
		t.Skip("records what the in-process FerretDB does")
	}
	t.Parallel()
	e := newEnv(t)
	c := e.collection("limits")
	ctx := t.Context()
	if _, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}, {Key: "at", Value: time.Now()},
		{Key: "due", Value: bson.A{bson.D{{Key: "id", Value: "x"}}, bson.D{{Key: "id", Value: "y"}}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Find(ctx, bson.D{{Key: "$expr", Value: bson.D{{Key: "$lte", Value: bson.A{"$at", "$$NOW"}}}}}); err == nil {
		t.Error("FerretDB ran $$NOW in $expr: leases could be judged inside the guarded update")
	}
	if _, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: "a"}}, mongo.Pipeline{{{Key: "$set", Value: bson.D{{Key: "at", Value: "$$NOW"}}}}}); err == nil {
		t.Error("FerretDB ran a pipeline update")
	}
	res, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: "a"}},
		bson.D{{Key: "$pull", Value: bson.D{{Key: "due", Value: bson.D{{Key: "id", Value: bson.D{{Key: "$in", Value: bson.A{"x"}}}}}}}}})
	if err != nil || res.MatchedCount != 1 {
		t.Fatalf("$pull with a condition: %+v, %v", res, err)
	}
	var d struct {
		Due []bson.M `bson:"due"`
	}
	if err := c.FindOne(ctx, bson.D{{Key: "_id", Value: "a"}}).Decode(&d); err != nil {
		t.Fatal(err)
	}
	if len(d.Due) != 2 {
		t.Errorf("FerretDB applied $pull with a condition (%d entries left)", len(d.Due))
	}
	lin := c.Database().Collection("limits", options.Collection().SetReadConcern(readconcern.Linearizable()))
	if err := lin.FindOne(ctx, bson.D{{Key: "_id", Value: "a"}}).Err(); err != nil {
		t.Errorf("FerretDB refused read concern linearizable: %v", err)
	}
}

// TestFerretDBUndoesAClaimBesideACount: one replica (a prober) changes an item's state, and another (a
// workflow's before-write) claims the item as soon as that write is visible, while the first still takes
// its kept counts' entries off the item (counts.go, step 2: a $pullAll on the item by _id, before its call
// answers). On MongoDB an update of one document is atomic: the claim stays, in every trial. FerretDB v1
// reads the document, applies the update in memory and writes the whole document back, so a claim that
// lands in between is undone: the claimer was answered a claim the item no longer holds. This is why the
// acceptance suite on FerretDB waits for the probe's run to end before its replay (acceptance's
// InProcess.AwaitProbeRun). On a real MongoDB it runs always and fails on a claim undone. On FerretDB it
// is a measurement (set COMPANION_MEASURE_FERRETDB=1), logging the claims undone: the window is the time
// between FerretDB's read and write of the document, so a few trials in 200 lose their claim, more on a
// loaded machine, and a run may lose none.
func TestFerretDBUndoesAClaimBesideACount(t *testing.T) {
	trials := 50
	if realURI() == "" {
		if os.Getenv(MeasureEnv) != "1" {
			t.Skipf("a measurement of FerretDB: set %s=1 (or %s) to run it", MeasureEnv, "COMPANION_TEST_MONGODB_URI")
		}
		trials = 200
	}
	e := newEnv(t)
	prober, workflow := e.open(), e.open()
	lost := 0
	for i := range trials {
		key := fmt.Sprintf("k-%d", i)
		create(t, workflow, key)
		// Step 1 applied, the state's write is visible and the claim comes; step 2 is sent once the claim
		// is decided, so that it and the claim's update reach the server together.
		visible, decided := make(chan struct{}), make(chan struct{})
		var once, decide sync.Once
		mongostore.SetCountFault(prober, func(step int) error {
			if step == 1 {
				once.Do(func() { close(visible) })
				select {
				case <-decided:
				case <-time.After(time.Second):
				}
			}
			return nil
		})
		settled := make(chan error, 1)
		go func() {
			_, err := prober.Transition(t.Context(), "acme", key, func(cur *items.Item) (*items.Item, error) {
				cur.State = items.StateFailed
				return cur, nil
			})
			settled <- err
		}()
		<-visible
		claim := fmt.Sprintf("c-%d", i)
		answered, err := workflow.Transition(t.Context(), "acme", key, func(cur *items.Item) (*items.Item, error) {
			if cur.State != items.StateFailed {
				return nil, fmt.Errorf("the claim read %s, want failed", cur.State)
			}
			cur.State, cur.Claim = items.StateInFlight, claim
			decide.Do(func() { close(decided) })
			time.Sleep(time.Duration(i%20) * 200 * time.Microsecond) // where the claim lands in step 2: 0-4 ms in
			return cur, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := <-settled; err != nil {
			t.Fatal(err)
		}
		got, err := workflow.Get(t.Context(), "acme", key)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != items.StateInFlight || got.Claim != claim {
			lost++
			t.Logf("trial %d: the claim %s answered at version %d is gone: the item is %s at version %d, claim %q",
				i, claim, answered.Version, got.State, got.Version, got.Claim)
		}
	}
	t.Logf("a claim beside another replica's step 2 was undone in %d of %d trials", lost, trials)
	if realURI() != "" && lost > 0 {
		t.Errorf("MongoDB undid %d claims: an update of one document is not atomic there", lost)
	}
}
