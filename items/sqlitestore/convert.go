package sqlitestore

import (
	"context"
	"log/slog"
	"strings"
	"time"
)

// Conversion. Builds before this one kept items keyed by (tenant, key), every index repeating the key,
// with the whole item in each row as JSON (about 2.5 kB an item on disk). At start, Open converts such a
// ledger to this layout (schema, stored.go): it copies the items into a new table in batches of
// convertBatchSize, one transaction each, in the order of the old table's rowids, which the new table keeps
// as its ids; then, in one transaction, it drops the old table and gives the new one its name, and the
// indexes are built. A conversion interrupted (a crash, a kill) resumes where its last committed batch
// ended: the new table's largest id says where that is; if an earlier build ran on the ledger in between
// and changed an item already copied, it starts again. Until the rename, the old table is intact; after
// it, the old table is gone. An item whose document cannot be read (or is stored under another key) is
// copied as it was, JSON, and stays listed as unreadable, as before.

// convertBatchSize is how many items one transaction of a conversion copies (Store.convertBatchSize).
const convertBatchSize = 5000

// convertingTable is the table a conversion fills.
const convertingTable = "items_converted"

// Option configures Open.
type Option func(*Store)

// WithLogger names where Open logs a conversion's progress (slog.Default() otherwise).
func WithLogger(l *slog.Logger) Option { return func(s *Store) { s.log = l } }

// WithItemCache bounds the committer's cache of the items it wrote (cache.go) to n items; 0 turns it off.
// The default is DefaultItemCache.
func WithItemCache(n int) Option { return func(s *Store) { s.cacheItems = max(n, 0) } }

// oldLayout reports whether the ledger holds an items table of the earlier layout (no id column).
func (s *Store) oldLayout(ctx context.Context) (bool, error) {
	table, err := s.hasSchemaObject(ctx, "table", "items")
	if err != nil {
		return false, err
	}
	id, err := s.hasColumn(ctx, "items", "id")
	return table && !id, err
}

// convert converts a ledger of the earlier layout, if this is one (see the top of this file).
// It reports whether it converted one.
func (s *Store) convert(ctx context.Context) (bool, error) {
	old, err := s.oldLayout(ctx)
	if err != nil || !old {
		return false, err
	}
	if err := s.migrateExecutionID(ctx); err != nil {
		return false, err
	}
	// A larger page cache for the copy, the indexes and the rewrite (migrate sets it back).
	if _, err := s.w.ExecContext(ctx, `PRAGMA cache_size = -65536`); err != nil {
		return false, err
	}
	if _, err := s.w.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+convertingTable+` (`+itemsTable+`)`); err != nil {
		return false, err
	}
	// An earlier build that opened the ledger between two attempts at converting it (a rollback) may have
	// changed or removed items already copied: then the copy starts again. Every change of an item moves
	// its version, and a removed item leaves its copy without its row.
	var stale int64
	if err := s.w.QueryRowContext(ctx, `SELECT count(*) FROM `+convertingTable+` AS n LEFT JOIN items AS o ON o.rowid = n.id
		WHERE o.rowid IS NULL OR o.tenant != n.tenant OR o.key != n.key OR o.version != n.version`).Scan(&stale); err != nil {
		return false, err
	}
	if stale > 0 {
		s.log.Warn("the ledger changed since its conversion was interrupted (an earlier build ran on it): converting it from the start",
			"changed_items", stale)
		if _, err := s.w.ExecContext(ctx, `DELETE FROM `+convertingTable); err != nil {
			return false, err
		}
	}
	var total, done int64
	if err := s.w.QueryRowContext(ctx, `SELECT count(*) FROM items`).Scan(&total); err != nil {
		return false, err
	}
	if err := s.w.QueryRowContext(ctx, `SELECT count(*) FROM `+convertingTable).Scan(&done); err != nil {
		return false, err
	}
	start := time.Now()
	s.log.Info("converting the ledger to the compact layout: the items are copied, then the old table is dropped",
		"path", s.path, "items", total, "already_converted", done)
	lastLog := start
	for {
		n, err := s.convertBatch(ctx)
		if err != nil {
			return false, err
		}
		if n == 0 {
			break
		}
		done += int64(n)
		if time.Since(lastLog) >= 5*time.Second {
			lastLog = time.Now()
			s.log.Info("converting the ledger", "converted", done, "items", total, "took", time.Since(start).Round(time.Second).String())
		}
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `DROP TABLE items; ALTER TABLE `+convertingTable+` RENAME TO items;
		CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);
		INSERT INTO meta (name, value) VALUES ('`+spacePending+`', 1) ON CONFLICT DO NOTHING`); err != nil {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, err
	}
	s.log.Info("converted the ledger to the compact layout; building its indexes", "items", done,
		"took", time.Since(start).Round(time.Millisecond).String())
	return true, nil
}

// convertColumns are the columns a conversion writes: the id, then itemColumns.
var convertColumns = "id, " + strings.Join(itemColumns, ", ")

// convertBatch copies the next convertBatchSize items of the old table, in one transaction, and returns how
// many it copied (0: all are).
func (s *Store) convertBatch(ctx context.Context) (int, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	var last int64
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(id), 0) FROM `+convertingTable).Scan(&last); err != nil {
		return 0, err
	}
	type oldRow struct {
		id          int64
		tenant, key string
		doc         []byte
	}
	var batch []oldRow
	rows, err := tx.QueryContext(ctx, `SELECT rowid, tenant, key, doc FROM items WHERE rowid > ? ORDER BY rowid LIMIT ?`, last, s.convertBatchSize)
	if err != nil {
		return 0, err
	}
	for rows.Next() {
		var r oldRow
		if err := rows.Scan(&r.id, &r.tenant, &r.key, &r.doc); err != nil {
			rows.Close()
			return 0, err
		}
		batch = append(batch, r)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	rows.Close()
	if len(batch) == 0 {
		return 0, nil
	}
	insert, err := tx.PrepareContext(ctx, `INSERT INTO `+convertingTable+` (`+convertColumns+`) VALUES (?`+strings.Repeat(", ?", len(itemColumns))+`)`)
	if err != nil {
		return 0, err
	}
	defer insert.Close()
	copyAsIs, err := tx.PrepareContext(ctx, `INSERT INTO `+convertingTable+` (`+convertColumns+`) SELECT rowid, `+
		strings.Join(itemColumns, ", ")+` FROM items WHERE rowid = ?`)
	if err != nil {
		return 0, err
	}
	defer copyAsIs.Close()
	var buf []byte
	args := make([]any, 0, len(itemColumns)+1)
	for _, r := range batch {
		it, err := decodeJSON(r.doc)
		var doc []byte
		if err == nil && it.Tenant == r.tenant && it.Key == r.key {
			doc, buf, err = document(buf, it)
		}
		if err != nil || it.Tenant != r.tenant || it.Key != r.key {
			// Unreadable: kept as it was, for a person to look at.
			if _, err := copyAsIs.ExecContext(ctx, r.id); err != nil {
				return 0, err
			}
			continue
		}
		args = appendColumns(append(args[:0], r.id), it, doc)
		if _, err := insert.ExecContext(ctx, args...); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return len(batch), nil
}

// spacePending marks, in meta, a ledger whose conversion is done but whose file still holds the old
// layout's pages (giveBackSpace removes it).
const spacePending = "converted_space_pending"

// giveBackSpace returns the pages the old table of a conversion left free to the file system, if a
// conversion left them (spacePending). The new table and its indexes were written after the old table's
// pages, at the end of the file, so the file is rewritten once (VACUUM: faster than moving the new pages
// one by one, as an incremental vacuum would); the rewrite also turns incremental auto-vacuum on where an
// older ledger lacked it, so that retention gives space back from then on. Interrupted, it is done again
// at the next start.
func (s *Store) giveBackSpace(ctx context.Context) error {
	var pending int
	if err := s.w.QueryRowContext(ctx, `SELECT count(*) FROM meta WHERE name = ?`, spacePending).Scan(&pending); err != nil || pending == 0 {
		return err
	}
	var free int64
	if err := s.w.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&free); err != nil {
		return err
	}
	start := time.Now()
	s.log.Info("giving the space of the old layout back to the file system (VACUUM)", "free_pages", free)
	// The copy VACUUM makes goes to a temporary file, not to memory (temp_store): it is the ledger's size.
	if _, err := s.w.ExecContext(ctx, `PRAGMA temp_store = FILE; PRAGMA auto_vacuum = INCREMENTAL; VACUUM; PRAGMA temp_store = MEMORY`); err != nil {
		return err
	}
	if _, err := s.w.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE); DELETE FROM meta WHERE name = ?`, spacePending); err != nil {
		return err
	}
	s.log.Info("gave the space of the old layout back to the file system", "pages", free,
		"took", time.Since(start).Round(time.Millisecond).String())
	return nil
}
