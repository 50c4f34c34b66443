package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// FloorResult is what Floor measured.
type FloorResult struct {
	Items int
	Took  time.Duration
	// Commits are the durations of the single-row transactions, two per item, in the order they ran.
	Commits []time.Duration
}

// ItemsPerSecond is the floor's rate.
func (r FloorResult) ItemsPerSecond() float64 {
	if r.Took <= 0 {
		return 0
	}
	return float64(r.Items) / r.Took.Seconds()
}

// Floor measures the naive floor of the disk under dir: per item, two single-row transactions through
// database/sql on SQLite with the store's settings (WAL, synchronous=FULL), the first inserting a row,
// the second updating it, each committed and fsynced on its own, one after the other. It is what a
// ledger that wrote a claim and a report each in its own transaction, without HTTP, could at best do on
// that disk: `companion bench --floor` compares a deployment against it. The file it writes in dir is
// removed at the end.
func Floor(ctx context.Context, dir string, n int) (FloorResult, error) {
	f, err := os.CreateTemp(dir, "companion-floor-*.db")
	if err != nil {
		return FloorResult{}, fmt.Errorf("floor: %w", err)
	}
	path := f.Name()
	f.Close()
	defer func() {
		for _, suffix := range []string{"", "-wal", "-shm"} {
			_ = os.Remove(path + suffix)
		}
	}()
	q := url.Values{}
	for _, p := range []string{"journal_mode(WAL)", "synchronous(FULL)", "busy_timeout(10000)"} {
		q.Add("_pragma", p)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.ToSlash(path)+"?"+q.Encode())
	if err != nil {
		return FloorResult{}, fmt.Errorf("floor: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `CREATE TABLE floor (key TEXT PRIMARY KEY, state TEXT NOT NULL, doc TEXT NOT NULL)`); err != nil {
		return FloorResult{}, fmt.Errorf("floor: %w", err)
	}
	doc := fmt.Sprintf("%0400d", 0) // about a claimed item's document
	res := FloorResult{Items: n, Commits: make([]time.Duration, 0, 2*n)}
	commit := func(stmt string, args ...any) error {
		start := time.Now()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, stmt, args...); err != nil {
			_ = tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		res.Commits = append(res.Commits, time.Since(start))
		return nil
	}
	start := time.Now()
	for i := range n {
		key := fmt.Sprintf("floor-%08d", i)
		if err := commit(`INSERT INTO floor (key, state, doc) VALUES (?, 'in_flight', ?)`, key, doc); err != nil {
			return res, fmt.Errorf("floor: %w", err)
		}
		if err := commit(`UPDATE floor SET state = 'succeeded', doc = ? WHERE key = ?`, doc, key); err != nil {
			return res, fmt.Errorf("floor: %w", err)
		}
	}
	res.Took = time.Since(start)
	return res, nil
}
