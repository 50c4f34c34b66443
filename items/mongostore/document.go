package mongostore

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/replaysafe/companion/items"
)

// idSeparator joins tenant and key into an item's _id. Neither may contain it (checkID), so the _id
// names exactly one pair; the key rules exclude it anyway, and a tenant is a configured name.
const idSeparator = "\x00"

// itemID returns the _id of the item of tenant and key: "tenant\x00key". A string _id rather than a
// {tenant, key} subdocument: MongoDB finds either through its _id index, but FerretDB, the test server,
// looks up only string _ids without scanning the collection (five times faster at a hundred items).
func itemID(tenant, key string) string { return tenant + idSeparator + key }

// checkID refuses a tenant or key that would make an ambiguous _id.
func checkID(tenant, key string) error {
	if strings.Contains(tenant, idSeparator) || strings.Contains(key, idSeparator) {
		return fmt.Errorf("mongostore: tenant %q or key %q contains a NUL byte", tenant, key)
	}
	return nil
}

// itemDoc is an item as the items collection holds it. The domain Item carries no bson tags: this type
// names the stored fields, so the document layout changes only here.
//
// Every field is written on every change (no omitempty): a transition is a $set of the whole document, and
// a field left out of a $set would keep its old value. Fields the operator and sweeper queries filter on
// (tenant, key, state, lease_expires_at, updated_at, batch_id, batch_index, execution_id, needs_person,
// reference, sweep_candidate) are
// top level, where the indexes of ensureIndexes can cover them.
//
// MongoDB keeps times to the millisecond; toDoc truncates every time to the millisecond so that the item a
// transition returns is the item a later Get reads.
type itemDoc struct {
	// ID is set on insert and left empty in a $set (_id cannot change).
	ID string `bson:"_id,omitempty"`

	Tenant            string           `bson:"tenant"`
	Key               string           `bson:"key"`
	Workflow          string           `bson:"workflow"`
	Object            string           `bson:"object"`
	Action            string           `bson:"action"`
	Sequence          string           `bson:"sequence"`
	Destination       string           `bson:"destination"`
	Dedupe            items.Dedupe     `bson:"dedupe"`
	Reference         string           `bson:"reference"`
	BatchID           string           `bson:"batch_id"`
	BatchIndex        *int             `bson:"batch_index"`
	ExecutionID       string           `bson:"execution_id"`
	Owner             string           `bson:"owner"`
	Fingerprint       string           `bson:"fingerprint"`
	State             items.State      `bson:"state"`
	Attempt           int              `bson:"attempt"`
	ExtraAttempts     int              `bson:"extra_attempts"`
	Claim             string           `bson:"claim"`
	LeaseExpiresAt    *time.Time       `bson:"lease_expires_at"`
	Retryable         bool             `bson:"retryable"`
	RetryAt           *time.Time       `bson:"retry_at"`
	ExternalID        string           `bson:"external_id"`
	ReceiverRequestID string           `bson:"receiver_request_id"`
	Result            *string          `bson:"result"` // the stored JSON text, byte for byte; null when none
	FailureClass      items.ErrorClass `bson:"failure_class"`
	FailureMessage    string           `bson:"failure_message"`
	HTTPStatus        int              `bson:"http_status"`
	Cause             string           `bson:"cause"`
	LookupFailed      bool             `bson:"lookup_failed"`
	NeedsPerson       bool             `bson:"needs_person"`
	NeedsPersonCause  string           `bson:"needs_person_cause"`
	NeedsPersonSince  *time.Time       `bson:"needs_person_since"`
	DuplicateEffect   bool             `bson:"duplicate_effect"`
	SweepCandidate    bool             `bson:"sweep_candidate"` // items.Facts.SweepCandidate; absent on documents of an earlier build (refreshSweepCandidates)
	AlertStatus       string           `bson:"alert_status"`
	Attempts          []attemptDoc     `bson:"attempts"`
	History           []eventDoc       `bson:"history"`
	// HistoryDropped is written whatever its value (no omitempty): an update is a $set of every field,
	// and an undo's $set of the document it replaced must put a 0 back.
	HistoryDropped int            `bson:"history_dropped"`
	Resolution     *resolutionDoc `bson:"resolution"`
	Version        int64          `bson:"version"`
	CreatedAt      time.Time      `bson:"created_at"`
	UpdatedAt      time.Time      `bson:"updated_at"`

	// Rev is a random token each write of the document sets anew (newRev). A guarded write names it beside
	// the version, so that a guard decided on one document cannot match another that happens to reach the
	// same version: after a key's item is removed (an undo, retention) and created again, its version starts
	// over, its rev does not repeat. Empty on documents of an earlier build, which the guards match by
	// version and state as before.
	Rev string `bson:"rev,omitempty"`
	// Tombstone marks the document left where an item was taken back or removed: it holds no item (Get
	// answers not found, no list or query finds it, as it has no tenant), only _id, version, rev, updated_at
	// and the kept counts still due (CountDue). It keeps the _id taken, so that an insert of the removed item
	// that is still on its way (a write whose answer was lost) fails instead of bringing the claim back, and
	// so that a new item of the key continues its version. Once its counts are applied and it is an hour
	// old, the repair pass deletes it (counts.go).
	Tombstone bool `bson:"tombstone,omitempty"`
	// CountDue holds the changes this document's writes made to the kept counts and the series that
	// item_counts and series may not hold yet: see EXACTNESS in counts.go and series.go. A write inserts it with the document or appends to it ($push);
	// it is never part of a $set, so that a write decided on a stale read cannot bring back entries that
	// were applied and removed meanwhile.
	CountDue []dueEntry `bson:"count_due,omitempty"`
}

// live returns d when it holds an item, nil for no document or a tombstone.
func live(d *itemDoc) *itemDoc {
	if d == nil || d.Tombstone {
		return nil
	}
	return d
}

type attemptDoc struct {
	Number       int              `bson:"number"`
	Claim        string           `bson:"claim"`
	ExecutionID  string           `bson:"execution_id"`
	BatchID      string           `bson:"batch_id"`
	Dedupe       items.Dedupe     `bson:"dedupe"`
	Fingerprint  string           `bson:"fingerprint"`
	StartedAt    time.Time        `bson:"started_at"`
	EndedAt      *time.Time       `bson:"ended_at"`
	Outcome      items.State      `bson:"outcome"`
	FailureClass items.ErrorClass `bson:"failure_class"`
	HTTPStatus   int              `bson:"http_status"`
	Reports      []string         `bson:"reports"`
}

type eventDoc struct {
	At          time.Time        `bson:"at"`
	Kind        string           `bson:"kind"`
	Attempt     int              `bson:"attempt"`
	ExecutionID string           `bson:"execution_id"`
	BatchID     string           `bson:"batch_id"`
	Decision    items.Decision   `bson:"decision"`
	Reason      items.Reason     `bson:"reason"`
	From        items.State      `bson:"from"`
	To          items.State      `bson:"to"`
	Outcome     string           `bson:"outcome"`
	ErrorClass  items.ErrorClass `bson:"error_class"`
	HTTPStatus  int              `bson:"http_status"`
	ExternalID  string           `bson:"external_id"`
	Fingerprint string           `bson:"fingerprint"`
	By          string           `bson:"by"`
	Note        string           `bson:"note"`
}

type resolutionDoc struct {
	Outcome    string    `bson:"outcome"`
	Evidence   string    `bson:"evidence"`
	ExternalID string    `bson:"external_id"`
	By         string    `bson:"by"`
	At         time.Time `bson:"at"`
	// CurrentAttempt: the resolution was made in the item's current attempt (its resolve event's attempt is
	// the item's attempt), as this build last wrote the document. It is not part of the domain's
	// Resolution: it says which attempt a stored sweep_candidate was derived for. An earlier build's write
	// of the document $sets the resolution it knows, without this field, so true is this build's word on
	// the document as it now is: the sweep candidates' and retention's filters trust a sweep_candidate
	// false of an acknowledged item only with it (unacknowledged).
	CurrentAttempt bool `bson:"current_attempt"`
}

// msTime is t as MongoDB stores it: millisecond precision, UTC.
func msTime(t time.Time) time.Time { return t.Truncate(time.Millisecond).UTC() }

func msTimePtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := msTime(*t)
	return &v
}

// toDoc converts an item into its document, without _id; f is the item's facts (it.Facts()), which the
// caller derives once per write and also counts (counts.go).
func toDoc(it *items.Item, f items.Facts) itemDoc {
	d := itemDoc{
		Tenant:            it.Tenant,
		Key:               it.Key,
		Workflow:          it.Workflow,
		Object:            it.Object,
		Action:            it.Action,
		Sequence:          it.Sequence,
		Destination:       it.Destination,
		Dedupe:            it.Dedupe,
		Reference:         it.Reference,
		BatchID:           it.BatchID,
		ExecutionID:       it.ExecutionID,
		Owner:             it.Owner,
		Fingerprint:       it.Fingerprint,
		State:             it.State,
		Attempt:           it.Attempt,
		ExtraAttempts:     it.ExtraAttempts,
		Claim:             it.Claim,
		LeaseExpiresAt:    msTimePtr(it.LeaseExpiresAt),
		Retryable:         it.Retryable,
		RetryAt:           msTimePtr(it.RetryAt),
		ExternalID:        it.ExternalID,
		ReceiverRequestID: it.ReceiverRequestID,
		FailureClass:      it.FailureClass,
		FailureMessage:    it.FailureMessage,
		HTTPStatus:        it.HTTPStatus,
		Cause:             it.Cause,
		LookupFailed:      it.LookupFailed,
		NeedsPerson:       it.NeedsPerson,
		NeedsPersonCause:  it.NeedsPersonCause,
		NeedsPersonSince:  msTimePtr(it.NeedsPersonSince),
		DuplicateEffect:   it.DuplicateEffect,
		SweepCandidate:    f.SweepCandidate,
		AlertStatus:       it.AlertStatus,
		HistoryDropped:    it.HistoryDropped,
		Version:           it.Version,
		CreatedAt:         msTime(it.CreatedAt),
		UpdatedAt:         msTime(it.UpdatedAt),
	}
	if it.BatchIndex != nil {
		v := *it.BatchIndex
		d.BatchIndex = &v
	}
	if it.Result != nil {
		s := string(it.Result)
		d.Result = &s
	}
	if it.Attempts != nil {
		d.Attempts = make([]attemptDoc, len(it.Attempts))
		for i, a := range it.Attempts {
			d.Attempts[i] = attemptDoc{
				Number:       a.Number,
				Claim:        a.Claim,
				ExecutionID:  a.ExecutionID,
				BatchID:      a.BatchID,
				Dedupe:       a.Dedupe,
				Fingerprint:  a.Fingerprint,
				StartedAt:    msTime(a.StartedAt),
				EndedAt:      msTimePtr(a.EndedAt),
				Outcome:      a.Outcome,
				FailureClass: a.FailureClass,
				HTTPStatus:   a.HTTPStatus,
				Reports:      append([]string(nil), a.Reports...),
			}
		}
	}
	if it.History != nil {
		d.History = make([]eventDoc, len(it.History))
		for i, e := range it.History {
			d.History[i] = eventDoc{
				At:          msTime(e.At),
				Kind:        e.Kind,
				Attempt:     e.Attempt,
				ExecutionID: e.ExecutionID,
				BatchID:     e.BatchID,
				Decision:    e.Decision,
				Reason:      e.Reason,
				From:        e.From,
				To:          e.To,
				Outcome:     e.Outcome,
				ErrorClass:  e.ErrorClass,
				HTTPStatus:  e.HTTPStatus,
				ExternalID:  e.ExternalID,
				Fingerprint: e.Fingerprint,
				By:          e.By,
				Note:        e.Note,
			}
		}
	}
	if r := it.Resolution; r != nil {
		d.Resolution = &resolutionDoc{Outcome: r.Outcome, Evidence: r.Evidence, ExternalID: r.ExternalID, By: r.By, At: msTime(r.At),
			CurrentAttempt: it.ResolveOfCurrentAttempt() != nil}
	}
	return d
}

// item converts a stored document back into the domain's item.
func (d *itemDoc) item() *items.Item {
	it := &items.Item{
		Tenant:            d.Tenant,
		Key:               d.Key,
		Workflow:          d.Workflow,
		Object:            d.Object,
		Action:            d.Action,
		Sequence:          d.Sequence,
		Destination:       d.Destination,
		Dedupe:            d.Dedupe,
		Reference:         d.Reference,
		BatchID:           d.BatchID,
		ExecutionID:       d.ExecutionID,
		Owner:             d.Owner,
		Fingerprint:       d.Fingerprint,
		State:             d.State,
		Attempt:           d.Attempt,
		ExtraAttempts:     d.ExtraAttempts,
		Claim:             d.Claim,
		LeaseExpiresAt:    msTimePtr(d.LeaseExpiresAt),
		Retryable:         d.Retryable,
		RetryAt:           msTimePtr(d.RetryAt),
		ExternalID:        d.ExternalID,
		ReceiverRequestID: d.ReceiverRequestID,
		FailureClass:      d.FailureClass,
		FailureMessage:    d.FailureMessage,
		HTTPStatus:        d.HTTPStatus,
		Cause:             d.Cause,
		LookupFailed:      d.LookupFailed,
		NeedsPerson:       d.NeedsPerson,
		NeedsPersonCause:  d.NeedsPersonCause,
		NeedsPersonSince:  msTimePtr(d.NeedsPersonSince),
		DuplicateEffect:   d.DuplicateEffect,
		AlertStatus:       d.AlertStatus,
		HistoryDropped:    d.HistoryDropped,
		Version:           d.Version,
		CreatedAt:         msTime(d.CreatedAt),
		UpdatedAt:         msTime(d.UpdatedAt),
	}
	if d.BatchIndex != nil {
		v := *d.BatchIndex
		it.BatchIndex = &v
	}
	if d.Result != nil {
		it.Result = json.RawMessage(*d.Result)
	}
	if d.Attempts != nil {
		it.Attempts = make([]items.Attempt, len(d.Attempts))
		for i, a := range d.Attempts {
			it.Attempts[i] = items.Attempt{
				Number:       a.Number,
				Claim:        a.Claim,
				ExecutionID:  a.ExecutionID,
				BatchID:      a.BatchID,
				Dedupe:       a.Dedupe,
				Fingerprint:  a.Fingerprint,
				StartedAt:    msTime(a.StartedAt),
				EndedAt:      msTimePtr(a.EndedAt),
				Outcome:      a.Outcome,
				FailureClass: a.FailureClass,
				HTTPStatus:   a.HTTPStatus,
			}
			if len(a.Reports) > 0 {
				it.Attempts[i].Reports = append([]string(nil), a.Reports...)
			}
		}
	}
	if d.History != nil {
		it.History = make([]items.Event, len(d.History))
		for i, e := range d.History {
			it.History[i] = items.Event{
				At:          msTime(e.At),
				Kind:        e.Kind,
				Attempt:     e.Attempt,
				ExecutionID: e.ExecutionID,
				BatchID:     e.BatchID,
				Decision:    e.Decision,
				Reason:      e.Reason,
				From:        e.From,
				To:          e.To,
				Outcome:     e.Outcome,
				ErrorClass:  e.ErrorClass,
				HTTPStatus:  e.HTTPStatus,
				ExternalID:  e.ExternalID,
				Fingerprint: e.Fingerprint,
				By:          e.By,
				Note:        e.Note,
			}
		}
	}
	if r := d.Resolution; r != nil {
		it.Resolution = &items.Resolution{Outcome: r.Outcome, Evidence: r.Evidence, ExternalID: r.ExternalID, By: r.By, At: msTime(r.At)}
	}
	return it
}
