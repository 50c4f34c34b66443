package mongostore_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// MeasureEnv names the environment variable that, set to 1, runs the measurements behind the claim in
// docs/deploying.md that FerretDB v1 must not be the production store. They take about a minute and a
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
			t.Errorf("FerretDB applied every round of concurrent conditional updates atomically; docs/deploying.md says it does not")
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
