package batches_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/replaysafe/companion/batches"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
)

// TestBeforeWriteResultAppendJSON holds the hand-written batch answer to json.Marshal, byte for byte, on
// batches of answers drawn from random items (the strings, times and results encoding/json treats
// specially), on an empty and a nil list, and on a time json.Marshal cannot write.
func TestBeforeWriteResultAppendJSON(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(20261201, 1415))
	check := func(res batches.BeforeWriteResult) {
		t.Helper()
		want, wantErr := json.Marshal(res)
		got, err := res.AppendJSON([]byte("prefix"))
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("AppendJSON error %v, json.Marshal error %v", err, wantErr)
		}
		if err != nil {
			if string(got) != "prefix" {
				t.Fatalf("on an error AppendJSON gave %q, want dst as it was", got)
			}
			return
		}
		if !bytes.Equal(got[len("prefix"):], want) {
			t.Fatalf("AppendJSON\n%s\njson.Marshal\n%s", got[len("prefix"):], want)
		}
	}
	for range 300 {
		var res batches.BeforeWriteResult
		it := itemstest.RandomItem(r)
		res.BatchID = it.BatchID
		res.Counts = batches.DecisionCounts{Proceed: r.IntN(500), Skip: r.IntN(3), Conflict: r.IntN(3), Reconcile: r.IntN(3)}
		for range r.IntN(6) {
			it := itemstest.RandomItem(r)
			res.Items = append(res.Items, batches.ItemAnswer{BatchIndex: r.IntN(1000) - 10, Answer: items.Answer{Key: it.Key,
				Decision: items.Decision(it.Dedupe), Reason: items.Reason(it.Cause), State: it.State, Attempt: it.Attempt,
				Claim: it.Claim, IdempotencyKey: it.Fingerprint, LeaseExpiresAt: it.LeaseExpiresAt, RetryAfter: it.HTTPStatus,
				ExternalID: it.ExternalID, Result: it.Result, Reference: it.Reference, NeedsPerson: it.NeedsPerson,
				Message: it.FailureMessage}})
		}
		check(res)
	}
	// A field added later is not written by hand until AppendJSON writes it.
	for typ, n := range map[reflect.Type]int{reflect.TypeFor[batches.BeforeWriteResult](): 3,
		reflect.TypeFor[batches.DecisionCounts](): 4, reflect.TypeFor[batches.ItemAnswer](): 2} {
		if got := typ.NumField(); got != n {
			t.Errorf("%s has %d fields, AppendJSON writes %d: write the new one there", typ, got, n)
		}
	}
	check(batches.BeforeWriteResult{})
	check(batches.BeforeWriteResult{Items: []batches.ItemAnswer{}})
	check(batches.BeforeWriteResult{Items: []batches.ItemAnswer{{}}})
	late := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) // json.Marshal cannot write it
	check(batches.BeforeWriteResult{Items: []batches.ItemAnswer{{Answer: items.Answer{Key: "k", LeaseExpiresAt: &late}}}})
}
