package pgstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"

	gojson "github.com/goccy/go-json"

	"github.com/replaysafe/companion/items"
)

// sampleJSON is the JSON of an item that succeeded at its first attempt, as a batch of the bench leaves it.
const sampleJSON = `{"tenant":"acme","key":"bench-20261207T210403.009:i0000000:write:0","workflow":"bench-20261207T210403.009","object":"i0000000","action":"write","sequence":"0","destination":"default","dedupe":"none","batch_id":"bench-20261207T210403.009-b0000000","batch_index":0,"execution_id":"bench-20261207T210403.009-e0","fingerprint":"cff47c17470d2e057ad1586e68f9f6b57d33ca2c1b874390743d458eea01e804","state":"succeeded","attempt":1,"extra_attempts":0,"claim":"c_9a7a281beb4509396f15e412","external_id":"bench-bench-20261207T210403.009:i0000000:write:0","needs_person":false,"attempts":[{"number":1,"claim":"c_9a7a281beb4509396f15e412","execution_id":"bench-20261207T210403.009-e0","batch_id":"bench-20261207T210403.009-b0000000","dedupe":"none","fingerprint":"cff47c17470d2e057ad1586e68f9f6b57d33ca2c1b874390743d458eea01e804","started_at":"2026-12-07T21:04:03.045736474Z","ended_at":"2026-12-07T21:04:03.137790528Z","outcome":"succeeded","reports":["2820a2a32cc5d29a1cadeca6f034a132"]}],"history":[{"at":"2026-12-07T21:04:03.045736474Z","kind":"claimed","attempt":1,"execution_id":"bench-20261207T210403.009-e0","batch_id":"bench-20261207T210403.009-b0000000","decision":"proceed","reason":"new","to":"in_flight","fingerprint":"cff47c17470d2e057ad1586e68f9f6b57d33ca2c1b874390743d458eea01e804"},{"at":"2026-12-07T21:04:03.137790528Z","kind":"after_write","attempt":1,"reason":"recorded","from":"in_flight","to":"succeeded","outcome":"succeeded","external_id":"bench-bench-20261207T210403.009:i0000000:write:0"}],"history_dropped":0,"version":2,"created_at":"2026-12-07T21:04:03.045736474Z","updated_at":"2026-12-07T21:04:03.13779Z"}`

func sampleItem(t *testing.T) *items.Item {
	t.Helper()
	var it items.Item
	if err := gojson.Unmarshal([]byte(sampleJSON), &it); err != nil {
		t.Fatal(err)
	}
	return &it
}

// goldenDocument is sampleItem's document as this store wrote it when docS2V1 was made, and
// goldenDefaultDocument the same item's of the tenant "default" (every service without tokens), whose
// first copy starts at the dictionary's first offset. Rows written then must be read by every later
// version.
const goldenDefaultDocument = "01d90c1500139c62656e63682d3230323631323037543231303430332e3030393a69303030303030303a77726974653e6d0e6238002e880411432e9004517f9d95ae880e2ee00b5e8300042d6219780d305e980e66440004653042c408f03f63666634376331373437306432653035376164313538366536386639663662353764333363613263316238373433393037343364343538656561303165383034bd5a2ec50b55f37e8b0a5c39613761323831626562343530393339366631356534313242270209d609069adb01326d07b529099a36110532f00572930032240a628e00082d65303ab80d622a003dd8d5b5520e0f31aa1500360072614301007422323032362d31322d30375432313a30343a30332e3034353733363437344e4e0f3a2c0020313337373930353238924e0f7c32383230613261333263633564323961316361646563613666303334613133321500143a790032a500666506464e0f668501daaf016e500592860f31d4150031b5f24ece0132a2012d295a30072e800a8a30072eeb03b9f62e160036e405297a090692bd035e7906d52152f60f6e29022e3f06662e01085a227d"

const goldenDocument = "01d60c9d450c61636d6595429c62656e63682d3230323631323037543231303430332e3030393a69303030303030303a77726974653e6a0e6238002e850411432e8d04517c9d92ae850e2edd0b5e8300042d6219780d305e950e66440004653042c108f03f63666634376331373437306432653035376164313538366536386639663662353764333363613263316238373433393037343364343538656561303165383034bd572ec20b55f07e880a5c39613761323831626562343530393339366631356534313242240209d609069adb01326a07b526099a360e0532ed0572930032210a628e00082d65303ab50d622a003dd8d5b2520b0f31aa1500360072614001007422323032362d31322d30375432313a30343a30332e3034353733363437344e4b0f3a2c0020313337373930353238924b0f7c32383230613261333263633564323961316361646563613666303334613133321500143a790032a500666206464b0f668501daaf016e4d0592830f31d4150031b5ef4ece0132a2012d295a2d072e7d0a8a2d072eeb03b9f32e160036e105297a090692bd035e7606d51e52f30f6e29022e3c06662e01085a227d"

// TestDocumentDictionaryIsFrozen: the dictionary of docS2V1, with its first offset, is the one rows were
// written with, and such rows still read as the items they were written from. A changed dictionary or
// offset would make them unreadable, or worse, read as other bytes.
func TestDocumentDictionaryIsFrozen(t *testing.T) {
	const want = "3b1fd9707578b8269698d0099c2ac14a0df2e898c428a8bdf9337a8833afdd8d"
	if got := sha256.Sum256(docDict.Bytes()); hex.EncodeToString(got[:]) != want {
		t.Errorf("docDict changed (SHA-256 %x of its bytes and first offset, was %s): rows written with it could not be read; add a new dictionary under a new first byte instead", got, want)
	}
	for tenant, golden := range map[string]string{"acme": goldenDocument, "default": goldenDefaultDocument} {
		doc, err := hex.DecodeString(golden)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeItem(doc, tenant, "bench-20261207T210403.009:i0000000:write:0")
		if err != nil {
			t.Fatalf("a document of %s written by docS2V1: %v", tenant, err)
		}
		want := sampleItem(t)
		want.Tenant = tenant
		if !reflect.DeepEqual(got, want) {
			t.Errorf("a document of %s written by docS2V1 reads as\n%+v\nwant\n%+v", tenant, got, want)
		}
	}
}

// TestDocumentsAreCompressed: an item's row holds its document in a quarter to a third of its JSON, and
// the item reads back as it was written.
func TestDocumentsAreCompressed(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	want := sampleItem(t)
	stored, err := s.Transition(ctx, "acme", want.Key, func(cur *items.Item) (*items.Item, error) { return want.Clone(), nil })
	if err != nil {
		t.Fatal(err)
	}
	var doc []byte
	if err := s.pool.QueryRow(ctx, `SELECT doc FROM `+s.quoted+`.items WHERE tenant = 'acme' AND key = $1`, want.Key).Scan(&doc); err != nil {
		t.Fatal(err)
	}
	js, err := stored.AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the row holds %d bytes for a JSON of %d", len(doc), len(js))
	if len(doc) == 0 || doc[0] != docS2V1 || len(doc)*3 > len(js) {
		t.Errorf("the row holds %d bytes (first %#x) for a JSON of %d bytes, want a compressed document of at most a third", len(doc), doc[:min(len(doc), 1)], len(js))
	}
	got, err := s.Get(ctx, "acme", want.Key)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, stored) {
		t.Errorf("Get: %+v\nwant what the transition stored: %+v", got, stored)
	}
}

// writeByHand writes it as its row's document, plain JSON, as an operator's UPDATE by hand would: the
// version, the time of change and the other columns stay as they are.
func writeByHand(t *testing.T, s *Store, it *items.Item) {
	t.Helper()
	js, err := it.AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(context.Background(), `UPDATE `+s.quoted+`.items SET doc = $1 WHERE tenant = $2 AND key = $3`,
		js, it.Tenant, it.Key); err != nil {
		t.Fatal(err)
	}
}

// TestPlainJSONDocumentsAreRead: a row whose document is plain JSON (written before documents were
// compressed, or by hand) reads as its item, and its next change writes it compressed.
func TestPlainJSONDocumentsAreRead(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	var calls int
	old := mustTransition(t, s, "k", claimAt("acme", "k", s.clock(), &calls))
	old.Reference = "by hand"
	writeByHand(t, s, old)
	got, err := s.Get(ctx, "acme", "k")
	if err != nil || got.Reference != "by hand" || got.State != items.StateInFlight {
		t.Fatalf("Get of a plain JSON document: %+v, %v", got, err)
	}
	s.cache.drop([]string{itemID("acme", "k")}) // the change reads the row, as another replica would
	next := mustTransition(t, s, "k", claimAt("acme", "k", s.clock(), &calls))
	if next.Reference != "by hand" || next.Attempt != 2 {
		t.Errorf("the change of a plain JSON document: %+v, want reference %q kept at attempt 2", next, "by hand")
	}
	var first []byte
	if err := s.pool.QueryRow(ctx, `SELECT substring(doc from 1 for 1) FROM `+s.quoted+`.items WHERE tenant = 'acme' AND key = 'k'`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, []byte{docS2V1}) {
		t.Errorf("after its change the document starts %#x, want it compressed (%#x)", first, docS2V1)
	}
}

// TestCorruptCompressedDocument: a compressed document that is damaged, or claims to expand to more than
// a document may hold, reads as corrupt without a panic or a huge allocation.
func TestCorruptCompressedDocument(t *testing.T) {
	good, err := hex.DecodeString(goldenDocument)
	if err != nil {
		t.Fatal(err)
	}
	cut := good[:len(good)/2]
	for name, doc := range map[string][]byte{
		"empty":       {},
		"marker only": {docS2V1},
		"4 GB":        {docS2V1, 0xff, 0xff, 0xff, 0xff, 0x0f, 0},
		"cut short":   cut,
		"not JSON":    []byte("{{"),
	} {
		_, err := decodeItem(doc, "acme", "bench-20261207T210403.009:i0000000:write:0")
		if !errors.Is(err, errCorrupt) {
			t.Errorf("%s: %v, want it corrupt", name, err)
		}
		if name == "4 GB" && (err == nil || !strings.Contains(err.Error(), "more than the")) {
			t.Errorf("%s: %v, want it refused for its size before anything is allocated", name, err)
		}
	}
}
