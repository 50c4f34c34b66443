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

// jsonAppender is an answer written by hand.
type jsonAppender interface {
	AppendJSON(dst []byte) ([]byte, error)
}

// appendMatches holds v.AppendJSON to json.Marshal(v): the same bytes after what dst held, or an error
// exactly when json.Marshal fails, with dst as it was.
func appendMatches(t *testing.T, v jsonAppender) {
	t.Helper()
	want, wantErr := json.Marshal(v)
	prefix := []byte("prefix;")
	got, err := v.AppendJSON(append([]byte(nil), prefix...))
	switch {
	case (err != nil) != (wantErr != nil):
		t.Fatalf("AppendJSON error %v, json.Marshal error %v\n%#v", err, wantErr, v)
	case err != nil:
		if string(got) != string(prefix) {
			t.Fatalf("AppendJSON failed (%v) but did not return dst as it was: %q", err, got)
		}
	case !bytes.Equal(got, append(prefix, want...)):
		t.Fatalf("AppendJSON differs from json.Marshal\n got: %s\nwant: %s", got[len(prefix):], want)
	}
}

// TestAnswerAndReportAppendJSON holds the hand-written answers to json.Marshal on thousands of values
// drawn from random items (the strings, times and results encoding/json treats specially), on the zero
// values, and on values with every field filled by reflection (so a field added later fails here until
// AppendJSON writes it).
func TestAnswerAndReportAppendJSON(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(20261201, 1300))
	for range 3000 {
		it := itemstest.RandomItem(r)
		appendMatches(t, &items.Answer{Key: it.Key, Decision: items.Decision(it.Dedupe), Reason: items.Reason(it.Cause), State: it.State,
			Attempt: it.Attempt, Claim: it.Claim, IdempotencyKey: it.Fingerprint, LeaseExpiresAt: it.LeaseExpiresAt,
			RetryAfter: it.HTTPStatus, ExternalID: it.ExternalID, Result: it.Result, Reference: it.Reference,
			NeedsPerson: it.NeedsPerson, Message: it.FailureMessage})
		appendMatches(t, &items.Report{Key: it.Key, State: it.State, Reason: items.Reason(it.NeedsPersonCause), Attempt: it.ExtraAttempts,
			Message: it.FailureMessage, ResultDropped: it.Retryable})
	}
	late := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) // json.Marshal cannot write it
	appendMatches(t, &items.Answer{LeaseExpiresAt: &late})
	appendMatches(t, &items.Answer{Result: json.RawMessage(`{"a":`)})
	appendMatches(t, &items.Answer{})
	appendMatches(t, &items.Report{})

	var a items.Answer
	var rep items.Report
	fill(t, reflect.ValueOf(&a).Elem(), 0)
	fill(t, reflect.ValueOf(&rep).Elem(), 0)
	for _, v := range []jsonAppender{&a, &rep} {
		appendMatches(t, v)
		doc, _ := v.AppendJSON(nil)
		typ := reflect.TypeOf(v).Elem()
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !bytes.Contains(doc, []byte(`"`+name+`":`)) {
				t.Errorf("%s.%s (%q) is missing from %s", typ.Name(), f.Name, name, doc)
			}
		}
	}
}
