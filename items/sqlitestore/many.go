package sqlitestore

import (
	"context"
	"database/sql"
	"strings"

	"github.com/replaysafe/companion/items"
)

// readChunk bounds the keys of one read: far below SQLite's limit on bound parameters.
const readChunk = 500

// readMany returns the stored item of every key (nil for a key without one) in a few queries instead of
// one per key: a batch of 500 items reads them in one statement. Returns ErrUnavailable.
func readMany(ctx context.Context, tx *sql.Tx, tenant string, keys []string) (map[string]*items.Item, error) {
	found := make(map[string]*items.Item, len(keys))
	var distinct []string
	for _, k := range keys {
		if _, ok := found[k]; !ok {
			found[k] = nil
			distinct = append(distinct, k)
		}
	}
	for start := 0; start < len(distinct); start += readChunk {
		chunk := distinct[start:min(start+readChunk, len(distinct))]
		args := make([]any, 0, len(chunk)+1)
		args = append(args, tenant)
		for _, k := range chunk {
			args = append(args, k)
		}
		q := `SELECT doc FROM items WHERE tenant = ? AND key IN (?` + strings.Repeat(", ?", len(chunk)-1) + `)`
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, unavailable(err)
		}
		for rows.Next() {
			var doc string
			if err := rows.Scan(&doc); err != nil {
				rows.Close()
				return nil, unavailable(err)
			}
			it, err := decode(doc)
			if err != nil {
				rows.Close()
				return nil, err
			}
			found[it.Key] = it
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, unavailable(err)
		}
	}
	return found, nil
}
