// Package batches serves many items in one call: a workflow node usually handles a batch of items, and
// one HTTP call per batch is what n8n and Make builders want.
//
// Every item of a batch is still decided on its own key, exactly as a single before-write would decide it:
// the unit of idempotency is one business effect per item, never the batch (seed 000: "a batch-level key
// for item-level writes … may either duplicate every item or suppress items that never ran"). The batch id
// is only a grouping label. An item belongs to the batch that first registered it (prepare or
// before-write), at that batch's index; attempts from later batches are recorded in its history, and a
// batch's status lists the items it registered.
package batches

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/replaysafe/companion/items"
)

// MaxItems is the most items one batch request may carry.
const MaxItems = 500

// MaxBatchIDLength is the longest batch id, in characters.
const MaxBatchIDLength = 200

// Store is what batch status needs from the ledger's store, beyond items.Store.
type Store interface {
	// BatchItems returns up to limit items of tenant whose batch (the one that first registered them) is
	// batchID, ordered by batch index and then key; items without a batch index come first. With afterKey
	// set it starts after the item at position (afterIndex, afterKey), where a nil afterIndex is the
	// position of an item without a batch index. Returns ErrUnavailable when the store cannot be read.
	BatchItems(ctx context.Context, tenant, batchID string, afterIndex *int, afterKey string, limit int) ([]*items.Item, error)

	// BatchCounts returns how many items of tenant's batch batchID are in each state; states without items
	// are absent. An item in flight whose lease ended at or before now counts as unknown, which is what
	// the next reader will record it as. Returns ErrUnavailable when the store cannot be read.
	BatchCounts(ctx context.Context, tenant, batchID string, now time.Time) (map[items.State]int, error)
}

// ErrNoBatchQueries is returned by Status when the service was built over a store that does not answer
// the batch queries: a wiring mistake, not a condition of the request.
var ErrNoBatchQueries = errors.New("batches: the ledger's store does not answer the batch queries")

// Service decides, prepares and reports batches of items through the ledger.
type Service struct {
	ledger *items.Ledger
	store  Store
}

// New returns the batch service over ledger. store is the ledger's store, seen through the batch queries;
// when it is nil (a store without them) every call but Status works, and Status returns ErrNoBatchQueries.
func New(ledger *items.Ledger, store Store) *Service {
	return &Service{ledger: ledger, store: store}
}

// Batch is a batch before-write or prepare request: the before-write requests of its items, without a
// batch id of their own. The service fills in each item's Tenant and BatchID from the batch, and its
// BatchIndex with its position where the item names none.
type Batch struct {
	Tenant  string
	BatchID string
	Items   []items.BeforeWriteParams
}

// ItemAnswer is the before-write answer to one item of a batch.
type ItemAnswer struct {
	items.Answer
	// BatchIndex is the item's index in this request (the one it named, else its position). An item keeps
	// the index of the batch that first registered it; the batch status shows that one.
	BatchIndex int `json:"batch_index"`
}

// DecisionCounts counts the decisions of a batch before-write.
type DecisionCounts struct {
	Proceed   int `json:"proceed"`
	Skip      int `json:"skip"`
	Conflict  int `json:"conflict"`
	Reconcile int `json:"reconcile"`
}

// BeforeWriteResult is the answer to a batch before-write.
type BeforeWriteResult struct {
	BatchID string         `json:"batch_id"`
	Items   []ItemAnswer   `json:"items"`
	Counts  DecisionCounts `json:"counts"`
}

// BeforeWrite decides every item of the batch in order, each against the state the earlier ones left: a
// key repeated in the batch is claimed once, and its repeats get skip/in_progress (or conflict when their
// payload differs). The batch is checked whole first: an invalid item refuses the batch with an
// invalid_request *items.Error naming it ("items[3].key"), and nothing is written. Returns ErrUnavailable
// when the claims cannot be durably recorded; then no item proceeds.
func (s *Service) BeforeWrite(ctx context.Context, b Batch) (BeforeWriteResult, error) {
	ps, err := s.check(b)
	if err != nil {
		return BeforeWriteResult{}, err
	}
	answers, err := s.ledger.BeforeWriteMany(ctx, b.Tenant, ps)
	if err != nil {
		return BeforeWriteResult{}, err
	}
	res := BeforeWriteResult{BatchID: b.BatchID, Items: make([]ItemAnswer, len(answers))}
	for i, a := range answers {
		res.Items[i] = ItemAnswer{Answer: a, BatchIndex: *ps[i].BatchIndex}
		switch a.Decision {
		case items.Proceed:
			res.Counts.Proceed++
		case items.Skip:
			res.Counts.Skip++
		case items.Conflict:
			res.Counts.Conflict++
		case items.Reconcile:
			res.Counts.Reconcile++
		}
	}
	return res, nil
}

// PrepareCounts counts what a batch preparation did: items it registered as prepared, and items that
// existed already and were left alone (a key repeated in the batch counts as existing after its first).
type PrepareCounts struct {
	Prepared int `json:"prepared"`
	Existing int `json:"existing"`
}

// PrepareResult is the answer to a batch preparation.
type PrepareResult struct {
	BatchID string        `json:"batch_id"`
	Counts  PrepareCounts `json:"counts"`
}

// Prepare registers the batch's items that do not exist yet as prepared, with no claim, so an operator
// sees the items a dying workflow never reached; existing items are left alone. A later before-write
// claims a prepared item as proceed/new. It checks the batch whole first, as BeforeWrite does.
func (s *Service) Prepare(ctx context.Context, b Batch) (PrepareResult, error) {
	ps, err := s.check(b)
	if err != nil {
		return PrepareResult{}, err
	}
	keys := make([]string, len(ps))
	for i, p := range ps {
		keys[i] = p.Key
	}
	s.ledger.KeyFingerprints(ps)
	now := s.ledger.Now()
	registered := make([]bool, len(ps))
	_, err = s.ledger.TransitionMany(ctx, b.Tenant, keys, func(i int, cur *items.Item) (*items.Item, error) {
		registered[i] = false
		if cur != nil {
			return nil, nil
		}
		it, err := items.NewPrepared(ps[i], now)
		if err != nil {
			return nil, err
		}
		registered[i] = true
		return it, nil
	})
	if err != nil {
		return PrepareResult{}, err
	}
	res := PrepareResult{BatchID: b.BatchID}
	for _, r := range registered {
		if r {
			res.Counts.Prepared++
		} else {
			res.Counts.Existing++
		}
	}
	return res, nil
}

// check returns the items' before-write requests completed from the batch, or the invalid_request error
// naming the first problem.
func (s *Service) check(b Batch) ([]items.BeforeWriteParams, error) {
	if b.Tenant == "" {
		return nil, items.Invalid("tenant", "is required")
	}
	if err := CheckBatchID(b.BatchID); err != nil {
		return nil, err
	}
	if len(b.Items) == 0 || len(b.Items) > MaxItems {
		return nil, items.Invalid("items", fmt.Sprintf("must hold 1-%d items", MaxItems))
	}
	ps := make([]items.BeforeWriteParams, len(b.Items))
	positions := make([]int, len(b.Items)) // the indexes of items that name none, in one allocation
	for i, p := range b.Items {
		p.Tenant, p.BatchID = b.Tenant, b.BatchID
		if p.BatchIndex == nil {
			positions[i] = i
			p.BatchIndex = &positions[i]
		} else if *p.BatchIndex < 0 {
			return nil, ItemError(i, items.Invalid("batch_index", "must be 0 or more"))
		}
		if err := s.ledger.CheckBeforeWrite(p); err != nil {
			return nil, ItemError(i, err)
		}
		ps[i] = p
	}
	return ps, nil
}

// CheckBatchID returns an invalid_request error when id cannot name a new batch: it must be 1-200
// characters. Any text is allowed because builders compose it from execution ids and node names
// ("exec-1234:Send reminders").
func CheckBatchID(id string) error {
	if id == "" || utf8.RuneCountInString(id) > MaxBatchIDLength {
		return items.Invalid("batch_id", fmt.Sprintf("must be 1-%d characters", MaxBatchIDLength))
	}
	return nil
}

// ItemError returns err about item i of a batch request: the fields it names, and its message, are
// prefixed with "items[i]." so the caller knows which item to fix. Errors other than *items.Error are
// returned as they are.
func ItemError(i int, err error) error {
	var e *items.Error
	if !errors.As(err, &e) {
		return err
	}
	prefix := fmt.Sprintf("items[%d].", i)
	out := &items.Error{Code: e.Code, Message: prefix + e.Message, Err: e.Err}
	for _, f := range e.Fields {
		out.Fields = append(out.Fields, items.FieldProblem{Field: prefix + f.Field, Problem: f.Problem})
	}
	if len(out.Fields) == 0 {
		out.Message = fmt.Sprintf("items[%d]: %s", i, e.Message)
	}
	return out
}

// Reports is a batch after-write request: the after-write reports of one tenant's items.
type Reports struct {
	Tenant string
	Items  []items.AfterWriteParams
}

// ItemReport is the result of one report of a batch after-write: the recorded report, or the error that
// refused this report alone.
type ItemReport struct {
	Key string `json:"key"`
	*items.Report
	Error *ReportError `json:"error,omitempty"`
}

// ReportError says why one report of a batch after-write was refused: not_found (no item for the key) or
// conflict (the claim is not one of the item's).
type ReportError struct {
	Code    items.Code `json:"code"`
	Message string     `json:"message"`
}

// AfterWriteResult is the answer to a batch after-write.
type AfterWriteResult struct {
	Items []ItemReport `json:"items"`
}

// AfterWrite records the reports in order, as single after-writes would. The request is checked whole
// first: an invalid report refuses it with an invalid_request *items.Error naming the item, and nothing is
// written. A report about a missing key or with an unknown claim is answered inline, in its own slot,
// without affecting the others. Returns ErrUnavailable when the reports cannot be durably recorded; the
// caller repeats the request then (identical repeats are recorded as unchanged).
func (s *Service) AfterWrite(ctx context.Context, r Reports) (AfterWriteResult, error) {
	if r.Tenant == "" {
		return AfterWriteResult{}, items.Invalid("tenant", "is required")
	}
	if len(r.Items) == 0 || len(r.Items) > MaxItems {
		return AfterWriteResult{}, items.Invalid("items", fmt.Sprintf("must hold 1-%d items", MaxItems))
	}
	ps := make([]items.AfterWriteParams, len(r.Items))
	for i, p := range r.Items {
		p.Tenant = r.Tenant
		if err := items.CheckAfterWrite(p); err != nil {
			return AfterWriteResult{}, ItemError(i, err)
		}
		ps[i] = p
	}
	reports, refused, err := s.ledger.AfterWriteMany(ctx, r.Tenant, ps)
	if err != nil {
		return AfterWriteResult{}, err
	}
	res := AfterWriteResult{Items: make([]ItemReport, len(ps))}
	for i := range ps {
		res.Items[i] = ItemReport{Key: ps[i].Key}
		switch {
		case refused[i] == nil:
			res.Items[i].Report = &reports[i]
		case items.ErrorCode(refused[i]) == items.CodeNotFound:
			res.Items[i].Error = &ReportError{Code: items.CodeNotFound, Message: "no item with this key"}
		default:
			res.Items[i].Error = &ReportError{Code: items.ErrorCode(refused[i]), Message: userMessage(refused[i])}
		}
	}
	return res, nil
}

// userMessage returns the message of a ledger error that is safe to show to the caller.
func userMessage(err error) string {
	var e *items.Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}
