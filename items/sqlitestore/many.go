package sqlitestore

import (
	"context"
	"database/sql"
	"slices"
	"strings"

	"github.com/replaysafe/companion/items"
)

// readSizes are the sizes of the prepared reads, largest first: readMany reads a transition's keys in
// as many statements of the largest size as fill, then one of the smallest size that holds the rest,
// padded by repeating a key (a repeat in IN changes nothing). Preparing the statement per call, with as
// many parameters as keys, cost each commit a prepareV2: 7% of the process at 32 callers.
var readSizes = []int{500, 64, 8, 1}

// readManySQL reads n keys of a tenant: each item's storedColumns, then its writtenColumns.
func readManySQL(n int) string {
	return `SELECT ` + storedColumns + `, ` + writtenColumns + ` FROM items WHERE tenant = ? AND key IN (?` + strings.Repeat(", ?", n-1) + `)`
}

// readMany returns the stored item of every key (nil for a key without one) in a few queries instead of
// one per key: a batch of 500 items reads them in one statement. rows has the row of every item found, as
// write wants it to change only what changes. A key whose stored document cannot be decoded is in bad with
// its error instead of in found: that fault belongs to the requests about that key alone. Returns
// ErrUnavailable when the database cannot be read.
func (s *Store) readMany(ctx context.Context, tx *sql.Tx, tenant string, keys []string) (found map[string]*items.Item, rows map[string]*written, bad map[string]error, err error) {
	found = make(map[string]*items.Item, len(keys))
	rows = make(map[string]*written, len(keys))
	distinct := make([]string, 0, len(keys))
	for _, k := range keys {
		if _, ok := found[k]; !ok {
			found[k] = nil
			distinct = append(distinct, k)
		}
	}
	args := make([]any, 0, min(len(distinct), readSizes[0])+1)
	for len(distinct) > 0 {
		// The largest size that the keys fill, else the smallest that holds them all.
		i := slices.IndexFunc(readSizes, func(n int) bool { return n <= len(distinct) })
		if i > 0 && readSizes[i] < len(distinct) {
			i--
		}
		size := readSizes[i]
		chunk := distinct[:min(size, len(distinct))]
		distinct = distinct[len(chunk):]
		args = append(args[:0], tenant)
		for j := range size {
			args = append(args, chunk[min(j, len(chunk)-1)])
		}
		result, err := tx.StmtContext(ctx, s.reads[i]).QueryContext(ctx, args...)
		if err != nil {
			return nil, nil, nil, unavailable(err)
		}
		for result.Next() {
			var w writtenScan
			it, r, err, scanErr := scanItem(result, w.dest()...)
			key := r.key
			if scanErr != nil {
				result.Close()
				return nil, nil, nil, unavailable(scanErr)
			}
			if err != nil {
				if bad == nil {
					bad = map[string]error{}
				}
				delete(found, key)
				bad[key] = err
				continue
			}
			found[key] = it
			rows[key] = w.written(&r)
		}
		err = result.Err()
		result.Close()
		if err != nil {
			return nil, nil, nil, unavailable(err)
		}
	}
	return found, rows, bad, nil
}
