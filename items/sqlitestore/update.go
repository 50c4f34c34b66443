package sqlitestore

import (
	"context"
	"database/sql"
	"slices"
	"strings"
)

// An item's UPDATE sets only the columns whose values change, and finds the row by its id. SQLite
// rewrites an index entry for every index that has a column the SET names, whether or not its value
// changed, and the guard by (tenant, key) walked the unique index's strings to reach the row: setting all
// columns by key made an after-write's UPDATE twice the cost of the INSERT that claimed the item (a batch
// of 500 reported: 27 ms against 13 ms in the same run). What changes is decided against the row as it is
// stored, not as the code of today would write the item it holds, so a column an earlier build computed
// otherwise is corrected by the next write that would give it another value.

// setColumns are the columns an UPDATE may set besides doc, which it always sets: itemColumns before doc.
var setColumns = itemColumns[:len(itemColumns)-3]

// writtenNames are the columns of setColumns that storedColumns does not give as stored (workflow: NULL
// where it is the key's); writtenColumns, what readMany selects after storedColumns for write, are the
// row's id and those.
var (
	writtenNames = []string{"workflow", "lease_expires_at", "attempt", "same_key_recovered", "resolutions",
		"duplicate_effect", "entered_unknown", "needs_person_since", "sweep_candidate", "alert_pending"}
	writtenColumns = "id, " + strings.Join(writtenNames, ", ")
)

// written is an item's row as it is stored: its id, and the values of setColumns in appendColumns' form
// (integers of either width, nil for NULL).
type written struct {
	id   int64
	cols []any
}

// writtenScan receives writtenColumns: straight into the values of a written row, as database/sql scans
// into an *any without converting (into an *int64 or a sql.NullInt64 it converts by reflection).
type writtenScan struct {
	id any
	w  written
}

// writtenAt are the places of writtenNames in setColumns.
var writtenAt = func() []int {
	at := make([]int, len(writtenNames))
	for i, name := range writtenNames {
		at[i] = slices.Index(setColumns, name)
	}
	return at
}()

func (w *writtenScan) dest() []any {
	w.w.cols = make([]any, len(setColumns))
	d := []any{&w.id}
	for _, c := range writtenAt {
		d = append(d, &w.w.cols[c])
	}
	return d
}

// written returns the row, whose other columns r holds.
func (w *writtenScan) written(r *row) *written {
	w.w.id, _ = w.id.(int64)
	var batchIndex any
	if r.batchIndex != nil {
		batchIndex = *r.batchIndex
	}
	c := w.w.cols
	c[0], c[1], c[2], c[4], c[5], c[6], c[7], c[8], c[9], c[11], c[12] = r.version, r.state, r.destination, r.owner,
		r.reference, r.batchID, batchIndex, r.executionID, boolInt(r.needsPerson), r.createdAt, r.updatedAt
	return &w.w
}

// changedColumns returns the bits (one per setColumns) of the values of next, in appendColumns' form,
// that differ from the stored row's.
func (w *written) changedColumns(next []any) uint32 {
	var mask uint32
	for c, stored := range w.cols {
		if !sameValue(stored, next[c]) {
			mask |= 1 << c
		}
	}
	return mask
}

// sameValue compares two column values: integers by value whatever their width, else strings and nil.
func sameValue(a, b any) bool {
	ai, aInt := asInt64(a)
	bi, bInt := asInt64(b)
	if aInt || bInt {
		return aInt && bInt && ai == bi
	}
	as, aStr := a.(string)
	bs, bStr := b.(string)
	if aStr || bStr {
		return aStr && bStr && as == bs
	}
	return a == nil && b == nil
}

func asInt64(v any) (int64, bool) {
	switch v := v.(type) {
	case int64:
		return v, true
	case int:
		return int64(v), true
	}
	return 0, false
}

// updateSQL sets the columns of mask (bits of setColumns) and doc of the row of an id, guarded by the
// version the transaction found and by the item's tenant and key. Its values are those columns in order,
// doc, the id, the version, the tenant, the key.
//
// The id finds the row; the tenant and key make sure it is the item's. The version alone would not: the
// ids of the items in the committer's cache are not read in the transaction (cache.go), and many items
// share a version (every new one is 1), so a wrong id (a bug's) would write this item's state into another
// item's row. With them it changes no row, which fails the group and empties the cache
// (TestCacheStaleRowIDIsRefused). They cost two comparisons on the row the id found.
func updateSQL(mask uint32) string {
	var b strings.Builder
	b.WriteString("UPDATE items SET ")
	for c, name := range setColumns {
		if mask&(1<<c) != 0 {
			b.WriteString(name)
			b.WriteString(" = ?, ")
		}
	}
	b.WriteString("doc = ? WHERE id = ? AND version = ? AND tenant = ? AND key = ?")
	return b.String()
}

// maxUpdates bounds the prepared UPDATEs, one per set of changed columns: a transition changes one of a
// few such sets, and a set past the bound is run unprepared.
const maxUpdates = 64

// updates are the UPDATEs of one transaction, one per set of changed columns it used.
type updates struct {
	s  *Store
	tx *sql.Tx
	in map[uint32]*sql.Stmt
}

// exec runs the UPDATE of mask with args. A set not yet prepared runs unprepared this once (preparing on
// the writer's connection would wait for the transaction that holds it) and is prepared after the commit.
func (u *updates) exec(ctx context.Context, mask uint32, args []any) (sql.Result, error) {
	if st := u.in[mask]; st != nil {
		return st.ExecContext(ctx, args...)
	}
	prepared := u.s.updates[mask]
	if prepared == nil {
		if len(u.s.updates)+len(u.s.unprepared) < maxUpdates {
			u.s.unprepared[mask] = true
		}
		return u.tx.ExecContext(ctx, updateSQL(mask), args...)
	}
	if u.in == nil {
		u.in = map[uint32]*sql.Stmt{}
	}
	st := u.tx.StmtContext(ctx, prepared)
	u.in[mask] = st
	return st.ExecContext(ctx, args...)
}

// prepareUpdates prepares the sets of changed columns the last transactions ran unprepared; the
// committer's, between two transactions. One that fails to prepare is tried again when it is used again.
func (s *Store) prepareUpdates() {
	for mask := range s.unprepared {
		delete(s.unprepared, mask)
		if st, err := s.w.PrepareContext(context.Background(), updateSQL(mask)); err == nil {
			s.updates[mask] = st
		}
	}
}
