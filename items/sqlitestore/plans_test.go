package sqlitestore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// TestQueryPlans says which index serves which query (the list in schema's comment), and checks it with
// EXPLAIN QUERY PLAN: a query that loses its index, or an index no query names, shows up here. No query
// may scan the items table itself.
func TestQueryPlans(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	now := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	yes, no := true, false
	list := func(p items.ListParams) (string, []any) {
		p.Tenant = "acme"
		where, args, err := listItemsWhere(p, 101)
		if err != nil {
			t.Fatal(err)
		}
		return `SELECT doc ` + where, args
	}
	cursor := items.ListCursor{UpdatedAt: now, Key: "k"}.Encode()
	sinceCursor, nullSinceCursor := items.SinceCursor{Since: &now, Key: "k"}.Encode(), items.SinceCursor{Key: "k"}.Encode()
	tests := []struct {
		name, query string
		args        []any
		// want are the indexes the plan must use, in order; a COVERING index reads no row of items.
		want []string
	}{
		{"Get", `SELECT doc FROM items WHERE tenant = ? AND key = ?`, []any{"acme", "k"},
			[]string{"USING INDEX items_key"}},
		{"ReadMany", readManySQL(2), []any{"acme", "a", "b"},
			[]string{"USING INDEX items_key"}},
		{"Update", updateSQL(1<<0 | 1<<12), []any{2, 1, []byte("doc"), 1, 1, "acme", "k"}, []string{"USING INTEGER PRIMARY KEY"}},
		{"ExpiredLeases", expiredLeasesSQL, []any{now.UnixMilli(), "", "", 100},
			[]string{"USING INDEX items_lease"}},
		{"ListItems", "", nil, []string{"USING INDEX items_state_changed"}},
		{"ListItemsNeedsPerson", "", nil, []string{"USING INDEX items_needs_person_changed"}},
		{"ListItemsNotNeedsPerson", "", nil, []string{"USING INDEX items_state_changed"}},
		{"ListItemsState", "", nil, []string{"USING INDEX items_state_changed"}},
		{"ListItemsStates", "", nil, []string{"USING INDEX items_state_changed"}},
		{"ListItemsCursor", "", nil, []string{"USING INDEX items_state_changed"}},
		{"ListItemsBatch", "", nil, []string{"USING INDEX items_batch"}},
		{"ListItemsExecution", "", nil, []string{"USING INDEX items_of_execution"}},
		{"ListItemsExecutionCursor", "", nil, []string{"USING INDEX items_of_execution"}},
		{"ListItemsNeedsPersonSince", "", nil, []string{"USING INDEX items_needs_person_since (tenant=?)"}},
		{"ListItemsNeedsPersonSinceCursor", "", nil, []string{"USING INDEX items_needs_person_since (tenant=? AND (needs_person_since,key)>(?,?))"}},
		{"ListItemsNeedsPersonSinceNullCursor", "", nil, []string{"USING INDEX items_needs_person_since (tenant=?)"}},
		{"ListItemsNeedsPersonSinceFiltered", "", nil, []string{"USING INDEX items_needs_person_since"}},
		{"ListItemsReference", "", nil, []string{"USING INDEX items_of_reference"}},
		{"ListItemsReferenceCursor", "", nil, []string{"USING INDEX items_of_reference"}},
		{"BatchItems", `SELECT doc FROM items ` + batchItemsWhere + ` AND (batch_index, key) > (?, ?)
			ORDER BY batch_index, key LIMIT ?`, []any{"acme", "b", 3, "k", 100}, []string{"USING INDEX items_batch"}},
		{"BatchCounts", batchCountsSQL, []any{"in_flight", now.UnixMilli(), "unknown", "acme", "b"},
			[]string{"USING INDEX items_batch"}},
		{"SweepCandidates", `SELECT doc FROM items ` + sweepCandidatesWhere, []any{"", "", 100},
			[]string{"USING INDEX items_sweep"}},
		{"PendingAlertItems", `SELECT doc FROM items ` + pendingAlertItemsWhere, []any{"", "", 100},
			[]string{"USING INDEX items_alert_pending"}},
		{"RetentionSettled", settledSQL, []any{"acme", "succeeded", 0, "", now.UnixNano(), "billing", 100},
			[]string{"USING INDEX items_state_changed"}},
		{"RetentionRemoveItem", "DELETE FROM items WHERE tenant = ? AND key = ? AND version = ?", []any{"acme", "k", 3},
			[]string{"USING INDEX items_key"}},
		{"NeedsPersonCount", needsPersonCountSQL, []any{"acme"}, []string{"SEARCH item_counts USING PRIMARY KEY (tenant=?)"}},
		{"StatsCountsTenant", countsSQL, []any{"acme"}, []string{"SCAN item_counts"}},
		{"StatsUnresolvedTenant", unresolvedSQL, []any{now.UnixMilli(), "acme"},
			[]string{"USING INDEX items_needs_person_changed", "USING INDEX items_lease", "USING INDEX items_sweep"}},
		{"StatsUnresolvedAll", unresolvedSQL, []any{now.UnixMilli(), ""},
			[]string{"USING INDEX items_needs_person_changed", "USING INDEX items_lease", "USING INDEX items_sweep"}},
		{"RenewAlertClaim", `UPDATE alerts SET claimed_until = ? WHERE claim = ?`, []any{1, "d_1"},
			[]string{"USING INDEX alerts_claim"}},
		{"NoteAlertMessage", `UPDATE alerts SET channel = ?, ts = ? WHERE tenant = ? AND key = ? AND attempt = ? AND cause = ?
			AND status = 'pending' AND ts = ''`, []any{"D1", "1.1", "acme", "k", 1, "no_dedupe"},
			[]string{"USING PRIMARY KEY"}},
		{"SeriesRows", seriesRowsSQL, []any{"acme", "1h", 0, 3600 * 48, ""},
			[]string{"SEARCH series USING PRIMARY KEY (tenant=? AND step=? AND start>? AND start<?)"}},
		{"SeriesRowsDestination", seriesRowsSQL, []any{"acme", "1d", 0, 86400 * 30, "billing"},
			[]string{"SEARCH series USING PRIMARY KEY (tenant=? AND step=? AND start>? AND start<?)"}},
		{"RemoveSeriesRows", removeSeriesSQL, []any{"1h", 3600}, []string{"SEARCH series USING INDEX series_start (step=? AND start<?)"}},
		{"Releases", releasesSQL, []any{0, now.UnixNano()}, []string{"USING INDEX releases_at (at>? AND at<?)"}},
		{"SettledAlerts", settledAlertsSQL, []any{100},
			[]string{"SCAN a USING INDEX alerts_delivered_open", "SEARCH i USING INDEX items_key (tenant=? AND key=?)"}},
		{"ClaimProbe", claimProbeSQL, []any{"acme", "k", 1, 1, "p", now.UnixNano(), "acme", "k", 1, now.UnixNano()},
			[]string{"USING INDEX items_key"}},
	}
	lists := map[string]items.ListParams{
		"ListItems":                           {},
		"ListItemsNeedsPerson":                {NeedsPerson: &yes},
		"ListItemsNotNeedsPerson":             {NeedsPerson: &no, Destination: "billing"},
		"ListItemsState":                      {States: []items.State{items.StateUnknown}},
		"ListItemsStates":                     {States: []items.State{items.StateUnknown, items.StateFailed}, NeedsPerson: &no},
		"ListItemsBatch":                      {BatchID: "b"},
		"ListItemsCursor":                     {Cursor: cursor, Workflow: "wf"},
		"ListItemsExecution":                  {ExecutionID: "1234"},
		"ListItemsExecutionCursor":            {ExecutionID: "1234", Cursor: cursor, States: []items.State{items.StateUnknown, items.StateFailed}},
		"ListItemsNeedsPersonSince":           {NeedsPerson: &yes, Order: items.ListByNeedsPersonSince},
		"ListItemsNeedsPersonSinceCursor":     {NeedsPerson: &yes, Order: items.ListByNeedsPersonSince, Cursor: sinceCursor},
		"ListItemsNeedsPersonSinceNullCursor": {NeedsPerson: &yes, Order: items.ListByNeedsPersonSince, Cursor: nullSinceCursor},
		"ListItemsNeedsPersonSinceFiltered": {NeedsPerson: &yes, Order: items.ListByNeedsPersonSince, Cursor: sinceCursor,
			Destination: "billing", BatchID: "b", Owner: "U1"},
		"ListItemsReference":       {Reference: "QT-2026-0417"},
		"ListItemsReferenceCursor": {Reference: "QT-2026-0417", Cursor: cursor, NeedsPerson: &yes},
	}
	sorts := map[string]bool{"ExpiredLeases": true, "ListItemsExecution": true, "ListItemsExecutionCursor": true,
		"ListItemsReference": true, "ListItemsReferenceCursor": true, "ListItemsBatch": true}
	// The lists that read each state's range of items_state_changed (mergedStates), and how many states:
	// they sort the pages of those ranges, at most one page per state.
	merged := map[string]int{"ListItems": len(items.States), "ListItemsNotNeedsPerson": len(items.States),
		"ListItemsCursor": len(items.States), "ListItemsStates": 2}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if p, ok := lists[tt.name]; ok {
				tt.query, tt.args = list(p)
			}
			rows, err := s.r.QueryContext(ctx, "EXPLAIN QUERY PLAN "+tt.query, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var plan []string
			for rows.Next() {
				var id, parent, unused int
				var detail string
				if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, detail)
			}
			text := strings.Join(plan, "\n")
			t.Logf("plan:\n%s", text)
			if n, ok := merged[tt.name]; ok {
				if got := strings.Count(text, "USING INDEX items_state_changed (tenant=? AND state=?"); got != n {
					t.Errorf("plan reads %d states' ranges of items_state_changed; want %d:\n%s", got, n, text)
				}
			}
			for _, w := range tt.want {
				if !strings.Contains(text, w) {
					t.Errorf("plan does not use %q:\n%s", w, text)
				}
			}
			for _, line := range plan {
				if strings.HasPrefix(line, "SCAN items") && !strings.Contains(line, " INDEX ") {
					t.Errorf("plan scans the items table:\n%s", text)
				}
				// ExpiredLeases sorts the few leases that ran out, which costs less than one more index. (The
				// lists sort by key only the items of one change time, at most a batch: "USE TEMP B-TREE FOR
				// LAST TERM OF ORDER BY", which the indexes leave to them so as not to carry every key.)
				// The lists of one execution or one reference sort its items: an index with updated_at would
				// be rewritten by every transition of the items that carry one (schema's comment).
				if strings.Contains(line, "TEMP B-TREE FOR ORDER BY") && !sorts[tt.name] && merged[tt.name] == 0 {
					t.Errorf("plan sorts instead of reading an index in order:\n%s", text)
				}
			}
		})
	}
}

// TestIndexesWithUpdatedAtAreReplaced opens a ledger of the release before, whose indexes of executions
// and references held updated_at, and checks that the first start replaces them (and only then), and
// that a run's items and a reference's are still listed, newest change first.
func TestIndexesWithUpdatedAtAreReplaced(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	l, err := items.NewLedger(ctx, s, items.Config{Now: func() time.Time { clock = clock.Add(time.Second); return clock }})
	if err != nil {
		t.Fatal(err)
	}
	fp, _ := items.Fingerprint([]byte(`{"invoice":"742"}`))
	for _, k := range []string{"wf:a:send:0", "wf:b:send:0", "wf:c:send:0"} {
		if _, err := l.BeforeWrite(ctx, items.BeforeWriteParams{Tenant: "acme", Key: k, Fingerprint: fp, Destination: "billing",
			ExecutionID: "run-1", Reference: "QT-1"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.w.ExecContext(ctx, `DROP INDEX items_of_execution; DROP INDEX items_of_reference;
		CREATE INDEX items_execution ON items (tenant, execution_id, updated_at) WHERE execution_id != '';
		CREATE INDEX items_reference ON items (tenant, reference, updated_at) WHERE reference != '';`); err != nil {
		t.Fatal(err)
	}
	s.Close()

	indexes := func(s *Store) []string {
		t.Helper()
		rows, err := s.r.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'index' AND name IN
			('items_execution', 'items_reference', 'items_of_execution', 'items_of_reference') ORDER BY name`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var names []string
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			names = append(names, n)
		}
		return names
	}
	for i := range 2 {
		s, err := Open(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := strings.Join(indexes(s), " "), "items_of_execution items_of_reference"; got != want {
			t.Errorf("start %d: indexes %q; want %q", i+1, got, want)
		}
		for _, p := range []items.ListParams{{Tenant: "acme", ExecutionID: "run-1"}, {Tenant: "acme", Reference: "QT-1"}} {
			page, err := s.ListItems(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, it := range page.Items {
				keys = append(keys, it.Key)
			}
			if got, want := strings.Join(keys, " "), "wf:c:send:0 wf:b:send:0 wf:a:send:0"; got != want {
				t.Errorf("start %d: list %+v: %s; want %s", i+1, p, got, want)
			}
		}
		s.Close()
	}
}
