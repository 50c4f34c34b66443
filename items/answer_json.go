package items

import "strconv"

// AppendJSON appends the answer as json.Marshal writes it. Every single before-write is answered with one:
// written by hand like Item.AppendJSON (and with its helpers, so that strings, times and results follow
// encoding/json to the byte), it costs no reflection. On an error (a time json.Marshal cannot write
// either) dst is returned as it was.
func (a *Answer) AppendJSON(dst []byte) ([]byte, error) {
	b := append(dst, `{"key":`...)
	b = appendJSONString(b, a.Key)
	b = appendJSONString(append(b, `,"decision":`...), string(a.Decision))
	b = appendJSONString(append(b, `,"reason":`...), string(a.Reason))
	b = appendJSONString(append(b, `,"state":`...), string(a.State))
	b = strconv.AppendInt(append(b, `,"attempt":`...), int64(a.Attempt), 10)
	b = appendOmitString(b, `,"claim":`, a.Claim)
	b = appendJSONString(append(b, `,"idempotency_key":`...), a.IdempotencyKey)
	var err error
	if b, err = appendOmitTime(b, `,"lease_expires_at":`, a.LeaseExpiresAt); err != nil {
		return dst, err
	}
	b = appendOmitInt(b, `,"retry_after":`, a.RetryAfter)
	b = appendOmitString(b, `,"external_id":`, a.ExternalID)
	if len(a.Result) > 0 {
		if b, err = appendRawJSON(append(b, `,"result":`...), a.Result); err != nil {
			return dst, err
		}
	}
	b = appendOmitString(b, `,"reference":`, a.Reference)
	if a.NeedsPerson {
		b = append(b, `,"needs_person":true`...)
	}
	b = appendJSONString(append(b, `,"message":`...), a.Message)
	return append(b, '}'), nil
}

// AppendJSON appends the report as json.Marshal writes it: the answer of every single after-write.
func (r *Report) AppendJSON(dst []byte) ([]byte, error) {
	b := append(dst, `{"key":`...)
	b = appendJSONString(b, r.Key)
	b = appendJSONString(append(b, `,"state":`...), string(r.State))
	b = appendJSONString(append(b, `,"reason":`...), string(r.Reason))
	b = strconv.AppendInt(append(b, `,"attempt":`...), int64(r.Attempt), 10)
	b = appendJSONString(append(b, `,"message":`...), r.Message)
	if r.ResultDropped {
		b = append(b, `,"result_dropped":true`...)
	}
	return append(b, '}'), nil
}

// AppendJSONString appends s as encoding/json writes a string, for the answers other packages write by
// hand around an Answer or a Report.
func AppendJSONString(dst []byte, s string) []byte { return appendJSONString(dst, s) }
