package batches_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/batches"
	"github.com/replaysafe/companion/items"
)

const tenant = "acme"

// intent is one item's before-write request, its payload fingerprinted as the handler would.
func intent(t *testing.T, key, payload string) items.BeforeWriteParams {
	t.Helper()
	canon, err := items.Canonical([]byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	return items.BeforeWriteParams{Key: key, Canonical: canon}
}

func intents(t *testing.T, keys ...string) []items.BeforeWriteParams {
	ps := make([]items.BeforeWriteParams, len(keys))
	for i, k := range keys {
		ps[i] = intent(t, k, fmt.Sprintf(`{"item":%q}`, k))
	}
	return ps
}

func (f *fixture) beforeWrite(t *testing.T, batchID string, ps []items.BeforeWriteParams) batches.BeforeWriteResult {
	t.Helper()
	res, err := f.svc.BeforeWrite(context.Background(), batches.Batch{Tenant: tenant, BatchID: batchID, Items: ps})
	if err != nil {
		t.Fatalf("batch before-write %s: %v", batchID, err)
	}
	return res
}

func (f *fixture) afterWrite(t *testing.T, ps ...items.AfterWriteParams) batches.AfterWriteResult {
	t.Helper()
	res, err := f.svc.AfterWrite(context.Background(), batches.Reports{Tenant: tenant, Items: ps})
	if err != nil {
		t.Fatalf("batch after-write: %v", err)
	}
	return res
}

func (f *fixture) status(t *testing.T, batchID string) batches.Status {
	t.Helper()
	st, err := f.svc.Status(context.Background(), batches.StatusParams{Tenant: tenant, BatchID: batchID})
	if err != nil {
		t.Fatalf("status of %s: %v", batchID, err)
	}
	return st
}

func succeeded(a batches.ItemAnswer, externalID string) items.AfterWriteParams {
	return items.AfterWriteParams{Key: a.Key, Claim: a.Claim, ExternalID: externalID,
		Evidence: items.Evidence{Outcome: items.OutcomeSucceeded}}
}

func decisions(res batches.BeforeWriteResult) []string {
	out := make([]string, len(res.Items))
	for i, a := range res.Items {
		out[i] = string(a.Decision) + "/" + string(a.Reason)
	}
	return out
}

func wantDecisions(t *testing.T, res batches.BeforeWriteResult, want ...string) {
	t.Helper()
	got := decisions(res)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("decisions = %v, want %v", got, want)
	}
}

// Seed 000, case 8: a batch of three commits the first two and the third fails; the re-run replays the
// third only.
func TestCase8PartialBatchReplaysOnlyTheFailedItem(t *testing.T) {
	eachStore(t, func(t *testing.T, k storeKind) {
		f := newFixture(t, k)
		keys := []string{"invoice-741:reminder:1", "invoice-742:reminder:1", "invoice-743:reminder:1"}
		first := f.beforeWrite(t, "exec-1:Send reminders", intents(t, keys...))
		wantDecisions(t, first, "proceed/new", "proceed/new", "proceed/new")
		if first.Counts != (batches.DecisionCounts{Proceed: 3}) {
			t.Fatalf("counts = %+v", first.Counts)
		}

		retryAfter := 30
		f.afterWrite(t, succeeded(first.Items[0], "r-1"), succeeded(first.Items[1], "r-2"), items.AfterWriteParams{
			Key: keys[2], Claim: first.Items[2].Claim,
			Evidence: items.Evidence{Outcome: items.OutcomeFailed, HTTPStatus: 503, RetryAfter: &retryAfter},
		})
		if st := f.status(t, "exec-1:Send reminders"); st.Counts != (batches.StateCounts{Succeeded: 2, Failed: 1}) {
			t.Fatalf("status after the first run: counts %+v", st.Counts)
		}

		// The re-run is a new execution with a new batch id: before Retry-After has passed it writes nothing.
		early := f.beforeWrite(t, "exec-2:Send reminders", intents(t, keys...))
		wantDecisions(t, early, "skip/succeeded", "skip/succeeded", "skip/retry_later")
		if got := early.Items[2].RetryAfter; got != 30 {
			t.Fatalf("retry_after = %d, want 30", got)
		}

		f.clock.Advance(31 * time.Second)
		rerun := f.beforeWrite(t, "exec-3:Send reminders", intents(t, keys...))
		wantDecisions(t, rerun, "skip/succeeded", "skip/succeeded", "proceed/retry")
		if rerun.Items[0].ExternalID != "r-1" || rerun.Items[2].Attempt != 2 {
			t.Fatalf("re-run answers: %+v", rerun.Items)
		}
		if rerun.Items[2].IdempotencyKey != first.Items[2].IdempotencyKey {
			t.Fatal("the retry of the third item changed its idempotency key")
		}
		f.afterWrite(t, succeeded(rerun.Items[2], "r-3"))

		st := f.status(t, "exec-1:Send reminders")
		if st.Counts != (batches.StateCounts{Succeeded: 3}) {
			t.Fatalf("status after the re-run: counts %+v", st.Counts)
		}
		for i, it := range st.Items {
			if it.Key != keys[i] || *it.BatchIndex != i || it.ExternalID != fmt.Sprintf("r-%d", i+1) {
				t.Fatalf("status item %d = %+v", i, it)
			}
		}
	})
}

func TestKeyRepeatedInBatchIsClaimedOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, k storeKind) {
		f := newFixture(t, k)
		ps := []items.BeforeWriteParams{
			intent(t, "order-1:email:1", `{"to":"a"}`),
			intent(t, "order-2:email:1", `{"to":"b"}`),
			intent(t, "order-1:email:1", `{"to":"a"}`),
			intent(t, "order-1:email:1", `{"to":"someone else"}`),
		}
		res := f.beforeWrite(t, "exec-1", ps)
		wantDecisions(t, res, "proceed/new", "proceed/new", "skip/in_progress", "conflict/fingerprint_mismatch")
		if res.Counts != (batches.DecisionCounts{Proceed: 2, Skip: 1, Conflict: 1}) {
			t.Fatalf("counts = %+v", res.Counts)
		}
		if res.Items[2].Claim != "" || res.Items[2].RetryAfter != items.DefaultLeaseSeconds {
			t.Fatalf("repeat answer = %+v", res.Items[2])
		}
		for i, a := range res.Items {
			if a.BatchIndex != i {
				t.Fatalf("item %d has batch_index %d", i, a.BatchIndex)
			}
		}
		it, err := f.store.Get(context.Background(), tenant, "order-1:email:1")
		if err != nil {
			t.Fatal(err)
		}
		if it.Attempt != 1 || it.Claim != res.Items[0].Claim || *it.BatchIndex != 0 {
			t.Fatalf("stored item: attempt %d, claim %s, batch_index %d", it.Attempt, it.Claim, *it.BatchIndex)
		}
	})
}

// The batches race on new keys only, so they race on inserts: FerretDB, the test server of the MongoDB
// store, keeps those atomic (the unique _id), unlike concurrent conditional updates, which this test does
// not make. It runs on every store.
func TestSameBatchSentTwiceAtOnceProceedsEachKeyOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, k storeKind) {
		f := newFixture(t, k)
		keys := make([]string, 100)
		for i := range keys {
			keys[i] = fmt.Sprintf("row-%03d:sheet:append", i)
		}
		ps := intents(t, keys...)
		const senders = 2
		results := make([]batches.BeforeWriteResult, senders)
		errs := make([]error, senders)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range senders {
			wg.Go(func() {
				<-start
				results[g], errs[g] = f.svc.BeforeWrite(context.Background(), batches.Batch{Tenant: tenant, BatchID: "exec-9", Items: ps})
			})
		}
		close(start)
		wg.Wait()
		proceeds := map[string]int{}
		for g := range senders {
			if errs[g] != nil {
				t.Fatal(errs[g])
			}
			for _, a := range results[g].Items {
				switch {
				case a.Decision == items.Proceed:
					proceeds[a.Key]++
				case a.Decision != items.Skip || a.Reason != items.ReasonInProgress:
					t.Fatalf("%s: %s/%s, want proceed or skip/in_progress", a.Key, a.Decision, a.Reason)
				}
			}
		}
		for _, key := range keys {
			if proceeds[key] != 1 {
				t.Fatalf("%s proceeded %d times", key, proceeds[key])
			}
		}
	})
}

func TestInvalidItemRefusesTheWholeBatch(t *testing.T) {
	eachStore(t, func(t *testing.T, k storeKind) {
		f := newFixture(t, k)
		keys := make([]string, 10)
		for i := range keys {
			keys[i] = fmt.Sprintf("contact-%d:crm:create", i)
		}
		ps := intents(t, keys...)
		ps[6].Key = "contact 6" // a space is not a key character

		for name, call := range map[string]func() error{
			"before-write": func() error {
				_, err := f.svc.BeforeWrite(context.Background(), batches.Batch{Tenant: tenant, BatchID: "exec-1", Items: ps})
				return err
			},
			"prepare": func() error {
				_, err := f.svc.Prepare(context.Background(), batches.Batch{Tenant: tenant, BatchID: "exec-1", Items: ps})
				return err
			},
		} {
			var e *items.Error
			if err := call(); !errors.As(err, &e) || e.Code != items.CodeInvalid || len(e.Fields) != 1 || e.Fields[0].Field != "items[6].key" {
				t.Fatalf("%s: error %v, want invalid_request naming items[6].key", name, err)
			}
		}
		for _, key := range keys {
			if _, err := f.store.Get(context.Background(), tenant, key); !errors.Is(err, items.ErrNotFound) {
				t.Fatalf("%s was written (err %v)", key, err)
			}
		}
		if _, err := f.svc.Status(context.Background(), batches.StatusParams{Tenant: tenant, BatchID: "exec-1"}); !errors.Is(err, items.ErrNotFound) {
			t.Fatalf("status of a batch that wrote nothing: %v, want not found", err)
		}
	})
}

func TestBatchShapeIsChecked(t *testing.T) {
	f := newFixture(t, storeKinds()[0])
	many := intents(t, make([]string, batches.MaxItems+1)...)
	for i := range many {
		many[i].Key = fmt.Sprintf("k-%d", i)
	}
	negative := intents(t, "a", "b")
	negative[1].BatchIndex = new(-1)
	for _, tc := range []struct {
		name  string
		batch batches.Batch
		field string
	}{
		{"NoItems", batches.Batch{Tenant: tenant, BatchID: "b"}, "items"},
		{"TooManyItems", batches.Batch{Tenant: tenant, BatchID: "b", Items: many}, "items"},
		{"NoBatchID", batches.Batch{Tenant: tenant, Items: intents(t, "a")}, "batch_id"},
		{"LongBatchID", batches.Batch{Tenant: tenant, BatchID: strings.Repeat("b", batches.MaxBatchIDLength+1), Items: intents(t, "a")}, "batch_id"},
		{"NegativeBatchIndex", batches.Batch{Tenant: tenant, BatchID: "b", Items: negative}, "items[1].batch_index"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e *items.Error
			_, err := f.svc.BeforeWrite(context.Background(), tc.batch)
			if !errors.As(err, &e) || e.Fields[0].Field != tc.field {
				t.Fatalf("error %v, want invalid_request naming %s", err, tc.field)
			}
		})
	}
}

func TestPreparedItemsAreClaimedAsNew(t *testing.T) {
	eachStore(t, func(t *testing.T, k storeKind) {
		f := newFixture(t, k)
		ctx := context.Background()
		keys := []string{"booking-1:calendar:create", "booking-2:calendar:create", "booking-3:calendar:create"}
		batch := batches.Batch{Tenant: tenant, BatchID: "exec-5", Items: intents(t, keys...)}
		res, err := f.svc.Prepare(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		if res.Counts != (batches.PrepareCounts{Prepared: 3}) || res.BatchID != "exec-5" {
			t.Fatalf("prepare = %+v", res)
		}
		if st := f.status(t, "exec-5"); st.Counts != (batches.StateCounts{Prepared: 3}) || st.Items[2].Attempt != 0 {
			t.Fatalf("status after prepare = %+v", st)
		}

		// The workflow dies after the first item; the operator sees the two it never reached.
		first := f.beforeWrite(t, "exec-5", batch.Items[:1])
		wantDecisions(t, first, "proceed/new")
		if first.Items[0].Attempt != 1 {
			t.Fatalf("attempt = %d", first.Items[0].Attempt)
		}
		if st := f.status(t, "exec-5"); st.Counts != (batches.StateCounts{Prepared: 2, InFlight: 1}) {
			t.Fatalf("status after the first claim: %+v", st.Counts)
		}

		again, err := f.svc.Prepare(ctx, batches.Batch{Tenant: tenant, BatchID: "exec-6",
			Items: intents(t, append(keys, "booking-4:calendar:create", "booking-4:calendar:create")...)})
		if err != nil {
			t.Fatal(err)
		}
		if again.Counts != (batches.PrepareCounts{Prepared: 1, Existing: 4}) {
			t.Fatalf("prepare again = %+v", again.Counts)
		}
		it, err := f.store.Get(ctx, tenant, keys[1])
		if err != nil {
			t.Fatal(err)
		}
		if it.BatchID != "exec-5" || it.State != items.StatePrepared {
			t.Fatalf("a second prepare changed an existing item: batch %s, state %s", it.BatchID, it.State)
		}
	})
}

func TestStatusPagesPast500(t *testing.T) {
	eachStore(t, func(t *testing.T, k storeKind) {
		f := newFixture(t, k)
		// A workflow sends 620 items as two chunks of one batch, naming the indexes of the second chunk.
		keys := make([]string, 620)
		for i := range keys {
			keys[i] = fmt.Sprintf("line-%d:ledger:post", i)
		}
		ps := intents(t, keys...)
		for i := range ps {
			ps[i].BatchIndex = new(i)
		}
		f.beforeWrite(t, "exec-7", ps[:batches.MaxItems])
		f.beforeWrite(t, "exec-7", ps[batches.MaxItems:])

		var seen []string
		cursor := ""
		for page := 1; ; page++ {
			st, err := f.svc.Status(context.Background(), batches.StatusParams{Tenant: tenant, BatchID: "exec-7", Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			if st.Counts != (batches.StateCounts{InFlight: 620}) {
				t.Fatalf("page %d counts %+v", page, st.Counts)
			}
			if want := map[int]int{1: 500, 2: 120}[page]; len(st.Items) != want {
				t.Fatalf("page %d has %d items, want %d", page, len(st.Items), want)
			}
			for _, it := range st.Items {
				if *it.BatchIndex != len(seen) {
					t.Fatalf("item %s at index %d listed at position %d", it.Key, *it.BatchIndex, len(seen))
				}
				seen = append(seen, it.Key)
			}
			if cursor = st.NextCursor; cursor == "" {
				break
			}
		}
		if fmt.Sprint(seen) != fmt.Sprint(keys) {
			t.Fatal("the pages do not list every key once, in index order")
		}

		_, err := f.svc.Status(context.Background(), batches.StatusParams{Tenant: tenant, BatchID: "exec-7", Cursor: "not a cursor"})
		var e *items.Error
		if !errors.As(err, &e) || e.Fields[0].Field != "cursor" {
			t.Fatalf("a made-up cursor: %v", err)
		}
	})
}

// An item belongs to the batch that first registered it; a re-run from a new execution (a new batch id)
// decides the same keys and does not take the items over.
func TestItemBelongsToTheBatchThatFirstRegisteredIt(t *testing.T) {
	eachStore(t, func(t *testing.T, k storeKind) {
		f := newFixture(t, k)
		ctx := context.Background()
		first := f.beforeWrite(t, "exec-1", intents(t, "a:x:y:1", "a:x:y:2"))
		f.afterWrite(t, items.AfterWriteParams{Key: "a:x:y:1", Claim: first.Items[0].Claim,
			Evidence: items.Evidence{Outcome: items.OutcomeFailed, Class: items.ClassValidation}})
		f.afterWrite(t, succeeded(first.Items[1], "e-2"))

		// The re-run lists the keys in another order, plus one the first run never had.
		rerun := f.beforeWrite(t, "exec-2", intents(t, "a:x:y:2", "a:x:y:1", "a:x:y:3"))
		wantDecisions(t, rerun, "skip/succeeded", "proceed/retry", "proceed/new")

		st := f.status(t, "exec-1")
		if len(st.Items) != 2 || st.Items[0].Key != "a:x:y:1" || *st.Items[0].BatchIndex != 0 || st.Items[1].Key != "a:x:y:2" {
			t.Fatalf("exec-1 lists %+v", st.Items)
		}
		if st.Counts != (batches.StateCounts{InFlight: 1, Succeeded: 1}) {
			t.Fatalf("exec-1 counts %+v", st.Counts)
		}
		st2 := f.status(t, "exec-2")
		if len(st2.Items) != 1 || st2.Items[0].Key != "a:x:y:3" || *st2.Items[0].BatchIndex != 2 {
			t.Fatalf("exec-2 lists %+v", st2.Items)
		}

		it, err := f.store.Get(ctx, tenant, "a:x:y:1")
		if err != nil {
			t.Fatal(err)
		}
		if it.BatchID != "exec-1" || *it.BatchIndex != 0 {
			t.Fatalf("item moved to batch %s index %d", it.BatchID, *it.BatchIndex)
		}
		if len(it.Attempts) != 2 || it.Attempts[0].BatchID != "exec-1" || it.Attempts[1].BatchID != "exec-2" {
			t.Fatalf("attempts do not record their batches: %+v", it.Attempts)
		}
		if last := it.History[len(it.History)-1]; last.Kind != items.EventClaimed || last.BatchID != "exec-2" {
			t.Fatalf("history does not record the claim from exec-2: %+v", last)
		}
	})
}

func TestAfterWriteReportsBadItemsInline(t *testing.T) {
	eachStore(t, func(t *testing.T, k storeKind) {
		f := newFixture(t, k)
		ctx := context.Background()
		res := f.beforeWrite(t, "exec-1", intents(t, "p:1", "p:2"))
		out := f.afterWrite(t,
			succeeded(res.Items[0], "e-1"),
			items.AfterWriteParams{Key: "p:never-claimed", Claim: "c_nope", Evidence: items.Evidence{Outcome: items.OutcomeSucceeded}},
			items.AfterWriteParams{Key: "p:2", Claim: "c_wrong", Evidence: items.Evidence{Outcome: items.OutcomeSucceeded}},
			succeeded(res.Items[1], "e-2"),
			succeeded(res.Items[0], "e-1"),
		)
		want := []string{"succeeded/recorded", "error not_found", "error conflict", "succeeded/recorded", "succeeded/unchanged"}
		for i, r := range out.Items {
			got := "error " + func() string {
				if r.Error != nil {
					return string(r.Error.Code)
				}
				return ""
			}()
			if r.Report != nil {
				got = string(r.State) + "/" + string(r.Reason)
			}
			if got != want[i] {
				t.Fatalf("item %d (%s): %s, want %s", i, r.Key, got, want[i])
			}
		}

		// An invalid report refuses the whole request: the good report beside it is not recorded.
		_, err := f.svc.AfterWrite(ctx, batches.Reports{Tenant: tenant, Items: []items.AfterWriteParams{
			{Key: "p:3", Claim: "c_x", Evidence: items.Evidence{Outcome: items.OutcomeSucceeded}},
			{Key: "p:1", Claim: res.Items[0].Claim, Evidence: items.Evidence{Outcome: items.OutcomeFailed}},
		}})
		var e *items.Error
		if !errors.As(err, &e) || e.Fields[0].Field != "items[1].error" {
			t.Fatalf("error %v, want invalid_request naming items[1].error", err)
		}
	})
}

func TestStatusRecordsExpiredLeases(t *testing.T) {
	eachStore(t, func(t *testing.T, k storeKind) {
		f := newFixture(t, k)
		ps := intents(t, "s:1", "s:2")
		ps[0].LeaseSeconds = 10
		f.beforeWrite(t, "exec-1", ps)
		f.clock.Advance(11 * time.Second)

		st := f.status(t, "exec-1")
		if st.Counts != (batches.StateCounts{InFlight: 1, Unknown: 1}) || st.Items[0].State != items.StateUnknown {
			t.Fatalf("status = %+v", st)
		}
		it, err := f.store.Get(context.Background(), tenant, "s:1")
		if err != nil {
			t.Fatal(err)
		}
		if it.State != items.StateUnknown || it.Cause != items.CauseLeaseExpired {
			t.Fatalf("the expired lease was not recorded: %s (%s)", it.State, it.Cause)
		}
	})
}
