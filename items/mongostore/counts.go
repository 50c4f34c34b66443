package mongostore

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/replaysafe/companion/items"
)

// Kept counts (items.Counts): GET /v1/stats and every metrics scrape read the item_counts collection, a
// document per tenant, destination, state and needs_person, instead of the items, and the few unresolved
// items through the indexes state_lease and needs_person_tenant_since.
//
// EXACTNESS: the ledger uses no multi-document transactions, so an item and its group's counts cannot
// change in one write. Instead every write of an item carries, in that same single-document write, the
// changes it makes to the kept counts: one entry per group it changes, in the item's count_due (dueEntry),
// beside the entries of the rows of the series it changes (series.go), which take the same steps.
// Once the call's writes are acknowledged, the store applies their entries, for the whole call at once
// (applyDue), in steps:
//
//  1. one update per group (one bulk write): $inc by the group's entries, marking each entry's id in the
//     group's applying map, in the same single-document write;
//  2. one update of the items: $pullAll of the applied entries from their count_due;
//  3. the marks removed ($unset), with the group's next step 1 (or by the repair pass an hour on).
//
// A replica that stops anywhere in between leaves entries on the items, never a count off: the repair
// pass (repairCounts) finds the entries older than repairAge (the index count_due_at), applies each one
// guarded by the absence of its mark, so that an entry step 1 applied already is not applied again,
// and goes on with steps 2 and 3. The normal path gives up on an entry applyBudget after it was written
// (leaving it to the repair), and repairAge is far longer, so the two never apply one entry at once; the
// repair passes of several replicas take turns under a lock document in meta. A count write that fails is
// tried again only on a duplicate key (two first upserts of a group racing): any other failure leaves the
// entries to the repair, which is idempotent where a second $inc would not be.
//
// The steps run before the call answers, bounded by countBudget (half the store's timeout), not by the
// store's timeout: a failover delays an answer by that at most, and its counts are then applied by the
// repair, minutes later. They run in the call rather than beside it because FerretDB, the test server,
// applies no update to a document atomically: a step 2 running beside the caller's next write of the
// item could undo that write there (on MongoDB it could not). A reader on another replica may see an
// item's write before its count, for the time of the steps. A ledger of a build before the kept counts is
// counted once, under the same lock (buildCounts).

// CountsCollection holds the kept counts.
const CountsCollection = "item_counts"

// countsBuiltID marks, in meta, a ledger whose item_counts hold every item.
const countsBuiltID = "item_counts_built"

// countsLockID is the lock document, in meta, of the counts' build and repair passes.
const countsLockID = "item_counts_lock"

// Timings of the kept counts (see EXACTNESS).
const (
	// applyBudget is how long after its write an entry may still be applied by the write's own replica.
	applyBudget = time.Minute
	// repairAge is how old an entry must be before the repair pass applies it.
	repairAge = 5 * time.Minute
	// repairEvery is how often each replica runs the repair pass (it also runs at the start).
	repairEvery = time.Minute
	// repairLease is how long the repair pass holds the lock; a pass stops writing repairMargin before it ends.
	repairLease  = 2 * time.Minute
	repairMargin = 30 * time.Second
	// repairPage bounds the items one repair pass reads.
	repairPage = 1000
	// settledAge is how old a mark on a group, or a tombstone whose counts are applied, must be before the
	// repair pass removes it: far longer than any pass or write can take to land.
	settledAge = time.Hour
)

func (s *Store) countsColl() *mongo.Collection {
	return s.items.Database().Collection(CountsCollection)
}

// countFields are the sums of a group, as item_counts and the entries hold them.
type countFields struct {
	Items          int `bson:"items"`
	Retries        int `bson:"retries"`
	Attempted      int `bson:"attempted"`
	Recoveries     int `bson:"recoveries"`
	Resolutions    int `bson:"resolutions"`
	Duplicates     int `bson:"duplicates"`
	EnteredUnknown int `bson:"entered_unknown"`
	// HistoryDropped and HistoryDroppedItems came later than the collection: a document an earlier build
	// wrote lacks them and reads 0, which is exact (no build before them wrote an item's history_dropped),
	// and the first $inc of this build creates them.
	HistoryDropped      int `bson:"history_dropped"`
	HistoryDroppedItems int `bson:"history_dropped_items"`
}

func fieldsOf(c items.Counts) countFields {
	return countFields{Items: c.Items, Retries: c.Retries, Attempted: c.Attempted, Recoveries: c.SameKeyRecoveries,
		Resolutions: c.ManualResolutions, Duplicates: c.DuplicateEffects, EnteredUnknown: c.EnteredUnknown,
		HistoryDropped: c.HistoryDropped, HistoryDroppedItems: c.HistoryDroppedItems}
}

func (f countFields) counts() items.Counts {
	return items.Counts{Items: f.Items, Retries: f.Retries, Attempted: f.Attempted, SameKeyRecoveries: f.Recoveries,
		ManualResolutions: f.Resolutions, DuplicateEffects: f.Duplicates, EnteredUnknown: f.EnteredUnknown,
		HistoryDropped: f.HistoryDropped, HistoryDroppedItems: f.HistoryDroppedItems}
}

// inc is the $inc of f.
func (f countFields) inc() bson.D {
	return bson.D{{Key: "items", Value: f.Items}, {Key: "retries", Value: f.Retries}, {Key: "attempted", Value: f.Attempted},
		{Key: "recoveries", Value: f.Recoveries}, {Key: "resolutions", Value: f.Resolutions}, {Key: "duplicates", Value: f.Duplicates},
		{Key: "entered_unknown", Value: f.EnteredUnknown}, {Key: "history_dropped", Value: f.HistoryDropped},
		{Key: "history_dropped_items", Value: f.HistoryDroppedItems}}
}

// countGroup names a group of the kept counts, as item_counts and the entries hold it.
type countGroup struct {
	Tenant      string `bson:"tenant"`
	Destination string `bson:"destination"`
	State       string `bson:"state"`
	NeedsPerson bool   `bson:"needs_person"`
}

func groupOf(g items.CountGroup) countGroup {
	return countGroup{Tenant: g.Tenant, Destination: g.Destination, State: string(g.State), NeedsPerson: g.NeedsPerson}
}

func (g countGroup) domain() items.CountGroup {
	return items.CountGroup{Tenant: g.Tenant, Destination: g.Destination, State: items.State(g.State), NeedsPerson: g.NeedsPerson}
}

// id is the group's _id in item_counts.
func (g countGroup) id() string {
	np := "0"
	if g.NeedsPerson {
		np = "1"
	}
	return strings.Join([]string{g.Tenant, g.Destination, g.State, np}, idSeparator)
}

func (g countGroup) fields() bson.D {
	return bson.D{{Key: "tenant", Value: g.Tenant}, {Key: "destination", Value: g.Destination}, {Key: "state", Value: g.State},
		{Key: "needs_person", Value: g.NeedsPerson}}
}

// countsDoc is one group's kept counts.
type countsDoc struct {
	Group  countGroup  `bson:",inline"`
	Counts countFields `bson:",inline"`
	// Applying marks the entries step 1 applied whose step 3 has not run yet, by id, with when.
	Applying map[string]time.Time `bson:"applying,omitempty"`
}

// dueEntry is one change a write made to one group's kept counts. Its encoding is fixed by this type, so
// that $pullAll of an entry the store holds matches the entry on the item exactly.
type dueEntry struct {
	// ID is the writing document's rev and the entry's place among the write's entries: unique.
	ID string `bson:"id"`
	// At is when it was written, on the server's clock as this replica reads it (serverNow).
	At     time.Time   `bson:"at"`
	Group  countGroup  `bson:",inline"`
	Counts countFields `bson:",inline"`
	// Series, when set, makes the entry a change of a row of the series of Group's tenant and destination
	// (series.go) instead, and Counts is zero.
	Series *seriesDue `bson:"series,omitempty"`
}

// dueOf returns the entries of changes and of the changes of the series, made by the write of the
// document with rev at at: one per group whose counts change, in the order of the groups' ids, then one
// per row of the series that changes, in the order of the rows' ids.
func dueOf(changes items.CountChanges, series items.SeriesChanges, rev string, at time.Time) []dueEntry {
	return dueWith(changes, seriesEntries(series, msTime(at), false), rev, at)
}

// dueWith returns the entries of changes followed by those of more (the series'), with their ids.
func dueWith(changes items.CountChanges, more []dueEntry, rev string, at time.Time) []dueEntry {
	var out []dueEntry
	for g, c := range changes {
		if !c.IsZero() {
			out = append(out, dueEntry{At: msTime(at), Group: groupOf(g), Counts: fieldsOf(c)})
		}
	}
	slices.SortFunc(out, func(a, b dueEntry) int { return strings.Compare(a.Group.id(), b.Group.id()) })
	out = append(out, more...)
	for i := range out {
		out[i].ID = fmt.Sprintf("%s-%d", rev, i)
	}
	return out
}

// written is an item as a transition decided to write it, with its facts (it.Facts()): they are derived
// once per write, for the document (toDoc) and for the kept counts. The counts of the item fn returned are
// those of the document the server stores for it (the two differ only in the times toDoc truncates, and
// in the version and change time prepare sets, which no count reads).
type written struct {
	it    *items.Item
	facts items.Facts
}

// decided returns next with its facts.
func decided(next *items.Item) written { return written{it: next, facts: next.Facts()} }

// move records in changes that the item went from prev (nil: it did not exist) to w (items.CountChanges.Move).
// The series' changes are read from the documents (seriesOf).
func (w written) move(changes items.CountChanges, prev *itemDoc) {
	changes.Move(itemOf(prev), nil)
	g, c := items.CountsFromFacts(w.it, w.facts)
	changes[g] = changes[g].Add(c)
}

func itemOf(d *itemDoc) *items.Item {
	if live(d) == nil {
		return nil
	}
	return d.item()
}

// countJob is what one acknowledged write left to apply: its document's entries.
type countJob struct {
	id string // the document's _id
	// counter says the document is a counter's (CountConflicts), not an item's.
	counter bool
	entries []dueEntry
}

// countBudget bounds how long a call applies its kept counts before it answers (applyDue): half the
// store's timeout, 2.5 s by default. A failover that takes longer leaves them to the repair pass, and
// delays no answer by more.
func (s *Store) countBudget() time.Duration { return s.timeout / 2 }

// applyDue applies the entries of jobs, the acknowledged writes of one call, before the call answers
// (see EXACTNESS), within countBudget; entries written more than applyBudget ago are left to the repair.
// A failure is logged: the entries stay on their items, for the repair pass.
func (s *Store) applyDue(ctx context.Context, jobs []countJob) {
	if len(jobs) == 0 || (s.dropCounts != nil && s.dropCounts()) {
		return // nothing to count, or a test's replica that stops before it counts
	}
	var entries []dueEntry
	for _, j := range jobs {
		entries = append(entries, j.entries...)
	}
	oldest := entries[0].At
	for _, e := range entries {
		if e.At.Before(oldest) {
			oldest = e.At
		}
	}
	left := min(s.countBudget(), oldest.Add(applyBudget).Sub(s.serverNow()))
	if left <= 0 {
		s.log.Warn("kept counts left to the repair pass: they were written too long ago", "entries", len(entries))
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), left)
	defer cancel()
	if _, err := s.applyEntries(ctx, jobs, false); err != nil {
		s.log.Warn("kept counts left to the repair pass", "entries", len(entries), "error", err)
	}
}

// unmarked holds, per group, the marks of entries applied and taken off their items whose removal (step
// 3) waits for the group's next step 1 of this store, which removes them in the same write.
type unmarked struct {
	mu    sync.Mutex
	marks map[string][]string
}

// take returns the group's marks to remove, and forgets them.
func (u *unmarked) take(group string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	m := u.marks[group]
	delete(u.marks, group)
	return m
}

// takeAll returns every group's marks to remove, and forgets them.
func (u *unmarked) takeAll() map[string][]string {
	u.mu.Lock()
	defer u.mu.Unlock()
	m := u.marks
	u.marks = nil
	return m
}

func (u *unmarked) add(group string, ids []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.marks == nil {
		u.marks = map[string][]string{}
	}
	u.marks[group] = append(u.marks[group], ids...)
}

// groupApply is one group's update of step 1, or one row's of the series (row set).
type groupApply struct {
	group   countGroup
	sum     countFields
	row     *seriesDue // the row's change, summed
	entries []dueEntry
}

// id is the _id of the group's document, in item_counts, or of the row's, in series.
func (g *groupApply) id() string {
	if g.row != nil {
		return g.row.rowID(g.group)
	}
	return g.group.id()
}

func groupsOf(entries []dueEntry, each bool) []*groupApply {
	of := func(e dueEntry) *groupApply {
		g := &groupApply{group: e.Group, sum: e.Counts, entries: []dueEntry{e}}
		if e.Series != nil {
			g.row = &seriesDue{Step: e.Series.Step, Start: e.Series.Start, Tally: slices.Clone(e.Series.Tally)}
		}
		return g
	}
	if each {
		out := make([]*groupApply, len(entries))
		for i, e := range entries {
			out[i] = of(e)
		}
		return out
	}
	by := map[string]*groupApply{}
	var out []*groupApply
	for _, e := range entries {
		key := "c" + e.Group.id()
		if e.Series != nil {
			key = "s" + e.Series.rowID(e.Group)
		}
		g := by[key]
		if g == nil {
			g = of(e)
			by[key] = g
			out = append(out, g)
			continue
		}
		if g.row != nil {
			g.row.add(e.Series)
		} else {
			g.sum = g.sum.add(e.Counts)
		}
		g.entries = append(g.entries, e)
	}
	return out
}

func (f countFields) add(o countFields) countFields {
	return fieldsOf(f.counts().Add(o.counts()))
}

// model is the group's step 1: its sums added and its entries marked, upserting the group, and the marks
// of entries taken off their items since (unmark) removed. guarded matches only while none of the entries
// is marked (the repair: an entry step 1 applied already is not applied again).
func (g *groupApply) model(at time.Time, guarded bool, unmark []string) mongo.WriteModel {
	filter := bson.D{{Key: "_id", Value: g.id()}}
	marks := bson.D{}
	for _, e := range g.entries {
		if guarded {
			filter = append(filter, bson.E{Key: "applying." + e.ID, Value: bson.D{{Key: "$exists", Value: false}}})
		}
		marks = append(marks, bson.E{Key: "applying." + e.ID, Value: at})
	}
	update := bson.D{{Key: "$inc", Value: g.sum.inc()}, {Key: "$set", Value: marks}, {Key: "$setOnInsert", Value: g.group.fields()}}
	if g.row != nil {
		update = bson.D{{Key: "$inc", Value: g.row.inc()}, {Key: "$set", Value: marks}, {Key: "$setOnInsert", Value: g.row.fields(g.group)}}
	}
	if len(unmark) > 0 {
		gone := bson.D{}
		for _, id := range unmark {
			gone = append(gone, bson.E{Key: "applying." + id, Value: ""})
		}
		update = append(update, bson.E{Key: "$unset", Value: gone})
	}
	return mongo.NewUpdateOneModel().SetFilter(filter).SetUpsert(true).SetUpdate(update)
}

// applyEntries runs the steps for the entries of jobs (guarded: one entry at a time, each applied only
// while unmarked): step 1 and step 2, and step 3 with the group's next step 1 (guarded, at once). It
// returns how many entries step 1 applied or found applied. Returns ErrUnavailable when a step fails; what
// it did before stays, and the repair finishes it.
func (s *Store) applyEntries(ctx context.Context, jobs []countJob, guarded bool) (int, error) {
	var entries []dueEntry
	for _, j := range jobs {
		entries = append(entries, j.entries...)
	}
	groups := groupsOf(entries, guarded)
	at := msTime(s.serverNow())
	// Step 1 in item_counts and in series, side by side. The rows of the series take with it the removal of
	// every mark of theirs this store still has to remove (series.go): a row's next write may never come.
	var pendingRows map[string][]string
	if !guarded {
		pendingRows = s.unmarkedRows.takeAll()
	}
	var steps [2]struct {
		coll   *mongo.Collection
		of     []int // the places in groups of the models
		models []mongo.WriteModel
		ok     []bool
		err    error
	}
	steps[0].coll, steps[1].coll = s.countsColl(), s.seriesColl()
	for i, g := range groups {
		var unmark []string
		k := 0
		switch {
		case g.row != nil && !guarded:
			k, unmark = 1, pendingRows[g.id()]
			delete(pendingRows, g.id())
		case g.row != nil:
			k = 1
		case !guarded:
			unmark = s.unmarked.take(g.id())
		}
		steps[k].of = append(steps[k].of, i)
		steps[k].models = append(steps[k].models, g.model(at, guarded, unmark))
	}
	for id, marks := range pendingRows {
		steps[1].models = append(steps[1].models, unmarkModel(id, marks))
	}
	var wg sync.WaitGroup
	for k := range steps {
		if len(steps[k].models) > 0 {
			wg.Go(func() { steps[k].ok, steps[k].err = s.upsertAll(ctx, steps[k].coll, steps[k].models, guarded) })
		}
	}
	wg.Wait()
	err := cmp.Or(steps[0].err, steps[1].err)
	if err == nil && s.countFault != nil {
		err = s.countFault(1)
	}
	if err != nil {
		return 0, unavailable("add counts", err)
	}
	// ok: the group's entries are in its counts now (applied here, or, guarded, marked before).
	ok := make([]bool, len(groups))
	for _, st := range steps {
		for j, i := range st.of {
			ok[i] = st.ok[j]
		}
	}
	done := map[string]bool{}
	var unmark [2][]mongo.WriteModel
	for i, g := range groups {
		if !ok[i] {
			continue
		}
		ids := make([]string, len(g.entries))
		for j, e := range g.entries {
			done[e.ID] = true
			ids[j] = e.ID
		}
		k := 0
		if g.row != nil {
			k = 1
		}
		unmark[k] = append(unmark[k], unmarkModel(g.id(), ids))
	}
	if len(done) == 0 {
		return 0, nil
	}
	// One update per document, each naming its own entries: a $pullAll compares every element of an
	// item's count_due with every value it names.
	var pulls [2][]mongo.WriteModel // of items, of counters
	for _, j := range jobs {
		var mine []dueEntry
		for _, e := range j.entries {
			if done[e.ID] {
				mine = append(mine, e)
			}
		}
		if len(mine) > 0 {
			k := 0
			if j.counter {
				k = 1
			}
			pulls[k] = append(pulls[k], mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: j.id}}).
				SetUpdate(bson.D{{Key: "$pullAll", Value: bson.D{{Key: "count_due", Value: mine}}}}))
		}
	}
	for k, coll := range []*mongo.Collection{s.items, s.counters()} {
		if len(pulls[k]) == 0 {
			continue
		}
		r, err := bulk(ctx, coll, pulls[k], false)
		if err == nil && len(r.failed) > 0 {
			err = fmt.Errorf("%d of %d refused", len(r.failed), len(pulls[k]))
		}
		if err != nil {
			return len(done), unavailable("take applied counts off their items", err)
		}
	}
	if s.countFault != nil {
		if err := s.countFault(2); err != nil {
			return len(done), unavailable("take applied counts off their items", err)
		}
	}
	if !guarded {
		// Step 3 rides with the group's next step 1 (one round trip less for every call); marks nobody
		// removes so (no later write of the group here) are removed by the repair an hour on.
		for i, g := range groups {
			if ok[i] {
				ids := make([]string, len(g.entries))
				for j, e := range g.entries {
					ids[j] = e.ID
				}
				if g.row != nil {
					s.unmarkedRows.add(g.id(), ids)
				} else {
					s.unmarked.add(g.id(), ids)
				}
			}
		}
		return len(done), nil
	}
	for k, coll := range []*mongo.Collection{s.countsColl(), s.seriesColl()} {
		if len(unmark[k]) == 0 {
			continue
		}
		if _, err := bulk(ctx, coll, unmark[k], false); err != nil {
			return len(done), unavailable("unmark applied counts", err) // the repair removes the marks an hour on
		}
	}
	return len(done), nil
}

// removeOldMarks removes the marks older than before of the documents of coll that filter selects.
func (s *Store) removeOldMarks(ctx context.Context, coll *mongo.Collection, filter bson.D, before time.Time) error {
	cur, err := coll.Find(ctx, append(filter, bson.E{Key: "applying", Value: bson.D{{Key: "$exists", Value: true}}}),
		options.Find().SetProjection(bson.D{{Key: "applying", Value: 1}}))
	if err != nil {
		return unavailable("find the marks of "+coll.Name(), err)
	}
	var docs []struct {
		ID       string               `bson:"_id"`
		Applying map[string]time.Time `bson:"applying"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return unavailable("find the marks of "+coll.Name(), err)
	}
	var unmark []mongo.WriteModel
	for _, d := range docs {
		var old []string
		for id, at := range d.Applying {
			if at.Before(before) {
				old = append(old, id)
			}
		}
		if len(old) > 0 {
			unmark = append(unmark, unmarkModel(d.ID, old))
		}
	}
	if len(unmark) > 0 {
		if _, err := bulk(ctx, coll, unmark, false); err != nil {
			return unavailable("remove the marks of "+coll.Name(), err)
		}
	}
	return nil
}

// unmarkModel removes the marks of the entries ids from the document id (step 3).
func unmarkModel(id string, ids []string) mongo.WriteModel {
	marks := bson.D{}
	for _, e := range ids {
		marks = append(marks, bson.E{Key: "applying." + e, Value: ""})
	}
	return mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: id}}).SetUpdate(bson.D{{Key: "$unset", Value: marks}})
}

// upsertAll runs the upserts unordered, and once more those that lost the race to create their document
// (a duplicate key). It reports, per model, whether its change is in the collection: applied, or, when
// guarded, found marked as applied before (a duplicate key again: the guard matched nothing because of
// the mark). Any other failure of a model reports false; a failure whose outcome is unknown (a write
// concern error, no answer) is returned.
func (s *Store) upsertAll(ctx context.Context, coll *mongo.Collection, models []mongo.WriteModel, guarded bool) ([]bool, error) {
	ok := make([]bool, len(models))
	pending := make([]int, len(models))
	for i := range pending {
		pending[i] = i
	}
	for try := 0; try < 2 && len(pending) > 0; try++ {
		batch := make([]mongo.WriteModel, len(pending))
		for j, i := range pending {
			batch[j] = models[i]
		}
		r, err := bulk(ctx, coll, batch, false)
		if err != nil {
			return nil, err
		}
		var again []int
		for j, i := range pending {
			we, failed := r.failed[j]
			ok[i] = !failed
			if failed && mongo.IsDuplicateKeyError(we) {
				again = append(again, i)
			}
		}
		if try == 1 && guarded {
			for _, i := range again {
				ok[i] = true // the document exists and the guard did not match it: the entry is marked
			}
		}
		pending = again
	}
	return ok, nil
}

// maxStatements bounds the statements of one bulk write command: a batch of 500 items is written in 16
// commands, not 500, nor one. (FerretDB v1.24, the test server, holds one connection of its pool of 100
// for every statement of an update command until the command ends: a command of 100 statements waits
// for ever. MongoDB takes up to 100,000 statements in one command; 32 cost it a round trip per 32 items.)
const maxStatements = 32

// bulkResult is what bulk reports of the statements that were answered.
type bulkResult struct {
	matched int64
	// failed holds the write errors of the statements that failed, by their index in the models.
	failed map[int]mongo.WriteError
}

// bulk runs models in commands of at most maxStatements, one after the other. A statement's own failure
// (a duplicate key) is reported in failed, and an ordered bulk stops at its first; a failure whose outcome
// is unknown (a write concern error, no answer) is returned, with what was answered before it.
func bulk(ctx context.Context, coll *mongo.Collection, models []mongo.WriteModel, ordered bool) (bulkResult, error) {
	r := bulkResult{failed: map[int]mongo.WriteError{}}
	for from := 0; from < len(models); from += maxStatements {
		chunk := models[from:min(from+maxStatements, len(models))]
		res, err := coll.BulkWrite(ctx, chunk, options.BulkWrite().SetOrdered(ordered))
		if res != nil {
			r.matched += res.MatchedCount
		}
		var bwe mongo.BulkWriteException
		switch {
		case err == nil:
			continue
		case !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0:
			return r, err
		}
		for _, we := range bwe.WriteErrors {
			if we.Index < 0 || we.Index >= len(chunk) {
				return r, err
			}
			r.failed[from+we.Index] = we.WriteError
		}
		if ordered {
			return r, nil
		}
	}
	return r, nil
}

// RepairReport says what one repair pass did.
type RepairReport struct {
	// Applied counts the entries the pass found due: applied now, or found applied already (their replica
	// stopped between steps 1 and 2) and taken off their items.
	Applied int
	// Items counts the items the entries were taken off.
	Items int
	// Took is how long the pass took.
	Took time.Duration
}

// repairCounts applies the entries left due for longer than repairAge (EXACTNESS), up to repairPage items,
// under the counts' lock; another replica's pass, while it holds the lock, makes this one do nothing. When
// it found all there was, it also removes the marks and tombstones older than settledAge.
func (s *Store) repairCounts(ctx context.Context) (RepairReport, error) {
	start := time.Now()
	var r RepairReport
	ok, err := s.takeLock(ctx, countsLockID, repairLease)
	if err != nil || !ok {
		return r, err
	}
	defer s.releaseLock(context.WithoutCancel(ctx), countsLockID)
	ctx, cancel := context.WithTimeout(ctx, repairLease-repairMargin)
	defer cancel()
	now := s.serverNow()
	cutoff := now.Add(-s.repairAge)
	cur, err := s.items.Find(ctx, bson.D{{Key: "count_due.at", Value: bson.D{{Key: "$lte", Value: cutoff}}}},
		options.Find().SetProjection(bson.D{{Key: "count_due", Value: 1}}).SetLimit(repairPage))
	if err != nil {
		return r, unavailable("find due counts", err)
	}
	type dueDoc struct {
		ID       string     `bson:"_id"`
		CountDue []dueEntry `bson:"count_due"`
		counter  bool
	}
	var docs, counters []dueDoc
	if err := cur.All(ctx, &docs); err != nil {
		return r, unavailable("find due counts", err)
	}
	// The counters' documents carry the series' entries of conflicts (CountConflicts): few documents.
	if cur, err = s.counters().Find(ctx, bson.D{{Key: "count_due.at", Value: bson.D{{Key: "$lte", Value: cutoff}}}},
		options.Find().SetProjection(bson.D{{Key: "count_due", Value: 1}}).SetLimit(repairPage)); err != nil {
		return r, unavailable("find due counts", err)
	}
	if err := cur.All(ctx, &counters); err != nil {
		return r, unavailable("find due counts", err)
	}
	full := len(docs) == repairPage || len(counters) == repairPage
	for _, c := range counters {
		c.counter = true
		docs = append(docs, c)
	}
	var jobs []countJob
	for _, d := range docs {
		j := countJob{id: d.ID, counter: d.counter}
		for _, e := range d.CountDue {
			if !e.At.After(cutoff) {
				j.entries = append(j.entries, e) // a newer entry is its own replica's to apply
			}
		}
		if len(j.entries) > 0 {
			jobs = append(jobs, j)
		}
	}
	if len(jobs) > 0 {
		applied, err := s.applyEntries(ctx, jobs, true)
		r.Applied, r.Items = applied, len(docs)
		if err != nil {
			return r, err
		}
	}
	if full {
		r.Took = time.Since(start)
		return r, nil // more next time; the marks and tombstones wait until all is applied
	}
	if err := s.removeSettled(ctx, now.Add(-settledAge)); err != nil {
		return r, err
	}
	r.Took = time.Since(start)
	return r, nil
}

// removeSettled removes the marks of applied entries and the tombstones without counts due, both older
// than before.
func (s *Store) removeSettled(ctx context.Context, before time.Time) error {
	if err := s.removeOldMarks(ctx, s.countsColl(), bson.D{}, before); err != nil {
		return err
	}
	// The series' rows with marks are recent ones (seriesMarkWindow), found through step_start.
	if err := s.removeOldMarks(ctx, s.seriesColl(), bson.D{
		{Key: "step", Value: bson.D{{Key: "$in", Value: bson.A{string(items.StepHour), string(items.StepDay)}}}},
		{Key: "start", Value: bson.D{{Key: "$gte", Value: s.serverNow().Add(-seriesMarkWindow)}}}}, before); err != nil {
		return err
	}
	if _, err := s.items.DeleteMany(ctx, bson.D{{Key: "tombstone", Value: true}, {Key: "updated_at", Value: bson.D{{Key: "$lte", Value: before}}},
		{Key: "count_due.0", Value: bson.D{{Key: "$exists", Value: false}}}}); err != nil {
		return unavailable("remove tombstones", err)
	}
	return nil
}

// repairInBackground runs repairCounts at once and every repairEvery until Close, logging each pass that
// applied something.
func (s *Store) repairInBackground() {
	stop := make(chan struct{})
	done := make(chan struct{})
	first := s.repaired()
	var once sync.Once
	s.stopRepair = func() {
		once.Do(func() { close(stop) })
		<-done
	}
	go func() {
		defer close(done)
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-stop
			cancel()
		}()
		for {
			r, err := s.repairCounts(ctx)
			if first != nil {
				close(first)
				first = nil
			}
			switch {
			case err != nil && ctx.Err() == nil:
				s.log.Warn("the kept counts' repair pass failed; it runs again in a minute", "error", err)
			case r.Applied > 0:
				s.log.Info("kept counts a stopped replica left due are applied", "entries", r.Applied, "items", r.Items, "took", r.Took.String())
			}
			select {
			case <-stop:
				return
			case <-time.After(repairEvery):
			}
		}
	}()
}

// takeLock takes the lock document id in meta for lease, on the server's clock as this replica reads it,
// when it is free (never taken, or its lease ended) or this store's. It reports whether it did.
func (s *Store) takeLock(ctx context.Context, id string, lease time.Duration) (bool, error) {
	now := msTime(s.serverNow())
	_, err := s.meta.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "$or", Value: bson.A{
		bson.D{{Key: "until", Value: bson.D{{Key: "$lte", Value: now}}}},
		bson.D{{Key: "owner", Value: s.owner}},
	}}}, bson.D{{Key: "$set", Value: bson.D{{Key: "owner", Value: s.owner}, {Key: "until", Value: now.Add(lease)}}}},
		options.UpdateOne().SetUpsert(true))
	var we mongo.WriteException
	switch {
	case mongo.IsDuplicateKeyError(err) || (errors.As(err, &we) && mongo.IsDuplicateKeyError(we)):
		return false, nil // held by another replica
	case err != nil:
		return false, unavailable("take the counts' lock", err)
	}
	return true, nil
}

// releaseLock gives the lock document id back, if this store holds it.
func (s *Store) releaseLock(ctx context.Context, id string) {
	_, _ = s.meta.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "owner", Value: s.owner}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "until", Value: time.UnixMilli(0).UTC()}}}})
}

func newToken() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand does not fail on supported platforms
	return hex.EncodeToString(b)
}

// buildCounts counts a ledger of a build before the kept counts once: under the counts' lock, every item
// in one pass, then the marker. A replica that finds the lock held waits for the marker (the replica
// holding it counts), or for the lock to end (that replica stopped), and then counts itself.
func (s *Store) buildCounts(ctx context.Context) error {
	logged := false
	for {
		err := s.meta.FindOne(ctx, bson.D{{Key: "_id", Value: countsBuiltID}}).Err()
		if err == nil {
			return nil
		}
		if !errors.Is(err, mongo.ErrNoDocuments) {
			return unavailable("read meta", err)
		}
		ok, err := s.takeLock(ctx, countsLockID, repairLease)
		if err != nil {
			return err
		}
		if ok {
			err := s.countAll(ctx)
			if err == nil {
				if _, err = s.meta.InsertOne(ctx, bson.D{{Key: "_id", Value: countsBuiltID}}); mongo.IsDuplicateKeyError(err) {
					err = nil
				} else if err != nil {
					err = unavailable("write meta", err)
				}
			}
			s.releaseLock(context.WithoutCancel(ctx), countsLockID)
			return err
		}
		if !logged {
			s.log.Info("waiting for another replica to count the ledger's items (once, at the first start on a ledger of an earlier release)")
			logged = true
		}
		select {
		case <-ctx.Done():
			return unavailable("wait for the counts", ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// countAll sets item_counts to the counts of every item, less the entries still due on them (the repair
// applies those later). It renews the lock every repairPage items.
func (s *Store) countAll(ctx context.Context) error {
	if _, err := s.countsColl().DeleteMany(ctx, bson.D{}); err != nil {
		return unavailable("count items", err)
	}
	cur, err := s.items.Find(ctx, bson.D{})
	if err != nil {
		return unavailable("count items", err)
	}
	defer cur.Close(ctx)
	changes := items.CountChanges{}
	n := 0
	var unreadable []string
	for cur.Next(ctx) {
		var d itemDoc
		if err := cur.Decode(&d); err != nil {
			// A document that no longer decodes is not counted, and does not stop the start (the lists name
			// it in unreadable): it is named here.
			id, _ := cur.Current.Lookup("_id").StringValueOK()
			unreadable = append(unreadable, strings.ReplaceAll(id, idSeparator, "/"))
			continue
		}
		if !d.Tombstone {
			changes.Move(nil, d.item())
		}
		for _, e := range d.CountDue {
			if e.Series != nil {
				continue // the series' entries: the series are not rebuilt
			}
			g := e.Group.domain()
			changes[g] = changes[g].Add(e.Counts.counts().Neg())
		}
		if n++; n%repairPage == 0 {
			if _, err := s.takeLock(ctx, countsLockID, repairLease); err != nil {
				return err
			}
		}
	}
	if err := cur.Err(); err != nil {
		return unavailable("count items", err)
	}
	if len(unreadable) > 0 {
		s.log.Error("items that cannot be read are left out of the kept counts", "items", unreadable)
	}
	var models []mongo.WriteModel
	for g, c := range changes {
		gr := groupOf(g)
		models = append(models, mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: gr.id()}}).SetUpsert(true).
			SetUpdate(bson.D{{Key: "$inc", Value: fieldsOf(c).inc()}, {Key: "$setOnInsert", Value: gr.fields()}}))
	}
	if len(models) == 0 {
		return nil
	}
	ok, err := s.upsertAll(ctx, s.countsColl(), models, false)
	if err != nil {
		return unavailable("count items", err)
	}
	if slices.Contains(ok, false) {
		return fmt.Errorf("%w: mongodb count items: a group's counts were refused", items.ErrUnavailable)
	}
	return nil
}

// unresolvedDoc is what Stats reads of an unresolved item.
type unresolvedDoc struct {
	Destination      string     `bson:"destination"`
	State            string     `bson:"state"`
	NeedsPerson      bool       `bson:"needs_person"`
	NeedsPersonSince *time.Time `bson:"needs_person_since"`
	LeaseExpiresAt   *time.Time `bson:"lease_expires_at"`
	UpdatedAt        time.Time  `bson:"updated_at"`
}

// Stats measures the tenant's items at now, in total and per destination; the empty tenant measures every
// tenant together. It reads the kept counts, and the unresolved items (needing a person, unknown, in flight past their lease) for the oldest unresolved age,
// never the whole ledger. Returns ErrUnavailable.
func (s *Store) Stats(ctx context.Context, tenant string, now time.Time) (*items.Stats, error) {
	filter := bson.D{}
	if tenant != "" {
		filter = bson.D{{Key: "tenant", Value: tenant}}
	}
	cur, err := s.countsColl().Find(ctx, filter)
	if err != nil {
		return nil, unavailable("stats", err)
	}
	var docs []countsDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, unavailable("stats", err)
	}
	groups := map[items.CountGroup]items.Counts{}
	for _, d := range docs {
		g := d.Group.domain()
		groups[g] = groups[g].Add(d.Counts.counts())
	}
	since := map[string]time.Time{}
	for _, f := range []bson.D{
		{{Key: "needs_person", Value: true}},
		{{Key: "state", Value: string(items.StateUnknown)}},
		{{Key: "state", Value: string(items.StateInFlight)}, {Key: "lease_expires_at", Value: bson.D{{Key: "$lte", Value: now}}}},
	} {
		cur, err := s.items.Find(ctx, append(f, filter...), options.Find().SetProjection(bson.D{{Key: "destination", Value: 1},
			{Key: "state", Value: 1}, {Key: "needs_person", Value: 1}, {Key: "needs_person_since", Value: 1},
			{Key: "lease_expires_at", Value: 1}, {Key: "updated_at", Value: 1}}))
		if err != nil {
			return nil, unavailable("stats", err)
		}
		var us []unresolvedDoc
		if err := cur.All(ctx, &us); err != nil {
			return nil, unavailable("stats", err)
		}
		for _, u := range us {
			it := items.Item{State: items.State(u.State), NeedsPerson: u.NeedsPerson, NeedsPersonSince: u.NeedsPersonSince,
				LeaseExpiresAt: u.LeaseExpiresAt, UpdatedAt: u.UpdatedAt}
			if at, ok := it.UnresolvedSince(now); ok {
				if old, seen := since[u.Destination]; !seen || at.Before(old) {
					since[u.Destination] = at
				}
			}
		}
	}
	var counters []struct {
		Destination string `bson:"destination"`
		Value       int    `bson:"value"`
	}
	ccur, err := s.counters().Find(ctx, append(filter, bson.E{Key: "name", Value: items.CounterFingerprintConflicts}))
	if err != nil {
		return nil, unavailable("stats counters", err)
	}
	if err := ccur.All(ctx, &counters); err != nil {
		return nil, unavailable("stats counters", err)
	}
	conflicts := map[string]int{}
	for _, c := range counters {
		conflicts[c.Destination] += c.Value
	}
	return items.StatsOf(tenant, now, groups, since, conflicts), nil
}
