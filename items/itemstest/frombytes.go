package itemstest

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strings"
	"time"

	"github.com/replaysafe/companion/items"
)

// fuzzBytes hands out the fuzzer's bytes as the choices that build an item; past the end every choice is 0.
type fuzzBytes struct {
	b     []byte
	row   []string // the row's strings, then every string handed out: later fields repeat them
	words []string // the store's own words (strings it encodes specially)
}

func (f *fuzzBytes) byte() byte {
	if len(f.b) == 0 {
		return 0
	}
	c := f.b[0]
	f.b = f.b[1:]
	return c
}

func (f *fuzzBytes) n(max int) int { return int(f.byte()) % max }

func (f *fuzzBytes) int() int {
	switch f.n(4) {
	case 0:
		return 0
	case 1:
		return f.n(8) - 1 // small, -1 too
	case 2:
		return 100 + f.n(500)
	}
	var b [8]byte
	for i := range b {
		b[i] = f.byte()
	}
	return int(int64(binary.LittleEndian.Uint64(b[:])))
}

// text returns up to n of the fuzzer's bytes as a string (any bytes: unicode, invalid UTF-8, NUL).
func (f *fuzzBytes) text(n int) string {
	n = min(n, len(f.b))
	s := string(f.b[:n])
	f.b = f.b[n:]
	return s
}

// string returns a field's string: empty, a contract word, a string the row or an earlier field holds, a
// string ending in lowercase hex (a fingerprint, a claim), a long one, or the fuzzer's bytes.
func (f *fuzzBytes) string() string {
	var s string
	switch f.n(8) {
	case 0:
		return ""
	case 1:
		if len(f.words) > 0 {
			return f.words[f.n(len(f.words))]
		}
	case 2:
		if len(f.row) > 0 {
			return f.row[f.n(len(f.row))]
		}
	case 3:
		const digits = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		s = f.text(f.n(4)) + digits[:f.n(len(digits)+1)]
	case 4:
		s = strings.Repeat(f.text(3)+"é😀", 1+f.n(200))
	default:
		s = f.text(f.n(40))
	}
	f.row = append(f.row, s)
	return s
}

// time returns a time: the item's creation or last change (maybe in another zone), or another instant
// with nanoseconds and a zone offset, inside or outside the range the JSON form can show.
func (f *fuzzBytes) time(created, updated time.Time) time.Time {
	zone := func(t time.Time) time.Time {
		switch f.n(4) {
		case 0:
			return t.In(time.FixedZone("", (f.n(48)-24)*3600+f.n(60)*60))
		case 1:
			return t.In(time.FixedZone("CET", 3600))
		case 2:
			return t.In(time.FixedZone("Z0", 0))
		}
		return t.UTC()
	}
	switch f.n(4) {
	case 0:
		return zone(created)
	case 1:
		return zone(updated)
	case 2:
		return zone(created.Add(time.Duration(f.int())))
	}
	return zone(time.Unix(int64(f.int())%(300e9), int64(f.n(256))*3906251))
}

func (f *fuzzBytes) timePtr(created, updated time.Time) *time.Time {
	if f.n(2) == 0 {
		return nil
	}
	t := f.time(created, updated)
	return &t
}

// ItemFromBytes builds an item from a fuzzer's bytes, for the fuzz targets of the stores' encodings: every
// field of an item, attempts, history events, a resolution, optional times in any zone (inside or outside
// the years the JSON form can show), strings that repeat, end in lowercase hex, are long, are unicode or
// not UTF-8, and words (a store's dictionary, or nil). The same bytes build the same item.
func ItemFromBytes(data []byte, words []string) *items.Item {
	f := &fuzzBytes{b: data, words: words}
	it := &items.Item{Tenant: f.string(), Key: f.string()}
	if f.n(2) == 0 {
		it.Key = "invoices:" + f.text(f.n(12)) + ":send:" + f.string()
		if parts, ok := items.SplitKey(it.Key); ok && f.n(4) != 0 {
			it.Workflow, it.Object, it.Action, it.Sequence = parts.Workflow, parts.Object, parts.Action, parts.Sequence
		}
	}
	if f.n(2) == 0 {
		it.Workflow, it.Object, it.Action, it.Sequence = f.string(), f.string(), f.string(), f.string()
	}
	it.Destination, it.Owner, it.Reference, it.BatchID, it.ExecutionID = f.string(), f.string(), f.string(), f.string(), f.string()
	it.Version = int64(f.int())
	if f.n(2) == 0 {
		i := f.int()
		it.BatchIndex = &i
	}
	it.CreatedAt = f.time(time.Unix(1796000000, 0).UTC(), time.Unix(1796000000, 0).UTC())
	it.UpdatedAt = f.time(it.CreatedAt, it.CreatedAt.Add(time.Duration(f.int())))
	c, u := it.CreatedAt, it.UpdatedAt
	it.State, it.Dedupe, it.Fingerprint, it.Claim = items.State(f.string()), items.Dedupe(f.string()), f.string(), f.string()
	it.Attempt, it.ExtraAttempts, it.HTTPStatus = f.int(), f.int(), f.int()
	it.ExternalID, it.ReceiverRequestID, it.FailureClass = f.string(), f.string(), items.ErrorClass(f.string())
	it.FailureMessage, it.Cause, it.NeedsPersonCause, it.AlertStatus = f.string(), f.string(), f.string(), f.string()
	it.Retryable, it.LookupFailed, it.NeedsPerson, it.DuplicateEffect = f.n(2) == 0, f.n(2) == 0, f.n(2) == 0, f.n(2) == 0
	it.LeaseExpiresAt, it.RetryAt, it.NeedsPersonSince = f.timePtr(c, u), f.timePtr(c, u), f.timePtr(c, u)
	switch f.n(4) {
	case 1:
		it.Result = json.RawMessage(`{"id":"` + strings.Repeat("x", f.n(100)) + `","ok":true}`)
	case 2:
		it.Result = json.RawMessage(f.text(f.n(30))) // JSON or not
	case 3:
		it.Result = json.RawMessage{}
	}
	if n := f.n(6); n > 0 {
		it.Attempts = make([]items.Attempt, n-1) // n == 1: empty, not nil
		for i := range it.Attempts {
			a := &it.Attempts[i]
			a.Number = i + 1
			if f.n(4) == 0 {
				a.Number = f.int()
			}
			a.Claim, a.ExecutionID, a.BatchID, a.Dedupe = f.string(), f.string(), f.string(), items.Dedupe(f.string())
			a.Fingerprint, a.Outcome, a.FailureClass = f.string(), items.State(f.string()), items.ErrorClass(f.string())
			a.HTTPStatus, a.StartedAt, a.EndedAt = f.int(), f.time(c, u), f.timePtr(c, u)
			if n := f.n(4); n > 0 {
				a.Reports = make([]string, n-1)
				for j := range a.Reports {
					a.Reports[j] = f.string()
				}
			}
		}
	}
	if n := f.n(6); n > 0 {
		it.History = make([]items.Event, n-1)
		for i := range it.History {
			e := &it.History[i]
			e.At, e.Kind, e.Attempt, e.ExecutionID, e.BatchID = f.time(c, u), f.string(), f.int(), f.string(), f.string()
			e.Decision, e.Reason = items.Decision(f.string()), items.Reason(f.string())
			e.From, e.To, e.Outcome = items.State(f.string()), items.State(f.string()), f.string()
			e.ErrorClass, e.HTTPStatus, e.ExternalID = items.ErrorClass(f.string()), f.int(), f.string()
			e.Fingerprint, e.By, e.Note = f.string(), f.string(), f.string()
		}
	}
	if f.n(2) == 0 {
		it.Resolution = &items.Resolution{Outcome: f.string(), Evidence: f.string(), ExternalID: f.string(), By: f.string(),
			At: f.time(c, u)}
	}
	if f.n(2) == 0 {
		it.HistoryDropped = f.int() // last: the bytes of earlier seeds build the items they built
	}
	return it
}

// WithTimes returns a copy of it with every time mapped by f (the item's own, its attempts', its events'
// and its resolution's) and an attempt's empty list of reports made none: the item as a store that keeps
// times its own way (to the millisecond, say) and an empty list as none reads it back. it is not changed.
func WithTimes(it *items.Item, f func(time.Time) time.Time) *items.Item {
	c := *it
	ptr := func(t *time.Time) *time.Time {
		if t == nil {
			return nil
		}
		v := f(*t)
		return &v
	}
	c.CreatedAt, c.UpdatedAt = f(c.CreatedAt), f(c.UpdatedAt)
	c.LeaseExpiresAt, c.RetryAt, c.NeedsPersonSince = ptr(c.LeaseExpiresAt), ptr(c.RetryAt), ptr(c.NeedsPersonSince)
	if c.Attempts != nil {
		c.Attempts = append([]items.Attempt{}, c.Attempts...)
		for i := range c.Attempts {
			a := &c.Attempts[i]
			a.StartedAt, a.EndedAt = f(a.StartedAt), ptr(a.EndedAt)
			if len(a.Reports) == 0 {
				a.Reports = nil
			}
		}
	}
	if c.History != nil {
		c.History = append([]items.Event{}, c.History...)
		for i := range c.History {
			c.History[i].At = f(c.History[i].At)
		}
	}
	if c.Resolution != nil {
		r := *c.Resolution
		r.At = f(r.At)
		c.Resolution = &r
	}
	return &c
}

// HistoryDroppedSeed is a fuzz seed from which ItemFromBytes builds an item with a non-zero HistoryDropped
// (and attempts): the stores' fuzz targets start from it, so that their seeds cover the field.
var HistoryDroppedSeed = bytes.Repeat([]byte("\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10"), 30)
