package sqlitestore

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
)

// TestDecodeMatchesEncodingJSON decodes random items' documents (every field drawn at random, with the
// strings and results encoding/json treats specially) with decode and with encoding/json, and requires
// the same item from both, and the same refusal of documents that are not an item.
func TestDecodeMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(20261201, 13))
	for n := 0; n < 3000; {
		it := itemstest.RandomItem(r)
		doc, err := it.AppendJSON(nil)
		if err != nil {
			continue
		}
		n++
		var want items.Item
		if err := json.Unmarshal(doc, &want); err != nil {
			t.Fatalf("encoding/json cannot read %s: %v", doc, err)
		}
		got, err := decodeJSON(doc)
		if err != nil {
			t.Fatalf("decode %s: %v", doc, err)
		}
		if !reflect.DeepEqual(*got, want) {
			t.Fatalf("decode differs from encoding/json\ndoc:  %s\ngot:  %#v\nwant: %#v", doc, *got, want)
		}
	}
	for _, bad := range []string{``, `{`, `[]`, `{"key": 5}`, `{"attempt": "one"}`, `{"created_at": "yesterday"}`, `{"result": }`} {
		var it items.Item
		stdErr := json.Unmarshal([]byte(bad), &it)
		_, err := decodeJSON([]byte(bad))
		if (err != nil) != (stdErr != nil) {
			t.Errorf("%q: decode error %v, encoding/json error %v", bad, err, stdErr)
		}
	}
}
