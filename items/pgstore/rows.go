package pgstore

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/replaysafe/companion/items"
)

// An item's row: its document (doc) is the whole item, its JSON compressed (doc.go); the other columns
// repeat what the queries select and order by, and the item's facts (items.Facts), derived as the row is
// written. A read decodes the document alone.

// itemRows are the arrays of a write of items, one element per item, in the order of itemWriteColumns;
// seenVersion, seenUpdatedAt and seenXmin, for an update, are the version, the time of change and the
// row version (its xmin) of the state each item was decided on.
type itemRows struct {
	tenant, key                               []string
	version                                   []int64
	updatedAt                                 []time.Time
	needsPersonSince, leaseExpiresAt          []pgtype.Timestamptz
	batchIndex                                []pgtype.Int4
	attempt                                   []int32
	needsPerson, sweepCandidate, alertPending []bool
	state, destination, workflow, owner       []string
	reference, batchID, executionID           []string
	doc                                       [][]byte
	seenVersion                               []int64
	seenUpdatedAt                             []time.Time
	seenXmin                                  []int64
}

// add appends the row of it, whose facts are f and whose document is doc.
func (r *itemRows) add(it *items.Item, f items.Facts, doc []byte) {
	var lease pgtype.Timestamptz
	if it.State == items.StateInFlight && it.LeaseExpiresAt != nil {
		lease = pgtype.Timestamptz{Time: *it.LeaseExpiresAt, Valid: true}
	}
	var since pgtype.Timestamptz
	if f.NeedsPersonSince != nil {
		since = pgtype.Timestamptz{Time: *f.NeedsPersonSince, Valid: true}
	}
	var index pgtype.Int4
	if it.BatchIndex != nil {
		index = pgtype.Int4{Int32: int32(*it.BatchIndex), Valid: true}
	}
	r.tenant, r.key = append(r.tenant, it.Tenant), append(r.key, it.Key)
	r.version, r.updatedAt = append(r.version, it.Version), append(r.updatedAt, it.UpdatedAt)
	r.needsPersonSince, r.leaseExpiresAt, r.batchIndex = append(r.needsPersonSince, since), append(r.leaseExpiresAt, lease), append(r.batchIndex, index)
	r.attempt = append(r.attempt, int32(f.Attempt))
	r.needsPerson, r.sweepCandidate, r.alertPending = append(r.needsPerson, it.NeedsPerson), append(r.sweepCandidate, f.SweepCandidate),
		append(r.alertPending, f.AlertPending)
	r.state, r.destination, r.workflow = append(r.state, string(it.State)), append(r.destination, it.Destination), append(r.workflow, it.Workflow)
	r.owner, r.reference = append(r.owner, it.Owner), append(r.reference, it.Reference)
	r.batchID, r.executionID = append(r.batchID, it.BatchID), append(r.executionID, it.ExecutionID)
	r.doc = append(r.doc, doc)
}

func (r *itemRows) len() int { return len(r.key) }

// args returns the arrays as the statements' arguments ($1 to $19; for an update $20 to $22, the versions,
// times of change and row versions the items were decided on).
func (r *itemRows) args(update bool) []any {
	// The slices of types pgx has no plan of its own for are given as FlatArrays, which it encodes without
	// reflection (a tenth of a batch's encoding otherwise).
	a := []any{r.tenant, r.key, r.version, r.updatedAt, pgtype.FlatArray[pgtype.Timestamptz](r.needsPersonSince),
		pgtype.FlatArray[pgtype.Timestamptz](r.leaseExpiresAt), pgtype.FlatArray[pgtype.Int4](r.batchIndex), r.attempt,
		r.needsPerson, r.sweepCandidate, r.alertPending, r.state, r.destination, r.workflow, r.owner, r.reference,
		r.batchID, r.executionID, pgtype.FlatArray[[]byte](r.doc)}
	if update {
		a = append(a, r.seenVersion, r.seenUpdatedAt, r.seenXmin)
	}
	return a
}

// countRows are the arrays of a change of the kept counts (addCounts), one element per group.
type countRows struct {
	tenant, destination, state              []string
	needsPerson                             []bool
	items, retries, attempted, recoveries   []int64
	resolutions, duplicates, enteredUnknown []int64
	historyDropped, historyDroppedItems     []int64
}

func (r *countRows) add(g items.CountGroup, c items.Counts) {
	r.tenant, r.destination, r.state = append(r.tenant, g.Tenant), append(r.destination, g.Destination), append(r.state, string(g.State))
	r.needsPerson = append(r.needsPerson, g.NeedsPerson)
	r.items, r.retries, r.attempted = append(r.items, int64(c.Items)), append(r.retries, int64(c.Retries)), append(r.attempted, int64(c.Attempted))
	r.recoveries, r.resolutions = append(r.recoveries, int64(c.SameKeyRecoveries)), append(r.resolutions, int64(c.ManualResolutions))
	r.duplicates, r.enteredUnknown = append(r.duplicates, int64(c.DuplicateEffects)), append(r.enteredUnknown, int64(c.EnteredUnknown))
	r.historyDropped = append(r.historyDropped, int64(c.HistoryDropped))
	r.historyDroppedItems = append(r.historyDroppedItems, int64(c.HistoryDroppedItems))
}

func (r *countRows) args() []any {
	return []any{r.tenant, r.destination, r.state, r.needsPerson, r.items, r.retries, r.attempted, r.recoveries, r.resolutions,
		r.duplicates, r.enteredUnknown, r.historyDropped, r.historyDroppedItems}
}
