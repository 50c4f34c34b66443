package itemstest

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/replaysafe/companion/items"
)

// Pieces of strings that encoding/json writes in a special way, next to ordinary ones.
var stringPieces = []string{
	"invoice-742", "a b", "x", "Ünïcødé", "日本語", "😀", "€–…", "\ufffd", "\u007f",
	`"`, `\`, "<", ">", "&", "</script>", "\n", "\r", "\t", "\b", "\f", "\x00", "\x01", "\x1f", "\x1b[0m",
	"\u2028", "\u2029", "\u2027", "\u202a",
	"\xff", "\xc3", "\xe2\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc0\xaf", "a\xe2\x82",
}

func randomString(r *rand.Rand) string {
	switch r.IntN(4) {
	case 0:
		return ""
	case 1, 2:
		const plain = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_:./ @#$%*()[]{}+=!?'~|^`;,"
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = plain[r.IntN(len(plain))]
		}
		return string(b)
	}
	var sb strings.Builder
	for range 1 + r.IntN(5) {
		sb.WriteString(stringPieces[r.IntN(len(stringPieces))])
	}
	return sb.String()
}

var zones = []*time.Location{
	time.UTC, time.FixedZone("", 0), time.FixedZone("IST", 5*3600+30*60), time.FixedZone("PST", -8*3600),
	time.FixedZone("LMT", 3661), time.FixedZone("", 23*3600+59*60), time.FixedZone("", -(23*3600 + 59*60)),
}

func randomTime(r *rand.Rand) time.Time {
	switch r.IntN(8) {
	case 0:
		return time.Time{}
	case 1:
		return time.Now() // with a monotonic reading, which MarshalJSON ignores
	}
	ns := 0
	switch r.IntN(3) {
	case 1:
		ns = r.IntN(1000) * 1e6
	case 2:
		ns = r.IntN(1e9)
	}
	year := 1970 + r.IntN(100)
	if r.IntN(5) == 0 {
		year = r.IntN(10000)
	}
	return time.Date(year, time.Month(1+r.IntN(12)), 1+r.IntN(31), r.IntN(24), r.IntN(60), r.IntN(60), ns,
		zones[r.IntN(len(zones))])
}

func randomTimePtr(r *rand.Rand) *time.Time {
	if r.IntN(2) == 0 {
		return nil
	}
	t := randomTime(r)
	return &t
}

func randomInt(r *rand.Rand) int {
	switch r.IntN(4) {
	case 0:
		return 0
	case 1:
		return -r.IntN(1000)
	case 2:
		return r.Int()
	}
	return r.IntN(600)
}

func randomBool(r *rand.Rand) bool { return r.IntN(2) == 0 }

// Pieces of JSON string contents: raw characters that compaction escapes or keeps, and escapes it keeps.
var jsonStringPieces = []string{
	"abc", " ", "  two  spaces ", "<", ">", "&", "é", "😀", "\u2028", "\u2029", "\xe2\x80\xa7", "\xff", "\xe2\x80",
	`\"`, `\\`, `\/`, `\n`, `\t`, `\u003c`, `\u2028`, `\ud83d\ude00`, `\u0000`, ",", ":", "{", "]",
}

var jsonSpace = []string{"", "", "", " ", "\n", "\t ", "\r\n  "}

func randomJSONString(r *rand.Rand, sb *strings.Builder) {
	sb.WriteByte('"')
	for range r.IntN(5) {
		sb.WriteString(jsonStringPieces[r.IntN(len(jsonStringPieces))])
	}
	sb.WriteByte('"')
}

func randomJSONValue(r *rand.Rand, sb *strings.Builder, depth int, spaced bool) {
	space := func() {
		if spaced {
			sb.WriteString(jsonSpace[r.IntN(len(jsonSpace))])
		}
	}
	kind := r.IntN(7)
	if depth >= 3 {
		kind = r.IntN(3)
	}
	switch kind {
	case 0:
		sb.WriteString([]string{"true", "false", "null"}[r.IntN(3)])
	case 1:
		sb.WriteString([]string{"0", "-1", "1250", "1.5e10", "120.50", "-0.0E-3", "1E+2"}[r.IntN(7)])
	case 2:
		randomJSONString(r, sb)
	case 3, 4:
		sb.WriteByte('[')
		for i := range r.IntN(4) {
			if i > 0 {
				space()
				sb.WriteByte(',')
			}
			space()
			randomJSONValue(r, sb, depth+1, spaced)
		}
		space()
		sb.WriteByte(']')
	default:
		sb.WriteByte('{')
		for i := range r.IntN(4) {
			if i > 0 {
				space()
				sb.WriteByte(',')
			}
			space()
			randomJSONString(r, sb)
			space()
			sb.WriteByte(':')
			space()
			randomJSONValue(r, sb, depth+1, spaced)
		}
		space()
		sb.WriteByte('}')
	}
}

func randomResult(r *rand.Rand) json.RawMessage {
	switch r.IntN(6) {
	case 0, 1:
		return nil
	case 2:
		return json.RawMessage{}
	}
	var sb strings.Builder
	spaced := r.IntN(2) == 0
	if spaced {
		sb.WriteString(jsonSpace[r.IntN(len(jsonSpace))])
	}
	randomJSONValue(r, &sb, 0, spaced)
	if spaced {
		sb.WriteString(jsonSpace[r.IntN(len(jsonSpace))])
	}
	return json.RawMessage(sb.String())
}

// randomKind returns one of the contract's words or, now and then, any string: the typed string kinds
// are plain strings to encoding/json.
func randomKind[K ~string](r *rand.Rand, words ...K) K {
	if r.IntN(5) == 0 {
		return K(randomString(r))
	}
	return words[r.IntN(len(words))]
}

func randomAttempt(r *rand.Rand) items.Attempt {
	a := items.Attempt{
		Number: randomInt(r), Claim: randomString(r), ExecutionID: randomString(r), BatchID: randomString(r),
		Dedupe: randomKind(r, "", items.DedupeKey, items.DedupeLookup, items.DedupeNone), Fingerprint: randomString(r),
		StartedAt: randomTime(r), EndedAt: randomTimePtr(r),
		Outcome:      randomKind(r, "", items.StateSucceeded, items.StateFailed, items.StateUnknown),
		FailureClass: randomKind(r, "", items.ClassTimeout, items.ClassHTTP, items.ClassDNS), HTTPStatus: randomInt(r),
	}
	switch r.IntN(3) {
	case 1:
		a.Reports = []string{}
	case 2:
		for range 1 + r.IntN(3) {
			a.Reports = append(a.Reports, randomString(r))
		}
	}
	return a
}

func randomEvent(r *rand.Rand) items.Event {
	return items.Event{
		At: randomTime(r), Kind: randomKind(r, items.EventClaimed, items.EventAfterWrite, items.EventResolve),
		Attempt: randomInt(r), ExecutionID: randomString(r), BatchID: randomString(r),
		Decision: randomKind(r, "", items.Proceed, items.Skip, items.Conflict, items.Reconcile),
		Reason:   randomKind(r, "", items.ReasonNew, items.ReasonRetry, items.ReasonRecorded),
		From:     randomKind(r, "", items.StatePrepared, items.StateInFlight),
		To:       randomKind(r, "", items.StateInFlight, items.StateSucceeded, items.StateFailed),
		Outcome:  randomString(r), ErrorClass: randomKind(r, "", items.ClassConnectionReset, items.ClassOther),
		HTTPStatus: randomInt(r), ExternalID: randomString(r), Fingerprint: randomString(r), By: randomString(r),
		Note: randomString(r),
	}
}

// RandomItem returns an item every field of which is drawn at random, with the strings (invalid UTF-8
// included), times and results that encoding/json treats specially: for tests of what encodes and
// decodes items.
func RandomItem(r *rand.Rand) *items.Item {
	it := &items.Item{
		Tenant: randomString(r), Key: randomString(r), Workflow: randomString(r), Object: randomString(r),
		Action: randomString(r), Sequence: randomString(r), Destination: randomString(r),
		Dedupe: randomKind(r, "", items.DedupeKey, items.DedupeLookup, items.DedupeNone), Reference: randomString(r),
		BatchID: randomString(r), Owner: randomString(r), Fingerprint: randomString(r),
		State:   randomKind(r, "", items.StatePrepared, items.StateInFlight, items.StateSucceeded, items.StateUnknown),
		Attempt: randomInt(r), ExtraAttempts: randomInt(r), Claim: randomString(r), LeaseExpiresAt: randomTimePtr(r),
		Retryable: randomBool(r), RetryAt: randomTimePtr(r), ExternalID: randomString(r),
		ReceiverRequestID: randomString(r), Result: randomResult(r),
		FailureClass:   randomKind(r, "", items.ClassValidation, items.ClassTLS, items.ClassConnectionRefused),
		FailureMessage: randomString(r), HTTPStatus: randomInt(r), Cause: randomString(r), LookupFailed: randomBool(r),
		NeedsPerson: randomBool(r), NeedsPersonCause: randomString(r), NeedsPersonSince: randomTimePtr(r),
		DuplicateEffect: randomBool(r), AlertStatus: randomString(r), Version: r.Int64() >> r.IntN(64),
		CreatedAt: randomTime(r), UpdatedAt: randomTime(r),
	}
	if r.IntN(2) == 0 {
		i := randomInt(r)
		it.BatchIndex = &i
	}
	if n := r.IntN(5); n > 0 {
		it.Attempts = make([]items.Attempt, 0, n-1) // n == 1: empty, not nil
		for range n - 1 {
			it.Attempts = append(it.Attempts, randomAttempt(r))
		}
	}
	if n := r.IntN(5); n > 0 {
		it.History = make([]items.Event, 0, n-1)
		for range n - 1 {
			it.History = append(it.History, randomEvent(r))
		}
	}
	if r.IntN(3) == 0 {
		it.Resolution = &items.Resolution{Outcome: randomString(r), Evidence: randomString(r),
			ExternalID: randomString(r), By: randomString(r), At: randomTime(r)}
	}
	if r.IntN(3) == 0 {
		it.HistoryDropped = randomInt(r)
	}
	return it
}
