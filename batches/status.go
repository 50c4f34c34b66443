package batches

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/replaysafe/companion/items"
)

// PageSize is how many items one page of a batch's status holds.
const PageSize = 500

// MaxStoredBatchIDLength is the longest batch id an item can hold: the single before-write accepts batch
// ids up to this length, longer than a batch request's.
const MaxStoredBatchIDLength = 500

// StatusParams asks for one page of a batch's status.
type StatusParams struct {
	Tenant  string
	BatchID string
	// Cursor is the next_cursor of the previous page; empty for the first page.
	Cursor string
	// Limit is the page size; 0 means PageSize. Larger values are cut to PageSize.
	Limit int
}

// StateCounts counts the items of a batch per state.
type StateCounts struct {
	Prepared  int `json:"prepared"`
	InFlight  int `json:"in_flight"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Unknown   int `json:"unknown"`
}

// Total returns the number of items counted.
func (c StateCounts) Total() int { return c.Prepared + c.InFlight + c.Succeeded + c.Failed + c.Unknown }

// StatusItem is one item in a batch's status.
type StatusItem struct {
	Key string `json:"key"`
	// BatchIndex is the item's index in the batch that registered it; null when that request named none.
	BatchIndex *int        `json:"batch_index"`
	State      items.State `json:"state"`
	Attempt    int         `json:"attempt"`
	ExternalID string      `json:"external_id,omitempty"`
	UpdatedAt  time.Time   `json:"updated_at"`
	// NeedsPerson marks an item waiting for a person, NeedsPersonCause says why (the ledger's word), and
	// AlertStatus is its alert's status. They come with the item the page reads (no other query) and are
	// the console's only: API.md fixes GET /v1/batches/{id}'s item fields, and an API client finds a
	// batch's items needing a person with GET /v1/items?batch_id=…&needs_person=true.
	NeedsPerson      bool   `json:"-"`
	NeedsPersonCause string `json:"-"`
	AlertStatus      string `json:"-"`
	// AlertedTo is whom the alert of the item's current attempt went to (items.Item.AlertedTo).
	AlertedTo string `json:"-"`
}

// Status is one page of a batch's status.
type Status struct {
	BatchID string       `json:"batch_id"`
	Counts  StateCounts  `json:"counts"`
	Items   []StatusItem `json:"items"`
	// NextCursor asks for the next page; empty on the last page.
	NextCursor string `json:"next_cursor"`
}

// Status returns the counts per state of the items the batch registered, and one page of those items in
// index order, each key once. An in-flight item on the page whose lease has ended is recorded as unknown
// first (the first reader records an expired lease), and such items elsewhere in the batch are counted as
// unknown. Returns ErrNotFound when the tenant has no item registered by the batch, an invalid_request
// *items.Error for a cursor this service did not issue, and ErrUnavailable.
func (s *Service) Status(ctx context.Context, p StatusParams) (Status, error) {
	// A single before-write may name a batch id longer than a batch request may: any of them can be looked up.
	if p.BatchID == "" || utf8.RuneCountInString(p.BatchID) > MaxStoredBatchIDLength {
		return Status{}, items.Invalid("batch_id", fmt.Sprintf("must be 1-%d characters", MaxStoredBatchIDLength))
	}
	if s.store == nil {
		return Status{}, ErrNoBatchQueries
	}
	limit := p.Limit
	if limit <= 0 || limit > PageSize {
		limit = PageSize
	}
	afterIndex, afterKey, err := decodeCursor(p.Cursor)
	if err != nil {
		return Status{}, err
	}
	// One more than a page tells whether another page follows.
	page, err := s.store.BatchItems(ctx, p.Tenant, p.BatchID, afterIndex, afterKey, limit+1)
	if err != nil {
		return Status{}, err
	}
	st := Status{BatchID: p.BatchID, Items: make([]StatusItem, 0, min(len(page), limit))}
	if len(page) > limit {
		page = page[:limit]
		last := page[limit-1]
		st.NextCursor = encodeCursor(last.BatchIndex, last.Key)
	}
	now := s.ledger.Now()
	for _, it := range page {
		if it.LeaseExpired(now) {
			if it, err = s.ledger.Get(ctx, p.Tenant, it.Key); err != nil {
				return Status{}, err
			}
		}
		st.Items = append(st.Items, StatusItem{Key: it.Key, BatchIndex: it.BatchIndex, State: it.State,
			Attempt: it.Attempt, ExternalID: it.ExternalID, UpdatedAt: it.UpdatedAt,
			NeedsPerson: it.NeedsPerson, NeedsPersonCause: it.NeedsPersonCause, AlertStatus: it.AlertStatus, AlertedTo: it.AlertedTo()})
	}
	// Counted after the page, so the page's recorded expiries are in the counts.
	counts, err := s.store.BatchCounts(ctx, p.Tenant, p.BatchID, now)
	if err != nil {
		return Status{}, err
	}
	st.Counts = StateCounts{Prepared: counts[items.StatePrepared], InFlight: counts[items.StateInFlight],
		Succeeded: counts[items.StateSucceeded], Failed: counts[items.StateFailed], Unknown: counts[items.StateUnknown]}
	if st.Counts.Total() == 0 {
		return Status{}, items.ErrNotFound
	}
	return st, nil
}

// A cursor is the position of the last item of a page, "index:key" ("-:key" for an item without an
// index), base64url-encoded so callers treat it as opaque.
func encodeCursor(index *int, key string) string {
	pos := "-"
	if index != nil {
		pos = strconv.Itoa(*index)
	}
	return base64.RawURLEncoding.EncodeToString([]byte(pos + ":" + key))
}

func decodeCursor(c string) (index *int, key string, err error) {
	if c == "" {
		return nil, "", nil
	}
	bad := items.Invalid("cursor", "is not a cursor this batch status returned")
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, "", bad
	}
	pos, key, ok := strings.Cut(string(raw), ":")
	if !ok || !items.ValidKey(key) {
		return nil, "", bad
	}
	if pos == "-" {
		return nil, key, nil
	}
	n, err := strconv.Atoi(pos)
	if err != nil || n < 0 {
		return nil, "", bad
	}
	return &n, key, nil
}
