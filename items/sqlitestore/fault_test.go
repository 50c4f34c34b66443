package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
)

// corrupt overwrites the stored document of tenant's key with text that is not an item, as a torn write
// or a hand edit would leave it (while the store is open: see writeOutside).
func corrupt(t *testing.T, s *Store, tenant, key string) {
	t.Helper()
	res, err := s.writeOutside(`UPDATE items SET doc = '{"tenant": "acme", "key": ' WHERE tenant = ? AND key = ?`, tenant, key)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("corrupted %d rows, want 1", n)
	}
}

// TestOneTransitionsFaultStaysWithIt decides one group holding, beside good transitions, one that panics
// halfway through its keys, one whose new state cannot be encoded, and one about an item stored corrupt.
// Each of the three gets its own error; the good ones are all committed, and the one after the
// unencodable state sees the item as the transitions before it left it.
func TestOneTransitionsFaultStaysWithIt(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	// The groups are committed here, not by the committer, so that they hold exactly these transitions.
	setup := newTransition("acme", []string{"k", "bad"}, claimFn("acme", []string{"k", "bad"}))
	if s.commitGroup([]*transition{setup}); setup.err != nil {
		t.Fatal(setup.err)
	}
	corrupt(t, s, "acme", "bad")

	a := newTransition("acme", []string{"k", "a"}, claimFn("acme", []string{"k", "a"}))
	panics := newTransition("acme", []string{"k", "p"}, func(i int, cur *items.Item) (*items.Item, error) {
		if i == 1 {
			panic("a bug in one decision")
		}
		return claimFn("acme", []string{"k"})(i, cur)
	})
	unencodable := newTransition("acme", []string{"k"}, func(i int, cur *items.Item) (*items.Item, error) {
		cur.Attempt += 10
		cur.UpdatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) // RFC 3339 has no year 10000
		return cur, nil
	})
	reader := newTransition("acme", []string{"bad"}, claimFn("acme", []string{"bad"}))
	mixed := newTransition("acme", []string{"m", "bad"}, claimFn("acme", []string{"m", "bad"}))
	c := newTransition("acme", []string{"k", "c"}, claimFn("acme", []string{"k", "c"}))
	other := newTransition("globex", []string{"k"}, claimFn("globex", []string{"k"}))
	before := s.commits.Load()
	s.commitGroupRecovering([]*transition{a, panics, unencodable, reader, mixed, c, other})

	for name, tr := range map[string]*transition{"a": a, "c": c, "other tenant": other} {
		if tr.err != nil {
			t.Errorf("%s: %v; want its own answer", name, tr.err)
		}
	}
	for name, want := range map[*transition]string{panics: "panicked", unencodable: "encode item", reader: "corrupt item document", mixed: "corrupt item document"} {
		if name.err == nil || !strings.Contains(name.err.Error(), want) || name.out != nil {
			t.Errorf("%s: %v, %v; want an error about %q and no items", name.keys, name.out, name.err, want)
		}
		if errors.Is(name.err, items.ErrUnavailable) {
			t.Errorf("%s: %v is ErrUnavailable; a fault of the item is not the store's", name.keys, name.err)
		}
	}
	if c.err == nil && c.out[0].Attempt != 3 {
		t.Errorf("c saw attempt %d of k; want 3 (a's claim, not the panicking or unencodable one's)", c.out[0].Attempt)
	}
	if n := s.commits.Load() - before; n != 1 {
		t.Errorf("%d commits; want 1", n)
	}
	want := map[string]int{"acme/k": 3, "acme/a": 1, "acme/c": 1, "globex/k": 1}
	for id, attempt := range want {
		tenant, key, _ := strings.Cut(id, "/")
		if it, err := s.Get(ctx, tenant, key); err != nil || it.Attempt != attempt {
			t.Errorf("%s: %+v, %v; want attempt %d", id, it, err, attempt)
		}
	}
	for _, key := range []string{"p", "m"} {
		if _, err := s.Get(ctx, "acme", key); !errors.Is(err, items.ErrNotFound) {
			t.Errorf("%s was written by a failed transition: %v", key, err)
		}
	}
	// The store goes on: the next transitions commit.
	if _, err := s.TransitionMany(ctx, "acme", []string{"k"}, claimFn("acme", []string{"k"})); err != nil {
		t.Fatalf("after the faults: %v", err)
	}
}

// TestCorruptItemFailsOnlyItsCaller: an item's stored document is corrupted underneath the service; while
// the committer is held, 32 callers claim other keys and one asks about the corrupt item, so that they
// queue for the same group commits. The 32 are answered 200 proceed and recorded; the corrupt item's
// caller gets 500 internal error, with nothing of the cause in the body.
func TestCorruptItemFailsOnlyItsCaller(t *testing.T) {
	ctx := context.Background()
	store := openTemp(t)
	svc := handlerstest.NewService(t, store, handlerstest.ServiceConfig{})
	svc.Claim("bad", nil)
	corrupt(t, store, "acme", "bad")

	// Hold the committer inside a transition until every caller has sent its request.
	entered, hold := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		_, err := store.TransitionMany(ctx, "acme", []string{"hold"}, func(int, *items.Item) (*items.Item, error) {
			close(entered)
			<-hold
			return nil, nil
		})
		held <- err
	}()
	<-entered
	const callers = 32
	answers := make([]handlerstest.Response, callers+1)
	var wg sync.WaitGroup
	for c := range callers + 1 {
		wg.Go(func() {
			key := fmt.Sprintf("k-%d", c)
			if c == callers {
				key = "bad"
			}
			answers[c] = svc.BeforeWrite(map[string]any{"key": key, "payload": map[string]any{"invoice": key}})
		})
	}
	time.Sleep(300 * time.Millisecond) // the callers reach the committer's queue
	before := store.commits.Load()
	close(hold)
	wg.Wait()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d commits for %d callers", store.commits.Load()-before, callers+1)
	for c := range callers {
		r := answers[c]
		if r.Status != http.StatusOK || r.Str("decision") != "proceed" {
			t.Errorf("caller %d: %d %s; want 200 proceed", c, r.Status, r.Body)
			continue
		}
		if it := svc.Item("acme", fmt.Sprintf("k-%d", c)); it == nil || it.Claim != r.Str("claim") {
			t.Errorf("caller %d: stored %+v; want its claim %s", c, it, r.Str("claim"))
		}
	}
	bad := answers[callers]
	handlerstest.Expect(t, bad, http.StatusInternalServerError, items.CodeInternal, "")
	if strings.Contains(string(bad.Body), "corrupt") || strings.Contains(string(bad.Body), "sqlite") {
		t.Errorf("the 500 tells its cause: %s", bad.Body)
	}
}

// TestListSkipsACorruptItem lists a ledger holding one corrupt item: the list names it in unreadable
// instead of failing, keeps every other item, and its pages go on past it, also when it ends a page.
func TestListSkipsACorruptItem(t *testing.T) {
	ctx := context.Background()
	store := openTemp(t)
	svc := handlerstest.NewService(t, store, handlerstest.ServiceConfig{Configure: func(c *handlers.Config) { c.Operators = store }})
	for _, k := range []string{"k-1", "k-2", "k-3", "k-4"} {
		svc.Claim(k, nil)
	}
	corrupt(t, store, "acme", "k-3")
	var keys, unreadable []string
	pages := 0
	for p := (items.ListParams{Tenant: "acme", Limit: 1}); ; pages++ {
		page, err := store.ListItems(ctx, p)
		if err != nil {
			t.Fatalf("page %d: %v", pages+1, err)
		}
		keys, unreadable = append(keys, keysOf(page.Items)...), append(unreadable, page.Unreadable...)
		if page.NextCursor == "" {
			break
		}
		p.Cursor = page.NextCursor
	}
	if fmt.Sprint(keys) != "[k-4 k-2 k-1]" || fmt.Sprint(unreadable) != "[k-3]" || pages != 3 {
		t.Errorf("pages of 1 list %v and unreadable %v in %d pages, want [k-4 k-2 k-1], [k-3], 4 pages", keys, unreadable, pages+1)
	}
	page, err := store.ListItems(ctx, items.ListParams{Tenant: "acme"})
	if err != nil || fmt.Sprint(keysOf(page.Items)) != "[k-4 k-2 k-1]" || fmt.Sprint(page.Unreadable) != "[k-3]" || page.NextCursor != "" {
		t.Errorf("one page: %v unreadable %v next %q, %v", keysOf(page.Items), page.Unreadable, page.NextCursor, err)
	}
	r := svc.Get(handlerstest.OperatorAcme, "/v1/items")
	handlerstest.Expect(t, r, http.StatusOK, "", "")
	if got := fmt.Sprint(r.At("unreadable")); got != "[k-3]" {
		t.Errorf("GET /v1/items says unreadable %s, want [k-3]", got)
	}
}

func keysOf(its []*items.Item) []string {
	out := make([]string, len(its))
	for i, it := range its {
		out[i] = it.Key
	}
	return out
}

// writeOutside changes items with SQL of its own, outside the committer, while the store is open, as a
// hand edit or a torn write would, and drops the committer's cache as every write of items outside the
// committer must (cache.go): the next transition of those items then reads what the database holds. (A
// hand edit of a running ledger is not supported; the tests do it to see what a corrupt row does.)
func (s *Store) writeOutside(query string, args ...any) (sql.Result, error) {
	res, err := s.w.ExecContext(context.Background(), query, args...)
	s.cache.DropAll()
	return res, err
}
