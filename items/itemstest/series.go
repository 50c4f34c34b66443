package itemstest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// SeriesStore is a store that keeps the measures over time (items.SeriesStore) beside the operator
// surface: what ExerciseSeries checks.
type SeriesStore interface {
	OperatorStore
	items.SeriesStore
}

// SeriesOptions adapts ExerciseSeries to a store.
type SeriesOptions struct {
	// Reopen, when set, closes s as a stopping service does and opens the same ledger again: its rows
	// must all be there. (A kill -9 mid-traffic is a test of its own, of a real companion serve, that ends
	// with CheckSeriesMatchesItems.)
	Reopen func(t *testing.T, s SeriesStore) SeriesStore
}

// ExerciseSeries runs the measures-over-time part of the suite against the stores open returns (new and
// empty on every call, closed by t.Cleanup): exact counts for a day of traffic on a moved clock, the
// bucket an event counts in at the edges of hours and days, a random walk whose rows must equal the
// events of its items, conflicts, releases, and the retention of hour and day rows.
func ExerciseSeries(t *testing.T, open func(t *testing.T) SeriesStore, opts SeriesOptions) {
	t.Helper()
	openOps := func(t *testing.T) (*opsHarness, SeriesStore) {
		s := open(t)
		return newOpsHarness(t, func(*testing.T) OperatorStore { return s }), s
	}
	t.Run("ADayOfTrafficOnAMovedClock", func(t *testing.T) {
		t.Parallel()
		h, s := openOps(t)
		want := h.dayOfTraffic(s)
		h.checkSeries(s, want, epoch, epoch.Add(26*time.Hour))
		if opts.Reopen != nil {
			s = opts.Reopen(t, s)
			h.checkSeries(s, want, epoch, epoch.Add(26*time.Hour))
		}
	})
	t.Run("EventsCountInTheBucketTheyHappenIn", func(t *testing.T) {
		t.Parallel()
		h, s := openOps(t)
		// Unknown a millisecond before 19:00, resolved at 19:00 sharp; unknown a millisecond before
		// midnight, resolved at midnight: each event in its own hour, and the last ones in their own days.
		h.advance(59*time.Minute + 59*time.Second)
		a := h.claim("edge-1", payloadA)
		h.advance(999 * time.Millisecond)
		h.aw("edge-1", unknownOutcome(a.Claim)) // 18:59:59.999
		h.advance(time.Millisecond)
		h.resolveOK("edge-1") // 19:00:00
		h.advance(4*time.Hour + 59*time.Minute + 59*time.Second)
		a = h.claim("edge-2", payloadA)
		h.advance(999 * time.Millisecond)
		h.aw("edge-2", unknownOutcome(a.Claim)) // 23:59:59.999
		h.advance(time.Millisecond)
		h.resolveOK("edge-2") // 00:00:00 the next day
		hours := h.series(s, items.SeriesQuery{Step: items.StepHour, From: epoch, To: epoch.Add(7 * time.Hour)})
		for i, w := range []struct{ unknown, resolved int }{{1, 0}, {0, 1}, {0, 0}, {0, 0}, {0, 0}, {1, 0}, {0, 1}} {
			p := hours.Points[i]
			if p.Unknown != w.unknown || p.ResolvedByPerson != w.resolved {
				t.Errorf("%s: %d unknown, %d resolved; want %d, %d", p.Start.Format(time.RFC3339), p.Unknown, p.ResolvedByPerson, w.unknown, w.resolved)
			}
		}
		days := h.series(s, items.SeriesQuery{Step: items.StepDay, From: epoch, To: epoch.Add(7 * time.Hour)})
		if len(days.Points) != 2 || days.Points[0].Unknown != 2 || days.Points[0].ResolvedByPerson != 1 || days.Points[1].ResolvedByPerson != 1 {
			t.Errorf("days: %+v; want 2 unknown and a resolution on the 29th, a resolution on the 30th", days.Points)
		}
		if r := days.Points[0].Resolution; r.Count != 1 || r.SumMillis != 1 || r.Buckets[0] != 1 {
			t.Errorf("the 29th's time to resolution: %+v; want one of 1 ms", r)
		}
	})
	t.Run("RandomTrafficMatchesTheItems", func(t *testing.T) {
		t.Parallel()
		h, s := openOps(t)
		h.randomTraffic(s, 400)
		CheckSeriesMatchesItems(t, s, tenantA, epoch.Add(-time.Hour), h.now().Add(time.Hour))
		CheckSeriesMatchesItems(t, s, tenantB, epoch.Add(-time.Hour), h.now().Add(time.Hour))
	})
	t.Run("ConflictsCountInTheSeriesAndTheStats", func(t *testing.T) {
		t.Parallel()
		h, s := openOps(t)
		if err := s.CountConflicts(h.ctx, tenantA, destKeyed, h.now(), 2); err != nil {
			t.Fatal(err)
		}
		h.advance(time.Hour)
		if err := s.CountConflicts(h.ctx, tenantA, destKeyed, h.now(), 1); err != nil {
			t.Fatal(err)
		}
		if err := s.CountConflicts(h.ctx, tenantB, destKeyed, h.now(), 5); err != nil {
			t.Fatal(err)
		}
		got := h.series(s, items.SeriesQuery{Step: items.StepHour, Destination: destKeyed, From: epoch, To: h.now().Add(time.Hour)})
		if len(got.Points) != 2 || got.Points[0].Conflicts != 2 || got.Points[1].Conflicts != 1 {
			t.Errorf("conflicts per hour: %+v; want 2 then 1 (the other tenant's are its own)", got.Points)
		}
		st, err := s.Stats(h.ctx, tenantA, h.now())
		if err != nil {
			t.Fatal(err)
		}
		if st.FingerprintConflicts != 3 || st.Destinations[destKeyed].FingerprintConflicts != 3 {
			t.Errorf("stats count %d conflicts (%s: %d); want 3", st.FingerprintConflicts, destKeyed, st.Destinations[destKeyed].FingerprintConflicts)
		}
	})
	t.Run("ReleasesAreRecordedWhenTheVersionChanges", func(t *testing.T) {
		t.Parallel()
		h, s := openOps(t)
		var recorded []bool
		for _, v := range []string{"v1.4.0", "v1.4.0", "v1.5.0", "v1.5.0", "v1.4.0"} {
			ok, err := s.RecordRelease(h.ctx, v, h.now())
			if err != nil {
				t.Fatal(err)
			}
			recorded = append(recorded, ok)
			h.advance(time.Hour)
		}
		if fmt.Sprint(recorded) != "[true false true false true]" {
			t.Errorf("recorded %v; want a release only where the version differs from the last one", recorded)
		}
		rs, err := s.Releases(h.ctx, epoch.Add(time.Hour), h.now())
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != 2 || rs[0].Version != "v1.5.0" || !rs[0].At.Equal(epoch.Add(2*time.Hour)) || rs[1].Version != "v1.4.0" ||
			!rs[1].At.Equal(epoch.Add(4*time.Hour)) {
			t.Errorf("releases from 19:00 on: %+v; want v1.5.0 at 20:00 and v1.4.0 (a rollback) at 22:00", rs)
		}
	})
	t.Run("RetentionRemovesHourAndDayRowsPastTheirKeeping", func(t *testing.T) {
		t.Parallel()
		h, s := openOps(t)
		h.claim("old", payloadA)
		h.advance(36 * 24 * time.Hour)
		h.claim("newer", payloadA)
		r, err := items.NewRetention(items.RetentionConfig{Store: h.ops, Config: h.ledger.Config(),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		count := func(step items.SeriesStep) (old, newer int) {
			rows, err := s.SeriesRows(h.ctx, items.SeriesQuery{Tenant: tenantA, Step: step, From: epoch.Add(-48 * time.Hour), To: h.now().Add(48 * time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				if r.Start.Before(epoch.Add(24 * time.Hour)) {
					old += r.Proceeds
				} else {
					newer += r.Proceeds
				}
			}
			return old, newer
		}
		c, err := r.RunOnce(h.ctx)
		if err != nil || c.SeriesRows != 1 {
			t.Errorf("after 36 days: %+v, %v; want the old hour's row removed", c, err)
		}
		if old, newer := count(items.StepHour); old != 0 || newer != 1 {
			t.Errorf("hour rows after 36 days: %d old claims, %d newer; want 0 and 1", old, newer)
		}
		if old, newer := count(items.StepDay); old != 1 || newer != 1 {
			t.Errorf("day rows after 36 days: %d old claims, %d newer; want both kept", old, newer)
		}
		h.advance(2*365*24*time.Hour - 30*24*time.Hour)
		if c, err := r.RunOnce(h.ctx); err != nil || c.SeriesRows != 2 {
			t.Errorf("two years on: %+v, %v; want the newer hour and the old day removed", c, err)
		}
		if old, newer := count(items.StepDay); old != 0 || newer != 1 {
			t.Errorf("day rows two years on: %d old claims, %d newer; want 0 and 1", old, newer)
		}
		// Kept for what the configuration says.
		cfg := h.ledger.Config()
		cfg.SeriesDaysKept = time.Hour
		short, err := items.NewRetention(items.RetentionConfig{Store: h.ops, Config: cfg,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if c, err := short.RunOnce(h.ctx); err != nil || c.SeriesRows != 1 {
			t.Errorf("days kept an hour: %+v, %v; want the last day row removed", c, err)
		}
	})
}

// resolveOK resolves key as succeeded and fails the test on an error.
func (h *harness) resolveOK(key string) {
	h.t.Helper()
	if _, _, err := h.resolve(key, items.ResolveSucceeded, "found it in the destination", "x-"+key); err != nil {
		h.t.Fatalf("resolve %s: %v", key, err)
	}
}

// series reads a series of the harness's tenant and fails the test on an error.
func (h *harness) series(s items.SeriesStore, q items.SeriesQuery) *items.Series {
	h.t.Helper()
	if q.Tenant == "" {
		q.Tenant = h.tenant
	}
	got, err := items.ReadSeries(h.ctx, s, q)
	if err != nil {
		h.t.Fatalf("ReadSeries(%+v): %v", q, err)
	}
	return got
}

// dayOfTraffic makes 24 hours of traffic from epoch (18:00, so that it spans two days), hour 5 without
// any, and returns what each hour must count, per destination, by the suite's own bookkeeping. Every
// hour but the fifth, at minute 10:
//
//   - 1 to 3 claims at destKeyed, reported at minute 20: succeeded, failed for good (422), or unknown
//     (a timeout; destKeyed's same-key retry is still possible, so no person is needed);
//   - one claim at destDefault, reported unknown at 59:59.999: it needs a person at once (dedupe none),
//     and a person resolves it as succeeded at minute 30 of the next hour (30 m 0.001 s);
//   - every fourth hour, one at destSearchable reported unknown at minute 20 and found by a lookup at
//     minute 40; every eighth, one at destKeyed retried under the same key after an unknown outcome, which
//     then succeeds; at hour 7, one at destKeyed reported twice with two external ids (a duplicate
//     effect, which needs a person); every sixth, two fingerprint conflicts at destKeyed.
func (h *opsHarness) dayOfTraffic(s items.SeriesStore) items.SeriesChanges {
	want := items.SeriesChanges{}
	expect := func(dest string, t items.Tally) { want.Add(h.tenant, dest, h.now(), t) }
	at := func(hour int, d time.Duration) {
		if now, then := h.now(), epoch.Add(time.Duration(hour)*time.Hour+d); then.After(now) {
			h.advance(then.Sub(now))
		}
	}
	// Leases of an hour: no report comes after its claim's lease, which would count an expiry.
	long := lease(3600)
	pending := "" // the destDefault item that waits for its resolution
	for hour := range 24 {
		if pending != "" {
			at(hour, 30*time.Minute)
			h.resolveOK(pending)
			expect(destDefault, items.Tally{Succeeded: 1, ResolvedByPerson: 1,
				Resolution: resolutionOf(30*time.Minute + time.Millisecond)})
			pending = ""
		}
		if hour == 5 {
			continue
		}
		at(hour, 10*time.Minute)
		var keyed []items.Answer
		for j := range 1 + hour%3 {
			keyed = append(keyed, h.claim(fmt.Sprintf("k-%02d-%d", hour, j), payloadA, dest(destKeyed), long))
			expect(destKeyed, items.Tally{Proceeds: 1})
		}
		def := h.claim(fmt.Sprintf("d-%02d", hour), payloadA, long)
		expect(destDefault, items.Tally{Proceeds: 1})
		var lookup, sameKey items.Answer
		if hour%4 == 1 {
			lookup = h.claim(fmt.Sprintf("s-%02d", hour), payloadA, dest(destSearchable), long)
			expect(destSearchable, items.Tally{Proceeds: 1})
		}
		if hour%8 == 3 {
			sameKey = h.claim(fmt.Sprintf("r-%02d", hour), payloadA, dest(destKeyed), long)
			expect(destKeyed, items.Tally{Proceeds: 1})
		}
		if hour == 7 {
			a := h.claim("dup", payloadA, dest(destKeyed), long)
			h.aw("dup", succeeded(a.Claim, "x-1"))
			h.aw("dup", succeeded(a.Claim, "x-2"))
			expect(destKeyed, items.Tally{Proceeds: 1, Succeeded: 1, DuplicateEffects: 1, NeedsPerson: 1})
		}
		if hour%6 == 0 {
			if err := s.CountConflicts(h.ctx, h.tenant, destKeyed, h.now(), 2); err != nil {
				h.t.Fatal(err)
			}
			expect(destKeyed, items.Tally{Conflicts: 2})
		}
		at(hour, 20*time.Minute)
		for j, a := range keyed {
			key := fmt.Sprintf("k-%02d-%d", hour, j)
			switch j % 3 {
			case 0:
				h.aw(key, succeeded(a.Claim, "x-"+key))
				expect(destKeyed, items.Tally{Succeeded: 1})
			case 1:
				h.aw(key, failedStatus(a.Claim, 422))
				expect(destKeyed, items.Tally{Failed: 1})
			default:
				h.aw(key, failedClass(a.Claim, items.ClassTimeout))
				expect(destKeyed, items.Tally{Unknown: 1})
			}
		}
		if lookup.Claim != "" {
			key := fmt.Sprintf("s-%02d", hour)
			h.aw(key, failedClass(lookup.Claim, items.ClassTimeout))
			expect(destSearchable, items.Tally{Unknown: 1})
			at(hour, 40*time.Minute)
			if _, err := h.reconcile(key, items.FindingFound, "x-"+key, "the destination has it under the reference"); err != nil {
				h.t.Fatal(err)
			}
			expect(destSearchable, items.Tally{Succeeded: 1, SettledByLookup: 1})
		}
		if sameKey.Claim != "" {
			key := fmt.Sprintf("r-%02d", hour)
			h.aw(key, failedClass(sameKey.Claim, items.ClassTimeout))
			retry := h.claim(key, payloadA, dest(destKeyed), long)
			h.aw(key, succeeded(retry.Claim, "x-"+key))
			expect(destKeyed, items.Tally{Unknown: 1, Proceeds: 1, Succeeded: 1, SameKeyRecoveries: 1})
		}
		at(hour, 59*time.Minute+59*time.Second+999*time.Millisecond)
		h.aw(fmt.Sprintf("d-%02d", hour), failedClass(def.Claim, items.ClassTimeout))
		expect(destDefault, items.Tally{Unknown: 1, NeedsPerson: 1})
		pending = fmt.Sprintf("d-%02d", hour)
	}
	at(24, 30*time.Minute)
	h.resolveOK(pending)
	expect(destDefault, items.Tally{Succeeded: 1, ResolvedByPerson: 1, Resolution: resolutionOf(30*time.Minute + time.Millisecond)})
	return want
}

// resolutionOf is the times to resolution of one resolution after d.
func resolutionOf(d time.Duration) items.ResolutionTimes {
	var r items.ResolutionTimes
	r.Count, r.SumMillis = 1, d.Milliseconds()
	i := 0
	for i < len(items.ResolutionBounds) && d > items.ResolutionBounds[i] {
		i++
	}
	r.Buckets[i] = 1
	return r
}

// checkSeries compares the store's series of the harness's tenant from from to to, by hour and by day,
// of each destination and of all together, with want: every bucket, empty ones included.
func (h *harness) checkSeries(s items.SeriesStore, want items.SeriesChanges, from, to time.Time) {
	h.t.Helper()
	dests := map[string]bool{"": true}
	for k := range want {
		dests[k.Destination] = true
	}
	for _, step := range items.Steps {
		for d := range dests {
			got := h.series(s, items.SeriesQuery{Step: step, Destination: d, From: from, To: to})
			if !got.From.Equal(step.BucketStart(from)) || len(got.Points) == 0 {
				h.t.Errorf("%s %q: from %s with %d points", step, d, got.From, len(got.Points))
			}
			for i, p := range got.Points {
				if !p.Start.Equal(got.From.Add(time.Duration(i) * step.Duration())) {
					h.t.Errorf("%s %q: point %d starts at %s; want every bucket in order", step, d, i, p.Start)
				}
				var w items.Tally
				for k, t := range want {
					if k.Step == step && k.Start == p.Start.Unix() && (d == "" || k.Destination == d) {
						w = w.Add(t)
					}
				}
				if p.Tally != w {
					h.t.Errorf("%s %q %s:\n got %+v\nwant %+v", step, d, p.Start.Format(time.RFC3339), p.Tally, w)
				}
			}
		}
	}
}

// randomTraffic drives n random steps of the ledger over two tenants, four destinations and a few keys,
// the clock moving minutes to hours between them: claims single and in batches, reports of every outcome
// (some in loops a history drops repeats of), lookups, resolutions, needs-person marks, expired leases.
func (h *opsHarness) randomTraffic(s items.SeriesStore, n int) {
	seed := uint64(time.Now().UnixNano())
	h.t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 36))
	dests := []string{destDefault, destKeyed, destSearchable, destEscalating}
	claims := map[string]string{}
	for range n {
		tenant := []string{tenantA, tenantB}[rng.IntN(2)]
		hh := h.as(tenant)
		key := fmt.Sprintf("k%02d", rng.IntN(16))
		ref := tenant + "/" + key
		opts := []bwOpt{dest(dests[rng.IntN(len(dests))]), lease(30 + rng.IntN(600))}
		switch op := rng.IntN(10); {
		case op < 3:
			payload := []string{payloadA, payloadA, payloadA, payloadB}[rng.IntN(4)]
			if a, err := hh.ledger.BeforeWrite(hh.ctx, hh.params(key, payload, opts...)); err == nil && a.Claim != "" {
				claims[ref] = a.Claim
			}
		case op == 3:
			var ps []items.BeforeWriteParams
			for range 1 + rng.IntN(5) {
				ps = append(ps, hh.params(fmt.Sprintf("k%02d", rng.IntN(16)), payloadA, opts...))
			}
			if as, err := hh.ledger.BeforeWriteMany(hh.ctx, tenant, ps); err == nil {
				for i, a := range as {
					if a.Claim != "" {
						claims[tenant+"/"+ps[i].Key] = a.Claim
					}
				}
			}
		case op < 6:
			c := claims[ref]
			reports := []items.AfterWriteParams{succeeded(c, "x-"+key), succeeded(c, "y-"+key), failedClass(c, items.ClassTimeout),
				failedStatus(c, 422), failedStatus(c, 503), unknownOutcome(c)}
			report := reports[rng.IntN(len(reports))]
			loops := 1
			if rng.IntN(10) == 0 {
				loops = items.KeptFirstRepeats + items.KeptLatestRepeats + 4
			}
			for i := range loops {
				report.ErrorMessage = fmt.Sprintf("report #%d", i)
				_, _ = hh.awErr(key, report)
			}
		case op == 6:
			finding := []string{items.FindingFound, items.FindingAbsent, items.FindingLookupFailed}[rng.IntN(3)]
			_, _ = hh.reconcile(key, finding, "x-"+key, "looked it up in the destination")
		case op == 7:
			outcome := []string{items.ResolveSucceeded, items.ResolveNotCommitted, items.ResolveAcknowledged}[rng.IntN(3)]
			id := "x-" + key
			if outcome == items.ResolveAcknowledged {
				id = ""
			}
			_, _, _ = hh.resolve(key, outcome, "checked in the destination", id)
		case op == 8:
			_, _ = hh.ledger.MarkNeedsPerson(hh.ctx, tenant, key)
		default:
			_, _ = hh.ledger.ExpireLease(hh.ctx, tenant, key)
		}
		if rng.IntN(3) == 0 {
			h.advance(time.Duration(rng.IntN(40)) * time.Minute)
		}
		if rng.IntN(25) == 0 {
			if err := s.CountConflicts(h.ctx, tenant, dests[rng.IntN(len(dests))], h.now(), 1+rng.IntN(3)); err != nil {
				h.t.Fatal(err)
			}
		}
	}
}

// CheckSeriesMatchesItems fails t unless the store's rows of tenant, hours and days whose bucket starts
// from from to before to, equal the events of the tenant's items as the store holds them (read back
// through ListItems): what a store that kept its series in the same transaction as every item holds,
// also after a crash. Fingerprint conflicts, which no item records, must sum to the kept counter of
// GET /v1/stats (every conflict is counted in both at once). The store must have kept its series since
// the items' first events, and its items must all be readable.
func CheckSeriesMatchesItems(t testing.TB, s SeriesStore, tenant string, from, to time.Time) {
	t.Helper()
	ctx := context.Background()
	var its []*items.Item
	for cursor := ""; ; {
		page, err := s.ListItems(ctx, items.ListParams{Tenant: tenant, Limit: items.MaxListLimit, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Unreadable) > 0 {
			t.Fatalf("items that cannot be read: %v", page.Unreadable)
		}
		its = append(its, page.Items...)
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	want := items.SeriesOfItems(its)
	dests := map[string]bool{}
	for k := range want {
		dests[k.Destination] = true
	}
	st, err := s.Stats(ctx, tenant, to)
	if err != nil {
		t.Fatal(err)
	}
	for d := range st.Destinations { // conflicts may be the only events of a destination
		dests[d] = true
	}
	delete(dests, "")
	conflicts := 0
	for _, step := range items.Steps {
		q := items.SeriesQuery{Tenant: tenant, Step: step, From: step.BucketStart(from), To: to}
		// Each destination's rows; the empty destination's are those of every destination together (what
		// SeriesRows answers for it) less the others'.
		got := map[items.SeriesKey]items.Tally{}
		all := map[int64]items.Tally{}
		for _, d := range append(slices.Sorted(maps.Keys(dests)), "") {
			q.Destination = d
			rows, err := s.SeriesRows(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				start := r.Start.Unix()
				if d == "" {
					all[start] = all[start].Add(r.Tally)
					continue
				}
				k := items.SeriesKey{Tenant: tenant, Destination: d, Step: step, Start: start}
				got[k] = got[k].Add(r.Tally)
			}
		}
		for k, tally := range got {
			all[k.Start] = all[k.Start].Add(negated(tally))
		}
		for start, tally := range all {
			got[items.SeriesKey{Tenant: tenant, Step: step, Start: start}] = tally
		}
		for k, tally := range got {
			if step == items.StepDay {
				conflicts += tally.Conflicts
			}
			tally.Conflicts = 0
			if tally.IsZero() {
				delete(got, k)
			} else {
				got[k] = tally
			}
		}
		n := 0
		for k, w := range want {
			if k.Step != step || k.Start < q.From.Unix() || k.Start >= q.To.Unix() {
				continue
			}
			n++
			if got[k] != w {
				t.Errorf("%s %s %s: the store keeps\n%+v\nthe items' events are\n%+v", k.Destination, step, k.StartTime().Format(time.RFC3339), got[k], w)
			}
		}
		if n != len(got) {
			t.Errorf("%s: the store keeps %d rows with events, the items have events in %d", step, len(got), n)
		}
	}
	if conflicts != st.FingerprintConflicts {
		t.Errorf("the day rows count %d fingerprint conflicts, the kept counter %d", conflicts, st.FingerprintConflicts)
	}
	t.Logf("tenant %s: %d items, their events in %d rows, and %d conflicts, all as the store keeps them", tenant, len(its), len(want), conflicts)
}

// negated returns the tally whose every count is t's negated.
func negated(t items.Tally) items.Tally {
	v := t.Columns()
	for i := range v {
		v[i] = -v[i]
	}
	return items.TallyOfColumns(v)
}
