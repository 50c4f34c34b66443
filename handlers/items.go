package handlers

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/replaysafe/companion/items"
)

// beforeWriteRequest is the body of POST /v1/before-write (and one item of a batch).
type beforeWriteRequest struct {
	keyFields
	// Payload is fingerprinted from its raw bytes, so numbers keep the exact text the caller sent.
	Payload      json.RawMessage `json:"payload" validate:"-"`
	Destination  string          `json:"destination" validate:"max=200"`
	Dedupe       string          `json:"dedupe" validate:"omitempty,oneof=key lookup none"`
	Reference    string          `json:"reference" validate:"max=500"`
	BatchID      string          `json:"batch_id" validate:"max=500"`
	BatchIndex   *int            `json:"batch_index" validate:"omitnil,min=0"`
	ExecutionID  string          `json:"execution_id" validate:"max=200"`
	Owner        string          `json:"owner" validate:"max=200"`
	LeaseSeconds *int            `json:"lease_seconds" validate:"omitnil,min=5,max=86400"`
}

// params turns a decoded request into the ledger's parameters, adding any problem to ps.
func (r *beforeWriteRequest) params(tenant, prefix string, ps *problems) items.BeforeWriteParams {
	k := r.resolve(prefix, ps)
	p := items.BeforeWriteParams{
		Tenant: tenant, Key: k.Key,
		Workflow: k.Parts.Workflow, Object: k.Parts.Object, Action: k.Parts.Action, Sequence: k.Parts.Sequence,
		Destination: r.Destination, Dedupe: items.Dedupe(r.Dedupe), Reference: r.Reference,
		BatchID: r.BatchID, BatchIndex: r.BatchIndex, ExecutionID: r.ExecutionID, Owner: r.Owner,
	}
	if r.LeaseSeconds != nil {
		p.LeaseSeconds = *r.LeaseSeconds
	}
	switch present, object := jsonObject(r.Payload); {
	case !present:
		ps.add(prefix+"payload", "is required: a JSON object with the parameters of the intended effect")
	case !object:
		ps.add(prefix+"payload", "must be a JSON object")
	default:
		// The ledger keys the fingerprint of the canonical form with its secret (items.KeyFingerprints).
		canon, err := items.Canonical(r.Payload)
		if err != nil {
			ps.add(prefix+"payload", err.Error())
		}
		p.Canonical = canon
	}
	return p
}

func (s *server) beforeWrite(c *gin.Context) {
	var req beforeWriteRequest
	ps, err := decodeRequest(c, &req)
	if err != nil {
		s.writeError(c, err)
		return
	}
	p := req.params(principal(c).Tenant, "", &ps)
	if err := ps.err(); err != nil {
		s.writeError(c, err)
		return
	}
	noteItem(c, p.Key, "", "", "")
	ans, err := s.ledger.BeforeWrite(c.Request.Context(), p)
	if err != nil {
		s.writeError(c, err)
		return
	}
	noteItem(c, p.Key, ans.Decision, ans.Reason, ans.State)
	s.observeDecision(c.Request.Context(), p, ans)
	c.Render(http.StatusOK, jsonLine{ans})
}

// errorEvidence is the error object a workflow passes along. Its unknown members are ignored: tools
// hand over whole error objects.
type errorEvidence struct {
	Class   string    `json:"class" validate:"omitempty,oneof=validation dns connection_refused tls timeout connection_reset http other rejected"`
	Code    looseText `json:"code" validate:"-"`
	Message looseText `json:"message" validate:"-"`
	// MisplacedStatus is an http_status given inside error, where it is ignored like any other member;
	// read only to say where it belongs when class http then lacks one.
	MisplacedStatus json.RawMessage `json:"http_status" validate:"-"`
}

// afterWriteRequest is the body of POST /v1/after-write.
type afterWriteRequest struct {
	keyFields
	Claim             string          `json:"claim" validate:"required,max=200"`
	Outcome           string          `json:"outcome" validate:"required,oneof=succeeded failed unknown"`
	ExternalID        idText          `json:"external_id" validate:"max=500"`
	ReceiverRequestID idText          `json:"receiver_request_id" validate:"max=500"`
	Result            json.RawMessage `json:"result" validate:"-"`
	HTTPStatus        *int            `json:"http_status" validate:"omitnil,min=100,max=599"`
	Error             *errorEvidence  `json:"error"`
	RetryAfter        *int            `json:"retry_after" validate:"omitnil,min=0,max=31536000"`
}

func (r *afterWriteRequest) params(tenant, prefix string, ps *problems) items.AfterWriteParams {
	k := r.resolve(prefix, ps)
	p := items.AfterWriteParams{
		Tenant: tenant, Key: k.Key, Claim: r.Claim,
		Evidence:   items.Evidence{Outcome: items.Outcome(r.Outcome), RetryAfter: r.RetryAfter},
		ExternalID: string(r.ExternalID), ReceiverRequestID: string(r.ReceiverRequestID),
	}
	if r.HTTPStatus != nil {
		p.HTTPStatus = *r.HTTPStatus
	}
	if r.Error != nil {
		p.Class = items.ErrorClass(r.Error.Class)
		p.ErrorCode, p.ErrorMessage = string(r.Error.Code), string(r.Error.Message)
		if r.HTTPStatus == nil && p.Class == items.ClassHTTP && len(r.Error.MisplacedStatus) > 0 {
			// Refused by the ledger as well (class http needs the status); this says where it goes.
			ps.add(prefix+"http_status", "error class http needs the http_status, beside outcome, not inside error")
		}
	}
	switch present, object := jsonObject(r.Result); {
	case !object:
		ps.add(prefix+"result", "must be a JSON object")
	case present:
		p.Result = json.RawMessage(bytes.TrimSpace(r.Result))
	}
	return p
}

func (s *server) afterWrite(c *gin.Context) {
	var req afterWriteRequest
	ps, err := decodeRequest(c, &req)
	if err != nil {
		s.writeError(c, err)
		return
	}
	p := req.params(principal(c).Tenant, "", &ps)
	if err := ps.err(); err != nil {
		s.writeError(c, err)
		return
	}
	noteItem(c, p.Key, "", "", "")
	rep, err := s.ledger.AfterWrite(c.Request.Context(), p)
	if err != nil {
		s.writeError(c, err)
		return
	}
	noteItem(c, p.Key, "", rep.Reason, rep.State)
	c.Render(http.StatusOK, jsonLine{rep})
}

// reconcileRequest is the body of POST /v1/reconcile: the workflow's lookup of the item's reference.
type reconcileRequest struct {
	keyFields
	Finding    string `json:"finding" validate:"required,oneof=found absent lookup_failed"`
	ExternalID idText `json:"external_id" validate:"max=500"`
	Evidence   string `json:"evidence" validate:"required,max=2000"`
}

func (s *server) reconcile(c *gin.Context) {
	var req reconcileRequest
	ps, err := decodeRequest(c, &req)
	if err != nil {
		s.writeError(c, err)
		return
	}
	k := req.resolve("", &ps)
	if err := ps.err(); err != nil {
		s.writeError(c, err)
		return
	}
	who := principal(c)
	noteItem(c, k.Key, "", "", "")
	rep, err := s.ledger.Reconcile(c.Request.Context(), items.ReconcileParams{Tenant: who.Tenant, Key: k.Key,
		Finding: req.Finding, ExternalID: string(req.ExternalID), Evidence: req.Evidence, By: who.Name})
	if err != nil {
		s.writeError(c, err)
		return
	}
	noteItem(c, k.Key, "", rep.Reason, rep.State)
	c.Render(http.StatusOK, jsonLine{rep})
}

// ItemView is an item as GET /v1/items/{key} and resolve show it: everything in the ledger for the key,
// with the idempotency key the workflow forwards.
type ItemView struct {
	*items.Item
	IdempotencyKey string `json:"idempotency_key"`
	// Reason is set by resolve: recorded, or unchanged for an identical repeat.
	Reason items.Reason `json:"reason,omitempty"`
}

// pathKey returns the key in the path (gin has decoded it once), adding a problem when it breaks the
// key rules.
func pathKey(c *gin.Context, ps *problems) string {
	key := c.Param("key")
	if !items.ValidKey(key) {
		ps.add("key", items.KeyRule)
	}
	return key
}

func (s *server) getItem(c *gin.Context) {
	var ps problems
	key := pathKey(c, &ps)
	if err := ps.err(); err != nil {
		s.writeError(c, err)
		return
	}
	tenant := principal(c).Tenant
	noteItem(c, key, "", "", "")
	it, err := s.ledger.Get(c.Request.Context(), tenant, key)
	if err != nil {
		s.writeError(c, err)
		return
	}
	noteItem(c, key, "", "", it.State)
	c.Render(http.StatusOK, jsonLine{ItemView{Item: it, IdempotencyKey: s.ledger.IdempotencyKey(it.Tenant, it.Key)}})
}

// resolveRequest is the body of POST /v1/items/{key}/resolve.
type resolveRequest struct {
	Outcome    string `json:"outcome" validate:"required,oneof=succeeded not_committed acknowledged"`
	Evidence   string `json:"evidence" validate:"required,max=2000"`
	ExternalID idText `json:"external_id" validate:"max=500"`
}

func (s *server) resolve(c *gin.Context) {
	var req resolveRequest
	ps, err := decodeRequest(c, &req)
	if err != nil {
		s.writeError(c, err)
		return
	}
	key := pathKey(c, &ps)
	if err := ps.err(); err != nil {
		s.writeError(c, err)
		return
	}
	who := principal(c)
	noteItem(c, key, "", "", "")
	it, reason, err := s.resolver.Resolve(c.Request.Context(), items.ResolveParams{Tenant: who.Tenant, Key: key,
		Outcome: req.Outcome, Evidence: req.Evidence, ExternalID: string(req.ExternalID), By: who.Name})
	if err != nil {
		s.writeError(c, err)
		return
	}
	noteItem(c, key, "", reason, it.State)
	c.Render(http.StatusOK, jsonLine{ItemView{Item: it, IdempotencyKey: s.ledger.IdempotencyKey(it.Tenant, it.Key), Reason: reason}})
}
