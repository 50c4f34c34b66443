package items

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendJSON appends the item's JSON document to dst: exactly the bytes json.Marshal(it) gives, and an
// error exactly when json.Marshal gives one (a time outside the years 0 to 9999 or with a zone offset of
// a day or more, a Result that is not valid JSON). On error it returns dst as it was.
//
// A store writes every changed item as a document; json.Marshal walks the struct by reflection and
// allocates the whole document afresh each time, which was a large part of a batch's CPU and garbage.
// AppendJSON writes the fields by hand into a buffer the caller reuses, so the common item costs no
// allocation. The rare parts (a string that needs escaping, a Result that is not already compact and
// safe) go through encoding/json itself, so they cannot drift from it. The fields are listed here by
// hand: a test fills every field of Item by reflection and fails when one is missing.
func (it *Item) AppendJSON(dst []byte) ([]byte, error) {
	if it == nil {
		return append(dst, "null"...), nil
	}
	b := append(dst, `{"tenant":`...)
	b = appendJSONString(b, it.Tenant)
	b = append(b, `,"key":`...)
	b = appendJSONString(b, it.Key)
	b = appendOmitString(b, `,"workflow":`, it.Workflow)
	b = appendOmitString(b, `,"object":`, it.Object)
	b = appendOmitString(b, `,"action":`, it.Action)
	b = appendOmitString(b, `,"sequence":`, it.Sequence)
	b = append(b, `,"destination":`...)
	b = appendJSONString(b, it.Destination)
	b = append(b, `,"dedupe":`...)
	b = appendJSONString(b, string(it.Dedupe))
	b = appendOmitString(b, `,"reference":`, it.Reference)
	b = appendOmitString(b, `,"batch_id":`, it.BatchID)
	if it.BatchIndex != nil {
		b = strconv.AppendInt(append(b, `,"batch_index":`...), int64(*it.BatchIndex), 10)
	}
	b = appendOmitString(b, `,"execution_id":`, it.ExecutionID)
	b = appendOmitString(b, `,"owner":`, it.Owner)
	b = append(b, `,"fingerprint":`...)
	b = appendJSONString(b, it.Fingerprint)
	b = append(b, `,"state":`...)
	b = appendJSONString(b, string(it.State))
	b = strconv.AppendInt(append(b, `,"attempt":`...), int64(it.Attempt), 10)
	b = strconv.AppendInt(append(b, `,"extra_attempts":`...), int64(it.ExtraAttempts), 10)
	b = appendOmitString(b, `,"claim":`, it.Claim)
	var err error
	if b, err = appendOmitTime(b, `,"lease_expires_at":`, it.LeaseExpiresAt); err != nil {
		return dst, err
	}
	if it.Retryable {
		b = append(b, `,"retryable":true`...)
	}
	if b, err = appendOmitTime(b, `,"retry_at":`, it.RetryAt); err != nil {
		return dst, err
	}
	b = appendOmitString(b, `,"external_id":`, it.ExternalID)
	b = appendOmitString(b, `,"receiver_request_id":`, it.ReceiverRequestID)
	if len(it.Result) > 0 {
		if b, err = appendRawJSON(append(b, `,"result":`...), it.Result); err != nil {
			return dst, err
		}
	}
	b = appendOmitString(b, `,"failure_class":`, string(it.FailureClass))
	b = appendOmitString(b, `,"failure_message":`, it.FailureMessage)
	b = appendOmitInt(b, `,"http_status":`, it.HTTPStatus)
	b = appendOmitString(b, `,"cause":`, it.Cause)
	if it.LookupFailed {
		b = append(b, `,"lookup_failed":true`...)
	}
	b = strconv.AppendBool(append(b, `,"needs_person":`...), it.NeedsPerson)
	b = appendOmitString(b, `,"needs_person_cause":`, it.NeedsPersonCause)
	if b, err = appendOmitTime(b, `,"needs_person_since":`, it.NeedsPersonSince); err != nil {
		return dst, err
	}
	if it.DuplicateEffect {
		b = append(b, `,"duplicate_effect":true`...)
	}
	b = appendOmitString(b, `,"alert_status":`, it.AlertStatus)
	b = append(b, `,"attempts":`...)
	if it.Attempts == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range it.Attempts {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = it.Attempts[i].appendJSON(b); err != nil {
				return dst, err
			}
		}
		b = append(b, ']')
	}
	b = append(b, `,"history":`...)
	if it.History == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range it.History {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = it.History[i].appendJSON(b); err != nil {
				return dst, err
			}
		}
		b = append(b, ']')
	}
	b = strconv.AppendInt(append(b, `,"history_dropped":`...), int64(it.HistoryDropped), 10)
	if it.Resolution != nil {
		if b, err = it.Resolution.appendJSON(append(b, `,"resolution":`...)); err != nil {
			return dst, err
		}
	}
	b = strconv.AppendInt(append(b, `,"version":`...), it.Version, 10)
	if b, err = appendJSONTime(append(b, `,"created_at":`...), it.CreatedAt); err != nil {
		return dst, err
	}
	if b, err = appendJSONTime(append(b, `,"updated_at":`...), it.UpdatedAt); err != nil {
		return dst, err
	}
	return append(b, '}'), nil
}

// appendJSON appends the attempt as json.Marshal writes it.
func (a *Attempt) appendJSON(b []byte) ([]byte, error) {
	b = strconv.AppendInt(append(b, `{"number":`...), int64(a.Number), 10)
	b = append(b, `,"claim":`...)
	b = appendJSONString(b, a.Claim)
	b = appendOmitString(b, `,"execution_id":`, a.ExecutionID)
	b = appendOmitString(b, `,"batch_id":`, a.BatchID)
	b = append(b, `,"dedupe":`...)
	b = appendJSONString(b, string(a.Dedupe))
	b = append(b, `,"fingerprint":`...)
	b = appendJSONString(b, a.Fingerprint)
	b, err := appendJSONTime(append(b, `,"started_at":`...), a.StartedAt)
	if err != nil {
		return nil, err
	}
	if b, err = appendOmitTime(b, `,"ended_at":`, a.EndedAt); err != nil {
		return nil, err
	}
	b = appendOmitString(b, `,"outcome":`, string(a.Outcome))
	b = appendOmitString(b, `,"failure_class":`, string(a.FailureClass))
	b = appendOmitInt(b, `,"http_status":`, a.HTTPStatus)
	if len(a.Reports) > 0 {
		b = append(b, `,"reports":[`...)
		for i, r := range a.Reports {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, r)
		}
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

// appendJSON appends the event as json.Marshal writes it.
func (e *Event) appendJSON(b []byte) ([]byte, error) {
	b, err := appendJSONTime(append(b, `{"at":`...), e.At)
	if err != nil {
		return nil, err
	}
	b = append(b, `,"kind":`...)
	b = appendJSONString(b, e.Kind)
	b = appendOmitInt(b, `,"attempt":`, e.Attempt)
	b = appendOmitString(b, `,"execution_id":`, e.ExecutionID)
	b = appendOmitString(b, `,"batch_id":`, e.BatchID)
	b = appendOmitString(b, `,"decision":`, string(e.Decision))
	b = appendOmitString(b, `,"reason":`, string(e.Reason))
	b = appendOmitString(b, `,"from":`, string(e.From))
	b = appendOmitString(b, `,"to":`, string(e.To))
	b = appendOmitString(b, `,"outcome":`, e.Outcome)
	b = appendOmitString(b, `,"error_class":`, string(e.ErrorClass))
	b = appendOmitInt(b, `,"http_status":`, e.HTTPStatus)
	b = appendOmitString(b, `,"external_id":`, e.ExternalID)
	b = appendOmitString(b, `,"fingerprint":`, e.Fingerprint)
	b = appendOmitString(b, `,"by":`, e.By)
	b = appendOmitString(b, `,"note":`, e.Note)
	return append(b, '}'), nil
}

// appendJSON appends the resolution as json.Marshal writes it.
func (r *Resolution) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"outcome":`...)
	b = appendJSONString(b, r.Outcome)
	b = append(b, `,"evidence":`...)
	b = appendJSONString(b, r.Evidence)
	b = appendOmitString(b, `,"external_id":`, r.ExternalID)
	b = append(b, `,"by":`...)
	b = appendJSONString(b, r.By)
	b, err := appendJSONTime(append(b, `,"at":`...), r.At)
	if err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// appendOmitString appends the member name and s unless s is empty (omitempty).
func appendOmitString(b []byte, name, s string) []byte {
	if s == "" {
		return b
	}
	return appendJSONString(append(b, name...), s)
}

// appendOmitInt appends the member name and n unless n is 0 (omitempty).
func appendOmitInt(b []byte, name string, n int) []byte {
	if n == 0 {
		return b
	}
	return strconv.AppendInt(append(b, name...), int64(n), 10)
}

// appendOmitTime appends the member name and *t unless t is nil (omitempty on a pointer).
func appendOmitTime(b []byte, name string, t *time.Time) ([]byte, error) {
	if t == nil {
		return b, nil
	}
	return appendJSONTime(append(b, name...), *t)
}

// appendJSONTime appends t as time.Time.MarshalJSON writes it. AppendText formats the same strict
// RFC 3339 text into b without allocating, and fails in the same cases.
func appendJSONTime(b []byte, t time.Time) ([]byte, error) {
	text, err := t.AppendText(append(b, '"'))
	if err != nil {
		return nil, fmt.Errorf("items: encode item: %w", err)
	}
	return append(text, '"'), nil
}

// appendJSONString appends s as a JSON string the way encoding/json writes it. A string of printable
// characters that need no escape (ASCII other than " \ < > &, or valid UTF-8 other than U+2028 and
// U+2029) is copied as it is; any other string goes through json.Marshal, whose rules for control
// characters, HTML characters and invalid UTF-8 are then followed to the byte.
func appendJSONString(b []byte, s string) []byte {
	if !plainJSONString(s) {
		// json.Marshal of a string cannot fail.
		q, _ := json.Marshal(s)
		return append(b, q...)
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// plainJSONString reports whether encoding/json writes s between quotes without changing a byte.
func plainJSONString(s string) bool {
	for i := 0; i < len(s); {
		if c := s[i]; plainASCII[c] {
			i++
			continue
		} else if c < utf8.RuneSelf {
			return false // a control character, " \ or < > &
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
			return false
		}
		i += size
	}
	return true
}

// plainASCII holds the ASCII bytes encoding/json copies into a string as they are: all but the control
// characters, " \ and the HTML characters < > &. A table lookup per byte is most of what checking a
// string costs, and a document is mostly such checks.
var plainASCII = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// appendRawJSON appends raw as json.Marshal writes a json.RawMessage: compacted, with <, >, &, U+2028
// and U+2029 escaped, and an error if raw is not valid JSON. A result that is valid and already in that
// form (the usual case: the ledger stores results compacted) is copied as it is; any other goes through
// json.Marshal.
func appendRawJSON(b []byte, raw json.RawMessage) ([]byte, error) {
	if plainRawJSON(raw) && json.Valid(raw) {
		return append(b, raw...), nil
	}
	out, err := json.Marshal(raw)
	if err != nil {
		return nil, fmt.Errorf("items: encode item result: %w", err)
	}
	return append(b, out...), nil
}

// plainRawJSON reports whether compacting and HTML-escaping raw would leave it unchanged, provided raw
// is valid JSON: no whitespace outside strings, no <, >, & and no U+2028 or U+2029 anywhere. The string
// tracking may be fooled by invalid JSON; the caller checks validity as well.
func plainRawJSON(raw []byte) bool {
	inString := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; c {
		case '<', '>', '&':
			return false
		case 0xE2:
			if i+2 < len(raw) && raw[i+1] == 0x80 && raw[i+2]&^1 == 0xA8 {
				return false
			}
		case ' ', '\t', '\n', '\r':
			if !inString {
				return false
			}
		case '"':
			inString = !inString
		case '\\':
			if inString {
				i++ // the escaped byte cannot end the string
			}
		}
	}
	return true
}
