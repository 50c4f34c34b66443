package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/pgstore/pgtest"
)

// TestQueryPlans says which index serves which query (the list in schemaV1's comment), and checks it with
// EXPLAIN (FORMAT JSON) of the statement's generic plan (plan_cache_mode = force_generic_plan: the plan a
// prepared statement of pgx's cache ends up with), on a ledger of a few thousand items with fresh
// statistics, and enable_seqscan off so that a small table's index choice means something: a query that
// loses its index, or an index no query names, shows up here. No query may scan the items table itself.
func TestQueryPlans(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	now := fillForPlans(t, s)
	q := s.q
	yes, no := true, false
	list := func(p items.ListParams) (string, []any) {
		p.Tenant = "acme"
		sql, args, err := listItems(s.quoted, p, 101)
		if err != nil {
			t.Fatal(err)
		}
		return sql, args
	}
	cursor := items.ListCursor{UpdatedAt: now, Key: "k"}.Encode()
	sinceCursor, nullSinceCursor := items.SinceCursor{Since: &now, Key: "k"}.Encode(), items.SinceCursor{Key: "k"}.Encode()
	three := 3
	batch := func(afterIndex *int, afterKey string) (string, []any) {
		return batchItems(s.quoted, "acme", "exec-1", afterIndex, afterKey, 100)
	}
	strs := func(v ...string) []string { return v }
	rows := itemRows{}
	it := &items.Item{Tenant: "acme", Key: "k", State: items.StateSucceeded, Destination: "d", UpdatedAt: now, CreatedAt: now}
	rows.add(it, it.Facts(), []byte("{}"))
	rows.seenVersion = []int64{1}
	counts := countArgs(items.CountChanges{{Tenant: "acme", Destination: "d", State: items.StateSucceeded}: {Items: 1}})
	series := items.SeriesChanges{}
	series.Add("acme", "d", now, items.Tally{Proceeds: 1})
	tests := []struct {
		name  string
		query string
		args  []any
		// want are the indexes the plan reads (and the arbiter of an ON CONFLICT), in the plan's order.
		want []string
	}{
		{"GetItem", q.GetItem, []any{"acme", "k"}, []string{"items_pkey"}},
		{"ReadGroup", q.ReadGroup, []any{strs("acme", "acme"), strs("a", "b")}, []string{"items_pkey"}},
		{"UpdateItems", q.UpdateItems, rows.args(true), []string{"items_pkey"}},
		{"InsertItems", q.InsertItems, rows.args(false), nil},
		{"AddCounts", q.AddCounts, counts.args(), []string{"item_counts_pkey"}},
		{"Counts", q.Counts, []any{"acme"}, []string{"item_counts_pkey"}},
		{"Unresolved", q.Unresolved, []any{now, "acme"}, []string{"items_needs_person_since", "items_lease", "items_sweep"}},
		{"NeedsPersonCount", q.NeedsPersonCount, []any{"acme"}, []string{"item_counts_pkey"}},
		{"ExpiredLeases", q.ExpiredLeases, []any{now, "", "", 100}, []string{"items_lease"}},
		{"SweepCandidates", q.SweepCandidates, []any{"", "", 100}, []string{"items_sweep"}},
		{"PendingAlertItems", q.PendingAlertItems, []any{"", "", 100}, []string{"items_alert_pending"}},
		{"ListItems", "", nil, []string{"items_state_changed", "items_state_changed", "items_state_changed", "items_state_changed", "items_state_changed"}},
		{"ListItemsNeedsPerson", "", nil, []string{"items_needs_person_changed"}},
		{"ListItemsNotNeedsPerson", "", nil, []string{"items_state_changed", "items_state_changed", "items_state_changed", "items_state_changed", "items_state_changed"}},
		{"ListItemsState", "", nil, []string{"items_state_changed"}},
		{"ListItemsStates", "", nil, []string{"items_state_changed", "items_state_changed"}},
		{"ListItemsCursor", "", nil, []string{"items_state_changed", "items_state_changed", "items_state_changed", "items_state_changed", "items_state_changed"}},
		{"ListItemsBatch", "", nil, []string{"items_batch"}},
		{"ListItemsExecution", "", nil, []string{"items_of_execution"}},
		{"ListItemsExecutionCursor", "", nil, []string{"items_of_execution"}},
		{"ListItemsReference", "", nil, []string{"items_of_reference"}},
		{"ListItemsOwner", "", nil, []string{"items_state_changed", "alerts_pkey", "items_state_changed", "alerts_pkey", "items_state_changed",
			"alerts_pkey", "items_state_changed", "alerts_pkey", "items_state_changed", "alerts_pkey"}},
		{"ListItemsNeedsPersonSince", "", nil, []string{"items_needs_person_since"}},
		{"ListItemsNeedsPersonSinceCursor", "", nil, []string{"items_needs_person_since"}},
		{"ListItemsNeedsPersonSinceNullCursor", "", nil, []string{"items_needs_person_since"}},
		{"BatchItems", "", nil, []string{"items_batch"}},
		{"BatchItemsAfterIndex", "", nil, []string{"items_batch"}},
		{"BatchItemsAfterNoIndex", "", nil, []string{"items_batch"}},
		{"BatchCounts", q.BatchCounts, []any{"acme", "exec-1", now}, []string{"items_batch"}},
		{"AddAlerts", q.AddAlerts, []any{strs("acme"), strs("k"), []int32{1}, strs("c"), strs("U1"), strs(""), []time.Duration{0}, strs(""),
			strs("d"), []time.Time{now}}, []string{"alerts_pkey"}},
		{"AlertGroups", q.AlertGroups, []any{now, 100}, []string{"alerts_pending", "alerts_escalate"}},
		{"ClaimAlerts", q.ClaimAlerts, []any{"c1", now, "acme", "U1", "", now}, []string{"alerts_pending", "alerts_pkey"}},
		{"ClaimEscalations", q.ClaimEscalations, []any{"c1", now, "acme", "U1", "", now}, []string{"alerts_escalate", "alerts_pkey"}},
		{"FinishAlerts", q.FinishAlerts, []any{"C1", "1.2", now, "c1"}, []string{"alerts_claim"}},
		{"FinishEscalations", q.FinishEscalations, []any{"C1", "1.2", now, "c1"}, []string{"alerts_claim"}},
		{"RenewAlertClaim", q.RenewAlertClaim, []any{"c1", now}, []string{"alerts_claim"}},
		{"MarkAlertPost", q.MarkAlertPost, []any{"c1", now}, []string{"alerts_claim"}},
		{"ReleaseAlerts", q.ReleaseAlerts, []any{"c1"}, []string{"alerts_claim"}},
		// The pending alerts are few (those not sent yet): the planner reads them all and joins them to the message's.
		{"NoteAlertMessage", q.NoteAlertMessage, []any{"C1", "1.2", strs("acme"), strs("k"), []int32{1}, strs("c")}, []string{"alerts_pending"}},
		{"NoteEscalationMessage", q.NoteEscalationMessage, []any{"C1", "1.2", strs("acme"), strs("k"), []int32{1}, strs("c")}, []string{"alerts_pkey"}},
		{"CloseAlert", q.CloseAlert, []any{"acme", "k", 1, "c", now}, []string{"alerts_pkey"}},
		{"CloseItemAlerts", q.CloseItemAlerts, []any{"acme", "k", now}, []string{"alerts_pkey"}},
		{"RequestEscalation", q.RequestEscalation, []any{"acme", "k", "U1", now}, []string{"alerts_pkey"}},
		{"ItemAlerts", q.ItemAlerts, []any{"acme", "k"}, []string{"alerts_pkey"}},
		{"MessageAlerts", q.MessageAlerts, []any{"C1", "1.2"}, []string{"alerts_message", "alerts_escalation_message"}},
		{"SettledAlerts", q.SettledAlerts, []any{100}, []string{"alerts_delivered_open", "items_pkey"}},
		{"ClaimProbe", q.ClaimProbe, []any{"acme", "k", 1, 1, "c1", now, now}, []string{"probes_pkey", "items_pkey"}},
		{"ReleaseProbe", q.ReleaseProbe, []any{"acme", "k", 1, 1, "c1"}, []string{"probes_pkey"}},
		{"SettledDestinations", q.SettledDestinations, nil, []string{"item_counts_pkey"}},
		{"SettledItems", q.SettledItems, []any{"acme", "succeeded", now.Add(-time.Hour), "", now, "dest-1", 100}, []string{"items_state_changed"}},
		{"RemoveItems", q.RemoveItems, []any{"acme", strs("k"), []int64{1}}, []string{"items_pkey"}},
		{"RemoveAlerts", q.RemoveAlerts, []any{"acme", strs("k")}, []string{"alerts_pkey"}},
		{"RemoveProbes", q.RemoveProbes, []any{"acme", strs("k")}, []string{"probes_pkey"}},
		{"AddCounter", q.AddCounter, []any{"acme", "d", "n", 1}, []string{"counters_pkey"}},
		{"Conflicts", q.Conflicts, []any{"acme", "n"}, []string{"counters_pkey"}},
		{"AddSeries", q.AddSeries, seriesArgs(series).args(), []string{"series_pkey"}},
		{"SeriesRows", q.SeriesRows, []any{"acme", "1h", now.Add(-48 * time.Hour), now, ""}, []string{"series_pkey"}},
		{"RemoveSeries", q.RemoveSeries, []any{"1h", now}, []string{"series_start"}},
		{"CountConflicts", q.CountConflicts, []any{"acme", "d", "n", 1, now, now}, []string{"series_pkey", "counters_pkey"}},
		{"RecordRelease", q.RecordRelease, []any{now, "v1"}, []string{"releases_pkey"}},
		{"Releases", q.Releases, []any{now.Add(-time.Hour), now}, []string{"releases_at"}},
	}
	lists := map[string]items.ListParams{
		"ListItems":                           {},
		"ListItemsNeedsPerson":                {NeedsPerson: &yes},
		"ListItemsNotNeedsPerson":             {NeedsPerson: &no},
		"ListItemsState":                      {States: []items.State{items.StateUnknown}},
		"ListItemsStates":                     {States: []items.State{items.StateUnknown, items.StateSucceeded}},
		"ListItemsCursor":                     {Cursor: cursor},
		"ListItemsBatch":                      {BatchID: "exec-1"},
		"ListItemsExecution":                  {ExecutionID: "run-1"},
		"ListItemsExecutionCursor":            {ExecutionID: "run-1", Cursor: cursor},
		"ListItemsReference":                  {Reference: "QT-1"},
		"ListItemsOwner":                      {Owner: "U1"},
		"ListItemsNeedsPersonSince":           {NeedsPerson: &yes, Order: items.ListByNeedsPersonSince},
		"ListItemsNeedsPersonSinceCursor":     {NeedsPerson: &yes, Order: items.ListByNeedsPersonSince, Cursor: sinceCursor},
		"ListItemsNeedsPersonSinceNullCursor": {NeedsPerson: &yes, Order: items.ListByNeedsPersonSince, Cursor: nullSinceCursor},
	}
	batches := map[string]func() (string, []any){
		"BatchItems":             func() (string, []any) { return batch(nil, "") },
		"BatchItemsAfterIndex":   func() (string, []any) { return batch(&three, "k") },
		"BatchItemsAfterNoIndex": func() (string, []any) { return batch(nil, "k") },
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, set := range []string{"SET plan_cache_mode = force_generic_plan", "SET enable_seqscan = off"} {
		if _, err := conn.Exec(ctx, set); err != nil {
			t.Fatal(err)
		}
	}
	named := map[string]bool{}
	for _, tc := range tests {
		sql, args := tc.query, tc.args
		if p, ok := lists[tc.name]; ok {
			sql, args = list(p)
		} else if b, ok := batches[tc.name]; ok {
			sql, args = b()
		}
		// The statement is prepared as pgx prepares it (its parameter types from the statement), and explained as
		// its prepared statement is run: with a generic plan.
		if _, err := conn.Exec(ctx, "DEALLOCATE ALL"); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Conn().Prepare(ctx, "plan", sql); err != nil {
			t.Fatalf("%s: prepare: %v\n%s", tc.name, err, sql)
		}
		var out []byte
		// EXECUTE takes no parameters of the protocol: pgx writes the arguments into the statement as literals.
		if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) EXECUTE plan"+executeArgs(len(args)),
			append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...).Scan(&out); err != nil {
			t.Fatalf("%s: explain: %v\n%s", tc.name, err, sql)
		}
		if _, err := conn.Exec(ctx, "DEALLOCATE plan"); err != nil {
			t.Fatal(err)
		}
		var plan []struct{ Plan planNode }
		if err := json.Unmarshal(out, &plan); err != nil {
			t.Fatal(err)
		}
		got, scans := plan[0].Plan.indexes(nil), plan[0].Plan.seqScans(nil)
		for _, ix := range got {
			named[ix] = true
		}
		if !slices.Equal(got, tc.want) || len(scans) > 0 {
			t.Errorf("%s reads %v (sequential scans of %v), want %v\n%s\n%s", tc.name, got, scans, tc.want, sql, out)
		}
	}
	// Every index of the schema serves a query.
	var all []string
	r, err := s.pool.Query(ctx, `SELECT indexname FROM pg_indexes WHERE schemaname = $1`, s.schema)
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var n string
		if err := r.Scan(&n); err != nil {
			t.Fatal(err)
		}
		all = append(all, n)
	}
	for _, n := range all {
		if !named[n] && n != "meta_pkey" && n != "schema_migrations_pkey" {
			t.Errorf("index %s serves no query of the test", n)
		}
	}
}

// executeArgs returns "($1, $2, …)" for n arguments, "" for none.
func executeArgs(n int) string {
	if n == 0 {
		return ""
	}
	var ps []string
	for i := range n {
		ps = append(ps, fmt.Sprintf("$%d", i+1))
	}
	return "(" + strings.Join(ps, ", ") + ")"
}

// planNode is a node of EXPLAIN's JSON plan.
type planNode struct {
	NodeType  string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	IndexName string     `json:"Index Name"`
	Arbiters  []string   `json:"Conflict Arbiter Indexes"`
	Plans     []planNode `json:"Plans"`
}

// indexes returns the indexes the plan reads and the arbiters of its ON CONFLICT, depth first.
func (n planNode) indexes(out []string) []string {
	if n.IndexName != "" {
		out = append(out, n.IndexName)
	}
	out = append(out, n.Arbiters...)
	for _, c := range n.Plans {
		out = c.indexes(out)
	}
	return out
}

// seqScans returns the tables the plan reads whole.
func (n planNode) seqScans(out []string) []string {
	if n.NodeType == "Seq Scan" {
		out = append(out, n.Relation)
	}
	for _, c := range n.Plans {
		out = c.seqScans(out)
	}
	return out
}

// openInternal opens a store in a schema of the test's own.
func openInternal(t testing.TB) *Store {
	t.Helper()
	url, schema := pgtest.Schema(t)
	s, err := Open(context.Background(), url, schema, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// fillForPlans fills s with 3,000 items through the ledger, in batches of 500 claims and reports, over
// four destinations, each batch its own batch id and execution, every tenth item with a reference: most
// succeeded, one in twenty unknown (needing a person: dedupe none), the last batch left in flight, and
// alerts about the unknown ones; then it refreshes the statistics. It returns the clock's reading.
func fillForPlans(t *testing.T, s *Store) time.Time {
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	l, err := items.NewLedger(ctx, s, items.Config{Now: func() time.Time { now = now.Add(time.Millisecond); return now }})
	if err != nil {
		t.Fatal(err)
	}
	fp, _ := items.Fingerprint([]byte(`{"invoice":"742"}`))
	var alerts []items.Alert
	for start := 0; start < 3000; start += 500 {
		var ps []items.BeforeWriteParams
		for i := start; i < start+500; i++ {
			p := items.BeforeWriteParams{Tenant: "acme", Key: fmt.Sprintf("wf:inv-%05d:send:0", i), Fingerprint: fp,
				Destination: fmt.Sprintf("dest-%d", i%4), BatchID: fmt.Sprintf("exec-%d", i/500), ExecutionID: fmt.Sprintf("run-%d", i/500)}
			if i%10 == 0 {
				p.Reference = fmt.Sprintf("QT-%d", i)
			}
			ps = append(ps, p)
		}
		answers, err := l.BeforeWriteMany(ctx, "acme", ps)
		if err != nil {
			t.Fatal(err)
		}
		if start == 2500 {
			break // in flight
		}
		var reports []items.AfterWriteParams
		for i, a := range answers {
			ev := items.Evidence{Outcome: items.OutcomeSucceeded}
			if (start+i)%20 == 0 {
				ev = items.Evidence{Outcome: items.OutcomeFailed, Class: items.ClassTimeout}
				alerts = append(alerts, items.Alert{Tenant: "acme", Key: a.Key, Attempt: 1, Cause: items.CauseNoDedupe, Owner: "U1",
					Status: items.AlertPending, CreatedAt: now, Destination: ps[i].Destination})
			}
			reports = append(reports, items.AfterWriteParams{Tenant: "acme", Key: a.Key, Claim: a.Claim, Evidence: ev})
		}
		if _, _, err := l.AfterWriteMany(ctx, "acme", reports); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.AddAlerts(ctx, alerts); err != nil {
		t.Fatal(err)
	}
	// The series of a ledger that ran for a while, of many tenants: a month of hours of four destinations
	// for each of 20 tenants (what a ledger's own items, written within a second, do not make).
	if _, err := s.pool.Exec(ctx, `INSERT INTO `+s.quoted+`.series (tenant, step, start, destination, slot, proceeds)
		SELECT 't' || t, '1h', $1::timestamptz - h * interval '1 hour', 'dest-' || d, 0, 1
		FROM generate_series(1, 20) AS t, generate_series(1, 720) AS h, generate_series(0, 3) AS d`, now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, "ANALYZE "+s.quoted+".items, "+s.quoted+".alerts, "+s.quoted+".item_counts, "+s.quoted+".series"); err != nil {
		t.Fatal(err)
	}
	return now
}
