package itemstest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// Sizes of the race: the contract's "50 goroutines, 200 rounds".
const (
	raceCallers = 50
	raceRounds  = 200
)

// race runs n functions at once, released together, and waits for them.
func race(n int, fn func(i int)) {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			fn(i)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
}

// exerciseConcurrency checks the guarantees that hold under concurrent callers.
func exerciseConcurrency(t *testing.T, open func(t *testing.T) items.Store) {
	t.Run("OneProceedPerRound", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		fp := h.fingerprint(payloadA)
		for round := range raceRounds {
			key := fmt.Sprintf("race-%03d", round)
			answers := make([]items.Answer, raceCallers)
			errs := make([]error, raceCallers)
			race(raceCallers, func(i int) {
				answers[i], errs[i] = h.ledger.BeforeWrite(h.ctx, items.BeforeWriteParams{Tenant: tenantA, Key: key, Fingerprint: fp,
					ExecutionID: fmt.Sprint(i)})
			})
			proceeds := 0
			for i, a := range answers {
				switch {
				case errs[i] != nil:
					t.Fatalf("round %d caller %d: %v", round, i, errs[i])
				case a.Decision == items.Proceed && a.Reason == items.ReasonNew && a.Attempt == 1:
					proceeds++
				case a.Decision == items.Skip && a.Reason == items.ReasonInProgress && a.State == items.StateInFlight && a.Attempt == 1:
				default:
					t.Fatalf("round %d caller %d got %s/%s in %s at attempt %d", round, i, a.Decision, a.Reason, a.State, a.Attempt)
				}
			}
			if proceeds != 1 {
				t.Fatalf("round %d: %d callers got proceed, want exactly 1", round, proceeds)
			}
			if it := h.item(key); it.Attempt != 1 || len(it.Attempts) != 1 || len(it.History) != 1 {
				t.Fatalf("round %d: stored attempt %d, %d attempts, %d events", round, it.Attempt, len(it.Attempts), len(it.History))
			}
		}
	})

	t.Run("LateSuccessRacesLeaseExpiry", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		for round := range 50 {
			key := fmt.Sprintf("late-%02d", round)
			a := h.claim(key, payloadA, lease(items.MinLeaseSeconds))
			h.advance(items.MinLeaseSeconds * time.Second)
			replayParams := h.params(key, payloadA)
			var rep items.Report
			var replay items.Answer
			var errs [3]error
			race(3, func(i int) {
				switch i {
				case 0:
					_, errs[0] = h.ledger.ExpireLease(h.ctx, tenantA, key)
				case 1:
					rep, errs[1] = h.awErr(key, succeeded(a.Claim, "r-1"))
				case 2:
					replay, errs[2] = h.ledger.BeforeWrite(h.ctx, replayParams)
				}
			})
			for i, err := range errs {
				if err != nil {
					t.Fatalf("round %d racer %d: %v", round, i, err)
				}
			}
			it := h.item(key)
			if it.State != items.StateSucceeded || it.ExternalID != "r-1" || it.NeedsPerson {
				t.Fatalf("round %d: %s external_id %q needs_person %v after a late success", round, it.State, it.ExternalID, it.NeedsPerson)
			}
			expiredFirst := slices.Index(kinds(it), items.EventLeaseExpired) >= 0
			wantReason := items.ReasonRecorded
			if expiredFirst {
				wantReason = items.ReasonLateSuccess
			}
			if rep.Reason != wantReason || rep.State != items.StateSucceeded {
				t.Errorf("round %d: report %s/%s, want %s (lease expiry recorded first: %v)", round, rep.State, rep.Reason, wantReason, expiredFirst)
			}
			// Dedupe none: the replay waits for a person or sees the success, never proceeds.
			if replay.Decision == items.Proceed || !(replay.Reason == items.ReasonAwaitingOwner || replay.Reason == items.ReasonSucceeded) {
				t.Errorf("round %d: a replay racing the late success got %s/%s", round, replay.Decision, replay.Reason)
			}
			h.checkAnswer(key, h.bw(key, payloadA), want{Decision: items.Skip, Reason: items.ReasonSucceeded, State: items.StateSucceeded, Attempt: 1})
		}
	})

	t.Run("SameBatchFromTwoCallers", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		const size = 25
		for round := range 20 {
			ps := make([]items.BeforeWriteParams, size)
			for i := range ps {
				ps[i] = h.params(fmt.Sprintf("batch-%02d-%02d", round, i%(size-1)), payloadA) // the last key repeats the first
			}
			reversed := slices.Clone(ps)
			if round%2 == 1 {
				slices.Reverse(reversed) // the same batch in the other order must not deadlock either
			}
			var answers [2][]items.Answer
			var errs [2]error
			race(2, func(i int) {
				batch := ps
				if i == 1 {
					batch = reversed
				}
				answers[i], errs[i] = h.ledger.BeforeWriteMany(h.ctx, tenantA, batch)
			})
			proceeds := map[string]int{}
			for c := range 2 {
				if errs[c] != nil {
					t.Fatalf("round %d caller %d: %v", round, c, errs[c])
				}
				for _, a := range answers[c] {
					switch {
					case a.Decision == items.Proceed && a.Reason == items.ReasonNew:
						proceeds[a.Key]++
					case a.Decision == items.Skip && a.Reason == items.ReasonInProgress:
					default:
						t.Fatalf("round %d caller %d: %s got %s/%s", round, c, a.Key, a.Decision, a.Reason)
					}
				}
			}
			if len(proceeds) != size-1 {
				t.Fatalf("round %d: %d keys proceeded, want %d", round, len(proceeds), size-1)
			}
			for key, n := range proceeds {
				if n != 1 {
					t.Fatalf("round %d: %s proceeded %d times", round, key, n)
				}
				if it := h.item(key); it.Attempt != 1 || len(it.History) != 1 {
					t.Fatalf("round %d: %s at attempt %d with %d events", round, key, it.Attempt, len(it.History))
				}
			}
		}
	})
}
