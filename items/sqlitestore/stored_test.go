package sqlitestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
)

// storedSample returns a random item (itemstest.RandomItem) with, now and then, what the stored form
// treats specially: a key of four parts with its parts (or other ones), strings ending in lowercase hex
// (of every length, odd ones too, and upper case), strings repeated across fields, contract words.
func storedSample(r *rand.Rand) *items.Item {
	it := itemstest.RandomItem(r)
	hexOf := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		s := hex.EncodeToString(b)
		switch r.IntN(6) {
		case 0:
			return s[1:] // odd
		case 1:
			return strings.ToUpper(s)
		case 2:
			return "c_" + s
		case 3:
			return "f" + s + "x"
		}
		return s
	}
	if r.IntN(2) == 0 {
		it.Key = "invoices:inv-" + hexOf(3) + ":send:" + []string{"0", "1", "reminder-2"}[r.IntN(3)]
		if parts, ok := items.SplitKey(it.Key); ok && r.IntN(4) != 0 {
			it.Workflow, it.Object, it.Action, it.Sequence = parts.Workflow, parts.Object, parts.Action, parts.Sequence
			if r.IntN(4) == 0 {
				it.Sequence = "other"
			}
		}
	}
	if r.IntN(2) == 0 {
		it.Fingerprint = hexOf([]int{32, 8, 7, 1}[r.IntN(4)])
		it.Claim = hexOf(12)
	}
	for i := range it.Attempts {
		a := &it.Attempts[i]
		if r.IntN(2) == 0 {
			a.Fingerprint, a.Claim, a.ExecutionID, a.BatchID = it.Fingerprint, it.Claim, it.ExecutionID, it.BatchID
			a.Number = i + 1
			for j := range a.Reports {
				a.Reports[j] = hexOf(16)
			}
		}
	}
	for i := range it.History {
		e := &it.History[i]
		if r.IntN(2) == 0 {
			e.Fingerprint, e.ExternalID, e.BatchID, e.ExecutionID = it.Fingerprint, it.ExternalID, it.BatchID, it.Tenant
			e.Outcome = string(items.StateSucceeded)
		}
	}
	if r.IntN(4) == 0 {
		it.CreatedAt, it.UpdatedAt = time.Date(2026, 12, 1, 8, 0, 0, r.IntN(1e9), time.UTC), time.Now()
	}
	// Times of the item's creation and last change, some of them the same instant in another zone.
	same := func() time.Time {
		t := []time.Time{it.CreatedAt, it.UpdatedAt}[r.IntN(2)]
		if r.IntN(4) == 0 {
			t = t.In(time.FixedZone("", 3600))
		}
		return t
	}
	for i := range it.Attempts {
		if r.IntN(2) == 0 {
			t, e := same(), same()
			it.Attempts[i].StartedAt, it.Attempts[i].EndedAt = t, &e
		}
	}
	for i := range it.History {
		if r.IntN(2) == 0 {
			it.History[i].At = same()
		}
	}
	return it
}

// TestStoredFormReadsBackTheSameItem encodes random items in the stored form and reads them back with
// their row's columns: every item shows the same JSON as before (the API's form: what GET
// /v1/items/{key} answers), encodes to the same stored bytes again, and the stored form refuses exactly
// the items the JSON form refuses.
func TestStoredFormReadsBackTheSameItem(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(20261201, 3))
	encoded := 0
	for range 20000 {
		it := storedSample(r)
		want, wantErr := it.AppendJSON(nil)
		doc, _, err := document(nil, it)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("stored form error %v, JSON error %v, for %s", err, wantErr, want)
		}
		if err != nil {
			continue
		}
		encoded++
		row := rowOf(it)
		got, err := decodeStored(doc, &row)
		if err != nil {
			t.Fatalf("decode %x: %v\nitem %s", doc, err, want)
		}
		gotJSON, err := got.AppendJSON(nil)
		if err != nil {
			t.Fatalf("the item read back has no JSON: %v\nitem %s", err, want)
		}
		if !bytes.Equal(gotJSON, want) {
			t.Fatalf("read back differs\ngot:  %s\nwant: %s", gotJSON, want)
		}
		again, _, err := document(nil, got)
		if err != nil || !bytes.Equal(again, doc) {
			t.Fatalf("the item read back encodes to %x (%v), first %x", again, err, doc)
		}
	}
	if encoded < 10000 {
		t.Fatalf("only %d of 20000 random items could be encoded", encoded)
	}
}

// TestStoredFormRefusesTimesJSONCannotShow: a time outside the years 0 to 9999, or with a zone offset of
// a day or more, fails the stored form as it fails the JSON form, in every field that holds a time.
func TestStoredFormRefusesTimesJSONCannotShow(t *testing.T) {
	t.Parallel()
	bad := []time.Time{
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 12, 31, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 24*3600)), time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", -24*3600-60)),
	}
	good := []time.Time{
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 24*3600-1)), time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", -24*3600+1)),
	}
	fields := []func(it *items.Item, tm time.Time){
		func(it *items.Item, tm time.Time) { it.CreatedAt = tm },
		func(it *items.Item, tm time.Time) { it.UpdatedAt = tm },
		func(it *items.Item, tm time.Time) { it.RetryAt = &tm },
		func(it *items.Item, tm time.Time) { it.Attempts = []items.Attempt{{Number: 1, StartedAt: tm}} },
		func(it *items.Item, tm time.Time) { it.History = []items.Event{{At: tm, Kind: items.EventClaimed}} },
		func(it *items.Item, tm time.Time) { it.Resolution = &items.Resolution{At: tm} },
	}
	for _, set := range fields {
		for i, tm := range append(bad, good...) {
			it := &items.Item{Tenant: "acme", Key: "k", CreatedAt: time.Unix(1e9, 0).UTC(), UpdatedAt: time.Unix(1e9, 0).UTC()}
			set(it, tm)
			_, jsonErr := it.AppendJSON(nil)
			doc, _, err := document(nil, it)
			if (err != nil) != (i < len(bad)) || (jsonErr != nil) != (i < len(bad)) {
				t.Errorf("time %v: stored form error %v, JSON error %v", tm, err, jsonErr)
				continue
			}
			if err == nil {
				row := rowOf(it)
				got, err := decodeStored(doc, &row)
				want, _ := it.AppendJSON(nil)
				gotJSON, _ := got.AppendJSON(nil)
				if err != nil || !bytes.Equal(gotJSON, want) {
					t.Errorf("time %v: read back %s (%v), want %s", tm, gotJSON, err, want)
				}
			}
		}
	}
}

// TestStoredFormCorruptIsAnError: a stored document cut short anywhere, or with a byte changed, is read
// as corrupt or as some item, never with a panic; cut short, it is always an error.
func TestStoredFormCorruptIsAnError(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(13, 3))
	for n := 0; n < 300; {
		it := storedSample(r)
		doc, _, err := document(nil, it)
		if err != nil {
			continue
		}
		n++
		row := rowOf(it)
		for cut := range len(doc) {
			if _, err := decodeStored(doc[:cut], &row); err == nil {
				t.Fatalf("%x cut to %d bytes reads as an item", doc, cut)
			}
		}
		for range 50 {
			bad := bytes.Clone(doc)
			bad[r.IntN(len(bad))] ^= byte(1 + r.IntN(255))
			_, _ = decodeStored(bad, &row)
		}
	}
}

// BenchmarkStoredForm compares the stored form with the JSON of earlier builds for a succeeded item of
// the ledger: encoding, decoding, and size.
func BenchmarkStoredForm(b *testing.B) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 123456789, time.UTC)
	index := 17
	fp := strings.Repeat("3fa9c2", 10) + "beef"
	it := &items.Item{Tenant: "acme", Key: "invoices:inv-0004711:send:1", Workflow: "invoices", Object: "inv-0004711",
		Action: "send", Sequence: "1", Destination: "billing", Dedupe: items.DedupeKey, Reference: "INV-2026-0004711",
		BatchID: "n8n-48213-send-invoice", BatchIndex: &index, ExecutionID: "48213", Fingerprint: fp, State: items.StateSucceeded,
		Attempt: 1, Claim: "c_0f1e2d3c4b5a69788796a5b4", ExternalID: "in_1Q0000000000000000004711", Attempts: []items.Attempt{{
			Number: 1, Claim: "c_0f1e2d3c4b5a69788796a5b4", ExecutionID: "48213", BatchID: "n8n-48213-send-invoice",
			Dedupe: items.DedupeKey, Fingerprint: fp, StartedAt: now, EndedAt: &now, Outcome: items.StateSucceeded,
			Reports: []string{"9b2c0e5d7f1a3c4e6b8d0f2a4c6e8a0b"}}},
		History: []items.Event{
			{At: now, Kind: items.EventClaimed, Attempt: 1, ExecutionID: "48213", BatchID: "n8n-48213-send-invoice",
				Decision: items.Proceed, Reason: items.ReasonNew, To: items.StateInFlight, Fingerprint: fp},
			{At: now.Add(412 * time.Millisecond), Kind: items.EventAfterWrite, Attempt: 1, From: items.StateInFlight,
				Outcome: "succeeded", Reason: items.ReasonRecorded, To: items.StateSucceeded, ExternalID: "in_1Q0000000000000000004711"},
		},
		Version: 2, CreatedAt: now, UpdatedAt: now.Add(412 * time.Millisecond),
	}
	stored, _, err := document(nil, it)
	if err != nil {
		b.Fatal(err)
	}
	jsonDoc, err := it.AppendJSON(nil)
	if err != nil {
		b.Fatal(err)
	}
	row := rowOf(it)
	b.Run("Encode", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			if buf, err = appendStored(buf[:0], it); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(stored)), "bytes")
	})
	b.Run("EncodeJSON", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			if buf, err = it.AppendJSON(buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(jsonDoc)), "bytes")
	})
	b.Run("Decode", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeStored(stored, &row); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeJSON", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeJSON(jsonDoc); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestWorkflowFilterReadsTheKeyWhereTheColumnIsEmpty: the workflow column is NULL where the workflow is
// the key's first part; the list's workflow filter finds those items by their key, and the items whose
// workflow is their own (another, or none, though the key has four parts) by the column.
func TestWorkflowFilterReadsTheKeyWhereTheColumnIsEmpty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTemp(t)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	put := func(key, workflow string) {
		t.Helper()
		it := &items.Item{Tenant: "acme", Key: key, Workflow: workflow, State: items.StatePrepared, Destination: "billing",
			CreatedAt: now, UpdatedAt: now}
		if _, err := s.Transition(ctx, "acme", key, func(*items.Item) (*items.Item, error) { return it, nil }); err != nil {
			t.Fatal(err)
		}
	}
	put("wf1:inv-1:send:0", "wf1")   // the key's: NULL in the column
	put("wf1:inv-2:send:0", "other") // its own, though the key says wf1
	put("wf1:inv-3:send:0", "")      // none
	put("inv-4", "wf1")              // its own, the key has no parts
	put("wf1x:inv-5:send:0", "wf1x") // another workflow that starts the same
	put("wf1:inv-6", "wf1")          // a key of two parts: its own
	var nulls int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM items WHERE workflow IS NULL`).Scan(&nulls); err != nil {
		t.Fatal(err)
	}
	if nulls != 2 {
		t.Errorf("%d items have a NULL workflow column, want 2 (wf1:inv-1:send:0, wf1x:inv-5:send:0)", nulls)
	}
	for workflow, want := range map[string][]string{
		"wf1":   {"wf1:inv-6", "wf1:inv-1:send:0", "inv-4"},
		"other": {"wf1:inv-2:send:0"},
		"wf1x":  {"wf1x:inv-5:send:0"},
	} {
		page, err := s.ListItems(ctx, items.ListParams{Tenant: "acme", Workflow: workflow})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, it := range page.Items {
			got = append(got, it.Key)
			if it.Workflow != workflow {
				t.Errorf("%s reads back with workflow %q, want %q", it.Key, it.Workflow, workflow)
			}
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("workflow %s lists %v, want %v", workflow, got, want)
		}
	}
}

// TestSplitKeyIsItemsSplitKey: the store's splitKey, which does not allocate, answers as items.SplitKey.
func TestSplitKeyIsItemsSplitKey(t *testing.T) {
	t.Parallel()
	keys := []string{"", ":", ":::", "a:b:c:d", "a:b:c", "a:b:c:d:e", ":b:c:d", "a::c:d", "a:b:c:", "..:b:c:d", "a:b:c:.",
		"a:b:c:d\x00", "a b:c:d:e", "wf:inv-1:send:0", "wf:inv-1:send:reminder-2", strings.Repeat("x", 201) + ":b:c:d"}
	r := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		keys = append(keys, storedSample(r).Key)
	}
	for _, k := range keys {
		got, gotOK := splitKey(k)
		want, wantOK := items.SplitKey(k)
		if got != want || gotOK != wantOK {
			t.Errorf("splitKey(%q) = %+v, %v; items.SplitKey gives %+v, %v", k, got, gotOK, want, wantOK)
		}
	}
}

// TestCorruptListLengthReservesNoMemory: a document whose list of history events or attempts claims a
// length as large as the document (the most count allows) but whose first element is garbage is refused
// as corrupt without first reserving room for that many elements (about 300 MB here before grownOnRead).
func TestCorruptListLengthReservesNoMemory(t *testing.T) {
	for _, list := range []uint64{itemHistory, itemAttempts} {
		doc := binary.AppendUvarint([]byte{storedFormat}, list)
		doc = binary.AppendUvarint(doc, 1<<20)
		doc = append(doc, bytes.Repeat([]byte{0xff}, 1<<20)...) // no element's mask ends
		r := row{tenant: "acme", key: "k"}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := decodeStored(doc, &r)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, errCorrupt) {
			t.Fatalf("list %d: %v, want corrupt", list, err)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
			t.Errorf("list %d: decoding a corrupt 1 MiB document allocated %d bytes", list, grew)
		}
	}
}

// TestStoredHistoryDropped: the count of dropped history events is stored (its own bit of the item's
// mask) and read back, and an item with none dropped (nearly all) stores no byte for it.
func TestStoredHistoryDropped(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(20261202, 11))
	for range 200 {
		it := storedSample(r)
		it.HistoryDropped = 0
		none, _, err := document(nil, it)
		if err != nil {
			continue
		}
		for _, n := range []int{1, 63, 64, 4985, 1 << 40} {
			it.HistoryDropped = n
			doc, _, err := document(nil, it)
			if err != nil {
				t.Fatalf("encode with %d dropped: %v", n, err)
			}
			row := rowOf(it)
			got, err := decodeStored(doc, &row)
			if err != nil || got.HistoryDropped != n {
				t.Fatalf("%d dropped read back as %v (%v)", n, got, err)
			}
			if len(doc) <= len(none) {
				t.Fatalf("%d dropped stored in %d bytes, none in %d", n, len(doc), len(none))
			}
		}
		it.HistoryDropped = 0
		row := rowOf(it)
		if got, err := decodeStored(none, &row); err != nil || got.HistoryDropped != 0 {
			t.Fatalf("none dropped read back as %v (%v)", got, err)
		}
		if bits, _ := binary.Uvarint(none[1:]); bits&itemHistoryDropped != 0 {
			t.Fatalf("an item with none dropped sets the bit of the count")
		}
	}
}

// laterAtEveryLevel gives, as a later build would write them, fields of the given bits in the item, in
// every attempt and event, and in the resolution. Each value looks like strings of the document (a
// literal, then a reference to the table's first string) and ends in a marker naming its place
// ("attempt-1-0": attempt 1, the first bit), so that a decoder that read it as fields would add to the
// table and shift every reference after it, and a test can find it in the bytes.
func laterAtEveryLevel(bits ...uint64) laterFields {
	return func(kind string, i int) map[uint64][]byte {
		m := make(map[uint64][]byte, len(bits))
		for j, bit := range bits {
			v := binary.AppendUvarint(nil, 5<<2|1)
			v = append(v, "later"...)
			v = binary.AppendUvarint(v, 0<<2|3)
			m[bit] = fmt.Appendf(v, "%s-%d-%d", kind, i, j)
		}
		return m
	}
}

// laterSampleItem is an item with every level a later build may add fields to (two attempts, events, a
// resolution), whose strings the document names by reference after each of those levels: the
// fingerprint in the second attempt and in the events, the person and the note in the resolution, the
// note again as the item's failure message (after the resolution in bit order).
func laterSampleItem() *items.Item {
	now := time.Date(2026, 12, 2, 8, 0, 0, 123456789, time.UTC)
	later := now.Add(90 * time.Second)
	fp := strings.Repeat("3fa9c2", 10) + "beef"
	return &items.Item{Tenant: "acme", Key: "invoices:inv-0004711:send:1", Workflow: "invoices", Object: "inv-0004711",
		Action: "send", Sequence: "1", Destination: "billing", Dedupe: items.DedupeKey, Reference: "INV-2026-0004711",
		ExecutionID: "48213", Fingerprint: fp, State: items.StateFailed, Attempt: 2, Claim: "c_0f1e2d3c4b5a69788796a5b4",
		Attempts: []items.Attempt{
			{Number: 1, Claim: "c_aa1e2d3c4b5a69788796a5b4", ExecutionID: "48213", Fingerprint: fp, StartedAt: now,
				EndedAt: &now, Outcome: items.StateUnknown, FailureClass: items.ClassTimeout},
			{Number: 2, Claim: "c_0f1e2d3c4b5a69788796a5b4", ExecutionID: "48213", Fingerprint: fp, StartedAt: later,
				EndedAt: &later, Outcome: items.StateFailed, FailureClass: items.ClassHTTP, HTTPStatus: 503},
		},
		History: []items.Event{
			{At: now, Kind: items.EventClaimed, Attempt: 1, ExecutionID: "48213", Decision: items.Proceed,
				Reason: items.ReasonNew, To: items.StateInFlight, Fingerprint: fp},
			{At: now, Kind: items.EventResolve, By: "ops-anna", Note: "not in the CRM", From: items.StateUnknown,
				To: items.StateFailed, Outcome: "not_committed"},
			{At: later, Kind: items.EventClaimed, Attempt: 2, ExecutionID: "48213", Decision: items.Proceed,
				Reason: items.ReasonRetry, From: items.StateFailed, To: items.StateInFlight, Fingerprint: fp},
			{At: later, Kind: items.EventAfterWrite, Attempt: 2, From: items.StateInFlight, To: items.StateFailed,
				Outcome: "failed", ErrorClass: items.ClassHTTP, HTTPStatus: 503, Note: "not in the CRM"},
		},
		Resolution:     &items.Resolution{Outcome: "not_committed", Evidence: "not in the CRM", By: "ops-anna", At: now},
		Retryable:      true,
		FailureClass:   items.ClassHTTP,
		FailureMessage: "not in the CRM",
		HTTPStatus:     503,
		Version:        4, CreatedAt: now, UpdatedAt: later,
	}
}

// TestStoredFormSkipsLaterFields: documents a later build wrote with fields of the skippable range in the
// item, in attempts, in events and in the resolution, with references to the document's strings after
// them, read back as exactly the item without those fields, and this build writes that item again without
// them (the same bytes as it writes for the item it read).
func TestStoredFormSkipsLaterFields(t *testing.T) {
	t.Parallel()
	check := func(it *items.Item, later laterFields) {
		t.Helper()
		doc, _, err := document(nil, it)
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		laterDoc, err := encodeStored(nil, it, later)
		if err != nil {
			t.Fatalf("encode with later fields: %v", err)
		}
		if len(laterDoc) <= len(doc) {
			t.Fatalf("the later fields took no bytes: %x", laterDoc)
		}
		row := rowOf(it)
		got, err := decodeStored(laterDoc, &row)
		if err != nil {
			t.Fatalf("decode %x: %v", laterDoc, err)
		}
		want, _ := it.AppendJSON(nil)
		gotJSON, _ := got.AppendJSON(nil)
		if !sameStored(got, it) || !bytes.Equal(gotJSON, want) {
			t.Fatalf("read back another item\ngot:  %s\nwant: %s", gotJSON, want)
		}
		if again, _, err := document(nil, got); err != nil || !bytes.Equal(again, doc) {
			t.Fatalf("the item read back encodes to %x (%v), without the later fields %x", again, err, doc)
		}
	}
	seen := map[string]int{}
	counted := func(later laterFields) laterFields {
		return func(kind string, i int) map[uint64][]byte {
			seen[kind]++
			return later(kind, i)
		}
	}
	for _, bits := range [][]uint64{{1 << 48}, {1 << 63}, {1 << 48, 1 << 52, 1 << 63}} {
		check(laterSampleItem(), counted(laterAtEveryLevel(bits...)))
	}
	if seen["item"] != 3 || seen["attempt"] != 6 || seen["event"] != 12 || seen["resolution"] != 3 {
		t.Fatalf("later fields written %v, want in the item, both attempts, every event and the resolution", seen)
	}
	// One level at a time: a field of the skippable range in that level only.
	for _, level := range []string{"item", "attempt", "event", "resolution"} {
		check(laterSampleItem(), func(kind string, i int) map[uint64][]byte {
			if kind != level {
				return nil
			}
			return laterAtEveryLevel(1<<50)(kind, i)
		})
	}
	r := rand.New(rand.NewPCG(20261202, 48))
	for n := 0; n < 3000; {
		it := storedSample(r)
		if _, _, err := document(nil, it); err != nil {
			continue
		}
		n++
		bits := []uint64{1 << (48 + r.IntN(16))}
		if r.IntN(2) == 0 {
			bits = append(bits, 1<<63)
		}
		check(it, counted(laterAtEveryLevel(bits...)))
	}
}

// TestStoredFormRefusesBadLaterFields: a field of the skippable range whose length runs past the end of
// the document, or cut short, is refused as corrupt (never a panic), at every level; and a bit this
// build does not know outside the skippable range is refused as before, at every level.
func TestStoredFormRefusesBadLaterFields(t *testing.T) {
	t.Parallel()
	it := laterSampleItem()
	row := rowOf(it)
	doc, err := encodeStored(nil, it, laterAtEveryLevel(1<<48))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeStored(doc, &row); err != nil {
		t.Fatalf("the whole document: %v", err)
	}
	for _, marker := range []string{"item-0-0", "attempt-0-0", "attempt-1-0", "event-0-0", "event-3-0", "resolution-0-0"} {
		at := bytes.Index(doc, []byte(marker))
		if at < 0 {
			t.Fatalf("no %s in %x", marker, doc)
		}
		start := at - len("\x15later\x03") // where the value starts; its length (< 128) is the byte before
		if doc[start-1] != byte(len(doc[start:at])+len(marker)) {
			t.Fatalf("%s: the byte before the value is %d, not its length", marker, doc[start-1])
		}
		for _, length := range []uint64{uint64(len(doc) - start + 1), 1 << 62, ^uint64(0)} {
			bad := binary.AppendUvarint(bytes.Clone(doc[:start-1]), length)
			bad = append(bad, doc[start:]...)
			if _, err := decodeStored(bad, &row); !errors.Is(err, errCorrupt) {
				t.Errorf("%s with the length %d: %v, want corrupt", marker, length, err)
			}
		}
		if _, err := decodeStored(doc[:at+2], &row); !errors.Is(err, errCorrupt) {
			t.Errorf("%s cut short: %v, want corrupt", marker, err)
		}
	}
	for level, bits := range map[string][]uint64{
		"item":       {itemBitsEnd, 1 << 47},
		"attempt":    {attemptBitsEnd, 1 << 47},
		"event":      {eventBitsEnd, 1 << 47},
		"resolution": {1, 1 << 47},
	} {
		for _, bit := range bits {
			doc, err := encodeStored(nil, it, func(kind string, i int) map[uint64][]byte {
				if kind != level {
					return nil
				}
				return laterAtEveryLevel(bit)(kind, i)
			})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := decodeStored(doc, &row); !errors.Is(err, errCorrupt) {
				t.Errorf("a field of bit %#x in the %s: %v, want corrupt", bit, level, err)
			}
		}
	}
	// Further fields of a resolution the item does not have.
	noResolution := laterSampleItem()
	noResolution.Resolution = nil
	plain, _, err := document(nil, noResolution)
	if err != nil {
		t.Fatal(err)
	}
	mask, n := binary.Uvarint(plain[1:])
	bad := binary.AppendUvarint([]byte{storedFormat}, mask|itemResolutionFields)
	bad = append(bad, plain[1+n:]...)
	noResolutionRow := rowOf(noResolution)
	if _, err := decodeStored(bad, &noResolutionRow); !errors.Is(err, errCorrupt) {
		t.Errorf("further fields of no resolution: %v, want corrupt", err)
	}
}

// TestStoreAnswersAnItemWithLaterFields: an item whose stored document a later build wrote, with fields
// of the skippable range in the item, its attempts, its events and its resolution, is answered through
// HTTP as before: GET /v1/items/{key} shows the same item, a before-write while it is in flight is
// answered skip in_progress and writes nothing (the document keeps the fields), and the after-write that
// settles it is recorded, and stores the item as this build writes it: without the later fields.
func TestStoreAnswersAnItemWithLaterFields(t *testing.T) {
	ctx := context.Background()
	store := openTemp(t)
	svc := handlerstest.NewService(t, store, handlerstest.ServiceConfig{})
	const key = "inv-later"
	payload := map[string]any{"invoice": key, "amount": 120.5}
	first := svc.Claim(key, nil).Str("claim")
	handlerstest.Expect(t, svc.AfterWrite(map[string]any{"key": key, "claim": first, "outcome": "failed",
		"error": map[string]any{"class": "timeout"}}), http.StatusOK, "", "")
	handlerstest.Expect(t, svc.Post(handlerstest.OperatorAcme, "/v1/items/"+key+"/resolve",
		map[string]any{"outcome": "not_committed", "evidence": "not in the CRM, checked by hand"}), http.StatusOK, "", "")
	second := svc.Claim(key, nil)
	if second.Num("attempt") != 2 {
		t.Fatalf("the claim after the resolution: %s", second.Body)
	}
	shown := svc.Get(handlerstest.OperatorAcme, "/v1/items/"+key)
	handlerstest.Expect(t, shown, http.StatusOK, "", "")

	it := svc.Item("acme", key)
	if len(it.Attempts) != 2 || len(it.History) < 3 || it.Resolution == nil {
		t.Fatalf("the item has %d attempts, %d events, resolution %v", len(it.Attempts), len(it.History), it.Resolution)
	}
	laterDoc, err := encodeStored(nil, it, laterAtEveryLevel(1<<48, 1<<63))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.writeOutside(`UPDATE items SET doc = ? WHERE tenant = 'acme' AND key = ?`, laterDoc, key); err != nil {
		t.Fatal(err)
	}
	storedDoc := func() []byte {
		t.Helper()
		var doc []byte
		if err := store.r.QueryRowContext(ctx, `SELECT doc FROM items WHERE tenant = 'acme' AND key = ?`, key).Scan(&doc); err != nil {
			t.Fatal(err)
		}
		return doc
	}

	if again := svc.Get(handlerstest.OperatorAcme, "/v1/items/"+key); again.Status != http.StatusOK || !bytes.Equal(again.Body, shown.Body) {
		t.Fatalf("GET of the item with later fields: %d %s\nbefore them: %s", again.Status, again.Body, shown.Body)
	}
	busy := svc.BeforeWrite(map[string]any{"key": key, "payload": payload})
	if busy.Status != http.StatusOK || busy.Str("decision") != "skip" || busy.Str("reason") != "in_progress" {
		t.Fatalf("before-write while in flight: %d %s", busy.Status, busy.Body)
	}
	if !bytes.Equal(storedDoc(), laterDoc) {
		t.Fatalf("a before-write that writes nothing changed the document")
	}
	done := svc.AfterWrite(map[string]any{"key": key, "claim": second.Str("claim"), "outcome": "succeeded", "external_id": "crm-1"})
	if done.Status != http.StatusOK || done.Str("state") != "succeeded" || done.Str("reason") != "recorded" {
		t.Fatalf("after-write: %d %s", done.Status, done.Body)
	}
	settled := svc.Item("acme", key)
	if settled.State != items.StateSucceeded || settled.ExternalID != "crm-1" || settled.Version != it.Version+1 ||
		len(settled.Attempts) != 2 || settled.Resolution == nil {
		t.Fatalf("after the report: %+v", settled)
	}
	doc := storedDoc()
	if bytes.Contains(doc, []byte("later")) {
		t.Errorf("the write kept the later fields: %x", doc)
	}
	if want, _, err := document(nil, settled); err != nil || !bytes.Equal(doc, want) {
		t.Errorf("stored %x, want this build's form of the item %x (%v)", doc, want, err)
	}
}
