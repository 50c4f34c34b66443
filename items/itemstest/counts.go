package itemstest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// exerciseKeptCounts drives a random sequence of transitions (claims single and in batches, reports of
// every outcome, reconciles, resolutions, acknowledgements, needs-person marks, expired leases) over a
// few tenants, destinations and keys, reports replayed in a loop (more than an item's history keeps, so
// that history_dropped sums are not 0), and checks after every round that Stats, which stores answer from
// counts they keep as items change, equals a recount of every item read back from the store, and that
// SweepCandidates returns exactly the items whose facts say so (items.Facts.SweepCandidate).
func exerciseKeptCounts(t *testing.T, open func(t *testing.T) OperatorStore) {
	t.Run("CountsEqualARecount", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		seed := uint64(time.Now().UnixNano())
		t.Logf("seed %d", seed)
		rng := rand.New(rand.NewPCG(seed, 13))
		tenants := []string{tenantA, tenantB}
		dests := []string{destDefault, destKeyed, destSearchable, destEscalating}
		type ref struct{ tenant, key string }
		var known []ref
		seen := map[ref]bool{}
		claims := map[ref]string{}
		payloads := []string{payloadA, payloadA, payloadA, `{"other":true}`}
		dropped := 0 // the largest history_dropped sum a recount found: the walk must make it non-zero
		for round := 0; round < 6; round++ {
			looped := false
			for step := 0; step < 40; step++ {
				tenant := tenants[rng.IntN(len(tenants))]
				hh := h.as(tenant)
				r := ref{tenant, fmt.Sprintf("k%02d", rng.IntN(24))}
				if !seen[r] {
					seen[r] = true
					known = append(known, r)
				}
				opts := []bwOpt{dest(dests[rng.IntN(len(dests))]), lease(30 + rng.IntN(120))}
				switch op := rng.IntN(10); {
				case op < 3:
					a, err := hh.ledger.BeforeWrite(hh.ctx, hh.params(r.key, payloads[rng.IntN(len(payloads))], opts...))
					if err == nil && a.Claim != "" {
						claims[r] = a.Claim
					}
				case op == 3:
					// A batch of a few keys, some repeated.
					var ps []items.BeforeWriteParams
					for range 1 + rng.IntN(6) {
						k := fmt.Sprintf("k%02d", rng.IntN(24))
						if !seen[ref{tenant, k}] {
							seen[ref{tenant, k}] = true
							known = append(known, ref{tenant, k})
						}
						ps = append(ps, hh.params(k, payloadA, opts...))
					}
					as, err := hh.ledger.BeforeWriteMany(hh.ctx, tenant, ps)
					if err == nil {
						for i, a := range as {
							if a.Claim != "" {
								claims[ref{tenant, ps[i].Key}] = a.Claim
							}
						}
					}
				case op < 7:
					c, ok := claims[r]
					if !ok {
						continue
					}
					reports := []items.AfterWriteParams{succeeded(c, "x-"+r.key), succeeded(c, "y-"+r.key), failedClass(c, items.ClassTimeout),
						failedClass(c, items.ClassDNS), failedStatus(c, 422), failedStatus(c, 503), unknownOutcome(c)}
					report := reports[rng.IntN(len(reports))]
					n := 1
					// A workflow replaying its report in a loop, past what the history keeps: one in eight, and
					// the first report of each round until a round ends with a dropped one.
					if (dropped == 0 && !looped) || rng.IntN(8) == 0 {
						n, looped = items.KeptFirstRepeats+items.KeptLatestRepeats+1+rng.IntN(6), true
					}
					for i := range n {
						if n > 1 { // each with another message, so that none is an identical repeat (unchanged)
							report.ErrorMessage = fmt.Sprintf("late report #%d", i)
						}
						_, _ = hh.awErr(r.key, report)
					}
				case op == 7:
					outcomes := []string{items.ResolveNotCommitted, items.ResolveSucceeded, items.ResolveAcknowledged}
					outcome, id := outcomes[rng.IntN(len(outcomes))], "x-"+r.key
					if rng.IntN(2) == 0 { // half of them acknowledge one of the tenant's items that can be
						for _, k := range known {
							if it, err := h.store.Get(h.ctx, k.tenant, k.key); err == nil && k.tenant == tenant && it.Acknowledgeable() {
								r, outcome = k, items.ResolveAcknowledged
								break
							}
						}
					}
					if outcome == items.ResolveAcknowledged {
						id = ""
					}
					_, _, _ = hh.resolve(r.key, outcome, "looked in the log", id)
				case op == 8:
					_, _ = hh.ledger.MarkNeedsPerson(hh.ctx, tenant, r.key)
				default:
					_, _ = hh.ledger.ExpireLease(hh.ctx, tenant, r.key)
				}
				if rng.IntN(4) == 0 {
					h.advance(time.Duration(rng.IntN(90)) * time.Second)
				}
				if rng.IntN(20) == 0 {
					h.advance(time.Hour) // past destEscalating's escalate_after: unresolved_too_long, to acknowledge
				}
			}
			now := h.now()
			var candidates, want []string
			for after := (items.ItemRef{}); ; {
				page, err := h.ops.SweepCandidates(h.ctx, after, 7)
				if err != nil {
					t.Fatal(err)
				}
				for _, it := range page {
					candidates = append(candidates, it.Tenant+"/"+it.Key)
				}
				if len(page) < 7 {
					break
				}
				after = items.ItemRef{Tenant: page[len(page)-1].Tenant, Key: page[len(page)-1].Key}
			}
			for _, r := range known {
				if it, err := h.store.Get(h.ctx, r.tenant, r.key); err == nil && it.Facts().SweepCandidate {
					want = append(want, r.tenant+"/"+r.key)
				}
			}
			slices.Sort(want)
			if !slices.Equal(candidates, want) {
				t.Fatalf("round %d: sweep candidates %v, by the items' facts %v", round, candidates, want)
			}
			for _, tenant := range append(tenants, "") {
				got, err := h.ops.Stats(h.ctx, tenant, now)
				if err != nil {
					t.Fatal(err)
				}
				var its []*items.Item
				for _, r := range known {
					if tenant != "" && r.tenant != tenant {
						continue
					}
					it, err := h.store.Get(h.ctx, r.tenant, r.key)
					if err == nil {
						its = append(its, it)
					}
				}
				want := recount(its, now)
				dropped = max(dropped, want.HistoryDropped)
				if g, w := fmt.Sprintf("%+v", got.Measures), fmt.Sprintf("%+v", want.Measures); g != w {
					t.Fatalf("round %d, tenant %q: kept counts\n%s\nrecount\n%s", round, tenant, g, w)
				}
				for d, w := range want.Destinations {
					if g := got.Destinations[d]; fmt.Sprintf("%+v", g) != fmt.Sprintf("%+v", w) {
						t.Fatalf("round %d, tenant %q, destination %s: kept counts\n%+v\nrecount\n%+v", round, tenant, d, g, w)
					}
				}
				if len(got.Destinations) != len(want.Destinations) {
					t.Fatalf("round %d, tenant %q: destinations %v, recount %v", round, tenant, got.Destinations, want.Destinations)
				}
			}
		}
		t.Logf("at most %d repeated reports dropped from the histories at once", dropped)
		if dropped == 0 {
			t.Fatalf("seed %d: no item's history dropped a report: the walk did not test the history_dropped sums", seed)
		}
	})
}

// recount measures items from scratch, by the definitions of items.Measures, without the stores' counts.
// Fingerprint conflicts are not items' measures: this suite adds none.
func recount(its []*items.Item, now time.Time) items.Stats {
	st := items.Stats{Measures: items.NewMeasures(), Destinations: map[string]items.Measures{}}
	attempted := map[string]int{}
	for _, it := range its {
		f := it.Facts()
		for _, d := range []string{"", it.Destination} {
			m := &st.Measures
			var dm items.Measures
			if d != "" {
				var ok bool
				if dm, ok = st.Destinations[d]; !ok {
					dm = items.NewMeasures()
				}
				m = &dm
			}
			m.Items++
			m.States[it.State]++
			if it.NeedsPerson {
				m.NeedsPerson++
			}
			if f.EnteredUnknown {
				m.EnteredUnknown++
			}
			if f.Attempt > 1 {
				m.Retries += f.Attempt - 1
			}
			if f.Attempt >= 1 {
				attempted[d]++
			}
			if f.SameKeyRecovered {
				m.SameKeyRecoveries++
			}
			m.ManualResolutions += f.Resolutions
			if f.DuplicateEffect {
				m.DuplicateEffects++
			}
			m.HistoryDropped += it.HistoryDropped
			if it.HistoryDropped > 0 {
				m.HistoryDroppedItems++
			}
			if since, ok := it.UnresolvedSince(now); ok {
				m.OldestUnresolvedAgeSeconds = max(m.OldestUnresolvedAgeSeconds, int64(max(now.Sub(since), 0)/time.Second))
			}
			if attempted[d] > 0 {
				m.RetriesPerOperation = float64(m.Retries) / float64(attempted[d])
			}
			if d != "" {
				st.Destinations[d] = dm
			}
		}
	}
	return st
}

// CheckReportLoopCounted replays, as a workflow stuck in a loop does, 40 late failures of key's claim
// after its success (each with another message, so none is an identical repeat), and checks that the
// store's kept counts hold what the item's history dropped: in total, in one item, and in its
// destination. now is the ledger's clock: each report moves it 3 s.
func CheckReportLoopCounted(t *testing.T, l *items.Ledger, s OperatorStore, tenant, key, claim, destination string, now *time.Time) {
	t.Helper()
	ctx := context.Background()
	for i := range 40 {
		*now = now.Add(3 * time.Second)
		if _, err := l.AfterWrite(ctx, items.AfterWriteParams{Tenant: tenant, Key: key, Claim: claim, ErrorMessage: fmt.Sprintf("late report #%d", i),
			Evidence: items.Evidence{Outcome: items.OutcomeFailed, Class: items.ClassHTTP, HTTPStatus: 503}}); err != nil {
			t.Fatal(err)
		}
	}
	it, err := s.Get(ctx, tenant, key)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Stats(ctx, tenant, *now)
	if err != nil {
		t.Fatal(err)
	}
	if it.HistoryDropped != 40-items.KeptFirstRepeats-items.KeptLatestRepeats-1 || got.HistoryDropped != it.HistoryDropped ||
		got.HistoryDroppedItems != 1 || got.Destinations[destination].HistoryDropped != it.HistoryDropped {
		t.Fatalf("after a loop of 40 reports: the item dropped %d, the stats count %d in %d items (%s: %d)",
			it.HistoryDropped, got.HistoryDropped, got.HistoryDroppedItems, destination, got.Destinations[destination].HistoryDropped)
	}
}
