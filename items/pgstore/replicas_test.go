package pgstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/pgstore"
	"github.com/replaysafe/companion/items/pgstore/pgtest"
)

// openReplicas opens n stores on one schema, each with its own pool, as n processes would, and a ledger
// over each on the real clock. Replica i runs i committers (WithCommitters): the first runs every
// transition in a transaction of its own, so that the store's two ways of committing race each other too.
func openReplicas(t *testing.T, n int) ([]*pgstore.Store, []*items.Ledger) {
	t.Helper()
	url, schema := pgtest.Schema(t)
	var stores []*pgstore.Store
	var ledgers []*items.Ledger
	for i := range n {
		s, err := pgstore.Open(context.Background(), url, schema, pgstore.WithLogger(quiet), pgstore.WithCommitters(i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		l, err := items.NewLedger(context.Background(), s, items.Config{MaxClockSkew: items.DefaultMaxClockSkew})
		if err != nil {
			t.Fatal(err)
		}
		stores, ledgers = append(stores, s), append(ledgers, l)
	}
	return stores, ledgers
}

// TestReplicasOneProceedPerRound: 30 callers spread over three replicas ask for one new key at once, 60
// rounds, and exactly one is told to proceed; then they report, each to another replica than the one it
// asked, and the item is recorded once. The conformance suite's race runs in one store, whose group
// decides the callers in one transaction; here the replicas' transactions meet in the database, on its
// primary key (creators) and its row locks (everyone after).
func TestReplicasOneProceedPerRound(t *testing.T) {
	_, ledgers := openReplicas(t, 3)
	fp, _ := items.Fingerprint([]byte(`{"invoice":"742"}`))
	const callers = 30
	for round := range 60 {
		key := fmt.Sprintf("race-%02d", round)
		answers := make([]items.Answer, callers)
		errs := make([]error, callers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range callers {
			wg.Go(func() {
				<-start
				answers[i], errs[i] = ledgers[i%3].BeforeWrite(context.Background(), items.BeforeWriteParams{Tenant: "acme", Key: key,
					Fingerprint: fp, Destination: "crm", Dedupe: items.DedupeKey})
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, a := range answers {
			switch {
			case errs[i] != nil:
				t.Fatalf("round %d caller %d: %v", round, i, errs[i])
			case a.Decision == items.Proceed:
				if winner >= 0 {
					t.Fatalf("round %d: callers %d and %d both told to proceed", round, winner, i)
				}
				winner = i
			case a.Reason != items.ReasonInProgress:
				t.Fatalf("round %d caller %d: %s/%s", round, i, a.Decision, a.Reason)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody proceeded", round)
		}
		a := answers[winner]
		// The report goes to another replica, and so does a second, concurrent one (a retried request).
		var reps [2]items.Report
		var repErrs [2]error
		var rg sync.WaitGroup
		for j := range 2 {
			rg.Go(func() {
				reps[j], repErrs[j] = ledgers[(winner+1+j)%3].AfterWrite(context.Background(), items.AfterWriteParams{Tenant: "acme", Key: key,
					Claim: a.Claim, Evidence: items.Evidence{Outcome: items.OutcomeSucceeded}, ExternalID: "x-" + key})
			})
		}
		rg.Wait()
		for j := range 2 {
			if repErrs[j] != nil || reps[j].State != items.StateSucceeded {
				t.Fatalf("round %d report %d: %+v, %v", round, j, reps[j], repErrs[j])
			}
		}
		it, err := ledgers[0].Get(context.Background(), "acme", key)
		if err != nil {
			t.Fatal(err)
		}
		if it.State != items.StateSucceeded || it.Attempt != 1 || len(it.Attempts) != 1 || it.Version != 2 {
			t.Fatalf("round %d: stored %s attempt %d (%d attempts) version %d; want succeeded at attempt 1, version 2 "+
				"(one claim, one report, the repeat unchanged)", round, it.State, it.Attempt, len(it.Attempts), it.Version)
		}
	}
}

// TestReplicasSameBatch: the same batch of 40 new keys (one repeated), sent at once to two replicas, one of
// them in the reverse order, 20 rounds: every key proceeds once, none twice, and no transaction deadlocks
// for good (the read locks items in key order; a creator that lost the race decides again).
func TestReplicasSameBatch(t *testing.T) {
	_, ledgers := openReplicas(t, 2)
	fp, _ := items.Fingerprint([]byte(`{"invoice":"742"}`))
	for round := range 20 {
		ps := make([]items.BeforeWriteParams, 40)
		for i := range ps {
			ps[i] = items.BeforeWriteParams{Tenant: "acme", Key: fmt.Sprintf("b%02d-%02d", round, i%39), Fingerprint: fp}
		}
		rev := make([]items.BeforeWriteParams, len(ps))
		for i := range ps {
			rev[i] = ps[len(ps)-1-i]
		}
		var answers [2][]items.Answer
		var errs [2]error
		var wg sync.WaitGroup
		for c := range 2 {
			wg.Go(func() {
				batch := ps
				if c == 1 {
					batch = rev
				}
				answers[c], errs[c] = ledgers[c].BeforeWriteMany(context.Background(), "acme", batch)
			})
		}
		wg.Wait()
		proceeds := map[string]int{}
		for c := range 2 {
			if errs[c] != nil {
				t.Fatalf("round %d replica %d: %v", round, c, errs[c])
			}
			for _, a := range answers[c] {
				if a.Decision == items.Proceed {
					proceeds[a.Key]++
				}
			}
		}
		if len(proceeds) != 39 {
			t.Fatalf("round %d: %d keys proceeded, want 39", round, len(proceeds))
		}
		for k, n := range proceeds {
			if n != 1 {
				t.Fatalf("round %d: %s proceeded %d times", round, k, n)
			}
		}
	}
}

// TestReplicasKeepCountsTogether: after three replicas raced over the same keys (claims and retries of the
// same keys at once, reports to another replica than the claim's, conflicts counted), the kept counts and
// the series every replica reads equal a count of the items.
func TestReplicasKeepCountsTogether(t *testing.T) {
	stores, ledgers := openReplicas(t, 3)
	fp, _ := items.Fingerprint([]byte(`{"invoice":"742"}`))
	ctx := context.Background()
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Go(func() {
			for i := range 60 {
				key := fmt.Sprintf("k%02d", (i*7+r)%40)
				a, err := ledgers[r].BeforeWrite(ctx, items.BeforeWriteParams{Tenant: "acme", Key: key, Fingerprint: fp,
					Destination: fmt.Sprintf("d%d", i%3), Dedupe: items.DedupeKey, LeaseSeconds: items.MinLeaseSeconds})
				if err != nil {
					t.Error(err)
					return
				}
				if i%5 == 0 {
					if err := stores[r].CountConflicts(ctx, "acme", fmt.Sprintf("d%d", i%3), time.Now(), 1); err != nil {
						t.Error(err)
						return
					}
				}
				if a.Decision != items.Proceed {
					continue
				}
				ev := items.Evidence{Outcome: items.OutcomeSucceeded}
				if i%4 == 0 {
					ev = items.Evidence{Outcome: items.OutcomeFailed, Class: items.ClassTimeout}
				}
				if _, err := ledgers[(r+1)%3].AfterWrite(ctx, items.AfterWriteParams{Tenant: "acme", Key: key, Claim: a.Claim, Evidence: ev}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	now := time.Now()
	want := items.CountChanges{}
	for _, s := range stores[:1] {
		page, err := s.ListItems(ctx, items.ListParams{Tenant: "acme", Limit: items.MaxListLimit})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Items {
			want.Move(nil, it)
		}
	}
	wantStats := items.StatsOf("acme", now, want, nil, nil)
	for r, s := range stores {
		got, err := s.Stats(ctx, "acme", now)
		if err != nil {
			t.Fatal(err)
		}
		if got.Items != wantStats.Items || fmt.Sprint(got.States) != fmt.Sprint(wantStats.States) || got.Retries != wantStats.Retries ||
			got.EnteredUnknown != wantStats.EnteredUnknown || got.NeedsPerson != wantStats.NeedsPerson {
			t.Errorf("replica %d counts %d items %v, retries %d, entered unknown %d, needs person %d; the items are %d %v, %d, %d, %d",
				r, got.Items, got.States, got.Retries, got.EnteredUnknown, got.NeedsPerson,
				wantStats.Items, wantStats.States, wantStats.Retries, wantStats.EnteredUnknown, wantStats.NeedsPerson)
		}
		itemstest.CheckSeriesMatchesItems(t, s, "acme", now.Add(-time.Hour), now.Add(time.Hour))
	}
}
