package mongostore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/replaysafe/companion/items"
)

// This file serves the sweeper, the alert outbox and the operator surface (the interfaces alerts.SweepStore,
// alerts.Outbox and handlers.OperatorStore; items/itemstest.ExerciseOperators checks them). The outbox
// lives in its own collection, one document per item, attempt and cause; the counters in another.
//
// Only single-document atomicity is used, as for the items: a claim of an alert group is an updateMany
// whose filter holds "not claimed", so each alert goes to exactly one dispatcher (with a real MongoDB;
// FerretDB, the test server, does not apply concurrent conditional updates atomically). Under a race two
// dispatchers may each take part of one group and send two messages; they never send one alert twice.

// Collection names of the operator surface.
const (
	AlertsCollection   = "alerts"
	CountersCollection = "counters"
)

// operatorIndex is an index of a collection.
type operatorIndex struct {
	collection string
	model      mongo.IndexModel
}

// operatorIndexes returns the indexes of the outbox and of the items queries this file adds, built afresh
// at every call (see indexes).
func operatorIndexes() []operatorIndex {
	return []operatorIndex{
		{ItemsCollection, mongo.IndexModel{Keys: bson.D{{Key: "needs_person", Value: 1}, {Key: "alert_status", Value: 1}, {Key: "tenant", Value: 1}, {Key: "key", Value: 1}},
			Options: options.Index().SetName("needs_person_alert")}},
		{AlertsCollection, mongo.IndexModel{Keys: bson.D{{Key: "status", Value: 1}, {Key: "tenant", Value: 1}, {Key: "owner", Value: 1}, {Key: "batch_id", Value: 1}},
			Options: options.Index().SetName("status_group")}},
		{AlertsCollection, mongo.IndexModel{Keys: bson.D{{Key: "status", Value: 1}, {Key: "escalate_at", Value: 1}}, Options: options.Index().SetName("status_escalate")}},
		{AlertsCollection, mongo.IndexModel{Keys: bson.D{{Key: "tenant", Value: 1}, {Key: "key", Value: 1}}, Options: options.Index().SetName("item")}},
		{AlertsCollection, mongo.IndexModel{Keys: bson.D{{Key: "tenant", Value: 1}, {Key: "owner", Value: 1}}, Options: options.Index().SetName("owner")}},
		{AlertsCollection, mongo.IndexModel{Keys: bson.D{{Key: "channel", Value: 1}, {Key: "ts", Value: 1}}, Options: options.Index().SetName("message")}},
		{AlertsCollection, mongo.IndexModel{Keys: bson.D{{Key: "escalation_channel", Value: 1}, {Key: "escalation_ts", Value: 1}}, Options: options.Index().SetName("escalation_message")}},
		{AlertsCollection, mongo.IndexModel{Keys: bson.D{{Key: "claim", Value: 1}}, Options: options.Index().SetName("claim")}},
	}
}

// ensureOperatorIndexes creates the operator indexes, one command each (see ensureIndexes).
func (s *Store) ensureOperatorIndexes(ctx context.Context) error {
	db := s.items.Database()
	for _, ix := range append(operatorIndexes(), seriesIndexes()...) {
		if _, err := db.Collection(ix.collection).Indexes().CreateOne(ctx, ix.model); err != nil {
			if isServerError(err) {
				return fmt.Errorf("mongostore: create index: %w", err)
			}
			return unavailable("create index", err)
		}
	}
	return nil
}

func (s *Store) alerts() *mongo.Collection { return s.items.Database().Collection(AlertsCollection) }
func (s *Store) counters() *mongo.Collection {
	return s.items.Database().Collection(CountersCollection)
}

// after is the filter of a page that continues after the reference, in (tenant, key) order.
func after(ref items.ItemRef) bson.D {
	return bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "tenant", Value: bson.D{{Key: "$gt", Value: ref.Tenant}}}},
		bson.D{{Key: "tenant", Value: ref.Tenant}, {Key: "key", Value: bson.D{{Key: "$gt", Value: ref.Key}}}},
	}}}
}

var byTenantKey = bson.D{{Key: "tenant", Value: 1}, {Key: "key", Value: 1}}

// findItems returns the items matching filter, in the given order, at most limit (0: all).
func (s *Store) findItems(ctx context.Context, filter, sort bson.D, limit int) ([]*items.Item, error) {
	opts := options.Find().SetSort(sort)
	if limit > 0 {
		opts.SetLimit(int64(limit))
	}
	cur, err := s.items.Find(ctx, filter, opts)
	if err != nil {
		return nil, unavailable("find items", err)
	}
	var docs []itemDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, unavailable("find items", err)
	}
	out := make([]*items.Item, len(docs))
	for i := range docs {
		out[i] = docs[i].item()
	}
	return out, nil
}

func and(filters ...bson.D) bson.D {
	a := bson.A{}
	for _, f := range filters {
		a = append(a, f)
	}
	return bson.D{{Key: "$and", Value: a}}
}

// ExpiredLeases returns up to limit items in flight whose lease ended at or before now, ordered by tenant
// and key, after the given reference. Returns ErrUnavailable.
func (s *Store) ExpiredLeases(ctx context.Context, now time.Time, ref items.ItemRef, limit int) ([]items.ItemRef, error) {
	filter := and(bson.D{{Key: "state", Value: items.StateInFlight}, {Key: "lease_expires_at", Value: bson.D{{Key: "$lte", Value: now}}}}, after(ref))
	cur, err := s.items.Find(ctx, filter, options.Find().SetSort(byTenantKey).SetLimit(int64(limit)).
		SetProjection(bson.D{{Key: "tenant", Value: 1}, {Key: "key", Value: 1}}))
	if err != nil {
		return nil, unavailable("find expired leases", err)
	}
	var refs []items.ItemRef
	for cur.Next(ctx) {
		var r struct {
			Tenant string `bson:"tenant"`
			Key    string `bson:"key"`
		}
		if err := cur.Decode(&r); err != nil {
			return nil, unavailable("find expired leases", err)
		}
		refs = append(refs, items.ItemRef{Tenant: r.Tenant, Key: r.Key})
	}
	if err := cur.Err(); err != nil {
		return nil, unavailable("find expired leases", err)
	}
	return refs, nil
}

// SweepCandidates returns up to limit items that may newly need a person (items.Facts.SweepCandidate: not
// yet needing one, and unknown, or failed and retryable, or flagged with a duplicate effect, and not
// acknowledged by a person in their current attempt), ordered by tenant and key after the given
// reference. Returns ErrUnavailable.
//
// The fields of the $or say it, and sweep_candidate false leaves out the failed and duplicate items a
// person acknowledged in their current attempt (the documents of an earlier build lack the field; those a
// person acknowledged get it at the first start of this build: refreshSweepCandidates). sweep_candidate
// false is trusted only where it is this build's word on the document as it now is: on an item whose last
// resolution is an acknowledgement that this build wrote as made in the current attempt
// (resolution.current_attempt), and never for an unknown item, which is always a candidate. An earlier
// build run again on the ledger (a rollback) changes documents with a $set of the fields it knows: it
// leaves the sweep_candidate this build wrote, and rewrites the resolution without current_attempt. So an
// item stored in flight (false) that it then recorded as unknown or failed, and an item a person
// acknowledged that it then retried into another retryable failure, are read by the sweeper when this
// build runs again (TestEarlierBuildsWriteAfterThisBuildStaysASweepCandidate,
// TestEarlierBuildsRetryOfAnAcknowledgedItemIsASweepCandidate). The sweeper checks every rule on the
// item it reads (items.Ledger.NeedsPersonCause), so an item read needlessly (one the earlier build wrote
// after an acknowledgement without retrying it) is only read. (The attempts cannot be compared in the
// filter: that needs $expr with $eq, which FerretDB v1.24, the test server, does not implement.)
func (s *Store) SweepCandidates(ctx context.Context, ref items.ItemRef, limit int) ([]*items.Item, error) {
	filter := and(bson.D{{Key: "needs_person", Value: false}, {Key: "$or", Value: bson.A{
		bson.D{{Key: "state", Value: items.StateUnknown}},
		bson.D{{Key: "state", Value: items.StateFailed}, {Key: "retryable", Value: true}, {Key: "$or", Value: unacknowledged}},
		bson.D{{Key: "duplicate_effect", Value: true}, {Key: "$or", Value: unacknowledged}},
	}}}, after(ref))
	return s.findItems(ctx, filter, byTenantKey, limit)
}

// unacknowledged is the part of the sweep candidates' filter a person's acknowledgement ends: the
// document's sweep_candidate is not false, or its last resolution is no acknowledgement, or this build did
// not write it as made in the document's current attempt (then false is not this build's word on the
// item's present fields).
var unacknowledged = bson.A{
	bson.D{{Key: "sweep_candidate", Value: bson.D{{Key: "$ne", Value: false}}}},
	bson.D{{Key: "resolution.outcome", Value: bson.D{{Key: "$ne", Value: items.ResolveAcknowledged}}}},
	bson.D{{Key: "resolution.current_attempt", Value: bson.D{{Key: "$ne", Value: true}}}},
}

// acknowledgedNow is the filter of the documents whose last resolution this build wrote as an
// acknowledgement made in their current attempt (items: acknowledged): none of them is a sweep candidate
// for being failed and retryable or flagged with a duplicate effect.
var acknowledgedNow = bson.D{{Key: "resolution.outcome", Value: items.ResolveAcknowledged}, {Key: "resolution.current_attempt", Value: true}}

// PendingAlertItems returns up to limit items that need a person and whose alert has not gone out yet,
// ordered by tenant and key after the given reference. Returns ErrUnavailable.
func (s *Store) PendingAlertItems(ctx context.Context, ref items.ItemRef, limit int) ([]*items.Item, error) {
	filter := and(bson.D{{Key: "needs_person", Value: true}, {Key: "alert_status", Value: items.AlertPending}}, after(ref))
	return s.findItems(ctx, filter, byTenantKey, limit)
}

// alertDoc is an alert as the alerts collection holds it. Times are kept to the millisecond.
type alertDoc struct {
	ID                string     `bson:"_id,omitempty"`
	Tenant            string     `bson:"tenant"`
	Key               string     `bson:"key"`
	Attempt           int        `bson:"attempt"`
	Cause             string     `bson:"cause"`
	Owner             string     `bson:"owner"`
	EscalateTo        string     `bson:"escalate_to"`
	EscalateAfter     int64      `bson:"escalate_after_ms"`
	BatchID           string     `bson:"batch_id"`
	Destination       string     `bson:"destination"`
	Status            string     `bson:"status"`
	Claim             *string    `bson:"claim"`
	ClaimedUntil      *time.Time `bson:"claimed_until"`
	Channel           string     `bson:"channel"`
	TS                string     `bson:"ts"`
	EscalateAt        *time.Time `bson:"escalate_at"`
	EscalatedBy       string     `bson:"escalated_by"`
	EscalationChannel string     `bson:"escalation_channel"`
	EscalationTS      string     `bson:"escalation_ts"`
	CreatedAt         time.Time  `bson:"created_at"`
	SentAt            *time.Time `bson:"sent_at"`
	EscalatedAt       *time.Time `bson:"escalated_at"`
	ClosedAt          *time.Time `bson:"closed_at"`
	// PostAttemptAt is absent on alerts stored before it existed: no post in doubt.
	PostAttemptAt *time.Time `bson:"post_attempt_at,omitempty"`
}

// alertID names one alert: its item, attempt and cause. The unique _id keeps one alert per triple.
func alertID(tenant, key string, attempt int, cause string) string {
	return strings.Join([]string{tenant, key, fmt.Sprint(attempt), cause}, idSeparator)
}

func (d alertDoc) alert() items.Alert {
	return items.Alert{Tenant: d.Tenant, Key: d.Key, Attempt: d.Attempt, Cause: d.Cause, Owner: d.Owner, EscalateTo: d.EscalateTo,
		EscalateAfter: time.Duration(d.EscalateAfter) * time.Millisecond, BatchID: d.BatchID, Destination: d.Destination,
		Status: d.Status, Channel: d.Channel, TS: d.TS, EscalateAt: msTimePtr(d.EscalateAt), EscalatedBy: d.EscalatedBy,
		EscalationChannel: d.EscalationChannel, EscalationTS: d.EscalationTS, CreatedAt: msTime(d.CreatedAt),
		SentAt: msTimePtr(d.SentAt), EscalatedAt: msTimePtr(d.EscalatedAt), ClosedAt: msTimePtr(d.ClosedAt),
		PostAttemptAt: msTimePtr(d.PostAttemptAt)}
}

// AddAlerts records pending alerts, except those for which the outbox holds one with the same item,
// attempt and cause. It returns how many it added. Returns ErrUnavailable.
func (s *Store) AddAlerts(ctx context.Context, as []items.Alert) (int, error) {
	added := 0
	for _, a := range as {
		d := alertDoc{ID: alertID(a.Tenant, a.Key, a.Attempt, a.Cause), Tenant: a.Tenant, Key: a.Key, Attempt: a.Attempt, Cause: a.Cause,
			Owner: a.Owner, EscalateTo: a.EscalateTo, EscalateAfter: a.EscalateAfter.Milliseconds(), BatchID: a.BatchID,
			Destination: a.Destination, Status: items.AlertPending, CreatedAt: msTime(a.CreatedAt)}
		_, err := s.alerts().InsertOne(ctx, d)
		switch {
		case mongo.IsDuplicateKeyError(err):
		case err != nil:
			return added, unavailable("insert alert", err)
		default:
			added++
		}
	}
	return added, nil
}

// claimable is the filter of alerts nobody holds at now.
func claimable(now time.Time) bson.D {
	return bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "claim", Value: nil}},
		bson.D{{Key: "claimed_until", Value: bson.D{{Key: "$lte", Value: now}}}},
	}}}
}

func escalationDue(now time.Time) bson.D {
	return bson.D{{Key: "status", Value: items.AlertSent}, {Key: "escalate_at", Value: bson.D{{Key: "$lte", Value: now}}},
		{Key: "escalate_to", Value: bson.D{{Key: "$ne", Value: ""}}}}
}

// maxGroupScan bounds the alerts AlertGroups reads to find the groups; the rest wait for the next run.
const maxGroupScan = 10000

// AlertGroups returns up to limit groups with alerts a dispatcher may claim at now: pending alerts per
// tenant, owner and batch, and sent alerts whose escalation is due per tenant, escalate_to owner and batch.
// Returns ErrUnavailable.
func (s *Store) AlertGroups(ctx context.Context, now time.Time, limit int) ([]items.AlertGroup, error) {
	var groups []items.AlertGroup
	seen := map[items.AlertGroup]bool{}
	for _, q := range []struct {
		filter     bson.D
		escalation bool
	}{{and(bson.D{{Key: "status", Value: items.AlertPending}}, claimable(now)), false}, {and(escalationDue(now), claimable(now)), true}} {
		cur, err := s.alerts().Find(ctx, q.filter, options.Find().SetLimit(maxGroupScan).
			SetProjection(bson.D{{Key: "tenant", Value: 1}, {Key: "owner", Value: 1}, {Key: "escalate_to", Value: 1}, {Key: "batch_id", Value: 1}}))
		if err != nil {
			return nil, unavailable("find alert groups", err)
		}
		var docs []alertDoc
		if err := cur.All(ctx, &docs); err != nil {
			return nil, unavailable("find alert groups", err)
		}
		for _, d := range docs {
			g := items.AlertGroup{Tenant: d.Tenant, Owner: d.Owner, BatchID: d.BatchID, Escalation: q.escalation}
			if q.escalation {
				g.Owner = d.EscalateTo
			}
			if !seen[g] && len(groups) < limit {
				seen[g] = true
				groups = append(groups, g)
			}
		}
	}
	return groups, nil
}

func (s *Store) findAlerts(ctx context.Context, op string, filter bson.D) ([]items.Alert, error) {
	cur, err := s.alerts().Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "key", Value: 1}, {Key: "attempt", Value: 1}, {Key: "cause", Value: 1}}))
	if err != nil {
		return nil, unavailable(op, err)
	}
	var docs []alertDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, unavailable(op, err)
	}
	out := make([]items.Alert, len(docs))
	for i, d := range docs {
		out[i] = d.alert()
	}
	return out, nil
}

// ClaimAlerts takes the claimable alerts of c.Group for the claim token until c.Until, and returns them
// ordered by key. Each alert is taken by one conditional update of its document, so no alert goes to two
// claimers. Returns ErrUnavailable.
func (s *Store) ClaimAlerts(ctx context.Context, c items.AlertClaim) ([]items.Alert, error) {
	g := c.Group
	group := bson.D{{Key: "tenant", Value: g.Tenant}, {Key: "owner", Value: g.Owner}, {Key: "batch_id", Value: g.BatchID}, {Key: "status", Value: items.AlertPending}}
	if g.Escalation {
		group = append(escalationDue(c.Now), bson.E{Key: "tenant", Value: g.Tenant}, bson.E{Key: "escalate_to", Value: g.Owner},
			bson.E{Key: "batch_id", Value: g.BatchID})
	}
	_, err := s.alerts().UpdateMany(ctx, and(group, claimable(c.Now)),
		bson.D{{Key: "$set", Value: bson.D{{Key: "claim", Value: c.Claim}, {Key: "claimed_until", Value: msTime(c.Until)}}}})
	if err != nil {
		return nil, unavailable("claim alerts", err)
	}
	return s.findAlerts(ctx, "claim alerts", bson.D{{Key: "claim", Value: c.Claim}})
}

// FinishAlerts records where the message of a claimed group landed and releases the claim: the alerts
// become sent (escalating at sent time + escalate_after when an escalate_to owner is set) or, for an
// escalation, escalated. Alerts closed meanwhile stay closed. It returns how many alerts it changed.
// Returns ErrUnavailable.
func (s *Store) FinishAlerts(ctx context.Context, f items.AlertDelivery) (int, error) {
	at := msTime(f.At)
	if f.Escalation {
		res, err := s.alerts().UpdateMany(ctx, bson.D{{Key: "claim", Value: f.Claim}, {Key: "status", Value: items.AlertSent}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: items.AlertEscalated}, {Key: "escalation_channel", Value: f.Channel},
				{Key: "escalation_ts", Value: f.TS}, {Key: "escalated_at", Value: at}, {Key: "claim", Value: nil}, {Key: "claimed_until", Value: nil}}},
				{Key: "$unset", Value: bson.D{{Key: "post_attempt_at", Value: ""}}}})
		if err != nil {
			return 0, unavailable("finish alerts", err)
		}
		return int(res.ModifiedCount), nil
	}
	cur, err := s.alerts().Find(ctx, bson.D{{Key: "claim", Value: f.Claim}, {Key: "status", Value: items.AlertPending}})
	if err != nil {
		return 0, unavailable("finish alerts", err)
	}
	var docs []alertDoc
	if err := cur.All(ctx, &docs); err != nil {
		return 0, unavailable("finish alerts", err)
	}
	n := 0
	for _, d := range docs {
		var escalateAt *time.Time
		if d.EscalateTo != "" && d.EscalateAfter > 0 {
			t := at.Add(time.Duration(d.EscalateAfter) * time.Millisecond)
			escalateAt = &t
		}
		// The escalation time differs per alert (its escalate_after), so each is its own update; the
		// claim in the filter keeps a claim that ran out and was taken over from being finished here.
		res, err := s.alerts().UpdateOne(ctx, bson.D{{Key: "_id", Value: d.ID}, {Key: "claim", Value: f.Claim}, {Key: "status", Value: items.AlertPending}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: items.AlertSent}, {Key: "channel", Value: f.Channel}, {Key: "ts", Value: f.TS},
				{Key: "sent_at", Value: at}, {Key: "escalate_at", Value: escalateAt}, {Key: "claim", Value: nil}, {Key: "claimed_until", Value: nil}}},
				{Key: "$unset", Value: bson.D{{Key: "post_attempt_at", Value: ""}}}})
		if err != nil {
			return n, unavailable("finish alerts", err)
		}
		n += int(res.ModifiedCount)
	}
	return n, nil
}

// RenewAlertClaim keeps the alerts held by claim with it until until: a dispatcher renews its claim while
// its message is being posted, so that a slow post is not taken for a dead dispatcher. It returns how
// many alerts the claim holds; 0 means it was released, finished or taken over. Returns ErrUnavailable.
func (s *Store) RenewAlertClaim(ctx context.Context, claim string, until time.Time) (int, error) {
	res, err := s.alerts().UpdateMany(ctx, bson.D{{Key: "claim", Value: claim}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "claimed_until", Value: msTime(until)}}}})
	if err != nil {
		return 0, unavailable("renew alert claim", err)
	}
	return int(res.MatchedCount), nil
}

// MarkAlertPost records on the alerts held by claim that a message carrying them is about to be posted at
// at: until FinishAlerts records where it landed, the next sender knows the post may have landed with
// its answer lost, and looks for it. A zero at clears the mark (the post was refused: nothing landed). It
// returns how many alerts it changed. Returns ErrUnavailable.
func (s *Store) MarkAlertPost(ctx context.Context, claim string, at time.Time) (int, error) {
	update := bson.D{{Key: "$set", Value: bson.D{{Key: "post_attempt_at", Value: msTime(at)}}}}
	if at.IsZero() {
		update = bson.D{{Key: "$unset", Value: bson.D{{Key: "post_attempt_at", Value: ""}}}}
	}
	res, err := s.alerts().UpdateMany(ctx, bson.D{{Key: "claim", Value: claim}}, update)
	if err != nil {
		return 0, unavailable("mark alert post", err)
	}
	return int(res.MatchedCount), nil
}

// NoteAlertMessage records on the alerts as where a message carrying them landed (m's channel and ts;
// for an escalation, as its escalation message) without finishing them, for alerts not yet finished that
// have no such message: a dispatcher whose claim ran out while it posted leaves its message where the
// dispatcher holding the group now finds it, and updates it instead of posting another. It returns how
// many alerts it changed. Returns ErrUnavailable.
func (s *Store) NoteAlertMessage(ctx context.Context, as []items.Alert, m items.AlertDelivery) (int, error) {
	status, channel, ts := items.AlertPending, "channel", "ts"
	if m.Escalation {
		status, channel, ts = items.AlertSent, "escalation_channel", "escalation_ts"
	}
	n := 0
	for _, a := range as {
		res, err := s.alerts().UpdateOne(ctx, bson.D{{Key: "_id", Value: alertID(a.Tenant, a.Key, a.Attempt, a.Cause)},
			{Key: "status", Value: status}, {Key: ts, Value: ""}},
			bson.D{{Key: "$set", Value: bson.D{{Key: channel, Value: m.Channel}, {Key: ts, Value: m.TS}}}})
		if err != nil {
			return n, unavailable("note alert message", err)
		}
		n += int(res.ModifiedCount)
	}
	return n, nil
}

// ReleaseAlerts gives up a claim without sending. Returns ErrUnavailable.
func (s *Store) ReleaseAlerts(ctx context.Context, claim string) error {
	_, err := s.alerts().UpdateMany(ctx, bson.D{{Key: "claim", Value: claim}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "claim", Value: nil}, {Key: "claimed_until", Value: nil}}}})
	if err != nil {
		return unavailable("release alerts", err)
	}
	return nil
}

func closeUpdate(now time.Time) bson.D {
	return bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: items.AlertClosed}, {Key: "closed_at", Value: msTime(now)},
		{Key: "claim", Value: nil}, {Key: "claimed_until", Value: nil}}}}
}

// CloseAlert closes one alert. It reports whether the alert was open. Returns ErrUnavailable.
func (s *Store) CloseAlert(ctx context.Context, a items.Alert, now time.Time) (bool, error) {
	res, err := s.alerts().UpdateOne(ctx, bson.D{{Key: "_id", Value: alertID(a.Tenant, a.Key, a.Attempt, a.Cause)},
		{Key: "status", Value: bson.D{{Key: "$ne", Value: items.AlertClosed}}}}, closeUpdate(now))
	if err != nil {
		return false, unavailable("close alert", err)
	}
	return res.ModifiedCount > 0, nil
}

// CloseItemAlerts closes every open alert about an item. It returns how many it closed. Returns
// ErrUnavailable.
func (s *Store) CloseItemAlerts(ctx context.Context, tenant, key string, now time.Time) (int, error) {
	res, err := s.alerts().UpdateMany(ctx, bson.D{{Key: "tenant", Value: tenant}, {Key: "key", Value: key},
		{Key: "status", Value: bson.D{{Key: "$ne", Value: items.AlertClosed}}}}, closeUpdate(now))
	if err != nil {
		return 0, unavailable("close alerts", err)
	}
	return int(res.ModifiedCount), nil
}

// RequestEscalation makes the sent alerts about an item that have an escalate_to owner due for
// escalation now, naming who asked; a repeated request changes nothing. It returns how many alerts it
// changed. Returns ErrUnavailable.
func (s *Store) RequestEscalation(ctx context.Context, tenant, key, by string, now time.Time) (int, error) {
	res, err := s.alerts().UpdateMany(ctx, bson.D{{Key: "tenant", Value: tenant}, {Key: "key", Value: key}, {Key: "status", Value: items.AlertSent},
		{Key: "escalate_to", Value: bson.D{{Key: "$ne", Value: ""}}}, {Key: "escalated_by", Value: ""}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "escalate_at", Value: msTime(now)}, {Key: "escalated_by", Value: by}}}})
	if err != nil {
		return 0, unavailable("request escalation", err)
	}
	return int(res.ModifiedCount), nil
}

// ItemAlerts returns the alerts about an item, oldest first. Returns ErrUnavailable.
func (s *Store) ItemAlerts(ctx context.Context, tenant, key string) ([]items.Alert, error) {
	out, err := s.findAlerts(ctx, "find item alerts", bson.D{{Key: "tenant", Value: tenant}, {Key: "key", Value: key}})
	slices.SortStableFunc(out, func(a, b items.Alert) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, err
}

// MessageAlerts returns the alerts a message carried (as the first alert or as an escalation), ordered by
// key. Returns ErrUnavailable.
func (s *Store) MessageAlerts(ctx context.Context, channel, ts string) ([]items.Alert, error) {
	return s.findAlerts(ctx, "find message alerts", bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "channel", Value: channel}, {Key: "ts", Value: ts}},
		bson.D{{Key: "escalation_channel", Value: channel}, {Key: "escalation_ts", Value: ts}},
	}}})
}

// SettledAlerts returns up to limit alerts that went out (sent or escalated) and are still open although
// their item no longer waits for a person in their attempt: settled, claimed again, or gone. Their messages
// may still carry live buttons. It reads the open delivered alerts (index status_group: about as many as
// the items waiting for a person) and their items, a page of alerts at a time. Returns ErrUnavailable.
func (s *Store) SettledAlerts(ctx context.Context, limit int) ([]items.Alert, error) {
	delivered := bson.D{{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{items.AlertSent, items.AlertEscalated}}}}}
	cur, err := s.alerts().Find(ctx, delivered, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, unavailable("find settled alerts", err)
	}
	defer cur.Close(ctx)
	var out []items.Alert
	page := make([]alertDoc, 0, settledAlertsPage)
	flush := func() error {
		ids := bson.A{}
		for _, d := range page {
			ids = append(ids, itemID(d.Tenant, d.Key))
		}
		icur, err := s.items.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
			options.Find().SetProjection(bson.D{{Key: "needs_person", Value: 1}, {Key: "attempt", Value: 1}}))
		if err != nil {
			return unavailable("find settled alerts' items", err)
		}
		var found []struct {
			ID          string `bson:"_id"`
			NeedsPerson bool   `bson:"needs_person"`
			Attempt     int    `bson:"attempt"`
		}
		if err := icur.All(ctx, &found); err != nil {
			return unavailable("find settled alerts' items", err)
		}
		waiting := map[string]int{} // item id → the attempt it waits for a person in
		for _, f := range found {
			if f.NeedsPerson {
				waiting[f.ID] = f.Attempt
			}
		}
		for _, d := range page {
			if attempt, ok := waiting[itemID(d.Tenant, d.Key)]; (!ok || attempt != d.Attempt) && len(out) < limit {
				out = append(out, d.alert())
			}
		}
		page = page[:0]
		return nil
	}
	for len(out) < limit && cur.Next(ctx) {
		var d alertDoc
		if err := cur.Decode(&d); err != nil {
			return nil, unavailable("find settled alerts", err)
		}
		if page = append(page, d); len(page) == settledAlertsPage {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := cur.Err(); err != nil {
		return nil, unavailable("find settled alerts", err)
	}
	if len(page) > 0 && len(out) < limit {
		if err := flush(); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b items.Alert) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Key, b.Key))
	})
	return out, nil
}

// settledAlertsPage is how many open delivered alerts SettledAlerts checks against their items per query.
const settledAlertsPage = 200

// ListItems returns one page of the tenant's items matching p, newest change first. Returns an
// invalid_request error for a cursor it did not make, ErrUnavailable.
func (s *Store) ListItems(ctx context.Context, p items.ListParams) (items.ItemPage, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = items.DefaultListLimit
	}
	limit = min(limit, items.MaxListLimit)
	if err := p.CheckOrder(); err != nil {
		return items.ItemPage{}, err
	}
	filter := bson.D{{Key: "tenant", Value: p.Tenant}}
	if len(p.States) > 0 {
		filter = append(filter, bson.E{Key: "state", Value: bson.D{{Key: "$in", Value: p.States}}})
	}
	if p.NeedsPerson != nil {
		filter = append(filter, bson.E{Key: "needs_person", Value: *p.NeedsPerson})
	}
	for _, f := range []struct{ name, value string }{{"destination", p.Destination}, {"workflow", p.Workflow}, {"batch_id", p.BatchID}, {"execution_id", p.ExecutionID}, {"reference", p.Reference}} {
		if f.value != "" {
			filter = append(filter, bson.E{Key: f.name, Value: f.value})
		}
	}
	if p.ChangedBefore != nil {
		filter = append(filter, bson.E{Key: "updated_at", Value: bson.D{{Key: "$lte", Value: *p.ChangedBefore}}})
	}
	conds := []bson.D{filter}
	if p.Owner != "" {
		// The owner a request named, or one an alert about the item went to.
		// (A find rather than distinct: FerretDB refuses distinct with the driver's maxTimeMS.)
		cur, err := s.alerts().Find(ctx, bson.D{{Key: "tenant", Value: p.Tenant}, {Key: "$or", Value: bson.A{
			bson.D{{Key: "owner", Value: p.Owner}},
			bson.D{{Key: "escalate_to", Value: p.Owner}, {Key: "status", Value: items.AlertEscalated}},
		}}}, options.Find().SetProjection(bson.D{{Key: "key", Value: 1}}))
		if err != nil {
			return items.ItemPage{}, unavailable("list items", err)
		}
		var docs []alertDoc
		if err := cur.All(ctx, &docs); err != nil {
			return items.ItemPage{}, unavailable("list items", err)
		}
		alerted := []string{}
		for _, d := range docs {
			if !slices.Contains(alerted, d.Key) {
				alerted = append(alerted, d.Key)
			}
		}
		conds = append(conds, bson.D{{Key: "$or", Value: bson.A{
			bson.D{{Key: "owner", Value: p.Owner}},
			bson.D{{Key: "key", Value: bson.D{{Key: "$in", Value: alerted}}}},
		}}})
	}
	if p.Order == items.ListByNeedsPersonSince {
		if p.Cursor != "" {
			c, err := items.DecodeSinceCursor(p.Cursor)
			if err != nil {
				return items.ItemPage{}, err
			}
			conds = append(conds, afterSince(c))
		}
		return s.listPage(ctx, and(conds...), limit, bySince)
	}
	if p.Cursor != "" {
		c, err := items.DecodeListCursor(p.Cursor)
		if err != nil {
			return items.ItemPage{}, err
		}
		conds = append(conds, bson.D{{Key: "$or", Value: bson.A{
			bson.D{{Key: "updated_at", Value: bson.D{{Key: "$lt", Value: c.UpdatedAt}}}},
			bson.D{{Key: "updated_at", Value: c.UpdatedAt}, {Key: "key", Value: bson.D{{Key: "$lt", Value: c.Key}}}},
		}}})
	}
	return s.listPage(ctx, and(conds...), limit, byChange)
}

// afterSince is the filter of a page by needs_person_since that continues after c. A null or missing
// needs_person_since sorts before every time, and a comparison with a time never matches it.
func afterSince(c items.SinceCursor) bson.D {
	if c.Since == nil {
		return bson.D{{Key: "$or", Value: bson.A{
			bson.D{{Key: "needs_person_since", Value: nil}, {Key: "key", Value: bson.D{{Key: "$gt", Value: c.Key}}}},
			bson.D{{Key: "needs_person_since", Value: bson.D{{Key: "$ne", Value: nil}}}},
		}}}
	}
	return bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "needs_person_since", Value: bson.D{{Key: "$gt", Value: *c.Since}}}},
		bson.D{{Key: "needs_person_since", Value: *c.Since}, {Key: "key", Value: bson.D{{Key: "$gt", Value: c.Key}}}},
	}}}
}

// listOrder is the sort of a list, and the cursor after a listed document (decoded, or only its raw
// top-level fields when it cannot be decoded; ok false when even those cannot be read).
type listOrder struct {
	sort   bson.D
	cursor func(d *itemDoc, raw bson.Raw) (cursor string, ok bool)
}

var (
	byChange = listOrder{sort: bson.D{{Key: "updated_at", Value: -1}, {Key: "key", Value: -1}},
		cursor: func(d *itemDoc, raw bson.Raw) (string, bool) {
			if d != nil {
				return items.ListCursor{UpdatedAt: d.UpdatedAt.UTC(), Key: d.Key}.Encode(), true
			}
			key, okKey := raw.Lookup("key").StringValueOK()
			at, okAt := raw.Lookup("updated_at").DateTimeOK()
			return items.ListCursor{UpdatedAt: time.UnixMilli(at).UTC(), Key: key}.Encode(), okKey && okAt
		}}
	bySince = listOrder{sort: bson.D{{Key: "needs_person_since", Value: 1}, {Key: "key", Value: 1}},
		cursor: func(d *itemDoc, raw bson.Raw) (string, bool) {
			if d != nil {
				return items.SinceCursor{Since: utcPtr(d.NeedsPersonSince), Key: d.Key}.Encode(), true
			}
			key, okKey := raw.Lookup("key").StringValueOK()
			c := items.SinceCursor{Key: key}
			v, err := raw.LookupErr("needs_person_since")
			switch {
			case err != nil || v.Type == bson.TypeNull:
			case v.Type == bson.TypeDateTime:
				t := time.UnixMilli(v.DateTime()).UTC()
				c.Since = &t
			default:
				return "", false
			}
			return c.Encode(), okKey
		}}
)

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// listPage reads up to limit+1 items of a list in the given order, and makes its page. A document that
// cannot be decoded into an item does not fail the list (one corrupt item would hide every other from the
// operator): it is named in the page's Unreadable and keeps its place, so the cursor goes on past it, also
// when it is the page's last; its top-level key and the order's field, read on their own, give that place.
// Only a document without even those fails the list.
func (s *Store) listPage(ctx context.Context, filter bson.D, limit int, order listOrder) (items.ItemPage, error) {
	cur, err := s.items.Find(ctx, filter, options.Find().SetSort(order.sort).SetLimit(int64(limit+1)))
	if err != nil {
		return items.ItemPage{}, unavailable("list items", err)
	}
	defer cur.Close(ctx)
	page := items.ItemPage{Items: []*items.Item{}}
	n := 0
	last := ""
	for cur.Next(ctx) {
		if n == limit {
			page.NextCursor = last
			break
		}
		n++
		var d itemDoc
		if err := cur.Decode(&d); err != nil {
			c, ok := order.cursor(nil, cur.Current)
			if !ok {
				return items.ItemPage{}, unavailable("list items", err)
			}
			key, _ := cur.Current.Lookup("key").StringValueOK()
			page.Unreadable = append(page.Unreadable, key)
			last = c
			continue
		}
		last, _ = order.cursor(&d, nil)
		page.Items = append(page.Items, d.item())
	}
	if err := cur.Err(); err != nil {
		return items.ItemPage{}, unavailable("list items", err)
	}
	return page, nil
}

// NeedsPersonCount returns how many of the tenant's items need a person, from the kept counts (one
// document per destination and state; see Stats for how exact they are): the console's queue counts its
// pages by it. Returns ErrUnavailable.
func (s *Store) NeedsPersonCount(ctx context.Context, tenant string) (int, error) {
	cur, err := s.countsColl().Find(ctx, bson.D{{Key: "tenant", Value: tenant}, {Key: "needs_person", Value: true}},
		options.Find().SetProjection(bson.D{{Key: "items", Value: 1}}))
	if err != nil {
		return 0, unavailable("count items needing a person", err)
	}
	var docs []countsDoc
	if err := cur.All(ctx, &docs); err != nil {
		return 0, unavailable("count items needing a person", err)
	}
	n := 0
	for _, d := range docs {
		n += d.Counts.Items
	}
	return n, nil
}

// AddCounter adds delta to a named counter of a tenant and destination. Returns ErrUnavailable.
func (s *Store) AddCounter(ctx context.Context, tenant, destination, name string, delta int) error {
	_, err := s.counters().UpdateOne(ctx, bson.D{{Key: "_id", Value: strings.Join([]string{tenant, destination, name}, idSeparator)}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "value", Value: delta}}},
			{Key: "$setOnInsert", Value: bson.D{{Key: "tenant", Value: tenant}, {Key: "destination", Value: destination}, {Key: "name", Value: name}}}},
		options.UpdateOne().SetUpsert(true))
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return unavailable("add counter", err)
	}
	if mongo.IsDuplicateKeyError(err) {
		// Two first increments raced on the upsert: the loser's increment goes to the document the winner made.
		return s.AddCounter(ctx, tenant, destination, name, delta)
	}
	return nil
}
