package items_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// appendJSONMatches checks the contract of AppendJSON for one item: the bytes of json.Marshal, appended
// after whatever dst already held, and an error exactly when json.Marshal fails.
func appendJSONMatches(t *testing.T, it *items.Item) {
	t.Helper()
	want, wantErr := json.Marshal(it)
	prefix := []byte("prefix;")
	got, err := it.AppendJSON(append([]byte(nil), prefix...))
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("AppendJSON error %v, json.Marshal error %v\nitem: %#v", err, wantErr, it)
	}
	if err != nil {
		if string(got) != string(prefix) {
			t.Fatalf("AppendJSON failed (%v) but did not return dst as it was: %q", err, got)
		}
		return
	}
	if !bytes.HasPrefix(got, prefix) {
		t.Fatalf("AppendJSON overwrote dst: %q", got)
	}
	if got := got[len(prefix):]; !bytes.Equal(got, want) {
		t.Fatalf("AppendJSON differs from json.Marshal\n got: %s\nwant: %s\nfirst difference at byte %d",
			got, want, firstDifference(got, want))
	}
}

func firstDifference(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestAppendJSONRandomItems holds AppendJSON to json.Marshal byte for byte on thousands of items whose
// every field is drawn at random, with the strings, times and results that encoding/json treats
// specially.
func TestAppendJSONRandomItems(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(20261129, 742))
	n := 5000
	if testing.Short() {
		n = 500
	}
	for range n {
		appendJSONMatches(t, randomItem(r))
	}
}

// TestAppendJSONEveryField fills every field of Item, Attempt, Event and Resolution by reflection, so a
// field added to them later fails here until AppendJSON writes it; the zero item checks that every
// omitempty field is left out and every other one is written.
func TestAppendJSONEveryField(t *testing.T) {
	t.Parallel()
	var full items.Item
	fill(t, reflect.ValueOf(&full).Elem(), 0)
	appendJSONMatches(t, &full)
	doc, _ := full.AppendJSON(nil)
	for _, typ := range []reflect.Type{reflect.TypeFor[items.Item](), reflect.TypeFor[items.Attempt](),
		reflect.TypeFor[items.Event](), reflect.TypeFor[items.Resolution]()} {
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !bytes.Contains(doc, []byte(`"`+name+`":`)) {
				t.Errorf("%s.%s (%q) is missing from the document", typ.Name(), f.Name, name)
			}
		}
	}
	appendJSONMatches(t, &items.Item{})
	appendJSONMatches(t, &items.Item{Attempts: []items.Attempt{{}}, History: []items.Event{{}}, Resolution: &items.Resolution{}})
	appendJSONMatches(t, nil)
}

// TestAppendJSONErrors checks that AppendJSON fails exactly where json.Marshal does: times it cannot
// write as RFC 3339 and results that are not JSON.
func TestAppendJSONErrors(t *testing.T) {
	t.Parallel()
	at := func(tm time.Time) *time.Time { return &tm }
	year10000 := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	yearMinus1 := time.Date(-1, 12, 31, 0, 0, 0, 0, time.UTC)
	dayOffset := time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 24*3600))
	edgeOffset := time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 23*3600+59*60))
	lastInstant := time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("", -3600)) // year 10000 in UTC
	base := func() *items.Item { return &items.Item{Tenant: "t", Key: "k"} }
	tests := []struct {
		name    string
		change  func(it *items.Item)
		wantErr bool
	}{
		{"CreatedAtYear10000", func(it *items.Item) { it.CreatedAt = year10000 }, true},
		{"UpdatedAtYearMinus1", func(it *items.Item) { it.UpdatedAt = yearMinus1 }, true},
		{"LeaseOffsetOfADay", func(it *items.Item) { it.LeaseExpiresAt = at(dayOffset) }, true},
		{"LeaseOffset23h59", func(it *items.Item) { it.LeaseExpiresAt = at(edgeOffset) }, false},
		{"LastInstantInItsZone", func(it *items.Item) { it.CreatedAt = lastInstant }, false},
		{"RetryAtYear10000", func(it *items.Item) { it.RetryAt = at(year10000) }, true},
		{"NeedsPersonSinceYear10000", func(it *items.Item) { it.NeedsPersonSince = at(year10000) }, true},
		{"AttemptStartedYear10000", func(it *items.Item) { it.Attempts = []items.Attempt{{}, {StartedAt: year10000}} }, true},
		{"AttemptEndedYearMinus1", func(it *items.Item) { it.Attempts = []items.Attempt{{EndedAt: at(yearMinus1)}} }, true},
		{"EventAtYear10000", func(it *items.Item) { it.History = []items.Event{{Kind: "x"}, {At: year10000}} }, true},
		{"ResolutionAtOffsetOfADay", func(it *items.Item) { it.Resolution = &items.Resolution{At: dayOffset} }, true},
		{"ResultUnclosedObject", func(it *items.Item) { it.Result = json.RawMessage(`{"a":1`) }, true},
		{"ResultMissingValue", func(it *items.Item) { it.Result = json.RawMessage(`{"a":}`) }, true},
		{"ResultOnlySpace", func(it *items.Item) { it.Result = json.RawMessage(" ") }, true},
		{"ResultTrailingComma", func(it *items.Item) { it.Result = json.RawMessage(`[1,]`) }, true},
		{"ResultControlInString", func(it *items.Item) { it.Result = json.RawMessage("\"a\x01\"") }, true},
		{"ResultLeadingZero", func(it *items.Item) { it.Result = json.RawMessage(`01`) }, true},
		{"ResultTrailingText", func(it *items.Item) { it.Result = json.RawMessage(`{"a":1}x`) }, true},
		{"ResultTwoValues", func(it *items.Item) { it.Result = json.RawMessage(`1 2`) }, true},
		{"ResultBadEscape", func(it *items.Item) { it.Result = json.RawMessage(`"\<"`) }, true},
		{"ResultUnquotedHTML", func(it *items.Item) { it.Result = json.RawMessage(`<a>`) }, true},
		{"ResultSpacedButValid", func(it *items.Item) { it.Result = json.RawMessage(" {\"a\" : [1, \"<b> c\"]}\n") }, false},
		{"ResultEmptyIsOmitted", func(it *items.Item) { it.Result = json.RawMessage{} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			it := base()
			tt.change(it)
			if _, err := json.Marshal(it); (err != nil) != tt.wantErr {
				t.Fatalf("json.Marshal error = %v, the test expects an error: %v", err, tt.wantErr)
			}
			appendJSONMatches(t, it)
		})
	}
}

// raceEnabled is set by race_test.go when the tests run under the race detector.
var raceEnabled bool

// TestAppendJSONAllocationFree checks the point of AppendJSON: with a buffer of enough capacity the
// common item, with and without a result, costs no allocation.
func TestAppendJSONAllocationFree(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	withResult := freshlyClaimed()
	withResult.State = items.StateSucceeded
	withResult.Result = json.RawMessage(`{"id":"in_1Q2w3E","status":"paid","amount":1250,"lines":[{"sku":"A-1","qty":2}]}`)
	withResult.ExternalID = "in_1Q2w3E"
	for name, it := range map[string]*items.Item{"FreshlyClaimed": freshlyClaimed(), "SucceededWithResult": withResult} {
		buf := make([]byte, 0, 4096)
		allocs := testing.AllocsPerRun(200, func() {
			var err error
			if buf, err = it.AppendJSON(buf[:0]); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: AppendJSON allocates %.1f times per item", name, allocs)
		}
		appendJSONMatches(t, it)
	}
}

// BenchmarkAppendJSON compares AppendJSON with a reused buffer to json.Marshal on the item a store
// writes most: one freshly claimed by a batch (one attempt, one history event).
func BenchmarkAppendJSON(b *testing.B) {
	it := freshlyClaimed()
	b.Run("AppendJSON", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			var err error
			if buf, err = it.AppendJSON(buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(len(buf)))
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		var doc []byte
		for b.Loop() {
			var err error
			if doc, err = json.Marshal(it); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(len(doc)))
	})
}

// freshlyClaimed returns an item as a batch's before-write leaves it: claimed, in flight, one attempt
// and one history event.
func freshlyClaimed() *items.Item {
	now := time.Date(2026, 11, 29, 18, 0, 3, 141592653, time.UTC)
	lease := now.Add(5 * time.Minute)
	idx := 41
	fp := "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	return &items.Item{
		Tenant: "acme", Key: "invoice-742:reminder:2", Workflow: "invoice-reminders", Object: "invoice-742",
		Action: "reminder", Sequence: "2", Destination: "stripe", Dedupe: items.DedupeKey, Reference: "invoice-742",
		BatchID: "b_5f1c0e2a9d", BatchIndex: &idx, Owner: "billing@acme.example", Fingerprint: fp,
		State: items.StateInFlight, Attempt: 1, Claim: "c_3b9f2e7d1a4c5e6f7a8b9c0d", LeaseExpiresAt: &lease,
		Attempts: []items.Attempt{{Number: 1, Claim: "c_3b9f2e7d1a4c5e6f7a8b9c0d", ExecutionID: "8812",
			BatchID: "b_5f1c0e2a9d", Dedupe: items.DedupeKey, Fingerprint: fp, StartedAt: now}},
		History: []items.Event{{At: now, Kind: items.EventClaimed, Attempt: 1, ExecutionID: "8812",
			BatchID: "b_5f1c0e2a9d", Decision: items.Proceed, Reason: items.ReasonNew, To: items.StateInFlight,
			Fingerprint: fp}},
		Version: 1, CreatedAt: now, UpdatedAt: now,
	}
}

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

func randomItem(r *rand.Rand) *items.Item {
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
	return it
}
