package handlerstest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/items"
)

// BatchItem is one item of a batch body: a key and a payload built from it.
func BatchItem(key string, extra map[string]any) map[string]any {
	item := map[string]any{"key": key, "payload": map[string]any{"row": key, "amount": "10.00"}}
	for k, v := range extra {
		item[k] = v
	}
	return item
}

// BatchItems returns BatchItem for each key.
func BatchItems(keys ...string) []any {
	out := make([]any, len(keys))
	for i, k := range keys {
		out[i] = BatchItem(k, nil)
	}
	return out
}

// Prepare registers keys as batch "prep" of tenant acme (POST /v1/batches/prepare) and fails the test
// unless it is answered 200.
func (s *Service) Prepare(keys ...string) {
	s.t.Helper()
	Expect(s.t, s.Post(WorkflowAcme, "/v1/batches/prepare", map[string]any{"batch_id": "prep", "items": BatchItems(keys...)}),
		http.StatusOK, "", "")
}

// ExpectNoClaim fails the test unless tenant acme's key holds no claim after a refused before-write
// (API.md additions, "A refused request leaves nothing behind"): a new key does not exist, a prepared one
// is prepared again, unclaimed, at attempt 0, its history only its registration.
func (s *Service) ExpectNoClaim(key string, prepared bool) {
	s.t.Helper()
	it := s.Item("acme", key)
	switch {
	case !prepared && it != nil:
		s.t.Fatalf("%s exists after a refused before-write: %s attempt %d", key, it.State, it.Attempt)
	case prepared && (it == nil || it.State != items.StatePrepared || it.Claim != "" || it.Attempt != 0 || len(it.History) != 1):
		s.t.Fatalf("%s after a refused before-write: %+v", key, it)
	}
}

// BatchBeforeWrite sends a batch before-write as tenant acme's workflow.
func (s *Service) BatchBeforeWrite(batchID string, items []any) Response {
	s.t.Helper()
	return s.Post(WorkflowAcme, "/v1/batches/before-write", map[string]any{"batch_id": batchID, "items": items})
}

// BatchAfterWrite sends a batch after-write as tenant acme's workflow.
func (s *Service) BatchAfterWrite(reports ...map[string]any) Response {
	s.t.Helper()
	return s.Post(WorkflowAcme, "/v1/batches/after-write", map[string]any{"items": reports})
}

// BatchStatus reads a batch's status as tenant acme's workflow (the batch id is percent-encoded here).
func (s *Service) BatchStatus(batchID, cursor string) Response {
	s.t.Helper()
	path := "/v1/batches/" + url.PathEscape(batchID)
	if cursor != "" {
		path += "?cursor=" + url.QueryEscape(cursor)
	}
	return s.Get(WorkflowAcme, path)
}

// ItemAt returns item i of the response's items array, or nil.
func (r Response) ItemAt(i int) Response {
	list, _ := r.At("items").([]any)
	if i >= len(list) {
		return Response{}
	}
	m, _ := list[i].(map[string]any)
	return Response{Status: r.Status, JSON: m}
}

// Len returns the length of the array at a dotted path, or -1.
func (r Response) Len(path string) int {
	list, ok := r.At(path).([]any)
	if !ok {
		return -1
	}
	return len(list)
}

// ExerciseBatches runs the HTTP tests of the batch endpoints against stores from open, as Exercise does
// for the single-item ones.
func ExerciseBatches(t *testing.T, open func(t *testing.T) items.Store, opts Options) {
	newService := func(t *testing.T) *Service { return NewService(t, open(t), ServiceConfig{}) }

	// Seed 000, case 8: a batch of three commits two; the third gets 503 with Retry-After. The re-run of the
	// whole batch proceeds with the third only.
	t.Run("Case8ReRunProceedsWithTheThirdOnly", func(t *testing.T) {
		t.Parallel()
		s := newService(t)
		const batch = "exec-1234:Send reminders"
		keys := []string{"invoice-741:reminder:1", "invoice-742:reminder:1", "invoice-743:reminder:1"}
		first := s.BatchBeforeWrite(batch, BatchItems(keys...))
		Expect(t, first, http.StatusOK, "", "")
		if first.Str("batch_id") != batch || first.Num("counts.proceed") != 3 || first.Num("counts.skip") != 0 ||
			first.Num("counts.conflict") != 0 || first.Num("counts.reconcile") != 0 {
			t.Fatalf("first run: %s", first.Body)
		}
		for i := range keys {
			a := first.ItemAt(i)
			if a.Str("key") != keys[i] || a.Str("decision") != "proceed" || a.Str("reason") != "new" || a.Num("batch_index") != float64(i) ||
				!strings.HasPrefix(a.Str("claim"), "c_") || !strings.HasPrefix(a.Str("idempotency_key"), "ik_") {
				t.Fatalf("first run item %d: %v", i, a.JSON)
			}
		}
		after := s.BatchAfterWrite(
			map[string]any{"key": keys[0], "claim": first.ItemAt(0).Str("claim"), "outcome": "succeeded", "external_id": "r-1"},
			map[string]any{"key": keys[1], "claim": first.ItemAt(1).Str("claim"), "outcome": "succeeded", "external_id": "r-2"},
			map[string]any{"key": keys[2], "claim": first.ItemAt(2).Str("claim"), "outcome": "failed", "http_status": 503, "retry_after": 30,
				"error": map[string]any{"class": "http", "message": "Service Unavailable"}},
		)
		Expect(t, after, http.StatusOK, "", "")
		if after.ItemAt(2).Str("state") != "failed" || after.ItemAt(0).Str("state") != "succeeded" {
			t.Fatalf("after-write: %s", after.Body)
		}
		st := s.BatchStatus(batch, "")
		Expect(t, st, http.StatusOK, "", "")
		if st.Num("counts.succeeded") != 2 || st.Num("counts.failed") != 1 || st.Num("counts.in_flight") != 0 || st.Len("items") != 3 {
			t.Fatalf("status after the first run: %s", st.Body)
		}

		s.Clock.Advance(30 * time.Second)
		rerun := s.BatchBeforeWrite("exec-1240:Send reminders", BatchItems(keys...))
		if rerun.Num("counts.proceed") != 1 || rerun.Num("counts.skip") != 2 {
			t.Fatalf("re-run: %s", rerun.Body)
		}
		third := rerun.ItemAt(2)
		if rerun.ItemAt(0).Str("reason") != "succeeded" || rerun.ItemAt(0).Str("external_id") != "r-1" ||
			third.Str("decision") != "proceed" || third.Str("reason") != "retry" || third.Num("attempt") != 2 ||
			third.Str("idempotency_key") != first.ItemAt(2).Str("idempotency_key") {
			t.Fatalf("re-run items: %s", rerun.Body)
		}
		s.BatchAfterWrite(map[string]any{"key": keys[2], "claim": third.Str("claim"), "outcome": "succeeded", "external_id": "r-3"})
		st = s.BatchStatus(batch, "")
		if st.Num("counts.succeeded") != 3 || st.Num("counts.failed") != 0 || st.ItemAt(2).Str("external_id") != "r-3" ||
			st.ItemAt(2).Num("attempt") != 2 || st.ItemAt(2).Num("batch_index") != 2 || st.Str("next_cursor") != "" {
			t.Fatalf("status after the re-run: %s", st.Body)
		}
		if op := s.Get(OperatorAcme, "/v1/batches/"+url.PathEscape(batch)); string(op.Body) != string(st.Body) {
			t.Fatalf("operator and workflow see different bodies:\n%s\n%s", op.Body, st.Body)
		}
		// The re-run registered nothing of its own.
		Expect(t, s.BatchStatus("exec-1240:Send reminders", ""), http.StatusNotFound, items.CodeNotFound, "")
	})

	t.Run("RepeatedKeyIsClaimedOnce", func(t *testing.T) {
		t.Parallel()
		s := newService(t)
		r := s.BatchBeforeWrite("b", []any{
			BatchItem("k-1", nil), BatchItem("k-1", nil),
			map[string]any{"key": "k-1", "payload": map[string]any{"row": "changed"}},
		})
		Expect(t, r, http.StatusOK, "", "")
		got := fmt.Sprintf("%s/%s %s/%s %s/%s", r.ItemAt(0).Str("decision"), r.ItemAt(0).Str("reason"),
			r.ItemAt(1).Str("decision"), r.ItemAt(1).Str("reason"), r.ItemAt(2).Str("decision"), r.ItemAt(2).Str("reason"))
		if got != "proceed/new skip/in_progress conflict/fingerprint_mismatch" {
			t.Fatalf("decisions %s: %s", got, r.Body)
		}
		if r.ItemAt(1).At("claim") != nil || r.ItemAt(1).Num("retry_after") != 300 {
			t.Fatalf("the repeat: %v", r.ItemAt(1).JSON)
		}
	})

	t.Run("SameBatchTwiceAtOnceProceedsEachKeyOnce", func(t *testing.T) {
		t.Parallel()
		if opts.SkipConcurrency != "" {
			t.Skip(opts.SkipConcurrency)
		}
		s := newService(t)
		keys := make([]string, 200)
		for i := range keys {
			keys[i] = fmt.Sprintf("sheet:row-%d:append:1", i)
		}
		answers := make([]Response, 2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for g := range answers {
			wg.Go(func() {
				<-start
				answers[g] = s.BatchBeforeWrite("exec-77", BatchItems(keys...))
			})
		}
		close(start)
		wg.Wait()
		proceeds := map[string]int{}
		for _, r := range answers {
			Expect(t, r, http.StatusOK, "", "")
			for i := range keys {
				a := r.ItemAt(i)
				switch {
				case a.Str("decision") == "proceed":
					proceeds[a.Str("key")]++
				case a.Str("decision") != "skip" || a.Str("reason") != "in_progress":
					t.Fatalf("%s: %s/%s", a.Str("key"), a.Str("decision"), a.Str("reason"))
				}
			}
		}
		for _, k := range keys {
			if proceeds[k] != 1 {
				t.Fatalf("%s proceeded %d times", k, proceeds[k])
			}
		}
	})

	t.Run("InvalidItemRefusesTheWholeBatch", func(t *testing.T) {
		t.Parallel()
		s := newService(t)
		keys := make([]string, 10)
		for i := range keys {
			keys[i] = fmt.Sprintf("contact-%d", i)
		}
		list := BatchItems(keys...)
		list[6] = map[string]any{"key": "contact 6", "payload": map[string]any{}}
		for _, path := range []string{"/v1/batches/before-write", "/v1/batches/prepare"} {
			r := s.Post(WorkflowAcme, path, map[string]any{"batch_id": "b", "items": list})
			Expect(t, r, http.StatusBadRequest, items.CodeInvalid, "items[6].key")
		}
		// Every bad item is named, the first in the message.
		list[2] = map[string]any{"key": "contact-2", "payload": map[string]any{}, "colour": "red"}
		list[8] = "contact-8"
		r := s.Post(WorkflowAcme, "/v1/batches/before-write", map[string]any{"batch_id": "b", "items": list})
		Expect(t, r, http.StatusBadRequest, items.CodeInvalid, "items[2].colour")
		Expect(t, r, http.StatusBadRequest, items.CodeInvalid, "items[6].key")
		Expect(t, r, http.StatusBadRequest, items.CodeInvalid, "items[8]")
		if !strings.HasPrefix(r.Str("error.message"), "items[2].colour: ") {
			t.Fatalf("the message does not start with the first bad item: %s", r.Str("error.message"))
		}
		for _, k := range keys {
			if s.Item("acme", k) != nil {
				t.Fatalf("%s was written by a refused batch", k)
			}
		}
		Expect(t, s.BatchStatus("b", ""), http.StatusNotFound, items.CodeNotFound, "")
	})

	t.Run("RefusedBatchRequestsWriteNothing", func(t *testing.T) {
		t.Parallel()
		s := newService(t)
		held := s.BatchBeforeWrite("b", BatchItems("held"))
		claim := held.ItemAt(0).Str("claim")
		ok := `{"batch_id":"b","items":[{"key":"new-1","payload":{"a":1}}]}`
		many := make([]string, 501)
		for i := range many {
			many[i] = fmt.Sprintf(`{"key":"n-%d","payload":{}}`, i)
		}
		const bw, prep, aw = "/v1/batches/before-write", "/v1/batches/prepare", "/v1/batches/after-write"
		goodReport := fmt.Sprintf(`{"key":"held","claim":%q,"outcome":"succeeded"}`, claim)
		cases := []struct {
			name, path, token, contentType, body string
			status                               int
			code                                 items.Code
			field                                string
		}{
			{name: "no token", path: bw, body: ok, status: 401, code: handlers.CodeUnauthorized},
			{name: "no token on status", path: "/v1/batches/b", status: 401, code: handlers.CodeUnauthorized},
			{name: "text/plain", path: bw, token: WorkflowAcme, contentType: "text/plain", body: ok, status: 415, code: handlers.CodeUnsupportedMediaType},
			{name: "oversized", path: aw, token: WorkflowAcme, body: `{"items":[{"key":"held","claim":"` + strings.Repeat("c", handlers.MaxBodyBytes) + `"}]}`, status: 413, code: handlers.CodePayloadTooLarge},
			{name: "malformed", path: bw, token: WorkflowAcme, body: `{"batch_id":"b","items":[`, status: 400, code: items.CodeInvalid, field: "body"},
			{name: "unknown top-level field", path: bw, token: WorkflowAcme, body: `{"batch_id":"b","items":[{"key":"new-1","payload":{}}],"mode":"fast"}`, status: 400, code: items.CodeInvalid, field: "mode"},
			{name: "no batch_id", path: bw, token: WorkflowAcme, body: `{"items":[{"key":"new-1","payload":{}}]}`, status: 400, code: items.CodeInvalid, field: "batch_id"},
			{name: "empty batch_id", path: prep, token: WorkflowAcme, body: `{"batch_id":"","items":[{"key":"new-1","payload":{}}]}`, status: 400, code: items.CodeInvalid, field: "batch_id"},
			{name: "batch_id of 201 characters", path: bw, token: WorkflowAcme, body: `{"batch_id":"` + strings.Repeat("b", 201) + `","items":[{"key":"new-1","payload":{}}]}`, status: 400, code: items.CodeInvalid, field: "batch_id"},
			{name: "no items", path: bw, token: WorkflowAcme, body: `{"batch_id":"b"}`, status: 400, code: items.CodeInvalid, field: "items"},
			{name: "empty items", path: bw, token: WorkflowAcme, body: `{"batch_id":"b","items":[]}`, status: 400, code: items.CodeInvalid, field: "items"},
			{name: "items not an array", path: bw, token: WorkflowAcme, body: `{"batch_id":"b","items":{"key":"new-1"}}`, status: 400, code: items.CodeInvalid, field: "items"},
			{name: "501 items", path: bw, token: WorkflowAcme, body: `{"batch_id":"b","items":[` + strings.Join(many, ",") + `]}`, status: 400, code: items.CodeInvalid, field: "items"},
			{name: "item names its own batch_id", path: bw, token: WorkflowAcme, body: `{"batch_id":"b","items":[{"key":"new-1","payload":{},"batch_id":"b"}]}`, status: 400, code: items.CodeInvalid, field: "items[0].batch_id"},
			{name: "item without payload", path: bw, token: WorkflowAcme, body: `{"batch_id":"b","items":[{"key":"new-1","payload":{}},{"key":"new-2"}]}`, status: 400, code: items.CodeInvalid, field: "items[1].payload"},
			{name: "item with negative batch_index", path: bw, token: WorkflowAcme, body: `{"batch_id":"b","items":[{"key":"new-1","payload":{},"batch_index":-1}]}`, status: 400, code: items.CodeInvalid, field: "items[0].batch_index"},
			{name: "item with bad lease", path: prep, token: WorkflowAcme, body: `{"batch_id":"b","items":[{"key":"new-1","payload":{},"lease_seconds":1}]}`, status: 400, code: items.CodeInvalid, field: "items[0].lease_seconds"},
			{name: "report without claim", path: aw, token: WorkflowAcme, body: `{"items":[` + goodReport + `,{"key":"held","outcome":"succeeded"}]}`, status: 400, code: items.CodeInvalid, field: "items[1].claim"},
			{name: "report failed without evidence", path: aw, token: WorkflowAcme, body: `{"items":[` + goodReport + `,{"key":"held","claim":"c_1","outcome":"failed"}]}`, status: 400, code: items.CodeInvalid, field: "items[1].error"},
			{name: "report with unknown field", path: aw, token: WorkflowAcme, body: `{"items":[` + goodReport + `,{"key":"held","claim":"c_1","outcome":"succeeded","extra":1}]}`, status: 400, code: items.CodeInvalid, field: "items[1].extra"},
			{name: "reports with a batch_id", path: aw, token: WorkflowAcme, body: `{"batch_id":"b","items":[` + goodReport + `]}`, status: 400, code: items.CodeInvalid, field: "batch_id"},
			{name: "no reports", path: aw, token: WorkflowAcme, body: `{"items":[]}`, status: 400, code: items.CodeInvalid, field: "items"},
			{name: "made-up cursor", path: "/v1/batches/b?cursor=xyz", token: WorkflowAcme, status: 400, code: items.CodeInvalid, field: "cursor"},
			{name: "unknown batch", path: "/v1/batches/nothing", token: WorkflowAcme, status: 404, code: items.CodeNotFound},
			{name: "another tenant's batch", path: "/v1/batches/b", token: WorkflowGlobex, status: 404, code: items.CodeNotFound},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				req := Request{Method: http.MethodGet, Path: tc.path, Token: tc.token, ContentType: tc.contentType}
				if tc.body != "" {
					req.Method, req.Body = http.MethodPost, tc.body
				}
				Expect(t, s.Do(req), tc.status, tc.code, tc.field)
			})
		}
		if it := s.Item("acme", "held"); it.State != items.StateInFlight || len(it.History) != 1 {
			t.Fatalf("a refused request changed held: %s, %d events", it.State, len(it.History))
		}
		for i := range 501 {
			if s.Item("acme", fmt.Sprintf("n-%d", i)) != nil || s.Item("acme", "new-1") != nil {
				t.Fatal("a refused request created an item")
			}
		}
	})

	t.Run("AfterWriteReportsUnknownKeysAndClaimsInline", func(t *testing.T) {
		t.Parallel()
		s := newService(t)
		first := s.BatchBeforeWrite("b", BatchItems("a-1", "a-2"))
		other := s.Post(WorkflowGlobex, "/v1/batches/before-write", map[string]any{"batch_id": "b", "items": BatchItems("g-1")})
		r := s.BatchAfterWrite(
			map[string]any{"key": "a-1", "claim": first.ItemAt(0).Str("claim"), "outcome": "succeeded", "external_id": "e-1"},
			map[string]any{"key": "missing", "claim": "c_x", "outcome": "succeeded"},
			map[string]any{"key": "g-1", "claim": other.ItemAt(0).Str("claim"), "outcome": "succeeded"},
			map[string]any{"key": "a-2", "claim": "c_000000000000000000000000", "outcome": "succeeded"},
			map[string]any{"key": "a-2", "claim": first.ItemAt(1).Str("claim"), "outcome": "failed", "error": map[string]any{"class": "timeout"}},
		)
		Expect(t, r, http.StatusOK, "", "")
		want := []string{"succeeded recorded", "not_found", "not_found", "conflict", "unknown recorded"}
		for i, w := range want {
			a := r.ItemAt(i)
			got := a.Str("state") + " " + a.Str("reason")
			if a.At("error") != nil {
				got = a.Str("error.code")
				if a.Str("error.message") == "" || a.At("state") != nil || len(a.JSON) != 2 {
					t.Fatalf("inline error %d is not {key, error}: %v", i, a.JSON)
				}
			}
			if got != w || a.Str("key") == "" {
				t.Fatalf("report %d: %q, want %q: %s", i, got, w, r.Body)
			}
		}
		if it := s.Item("globex", "g-1"); it.State != items.StateInFlight {
			t.Fatalf("another tenant's item changed: %s", it.State)
		}
	})

	t.Run("PreparedItemsAreClaimedAsNew", func(t *testing.T) {
		t.Parallel()
		s := newService(t)
		p := s.Post(WorkflowAcme, "/v1/batches/prepare", map[string]any{"batch_id": "exec-5", "items": BatchItems("p-1", "p-2", "p-3")})
		Expect(t, p, http.StatusOK, "", "")
		if p.Str("batch_id") != "exec-5" || p.Num("counts.prepared") != 3 || p.Num("counts.existing") != 0 {
			t.Fatalf("prepare: %s", p.Body)
		}
		st := s.BatchStatus("exec-5", "")
		if st.Num("counts.prepared") != 3 || st.ItemAt(0).Str("state") != "prepared" || st.ItemAt(0).Num("attempt") != 0 {
			t.Fatalf("status after prepare: %s", st.Body)
		}
		bw := s.BatchBeforeWrite("exec-5", BatchItems("p-1", "p-2", "p-3"))
		if bw.Num("counts.proceed") != 3 || bw.ItemAt(1).Str("reason") != "new" || bw.ItemAt(1).Num("attempt") != 1 {
			t.Fatalf("before-write after prepare: %s", bw.Body)
		}
		again := s.Post(OperatorAcme, "/v1/batches/prepare", map[string]any{"batch_id": "exec-6", "items": BatchItems("p-1", "p-4")})
		if again.Num("counts.prepared") != 1 || again.Num("counts.existing") != 1 {
			t.Fatalf("prepare again: %s", again.Body)
		}
	})

	// API.md, additions: "Fingerprints are keyed". The fingerprint an item shows is HMAC-SHA256(ledger
	// secret, canonical form), never the plain SHA-256 anyone could compute from a guessed payload; a single
	// before-write, a batch and a batch preparation store the same one for the same payload.
	t.Run("FingerprintsAreKeyed", func(t *testing.T) {
		t.Parallel()
		s := newService(t)
		card := map[string]any{"card": "4111111111111111"}
		Expect(t, s.BeforeWrite(map[string]any{"key": "card-1", "payload": card}), http.StatusOK, "", "")
		Expect(t, s.BatchBeforeWrite("exec-fp", []any{map[string]any{"key": "card-2", "payload": card}}), http.StatusOK, "", "")
		Expect(t, s.Post(OperatorAcme, "/v1/batches/prepare", map[string]any{"batch_id": "exec-fp-prep",
			"items": []any{map[string]any{"key": "card-3", "payload": card}}}), http.StatusOK, "", "")
		want, err := s.Ledger.Fingerprint([]byte(`{"card":"4111111111111111"}`))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(`{"card":"4111111111111111"}`))
		for _, key := range []string{"card-1", "card-2", "card-3"} {
			r := s.Get(OperatorAcme, "/v1/items/"+key)
			Expect(t, r, http.StatusOK, "", "")
			got := r.Str("fingerprint")
			if got != want || len(got) != 64 || strings.ToLower(got) != got {
				t.Errorf("%s shows fingerprint %q, want the keyed %s", key, got, want)
			}
			if got == hex.EncodeToString(sum[:]) {
				t.Errorf("%s shows the plain SHA-256 of its canonical payload", key)
			}
		}
		if r := s.BeforeWrite(map[string]any{"key": "card-1", "payload": card}); r.Str("reason") != "in_progress" {
			t.Errorf("the same payload again: %s", r.Body)
		}
		if r := s.BeforeWrite(map[string]any{"key": "card-1", "payload": map[string]any{"card": "4111111111111112"}}); r.Str("reason") != "fingerprint_mismatch" {
			t.Errorf("a changed payload: %s", r.Body)
		}
	})

	t.Run("StatusPagesPast500InIndexOrder", func(t *testing.T) {
		t.Parallel()
		s := newService(t)
		const batch = "exec/9 chunked"
		var keys []string
		for chunk := range 2 {
			list := make([]any, 0, 300)
			for i := range 300 {
				index := chunk*300 + i
				key := fmt.Sprintf("line-%d", index)
				keys = append(keys, key)
				list = append(list, BatchItem(key, map[string]any{"batch_index": index}))
			}
			Expect(t, s.BatchBeforeWrite(batch, list), http.StatusOK, "", "")
		}
		var seen []string
		cursor := ""
		for page := 0; page < 3; page++ {
			st := s.BatchStatus(batch, cursor)
			Expect(t, st, http.StatusOK, "", "")
			if st.Num("counts.in_flight") != 600 || st.Len("items") != []int{500, 100}[page] {
				t.Fatalf("page %d: %d items, counts %v", page, st.Len("items"), st.At("counts"))
			}
			for i := range st.Len("items") {
				it := st.ItemAt(i)
				if it.Num("batch_index") != float64(len(seen)) || it.Str("updated_at") == "" {
					t.Fatalf("page %d item %d: %v", page, i, it.JSON)
				}
				seen = append(seen, it.Str("key"))
			}
			if cursor = st.Str("next_cursor"); cursor == "" {
				break
			}
		}
		if fmt.Sprint(seen) != fmt.Sprint(keys) {
			t.Fatal("the pages do not list every key once, in index order")
		}
	})
}
