package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// FloorResult is what Floor measured.
type FloorResult struct {
	Items, Callers int
	Took           time.Duration
	// Commits are the durations of the single-statement transactions, two per item.
	Commits []time.Duration
}

// Floor measures the rival a user would otherwise write on this server: a hand-made table, and per item
// an INSERT … ON CONFLICT DO NOTHING to claim it, then an UPDATE to record it, each its own transaction,
// through pgx, from callers at once, without HTTP. `companion bench --floor postgres` sets a deployment
// against it. The table (floor_<random>, in schema, which is created when missing) is dropped at the end.
func Floor(ctx context.Context, connString, schema string, n, callers int) (FloorResult, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return FloorResult{}, parseError(err)
	}
	cfg.MaxConns, cfg.MinConns = int32(callers), int32(callers)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return FloorResult{}, parseError(err)
	}
	defer pool.Close()
	if schema == "" {
		schema = DefaultSchema
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	table := quoteSchema(schema) + ".floor_" + hex.EncodeToString(b)
	if _, err := pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+quoteSchema(schema)); err != nil {
		return FloorResult{}, fmt.Errorf("floor: %w", interpretError(err))
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (key text PRIMARY KEY, state text NOT NULL, doc text NOT NULL)`); err != nil {
		return FloorResult{}, fmt.Errorf("floor: %w", interpretError(err))
	}
	defer pool.Exec(context.WithoutCancel(ctx), `DROP TABLE `+table) //nolint:errcheck // a table left behind only takes room
	claim := `INSERT INTO ` + table + ` (key, state, doc) VALUES ($1, 'in_flight', $2) ON CONFLICT DO NOTHING`
	record := `UPDATE ` + table + ` SET state = 'succeeded', doc = $2 WHERE key = $1`
	doc := strings.Repeat("0", 400) // about a claimed item's document
	res := FloorResult{Items: n, Callers: callers, Commits: make([]time.Duration, 0, 2*n)}
	var next atomic.Int64
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	start := time.Now()
	for range callers {
		wg.Go(func() {
			commits := make([]time.Duration, 0, 2*n/callers+2)
			defer func() {
				mu.Lock()
				res.Commits = append(res.Commits, commits...)
				mu.Unlock()
			}()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				key := fmt.Sprintf("floor-%08d", i)
				for _, sql := range []string{claim, record} {
					began := time.Now()
					if _, err := pool.Exec(ctx, sql, key, doc); err != nil {
						mu.Lock()
						first = cmpOr(first, err)
						mu.Unlock()
						return
					}
					commits = append(commits, time.Since(began))
				}
			}
		})
	}
	wg.Wait()
	res.Took = time.Since(start)
	if first != nil {
		return res, fmt.Errorf("floor: %w", interpretError(first))
	}
	return res, nil
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
