package pgstore

import (
	"errors"
	"fmt"
	"sync"

	gojson "github.com/goccy/go-json"
	"github.com/klauspost/compress/s2"

	"github.com/replaysafe/companion/items"
)

// The stored document of an item (the doc column) is its JSON, as items.Item.AppendJSON writes it,
// compressed with S2 (github.com/klauspost/compress/s2) and a dictionary of typical items' JSON
// (docDictV1), behind one byte naming that form (docS2V1).
//
// PostgreSQL compresses a value only in a row longer than about 2 kB (TOAST_TUPLE_THRESHOLD, which
// toast_tuple_target does not lower), and an item's row was 1.5–2 kB of which the JSON took 1.4–1.7 kB:
// every claim and every report wrote it whole into the table and into the WAL, with a new entry in each
// index (no update of an item is a HOT update, schema.go). The dictionary holds the members' names and
// the common values, so that the document of a typical item takes about a quarter of its JSON (1,622
// bytes to 433 for an item that succeeded at its first attempt, TestDocumentsAreCompressed), in about
// 2 µs to compress and half a µs to expand. In a batch of 500 at one caller, where the server's work on
// the rows is most of the time, that made the batch 31–65% faster (docs/postgresql.md).
//
// A document whose first byte is '{' is plain JSON: rows written before the documents were compressed,
// or by hand, are read as they are. The dictionary and its first offset can never change: rows written
// with them must stay readable (TestDocumentDictionaryIsFrozen). A new dictionary is a new first byte
// (docS2V2, …), decoded beside the older ones, released in a build that reads it before any build
// writes it, with a migration (schema.go) so that a build that cannot read it refuses the schema. The
// first compressed form came with migration 2.

// docS2V1 is the first byte of a document compressed with docDictV1.
const docS2V1 = 0x01

// maxDocument bounds the JSON of a stored document, so that a corrupt length in a compressed document
// cannot make a read allocate gigabytes; a write of a larger one is refused (it could not be read).
// Items keep their history bounded (items.KeptFirstRepeats) and results small (items.MaxResultBytes):
// the largest documents the tests write are well under a megabyte.
const maxDocument = 64 << 20

// docDictV1 is the dictionary of docS2V1: the JSON of three items as AppendJSON writes them (one that
// succeeded, one whose outcome is unknown and needs a person, one that failed and was resolved by a
// person), with the members in AppendJSON's order and the values most items hold. Frozen:
// TestDocumentDictionaryIsFrozen.
const docDictV1 = `{"tenant":"default","key":"wf:obj-1:send:0","workflow":"wf","object":"obj-1","action":"send","sequence":"0","destination":"default","dedupe":"none","reference":"","batch_id":"b-1","batch_index":0,"execution_id":"e-1","owner":"","fingerprint":"0000000000000000000000000000000000000000000000000000000000000000","state":"succeeded","attempt":1,"extra_attempts":0,"claim":"c_000000000000000000000000","external_id":"","needs_person":false,"attempts":[{"number":1,"claim":"c_000000000000000000000000","execution_id":"e-1","batch_id":"b-1","dedupe":"none","fingerprint":"","started_at":"2026-01-01T00:00:00.000000000Z","ended_at":"2026-01-01T00:00:00.000000000Z","outcome":"succeeded","reports":["00000000000000000000000000000000"]}],"history":[{"at":"2026-01-01T00:00:00.000000000Z","kind":"claimed","attempt":1,"execution_id":"e-1","batch_id":"b-1","decision":"proceed","reason":"new","to":"in_flight","fingerprint":""},{"at":"2026-01-01T00:00:00.000000000Z","kind":"after_write","attempt":1,"reason":"recorded","from":"in_flight","to":"succeeded","outcome":"succeeded","external_id":""}],"history_dropped":0,"version":2,"created_at":"2026-01-01T00:00:00.000000000Z","updated_at":"2026-01-01T00:00:00.000000Z"}` +
	`{"tenant":"default","key":"","workflow":"","object":"","action":"","sequence":"","destination":"","dedupe":"key","reference":"","owner":"","fingerprint":"","state":"unknown","attempt":1,"extra_attempts":0,"claim":"c_","lease_expires_at":"","retryable":false,"failure_class":"timeout","failure_message":"","cause":"unknown_outcome","lookup_failed":true,"needs_person":true,"needs_person_cause":"lease_expired","needs_person_since":"","alert_status":"sent","attempts":[{"number":1,"claim":"c_","execution_id":"","dedupe":"lookup","fingerprint":"","started_at":"","ended_at":"","outcome":"unknown","failure_class":"connection_reset","http_status":502,"reports":[""]}],"history":[{"at":"","kind":"claimed","attempt":1,"decision":"proceed","reason":"retry_same_key","to":"in_flight"},{"at":"","kind":"lease_expired","attempt":1,"from":"in_flight","to":"unknown"},{"at":"","kind":"after_write","attempt":1,"reason":"recorded","from":"in_flight","to":"unknown","outcome":"unknown","error_class":"timeout"},{"at":"","kind":"reconcile","attempt":1,"reason":"lookup_required","outcome":"not_found"},{"at":"","kind":"needs_person","attempt":1,"reason":"awaiting_owner"},{"at":"","kind":"alerted","attempt":1},{"at":"","kind":"escalated","attempt":1},{"at":"","kind":"probe","attempt":1,"outcome":"lookup_failed"}],"history_dropped":0,"version":3,"created_at":"","updated_at":""}` +
	`{"tenant":"default","key":"","workflow":"","object":"","action":"","sequence":"","destination":"","dedupe":"lookup","state":"failed","attempt":2,"extra_attempts":1,"claim":"c_","retryable":true,"retry_at":"","receiver_request_id":"","result":{"id":""},"failure_class":"http","failure_message":"","http_status":429,"duplicate_effect":false,"alert_status":"closed","attempts":[{"number":2,"claim":"c_","outcome":"failed","failure_class":"rejected","http_status":400}],"history":[{"at":"","kind":"claimed","attempt":2,"decision":"proceed","reason":"retry","to":"in_flight"},{"at":"","kind":"after_write","attempt":2,"reason":"recorded","from":"in_flight","to":"failed","outcome":"failed","error_class":"http","http_status":503},{"at":"","kind":"resolve","attempt":2,"reason":"resolved","from":"unknown","to":"failed","outcome":"not_committed","by":"","note":""},{"at":"","kind":"prepared","decision":"proceed","reason":"fingerprint_mismatch"}],"history_dropped":0,"resolution":{"by":"","outcome":"not_committed","evidence":"","external_id":"","at":""},"version":4,"created_at":"","updated_at":""}`

// docDict is docDictV1 with the offset a block's first copy starts from (the last `{"tenant":"` in
// it), which the rows do not record: it is as frozen as the dictionary.
var docDict = s2.MakeDictManual([]byte(docDictV1), docDictV1Start)

// docDictV1Start is docDict's first offset.
const docDictV1Start = 2573

// errCorrupt is a stored document that cannot be read.
var errCorrupt = errors.New("pgstore: corrupt item document")

// buffers hold an item's JSON while it is compressed or after it is expanded, and a compressed document
// before it is copied out. One that grew past maxPooled (a very long history) is not kept.
var buffers = sync.Pool{New: func() any { return new([]byte) }}

const maxPooled = 1 << 20

func putBuffer(b *[]byte) {
	if cap(*b) <= maxPooled {
		buffers.Put(b)
	}
}

// decodeItem reads a stored document of tenant's key. It uses goccy/go-json, which decodes what
// encoding/json decodes into the same item, several times as fast.
func decodeItem(doc []byte, tenant, key string) (*items.Item, error) {
	buf := buffers.Get().(*[]byte)
	defer putBuffer(buf)
	js := doc
	if compressed(doc) {
		var err error
		if js, err = expandDocument((*buf)[:0], doc); err != nil {
			return nil, fmt.Errorf("%w of %q: %w", errCorrupt, key, err)
		}
		*buf = js // the buffer may have grown to hold it: the pool keeps the larger one
	}
	var it items.Item
	// Unmarshal copies what it keeps of js: the buffer can be used again.
	if err := gojson.Unmarshal(js, &it); err != nil {
		return nil, fmt.Errorf("%w of %q: %w", errCorrupt, key, err)
	}
	if it.Tenant != tenant || it.Key != key {
		return nil, fmt.Errorf("%w: the row of %q holds the document of %q", errCorrupt, key, it.Key)
	}
	return &it, nil
}

// expandDocument returns the JSON of a stored document, expanded into buf when it is compressed, or the
// document itself when it is plain JSON (or anything else, which the JSON decoder refuses).
func expandDocument(buf, doc []byte) ([]byte, error) {
	if !compressed(doc) {
		return doc, nil
	}
	n, err := s2.DecodedLen(doc[1:])
	if err != nil {
		return nil, err
	}
	if n > maxDocument {
		return nil, fmt.Errorf("it expands to %d bytes, more than the %d a document may hold", n, maxDocument)
	}
	return docDict.Decode(buf[:cap(buf)], doc[1:])
}

// compressed reports whether a stored document is in the compressed form (docS2V1).
func compressed(doc []byte) bool { return len(doc) > 0 && doc[0] == docS2V1 }

// encodeItem returns the document of it to store, or the error of a state that cannot be stored (a time
// outside the years 0 to 9999, a result that is not JSON), which belongs to the transition that made it.
// A panic of the encoding is such an error too.
func encodeItem(it *items.Item) (doc []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			doc, err = nil, fmt.Errorf("pgstore: encode item: panicked: %v", r)
		}
	}()
	js, packed := buffers.Get().(*[]byte), buffers.Get().(*[]byte)
	defer putBuffer(js)
	defer putBuffer(packed)
	if *js, err = it.AppendJSON((*js)[:0]); err != nil {
		return nil, err
	}
	if len(*js) > maxDocument {
		return nil, fmt.Errorf("pgstore: the item's document would be %d bytes, more than the %d a document may hold", len(*js), maxDocument)
	}
	*packed = docDict.Encode((*packed)[:cap(*packed)], *js)
	// The document stays in memory until its group commits: it is copied out at its own length.
	doc = make([]byte, 1+len(*packed))
	doc[0] = docS2V1
	copy(doc[1:], *packed)
	return doc, nil
}
