package mongostore_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/mongostore"
	"github.com/replaysafe/companion/items/mongostore/mongotest"
)

// TestOperatorsConformance runs the operator part of the suite (lists, sweep queries, the alert outbox,
// stats) on a fresh database per subtest: on the in-process FerretDB, or on the real MongoDB named by
// COMPANION_TEST_MONGODB_URI.
func TestOperatorsConformance(t *testing.T) {
	opts := itemstest.Options{}
	if realURI() == "" {
		opts.SkipConcurrency = "needs a real MongoDB (set " + mongotest.RealURIEnv + "): FerretDB v1, the test server here, " +
			"does not apply concurrent conditional updates atomically"
	}
	itemstest.ExerciseOperators(t, func(t *testing.T) itemstest.OperatorStore { return newEnv(t).open() }, opts)
}

// TestListSkipsACorruptItem lists a ledger holding one document that no longer decodes into an item:
// the list names it in unreadable instead of failing, keeps every other item, and its pages go on past
// it, also when it ends a page (as on SQLite: sqlitestore's TestListSkipsACorruptItem).
func TestListSkipsACorruptItem(t *testing.T) {
	e := newEnv(t)
	store := e.open()
	for _, k := range []string{"k-1", "k-2", "k-3", "k-4"} {
		create(t, store, k)
		time.Sleep(2 * time.Millisecond) // MongoDB keeps milliseconds: one change per millisecond keeps the order
	}
	if _, err := e.collection(mongostore.ItemsCollection).UpdateOne(t.Context(),
		bson.D{{Key: "tenant", Value: "acme"}, {Key: "key", Value: "k-3"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "attempts", Value: "not a list of attempts"}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get(t.Context(), "acme", "k-3"); err == nil {
		t.Fatal("the corrupted item still reads: the test corrupts nothing")
	}
	var keys, unreadable []string
	pages := 0
	for p := (items.ListParams{Tenant: "acme", Limit: 1}); ; pages++ {
		page, err := store.ListItems(t.Context(), p)
		if err != nil {
			t.Fatalf("page %d: %v", pages+1, err)
		}
		for _, it := range page.Items {
			keys = append(keys, it.Key)
		}
		unreadable = append(unreadable, page.Unreadable...)
		if page.NextCursor == "" {
			break
		}
		p.Cursor = page.NextCursor
	}
	if fmt.Sprint(keys) != "[k-4 k-2 k-1]" || fmt.Sprint(unreadable) != "[k-3]" || pages != 3 {
		t.Errorf("pages of 1 list %v and unreadable %v in %d pages, want [k-4 k-2 k-1], [k-3], 4 pages", keys, unreadable, pages+1)
	}
	page, err := store.ListItems(t.Context(), items.ListParams{Tenant: "acme"})
	if err != nil || len(page.Items) != 3 || fmt.Sprint(page.Unreadable) != "[k-3]" || page.NextCursor != "" {
		t.Errorf("one page: %d items, unreadable %v, next %q, %v", len(page.Items), page.Unreadable, page.NextCursor, err)
	}
}

// TestListByNeedsPersonSinceSkipsACorruptItem: in the queue's order (items.ListByNeedsPersonSince) a
// corrupt item is named in unreadable and keeps its place, whether it has a needs_person_since (null
// here) or not, and pages of one go on past it (as on SQLite).
func TestListByNeedsPersonSinceSkipsACorruptItem(t *testing.T) {
	e := newEnv(t)
	store := e.open()
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	at := func(h int) *time.Time { v := t0.Add(time.Duration(h) * time.Hour); return &v }
	for key, since := range map[string]*time.Time{"k-1": at(2), "k-2": at(1), "k-3": nil, "k-4": at(3)} {
		if _, err := store.Transition(t.Context(), "acme", key, func(*items.Item) (*items.Item, error) {
			return &items.Item{Tenant: "acme", Key: key, State: items.StateUnknown, Fingerprint: fp1, Attempt: 1,
				NeedsPerson: true, NeedsPersonCause: items.CauseNoDedupe, NeedsPersonSince: since, CreatedAt: t0, UpdatedAt: *at(4),
				Attempts: []items.Attempt{}, History: []items.Event{{At: *at(4), Kind: items.EventNeedsPerson}}}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{"k-3", "k-1"} { // the first (no since) and the third
		if _, err := e.collection(mongostore.ItemsCollection).UpdateOne(t.Context(),
			bson.D{{Key: "tenant", Value: "acme"}, {Key: "key", Value: key}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "attempts", Value: "not a list of attempts"}}}}); err != nil {
			t.Fatal(err)
		}
	}
	yes := true
	var keys, unreadable []string
	pages := 0
	for p := (items.ListParams{Tenant: "acme", NeedsPerson: &yes, Order: items.ListByNeedsPersonSince, Limit: 1}); ; {
		page, err := store.ListItems(t.Context(), p)
		pages++
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		for _, it := range page.Items {
			keys = append(keys, it.Key)
		}
		unreadable = append(unreadable, page.Unreadable...)
		if page.NextCursor == "" || pages > 10 {
			break
		}
		p.Cursor = page.NextCursor
	}
	if fmt.Sprint(keys) != "[k-2 k-4]" || fmt.Sprint(unreadable) != "[k-3 k-1]" || pages != 4 {
		t.Errorf("pages of 1 list %v and unreadable %v in %d pages, want [k-2 k-4], [k-3 k-1], 4 pages", keys, unreadable, pages)
	}
}

// TestOpenRetiresNeedsPersonTenant: a ledger of an earlier build has the index needs_person_tenant
// (needs_person, tenant), the start of needs_person_tenant_since; opening it drops the old one.
func TestOpenRetiresNeedsPersonTenant(t *testing.T) {
	e := newEnv(t)
	coll := e.collection(mongostore.ItemsCollection)
	if _, err := coll.Indexes().CreateOne(t.Context(), mongo.IndexModel{Keys: bson.D{{Key: "needs_person", Value: 1}, {Key: "tenant", Value: 1}},
		Options: options.Index().SetName("needs_person_tenant")}); err != nil {
		t.Fatal(err)
	}
	e.open()
	cur, err := coll.Indexes().List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var specs []struct {
		Name string `bson:"name"`
	}
	if err := cur.All(t.Context(), &specs); err != nil {
		t.Fatal(err)
	}
	names := fmt.Sprint(specs)
	if strings.Contains(names, "{needs_person_tenant}") || !strings.Contains(names, "{needs_person_tenant_since}") {
		t.Errorf("indexes after open: %s; want needs_person_tenant_since and not needs_person_tenant", names)
	}
}

// TestOpenRetiresTenantExecutionChanged: a ledger of an earlier build has tenant_execution_changed
// (tenant, execution_id, updated_at, key), which every transition rewrote; opening it drops that index,
// once and saying so, keeps tenant_execution (tenant, execution_id), and the list by execution still
// answers newest change first.
func TestOpenRetiresTenantExecutionChanged(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	coll := e.collection(mongostore.ItemsCollection)
	if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "tenant", Value: 1}, {Key: "execution_id", Value: 1},
		{Key: "updated_at", Value: -1}, {Key: "key", Value: -1}}, Options: options.Index().SetName("tenant_execution_changed")}); err != nil {
		t.Fatal(err)
	}
	indexes := func() map[string]string {
		t.Helper()
		cur, err := coll.Indexes().List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var specs []struct {
			Name string `bson:"name"`
			Key  bson.D `bson:"key"`
		}
		if err := cur.All(ctx, &specs); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, s := range specs {
			var fields []string
			for _, f := range s.Key {
				fields = append(fields, f.Key)
			}
			out[s.Name] = strings.Join(fields, ",")
		}
		return out
	}
	open := func() (*mongostore.Store, string) {
		t.Helper()
		var log bytes.Buffer
		s, err := mongostore.Open(ctx, e.uri, e.db, mongostore.WithTimeout(mongotest.StoreTimeout()),
			mongostore.WithLogger(slog.New(slog.NewJSONHandler(&log, nil))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s, log.String()
	}

	s, log := open()
	if got := indexes(); got["tenant_execution_changed"] != "" || got["tenant_execution"] != "tenant,execution_id" {
		t.Errorf("indexes after the first start: %v; want tenant_execution (tenant,execution_id) and not tenant_execution_changed", got)
	}
	if !strings.Contains(log, `"msg":"dropped an index of an earlier build`) || !strings.Contains(log, `"index":"tenant_execution_changed"`) ||
		!strings.Contains(log, "without updated_at") {
		t.Errorf("the first start does not say it dropped tenant_execution_changed:\n%s", log)
	}
	if _, log := open(); strings.Contains(log, "dropped") {
		t.Errorf("the second start logged a drop again:\n%s", log)
	}

	now := time.Date(2026, 12, 1, 18, 0, 0, 0, time.UTC)
	l, err := items.NewLedger(ctx, s, items.Config{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	fp, err := items.Fingerprint([]byte(`{"invoice":"742"}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "c", "b"} {
		now = now.Add(time.Second)
		if _, err := l.BeforeWrite(ctx, items.BeforeWriteParams{Tenant: "acme", Key: k, Fingerprint: fp, ExecutionID: "run-1"}); err != nil {
			t.Fatal(err)
		}
	}
	page, err := s.ListItems(ctx, items.ListParams{Tenant: "acme", ExecutionID: "run-1"})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, it := range page.Items {
		keys = append(keys, it.Key)
	}
	if want := []string{"b", "c", "a"}; !slices.Equal(keys, want) {
		t.Errorf("run-1 lists %v, want %v (newest change first)", keys, want)
	}
}
