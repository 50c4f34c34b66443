package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/pgstore"
	"github.com/replaysafe/companion/items/pgstore/pgtest"
	"github.com/replaysafe/companion/items/sqlitestore"
)

// TestSeriesExactAfterSIGKILL kills a real companion serve with SIGKILL while eight callers claim items,
// report every kind of outcome, ask again with changed payloads (fingerprint conflicts) and resolve the
// items that need a person, then opens its ledger and checks that the measures over time it kept are
// exactly the events of its items (and its conflicts those of the kept counter): what a write committed,
// its series rows committed with it, and what the kill cut off is in neither. The service restarted on the
// ledger serves the same series.
func TestSeriesExactAfterSIGKILL(t *testing.T) {
	dir := t.TempDir()
	seriesExactAfterSIGKILL(t, func() *exec.Cmd { return command(dir) }, func() itemstest.SeriesStore {
		s, err := sqlitestore.Open(context.Background(), dir)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestSeriesExactAfterSIGKILLOnPostgres is TestSeriesExactAfterSIGKILL on the PostgreSQL store
// (COMPANION_TEST_POSTGRES_URL), in a schema of its own.
func TestSeriesExactAfterSIGKILLOnPostgres(t *testing.T) {
	url, schema := pgtest.Schema(t)
	dir := t.TempDir()
	seriesExactAfterSIGKILL(t, func() *exec.Cmd { return command(dir, "POSTGRES_URL="+url, "POSTGRES_SCHEMA="+schema) },
		func() itemstest.SeriesStore {
			s, err := pgstore.Open(context.Background(), url, schema)
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
}

// seriesExactAfterSIGKILL runs the traffic of TestSeriesExactAfterSIGKILL on the service cmd starts, kills
// it, checks the ledger through the store open opens, and the series of the service started again.
func seriesExactAfterSIGKILL(t *testing.T, cmd func() *exec.Cmd, open func() itemstest.SeriesStore) {
	started := time.Now()
	p := run(t, cmd())
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	var (
		mu   sync.Mutex
		done int
		wg   sync.WaitGroup
	)
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				key := fmt.Sprintf("s-%d-%d", g, i)
				status, ans, err := post(client, p.addr, "/v1/before-write", fmt.Sprintf(`{"key":%q,"payload":{"n":%d},"destination":"d%d"}`, key, i, g%3))
				if err != nil || status != 200 {
					return // the process is gone
				}
				claim, _ := ans["claim"].(string)
				outcome := []string{`"outcome":"succeeded","external_id":"x"`, `"outcome":"failed","http_status":422`,
					`"outcome":"unknown","error":{"class":"timeout"}`}[i%3]
				if _, _, err := post(client, p.addr, "/v1/after-write", fmt.Sprintf(`{"key":%q,"claim":%q,%s}`, key, claim, outcome)); err != nil {
					return
				}
				switch i % 3 {
				case 0: // another payload for a key already sent: a conflict
					if _, _, err := post(client, p.addr, "/v1/before-write", fmt.Sprintf(`{"key":%q,"payload":{"n":"changed"},"destination":"d%d"}`, key, g%3)); err != nil {
						return
					}
				case 2: // unknown at a destination that can neither dedupe nor be searched: a person settles it
					if _, _, err := post(client, p.addr, "/v1/items/"+key+"/resolve", `{"outcome":"not_committed","evidence":"not in the destination"}`); err != nil {
						return
					}
				}
				mu.Lock()
				done++
				mu.Unlock()
			}
		})
	}
	killMidTraffic(t, p, &wg, client, "rounds", 300, func() int {
		mu.Lock()
		defer mu.Unlock()
		return done
	})

	s := open()
	from, to := started.Add(-time.Hour), time.Now().Add(time.Hour)
	itemstest.CheckSeriesMatchesItems(t, s, "default", from, to)
	st, err := s.Stats(context.Background(), "default", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if st.Items < 300 || st.FingerprintConflicts < 90 || st.ManualResolutions < 90 {
		t.Fatalf("the traffic did too little to check: %d items, %d conflicts, %d resolutions", st.Items, st.FingerprintConflicts, st.ManualResolutions)
	}

	q := run(t, cmd())
	resp, err := http.Get(fmt.Sprintf("http://%s/v1/stats/series?step=1d&from=%s", q.addr, from.UTC().Format(time.RFC3339)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var series struct {
		Series []struct {
			Conflicts        int `json:"conflicts"`
			ResolvedByPerson int `json:"resolved_by_person"`
		} `json:"series"`
	}
	if err := json.Unmarshal(b, &series); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the series after the restart: %d %s", resp.StatusCode, b)
	}
	var conflicts, resolved int
	for _, pt := range series.Series {
		conflicts += pt.Conflicts
		resolved += pt.ResolvedByPerson
	}
	if conflicts != st.FingerprintConflicts || resolved != st.ManualResolutions {
		t.Errorf("after the restart the series counts %d conflicts and %d resolutions; the kept counts %d and %d", conflicts, resolved,
			st.FingerprintConflicts, st.ManualResolutions)
	}
	t.Logf("killed after %d rounds: %d items, %d conflicts, %d resolutions, all in the series", done, st.Items, st.FingerprintConflicts, st.ManualResolutions)
}
