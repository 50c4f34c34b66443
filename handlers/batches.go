package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/replaysafe/companion/batches"
	"github.com/replaysafe/companion/items"
)

// batchService builds the batch service over the ledger. Its store answers the batch status queries when
// it implements them (both of companion's stores do); otherwise only the status endpoint fails.
func batchService(ledger *items.Ledger) *batches.Service {
	bs, _ := ledger.Store().(batches.Store)
	return batches.New(ledger, bs)
}

// batchRequest is the body of POST /v1/batches/before-write and /v1/batches/prepare. The items are kept
// raw and decoded one by one, so that each problem is named with its item's index.
type batchRequest struct {
	BatchID *string           `json:"batch_id"`
	Items   []json.RawMessage `json:"items"`
}

// batchReportsRequest is the body of POST /v1/batches/after-write.
type batchReportsRequest struct {
	Items []json.RawMessage `json:"items"`
}

// batchItems checks the number of items of a batch body.
func batchItems(raw []json.RawMessage, ps *problems) {
	if len(raw) == 0 || len(raw) > batches.MaxItems {
		ps.add("items", fmt.Sprintf("must be an array of 1-%d items", batches.MaxItems))
	}
}

// itemPrefix names item i of a batch in field names: "items[3].".
func itemPrefix(i int) string { return "items[" + strconv.Itoa(i) + "]." }

// addItemError adds the problems of an item that could not be decoded at all (malformed, unknown or
// repeated members), so the answer names every bad item, in order.
func addItemError(ps *problems, err error) error {
	var e *items.Error
	if !errors.As(err, &e) || len(e.Fields) == 0 {
		return err
	}
	for _, f := range e.Fields {
		// An item that is not an object at all is named by its index alone.
		ps.add(strings.TrimSuffix(f.Field, ".body"), f.Problem)
	}
	return nil
}

// hasMember reports whether the JSON object raw has a member called name, at its top level.
func hasMember(raw json.RawMessage, name string) bool {
	if !bytes.Contains(raw, []byte(`"`+name+`"`)) {
		return false // the common case, without decoding the item a third time
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(raw, &members) != nil {
		return false
	}
	_, ok := members[name]
	return ok
}

// decodeBatch reads a batch before-write or prepare body in the contract's order of checks (415, 413, 400)
// and returns the batch, or an invalid_request error naming every problem (the first in the message).
// Nothing is decided before the whole body is known to be valid.
func decodeBatch(c *gin.Context) (batches.Batch, error) {
	body, err := readBody(c)
	if err != nil {
		return batches.Batch{}, err
	}
	var req batchRequest
	ps, err := decodeStrict(body, "", &req)
	if err != nil {
		return batches.Batch{}, err
	}
	b := batches.Batch{Tenant: principal(c).Tenant}
	if req.BatchID == nil {
		ps.add("batch_id", "is required: it groups the items (e.g. the execution id and the node name)")
	} else if err := batches.CheckBatchID(*req.BatchID); err != nil {
		if err := addItemError(&ps, err); err != nil {
			return batches.Batch{}, err
		}
	} else {
		b.BatchID = *req.BatchID
	}
	batchItems(req.Items, &ps)
	b.Items = make([]items.BeforeWriteParams, 0, len(req.Items))
	for i, raw := range req.Items {
		prefix := itemPrefix(i)
		var item beforeWriteRequest
		ips, err := decodeStrict(raw, prefix, &item)
		if err != nil {
			if err := addItemError(&ps, err); err != nil {
				return batches.Batch{}, err
			}
			continue
		}
		for _, p := range ips {
			ps.add(p.Field, p.Problem)
		}
		// The batch names the batch id; an item's own would contradict it or repeat it.
		if hasMember(raw, "batch_id") {
			ps.add(prefix+"batch_id", "unknown field: the batch names the batch id for all its items")
		}
		p := item.params(b.Tenant, prefix, &ps)
		p.BatchID = ""
		b.Items = append(b.Items, p)
	}
	if err := ps.err(); err != nil {
		return batches.Batch{}, err
	}
	return b, nil
}

func (s *server) batchBeforeWrite(c *gin.Context) {
	b, err := decodeBatch(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	res, err := s.batches.BeforeWrite(c.Request.Context(), b)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, res)
}

func (s *server) batchPrepare(c *gin.Context) {
	b, err := decodeBatch(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	res, err := s.batches.Prepare(c.Request.Context(), b)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, res)
}

func (s *server) batchAfterWrite(c *gin.Context) {
	body, err := readBody(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	var req batchReportsRequest
	ps, err := decodeStrict(body, "", &req)
	if err != nil {
		s.writeError(c, err)
		return
	}
	r := batches.Reports{Tenant: principal(c).Tenant}
	batchItems(req.Items, &ps)
	for i, raw := range req.Items {
		prefix := itemPrefix(i)
		var item afterWriteRequest
		ips, err := decodeStrict(raw, prefix, &item)
		if err != nil {
			if err := addItemError(&ps, err); err != nil {
				s.writeError(c, err)
				return
			}
			continue
		}
		for _, p := range ips {
			ps.add(p.Field, p.Problem)
		}
		p := item.params(r.Tenant, prefix, &ps)
		// The evidence rules the ledger checks (a failed outcome needs a status or class, …) are checked
		// here too, so that every bad item is named before anything is recorded.
		if len(ips) == 0 {
			if err := items.CheckAfterWrite(p); err != nil {
				if err := addItemError(&ps, batches.ItemError(i, err)); err != nil {
					s.writeError(c, err)
					return
				}
			}
		}
		r.Items = append(r.Items, p)
	}
	if err := ps.err(); err != nil {
		s.writeError(c, err)
		return
	}
	res, err := s.batches.AfterWrite(c.Request.Context(), r)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, res)
}

func (s *server) getBatch(c *gin.Context) {
	st, err := s.batches.Status(c.Request.Context(), batches.StatusParams{
		Tenant: principal(c).Tenant, BatchID: c.Param("batch_id"), Cursor: c.Query("cursor"),
	})
	if err != nil {
		if errors.Is(err, items.ErrNotFound) {
			err = &items.Error{Code: items.CodeNotFound, Message: "no item was registered by this batch"}
		}
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, st)
}
