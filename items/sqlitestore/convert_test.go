package sqlitestore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// oldItemsSchema is the items table of the layout before the compact one (main of 2026-12-01), as that
// build created it, copied here: the conversion is tested against what it converts.
const oldItemsSchema = `
CREATE TABLE IF NOT EXISTS items (
	tenant             TEXT NOT NULL,
	key                TEXT NOT NULL,
	version            INTEGER NOT NULL,
	state              TEXT NOT NULL,
	destination        TEXT NOT NULL,
	workflow           TEXT NOT NULL DEFAULT '',
	owner              TEXT NOT NULL DEFAULT '',
	reference          TEXT NOT NULL DEFAULT '',
	batch_id           TEXT NOT NULL DEFAULT '',
	batch_index        INTEGER,
	execution_id       TEXT NOT NULL DEFAULT '',
	needs_person       INTEGER NOT NULL DEFAULT 0,
	lease_expires_at   INTEGER,
	created_at         INTEGER NOT NULL,
	updated_at         INTEGER NOT NULL,
	attempt            INTEGER NOT NULL DEFAULT 0,
	same_key_recovered INTEGER NOT NULL DEFAULT 0,
	resolutions        INTEGER NOT NULL DEFAULT 0,
	duplicate_effect   INTEGER NOT NULL DEFAULT 0,
	entered_unknown    INTEGER NOT NULL DEFAULT 0,
	needs_person_since INTEGER,
	sweep_candidate    INTEGER NOT NULL DEFAULT 0,
	alert_pending      INTEGER NOT NULL DEFAULT 0,
	doc                TEXT NOT NULL,
	PRIMARY KEY (tenant, key)
);
CREATE INDEX IF NOT EXISTS items_lease ON items (lease_expires_at) WHERE state = 'in_flight';
CREATE INDEX IF NOT EXISTS items_changed ON items (tenant, updated_at, key);
CREATE INDEX IF NOT EXISTS items_state_changed ON items (tenant, state, updated_at, key);
CREATE INDEX IF NOT EXISTS items_needs_person_changed ON items (tenant, updated_at, key) WHERE needs_person = 1;
CREATE INDEX IF NOT EXISTS items_reference ON items (tenant, reference, updated_at, key);
CREATE INDEX IF NOT EXISTS items_batch ON items (tenant, batch_id, batch_index, key);
CREATE INDEX IF NOT EXISTS items_sweep ON items (tenant, key) WHERE sweep_candidate = 1;
CREATE INDEX IF NOT EXISTS items_alert_pending ON items (tenant, key) WHERE alert_pending = 1;
CREATE INDEX IF NOT EXISTS items_execution ON items (tenant, execution_id, updated_at, key);
`

// writeOldLedger writes its into a new ledger of the old layout in dir, as that build stored them: the
// columns, and the item's JSON as a TEXT document; broken names keys (of tenant acme) stored with a
// document that is not an item. Then it runs the statements of then on the file.
func writeOldLedger(t *testing.T, dir string, its []*items.Item, broken []string, then ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, FileName)+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(oldItemsSchema); err != nil {
		t.Fatal(err)
	}
	insert := `INSERT INTO items (` + strings.Join(itemColumns, ", ") + `) VALUES (?` + strings.Repeat(", ?", len(itemColumns)-1) + `)`
	docAt := len(itemColumns) - 3
	for _, it := range its {
		doc, err := it.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		args := appendColumns(nil, it, nil)
		args[docAt], args[3] = string(doc), it.Workflow
		if _, err := db.Exec(insert, args...); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range broken {
		it := &items.Item{Tenant: "acme", Key: k, State: items.StateSucceeded, Destination: "billing"}
		args := appendColumns(nil, it, nil)
		args[docAt] = `{"tenant": "acme", "key": `
		if _, err := db.Exec(insert, args...); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range then {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// ledgerItems makes items of every state through the ledger (on a store of this layout), and random
// ones of every field, and returns them as stored.
func ledgerItems(t *testing.T) []*items.Item {
	t.Helper()
	ctx := context.Background()
	s := openTemp(t)
	now := time.Date(2026, 12, 1, 8, 0, 0, 123456789, time.UTC)
	l, err := items.NewLedger(ctx, s, items.Config{Now: func() time.Time { return now },
		Destinations: map[string]items.Destination{"billing": {Dedupe: items.DedupeKey}, "crm": {Dedupe: items.DedupeNone}}})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(key, dest string) items.Answer {
		t.Helper()
		index := len(key)
		a, err := l.BeforeWrite(ctx, items.BeforeWriteParams{Tenant: "acme", Key: key, Canonical: []byte(`{"n":"` + key + `"}`),
			Destination: dest, Reference: "REF-" + key, BatchID: "batch-7", BatchIndex: &index, ExecutionID: "4821", Owner: "U123"})
		if err != nil || a.Decision != items.Proceed {
			t.Fatalf("claim %s: %+v %v", key, a, err)
		}
		return a
	}
	report := func(a items.Answer, p items.AfterWriteParams) {
		t.Helper()
		p.Tenant, p.Key, p.Claim = "acme", a.Key, a.Claim
		if _, err := l.AfterWrite(ctx, p); err != nil {
			t.Fatalf("report %s: %v", a.Key, err)
		}
	}
	succeeded := items.AfterWriteParams{Evidence: items.Evidence{Outcome: items.OutcomeSucceeded}, ExternalID: "in_1", Result: []byte(`{"id":"in_1","total":1250}`)}
	claim("wf:inv-1:send:0", "billing")
	report(claim("wf:inv-2:send:0", "billing"), succeeded)
	report(claim("wf:inv-3:send:0", "billing"), items.AfterWriteParams{Evidence: items.Evidence{Outcome: items.OutcomeFailed, HTTPStatus: 503}, ErrorMessage: "Service Unavailable"})
	report(claim("wf:inv-4:send:0", "billing"), items.AfterWriteParams{Evidence: items.Evidence{Outcome: items.OutcomeFailed, HTTPStatus: 400}, ErrorMessage: "bad request"})
	report(claim("wf:inv-5:send:0", "crm"), items.AfterWriteParams{Evidence: items.Evidence{Outcome: items.OutcomeUnknown, Class: items.ClassTimeout}})
	report(claim("inv-6", "billing"), items.AfterWriteParams{Evidence: items.Evidence{Outcome: items.OutcomeUnknown, Class: items.ClassTimeout}})
	if _, _, err := l.Resolve(ctx, items.ResolveParams{Tenant: "acme", Key: "inv-6", Outcome: items.ResolveSucceeded,
		Evidence: "found it in the billing tool", ExternalID: "in_6", By: "maria"}); err != nil {
		t.Fatal(err)
	}
	dup := claim("wf:inv-7:send:0", "billing")
	report(dup, succeeded)
	report(dup, items.AfterWriteParams{Evidence: items.Evidence{Outcome: items.OutcomeSucceeded}, ExternalID: "in_other"})
	retried := claim("wf:inv-8:send:0", "billing")
	report(retried, items.AfterWriteParams{Evidence: items.Evidence{Outcome: items.OutcomeFailed, HTTPStatus: 503}})
	claim("wf:inv-9:send:0", "billing")
	now = now.Add(time.Hour)
	if _, err := l.ExpireLease(ctx, "acme", "wf:inv-9:send:0"); err != nil {
		t.Fatal(err)
	}
	report(claim("wf:inv-8:send:0", "billing"), succeeded)
	fp, err := l.Fingerprint([]byte(`{"n":1}`))
	if err != nil {
		t.Fatal(err)
	}
	prepared, err := items.NewPrepared(items.BeforeWriteParams{Tenant: "acme", Key: "wf:inv-10:send:0", Fingerprint: fp, BatchID: "batch-8"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition(ctx, "acme", prepared.Key, func(*items.Item) (*items.Item, error) { return prepared, nil }); err != nil {
		t.Fatal(err)
	}
	var out []*items.Item
	for i := 1; i <= 10; i++ {
		key := fmt.Sprintf("wf:inv-%d:send:0", i)
		if i == 6 {
			key = "inv-6"
		}
		it, err := s.Get(ctx, "acme", key)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		out = append(out, it)
	}
	states := map[items.State]bool{}
	for _, it := range out {
		states[it.State] = true
	}
	if len(states) != len(items.States) {
		t.Fatalf("the items are in states %v, want all of %v", states, items.States)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 300; {
		it := storedSample(r)
		it.Tenant, it.Key = "random", fmt.Sprintf("r-%03d", i)
		it.Attempt = r.IntN(5) // the kept counts add attempts up
		if _, err := it.AppendJSON(nil); err != nil {
			continue
		}
		out = append(out, it)
		i++
	}
	return out
}

// TestConvertKeepsEveryItem writes a ledger in the old layout, items of every state and random items of
// every field, and one item whose document is broken, and opens it: every item reads back as the same
// JSON (what GET /v1/items/{key} shows), the broken one is still there and listed as unreadable, the
// counts are the items', and the conversion is done once.
func TestConvertKeepsEveryItem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	want := ledgerItems(t)
	writeOldLedger(t, dir, want, []string{"broken"})
	var log bytes.Buffer
	s, err := Open(ctx, dir, WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkConverted(t, s, want)
	var free, vacuum, pending int
	if err := s.r.QueryRowContext(ctx, `SELECT (SELECT freelist_count FROM pragma_freelist_count), (SELECT auto_vacuum FROM pragma_auto_vacuum),
		(SELECT count(*) FROM meta WHERE name = ?)`, spacePending).Scan(&free, &vacuum, &pending); err != nil {
		t.Fatal(err)
	}
	if free != 0 || vacuum != 2 || pending != 0 {
		t.Errorf("after the conversion the file has %d free pages, auto_vacuum %d, %d marks of space to give back; want 0, 2 (incremental), 0",
			free, vacuum, pending)
	}
	if !strings.Contains(log.String(), "converted the ledger to the compact layout") {
		t.Errorf("the log does not say the ledger was converted:\n%s", log.String())
	}
	if _, err := s.Get(ctx, "acme", "broken"); err == nil || errors.Is(err, items.ErrNotFound) {
		t.Errorf("the broken item reads as %v, want a corrupt document", err)
	}
	page, err := s.ListItems(ctx, items.ListParams{Tenant: "acme", Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Unreadable) != 1 || page.Unreadable[0] != "broken" || len(page.Items) != 10 {
		t.Errorf("the list holds %d items and unreadable %v, want 10 and [broken]", len(page.Items), page.Unreadable)
	}
	st, err := s.Stats(ctx, "acme", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st.Items != 11 {
		t.Errorf("stats count %d items of acme, want 11", st.Items)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	log.Reset()
	s, err = Open(ctx, dir, WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if log.Len() != 0 {
		t.Errorf("the second start logs %s, want nothing", log.String())
	}
	checkConverted(t, s, want)
}

// checkConverted checks that s holds want, in the compact layout, each reading back as the same JSON as
// the old build answered.
func checkConverted(t *testing.T, s *Store, want []*items.Item) {
	t.Helper()
	ctx := context.Background()
	if old, err := s.oldLayout(ctx); err != nil || old {
		t.Fatalf("the ledger is still of the old layout (%v)", err)
	}
	for _, w := range want {
		got, err := s.Get(ctx, w.Tenant, w.Key)
		if err != nil {
			t.Fatalf("%s/%s: %v", w.Tenant, w.Key, err)
		}
		gotJSON, err := got.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		// What the old build answered: its document, read back.
		doc, _ := w.AppendJSON(nil)
		old, err := decodeJSON(doc)
		if err != nil {
			t.Fatal(err)
		}
		wantJSON, _ := old.AppendJSON(nil)
		if !bytes.Equal(gotJSON, wantJSON) {
			t.Fatalf("%s/%s reads back differently\ngot:  %s\nwant: %s", w.Tenant, w.Key, gotJSON, wantJSON)
		}
	}
	var n, json int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(substr(doc, 1, 1) = '{'), 0) FROM items`).Scan(&n, &json); err != nil {
		t.Fatal(err)
	}
	if n != len(want)+1 || json != 1 {
		t.Fatalf("the ledger holds %d items, %d of them JSON; want %d, and only the broken one", n, json, len(want)+1)
	}
}

// TestConvertResumesAfterACrash converts two batches of an old ledger and stops, as a crash would, then
// opens it: the conversion goes on from where it stopped, and every item is there once, as it was.
func TestConvertResumesAfterACrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	want := ledgerItems(t)
	writeOldLedger(t, dir, want, []string{"broken"})
	w, err := sql.Open("sqlite", "file:"+filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	w.SetMaxOpenConns(1)
	crashed := &Store{w: w, path: dir, log: slog.Default(), convertBatchSize: 7}
	if _, err := w.Exec(`CREATE TABLE ` + convertingTable + ` (` + itemsTable + `)`); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if n, err := crashed.convertBatch(ctx); err != nil || n != 7 {
			t.Fatalf("a batch converted %d items (%v), want 7", n, err)
		}
	}
	w.Close()

	s, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkConverted(t, s, want)
}

// TestConvertStartsAgainAfterAnOldBuildRan converts two batches of an old ledger and stops; then an
// earlier build runs on it (as after a rollback) and changes an item already copied and removes another;
// then this build opens it: the copy starts again, and the ledger holds the items as the earlier build
// left them.
func TestConvertStartsAgainAfterAnOldBuildRan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	want := ledgerItems(t)
	writeOldLedger(t, dir, want, []string{"broken"})
	w, err := sql.Open("sqlite", "file:"+filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	w.SetMaxOpenConns(1)
	crashed := &Store{w: w, path: dir, log: slog.Default(), convertBatchSize: 4}
	if _, err := w.Exec(`CREATE TABLE ` + convertingTable + ` (` + itemsTable + `)`); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := crashed.convertBatch(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The earlier build: the first item gets a new owner (and version), the second is removed.
	changed := want[0].Clone()
	changed.Owner, changed.Version = "U999", changed.Version+1
	doc, err := changed.AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Exec(`UPDATE items SET owner = ?, version = ?, doc = ? WHERE tenant = ? AND key = ?`,
		changed.Owner, changed.Version, string(doc), changed.Tenant, changed.Key); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Exec(`DELETE FROM items WHERE tenant = ? AND key = ?`, want[1].Tenant, want[1].Key); err != nil {
		t.Fatal(err)
	}
	w.Close()

	var log bytes.Buffer
	s, err := Open(ctx, dir, WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !strings.Contains(log.String(), "converting it from the start") || !strings.Contains(log.String(), "changed_items=2") {
		t.Errorf("the log does not say the conversion starts again for 2 items:\n%s", log.String())
	}
	if _, err := s.Get(ctx, want[1].Tenant, want[1].Key); !errors.Is(err, items.ErrNotFound) {
		t.Errorf("the removed item reads as %v, want ErrNotFound", err)
	}
	checkConverted(t, s, append([]*items.Item{changed}, want[2:]...))
}

// TestConvertFillsExecutionIDs opens a ledger of the old layout written by a build without the
// execution_id column: the column and the item's field are filled from each item's last attempt, so the
// operator list finds a run's items claimed before the upgrade.
func TestConvertFillsExecutionIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	its := ledgerItems(t)[:10]
	writeOldLedger(t, dir, its, nil, `DROP INDEX items_execution`, `ALTER TABLE items DROP COLUMN execution_id`,
		`UPDATE items SET doc = json_remove(doc, '$.execution_id')`)
	s, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	page, err := s.ListItems(ctx, items.ListParams{Tenant: "acme", ExecutionID: "4821", Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 9 { // all but the prepared one were claimed in execution 4821
		t.Fatalf("after the upgrade, execution 4821 lists %d items, want 9", len(page.Items))
	}
	for _, it := range page.Items {
		if it.ExecutionID != "4821" {
			t.Errorf("%s has execution_id %q", it.Key, it.ExecutionID)
		}
	}
}
