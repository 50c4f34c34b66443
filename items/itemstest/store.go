package itemstest

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

func marshal(t *testing.T, it *items.Item) string {
	t.Helper()
	b, err := json.Marshal(it)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// exerciseStore covers the Store methods themselves and what every store must keep.
func exerciseStore(t *testing.T, open func(t *testing.T) items.Store) {
	t.Run("GetMissingIsNotFound", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		if _, err := h.store.Get(h.ctx, tenantA, "missing"); !errors.Is(err, items.ErrNotFound) {
			t.Errorf("Store.Get of a missing key: %v, want ErrNotFound", err)
		}
		if _, err := h.ledger.Get(h.ctx, tenantA, "missing"); !errors.Is(err, items.ErrNotFound) {
			t.Errorf("Ledger.Get of a missing key: %v, want ErrNotFound", err)
		}
		called := false
		it, err := h.store.Transition(h.ctx, tenantA, "missing", func(cur *items.Item) (*items.Item, error) {
			called = true
			if cur != nil {
				t.Errorf("fn got %+v for a missing key", cur)
			}
			return nil, nil
		})
		if err != nil || it != nil || !called {
			t.Errorf("Transition writing nothing on a missing key = %v, %v (fn called %v); want nil, nil", it, err, called)
		}
		if _, err := h.store.Get(h.ctx, tenantA, "missing"); !errors.Is(err, items.ErrNotFound) {
			t.Errorf("after a transition that wrote nothing: %v", err)
		}
	})

	t.Run("TransitionReturnsTheStoredItem", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		idx := 7
		p := items.BeforeWriteParams{Tenant: tenantA, Key: "wf:obj-1:send:0", Fingerprint: h.fingerprint(payloadA), Destination: destKeyed,
			Dedupe: items.DedupeKey, Reference: "QT-1", BatchID: "exec-9:Send", BatchIndex: &idx, ExecutionID: "9", Owner: "U024BE7LH"}
		prep, err := items.NewPrepared(p, h.now())
		if err != nil {
			t.Fatal(err)
		}
		created, err := h.store.Transition(h.ctx, tenantA, p.Key, func(*items.Item) (*items.Item, error) { return prep, nil })
		if err != nil {
			t.Fatal(err)
		}
		if created.Version != 1 || marshal(t, created) != marshal(t, h.item(p.Key)) {
			t.Errorf("created version %d\n returned %s\n stored   %s", created.Version, marshal(t, created), marshal(t, h.item(p.Key)))
		}
		h.advance(time.Second)
		changed, err := h.store.Transition(h.ctx, tenantA, p.Key, func(cur *items.Item) (*items.Item, error) {
			if cur.Version != 1 || cur.Reference != "QT-1" || cur.Owner != "U024BE7LH" || *cur.BatchIndex != 7 {
				t.Errorf("fn got %+v", cur)
			}
			cur.Reference = "QT-2"
			return cur, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if changed.Version != 2 || changed.Reference != "QT-2" || marshal(t, changed) != marshal(t, h.item(p.Key)) {
			t.Errorf("changed: version %d reference %s", changed.Version, changed.Reference)
		}
		same, err := h.store.Transition(h.ctx, tenantA, p.Key, func(cur *items.Item) (*items.Item, error) {
			cur.Reference = "discarded" // fn's copy: writing nothing must leave the stored item as it was
			return nil, nil
		})
		if err != nil || same.Version != 2 || same.Reference != "QT-2" || h.item(p.Key).Reference != "QT-2" {
			t.Errorf("a transition writing nothing returned %+v, %v", same, err)
		}
		// The ledger's resolve returns the item Transition returned: the stored one.
		a := h.claim("k", payloadA, dest(destKeyed))
		r := succeeded(a.Claim, "r-1")
		r.Result = json.RawMessage(`{"id": "r-1", "n": 1.50}`)
		h.aw("k", r)
		if it := h.item("k"); !jsonEqual(t, it.Result, r.Result) {
			t.Errorf("stored result %s, want %s", it.Result, r.Result)
		}
		h.unknownAfterTimeout("u")
		resolved, _, err := h.resolve("u", items.ResolveSucceeded, "checked by hand, all good", "r-2")
		if err != nil {
			t.Fatal(err)
		}
		if marshal(t, resolved) != marshal(t, h.item("u")) {
			t.Errorf("resolve returned\n %s\nstored\n %s", marshal(t, resolved), marshal(t, h.item("u")))
		}
	})

	t.Run("TransitionErrorWritesNothing", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.claim("k", payloadA)
		before := h.item("k")
		_, err := h.store.Transition(h.ctx, tenantA, "k", func(cur *items.Item) (*items.Item, error) {
			cur.State = items.StateSucceeded
			return cur, errFnFailed
		})
		if !errors.Is(err, errFnFailed) {
			t.Errorf("Transition returned %v, want fn's error", err)
		}
		h.checkUnchanged("k", before)
		_, err = h.store.Transition(h.ctx, tenantA, "new", func(*items.Item) (*items.Item, error) { return nil, errFnFailed })
		if !errors.Is(err, errFnFailed) {
			t.Errorf("Transition returned %v, want fn's error", err)
		}
		if _, err := h.store.Get(h.ctx, tenantA, "new"); !errors.Is(err, items.ErrNotFound) {
			t.Errorf("a failed transition created an item: %v", err)
		}
	})

	t.Run("TransitionManySeesEarlierChanges", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		keys := []string{"a", "b", "a", "a"}
		out, err := h.store.TransitionMany(h.ctx, tenantA, keys, func(i int, cur *items.Item) (*items.Item, error) {
			switch i {
			case 0, 1:
				if cur != nil {
					t.Errorf("%d: fn got an item for a new key", i)
				}
				it, err := items.NewPrepared(h.params(keys[i], payloadA, reference("first")), h.now())
				return it, err
			case 2:
				if cur == nil || cur.Version != 1 || cur.Reference != "first" {
					t.Errorf("the repeat of a did not see the first change: %+v", cur)
					return nil, nil
				}
				cur.Reference = "second"
				return cur, nil
			}
			if cur == nil || cur.Version != 2 || cur.Reference != "second" {
				t.Errorf("the third a did not see the second change: %+v", cur)
			}
			return nil, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(out) != 4 {
			t.Fatalf("%d items returned for 4 keys", len(out))
		}
		for i, w := range []struct {
			key, ref string
			version  int64
		}{{"a", "first", 1}, {"b", "first", 1}, {"a", "second", 2}, {"a", "second", 2}} {
			if out[i] == nil || out[i].Key != w.key || out[i].Reference != w.ref || out[i].Version != w.version {
				t.Errorf("item %d = %+v, want %s %s version %d", i, out[i], w.key, w.ref, w.version)
			}
		}
		if it := h.item("a"); it.Version != 2 || it.Reference != "second" {
			t.Errorf("stored a: version %d reference %s", it.Version, it.Reference)
		}
	})

	t.Run("TransitionManyWritesNothingWhenFnFails", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.claim("x", payloadA)
		before := h.item("x")
		keys := []string{"new", "x", "y"}
		_, err := h.store.TransitionMany(h.ctx, tenantA, keys, func(i int, cur *items.Item) (*items.Item, error) {
			switch i {
			case 0:
				return items.NewPrepared(h.params("new", payloadA), h.now())
			case 1:
				cur.State = items.StateSucceeded
				return cur, nil
			}
			return nil, errFnFailed
		})
		if !errors.Is(err, errFnFailed) {
			t.Errorf("TransitionMany returned %v, want fn's error", err)
		}
		if _, err := h.store.Get(h.ctx, tenantA, "new"); !errors.Is(err, items.ErrNotFound) {
			t.Errorf("a failed batch created an item: %v", err)
		}
		h.checkUnchanged("x", before)
	})

	t.Run("TransitionReturningAnotherItemIsRefused", func(t *testing.T) {
		t.Parallel()
		exerciseAnotherItem(t, open)
	})

	t.Run("TransitionManyAnswersEachPlaceItsOwnItem", func(t *testing.T) {
		t.Parallel()
		exerciseOwnAnswers(t, open)
	})

	t.Run("LedgerSecretIsStable", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		s1, err := h.store.LedgerSecret(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := h.store.LedgerSecret(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(s1) < 16 || !bytes.Equal(s1, s2) {
			t.Errorf("ledger secrets %x and %x: want one stable secret of at least 16 bytes", s1, s2)
		}
		other, err := items.NewLedger(h.ctx, h.store, suiteConfig(h.clock.Now))
		if err != nil {
			t.Fatal(err)
		}
		if a, b := h.ledger.IdempotencyKey(tenantA, "k"), other.IdempotencyKey(tenantA, "k"); a != b {
			t.Errorf("two ledgers on one store derive %s and %s", a, b)
		}
		if h.ledger.IdempotencyKey(tenantA, "k") == h.ledger.IdempotencyKey(tenantB, "k") {
			t.Errorf("two tenants share an idempotency key")
		}
		if err := h.store.Ping(h.ctx); err != nil {
			t.Errorf("Ping: %v", err)
		}
	})

	t.Run("HistoryOnEveryChange", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		var claim string
		steps := []struct {
			name  string
			do    func()
			grows bool
		}{
			{"claim", func() { claim = h.claim("k", payloadA).Claim }, true},
			{"in_progress", func() { h.bw("k", payloadA) }, false},
			{"429", func() { h.aw("k", failedStatusRetryAfter(claim, 429, 5)) }, true},
			{"429 again", func() { h.aw("k", failedStatusRetryAfter(claim, 429, 5)) }, false},
			{"retry_later", func() { h.bw("k", payloadA) }, false},
			{"conflict", func() { h.bw("k", payloadB) }, false},
			{"retry", func() { h.advance(5 * time.Second); claim = h.claim("k", payloadA).Claim }, true},
			{"timeout", func() { h.aw("k", failedClass(claim, items.ClassTimeout)) }, true},
			{"awaiting_owner", func() { h.bw("k", payloadA) }, false},
			{"not_committed", func() { h.resolve("k", items.ResolveNotCommitted, "billing has no invoice 742", "") }, true},
			{"retry after resolve", func() { claim = h.claim("k", payloadA).Claim }, true},
			{"success", func() { h.aw("k", succeeded(claim, "r-1")) }, true},
			{"late failure", func() { h.aw("k", failedStatus(claim, 500)) }, true},
			{"skip succeeded", func() { h.bw("k", payloadA) }, false},
		}
		var prev *items.Item
		for _, s := range steps {
			h.advance(time.Second)
			s.do()
			cur := h.item("k")
			if prev == nil {
				prev = cur
				continue
			}
			grew := cur.Version > prev.Version
			if grew != s.grows {
				t.Errorf("%s: version %d→%d, want a change: %v", s.name, prev.Version, cur.Version, s.grows)
			}
			if grew && (len(cur.History) <= len(prev.History) || !cur.UpdatedAt.Equal(h.now())) {
				t.Errorf("%s changed the item without history (%d→%d events) or updated_at %v (now %v)", s.name,
					len(prev.History), len(cur.History), cur.UpdatedAt, h.now())
			}
			if !grew && (len(cur.History) != len(prev.History) || !cur.UpdatedAt.Equal(prev.UpdatedAt)) {
				t.Errorf("%s wrote history without a change", s.name)
			}
			// The history is append-only (short of the bound on repeated reports, HistoryBound, which these steps stay under).
			for i := range prev.History {
				if i >= len(cur.History) || !reflectEqualEvent(t, prev.History[i], cur.History[i]) {
					t.Errorf("%s rewrote history event %d", s.name, i)
					break
				}
			}
			prev = cur
		}
		if !prev.CreatedAt.Equal(epoch.Add(time.Second)) {
			t.Errorf("created_at moved to %v", prev.CreatedAt)
		}
	})

	t.Run("PayloadAndSecretsNeverStored", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		payload := `{"recipient":"zq-payload-7781@example.org","amount":"98765.4321","note":"payload-only-marker"}`
		a := h.claim("k", payload, reference("QT-1"))
		r := failedStatus(a.Claim, 401)
		r.ErrorMessage = "401 Unauthorized: Authorization: Bearer sk_live_51HqZtEXAMPLEsecretTOKEN0000000000 for jane.doe@example.com"
		h.aw("k", r)
		doc := marshal(t, h.item("k"))
		for _, secret := range []string{"zq-payload-7781", "98765.4321", "payload-only-marker", "sk_live_51HqZt", "jane.doe@example.com"} {
			if strings.Contains(doc, secret) {
				t.Errorf("the stored item contains %q: %s", secret, doc)
			}
		}
		if !strings.Contains(doc, h.fingerprint(payload)) || !strings.Contains(doc, "QT-1") {
			t.Errorf("the stored item lacks the fingerprint or the reference: %s", doc)
		}
		if it := h.item("k"); it.FailureMessage == "" || len([]rune(it.FailureMessage)) > items.MaxMessageLength {
			t.Errorf("failure message %q: want a redacted message of at most %d characters", it.FailureMessage, items.MaxMessageLength)
		}
	})

	t.Run("TenantsAreSeparate", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		b := h.as(tenantB)
		a1 := h.claim("k", payloadA)
		if _, err := h.store.Get(h.ctx, tenantB, "k"); !errors.Is(err, items.ErrNotFound) {
			t.Errorf("another tenant's key: %v, want ErrNotFound", err)
		}
		if _, err := b.ledger.Get(b.ctx, tenantB, "k"); !errors.Is(err, items.ErrNotFound) {
			t.Errorf("another tenant's key through the ledger: %v, want ErrNotFound", err)
		}
		// The same key in tenant B is B's own item: new, with its own claim and idempotency key.
		b1 := b.bw("k", payloadB)
		b.checkAnswer("k", b1, want{Decision: items.Proceed, Reason: items.ReasonNew, State: items.StateInFlight, Attempt: 1})
		if b1.IdempotencyKey == a1.IdempotencyKey || b1.Claim == a1.Claim {
			t.Errorf("tenants share an idempotency key or a claim")
		}
		b.aw("k", succeeded(b1.Claim, "r-b"))
		if _, err := h.awErr("k", succeeded(b1.Claim, "r-b")); items.ErrorCode(err) != items.CodeConflict {
			t.Errorf("tenant B's claim on tenant A's item: %v, want conflict", err)
		}
		ia, ib := h.item("k"), b.item("k")
		if ia.Tenant != tenantA || ib.Tenant != tenantB || ia.State != items.StateInFlight || ib.State != items.StateSucceeded ||
			ia.Fingerprint == ib.Fingerprint {
			t.Errorf("tenant A's item %s/%s, tenant B's %s/%s", ia.Tenant, ia.State, ib.Tenant, ib.State)
		}
		// A batch of tenant B sees only B's items.
		answers, err := b.ledger.BeforeWriteMany(b.ctx, tenantB, []items.BeforeWriteParams{b.params("k", payloadB), b.params("only-a", payloadA)})
		if err != nil {
			t.Fatal(err)
		}
		h.claim("only-a", payloadA)
		if answers[0].Reason != items.ReasonSucceeded || answers[1].Reason != items.ReasonNew {
			t.Errorf("tenant B's batch: %s, %s", answers[0].Reason, answers[1].Reason)
		}
	})

	t.Run("LedgerGetRecordsExpiredLease", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		h.claim("k", payloadA, dest(destSearchable), lease(60))
		h.advance(time.Minute)
		if it := h.item("k"); it.State != items.StateInFlight {
			t.Fatalf("Store.Get changed the item: %s", it.State)
		}
		it, err := h.ledger.Get(h.ctx, tenantA, "k")
		if err != nil {
			t.Fatal(err)
		}
		if it.State != items.StateUnknown || it.Cause != items.CauseLeaseExpired || kinds(it)[len(it.History)-1] != items.EventLeaseExpired {
			t.Errorf("Ledger.Get of an expired lease: %s cause %q history %v", it.State, it.Cause, kinds(it))
		}
		h.checkHistory("k", items.EventClaimed, items.EventLeaseExpired)
	})
}

func reflectEqualEvent(t *testing.T, a, b items.Event) bool {
	t.Helper()
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// exerciseAnotherItem: a transition's fn that returns an item of another key or another tenant than the
// one it was called for (a caller's bug) is refused: an error of kind internal (a bug, not a conflict to
// retry nor an unavailable store), and nothing written, neither the transition's item nor the one fn
// named; in a TransitionMany, nothing of the batch, however many good items it holds. The next transition
// of the key is handed the item as stored (a store that keeps what it wrote must not keep fn's item).
func exerciseAnotherItem(t *testing.T, open func(t *testing.T) items.Store) {
	h := newHarness(t, open)
	b := h.as(tenantB)
	h.claim("k", payloadA, reference("A-k"))
	h.claim("other", payloadA, reference("A-other"))
	b.claim("k", payloadB, reference("B-k"))
	type stored struct{ tenant, key string }
	kept := []stored{{tenantA, "k"}, {tenantA, "other"}, {tenantB, "k"}}
	snapshot := map[stored]string{}
	for _, s := range kept {
		snapshot[s] = marshal(t, h.as(s.tenant).item(s.key))
	}
	absent := []stored{{tenantA, "new"}, {tenantA, "n1"}, {tenantA, "n2"}, {tenantA, "other-new"}, {tenantB, "new"}, {tenantB, "other"}}
	check := func(name string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: no error", name)
		} else if code := items.ErrorCode(err); code != items.CodeInternal {
			t.Errorf("%s: %v, of kind %s; want %s (a bug of the caller's fn)", name, err, code, items.CodeInternal)
		}
		for _, s := range kept {
			if got := marshal(t, h.as(s.tenant).item(s.key)); got != snapshot[s] {
				t.Errorf("%s: %s/%s was written:\n was %s\n now %s", name, s.tenant, s.key, snapshot[s], got)
			}
			// And the next transition of that key is handed the stored item.
			if _, err := h.store.Transition(h.ctx, s.tenant, s.key, func(cur *items.Item) (*items.Item, error) {
				if got := marshal(t, cur); got != snapshot[s] {
					t.Errorf("%s: the next transition of %s/%s is handed\n %s\nthe store holds\n %s", name, s.tenant, s.key, got, snapshot[s])
				}
				return nil, nil
			}); err != nil {
				t.Errorf("%s: the next transition of %s/%s: %v", name, s.tenant, s.key, err)
			}
		}
		for _, s := range absent {
			if _, err := h.store.Get(h.ctx, s.tenant, s.key); !errors.Is(err, items.ErrNotFound) {
				t.Errorf("%s: %s/%s was created: %v", name, s.tenant, s.key, err)
			}
		}
	}
	// prepared is a new item of tenant and key, as a claim makes it.
	prepared := func(tenant, key string) *items.Item {
		it, err := items.NewPrepared(h.as(tenant).params(key, payloadA), h.now())
		if err != nil {
			t.Fatal(err)
		}
		return it
	}
	h.advance(time.Second)

	for _, c := range []struct {
		name string
		key  string // the transition's, of tenant A
		fn   items.TransitionFunc
	}{
		{"an existing item, returned as another key's", "k", func(cur *items.Item) (*items.Item, error) {
			cur.Key, cur.Reference = "other", "changed"
			return cur, nil
		}},
		{"an existing item, returned as another tenant's", "k", func(cur *items.Item) (*items.Item, error) {
			cur.Tenant, cur.Reference = tenantB, "changed"
			return cur, nil
		}},
		{"another key's item, as read", "k", func(*items.Item) (*items.Item, error) {
			it := h.item("other")
			it.Reference = "changed"
			return it, nil
		}},
		{"another tenant's item, as read", "k", func(*items.Item) (*items.Item, error) {
			it := b.item("k")
			it.Reference = "changed"
			return it, nil
		}},
		{"a new key, returned as another new key", "new", func(*items.Item) (*items.Item, error) { return prepared(tenantA, "other-new"), nil }},
		{"a new key, returned as another tenant's", "new", func(*items.Item) (*items.Item, error) { return prepared(tenantB, "new"), nil }},
		{"a new key, returned as an existing key", "new", func(*items.Item) (*items.Item, error) { return prepared(tenantA, "other"), nil }},
	} {
		_, err := h.store.Transition(h.ctx, tenantA, c.key, c.fn)
		check("Transition: "+c.name, err)
	}

	// TransitionMany: one bad item among good ones (new items and a change) writes nothing of the batch.
	good := func(i int, cur *items.Item, keys []string) *items.Item {
		if cur == nil {
			return prepared(tenantA, keys[i])
		}
		cur.Reference = "changed"
		return cur
	}
	for _, c := range []struct {
		name string
		keys []string
		bad  int
		// wrong makes the bad item of the transition's.
		wrong func(cur *items.Item, key string) *items.Item
	}{
		{"another tenant's, in the middle", []string{"n1", "k", "n2"}, 1, func(cur *items.Item, _ string) *items.Item {
			cur.Tenant, cur.Reference = tenantB, "changed"
			return cur
		}},
		{"another key's, last", []string{"n1", "k", "n2", "other"}, 3, func(cur *items.Item, _ string) *items.Item {
			cur.Key, cur.Reference = "k", "changed"
			return cur
		}},
		{"a new key as another, first", []string{"new", "n1", "k"}, 0, func(*items.Item, string) *items.Item { return prepared(tenantA, "other-new") }},
		{"another key's item, as read, after a change of that key", []string{"n1", "other", "k"}, 2, func(*items.Item, string) *items.Item {
			it := h.item("other")
			it.Reference = "changed"
			return it
		}},
	} {
		_, err := h.store.TransitionMany(h.ctx, tenantA, c.keys, func(i int, cur *items.Item) (*items.Item, error) {
			if i == c.bad {
				return c.wrong(cur, c.keys[i]), nil
			}
			return good(i, cur, c.keys), nil
		})
		check("TransitionMany: "+c.name, err)
	}
}
