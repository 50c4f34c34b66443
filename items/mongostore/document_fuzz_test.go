package mongostore

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
)

// inMongo returns it as the items collection keeps it (itemDoc's comment): every time to the millisecond
// in UTC, and a list of reports that is empty read back as none.
func inMongo(it *items.Item) *items.Item {
	return itemstest.WithTimes(it, func(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()).UTC() })
}

// FuzzDocumentRoundTrip: an item built from any bytes (itemstest.ItemFromBytes), mapped to its document
// (toDoc), marshalled to BSON as the driver sends it and unmarshalled as the driver reads it, maps back
// (item) to the same item as MongoDB keeps it (inMongo), and that item maps to the same BSON again. No
// server: the mapping and the driver's codec only.
// Run: go test ./items/mongostore -run '^$' -fuzz FuzzDocumentRoundTrip -fuzztime 3m
func FuzzDocumentRoundTrip(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x05\x06acme\x00\x01\x02invoice-742\x03\x04\x05\x06\x07\x03\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09"))
	f.Add(bytes.Repeat([]byte{3, 2, 1, 7, 255, 'a', 0xc3, 0xa9, 5}, 40))
	f.Add(itemstest.HistoryDroppedSeed) // an item with history_dropped
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x05\x05\x05\x05\x05"))
	f.Fuzz(func(t *testing.T, data []byte) {
		it := itemstest.ItemFromBytes(data, nil)
		d := toDoc(it, it.Facts())
		d.ID = itemID(it.Tenant, it.Key)
		raw, err := bson.Marshal(d)
		if err != nil {
			t.Fatalf("marshal: %v\nitem %#v", err, it)
		}
		var back itemDoc
		if err := bson.Unmarshal(raw, &back); err != nil {
			t.Fatalf("unmarshal %x: %v\nitem %#v", raw, err, it)
		}
		if back.ID != d.ID {
			t.Fatalf("_id %q read back as %q", d.ID, back.ID)
		}
		got, want := back.item(), inMongo(it)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("read back another item\ngot:  %#v\nwant: %#v", got, want)
		}
		again := toDoc(got, got.Facts())
		again.ID = d.ID
		if raw2, err := bson.Marshal(again); err != nil || !bytes.Equal(raw2, raw) {
			t.Fatalf("the item read back marshals to %x (%v), first %x", raw2, err, raw)
		}
	})
}
