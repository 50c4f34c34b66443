package items

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Measures over time. The kept counts (counts.go) say how the ledger stands now; the series say what
// happened when: per tenant, destination and hour (and per day), how many claims were made, how many
// items succeeded, failed or became unknown, how many started needing a person, were resolved by a person
// or settled by a lookup, recovered through the same key, were refused for a changed payload or flagged
// with a duplicate effect, and how long the ones that needed a person waited for their resolution.
//
// Every count is of events in its bucket: an item that became unknown at 10:59 counts in the 10:00
// bucket, and its resolution at 11:20 in the 11:00 one. The events are read from the item's own history
// (SeriesEvents), so they are what the item page shows. A store keeps one row of Tally per tenant,
// destination and bucket (an hour, and a day: UTC), and adds to it, in the same transaction as every item
// write, the events the write added to the item (SeriesChanges.Move): one row change per bucket and
// destination a transaction touches, whatever the number of items, and exact after a crash, as the rows
// are committed with the items or not at all. The events an item recorded before its store kept series
// are not counted; nor are the conflicts before it did.

// SeriesStep is the length of a series' buckets.
type SeriesStep string

// The steps of the series: hours and days, both in UTC.
const (
	StepHour SeriesStep = "1h"
	StepDay  SeriesStep = "1d"
)

// Steps lists the steps a store keeps.
var Steps = []SeriesStep{StepHour, StepDay}

// Duration returns the length of a bucket of the step (0 for an unknown step).
func (s SeriesStep) Duration() time.Duration {
	switch s {
	case StepHour:
		return time.Hour
	case StepDay:
		return 24 * time.Hour
	}
	return 0
}

// Valid reports whether s is a step the stores keep.
func (s SeriesStep) Valid() bool { return s.Duration() > 0 }

// BucketStart returns the start of the bucket of the step that holds t, in UTC.
func (s SeriesStep) BucketStart(t time.Time) time.Time {
	d := int64(s.Duration() / time.Second)
	u := t.Unix()
	start := u - ((u%d)+d)%d // floor, also before 1970
	return time.Unix(start, 0).UTC()
}

// ResolutionBounds are the upper bounds of the buckets that the time to resolution is counted in (a last
// bucket holds the longer ones): p50 and p90 are read from them (ResolutionTimes.Quantile).
var ResolutionBounds = [...]time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour, 4 * time.Hour,
	12 * time.Hour, 24 * time.Hour, 72 * time.Hour, 7 * 24 * time.Hour}

// ResolutionBuckets is the number of buckets of ResolutionTimes: one per bound, and one past the last.
const ResolutionBuckets = len(ResolutionBounds) + 1

// ResolutionTimes are the times to resolution of a bucket: how many, their sum, and how many fell in each
// bucket of ResolutionBounds (not cumulative; the last one counts those longer than the last bound).
type ResolutionTimes struct {
	Count     int
	SumMillis int64
	Buckets   [ResolutionBuckets]int
}

// add counts one time to resolution.
func (r *ResolutionTimes) add(d time.Duration) {
	d = max(d, 0)
	r.Count++
	r.SumMillis += d.Milliseconds()
	i := 0
	for i < len(ResolutionBounds) && d > ResolutionBounds[i] {
		i++
	}
	r.Buckets[i]++
}

// Quantile returns the q-quantile (0 < q ≤ 1) of the times, read from the buckets as Prometheus's
// histogram_quantile reads them: linearly inside the bucket that holds it, and the last bound for the
// times past it. 0 when there are none.
func (r ResolutionTimes) Quantile(q float64) time.Duration {
	if r.Count <= 0 {
		return 0
	}
	rank := q * float64(r.Count)
	seen := 0
	for i, n := range r.Buckets {
		if n <= 0 || float64(seen+n) < rank {
			seen += max(n, 0)
			continue
		}
		if i == len(ResolutionBounds) {
			return ResolutionBounds[len(ResolutionBounds)-1]
		}
		var lower time.Duration
		if i > 0 {
			lower = ResolutionBounds[i-1]
		}
		upper := ResolutionBounds[i]
		return lower + time.Duration(float64(upper-lower)*(rank-float64(seen))/float64(n))
	}
	return ResolutionBounds[len(ResolutionBounds)-1]
}

// Tally is what happened in one bucket of a series: counts of events, and the times to resolution.
type Tally struct {
	// Proceeds counts the claims (before-write answered proceed).
	Proceeds int
	// Succeeded, Failed and Unknown count the items that entered these states.
	Succeeded int
	Failed    int
	Unknown   int
	// NeedsPerson counts the items that started needing a person (not a change of cause of one that
	// needed a person already).
	NeedsPerson int
	// ResolvedByPerson counts the resolutions by a person (the API's resolve, the console, Slack),
	// acknowledgements included.
	ResolvedByPerson int
	// SettledByLookup counts the lookups that settled an unknown item: a reconcile found or absent,
	// by the workflow or by the service's probes.
	SettledByLookup int
	// SameKeyRecoveries counts the items that succeeded after a retry under the same key.
	SameKeyRecoveries int
	// Conflicts counts the before-writes refused for a changed payload (conflict/fingerprint_mismatch).
	Conflicts int
	// DuplicateEffects counts the items first flagged with a duplicate effect.
	DuplicateEffects int
	// Resolution holds, for each item whose need of a person ended otherwise than by a new claim (a
	// resolution by a person, a lookup's finding, a late report that settled it), the time since it
	// started needing one.
	Resolution ResolutionTimes
}

// IsZero reports whether t counts nothing.
func (t Tally) IsZero() bool { return t == Tally{} }

// Add returns the sums of t and o.
func (t Tally) Add(o Tally) Tally {
	t.Proceeds += o.Proceeds
	t.Succeeded += o.Succeeded
	t.Failed += o.Failed
	t.Unknown += o.Unknown
	t.NeedsPerson += o.NeedsPerson
	t.ResolvedByPerson += o.ResolvedByPerson
	t.SettledByLookup += o.SettledByLookup
	t.SameKeyRecoveries += o.SameKeyRecoveries
	t.Conflicts += o.Conflicts
	t.DuplicateEffects += o.DuplicateEffects
	t.Resolution.Count += o.Resolution.Count
	t.Resolution.SumMillis += o.Resolution.SumMillis
	for i := range t.Resolution.Buckets {
		t.Resolution.Buckets[i] += o.Resolution.Buckets[i]
	}
	return t
}

// SeriesEvents calls f with the time and the tally of each event of the item's history that the series
// count, in the order of the history. What an item's history holds only grows (the repeated reports it
// drops never count here), so the events of an item as it was are the first ones of the item as it is.
func (it *Item) SeriesEvents(f func(at time.Time, t Tally)) { it.seriesEvents(f) }

// seriesEvents is SeriesEvents, and reports whether the history leaves the item needing a person: the
// ledger's own NeedsPerson, told from the events alone (export_test.go checks that they agree).
func (it *Item) seriesEvents(f func(at time.Time, t Tally)) (needing bool) {
	var since time.Time // when the current need for a person began
	sameKey, duplicate := false, false
	for i := range it.History {
		e := &it.History[i]
		var t Tally
		switch e.Kind {
		case EventClaimed:
			t.Proceeds = 1
			sameKey = sameKey || e.Reason == ReasonRetrySameKey
		case EventNeedsPerson:
			// Another cause for an item that needs a person already is no new need.
			if !needing {
				t.NeedsPerson, needing, since = 1, true, e.At
			}
		case EventResolve:
			t.ResolvedByPerson = 1
		case EventReconcile:
			if e.To == StateSucceeded || e.To == StateFailed {
				t.SettledByLookup = 1
			}
		case EventAfterWrite:
			if e.Reason == ReasonDuplicateEffect && !duplicate {
				t.DuplicateEffects, duplicate = 1, true
			}
		}
		if e.From != e.To {
			switch e.To {
			case StateSucceeded:
				t.Succeeded = 1
				if sameKey {
					t.SameKeyRecoveries = 1
				}
			case StateFailed:
				t.Failed = 1
			case StateUnknown:
				t.Unknown = 1
			}
		}
		if needing && endsNeed(e) {
			needing = false
			if e.Kind != EventClaimed { // a new attempt is no resolution: the item's outcome is still open
				t.Resolution.add(e.At.Sub(since))
			}
		}
		if f != nil && !t.IsZero() {
			f(e.At, t)
		}
	}
	return needing
}

// endsNeed reports whether the event is one of those with which the ledger clears an item's need of a
// person (Item.clearNeedsPerson): a claim, a resolution, a lookup's finding, a report that settles the
// item. None of them is a repeat a history drops.
func endsNeed(e *Event) bool {
	switch e.Kind {
	case EventClaimed, EventResolve:
		return true
	case EventReconcile:
		return e.To == StateSucceeded || e.To == StateFailed
	case EventAfterWrite:
		return (e.To == StateSucceeded && e.From != StateSucceeded) || (e.From == StateUnknown && e.To == StateFailed)
	}
	return false
}

// SeriesKey names one kept row of the series: a tenant's destination in one bucket of a step.
type SeriesKey struct {
	Tenant      string
	Destination string
	Step        SeriesStep
	// Start is the bucket's start, in seconds since 1970 (UTC).
	Start int64
}

// StartTime returns the bucket's start.
func (k SeriesKey) StartTime() time.Time { return time.Unix(k.Start, 0).UTC() }

// SeriesChanges collects the changes to the kept series that a set of writes makes: what a store adds to
// its rows, in the transaction of the writes.
type SeriesChanges map[SeriesKey]Tally

// Move records that an item changed from prev (nil: it did not exist) to next (nil: it was removed): the
// events next holds beyond those of prev, each in its hour and its day. A removal changes nothing: what
// happened stays counted.
func (sc SeriesChanges) Move(prev, next *Item) {
	if next == nil {
		return
	}
	seen := 0
	if prev != nil {
		prev.seriesEvents(func(time.Time, Tally) { seen++ })
	}
	next.seriesEvents(func(at time.Time, t Tally) {
		if seen > 0 {
			seen--
			return
		}
		sc.Add(next.Tenant, next.Destination, at, t)
	})
}

// Add adds t to the hour and the day of a tenant's destination that hold at.
func (sc SeriesChanges) Add(tenant, destination string, at time.Time, t Tally) {
	for _, step := range Steps {
		k := SeriesKey{Tenant: tenant, Destination: destination, Step: step, Start: step.BucketStart(at).Unix()}
		sc[k] = sc[k].Add(t)
	}
}

// SeriesOfItems counts the events of every item in the series' rows, as a store that kept them from the
// items' first event holds them: what a store's rows must equal (itemstest).
func SeriesOfItems(its []*Item) SeriesChanges {
	sc := SeriesChanges{}
	for _, it := range its {
		sc.Move(nil, it)
	}
	return sc
}

// Release is a version of the service, and when it first started on the ledger.
type Release struct {
	Version string    `json:"version"`
	At      time.Time `json:"at"`
}

// SeriesRow is one kept row of a series, as a store returns it.
type SeriesRow struct {
	Destination string
	Start       time.Time
	Tally
}

// SeriesStore is a store that keeps the measures over time. Stores that do, add SeriesChanges.Move of
// every item they write to their rows in the same transaction as the item, and pass itemstest's
// ExerciseSeries. Its consumers (the API's GET /v1/stats/series, the console's charts, Retention, the
// release marker at start) find it by a type assertion and say so where a store does not keep them.
type SeriesStore interface {
	// SeriesRows returns the kept rows of the tenant of q.Step whose bucket starts at or after q.From and
	// before q.To, of q.Destination or, when it is empty, of every destination: rows of one bucket may come
	// one per destination or summed, in any order (ReadSeries sums them). Returns ErrUnavailable.
	SeriesRows(ctx context.Context, q SeriesQuery) ([]SeriesRow, error)
	// CountConflicts adds n fingerprint conflicts of a tenant's destination at a time: to the kept
	// counter (CounterFingerprintConflicts, as AddCounter does) and to the series' hour and day that hold
	// at, in one write. Returns ErrUnavailable.
	CountConflicts(ctx context.Context, tenant, destination string, at time.Time, n int) error
	// RecordRelease records that version started at at, unless it is the version recorded last. It
	// reports whether it recorded it. Returns ErrUnavailable.
	RecordRelease(ctx context.Context, version string, at time.Time) (bool, error)
	// Releases returns the releases recorded at or after from and before to, oldest first. Returns
	// ErrUnavailable.
	Releases(ctx context.Context, from, to time.Time) ([]Release, error)
	// RemoveSeriesRows removes the hour rows whose bucket starts before hours and the day rows whose
	// bucket starts before days, and returns how many it removed. Returns ErrUnavailable.
	RemoveSeriesRows(ctx context.Context, hours, days time.Time) (int, error)
}

// MaxSeriesBuckets is the most buckets one series answers.
const MaxSeriesBuckets = 1000

// The spans of a series asked without a start: the console's charts, the last 48 hours by hour and the
// last 30 days by day.
const (
	DefaultHourSpan = 48 * time.Hour
	DefaultDaySpan  = 30 * 24 * time.Hour
)

// SeriesQuery asks for a tenant's series.
type SeriesQuery struct {
	Tenant string
	// Destination names one destination; empty is every destination together.
	Destination string
	Step        SeriesStep
	// From and To bound the series: from the bucket that holds From to the one that holds the instant
	// before To. A zero From is To less DefaultHourSpan (step 1h) or DefaultDaySpan (step 1d).
	From, To time.Time
}

// Normalize returns q with its From at the start of its bucket and its To at the end of the bucket that
// holds the instant before it, or an invalid_request error naming the parameter that is wrong (step,
// from, to): a step other than 1h or 1d, no To, a From not before To, more than MaxSeriesBuckets buckets.
func (q SeriesQuery) Normalize() (SeriesQuery, error) {
	if !q.Step.Valid() {
		return q, Invalid("step", "must be 1h or 1d")
	}
	if q.To.IsZero() {
		return q, Invalid("to", "is required")
	}
	d := q.Step.Duration()
	if q.From.IsZero() {
		q.From = q.To.Add(-DefaultHourSpan)
		if q.Step == StepDay {
			q.From = q.To.Add(-DefaultDaySpan)
		}
	}
	if !q.From.Before(q.To) {
		return q, Invalid("from", "must be before to")
	}
	q.From = q.Step.BucketStart(q.From)
	q.To = q.Step.BucketStart(q.To.Add(-time.Nanosecond)).Add(d)
	if n := q.To.Sub(q.From) / d; n > MaxSeriesBuckets {
		return q, Invalid("from", fmt.Sprintf("asks for %d buckets of %s; at most %d buckets per call: narrow from and to%s",
			n, q.Step, MaxSeriesBuckets, map[SeriesStep]string{StepHour: ", or use step=1d"}[q.Step]))
	}
	return q, nil
}

// Buckets returns the number of buckets of a normalized query.
func (q SeriesQuery) Buckets() int { return int(q.To.Sub(q.From) / q.Step.Duration()) }

// Series is a tenant's series: one point per bucket, oldest first, empty buckets included, and the
// releases of the service within it.
type Series struct {
	Step        SeriesStep
	From, To    time.Time
	Destination string
	Points      []SeriesPoint
	Releases    []Release
}

// SeriesPoint is one bucket of a series.
type SeriesPoint struct {
	Start time.Time
	Tally
}

// Total returns the sum of the series' points.
func (s *Series) Total() Tally {
	var t Tally
	for _, p := range s.Points {
		t = t.Add(p.Tally)
	}
	return t
}

// ReadSeries reads a tenant's series from a store: q is normalized first (its errors are returned as
// they are), the store's rows of every destination are summed when q names none, and every bucket is
// present, with zeros where nothing happened. Returns ErrUnavailable.
func ReadSeries(ctx context.Context, s SeriesStore, q SeriesQuery) (*Series, error) {
	q, err := q.Normalize()
	if err != nil {
		return nil, err
	}
	rows, err := s.SeriesRows(ctx, q)
	if err != nil {
		return nil, err
	}
	releases, err := s.Releases(ctx, q.From, q.To)
	if err != nil {
		return nil, err
	}
	out := &Series{Step: q.Step, From: q.From, To: q.To, Destination: q.Destination, Releases: releases,
		Points: make([]SeriesPoint, q.Buckets())}
	d := q.Step.Duration()
	for i := range out.Points {
		out.Points[i].Start = q.From.Add(time.Duration(i) * d)
	}
	for _, r := range rows {
		i := int(r.Start.Sub(q.From) / d)
		if r.Start.Before(q.From) || i >= len(out.Points) || (q.Destination != "" && r.Destination != q.Destination && r.Destination != "") {
			continue // not asked for: a store may return more than it must
		}
		out.Points[i].Tally = out.Points[i].Tally.Add(r.Tally)
	}
	return out, nil
}

// Series retention: how long a store keeps its hour and its day rows by default (RetentionConfig).
const (
	DefaultSeriesHoursKept = 35 * 24 * time.Hour
	DefaultSeriesDaysKept  = 2 * 365 * 24 * time.Hour
)

// TallyColumns names the counts of a Tally as the stores keep them, a column (or a field) each, in the
// order of Tally.Columns: the events, then the times to resolution (their count, their sum in
// milliseconds, and one per bucket of ResolutionBounds, r_1m … r_168h, and r_more past the last).
var TallyColumns = func() []string {
	cols := []string{"proceeds", "succeeded", "failed", "unknown", "needs_person", "resolved_by_person", "settled_by_lookup",
		"same_key_recoveries", "conflicts", "duplicate_effects", "resolutions", "resolution_ms"}
	for _, b := range ResolutionBounds {
		cols = append(cols, "r_"+strings.TrimSuffix(strings.TrimSuffix(b.String(), "0s"), "0m"))
	}
	return append(cols, "r_more")
}()

// Columns returns the counts of t in the order of TallyColumns.
func (t *Tally) Columns() []int64 {
	v := []int64{int64(t.Proceeds), int64(t.Succeeded), int64(t.Failed), int64(t.Unknown), int64(t.NeedsPerson),
		int64(t.ResolvedByPerson), int64(t.SettledByLookup), int64(t.SameKeyRecoveries), int64(t.Conflicts),
		int64(t.DuplicateEffects), int64(t.Resolution.Count), t.Resolution.SumMillis}
	for _, n := range t.Resolution.Buckets {
		v = append(v, int64(n))
	}
	return v
}

// TallyOfColumns returns the Tally whose counts are v, in the order of TallyColumns.
func TallyOfColumns(v []int64) Tally {
	var t Tally
	n := func(i int) int { return int(v[i]) }
	t.Proceeds, t.Succeeded, t.Failed, t.Unknown, t.NeedsPerson, t.ResolvedByPerson, t.SettledByLookup = n(0), n(1), n(2), n(3), n(4), n(5), n(6)
	t.SameKeyRecoveries, t.Conflicts, t.DuplicateEffects, t.Resolution.Count = n(7), n(8), n(9), n(10)
	t.Resolution.SumMillis = v[11]
	for i := range t.Resolution.Buckets {
		t.Resolution.Buckets[i] = n(12 + i)
	}
	return t
}
