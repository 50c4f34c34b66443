package items

import (
	"errors"
	"fmt"
)

// Code is the kind of an error, as the HTTP contract names it.
type Code string

// Error codes. Each maps to one HTTP status in the handlers.
const (
	CodeInvalid     Code = "invalid_request"
	CodeNotFound    Code = "not_found"
	CodeConflict    Code = "conflict"
	CodeUnavailable Code = "store_unavailable"
	CodeInternal    Code = "internal"
)

// FieldProblem names one field of a request and what is wrong with it.
type FieldProblem struct {
	Field   string `json:"field"`
	Problem string `json:"problem"`
}

// Error is the one error type the ledger returns to its callers. Message is safe to show to a user;
// Err is the cause, for logs only.
type Error struct {
	Code    Code
	Message string
	Fields  []FieldProblem
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Invalid returns an invalid_request error about one field.
func Invalid(field, problem string) *Error {
	return &Error{Code: CodeInvalid, Message: field + ": " + problem, Fields: []FieldProblem{{Field: field, Problem: problem}}}
}

// Store errors. Stores translate their driver's errors into these, once, at their boundary.
var (
	// ErrNotFound: no item for that tenant and key.
	ErrNotFound = errors.New("items: not found")
	// ErrUnavailable: the store could not be reached or could not durably record a change.
	ErrUnavailable = errors.New("items: store unavailable")
)

// ErrorCode returns the code of err: the Code of an *Error, not_found and store_unavailable for the store
// errors, internal for anything else.
func ErrorCode(err error) Code {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e.Code
	case errors.Is(err, ErrNotFound):
		return CodeNotFound
	case errors.Is(err, ErrUnavailable):
		return CodeUnavailable
	}
	return CodeInternal
}
