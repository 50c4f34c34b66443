package items_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/sqlitestore"
)

func TestBucketStartIsTheHourOrTheUTCDayThatHoldsTheTime(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := []struct {
		step     items.SeriesStep
		at, want string
	}{
		{items.StepHour, "2026-12-01T10:59:59.999999999Z", "2026-12-01T10:00:00Z"},
		{items.StepHour, "2026-12-01T11:00:00Z", "2026-12-01T11:00:00Z"},
		{items.StepHour, "2026-12-01T12:30:00+01:00", "2026-12-01T11:00:00Z"},
		{items.StepHour, "2026-12-01T10:45:00+05:30", "2026-12-01T05:00:00Z"},
		{items.StepDay, "2026-12-01T23:59:59.9Z", "2026-12-01T00:00:00Z"},
		{items.StepDay, "2026-12-02T00:30:00+01:00", "2026-12-01T00:00:00Z"},
		{items.StepDay, "1969-12-31T23:00:00Z", "1969-12-31T00:00:00Z"},
	}
	for _, tt := range tests {
		if got := tt.step.BucketStart(at(tt.at)); !got.Equal(at(tt.want)) || got.Location() != time.UTC {
			t.Errorf("%s bucket of %s = %s, want %s", tt.step, tt.at, got, tt.want)
		}
	}
}

func TestResolutionQuantilesAreReadFromTheBuckets(t *testing.T) {
	t.Parallel()
	var none items.ResolutionTimes
	if none.Quantile(0.5) != 0 {
		t.Errorf("p50 of nothing = %s, want 0", none.Quantile(0.5))
	}
	// Ten resolutions: four within a minute, four between 5 and 15 minutes, two after more than a week.
	r := items.ResolutionTimes{Count: 10}
	r.Buckets[0], r.Buckets[2], r.Buckets[len(r.Buckets)-1] = 4, 4, 2
	// p50 is the 5th of 10: the first of the 5-15 minute bucket's four, a quarter into it.
	if got, want := r.Quantile(0.5), 5*time.Minute+150*time.Second; got != want {
		t.Errorf("p50 = %s, want %s", got, want)
	}
	// p90 is the 9th: past the last bound, which is what can be said of it.
	if got := r.Quantile(0.9); got != 7*24*time.Hour {
		t.Errorf("p90 = %s, want the last bound, 168h", got)
	}
	// All in the first minute: p90 is 54 s, 0.9 of the way through it.
	one := items.ResolutionTimes{Count: 5}
	one.Buckets[0] = 5
	if got := one.Quantile(0.9); got != 54*time.Second {
		t.Errorf("p90 of five quick ones = %s, want 54s", got)
	}
}

func TestSeriesQueryLimits(t *testing.T) {
	t.Parallel()
	to := time.Date(2026, 12, 7, 10, 30, 0, 0, time.UTC)
	q, err := items.SeriesQuery{Step: items.StepHour, To: to}.Normalize()
	if err != nil || !q.From.Equal(time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)) || !q.To.Equal(time.Date(2026, 12, 7, 11, 0, 0, 0, time.UTC)) ||
		q.Buckets() != 49 {
		t.Errorf("the default hours: %s to %s (%d buckets), %v; want the hours from 48 h before to the current one", q.From, q.To, q.Buckets(), err)
	}
	q, err = items.SeriesQuery{Step: items.StepDay, To: to}.Normalize()
	if err != nil || q.Buckets() != 31 || q.From.Hour() != 0 {
		t.Errorf("the default days: %s to %s (%d buckets), %v", q.From, q.To, q.Buckets(), err)
	}
	// 1,000 hours ending at a bucket's end are allowed; one more is refused, naming the limit.
	end := time.Date(2026, 12, 7, 11, 0, 0, 0, time.UTC)
	if q, err := (items.SeriesQuery{Step: items.StepHour, From: end.Add(-1000 * time.Hour), To: end}).Normalize(); err != nil || q.Buckets() != 1000 {
		t.Errorf("1000 hours: %d buckets, %v", q.Buckets(), err)
	}
	_, err = items.SeriesQuery{Step: items.StepHour, From: end.Add(-1001 * time.Hour), To: end}.Normalize()
	if items.ErrorCode(err) != items.CodeInvalid || !strings.Contains(err.Error(), "at most 1000 buckets") || !strings.Contains(err.Error(), "step=1d") {
		t.Errorf("1001 hours: %v; want invalid_request naming the limit of 1000", err)
	}
	for _, bad := range []items.SeriesQuery{{Step: "1w", To: to}, {Step: "", To: to}} {
		if _, err := bad.Normalize(); items.ErrorCode(err) != items.CodeInvalid || !strings.Contains(err.Error(), "step") {
			t.Errorf("step %q: %v", bad.Step, err)
		}
	}
	if _, err := (items.SeriesQuery{Step: items.StepDay}).Normalize(); err == nil || !strings.Contains(err.Error(), "to: is required") {
		t.Errorf("no to: %v", err)
	}
	if _, err := (items.SeriesQuery{Step: items.StepDay, From: to, To: to}).Normalize(); err == nil || !strings.Contains(err.Error(), "from: must be before to") {
		t.Errorf("from = to: %v", err)
	}
}

// seriesLedger is a ledger over a SQLite store with a fake clock.
func seriesLedger(t *testing.T, cfg items.Config) (*items.Ledger, items.Store, *time.Time) {
	t.Helper()
	s, err := sqlitestore.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	cfg.Now = func() time.Time { return now }
	l, err := items.NewLedger(context.Background(), s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l, s, &now
}

// tallies returns the item's series events, each as "15:04 name=n …".
func tallies(it *items.Item) []string {
	var out []string
	it.SeriesEvents(func(at time.Time, t items.Tally) {
		out = append(out, at.Format("15:04:05")+" "+strings.TrimPrefix(fmt.Sprintf("%+v", t), "{"))
	})
	return out
}

func TestSeriesEventsOfAnItemThatNeededAPerson(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, s, now := seriesLedger(t, items.Config{})
	fp, _ := items.Fingerprint([]byte(`{"invoice":"742"}`))
	a, err := l.BeforeWrite(ctx, items.BeforeWriteParams{Tenant: "acme", Key: "inv-742", Fingerprint: fp, Destination: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	// The outcome is unknown a second before 11:00, and its destination can neither dedupe nor be
	// searched: it needs a person at once. A person resolves it at 11:20.
	*now = now.Add(59*time.Minute + 59*time.Second)
	if _, err := l.AfterWrite(ctx, items.AfterWriteParams{Tenant: "acme", Key: "inv-742", Claim: a.Claim,
		Evidence: items.Evidence{Outcome: items.OutcomeUnknown, Class: items.ClassTimeout}}); err != nil {
		t.Fatal(err)
	}
	*now = now.Add(20*time.Minute + time.Second)
	if _, _, err := l.Resolve(ctx, items.ResolveParams{Tenant: "acme", Key: "inv-742", Outcome: items.ResolveSucceeded,
		Evidence: "found INV-742 in the billing tool", By: "ops-anna"}); err != nil {
		t.Fatal(err)
	}
	it, err := s.Get(ctx, "acme", "inv-742")
	if err != nil {
		t.Fatal(err)
	}
	sc := items.SeriesOfItems([]*items.Item{it})
	hour := func(h int) items.Tally {
		return sc[items.SeriesKey{Tenant: "acme", Destination: "billing", Step: items.StepHour, Start: time.Date(2026, 12, 1, h, 0, 0, 0, time.UTC).Unix()}]
	}
	ten, eleven := hour(10), hour(11)
	if ten.Proceeds != 1 || ten.Unknown != 1 || ten.NeedsPerson != 1 || ten.Succeeded != 0 || ten.Resolution.Count != 0 {
		t.Errorf("10:00 holds %+v; want the claim, the unknown and the need for a person", ten)
	}
	if eleven.Succeeded != 1 || eleven.ResolvedByPerson != 1 || eleven.Proceeds != 0 || eleven.Resolution.Count != 1 ||
		eleven.Resolution.SumMillis != (20*time.Minute+time.Second).Milliseconds() || eleven.Resolution.Buckets[3] != 1 {
		t.Errorf("11:00 holds %+v; want the resolution after 20m01s (bucket 15m-1h)", eleven)
	}
	day := sc[items.SeriesKey{Tenant: "acme", Destination: "billing", Step: items.StepDay, Start: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).Unix()}]
	if day != ten.Add(eleven) || len(sc) != 3 {
		t.Errorf("the day holds %+v, want both hours; %d rows, want 3\n%v", day, len(sc), tallies(it))
	}
}

// TestSeriesEventsFollowTheLedger drives a random walk of the ledger's operations over a few items and
// checks after each that (1) the need for a person the series read from each item's history is the
// item's own NeedsPerson, and (2) the events each write added (SeriesChanges.Move of the item before and
// after) sum to the events of the items as they end: no write loses or repeats one, also when the history
// drops repeated reports.
func TestSeriesEventsFollowTheLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, s, now := seriesLedger(t, items.Config{Destinations: map[string]items.Destination{
		"keyed":      {Dedupe: items.DedupeKey, EscalateAfter: time.Hour},
		"searchable": {Dedupe: items.DedupeLookup},
		"one-shot":   {MaxAttempts: 1},
	}})
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 36))
	dests := []string{"default", "keyed", "searchable", "one-shot"}
	fps := make([]string, 2)
	for i := range fps {
		fps[i], _ = items.Fingerprint([]byte(fmt.Sprintf(`{"n":%d}`, i)))
	}
	keys := []string{"a", "b", "c", "d", "e", "f"}
	claims := map[string]string{}
	moved := items.SeriesChanges{}
	get := func(key string) *items.Item {
		it, err := s.Get(ctx, "acme", key)
		if err != nil {
			return nil
		}
		return it
	}
	for step := range 600 {
		key := keys[rng.IntN(len(keys))]
		before := get(key)
		switch op := rng.IntN(9); op {
		case 0, 1:
			a, err := l.BeforeWrite(ctx, items.BeforeWriteParams{Tenant: "acme", Key: key, Fingerprint: fps[rng.IntN(4)/3],
				Destination: dests[int(key[0]-'a')%len(dests)], LeaseSeconds: 30})
			if err == nil && a.Claim != "" {
				claims[key] = a.Claim
			}
		case 2, 3:
			evs := []items.Evidence{{Outcome: items.OutcomeSucceeded}, {Outcome: items.OutcomeFailed, HTTPStatus: 503, Class: items.ClassHTTP},
				{Outcome: items.OutcomeFailed, HTTPStatus: 422, Class: items.ClassHTTP}, {Outcome: items.OutcomeUnknown},
				{Outcome: items.OutcomeFailed, Class: items.ClassTimeout}}
			n := 1
			if rng.IntN(6) == 0 {
				n = items.KeptFirstRepeats + items.KeptLatestRepeats + 3 // a loop of reports: the history drops some
			}
			ev := evs[rng.IntN(len(evs))]
			ext := fmt.Sprintf("x-%d", rng.IntN(3))
			for i := range n {
				p := items.AfterWriteParams{Tenant: "acme", Key: key, Claim: claims[key], Evidence: ev, ExternalID: ext}
				p.ErrorMessage = fmt.Sprintf("report %d", i)
				_, _ = l.AfterWrite(ctx, p)
				if i < n-1 { // each write moves its own events; the last one is moved below
					after := get(key)
					moved.Move(before, after)
					before = after
				}
			}
		case 4:
			findings := []string{items.FindingFound, items.FindingAbsent, items.FindingLookupFailed}
			_, _ = l.Reconcile(ctx, items.ReconcileParams{Tenant: "acme", Key: key, Finding: findings[rng.IntN(3)], ExternalID: "x-1",
				Evidence: "looked it up in the destination", By: "wf"})
		case 5:
			outcomes := []string{items.ResolveSucceeded, items.ResolveNotCommitted, items.ResolveAcknowledged}
			_, _, _ = l.Resolve(ctx, items.ResolveParams{Tenant: "acme", Key: key, Outcome: outcomes[rng.IntN(3)],
				Evidence: "checked the destination", By: "ops"})
		case 6:
			_, _ = l.MarkNeedsPerson(ctx, "acme", key)
		case 7:
			_, _ = l.ExpireLease(ctx, "acme", key)
		default:
			*now = now.Add(time.Duration(rng.IntN(50)) * time.Minute)
		}
		after := get(key)
		if after != nil {
			moved.Move(before, after)
			if got := items.NeedsPersonByHistory(after); got != after.NeedsPerson {
				t.Fatalf("step %d: %s needs a person: %v, its history says %v\n%v", step, key, after.NeedsPerson, got, tallies(after))
			}
		}
	}
	var all []*items.Item
	for _, k := range keys {
		if it := get(k); it != nil {
			all = append(all, it)
		}
	}
	want := items.SeriesOfItems(all)
	for k, v := range moved {
		if v.IsZero() {
			delete(moved, k)
		}
	}
	if len(moved) != len(want) {
		t.Errorf("the writes moved %d rows, the items count %d", len(moved), len(want))
	}
	var total items.Tally
	for k, w := range want {
		if moved[k] != w {
			t.Errorf("%s %s %s: the writes added %+v, the items count %+v", k.Destination, k.Step, k.StartTime(), moved[k], w)
		}
		if k.Step == items.StepDay {
			total = total.Add(w)
		}
	}
	if total.Proceeds == 0 || total.Unknown == 0 || total.NeedsPerson == 0 || total.Resolution.Count == 0 || total.Succeeded == 0 {
		t.Errorf("the walk made too little happen to check: %+v", total)
	}
}

// TestTallyColumnsRoundTrip: a Tally read back from its columns is the same Tally, every count in its own
// column, named as the stores name them.
func TestTallyColumnsRoundTrip(t *testing.T) {
	var in items.Tally
	in.Proceeds, in.Succeeded, in.Failed, in.Unknown, in.NeedsPerson, in.ResolvedByPerson = 1, 2, 3, 4, 5, 6
	in.SettledByLookup, in.SameKeyRecoveries, in.Conflicts, in.DuplicateEffects = 7, 8, 9, 10
	in.Resolution.Count, in.Resolution.SumMillis = 11, 1<<40
	for i := range in.Resolution.Buckets {
		in.Resolution.Buckets[i] = 100 + i
	}
	cols := in.Columns()
	if len(cols) != len(items.TallyColumns) || items.TallyColumns[0] != "proceeds" || items.TallyColumns[12] != "r_1m" ||
		items.TallyColumns[len(items.TallyColumns)-1] != "r_more" {
		t.Fatalf("%d values for the columns %v", len(cols), items.TallyColumns)
	}
	if out := items.TallyOfColumns(cols); out != in {
		t.Errorf("read back\n%+v\nwant\n%+v", out, in)
	}
}
