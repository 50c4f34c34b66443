package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// soakCallers is how many callers drive the server at once in TestKillNineUnderLoad; soakGroup of
// them share each key, so that they race for its claims.
const soakCallers, soakGroup = 64, 4

// soakProceed is a proceed a caller received; soakReport an after-write answered 200.
type soakProceed struct {
	key, claim string
	attempt    int
}

type soakReport struct {
	key, claim, outcome string // outcome: the state the report must have left its attempt in
}

// TestKillNineUnderLoad runs companion serve on SQLite under 64 concurrent callers and kills it with
// SIGKILL every 1.5–2.5 s, restarting it on the same data directory each time. Callers in groups of four
// race for the same keys: each asks before-write, and on proceed reports the write (a failure that
// nothing was sent, retryable at once, so the key proceeds again with the next attempt, or a success).
// Across every kill: every proceed a caller received is in the ledger with its claim and attempt (and a
// claimed event in the history), no key and attempt was proceeded twice, and every after-write answered
// 200 is recorded on its attempt.
//
// 10 rounds by default (about 30 s), 3 with -short; COMPANION_SOAK_ROUNDS=50 runs more.
func TestKillNineUnderLoad(t *testing.T) {
	rounds := 10
	if testing.Short() {
		rounds = 3
	}
	if v := os.Getenv("COMPANION_SOAK_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("COMPANION_SOAK_ROUNDS=%q: want a positive number", v)
		}
		rounds = n
	}
	dir := t.TempDir()
	p := run(t, command(dir))
	var addr atomic.Pointer[string]
	addr.Store(&p.addr)

	var (
		mu       sync.Mutex
		proceeds []soakProceed
		reports  []soakReport
		refused  []string // answers other than 200: none is expected
		cut      atomic.Int64
		stop     atomic.Bool
		wg       sync.WaitGroup
	)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: soakCallers}}
	defer client.CloseIdleConnections()
	// call posts body until it gets an answer: a request cut off by a kill is sent again to the next
	// process, as a workflow's retry would.
	call := func(path, body string) (int, map[string]any, bool) {
		for !stop.Load() {
			status, ans, err := post(client, *addr.Load(), path, body)
			if err == nil {
				return status, ans, true
			}
			cut.Add(1)
			time.Sleep(20 * time.Millisecond)
		}
		return 0, nil, false
	}
	for c := range soakCallers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(c), 11))
			for j := 0; !stop.Load(); j++ {
				key := fmt.Sprintf("soak-g%02d-%05d", c/soakGroup, j)
				bw := fmt.Sprintf(`{"key":%q,"payload":{"invoice":%q}}`, key, key)
				for !stop.Load() {
					status, ans, ok := call("/v1/before-write", bw)
					if !ok {
						return
					}
					if status != http.StatusOK {
						mu.Lock()
						refused = append(refused, fmt.Sprintf("before-write %s: %d %v", key, status, ans))
						mu.Unlock()
						break
					}
					if ans["decision"] != "proceed" {
						break // another caller holds it, or it is settled: the next key
					}
					pr := soakProceed{key: key, claim: ans["claim"].(string), attempt: int(ans["attempt"].(float64))}
					mu.Lock()
					proceeds = append(proceeds, pr)
					mu.Unlock()
					aw, want := fmt.Sprintf(`{"key":%q,"claim":%q,"outcome":"failed","error":{"class":"validation","message":"refused"}}`,
						key, pr.claim), "failed"
					if rnd.IntN(4) == 0 {
						aw, want = fmt.Sprintf(`{"key":%q,"claim":%q,"outcome":"succeeded","external_id":"x-%s-%d"}`,
							key, pr.claim, key, pr.attempt), "succeeded"
					}
					status, ans, ok = call("/v1/after-write", aw)
					if !ok {
						return
					}
					mu.Lock()
					if status == http.StatusOK {
						reports = append(reports, soakReport{key: key, claim: pr.claim, outcome: want})
					} else {
						refused = append(refused, fmt.Sprintf("after-write %s: %d %v", key, status, ans))
					}
					mu.Unlock()
				}
			}
		})
	}

	start := time.Now()
	rnd := rand.New(rand.NewPCG(1, 2))
	for range rounds {
		time.Sleep(1500*time.Millisecond + time.Duration(rnd.IntN(1000))*time.Millisecond)
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-p.exited
		p = run(t, command(dir))
		addr.Store(&p.addr)
	}
	stop.Store(true)
	wg.Wait()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	p = run(t, command(dir))
	elapsed := time.Since(start)

	for _, r := range refused {
		t.Error(r)
	}
	// No key and attempt proceeded twice.
	type keyAttempt struct {
		key     string
		attempt int
	}
	seen := map[keyAttempt]string{}
	keys := map[string]bool{}
	for _, pr := range proceeds {
		ka := keyAttempt{pr.key, pr.attempt}
		if claim, dup := seen[ka]; dup {
			t.Errorf("%s attempt %d proceeded twice: claims %s and %s", pr.key, pr.attempt, claim, pr.claim)
		}
		seen[ka] = pr.claim
		keys[pr.key] = true
	}
	// Every proceed and every acknowledged report is in the ledger.
	ledger := map[string]*soakItem{}
	for key := range keys {
		it, err := getItem(client, p.addr, key)
		if err != nil {
			t.Fatalf("GET %s after the last restart: %v", key, err)
		}
		ledger[key] = it
		numbers := map[int]bool{}
		for _, a := range it.Attempts {
			if numbers[a.Number] || a.Claim == "" {
				t.Errorf("%s: attempt %d is in the ledger twice, or without a claim: %+v", key, a.Number, it.Attempts)
			}
			numbers[a.Number] = true
		}
	}
	for _, pr := range proceeds {
		it := ledger[pr.key]
		a := it.attempt(pr.claim)
		if a == nil || a.Number != pr.attempt {
			t.Errorf("%s: the proceed of attempt %d (claim %s) is not in the ledger: attempts %+v", pr.key, pr.attempt, pr.claim, it.Attempts)
			continue
		}
		if !it.claimed(pr.attempt) {
			t.Errorf("%s: no claimed event for attempt %d in the history", pr.key, pr.attempt)
		}
	}
	for _, r := range reports {
		if a := ledger[r.key].attempt(r.claim); a == nil || a.Outcome != r.outcome {
			t.Errorf("%s: the after-write answered 200 for claim %s is not recorded: attempt %+v, want outcome %s", r.key, r.claim, a, r.outcome)
		}
	}
	t.Logf("%d rounds of SIGKILL in %s: %d keys, %d proceeds, %d acknowledged after-writes, %d requests cut off and sent again; all in the ledger",
		rounds, elapsed.Round(time.Second), len(keys), len(proceeds), len(reports), cut.Load())
	if len(proceeds) < rounds*soakCallers/soakGroup {
		t.Errorf("only %d proceeds in %d rounds: the load did not run", len(proceeds), rounds)
	}
}

// soakItem is the part of GET /v1/items/{key} the soak test checks.
type soakItem struct {
	Attempts []soakAttempt `json:"attempts"`
	History  []struct {
		Kind    string `json:"kind"`
		Attempt int    `json:"attempt"`
	} `json:"history"`
}

type soakAttempt struct {
	Number  int    `json:"number"`
	Claim   string `json:"claim"`
	Outcome string `json:"outcome"`
}

// attempt returns the attempt of claim, or nil.
func (it *soakItem) attempt(claim string) *soakAttempt {
	for i := range it.Attempts {
		if it.Attempts[i].Claim == claim {
			return &it.Attempts[i]
		}
	}
	return nil
}

// claimed reports whether the history holds the claim of attempt.
func (it *soakItem) claimed(attempt int) bool {
	for _, e := range it.History {
		if e.Kind == "claimed" && e.Attempt == attempt {
			return true
		}
	}
	return false
}

// getItem reads an item through GET /v1/items/{key} (the service runs open: no token).
func getItem(c *http.Client, addr, key string) (*soakItem, error) {
	resp, err := c.Get("http://" + addr + "/v1/items/" + url.PathEscape(key))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%d %s", resp.StatusCode, b)
	}
	var it soakItem
	return &it, json.Unmarshal(b, &it)
}
