package acceptance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The suite speaks the HTTP contract (shared/design/API.md) with its own wire types instead of importing
// the ledger's: it checks the words the service answers with, so a renamed decision or state would make
// a case fail rather than silently follow the rename.

// BeforeWrite is the body of POST /v1/before-write (and one item of the batch variant, where BatchID is
// left empty because the batch names it).
type BeforeWrite struct {
	Key          string          `json:"key"`
	Payload      json.RawMessage `json:"payload"`
	Destination  string          `json:"destination,omitempty"`
	Reference    string          `json:"reference,omitempty"`
	BatchID      string          `json:"batch_id,omitempty"`
	BatchIndex   *int            `json:"batch_index,omitempty"`
	ExecutionID  string          `json:"execution_id,omitempty"`
	LeaseSeconds int             `json:"lease_seconds,omitempty"`
}

// Answer is the before-write answer: the decision a workflow branches on.
type Answer struct {
	Key            string          `json:"key"`
	Decision       string          `json:"decision"`
	Reason         string          `json:"reason"`
	State          string          `json:"state"`
	Attempt        int             `json:"attempt"`
	Claim          string          `json:"claim"`
	IdempotencyKey string          `json:"idempotency_key"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at"`
	RetryAfter     int             `json:"retry_after"`
	ExternalID     string          `json:"external_id"`
	Result         json.RawMessage `json:"result"`
	Reference      string          `json:"reference"`
	BatchIndex     *int            `json:"batch_index"`
	Message        string          `json:"message"`
}

// AfterWrite is the body of POST /v1/after-write: what the workflow saw of its write.
type AfterWrite struct {
	Key               string          `json:"key"`
	Claim             string          `json:"claim"`
	Outcome           string          `json:"outcome"`
	ExternalID        string          `json:"external_id,omitempty"`
	ReceiverRequestID string          `json:"receiver_request_id,omitempty"`
	Result            json.RawMessage `json:"result,omitempty"`
	HTTPStatus        int             `json:"http_status,omitempty"`
	Error             *WriteError     `json:"error,omitempty"`
	RetryAfter        *int            `json:"retry_after,omitempty"`
}

// WriteError is the error object of an after-write report.
type WriteError struct {
	Class   string `json:"class"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// Report is the answer to after-write, reconcile and resolve (resolve answers with the item, whose
// state and reason fields decode the same way).
type Report struct {
	Key     string `json:"key"`
	State   string `json:"state"`
	Reason  string `json:"reason"`
	Attempt int    `json:"attempt"`
	Message string `json:"message"`
	// Error is set for one item of a batch after-write that was refused on its own.
	Error *APIError `json:"error"`
}

// Reconcile is the body of POST /v1/reconcile: the workflow's lookup of the item's reference.
type Reconcile struct {
	Key        string `json:"key"`
	Finding    string `json:"finding"`
	ExternalID string `json:"external_id,omitempty"`
	Evidence   string `json:"evidence"`
}

// Resolve is the body of POST /v1/items/{key}/resolve: an owner's decision on evidence.
type Resolve struct {
	Outcome    string `json:"outcome"`
	Evidence   string `json:"evidence"`
	ExternalID string `json:"external_id,omitempty"`
}

// Item is what GET /v1/items/{key} shows of an item: the fields the cases assert on.
type Item struct {
	Key              string     `json:"key"`
	Destination      string     `json:"destination"`
	Dedupe           string     `json:"dedupe"`
	Reference        string     `json:"reference"`
	State            string     `json:"state"`
	Attempt          int        `json:"attempt"`
	Retryable        bool       `json:"retryable"`
	RetryAt          *time.Time `json:"retry_at"`
	ExternalID       string     `json:"external_id"`
	FailureClass     string     `json:"failure_class"`
	HTTPStatus       int        `json:"http_status"`
	Cause            string     `json:"cause"`
	LookupFailed     bool       `json:"lookup_failed"`
	NeedsPerson      bool       `json:"needs_person"`
	NeedsPersonCause string     `json:"needs_person_cause"`
	DuplicateEffect  bool       `json:"duplicate_effect"`
	IdempotencyKey   string     `json:"idempotency_key"`
	Attempts         []struct {
		Number  int    `json:"number"`
		Outcome string `json:"outcome"`
	} `json:"attempts"`
	Resolution *struct {
		Outcome string `json:"outcome"`
		By      string `json:"by"`
	} `json:"resolution"`
	History []struct {
		Kind    string `json:"kind"`
		Outcome string `json:"outcome"`
		By      string `json:"by"`
		Note    string `json:"note"`
	} `json:"history"`
}

// BatchStatus is GET /v1/batches/{batch_id}.
type BatchStatus struct {
	BatchID string         `json:"batch_id"`
	Counts  map[string]int `json:"counts"`
	Items   []struct {
		Key        string `json:"key"`
		BatchIndex *int   `json:"batch_index"`
		State      string `json:"state"`
	} `json:"items"`
}

// APIError is an error answer of the service, in the contract's one error shape.
type APIError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *APIError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("%s: %s", e.Code, e.Message)
	}
	return fmt.Sprintf("service answered %d %s: %s", e.Status, e.Code, e.Message)
}

// Service is a client of the companion service's v1 API, acting as a workflow (Token) and, for the cases
// where an owner settles an item on evidence, as an operator (OperatorToken).
type Service struct {
	base          *url.URL
	token         string
	operatorToken string
	http          *http.Client
}

// NewService returns a client of the service at base. An empty token sends no Authorization header (an
// open service on loopback); an empty operatorToken uses token for operator calls too.
func NewService(base, token, operatorToken string) (*Service, error) {
	u, err := url.Parse(strings.TrimRight(base, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("service URL %q: want http(s)://host[:port]", base)
	}
	if operatorToken == "" {
		operatorToken = token
	}
	return &Service{base: u, token: token, operatorToken: operatorToken,
		http: &http.Client{Timeout: 10 * time.Second}}, nil
}

// WithTimeout bounds each call to the service by d instead of NewService's 10 s, and returns s. For a
// service known to be slow, such as the in-process FerretDB test server under the race detector.
func (s *Service) WithTimeout(d time.Duration) *Service {
	s.http.Timeout = d
	return s
}

// URL returns the service's base URL.
func (s *Service) URL() string { return s.base.String() }

// BeforeWrite asks whether the workflow may write now.
func (s *Service) BeforeWrite(ctx context.Context, req BeforeWrite) (Answer, error) {
	var ans Answer
	err := s.call(ctx, http.MethodPost, "/v1/before-write", s.token, req, &ans)
	return ans, err
}

// BatchBeforeWrite asks for many items at once.
func (s *Service) BatchBeforeWrite(ctx context.Context, batchID string, items []BeforeWrite) ([]Answer, error) {
	var out struct {
		Items []Answer `json:"items"`
	}
	err := s.call(ctx, http.MethodPost, "/v1/batches/before-write", s.token,
		map[string]any{"batch_id": batchID, "items": items}, &out)
	if err == nil && len(out.Items) != len(items) {
		err = fmt.Errorf("batch before-write answered %d items for %d", len(out.Items), len(items))
	}
	return out.Items, err
}

// AfterWrite reports what the workflow saw of its write.
func (s *Service) AfterWrite(ctx context.Context, req AfterWrite) (Report, error) {
	var rep Report
	err := s.call(ctx, http.MethodPost, "/v1/after-write", s.token, req, &rep)
	return rep, err
}

// BatchAfterWrite reports many writes at once; an item refused on its own carries Report.Error.
func (s *Service) BatchAfterWrite(ctx context.Context, reports []AfterWrite) ([]Report, error) {
	var out struct {
		Items []Report `json:"items"`
	}
	err := s.call(ctx, http.MethodPost, "/v1/batches/after-write", s.token, map[string]any{"items": reports}, &out)
	if err == nil && len(out.Items) != len(reports) {
		err = fmt.Errorf("batch after-write answered %d items for %d", len(out.Items), len(reports))
	}
	return out.Items, err
}

// Reconcile reports the workflow's lookup of an unknown item's reference.
func (s *Service) Reconcile(ctx context.Context, req Reconcile) (Report, error) {
	var rep Report
	err := s.call(ctx, http.MethodPost, "/v1/reconcile", s.token, req, &rep)
	return rep, err
}

// Resolve settles an item on an owner's evidence; it needs the operator role.
func (s *Service) Resolve(ctx context.Context, key string, req Resolve) (Report, error) {
	var rep Report
	err := s.call(ctx, http.MethodPost, "/v1/items/"+url.PathEscape(key)+"/resolve", s.operatorToken, req, &rep)
	return rep, err
}

// Item returns the ledger's record of key.
func (s *Service) Item(ctx context.Context, key string) (Item, error) {
	var it Item
	err := s.call(ctx, http.MethodGet, "/v1/items/"+url.PathEscape(key), s.token, nil, &it)
	return it, err
}

// Batch returns the status of a batch.
func (s *Service) Batch(ctx context.Context, batchID string) (BatchStatus, error) {
	var b BatchStatus
	err := s.call(ctx, http.MethodGet, "/v1/batches/"+url.PathEscape(batchID), s.token, nil, &b)
	return b, err
}

// Health reads GET /healthz and returns its body's fields (a service may report version and store
// there) and the Server header.
func (s *Service) Health(ctx context.Context) (map[string]any, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base.String()+"/healthz", nil)
	if err != nil {
		return nil, "", err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("GET /healthz answered %d", resp.StatusCode)
	}
	fields := map[string]any{}
	_ = json.Unmarshal(body, &fields)
	return fields, resp.Header.Get("Server"), nil
}

// call sends one request and decodes a 200 into out, anything else into an *APIError.
func (s *Service) call(ctx context.Context, method, path, token string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.base.String()+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error APIError `json:"error"`
		}
		if json.Unmarshal(raw, &e) != nil || e.Error.Code == "" {
			e.Error = APIError{Code: "unexpected", Message: strings.TrimSpace(string(raw))}
		}
		e.Error.Status = resp.StatusCode
		return fmt.Errorf("%s %s: %w", method, path, &e.Error)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: the answer is not the contract's JSON: %w", method, path, err)
	}
	return nil
}
