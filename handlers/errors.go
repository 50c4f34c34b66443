package handlers

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/gin-gonic/gin/render"

	"github.com/replaysafe/companion/batches"
	"github.com/replaysafe/companion/items"
)

// Codes that only the HTTP layer produces; the ledger's own codes are in package items.
const (
	CodeUnauthorized         items.Code = "unauthorized"
	CodeForbidden            items.Code = "forbidden"
	CodeMethodNotAllowed     items.Code = "method_not_allowed"
	CodePayloadTooLarge      items.Code = "payload_too_large"
	CodeUnsupportedMediaType items.Code = "unsupported_media_type"
)

// statuses is the one table from error codes to HTTP statuses.
var statuses = map[items.Code]int{
	items.CodeInvalid:        http.StatusBadRequest,
	CodeUnauthorized:         http.StatusUnauthorized,
	CodeForbidden:            http.StatusForbidden,
	items.CodeNotFound:       http.StatusNotFound,
	CodeMethodNotAllowed:     http.StatusMethodNotAllowed,
	items.CodeConflict:       http.StatusConflict,
	CodePayloadTooLarge:      http.StatusRequestEntityTooLarge,
	CodeUnsupportedMediaType: http.StatusUnsupportedMediaType,
	items.CodeUnavailable:    http.StatusServiceUnavailable,
	CodeNotImplemented:       http.StatusNotImplemented,
	items.CodeInternal:       http.StatusInternalServerError,
	// The allow-lists refuse a request's body as a body problem would.
	items.CodeOwnerNotAllowed:       http.StatusBadRequest,
	items.CodeDestinationNotAllowed: http.StatusBadRequest,
	// The edge (edge.go).
	CodeMisdirectedHost: http.StatusMisdirectedRequest,
	CodeTooManyRequests: http.StatusTooManyRequests,
}

// StatusOf returns the HTTP status of an error code; 500 for a code it does not know.
func StatusOf(code items.Code) int {
	if s, ok := statuses[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// ErrorBody is the one shape of every error response.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of an error response.
type ErrorDetail struct {
	Code    items.Code           `json:"code"`
	Message string               `json:"message"`
	Fields  []items.FieldProblem `json:"fields,omitempty"`
}

// Messages shown for errors whose cause must stay in the log.
const (
	msgInternal    = "internal error"
	msgUnavailable = "the ledger cannot durably record this now; nothing was written, retry later"
	msgNotFound    = "no item with this key"
)

// publicError turns any error into what the caller may see. Causes (driver errors, panics) never leave
// the process: a 500 says "internal error" and a 503 a fixed sentence.
func publicError(err error) ErrorDetail {
	code := items.ErrorCode(err)
	var e *items.Error
	switch {
	case code == items.CodeInternal:
		return ErrorDetail{Code: code, Message: msgInternal}
	case code == items.CodeUnavailable:
		return ErrorDetail{Code: code, Message: msgUnavailable}
	case errors.As(err, &e):
		return ErrorDetail{Code: e.Code, Message: e.Message, Fields: e.Fields}
	case code == items.CodeNotFound:
		return ErrorDetail{Code: code, Message: msgNotFound}
	}
	return ErrorDetail{Code: items.CodeInternal, Message: msgInternal}
}

// writeError is the one place errors become responses. Internal errors and store failures are logged
// with their cause; the caller sees only the public message.
func (s *server) writeError(c *gin.Context, err error) {
	d := publicError(err)
	status := StatusOf(d.Code)
	if status >= 500 {
		s.log.LogAttrs(c.Request.Context(), slog.LevelError, "request failed",
			slog.String("method", c.Request.Method), slog.String("route", routeOf(c)),
			slog.String("code", string(d.Code)), slog.String("cause", err.Error()))
		if status == http.StatusServiceUnavailable {
			c.Header("Retry-After", "1")
		}
	}
	if status == http.StatusUnauthorized {
		c.Header("WWW-Authenticate", `Bearer realm="companion"`)
	}
	lineOf(c).code = string(d.Code)
	c.Abort()
	c.Render(status, jsonLine{ErrorBody{Error: d}})
}

// jsonLine renders an answer as json.Marshal writes it, followed by a newline, so that answers printed
// one after another (curl in a terminal, a log of answers) stay one per line. It writes from the
// encoder's buffer, without copying the answer first: a batch's answer is large.
type jsonLine struct{ Data any }

// Render implements render.Render. The answers of the single-item protocol (items.Answer, items.Report)
// and of a batch before-write (batches.BeforeWriteResult) are written by their own AppendJSON, which writes json.Marshal's bytes without its reflection; the rest,
// and an answer AppendJSON refuses, go through encoding/json.
func (r jsonLine) Render(w http.ResponseWriter) error {
	r.WriteContentType(w)
	var b []byte
	var err error
	switch v := r.Data.(type) {
	case items.Answer:
		b, err = v.AppendJSON(make([]byte, 0, 512))
	case items.Report:
		b, err = v.AppendJSON(make([]byte, 0, 256))
	case batches.BeforeWriteResult:
		b, err = v.AppendJSON(make([]byte, 0, 256*len(v.Items)+64))
	}
	if b != nil && err == nil {
		_, err = w.Write(append(b, '\n'))
		return err
	}
	return json.NewEncoder(w).Encode(r.Data)
}

// WriteContentType implements render.Render.
func (r jsonLine) WriteContentType(w http.ResponseWriter) { render.JSON{}.WriteContentType(w) }
