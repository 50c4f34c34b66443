package sqlitestore

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/replaysafe/companion/items"
)

// The stored form of an item (the doc column). The API form (items.Item.AppendJSON) is for people and
// clients; this one is for the disk, and holds the same item in a tenth of the bytes. What the row's
// own columns hold is not stored again (tenant, key, state, destination, workflow, owner, reference,
// batch, execution, version, needs_person, and the two times where the column keeps them exactly), nor
// what can be derived (the object, action and sequence of a key of four parts). Every string of the
// document is stored once: a later field with the same value (the fingerprint in the attempt and the
// history, the claim, the batch and execution in every event) names the earlier one, and the words of
// the contract (states, reasons, event kinds, error classes) are numbers of a fixed dictionary. A string
// that ends in lowercase hex (fingerprints, claims, report digests) keeps those digits as bytes. Times
// are integers, relative to the item's creation.
//
// Layout: a format byte (storedFormat), then the item: a mask (uvarint) of its fields present, then those
// fields in the mask's bit order. Attempts and events are the same: a mask, then fields. A resolution is
// four strings and a time, then, where the item's mask has itemResolutionFields, a mask of the
// resolution's further fields and those fields (no build writes any yet).
// Integers are zigzag varints; a time is 0 (the item's creation) or 1 (its last change) or 2 + its
// seconds from the creation (zigzag), then nanoseconds<<1 | has-offset (uvarint) and the zone offset in
// seconds when it has one; bytes are a uvarint length and the bytes. A string is a uvarint v:
//
//	0            the empty string
//	4n+1         a literal: n bytes follow
//	4n+2         a literal ending in 2n lowercase hex digits: a uvarint prefix length, the prefix, n bytes
//	4n+3         the n-th string of the document's table (the row's strings, then each literal in order)
//	4n, n ≥ 1    word n-1 of storedWords
//
// A document that starts with '{' is the JSON of earlier builds (decode reads both).
//
// The format is read by every later build: bits, words and layout are only ever added, never changed.
// And where it can, an earlier build reads what a later one wrote (a rollback to it):
//
//   - Bits 48 to 63 of every mask (the item's, an attempt's, an event's, a resolution's: skippableFields)
//     are for fields an earlier build may skip. Such a field's value is a uvarint length and that many
//     bytes, and it is self-contained: it names no string of the document's table and adds none (its
//     strings are literals inside its bytes), so that skipping it shifts no reference after it. A build
//     that does not know the bit skips the field (from the release of this rule on; the builds before
//     refuse it) and drops it at its next write of the item, which writes the item as it read it. A later
//     build may therefore put there only what an earlier build may lose and leave stale meanwhile: a
//     count, a hint; never a value a decision reads. (Keeping them instead would carry bytes the item
//     has no field for from every read to the write, tie each to its attempt or event across the
//     transition, and keep a value about the item unchanged while this build changes the item.)
//   - Bits 0 to 47 are for fields an earlier build must not ignore: it refuses a document with a bit there
//     it does not know (errCorrupt: the item answers 500, never proceed). No field takes a bit of the
//     skippable range (the constants after the masks fail to compile if one does).
//   - A word appended to storedWords has a number the earlier builds do not know: they refuse a document
//     that names it, and must, for a word they have no rule for in a value a decision reads (a dedupe mode,
//     an outcome, a class, a cause): read as a string, it would be acted on by code that does not know it.
//     Where a later build knows that an earlier one only shows the value, it may write the word there as
//     a literal (4n+1) instead, which every build reads.
//   - The four kinds of string, the three of time and the meaning of a bit are fixed: another needs
//     another format byte, which every earlier build refuses.
const storedFormat = 1

// storedWords are the words of the contract a document names by number. Append only.
var storedWords = []string{
	// states and outcomes
	"prepared", "in_flight", "succeeded", "failed", "unknown",
	// dedupe modes
	"key", "lookup", "none",
	// decisions
	"proceed", "skip", "conflict", "reconcile",
	// reasons
	"new", "fingerprint_mismatch", "in_progress", "failed_permanent", "attempts_exhausted", "retry_later", "retry",
	"lookup_required", "retry_same_key", "awaiting_owner", "recorded", "late_success", "duplicate_effect", "unchanged",
	"history_only",
	// causes
	"lease_expired", "lookup_failed", "unknown_outcome", "unknown_no_dedupe", "unresolved_too_long",
	"earlier_attempt_unknown",
	// event kinds
	"claimed", "after_write", "resolve", "needs_person", "escalated",
	// resolutions and findings
	"not_committed", "acknowledged", "found", "absent",
	// error classes
	"validation", "dns", "connection_refused", "tls", "timeout", "connection_reset", "http", "other",
	// alert statuses, the default destination
	"pending", "sent", "default",
	// error classes added later
	"rejected",
}

// storedWordNumbers maps a word to its number in storedWords; longestWord is the longest word's length.
var storedWordNumbers, longestWord = func() (map[string]int, int) {
	m := make(map[string]int, len(storedWords))
	longest := 0
	for i, w := range storedWords {
		if _, dup := m[w]; dup {
			panic("sqlitestore: storedWords repeats " + w)
		}
		m[w] = i
		longest = max(longest, len(w))
	}
	return m, longest
}()

// Item fields present, in the order they follow the mask.
const (
	itemPartsDerived = 1 << iota // object, action and sequence are the key's (items.SplitKey)
	itemDedupe
	itemFingerprint
	itemAttempt
	itemClaim
	itemExternalID
	itemAttempts // non-nil
	itemHistory  // non-nil
	itemLeaseExpiresAt
	itemResult
	itemReceiverRequestID
	itemResolution
	itemExtraAttempts
	itemRetryable
	itemRetryAt
	itemFailureClass
	itemFailureMessage
	itemHTTPStatus
	itemCause
	itemLookupFailed
	itemNeedsPersonCause
	itemNeedsPersonSince
	itemDuplicateEffect
	itemAlertStatus
	itemObject
	itemAction
	itemSequence
	itemCreatedAt // the created_at column cannot hold it exactly
	itemUpdatedAt // the updated_at column cannot hold it exactly
	itemHistoryDropped
	itemResolutionFields // the resolution is followed by a mask of its further fields (no value here)
	itemBitsEnd          // not a field: the bit after the last one
)

// Attempt fields present.
const (
	attemptNumber = 1 << iota // not its position + 1
	attemptClaim
	attemptExecutionID
	attemptBatchID
	attemptDedupe
	attemptFingerprint
	attemptEndedAt
	attemptOutcome
	attemptFailureClass
	attemptHTTPStatus
	attemptReports
	attemptBitsEnd // not a field: the bit after the last one
)

// Event fields present.
const (
	eventKind = 1 << iota
	eventAttempt
	eventExecutionID
	eventBatchID
	eventDecision
	eventReason
	eventFrom
	eventTo
	eventOutcome
	eventErrorClass
	eventHTTPStatus
	eventExternalID
	eventFingerprint
	eventBy
	eventNote
	eventBitsEnd // not a field: the bit after the last one
)

// skippableFields are the bits of every mask kept for fields a build that does not know them skips: a
// uvarint length and that many bytes, naming no string of the document's table (the format's comment).
const skippableFields uint64 = 0xffff << 48

// No field of this build takes a bit of the skippable range (a resolution has no field of its mask yet):
// each difference is negative, which no uint64 holds, when a field does.
const (
	_ uint64 = 1<<48 - itemBitsEnd
	_ uint64 = 1<<48 - attemptBitsEnd
	_ uint64 = 1<<48 - eventBitsEnd
)

// row is what the items table holds of an item beside its document; the document does not repeat it.
type row struct {
	tenant, key, state, destination, workflow, owner, reference, batchID, executionID string
	version                                                                           int64
	batchIndex                                                                        *int
	needsPerson                                                                       bool
	createdAt, updatedAt                                                              int64 // Unix nanoseconds
}

// rowOf returns the columns of it.
func rowOf(it *items.Item) row {
	return row{tenant: it.Tenant, key: it.Key, state: string(it.State), destination: it.Destination, workflow: it.Workflow,
		owner: it.Owner, reference: it.Reference, batchID: it.BatchID, executionID: it.ExecutionID, version: it.Version,
		batchIndex: it.BatchIndex, needsPerson: it.NeedsPerson, createdAt: it.CreatedAt.UnixNano(), updatedAt: it.UpdatedAt.UnixNano()}
}

// strings are the row's strings a document may name, in table order.
func (r *row) strings(table []string) []string {
	return append(table, r.tenant, r.key, r.destination, r.workflow, r.owner, r.reference, r.batchID, r.executionID)
}

// exactInColumn reports whether t reads back from its Unix nanoseconds as the same instant and the same
// JSON: in UTC (or a zone at offset 0) and within the years int64 nanoseconds hold.
func exactInColumn(t time.Time) bool {
	if _, off := t.Zone(); off != 0 {
		return false
	}
	return time.Unix(0, t.UnixNano()).Equal(t)
}

// encoder writes one stored document.
type encoder struct {
	b                []byte
	table            []string
	created, updated time.Time
	base             int64 // the item's creation, Unix seconds
	later            laterFields
	err              error
}

// laterFields writes what a later build would: for the struct of kind ("item", "attempt", "event",
// "resolution") number i of the document, fields of bits this build does not know, each a bit and its
// value (written as a uvarint length and the bytes). Only tests set it (encodeStored); this build itself
// writes no field it does not know.
type laterFields func(kind string, i int) map[uint64][]byte

func (e *encoder) laterOf(kind string, i int) laterValues {
	if e.later == nil {
		return nil
	}
	return e.later(kind, i)
}

// laterValues are a struct's fields of a later build (laterFields): a value per bit.
type laterValues map[uint64][]byte

// mask returns the bits of the fields.
func (l laterValues) mask() uint64 {
	var m uint64
	for bit := range l {
		m |= bit
	}
	return m
}

// laterField writes the value of a field of a later build (laterFields).
func (e *encoder) laterField(v []byte) {
	e.b = binary.AppendUvarint(e.b, uint64(len(v)))
	e.b = append(e.b, v...)
}

// appendStored appends the stored form of it to dst. It fails where it.AppendJSON fails (a time outside
// the years 0 to 9999 or with an offset of a day or more, a Result that is not JSON), so that what is
// stored can always be shown.
func appendStored(dst []byte, it *items.Item) ([]byte, error) { return encodeStored(dst, it, nil) }

// encodeStored is appendStored, with the fields of a later build that later gives (tests only).
func encodeStored(dst []byte, it *items.Item, later laterFields) ([]byte, error) {
	r := rowOf(it)
	var table [16]string
	e := encoder{b: append(dst, storedFormat), table: r.strings(table[:0]), created: it.CreatedAt, updated: it.UpdatedAt,
		base: it.CreatedAt.Unix(), later: later}
	var mask uint64
	set := func(bit uint64, on bool) {
		if on {
			mask |= bit
		}
	}
	parts, derived := splitKey(it.Key)
	derived = derived && parts.Workflow == it.Workflow && parts.Object == it.Object && parts.Action == it.Action &&
		parts.Sequence == it.Sequence
	set(itemPartsDerived, derived)
	set(itemDedupe, it.Dedupe != "")
	set(itemFingerprint, it.Fingerprint != "")
	set(itemAttempt, it.Attempt != 0)
	set(itemClaim, it.Claim != "")
	set(itemExternalID, it.ExternalID != "")
	set(itemAttempts, it.Attempts != nil)
	set(itemHistory, it.History != nil)
	set(itemLeaseExpiresAt, it.LeaseExpiresAt != nil)
	set(itemResult, len(it.Result) > 0)
	set(itemReceiverRequestID, it.ReceiverRequestID != "")
	set(itemResolution, it.Resolution != nil)
	set(itemExtraAttempts, it.ExtraAttempts != 0)
	set(itemRetryable, it.Retryable)
	set(itemRetryAt, it.RetryAt != nil)
	set(itemFailureClass, it.FailureClass != "")
	set(itemFailureMessage, it.FailureMessage != "")
	set(itemHTTPStatus, it.HTTPStatus != 0)
	set(itemCause, it.Cause != "")
	set(itemLookupFailed, it.LookupFailed)
	set(itemNeedsPersonCause, it.NeedsPersonCause != "")
	set(itemNeedsPersonSince, it.NeedsPersonSince != nil)
	set(itemDuplicateEffect, it.DuplicateEffect)
	set(itemAlertStatus, it.AlertStatus != "")
	set(itemObject, !derived && it.Object != "")
	set(itemAction, !derived && it.Action != "")
	set(itemSequence, !derived && it.Sequence != "")
	set(itemCreatedAt, !exactInColumn(it.CreatedAt))
	set(itemUpdatedAt, !exactInColumn(it.UpdatedAt))
	set(itemHistoryDropped, it.HistoryDropped != 0)
	var resolutionLater laterValues
	if it.Resolution != nil {
		resolutionLater = e.laterOf("resolution", 0)
	}
	set(itemResolutionFields, len(resolutionLater) > 0)
	itemLater := e.laterOf("item", 0)
	mask |= itemLater.mask()
	e.b = binary.AppendUvarint(e.b, mask)
	e.checkTime(it.CreatedAt)
	e.checkTime(it.UpdatedAt)
	// The item's two times come first, whatever their bits: every other time may name them.
	if mask&itemCreatedAt != 0 {
		e.absoluteTime(it.CreatedAt)
	}
	if mask&itemUpdatedAt != 0 {
		e.absoluteTime(it.UpdatedAt)
	}
	for m := mask; m != 0; m &= m - 1 {
		switch m & -m {
		case itemPartsDerived, itemRetryable, itemLookupFailed, itemDuplicateEffect, itemResolutionFields:
		case itemDedupe:
			e.string(string(it.Dedupe))
		case itemFingerprint:
			e.string(it.Fingerprint)
		case itemAttempt:
			e.int(int64(it.Attempt))
		case itemClaim:
			e.string(it.Claim)
		case itemExternalID:
			e.string(it.ExternalID)
		case itemAttempts:
			e.b = binary.AppendUvarint(e.b, uint64(len(it.Attempts)))
			for i := range it.Attempts {
				e.attempt(&it.Attempts[i], i)
			}
		case itemHistory:
			e.b = binary.AppendUvarint(e.b, uint64(len(it.History)))
			for i := range it.History {
				e.event(&it.History[i], i)
			}
		case itemLeaseExpiresAt:
			e.time(*it.LeaseExpiresAt)
		case itemResult:
			if !json.Valid(it.Result) {
				e.fail(errors.New("the result is not JSON"))
			}
			e.b = binary.AppendUvarint(e.b, uint64(len(it.Result)))
			e.b = append(e.b, it.Result...)
		case itemReceiverRequestID:
			e.string(it.ReceiverRequestID)
		case itemResolution:
			e.resolution(it.Resolution, resolutionLater)
		case itemExtraAttempts:
			e.int(int64(it.ExtraAttempts))
		case itemRetryAt:
			e.time(*it.RetryAt)
		case itemFailureClass:
			e.string(string(it.FailureClass))
		case itemFailureMessage:
			e.string(it.FailureMessage)
		case itemHTTPStatus:
			e.int(int64(it.HTTPStatus))
		case itemCause:
			e.string(it.Cause)
		case itemNeedsPersonCause:
			e.string(it.NeedsPersonCause)
		case itemNeedsPersonSince:
			e.time(*it.NeedsPersonSince)
		case itemAlertStatus:
			e.string(it.AlertStatus)
		case itemObject:
			e.string(it.Object)
		case itemAction:
			e.string(it.Action)
		case itemSequence:
			e.string(it.Sequence)
		case itemHistoryDropped:
			e.int(int64(it.HistoryDropped))
		case itemCreatedAt, itemUpdatedAt:
		default:
			e.laterField(itemLater[m&-m])
		}
	}
	if e.err != nil {
		return dst, fmt.Errorf("sqlitestore: encode item: %w", e.err)
	}
	return e.b, nil
}

// splitKey is items.SplitKey without its allocation: every item written and read asks it.
func splitKey(key string) (items.KeyParts, bool) {
	var p items.KeyParts
	var ok bool
	if p.Workflow, key, ok = strings.Cut(key, ":"); !ok {
		return items.KeyParts{}, false
	}
	if p.Object, key, ok = strings.Cut(key, ":"); !ok {
		return items.KeyParts{}, false
	}
	if p.Action, p.Sequence, ok = strings.Cut(key, ":"); !ok || strings.IndexByte(p.Sequence, ':') >= 0 {
		return items.KeyParts{}, false
	}
	for _, part := range []string{p.Workflow, p.Object, p.Action, p.Sequence} {
		if !items.ValidKeyPart(part) {
			return items.KeyParts{}, false
		}
	}
	return p, true
}

func (e *encoder) fail(err error) {
	if e.err == nil {
		e.err = err
	}
}

func (e *encoder) attempt(a *items.Attempt, i int) {
	var mask uint64
	set := func(bit uint64, on bool) {
		if on {
			mask |= bit
		}
	}
	set(attemptNumber, a.Number != i+1)
	set(attemptClaim, a.Claim != "")
	set(attemptExecutionID, a.ExecutionID != "")
	set(attemptBatchID, a.BatchID != "")
	set(attemptDedupe, a.Dedupe != "")
	set(attemptFingerprint, a.Fingerprint != "")
	set(attemptEndedAt, a.EndedAt != nil)
	set(attemptOutcome, a.Outcome != "")
	set(attemptFailureClass, a.FailureClass != "")
	set(attemptHTTPStatus, a.HTTPStatus != 0)
	set(attemptReports, len(a.Reports) > 0)
	later := e.laterOf("attempt", i)
	mask |= later.mask()
	e.b = binary.AppendUvarint(e.b, mask)
	e.time(a.StartedAt)
	for m := mask; m != 0; m &= m - 1 {
		switch m & -m {
		case attemptNumber:
			e.int(int64(a.Number))
		case attemptClaim:
			e.string(a.Claim)
		case attemptExecutionID:
			e.string(a.ExecutionID)
		case attemptBatchID:
			e.string(a.BatchID)
		case attemptDedupe:
			e.string(string(a.Dedupe))
		case attemptFingerprint:
			e.string(a.Fingerprint)
		case attemptEndedAt:
			e.time(*a.EndedAt)
		case attemptOutcome:
			e.string(string(a.Outcome))
		case attemptFailureClass:
			e.string(string(a.FailureClass))
		case attemptHTTPStatus:
			e.int(int64(a.HTTPStatus))
		case attemptReports:
			e.b = binary.AppendUvarint(e.b, uint64(len(a.Reports)))
			for _, r := range a.Reports {
				e.string(r)
			}
		default:
			e.laterField(later[m&-m])
		}
	}
}

func (e *encoder) event(ev *items.Event, i int) {
	var mask uint64
	set := func(bit uint64, on bool) {
		if on {
			mask |= bit
		}
	}
	set(eventKind, ev.Kind != "")
	set(eventAttempt, ev.Attempt != 0)
	set(eventExecutionID, ev.ExecutionID != "")
	set(eventBatchID, ev.BatchID != "")
	set(eventDecision, ev.Decision != "")
	set(eventReason, ev.Reason != "")
	set(eventFrom, ev.From != "")
	set(eventTo, ev.To != "")
	set(eventOutcome, ev.Outcome != "")
	set(eventErrorClass, ev.ErrorClass != "")
	set(eventHTTPStatus, ev.HTTPStatus != 0)
	set(eventExternalID, ev.ExternalID != "")
	set(eventFingerprint, ev.Fingerprint != "")
	set(eventBy, ev.By != "")
	set(eventNote, ev.Note != "")
	later := e.laterOf("event", i)
	mask |= later.mask()
	e.b = binary.AppendUvarint(e.b, mask)
	e.time(ev.At)
	for m := mask; m != 0; m &= m - 1 {
		switch m & -m {
		case eventKind:
			e.string(ev.Kind)
		case eventAttempt:
			e.int(int64(ev.Attempt))
		case eventExecutionID:
			e.string(ev.ExecutionID)
		case eventBatchID:
			e.string(ev.BatchID)
		case eventDecision:
			e.string(string(ev.Decision))
		case eventReason:
			e.string(string(ev.Reason))
		case eventFrom:
			e.string(string(ev.From))
		case eventTo:
			e.string(string(ev.To))
		case eventOutcome:
			e.string(ev.Outcome)
		case eventErrorClass:
			e.string(string(ev.ErrorClass))
		case eventHTTPStatus:
			e.int(int64(ev.HTTPStatus))
		case eventExternalID:
			e.string(ev.ExternalID)
		case eventFingerprint:
			e.string(ev.Fingerprint)
		case eventBy:
			e.string(ev.By)
		case eventNote:
			e.string(ev.Note)
		default:
			e.laterField(later[m&-m])
		}
	}
}

// resolution writes r, and its further fields where a later build gives some (then the item's mask has
// itemResolutionFields).
func (e *encoder) resolution(r *items.Resolution, later laterValues) {
	e.string(r.Outcome)
	e.string(r.Evidence)
	e.string(r.ExternalID)
	e.string(r.By)
	e.time(r.At)
	if len(later) == 0 {
		return
	}
	mask := later.mask()
	e.b = binary.AppendUvarint(e.b, mask)
	for m := mask; m != 0; m &= m - 1 {
		e.laterField(later[m&-m])
	}
}

func (e *encoder) int(n int64) { e.b = binary.AppendVarint(e.b, n) }

// checkTime fails the document when t has no JSON form (see appendStored).
func (e *encoder) checkTime(t time.Time) {
	if y := t.Year(); y < 0 || y > 9999 {
		e.fail(fmt.Errorf("time %v: year outside of range [0,9999]", t))
	}
	if _, off := t.Zone(); off <= -86400 || off >= 86400 {
		e.fail(fmt.Errorf("time %v: timezone hour outside of range [0,23]", t))
	}
}

// time writes t: 0 if it is the item's creation, 1 if its last change (the same instant, shown the same:
// a claim's event and attempt start at the creation, a report's end at the change), else 2 + its
// seconds from the creation (zigzag) and then its nanoseconds and offset as explicitTime.
func (e *encoder) time(t time.Time) {
	e.checkTime(t)
	switch {
	case sameTime(t, e.created):
		e.b = append(e.b, 0)
	case sameTime(t, e.updated):
		e.b = append(e.b, 1)
	default:
		d := t.Unix() - e.base
		e.b = binary.AppendUvarint(e.b, 2+(uint64(d<<1)^uint64(d>>63)))
		e.nanosAndOffset(t)
	}
}

// sameTime reports whether a and b are the same instant, shown the same in JSON.
func sameTime(a, b time.Time) bool {
	if !a.Equal(b) {
		return false
	}
	_, oa := a.Zone()
	_, ob := b.Zone()
	return oa == ob
}

// absoluteTime writes t's Unix seconds (zigzag varint), then its nanoseconds and offset.
func (e *encoder) absoluteTime(t time.Time) {
	e.b = binary.AppendVarint(e.b, t.Unix())
	e.nanosAndOffset(t)
}

// nanosAndOffset writes t's nanoseconds<<1 | has-offset, then the zone offset in seconds if it has one.
func (e *encoder) nanosAndOffset(t time.Time) {
	_, off := t.Zone()
	flag := uint64(0)
	if off != 0 {
		flag = 1
	}
	e.b = binary.AppendUvarint(e.b, uint64(t.Nanosecond())<<1|flag)
	if off != 0 {
		e.b = binary.AppendVarint(e.b, int64(off))
	}
}

func (e *encoder) string(s string) {
	if s == "" {
		e.b = append(e.b, 0)
		return
	}
	for i, t := range e.table {
		if t == s {
			e.b = binary.AppendUvarint(e.b, uint64(i)<<2|3)
			return
		}
	}
	if len(s) <= longestWord {
		if n, ok := storedWordNumbers[s]; ok {
			e.b = binary.AppendUvarint(e.b, uint64(n+1)<<2)
			return
		}
	}
	e.table = append(e.table, s)
	if p := hexPrefix(s); p >= 0 {
		digits := s[p:]
		e.b = binary.AppendUvarint(e.b, uint64(len(digits)/2)<<2|2)
		e.b = binary.AppendUvarint(e.b, uint64(p))
		e.b = append(e.b, s[:p]...)
		e.b, _ = hex.AppendDecode(e.b, []byte(digits)) // hexPrefix checked the digits
		return
	}
	e.b = binary.AppendUvarint(e.b, uint64(len(s))<<2|1)
	e.b = append(e.b, s...)
}

// hexPrefix returns where s's run of lowercase hex digits at its end starts, if that run is at least 16
// digits (a fingerprint, a claim, a digest), keeping an even number of them; else -1.
func hexPrefix(s string) int {
	i := len(s)
	for i > 0 && lowerHex[s[i-1]] {
		i--
	}
	if (len(s)-i)%2 == 1 {
		i++
	}
	if len(s)-i < 16 {
		return -1
	}
	return i
}

// lowerHex holds the bytes of lowercase hex digits.
var lowerHex = func() (t [256]bool) {
	for _, c := range "0123456789abcdef" {
		t[c] = true
	}
	return t
}()

// errCorrupt is a stored document that cannot be read.
var errCorrupt = errors.New("sqlitestore: corrupt item document")

// decoder reads one stored document.
type decoder struct {
	b                []byte
	table            []string
	created, updated time.Time
	base             int64
	err              error
}

// decodeStored reads the stored document doc of the row r: the compact form, or the JSON of earlier
// builds (which holds the whole item, so r is not needed).
func decodeStored(doc []byte, r *row) (*items.Item, error) {
	if len(doc) > 0 && doc[0] == '{' {
		return decodeJSON(doc)
	}
	if len(doc) == 0 || doc[0] != storedFormat {
		return nil, fmt.Errorf("%w: unknown format", errCorrupt)
	}
	var table [16]string
	d := decoder{b: doc[1:], table: r.strings(table[:0])}
	it := &items.Item{Tenant: r.tenant, Key: r.key, State: items.State(r.state), Destination: r.destination,
		Workflow: r.workflow, Owner: r.owner, Reference: r.reference, BatchID: r.batchID, ExecutionID: r.executionID,
		Version: r.version, BatchIndex: r.batchIndex, NeedsPerson: r.needsPerson,
		CreatedAt: time.Unix(0, r.createdAt).UTC(), UpdatedAt: time.Unix(0, r.updatedAt).UTC()}
	mask := d.uvarint()
	// The item's two times come first, whatever their bits: every other time may name them.
	if mask&itemCreatedAt != 0 {
		it.CreatedAt = d.absoluteTime()
	}
	if mask&itemUpdatedAt != 0 {
		it.UpdatedAt = d.absoluteTime()
	}
	d.created, d.updated, d.base = it.CreatedAt, it.UpdatedAt, it.CreatedAt.Unix()
	if mask&itemPartsDerived != 0 {
		if parts, ok := splitKey(it.Key); ok {
			it.Object, it.Action, it.Sequence = parts.Object, parts.Action, parts.Sequence
		} else {
			d.fail()
		}
	}
	for m := mask; m != 0 && d.err == nil; m &= m - 1 {
		switch m & -m {
		case itemPartsDerived:
		case itemRetryable:
			it.Retryable = true
		case itemLookupFailed:
			it.LookupFailed = true
		case itemDuplicateEffect:
			it.DuplicateEffect = true
		case itemDedupe:
			it.Dedupe = items.Dedupe(d.string())
		case itemFingerprint:
			it.Fingerprint = d.string()
		case itemAttempt:
			it.Attempt = d.int()
		case itemClaim:
			it.Claim = d.string()
		case itemExternalID:
			it.ExternalID = d.string()
		case itemAttempts:
			n := d.count()
			it.Attempts = make([]items.Attempt, 0, min(n, grownOnRead))
			for i := 0; i < n && d.err == nil; i++ {
				it.Attempts = append(it.Attempts, items.Attempt{})
				d.attempt(&it.Attempts[i], i)
			}
		case itemHistory:
			n := d.count()
			it.History = make([]items.Event, 0, min(n, grownOnRead))
			for i := 0; i < n && d.err == nil; i++ {
				it.History = append(it.History, items.Event{})
				d.event(&it.History[i])
			}
		case itemLeaseExpiresAt:
			it.LeaseExpiresAt = d.timePtr()
		case itemResult:
			it.Result = json.RawMessage(d.bytes())
		case itemReceiverRequestID:
			it.ReceiverRequestID = d.string()
		case itemResolution:
			it.Resolution = &items.Resolution{Outcome: d.string(), Evidence: d.string(), ExternalID: d.string(), By: d.string()}
			it.Resolution.At = d.time()
			if mask&itemResolutionFields != 0 {
				d.resolutionFields()
			}
		case itemResolutionFields:
			if mask&itemResolution == 0 {
				d.fail() // further fields of no resolution
			}
		case itemExtraAttempts:
			it.ExtraAttempts = d.int()
		case itemRetryAt:
			it.RetryAt = d.timePtr()
		case itemFailureClass:
			it.FailureClass = items.ErrorClass(d.string())
		case itemFailureMessage:
			it.FailureMessage = d.string()
		case itemHTTPStatus:
			it.HTTPStatus = d.int()
		case itemCause:
			it.Cause = d.string()
		case itemNeedsPersonCause:
			it.NeedsPersonCause = d.string()
		case itemNeedsPersonSince:
			it.NeedsPersonSince = d.timePtr()
		case itemAlertStatus:
			it.AlertStatus = d.string()
		case itemObject:
			it.Object = d.string()
		case itemAction:
			it.Action = d.string()
		case itemSequence:
			it.Sequence = d.string()
		case itemHistoryDropped:
			it.HistoryDropped = d.int()
		case itemCreatedAt, itemUpdatedAt:
		default:
			d.skip(m & -m)
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	if d.err != nil {
		return nil, d.err
	}
	return it, nil
}

// skip passes over the field of bit, a bit of a later build: a field of the skippable range is a length
// and that many bytes; any other is one this build must not ignore, and the document is refused.
func (d *decoder) skip(bit uint64) {
	if bit&skippableFields == 0 {
		d.fail()
		return
	}
	d.take(d.uvarint())
}

// resolutionFields reads the mask of a resolution's further fields and the fields: none yet but
// skippable ones.
func (d *decoder) resolutionFields() {
	mask := d.uvarint()
	for m := mask; m != 0 && d.err == nil; m &= m - 1 {
		d.skip(m & -m)
	}
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errCorrupt
	}
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		d.b = nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		d.b = nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int() int { return int(d.varint()) }

// grownOnRead bounds what a list's stored length reserves before its elements are read: a corrupt
// document's length (up to its byte count) then costs no more memory than the elements it really holds,
// not a million items' worth of empty structs; a real item's lists are far shorter.
const grownOnRead = 64

// count reads a number of elements, each at least a byte long.
func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return 0
	}
	return int(n)
}

func (d *decoder) take(n uint64) []byte {
	if n > uint64(len(d.b)) {
		d.fail()
		d.b = nil
		return nil
	}
	out := d.b[:n:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) bytes() []byte {
	b := d.take(d.uvarint())
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

func (d *decoder) string() string {
	v := d.uvarint()
	if v == 0 {
		return ""
	}
	n := v >> 2
	switch v & 3 {
	case 0:
		if n > uint64(len(storedWords)) {
			d.fail()
			return ""
		}
		return storedWords[n-1]
	case 3:
		if n >= uint64(len(d.table)) {
			d.fail()
			return ""
		}
		return d.table[n]
	case 2:
		prefix := d.take(d.uvarint())
		digits := d.take(n)
		if d.err != nil {
			return ""
		}
		buf := make([]byte, len(prefix)+hex.EncodedLen(len(digits)))
		copy(buf, prefix)
		hex.Encode(buf[len(prefix):], digits)
		s := string(buf)
		d.table = append(d.table, s)
		return s
	}
	s := string(d.take(n))
	d.table = append(d.table, s)
	return s
}

func (d *decoder) time() time.Time {
	switch v := d.uvarint(); v {
	case 0:
		return d.created
	case 1:
		return d.updated
	default:
		z := v - 2
		return d.nanosAndOffset(d.base + (int64(z>>1) ^ -int64(z&1)))
	}
}

func (d *decoder) absoluteTime() time.Time { return d.nanosAndOffset(d.varint()) }

// nanosAndOffset reads what encoder.nanosAndOffset wrote and returns the time at sec.
func (d *decoder) nanosAndOffset(sec int64) time.Time {
	ns := d.uvarint()
	if ns>>1 >= 1e9 {
		d.fail()
	}
	t := time.Unix(sec, int64(ns>>1)).UTC()
	if ns&1 != 0 {
		off := d.varint()
		if off <= -86400 || off >= 86400 {
			d.fail()
		}
		t = t.In(time.FixedZone("", int(off)))
	}
	return t
}

func (d *decoder) timePtr() *time.Time {
	t := d.time()
	return &t
}

func (d *decoder) attempt(a *items.Attempt, i int) {
	mask := d.uvarint()
	a.Number = i + 1
	a.StartedAt = d.time()
	for m := mask; m != 0 && d.err == nil; m &= m - 1 {
		switch m & -m {
		case attemptNumber:
			a.Number = d.int()
		case attemptClaim:
			a.Claim = d.string()
		case attemptExecutionID:
			a.ExecutionID = d.string()
		case attemptBatchID:
			a.BatchID = d.string()
		case attemptDedupe:
			a.Dedupe = items.Dedupe(d.string())
		case attemptFingerprint:
			a.Fingerprint = d.string()
		case attemptEndedAt:
			a.EndedAt = d.timePtr()
		case attemptOutcome:
			a.Outcome = items.State(d.string())
		case attemptFailureClass:
			a.FailureClass = items.ErrorClass(d.string())
		case attemptHTTPStatus:
			a.HTTPStatus = d.int()
		case attemptReports:
			n := d.count()
			a.Reports = make([]string, 0, min(n, grownOnRead))
			for j := 0; j < n && d.err == nil; j++ {
				a.Reports = append(a.Reports, d.string())
			}
		default:
			d.skip(m & -m)
		}
	}
}

func (d *decoder) event(ev *items.Event) {
	mask := d.uvarint()
	ev.At = d.time()
	for m := mask; m != 0 && d.err == nil; m &= m - 1 {
		switch m & -m {
		case eventKind:
			ev.Kind = d.string()
		case eventAttempt:
			ev.Attempt = d.int()
		case eventExecutionID:
			ev.ExecutionID = d.string()
		case eventBatchID:
			ev.BatchID = d.string()
		case eventDecision:
			ev.Decision = items.Decision(d.string())
		case eventReason:
			ev.Reason = items.Reason(d.string())
		case eventFrom:
			ev.From = items.State(d.string())
		case eventTo:
			ev.To = items.State(d.string())
		case eventOutcome:
			ev.Outcome = d.string()
		case eventErrorClass:
			ev.ErrorClass = items.ErrorClass(d.string())
		case eventHTTPStatus:
			ev.HTTPStatus = d.int()
		case eventExternalID:
			ev.ExternalID = d.string()
		case eventFingerprint:
			ev.Fingerprint = d.string()
		case eventBy:
			ev.By = d.string()
		case eventNote:
			ev.Note = d.string()
		default:
			d.skip(m & -m)
		}
	}
}
