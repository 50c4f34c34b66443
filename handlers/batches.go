package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"net/http"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

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
// raw and decoded one by one, so that each problem is named with its item's index (a well-formed body's
// items are decoded along with it: decodeBatchBody).
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

// itemPrefixes are the prefixes of the items a batch may hold, made once rather than for every item of
// every batch.
var itemPrefixes = func() []string {
	out := make([]string, batches.MaxItems)
	for i := range out {
		out[i] = "items[" + strconv.Itoa(i) + "]."
	}
	return out
}()

// itemPrefix names item i of a batch in field names: "items[3].".
func itemPrefix(i int) string {
	if i < len(itemPrefixes) {
		return itemPrefixes[i]
	}
	return "items[" + strconv.Itoa(i) + "]."
}

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

// batchBody is a batch body whose top level is decoded (batch_id, the items' texts) and whose items are
// decoded one by one with item.
type batchBody[T any] struct {
	BatchID *string
	Items   []json.RawMessage
	// whole holds the items decoded along with the body, when the body was decoded whole (quickBatchBody);
	// nil otherwise.
	whole []T
	known fieldSet // the members T declares
}

// decodeBatchBody decodes a batch body whose items are Ts (beforeWriteRequest, afterWriteRequest) in the
// contract's order of checks, as decodeStrict would decode it into top (a *batchRequest or a
// *batchReportsRequest, whose members the body may have). With quick, a well-formed body is decoded
// once, items and all; the answer is the same either way (see TestQuickBatchDecodingIsCareful).
func decodeBatchBody[T any](body []byte, top any, quick bool) (batchBody[T], problems, error) {
	out := batchBody[T]{known: knownFields(reflect.TypeFor[T]())}
	if quick && quickBatchBody(body, top, &out) {
		ps, err := validateRequest("", top)
		return out, ps, err
	}
	ps, err := decodeStrict(body, "", top)
	switch r := top.(type) {
	case *batchRequest:
		out.BatchID, out.Items = r.BatchID, r.Items
	case *batchReportsRequest:
		out.Items = r.Items
	}
	return out, ps, err
}

// quickBatchBody decodes a body that is one well-formed object in UTF-8, naming each member of top
// once, into one struct whose items are Ts; it finds each item's text with a plain scan. It reports
// false, leaving top and out as they were, for any other body: decodeStrict finds and words its problem.
func quickBatchBody[T any](body []byte, top any, out *batchBody[T]) bool {
	if !utf8.Valid(body) {
		return false
	}
	if body = bytes.TrimLeft(body, " \t\r\n"); len(body) == 0 || body[0] != '{' {
		return false
	}
	// The items' texts are found first, so that the decoded items fill a slice of the right size.
	texts, ok := batchItemTexts(body, knownFields(reflect.TypeOf(top).Elem()))
	if !ok {
		return false
	}
	var whole struct {
		BatchID *string `json:"batch_id"`
		Items   []T     `json:"items"`
	}
	whole.Items = make([]T, 0, len(texts))
	// Only a well-formed body is decoded, and only for a well-formed body is the scan exact.
	if quickUnmarshal(body, &whole) != nil || len(texts) != len(whole.Items) {
		return false
	}
	switch r := top.(type) {
	case *batchRequest:
		r.BatchID, r.Items = whole.BatchID, texts
	case *batchReportsRequest:
		r.Items = texts
	default:
		return false
	}
	out.BatchID, out.Items, out.whole = whole.BatchID, texts, whole.Items
	return true
}

// batchItemTexts returns the texts of the items of the batch body, as sub-slices of body. ok is false
// unless every member name at the top level of body is one known declares, written without escapes and
// given once, and items is an array. The answer is exact when body is one well-formed JSON object,
// starting at its '{'; for any other body it is of no use, but batchItemTexts still returns.
func batchItemTexts(body []byte, known fieldSet) (texts []json.RawMessage, ok bool) {
	var seen [8][]byte
	n := 0
	i := skipSpace(body, 1)
	for i < len(body) && body[i] == '"' {
		end := bytes.IndexByte(body[i+1:], '"')
		if end < 0 {
			return nil, false
		}
		name := body[i+1 : i+1+end]
		if bytes.IndexByte(name, '\\') >= 0 || !known.names[string(name)] || n == len(seen) {
			return nil, false
		}
		for _, s := range seen[:n] {
			if bytes.Equal(s, name) {
				return nil, false
			}
		}
		seen[n] = name
		n++
		i = skipSpace(body, skipSpace(body, i+end+2)+1) // past ':', at the value
		if string(name) != "items" {
			i = skipValue(body, i)
		} else {
			if i >= len(body) || body[i] != '[' {
				return nil, false
			}
			texts = []json.RawMessage{}
			for i = skipSpace(body, i+1); i < len(body) && body[i] != ']'; {
				end := skipValue(body, i)
				if end == i {
					return nil, false // not a value: the body is malformed
				}
				texts = append(texts, json.RawMessage(body[i:end:end]))
				if i = skipSpace(body, end); i < len(body) && body[i] == ',' {
					i = skipSpace(body, i+1)
				}
			}
			ok = true
			i++ // past ']'
		}
		if i = skipSpace(body, i); i >= len(body) || body[i] != ',' {
			break
		}
		i = skipSpace(body, i+1)
	}
	return texts, ok
}

// item decodes item i as decodeStrict would decode its text into a new T, and reports whether the item
// has a member called flag at its top level (as hasMember).
func (b *batchBody[T]) item(i int, prefix, flag string) (dst *T, ps problems, hasFlag bool, err error) {
	raw := b.Items[i]
	if b.whole != nil && len(raw) > 0 && raw[0] == '{' {
		if ok, found := namesDeclaredOnce(raw, b.known, flag); ok {
			dst = &b.whole[i]
			ps, err := validateRequest(prefix, dst)
			return dst, ps, found, err
		}
	}
	dst = new(T)
	ps, err = decodeStrict(raw, prefix, dst)
	if err != nil || flag == "" {
		return dst, ps, false, err
	}
	return dst, ps, hasMember(raw, flag), nil
}

// decodeBatch reads a batch before-write or prepare body in the contract's order of checks (415, 413, 400)
// and returns the batch, or an invalid_request error naming every problem (the first in the message).
// Nothing is decided before the whole body is known to be valid.
func decodeBatch(c *gin.Context) (batches.Batch, error) {
	body, err := readBody(c)
	if err != nil {
		return batches.Batch{}, err
	}
	return batchFromBody(body, principal(c).Tenant, true)
}

// batchFromBody is decodeBatch after the body is read; quick is decodeBatchBody's.
func batchFromBody(body []byte, tenant string, quick bool) (batches.Batch, error) {
	var req batchRequest
	bb, ps, err := decodeBatchBody[beforeWriteRequest](body, &req, quick)
	if err != nil {
		return batches.Batch{}, err
	}
	b := batches.Batch{Tenant: tenant}
	if bb.BatchID == nil {
		ps.add("batch_id", "is required: it groups the items (e.g. the execution id and the node name)")
	} else if err := batches.CheckBatchID(*bb.BatchID); err != nil {
		if err := addItemError(&ps, err); err != nil {
			return batches.Batch{}, err
		}
	} else {
		b.BatchID = *bb.BatchID
	}
	batchItems(bb.Items, &ps)
	b.Items = make([]items.BeforeWriteParams, 0, len(bb.Items))
	for i := range bb.Items {
		prefix := itemPrefix(i)
		item, ips, hasBatchID, err := bb.item(i, prefix, "batch_id")
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
		if hasBatchID {
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
	s.observeDecisions(c.Request.Context(), b.Tenant, b.Items, len(res.Items), func(i int) *items.Answer { return &res.Items[i].Answer })
	c.Render(http.StatusOK, jsonLine{res})
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
	c.Render(http.StatusOK, jsonLine{res})
}

func (s *server) batchAfterWrite(c *gin.Context) {
	body, err := readBody(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	r, err := reportsFromBody(body, principal(c).Tenant, true)
	if err != nil {
		s.writeError(c, err)
		return
	}
	res, err := s.batches.AfterWrite(c.Request.Context(), r)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.Render(http.StatusOK, jsonLine{res})
}

// reportsFromBody decodes a batch after-write body into the reports, or an invalid_request error naming
// every problem (the first in the message); quick is decodeBatchBody's.
func reportsFromBody(body []byte, tenant string, quick bool) (batches.Reports, error) {
	var req batchReportsRequest
	bb, ps, err := decodeBatchBody[afterWriteRequest](body, &req, quick)
	if err != nil {
		return batches.Reports{}, err
	}
	r := batches.Reports{Tenant: tenant}
	batchItems(bb.Items, &ps)
	for i := range bb.Items {
		prefix := itemPrefix(i)
		item, ips, _, err := bb.item(i, prefix, "")
		if err != nil {
			if err := addItemError(&ps, err); err != nil {
				return batches.Reports{}, err
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
					return batches.Reports{}, err
				}
			}
		}
		r.Items = append(r.Items, p)
	}
	if err := ps.err(); err != nil {
		return batches.Reports{}, err
	}
	return r, nil
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
	c.Render(http.StatusOK, jsonLine{st})
}
