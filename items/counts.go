package items

import "time"

// Counts kept by the stores. GET /v1/stats and every metrics scrape read them instead of the items, so
// that an operator's read costs the same at two thousand items and at millions: a store keeps one row of
// Counts per CountGroup, and changes it in the same transaction (or, where there is none, right after the
// write) as every item that enters or leaves the group. What cannot be kept as a sum (the oldest
// unresolved item's age moves with the clock) is read from the few unresolved items alone.

// CountGroup is what the kept counts are grouped by.
type CountGroup struct {
	Tenant      string
	Destination string
	State       State
	NeedsPerson bool
}

// Counts are the sums of a group of items' measures (see Measures for what each one means).
type Counts struct {
	Items             int
	Retries           int
	Attempted         int // items with at least one attempt: RetriesPerOperation divides by them
	SameKeyRecoveries int
	ManualResolutions int
	DuplicateEffects  int
	EnteredUnknown    int
	// HistoryDropped sums the items' Item.HistoryDropped: the repeated reports their histories no longer
	// hold. HistoryDroppedItems counts the items with HistoryDropped > 0. Both are cumulative, like
	// Retries: a removed item keeps counting in the removed group.
	HistoryDropped      int
	HistoryDroppedItems int
}

// CountsOf returns the group an item is counted in and its contribution to the group's counts.
func CountsOf(it *Item) (CountGroup, Counts) { return CountsFromFacts(it, it.Facts()) }

// CountsFromFacts is CountsOf for an item whose facts (it.Facts()) the caller has derived already: a store
// that writes the facts beside the item derives them once per write, for the document and the counts.
func CountsFromFacts(it *Item, f Facts) (CountGroup, Counts) {
	return CountGroup{Tenant: it.Tenant, Destination: it.Destination, State: it.State, NeedsPerson: it.NeedsPerson}, Counts{
		Items:               1,
		Retries:             max(f.Attempt-1, 0),
		Attempted:           boolCount(f.Attempt >= 1),
		SameKeyRecoveries:   boolCount(f.SameKeyRecovered),
		ManualResolutions:   f.Resolutions,
		DuplicateEffects:    boolCount(f.DuplicateEffect),
		EnteredUnknown:      boolCount(f.EnteredUnknown),
		HistoryDropped:      it.HistoryDropped,
		HistoryDroppedItems: boolCount(it.HistoryDropped > 0),
	}
}

func boolCount(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Add returns the sums of c and o.
func (c Counts) Add(o Counts) Counts {
	return Counts{c.Items + o.Items, c.Retries + o.Retries, c.Attempted + o.Attempted, c.SameKeyRecoveries + o.SameKeyRecoveries,
		c.ManualResolutions + o.ManualResolutions, c.DuplicateEffects + o.DuplicateEffects, c.EnteredUnknown + o.EnteredUnknown,
		c.HistoryDropped + o.HistoryDropped, c.HistoryDroppedItems + o.HistoryDroppedItems}
}

// Neg returns c with every sum negated: the change of a group that an item leaves.
func (c Counts) Neg() Counts {
	return Counts{-c.Items, -c.Retries, -c.Attempted, -c.SameKeyRecoveries, -c.ManualResolutions, -c.DuplicateEffects, -c.EnteredUnknown,
		-c.HistoryDropped, -c.HistoryDroppedItems}
}

// IsZero reports whether c changes nothing.
func (c Counts) IsZero() bool { return c == Counts{} }

// Remove records that retention removed it: its group loses it, and the removed group of its tenant and
// destination gains it with its measures.
func (cc CountChanges) Remove(it *Item) {
	g, c := CountsOf(it)
	cc[g] = cc[g].Add(c.Neg())
	g.State, g.NeedsPerson = StateRemoved, false
	cc[g] = cc[g].Add(c)
}

// CountChanges collects the changes to the kept counts that a set of item writes makes.
type CountChanges map[CountGroup]Counts

// Move records that an item changed from prev (nil: it did not exist) to next (nil: it was removed).
func (cc CountChanges) Move(prev, next *Item) {
	if prev != nil {
		g, c := CountsOf(prev)
		cc[g] = cc[g].Add(c.Neg())
	}
	if next != nil {
		g, c := CountsOf(next)
		cc[g] = cc[g].Add(c)
	}
}

// StatsOf assembles a tenant's Stats at now (the empty tenant: every tenant together) from the kept
// counts of its groups, the time since when the oldest unresolved item of each destination is
// unresolved, and the fingerprint conflicts counted per destination.
func StatsOf(tenant string, now time.Time, groups map[CountGroup]Counts, unresolvedSince map[string]time.Time, conflicts map[string]int) *Stats {
	st := &Stats{Tenant: tenant, At: now, Measures: NewMeasures(), Destinations: map[string]Measures{}}
	attempted := map[string]int{}
	update := func(dest string, f func(m *Measures)) {
		m, ok := st.Destinations[dest]
		if !ok {
			m = NewMeasures()
		}
		f(&m)
		st.Destinations[dest] = m
		f(&st.Measures)
	}
	for g, c := range groups {
		if c.Items == 0 {
			continue // a group all of whose items moved on
		}
		attempted[g.Destination] += c.Attempted
		attempted[""] += c.Attempted
		update(g.Destination, func(m *Measures) {
			if g.State == StateRemoved {
				m.Removed += c.Items // gone from the ledger; its cumulative measures still count
			} else {
				m.Items += c.Items
				m.States[g.State] += c.Items
				if g.NeedsPerson {
					m.NeedsPerson += c.Items
				}
			}
			m.Retries += c.Retries
			m.SameKeyRecoveries += c.SameKeyRecoveries
			m.ManualResolutions += c.ManualResolutions
			m.DuplicateEffects += c.DuplicateEffects
			m.EnteredUnknown += c.EnteredUnknown
			m.HistoryDropped += c.HistoryDropped
			m.HistoryDroppedItems += c.HistoryDroppedItems
		})
	}
	for d, since := range unresolvedSince {
		age := int64(max(now.Sub(since), 0) / time.Second)
		update(d, func(m *Measures) { m.OldestUnresolvedAgeSeconds = max(m.OldestUnresolvedAgeSeconds, age) })
	}
	for d, n := range conflicts {
		update(d, func(m *Measures) { m.FingerprintConflicts += n })
	}
	perOp := func(m *Measures, n int) {
		if n > 0 {
			m.RetriesPerOperation = float64(m.Retries) / float64(n)
		}
	}
	perOp(&st.Measures, attempted[""])
	for d, m := range st.Destinations {
		perOp(&m, attempted[d])
		st.Destinations[d] = m
	}
	return st
}

// UnresolvedSince returns since when the item counts as unresolved at now, for the oldest unresolved age,
// and whether it does: since it started needing a person; else, in flight past its lease, since the
// lease's end; else, unknown or needing a person since an unrecorded time, since its last change.
func (it *Item) UnresolvedSince(now time.Time) (time.Time, bool) {
	switch {
	case it.NeedsPerson && it.NeedsPersonSince != nil:
		return *it.NeedsPersonSince, true
	case it.State == StateInFlight && it.LeaseExpiresAt != nil && !now.Before(*it.LeaseExpiresAt):
		return *it.LeaseExpiresAt, true
	case it.State == StateUnknown || it.NeedsPerson:
		return it.UpdatedAt, true
	}
	return time.Time{}, false
}
