package mongostore

import (
	"context"
	"errors"
	"strings"
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
// CONSISTENCY: the ledger uses no multi-document transactions, so a count is changed by one $inc right
// after the item's write is acknowledged, not with it. A reader may see an item's write before its count
// (for the time of one round trip), and a replica stopped between the two writes, or a count's $inc that
// fails (it is tried twice), leaves that group off by the item for good; the transition itself is
// recorded and answered as usual. A ledger of an earlier build is counted once, by the first replica of
// this build that opens it.

// CountsCollection holds the kept counts.
const CountsCollection = "item_counts"

// countsBuiltID marks, in meta, a ledger whose item_counts hold every item.
const countsBuiltID = "item_counts_built"

func (s *Store) countsColl() *mongo.Collection {
	return s.items.Database().Collection(CountsCollection)
}

// countsDoc is one group's kept counts.
type countsDoc struct {
	Tenant         string `bson:"tenant"`
	Destination    string `bson:"destination"`
	State          string `bson:"state"`
	NeedsPerson    bool   `bson:"needs_person"`
	Items          int    `bson:"items"`
	Retries        int    `bson:"retries"`
	Attempted      int    `bson:"attempted"`
	Recoveries     int    `bson:"recoveries"`
	Resolutions    int    `bson:"resolutions"`
	Duplicates     int    `bson:"duplicates"`
	EnteredUnknown int    `bson:"entered_unknown"`
	// HistoryDropped and HistoryDroppedItems came later than the collection: a document an earlier build
	// wrote lacks them and reads 0, which is exact (no build before them wrote an item's history_dropped),
	// and the first $inc of this build creates them.
	HistoryDropped      int `bson:"history_dropped"`
	HistoryDroppedItems int `bson:"history_dropped_items"`
}

// addCounts adds changes to the kept counts, one upsert per group that changed. Returns ErrUnavailable.
func (s *Store) addCounts(ctx context.Context, changes items.CountChanges) error {
	var errs []error
	for g, c := range changes {
		if c.IsZero() {
			continue
		}
		np := "0"
		if g.NeedsPerson {
			np = "1"
		}
		id := strings.Join([]string{g.Tenant, g.Destination, string(g.State), np}, idSeparator)
		update := bson.D{
			{Key: "$inc", Value: bson.D{{Key: "items", Value: c.Items}, {Key: "retries", Value: c.Retries},
				{Key: "attempted", Value: c.Attempted}, {Key: "recoveries", Value: c.SameKeyRecoveries},
				{Key: "resolutions", Value: c.ManualResolutions}, {Key: "duplicates", Value: c.DuplicateEffects},
				{Key: "entered_unknown", Value: c.EnteredUnknown}, {Key: "history_dropped", Value: c.HistoryDropped},
				{Key: "history_dropped_items", Value: c.HistoryDroppedItems}}},
			{Key: "$setOnInsert", Value: bson.D{{Key: "tenant", Value: g.Tenant}, {Key: "destination", Value: g.Destination},
				{Key: "state", Value: string(g.State)}, {Key: "needs_person", Value: g.NeedsPerson}}},
		}
		var err error
		// Two first increments of a group may race on the upsert: the loser's goes to the winner's document
		// on the second try.
		for try := 0; try < 2; try++ {
			if _, err = s.countsColl().UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, update, options.UpdateOne().SetUpsert(true)); err == nil {
				break
			}
		}
		if err != nil {
			errs = append(errs, unavailable("add counts", err))
		}
	}
	return errors.Join(errs...)
}

// countWrite keeps the counts of an item written from prev (nil: new) to next. The write is recorded
// already, so a failure to count is not the caller's failure: see CONSISTENCY above.
func (s *Store) countWrite(ctx context.Context, prev *itemDoc, next written) {
	changes := items.CountChanges{}
	next.move(changes, prev)
	_ = s.addCounts(context.WithoutCancel(ctx), changes)
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
func (w written) move(changes items.CountChanges, prev *itemDoc) {
	changes.Move(itemOf(prev), nil)
	g, c := items.CountsFromFacts(w.it, w.facts)
	changes[g] = changes[g].Add(c)
}

func itemOf(d *itemDoc) *items.Item {
	if d == nil {
		return nil
	}
	return d.item()
}

// buildCounts counts a ledger of an earlier build once: every item, in one pass, then the marker.
func (s *Store) buildCounts(ctx context.Context) error {
	err := s.meta.FindOne(ctx, bson.D{{Key: "_id", Value: countsBuiltID}}).Err()
	if err == nil {
		return nil
	}
	if !errors.Is(err, mongo.ErrNoDocuments) {
		return unavailable("read meta", err)
	}
	if _, err := s.countsColl().DeleteMany(ctx, bson.D{}); err != nil {
		return unavailable("count items", err)
	}
	cur, err := s.items.Find(ctx, bson.D{})
	if err != nil {
		return unavailable("count items", err)
	}
	defer cur.Close(ctx)
	changes := items.CountChanges{}
	for cur.Next(ctx) {
		var d itemDoc
		if err := cur.Decode(&d); err != nil {
			return unavailable("count items", err)
		}
		changes.Move(nil, d.item())
	}
	if err := cur.Err(); err != nil {
		return unavailable("count items", err)
	}
	if err := s.addCounts(ctx, changes); err != nil {
		return err
	}
	if _, err := s.meta.InsertOne(ctx, bson.D{{Key: "_id", Value: countsBuiltID}}); err != nil && !mongo.IsDuplicateKeyError(err) {
		return unavailable("write meta", err)
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
// tenant together. It reads the kept counts, and the unresolved items (needing a person, unknown, in
// flight past their lease) for the oldest unresolved age, never the whole ledger. Returns ErrUnavailable.
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
		g := items.CountGroup{Tenant: d.Tenant, Destination: d.Destination, State: items.State(d.State), NeedsPerson: d.NeedsPerson}
		groups[g] = groups[g].Add(items.Counts{Items: d.Items, Retries: d.Retries, Attempted: d.Attempted, SameKeyRecoveries: d.Recoveries,
			ManualResolutions: d.Resolutions, DuplicateEffects: d.Duplicates, EnteredUnknown: d.EnteredUnknown,
			HistoryDropped: d.HistoryDropped, HistoryDroppedItems: d.HistoryDroppedItems})
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
