package mongostore

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/replaysafe/companion/items"
)

// Measures over time (items.SeriesStore). The series collection holds a document of items.Tally per
// tenant, step (1h, 1d), bucket start and destination, its counts in fields named as items.TallyColumns.
//
// EXACTNESS: the series are kept as the kept counts are (counts.go). Every write of an item carries, in
// the same single-document write, the events it added to the item (items.SeriesChanges.Move) as entries
// of its count_due beside the counts' ones: one per row of the series it changes (dueEntry.Series), each
// applied once to its row by the same steps (a $inc guarded by the entry's mark, the entries taken off
// the item, the marks removed), by the call before it answers or by the repair pass after a replica
// stopped. An undone write carries the negative of the events it had added. A fingerprint conflict,
// which no item records, is carried the same way by the counter's own document (CountConflicts): the
// counter's $inc and the entries of the series' day and hour in one write. Marks of the series' rows that
// no later write of the row removes (the hour is over) are removed with the next call's step 1, in the
// same bulk write; those a stopped replica left, by the repair pass an hour on.
//
// The events an item recorded before its ledger kept the series are not counted.

// SeriesCollection holds the measures over time; ReleasesCollection the versions of the service as they
// started.
const (
	SeriesCollection   = "series"
	ReleasesCollection = "releases"
)

// lastReleaseID is the document, in meta, of the version recorded last.
const lastReleaseID = "last_release"

// seriesMarkWindow bounds how far back the repair pass looks for marks on the series' rows: a call marks
// the rows of its entries' events, which happened within a day of its writes, applied within applyBudget;
// the repair pass removes its own marks at once.
const seriesMarkWindow = settledAge + 2*24*time.Hour

func (s *Store) seriesColl() *mongo.Collection {
	return s.items.Database().Collection(SeriesCollection)
}

func (s *Store) releases() *mongo.Collection {
	return s.items.Database().Collection(ReleasesCollection)
}

// seriesIndexes are the indexes of the series and the releases.
func seriesIndexes() []operatorIndex {
	return []operatorIndex{
		// SeriesRows: a tenant's buckets of a step, a range of starts.
		{SeriesCollection, mongo.IndexModel{Keys: bson.D{{Key: "tenant", Value: 1}, {Key: "step", Value: 1}, {Key: "start", Value: 1}},
			Options: options.Index().SetName("tenant_step_start")}},
		// RemoveSeriesRows: every tenant's rows past their keeping; the repair pass's marks of recent rows.
		{SeriesCollection, mongo.IndexModel{Keys: bson.D{{Key: "step", Value: 1}, {Key: "start", Value: 1}},
			Options: options.Index().SetName("step_start")}},
		{ReleasesCollection, mongo.IndexModel{Keys: bson.D{{Key: "at", Value: 1}}, Options: options.Index().SetName("at")}},
	}
}

// seriesDue is the row of the series an entry changes (with the entry's Group's tenant and destination),
// and the change, in the order of items.TallyColumns.
type seriesDue struct {
	Step  string    `bson:"step"`
	Start time.Time `bson:"start"`
	Tally []int64   `bson:"tally"`
}

// rowID is the _id of the row of tenant and destination that r changes.
func (r *seriesDue) rowID(g countGroup) string {
	return strings.Join([]string{g.Tenant, g.Destination, r.Step, strconv.FormatInt(r.Start.Unix(), 10)}, idSeparator)
}

// fields are what an upsert of the row sets when it creates it.
func (r *seriesDue) fields(g countGroup) bson.D {
	return bson.D{{Key: "tenant", Value: g.Tenant}, {Key: "destination", Value: g.Destination}, {Key: "step", Value: r.Step},
		{Key: "start", Value: r.Start}}
}

// inc is the $inc of the change.
func (r *seriesDue) inc() bson.D {
	out := make(bson.D, len(items.TallyColumns))
	for i, c := range items.TallyColumns {
		out[i] = bson.E{Key: c, Value: r.Tally[i]}
	}
	return out
}

// add adds o's change to r's.
func (r *seriesDue) add(o *seriesDue) {
	for i := range r.Tally {
		r.Tally[i] += o.Tally[i]
	}
}

// seriesEntries returns the entries of the changes of the series, in the order of their rows, without
// their ids; negate makes each the negative of its change (an undo).
func seriesEntries(sc items.SeriesChanges, at time.Time, negate bool) []dueEntry {
	var out []dueEntry
	for k, t := range sc {
		if t.IsZero() {
			continue
		}
		v := t.Columns()
		if negate {
			for i := range v {
				v[i] = -v[i]
			}
		}
		out = append(out, dueEntry{At: at, Group: countGroup{Tenant: k.Tenant, Destination: k.Destination},
			Series: &seriesDue{Step: string(k.Step), Start: k.StartTime(), Tally: v}})
	}
	slices.SortFunc(out, func(a, b dueEntry) int { return strings.Compare(a.Series.rowID(a.Group), b.Series.rowID(b.Group)) })
	return out
}

// seriesOf returns the changes of the series that a write from prev (nil: none) to next makes, read from
// the documents as stored (their times in milliseconds, as the items are read back).
func seriesOf(prev, next *itemDoc) items.SeriesChanges {
	sc := items.SeriesChanges{}
	if n := itemOf(next); n != nil {
		sc.Move(itemOf(prev), n)
	}
	return sc
}

// SeriesRows implements items.SeriesStore: a row per destination and bucket.
func (s *Store) SeriesRows(ctx context.Context, q items.SeriesQuery) ([]items.SeriesRow, error) {
	filter := bson.D{{Key: "tenant", Value: q.Tenant}, {Key: "step", Value: string(q.Step)},
		{Key: "start", Value: bson.D{{Key: "$gte", Value: q.From}, {Key: "$lt", Value: q.To}}}}
	if q.Destination != "" {
		filter = append(filter, bson.E{Key: "destination", Value: q.Destination})
	}
	cur, err := s.seriesColl().Find(ctx, filter, options.Find().SetProjection(bson.D{{Key: "applying", Value: 0}}))
	if err != nil {
		return nil, unavailable("read series", err)
	}
	defer cur.Close(ctx)
	var out []items.SeriesRow
	v := make([]int64, len(items.TallyColumns))
	for cur.Next(ctx) {
		doc := cur.Current
		r := items.SeriesRow{}
		r.Destination, _ = doc.Lookup("destination").StringValueOK()
		start, ok := doc.Lookup("start").TimeOK()
		if !ok {
			continue // not a row of this build's
		}
		r.Start = start.UTC()
		for i, c := range items.TallyColumns {
			v[i], _ = doc.Lookup(c).AsInt64OK()
		}
		r.Tally = items.TallyOfColumns(v)
		out = append(out, r)
	}
	if err := cur.Err(); err != nil {
		return nil, unavailable("read series", err)
	}
	return out, nil
}

// CountConflicts implements items.SeriesStore: the counter's $inc and the entries of the series' day and
// hour in one write of the counter's document, the entries then applied as an item's are.
func (s *Store) CountConflicts(ctx context.Context, tenant, destination string, at time.Time, n int) error {
	sc := items.SeriesChanges{}
	sc.Add(tenant, destination, msTime(at), items.Tally{Conflicts: n})
	entries := dueOf(nil, sc, newRev(), s.serverNow())
	id := strings.Join([]string{tenant, destination, items.CounterFingerprintConflicts}, idSeparator)
	update := bson.D{{Key: "$inc", Value: bson.D{{Key: "value", Value: n}}},
		{Key: "$push", Value: bson.D{{Key: "count_due", Value: bson.D{{Key: "$each", Value: entries}}}}},
		{Key: "$setOnInsert", Value: bson.D{{Key: "tenant", Value: tenant}, {Key: "destination", Value: destination},
			{Key: "name", Value: items.CounterFingerprintConflicts}}}}
	for try := 0; ; try++ {
		_, err := s.counters().UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, update, options.UpdateOne().SetUpsert(true))
		if mongo.IsDuplicateKeyError(err) && try == 0 {
			continue // two first increments raced on the upsert: this one goes to the document the other made
		}
		if err != nil {
			return unavailable("count conflicts", err)
		}
		break
	}
	s.applyDue(ctx, []countJob{{id: id, counter: true, entries: entries}})
	return nil
}

// RecordRelease implements items.SeriesStore: the version recorded last is kept in meta, and changed by
// one conditional write, which two replicas of one version starting together cannot both make.
func (s *Store) RecordRelease(ctx context.Context, version string, at time.Time) (bool, error) {
	_, err := s.meta.UpdateOne(ctx, bson.D{{Key: "_id", Value: lastReleaseID}, {Key: "version", Value: bson.D{{Key: "$ne", Value: version}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "version", Value: version}}}}, options.UpdateOne().SetUpsert(true))
	var we mongo.WriteException
	switch {
	case mongo.IsDuplicateKeyError(err) || (errors.As(err, &we) && mongo.IsDuplicateKeyError(we)):
		return false, nil // the version recorded last
	case err != nil:
		return false, unavailable("record release", err)
	}
	if _, err := s.releases().InsertOne(ctx, bson.D{{Key: "at", Value: msTime(at)}, {Key: "version", Value: version}}); err != nil {
		return false, unavailable("record release", err)
	}
	return true, nil
}

// Releases implements items.SeriesStore.
func (s *Store) Releases(ctx context.Context, from, to time.Time) ([]items.Release, error) {
	cur, err := s.releases().Find(ctx, bson.D{{Key: "at", Value: bson.D{{Key: "$gte", Value: from}, {Key: "$lt", Value: to}}}},
		options.Find().SetSort(bson.D{{Key: "at", Value: 1}, {Key: "_id", Value: 1}}))
	if err != nil {
		return nil, unavailable("read releases", err)
	}
	var docs []struct {
		At      time.Time `bson:"at"`
		Version string    `bson:"version"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, unavailable("read releases", err)
	}
	out := make([]items.Release, len(docs))
	for i, d := range docs {
		out[i] = items.Release{Version: d.Version, At: d.At.UTC()}
	}
	return out, nil
}

// RemoveSeriesRows implements items.SeriesStore: a deletion per step, through step_start.
func (s *Store) RemoveSeriesRows(ctx context.Context, hours, days time.Time) (int, error) {
	n := 0
	for _, step := range items.Steps {
		before := map[items.SeriesStep]time.Time{items.StepHour: hours, items.StepDay: days}[step]
		res, err := s.seriesColl().DeleteMany(ctx, bson.D{{Key: "step", Value: string(step)}, {Key: "start", Value: bson.D{{Key: "$lt", Value: before}}}})
		if err != nil {
			return n, unavailable("remove series rows", err)
		}
		n += int(res.DeletedCount)
	}
	return n, nil
}
