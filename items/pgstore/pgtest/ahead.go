package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Ahead makes the things a test suite opens on a schema of its own (a store) before the tests ask for
// them, some at once, so that their setup (on PostgreSQL most of a short subtest's time: the migration's
// DDL) overlaps the tests instead of running between them; and drops the schemas of the things the tests
// are done with in the background. A suite makes one in its TestMain and calls Wait there before it exits.
type Ahead[T any] struct {
	make  func(ctx context.Context, url, schema string) (T, error)
	close func(T)
	ready chan made[T]
	start sync.Once
	url   string
	drops sync.WaitGroup
	stop  chan struct{}
	runs  sync.WaitGroup
}

type made[T any] struct {
	v      T
	schema string
	err    error
}

// NewAhead returns an Ahead that makes each thing with mk on a new schema, and closes it with cl.
func NewAhead[T any](mk func(ctx context.Context, url, schema string) (T, error), cl func(T)) *Ahead[T] {
	return &Ahead[T]{make: mk, close: cl, ready: make(chan made[T], 4), stop: make(chan struct{})}
}

// Take returns a thing made ahead on a schema of its own, closed and its schema dropped when t ends (the
// drop in the background). Without COMPANION_TEST_POSTGRES_URL it skips t (fails it in CI), as URL does.
func (a *Ahead[T]) Take(t testing.TB) T {
	t.Helper()
	url := URL(t)
	a.start.Do(func() {
		a.url = url
		for range 3 {
			a.runs.Add(1)
			go a.run()
		}
	})
	m := <-a.ready
	if m.err != nil {
		t.Fatal(m.err)
	}
	t.Cleanup(func() {
		a.close(m.v)
		a.drop(m.schema)
	})
	return m.v
}

func (a *Ahead[T]) run() {
	defer a.runs.Done()
	for {
		schema := newSchemaName()
		v, err := a.make(context.Background(), a.url, schema)
		select {
		case a.ready <- made[T]{v: v, schema: schema, err: err}:
		case <-a.stop:
			if err == nil {
				a.close(v)
			}
			a.drop(schema)
			return
		}
	}
}

// drop drops a schema in the background.
func (a *Ahead[T]) drop(schema string) {
	a.drops.Add(1)
	go func() {
		defer a.drops.Done()
		dropSchema(a.url, schema)
	}()
}

// Wait stops making things, drops what was made and not taken, and waits for every drop to end.
func (a *Ahead[T]) Wait() {
	close(a.stop)
	a.runs.Wait()
	for {
		select {
		case m := <-a.ready:
			if m.err == nil {
				a.close(m.v)
			}
			a.drop(m.schema)
			continue
		default:
		}
		break
	}
	a.drops.Wait()
}

func newSchemaName() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "companion_test_" + hex.EncodeToString(b)
}

func dropSchema(url, schema string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	return err
}
