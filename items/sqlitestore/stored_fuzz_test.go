package sqlitestore

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
)

// sameStored reports whether got, read back from the stored form, is want as the stored form documents
// it: every time the same instant with the same zone offset (read back in UTC, or in a zone with no name
// at a non-zero offset; no monotonic reading), a result or a list of reports that is empty read back as
// nil, and every other field equal.
func sameStored(got, want *items.Item) bool {
	norm := func(it *items.Item) items.Item {
		c := *itemstest.WithTimes(it, func(t time.Time) time.Time {
			_, off := t.Zone()
			u := time.Unix(t.Unix(), int64(t.Nanosecond())).UTC()
			if off != 0 {
				u = u.In(time.FixedZone("", off))
			}
			return u
		})
		if len(c.Result) == 0 {
			c.Result = nil
		}
		return c
	}
	return reflect.DeepEqual(norm(got), norm(want))
}

// FuzzStoredRoundTrip: an item built from any bytes (itemstest.ItemFromBytes) is stored (appendStored) exactly when its
// JSON can be shown, and what is stored reads back (decodeStored, with the row's columns as write stores
// them and scan reads them) as the same item and the same JSON, and encodes again to the same bytes. The
// same item stored with fields of a later build's skippable range at every level reads back as the item
// too, and encodes again to the bytes without them.
// Run: go test ./items/sqlitestore -run '^$' -fuzz FuzzStoredRoundTrip -fuzztime 3m
func FuzzStoredRoundTrip(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x05\x06acme\x00\x01\x02invoice-742\x03\x04\x05\x06\x07\x03\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09"))
	f.Add(bytes.Repeat([]byte{3, 2, 1, 7, 255, 'a', 0xc3, 0xa9, 5}, 40))
	f.Add(itemstest.HistoryDroppedSeed) // an item with history_dropped
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x05\x05\x05\x05\x05"))
	f.Fuzz(func(t *testing.T, data []byte) {
		it := itemstest.ItemFromBytes(data, storedWords)
		want, jsonErr := it.AppendJSON(nil)
		doc, _, err := document(nil, it)
		if (err != nil) != (jsonErr != nil) {
			t.Fatalf("stored form error %v, JSON error %v, for %s", err, jsonErr, want)
		}
		if err != nil {
			return
		}
		// The row's columns as scan reads them (a workflow column left NULL because the key holds it reads
		// back as the key's, which is the same).
		r := rowOf(it)
		got, err := decodeStored(doc, &r)
		if err != nil {
			t.Fatalf("decode %x: %v\nitem %s", doc, err, want)
		}
		if !sameStored(got, it) {
			t.Fatalf("read back another item\ngot:  %#v\nwant: %#v", got, it)
		}
		gotJSON, err := got.AppendJSON(nil)
		if err != nil || !bytes.Equal(gotJSON, want) {
			t.Fatalf("read back shows another JSON (%v)\ngot:  %s\nwant: %s", err, gotJSON, want)
		}
		again, _, err := document(nil, got)
		if err != nil || !bytes.Equal(again, doc) {
			t.Fatalf("the item read back encodes to %x (%v), first %x", again, err, doc)
		}
		laterDoc, err := encodeStored(nil, it, laterAtEveryLevel(1<<48, 1<<63))
		if err != nil {
			t.Fatalf("encode with later fields: %v", err)
		}
		got, err = decodeStored(laterDoc, &r)
		if err != nil || !sameStored(got, it) {
			t.Fatalf("with later fields %x read back another item (%v)\ngot:  %#v\nwant: %#v", laterDoc, err, got, it)
		}
		if again, _, err := document(nil, got); err != nil || !bytes.Equal(again, doc) {
			t.Fatalf("the item read with later fields encodes to %x (%v), without them %x", again, err, doc)
		}
	})
}

// FuzzStoredDecode: decodeStored reads any bytes without a panic (the store turns its error into a fault
// of that one item), and what it reads as an item is one: stored again (document and columns), it reads
// back the same.
// Run: go test ./items/sqlitestore -run '^$' -fuzz FuzzStoredDecode -fuzztime 3m
func FuzzStoredDecode(f *testing.F) {
	for _, seed := range [][]byte{
		{}, {1}, {1, 0}, {2, 0}, []byte(`{}`), []byte(`{"key":"k","attempts":[{"number":1}]}`), []byte(`{"created_at":"x"}`),
		{1, 0xff, 0xff, 0xff, 0xff, 0x0f}, {1, 0x40, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	} {
		f.Add(seed)
	}
	// Real documents: a sample of items and their stored forms, cut and whole, and with fields of a later
	// build (skippable ones at every level; a length past the end; a bit outside the skippable range).
	// (Random items: the items ItemFromBytes built from repeated bytes here before all had a zone offset of
	// a day, which the stored form refuses, so that none was a seed.)
	r := rand.New(rand.NewPCG(8, 48))
	for i := 0; i < 8; {
		it := storedSample(r)
		doc, _, err := document(nil, it)
		if err != nil {
			continue
		}
		f.Add(doc)
		f.Add(doc[:len(doc)/2])
		if doc, err := encodeStored(nil, it, laterAtEveryLevel(1<<(48+i), 1<<63)); err == nil {
			f.Add(doc)
		}
		i++
	}
	if doc, err := encodeStored(nil, laterSampleItem(), laterAtEveryLevel(1<<48)); err == nil {
		f.Add(doc)
		at := bytes.Index(doc, []byte("attempt-0-0")) - len("\x15later\x03")
		f.Add(append(append(bytes.Clone(doc[:at-1]), 0xff, 0x7f), doc[at:]...)) // the length runs past the end
	}
	if doc, err := encodeStored(nil, laterSampleItem(), laterAtEveryLevel(1<<47)); err == nil {
		f.Add(doc)
	}
	row := row{tenant: "acme", key: "invoices:inv-742:send:2", state: "succeeded", workflow: "invoices",
		batchID: "b-1", executionID: "e-1", createdAt: time.Unix(1796000000, 0).UnixNano(), updatedAt: time.Unix(1796000060, 0).UnixNano()}
	f.Fuzz(func(t *testing.T, doc []byte) {
		r := row
		got, err := decodeStored(doc, &r)
		if err != nil {
			return
		}
		if len(doc) > 0 && doc[0] == '{' {
			return // the JSON of earlier builds holds the whole item: TestDecodeMatchesEncodingJSON reads it
		}
		if got.Tenant != r.tenant || got.Key != r.key {
			t.Fatalf("%x read as the item of %q %q", doc, got.Tenant, got.Key)
		}
		again, _, err := document(nil, got)
		if err != nil {
			return // a time or a result the JSON form cannot show: refused when written again
		}
		// Stored again with the columns that write gives it: a document may hold a creation or a last
		// change other than its row's (testdata 2339a8676495cdd3: a time the column could hold, under
		// itemCreatedAt), and the write then stores that time in the column.
		written := rowOf(got)
		back, err := decodeStored(again, &written)
		if err != nil || !sameStored(back, got) {
			t.Fatalf("%x read as an item that, stored again (%x), reads back as another (%v)\nfirst: %#v\nthen:  %#v", doc, again, err, got, back)
		}
	})
}
