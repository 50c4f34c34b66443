package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/replaysafe/companion/items"
)

// readChunk bounds the keys of one read: far below SQLite's limit on bound parameters.
const readChunk = 500

// readMany returns the stored item of every key (nil for a key without one) in a few queries instead of
// one per key: a batch of 500 items reads them in one statement. A key whose stored document cannot be
// decoded is in bad with its error instead of in found: that fault belongs to the requests about that key
// alone. Returns ErrUnavailable when the database cannot be read.
func readMany(ctx context.Context, tx *sql.Tx, tenant string, keys []string) (found map[string]*items.Item, bad map[string]error, err error) {
	found = make(map[string]*items.Item, len(keys))
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
		q := `SELECT key, doc FROM items WHERE tenant = ? AND key IN (?` + strings.Repeat(", ?", len(chunk)-1) + `)`
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, nil, unavailable(err)
		}
		for rows.Next() {
			var key, doc string
			if err := rows.Scan(&key, &doc); err != nil {
				rows.Close()
				return nil, nil, unavailable(err)
			}
			it, err := decode(doc)
			if err == nil && it.Key != key {
				err = fmt.Errorf("sqlitestore: corrupt item document: stored under another key")
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
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, nil, unavailable(err)
		}
	}
	return found, bad, nil
}
