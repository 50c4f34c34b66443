package acceptance_test

import (
	"context"
	"os"
	"testing"

	"github.com/replaysafe/companion/acceptance"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/mongostore"
	"github.com/replaysafe/companion/items/mongostore/mongotest"
)

// ferretDBSkip is why the concurrency case does not run on the FerretDB test server.
const ferretDBSkip = "FerretDB is not atomic under concurrent conditional updates (simultaneous claims " +
	"can both win), so this case would test the test server; it runs on SQLite, and on MongoDB when " +
	mongotest.RealURIEnv + " names a real replica set"

// raceDetector is whether the tests run under the race detector (race_test.go).
var raceDetector bool

// timedCases replay right after a failure and expect the ledger's first backoff (0.8-1.2 s; the 429's
// Retry-After is 2 s) still to run. Under the race detector one before-write through the FerretDB test
// server (itself instrumented) can take longer than that, so on that server, under -race, these cases
// would time the test server; they run on SQLite under -race and on every store without it.
var timedCases = []string{"2", "3", "13"}

const ferretDBRaceSkip = "under the race detector a call through the FerretDB test server can outlast the " +
	"ledger's first backoff (0.8-1.2 s) that this case times; it runs on SQLite under -race, and on every " +
	"store without -race"

// The whole suite on the MongoDB store: against a real MongoDB when COMPANION_TEST_MONGODB_URI names
// one (every case), else on the in-process FerretDB test server (every case but the concurrency one).
func TestSuitePassesOnMongoDB(t *testing.T) {
	t.Parallel()
	uri, database, storeName := os.Getenv(mongotest.RealURIEnv), acceptance.MongoDatabase, "mongodb ("+mongotest.RealURIEnv+")"
	opts := acceptance.Options{}
	onFerretDB := uri == ""
	if onFerretDB {
		srv := mongotest.Start(t)
		uri, database, storeName = srv.URI(), srv.Database(), "mongodb (FerretDB test server)"
		opts.Skip = map[string]string{acceptance.ConcurrencyCase: ferretDBSkip}
		if raceDetector {
			for _, id := range timedCases {
				opts.Skip[id] = ferretDBRaceSkip
			}
		}
	}
	p := startInProcess(t, acceptance.InProcessConfig{
		OpenStore: func(ctx context.Context) (items.Store, error) {
			return mongostore.Open(ctx, uri, database, mongostore.WithTimeout(mongotest.StoreTimeout()))
		},
		StoreName: storeName,
	})
	if onFerretDB {
		// On FerretDB a replay right after a probe's verdict could be undone by the store's bookkeeping of
		// that verdict (InProcess.AwaitProbeRun says how); on a real MongoDB it replays at once.
		opts.AwaitProbeRun = p.AwaitProbeRun
	}
	res, table := runSuite(t, p, opts)
	t.Log("\n" + table)
	want := len(acceptance.Cases()) - len(opts.Skip)
	if res.Failed > 0 || res.Passed != want || res.Skipped != len(opts.Skip) {
		t.Fatalf("%d passed, %d failed, %d skipped; want %d passed, %d skipped", res.Passed, res.Failed, res.Skipped, want, len(opts.Skip))
	}
	if skipped := caseResult(t, res, acceptance.ConcurrencyCase); opts.Skip[acceptance.ConcurrencyCase] != "" && skipped.SkipReason != ferretDBSkip {
		t.Errorf("case %s: skip reason %q", acceptance.ConcurrencyCase, skipped.SkipReason)
	}
}
