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
	"github.com/replaysafe/companion/items/itemstest"
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
		appendJSONMatches(t, itemstest.RandomItem(r))
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
