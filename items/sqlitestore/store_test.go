package sqlitestore_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
	"github.com/replaysafe/companion/items/sqlitestore"
)

func openIn(t *testing.T, dir string) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(context.Background(), dir)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return s
}

func TestConformance(t *testing.T) {
	var dirs sync.Map // *sqlitestore.Store → its directory
	itemstest.Exercise(t, func(t *testing.T) items.Store {
		dir := t.TempDir()
		s := openIn(t, dir)
		dirs.Store(s, dir)
		t.Cleanup(func() { s.Close() })
		return s
	}, itemstest.Options{DocumentBytes: func(t *testing.T, s items.Store, tenant, key string) int {
		dir, _ := dirs.Load(s)
		return docLength(t, dir.(string), tenant, key)
	}})
}

// docLength returns length(doc) of the item's row in the ledger in dir, read on a connection of its own.
func docLength(t *testing.T, dir, tenant, key string) int {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, sqlitestore.FileName)+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT length(doc) FROM items WHERE tenant = ? AND key = ?`, tenant, key).Scan(&n); err != nil {
		t.Fatalf("length(doc) of %s/%s: %v", tenant, key, err)
	}
	return n
}

// markerPayload is the payload claim fingerprints: its recipient is a marker to look for in the files.
const markerPayload = `{"invoice":"742","recipient":"marker-recipient-5521"}`

func claim(t *testing.T, l *items.Ledger, key string) items.Answer {
	t.Helper()
	canon, err := items.Canonical([]byte(markerPayload))
	if err != nil {
		t.Fatal(err)
	}
	a, err := l.BeforeWrite(context.Background(), items.BeforeWriteParams{Tenant: "acme", Key: key, Canonical: canon})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestReopenKeepsItemsAndSecret(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := openIn(t, dir)
	l, err := items.NewLedger(ctx, s, items.Config{})
	if err != nil {
		t.Fatal(err)
	}
	first := claim(t, l, "k")
	secret, err := s.LedgerSecret(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openIn(t, dir)
	t.Cleanup(func() { s.Close() })
	again, err := s.LedgerSecret(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(secret, again) {
		t.Errorf("the ledger secret changed across a re-open")
	}
	l, err = items.NewLedger(ctx, s, items.Config{})
	if err != nil {
		t.Fatal(err)
	}
	it, err := s.Get(ctx, "acme", "k")
	if err != nil {
		t.Fatalf("after a re-open: %v", err)
	}
	if it.State != items.StateInFlight || it.Claim != first.Claim || it.Version != 1 {
		t.Errorf("after a re-open: %s claim %q version %d", it.State, it.Claim, it.Version)
	}
	// The acknowledged claim holds: a replay is in progress, not a new proceed.
	replay := claim(t, l, "k")
	if replay.Decision != items.Skip || replay.Reason != items.ReasonInProgress || replay.IdempotencyKey != first.IdempotencyKey {
		t.Errorf("replay after a re-open: %s/%s key %s (first %s)", replay.Decision, replay.Reason, replay.IdempotencyKey, first.IdempotencyKey)
	}
}

// The stored fingerprint is keyed with the ledger secret, which lives in the database file: a store opened
// again keeps and recognises the same one.
func TestFingerprintStableAcrossRestarts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const payload = `{"card":"4111111111111111"}`
	s := openIn(t, dir)
	before := itemstest.KeyedFingerprint(t, s, "card", payload)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openIn(t, dir)
	t.Cleanup(func() { s.Close() })
	if after := itemstest.KeyedFingerprint(t, s, "card", payload); after != before {
		t.Fatalf("fingerprint %s before the restart, %s after", before, after)
	}
}

func TestPayloadNotInDatabaseFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := openIn(t, dir)
	l, err := items.NewLedger(ctx, s, items.Config{})
	if err != nil {
		t.Fatal(err)
	}
	claim(t, l, "k")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, sqlitestore.FileName+"*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no database files in %s: %v", dir, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("marker-recipient-5521")) {
			t.Errorf("%s holds the payload", f)
		}
		// Nor its unkeyed fingerprint, from which a guessable payload could be found again.
		if unkeyed, _ := items.Fingerprint([]byte(markerPayload)); bytes.Contains(b, []byte(unkeyed)) {
			t.Errorf("%s holds the unkeyed fingerprint of the payload", f)
		}
	}
}

func TestClosedDatabaseIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openIn(t, t.TempDir())
	l, err := items.NewLedger(ctx, s, items.Config{})
	if err != nil {
		t.Fatal(err)
	}
	claim(t, l, "k")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	called := false
	_, err = s.Transition(ctx, "acme", "new", func(*items.Item) (*items.Item, error) {
		called = true
		return nil, nil
	})
	if !errors.Is(err, items.ErrUnavailable) || called {
		t.Errorf("Transition on a closed database: %v (fn called: %v), want ErrUnavailable before deciding", err, called)
	}
	fp, _ := items.Fingerprint([]byte(`{"a":1}`))
	a, err := l.BeforeWrite(ctx, items.BeforeWriteParams{Tenant: "acme", Key: "new", Fingerprint: fp})
	if !errors.Is(err, items.ErrUnavailable) || a.Decision == items.Proceed {
		t.Errorf("BeforeWrite on a closed database: %s, %v; want ErrUnavailable and no proceed", a.Decision, err)
	}
	if items.ErrorCode(err) != items.CodeUnavailable {
		t.Errorf("error code %s", items.ErrorCode(err))
	}
	if _, err := s.Get(ctx, "acme", "k"); !errors.Is(err, items.ErrUnavailable) {
		t.Errorf("Get on a closed database: %v", err)
	}
	if _, err := s.TransitionMany(ctx, "acme", []string{"k"}, func(int, *items.Item) (*items.Item, error) { return nil, nil }); !errors.Is(err, items.ErrUnavailable) {
		t.Errorf("TransitionMany on a closed database: %v", err)
	}
	if _, err := s.LedgerSecret(ctx); !errors.Is(err, items.ErrUnavailable) {
		t.Errorf("LedgerSecret on a closed database: %v", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, items.ErrUnavailable) {
		t.Errorf("Ping on a closed database: %v", err)
	}
}

// TestWriteAheadLogStaysSmall commits far more than SQLite's checkpoint threshold in batches and checks
// that the background checkpointer kept the write-ahead log small: without checkpoints every committed
// page would still be in it, and a reader would search an ever longer log.
func TestWriteAheadLogStaysSmall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := openIn(t, dir)
	defer s.Close()
	l, err := items.NewLedger(ctx, s, items.Config{})
	if err != nil {
		t.Fatal(err)
	}
	fp, err := items.Fingerprint([]byte(`{"invoice":"742"}`))
	if err != nil {
		t.Fatal(err)
	}
	const limit = 8 << 20
	walSize := func() int64 {
		fi, err := os.Stat(filepath.Join(dir, sqlitestore.FileName+"-wal"))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	largest := int64(0)
	for round := range 80 {
		ps := make([]items.BeforeWriteParams, 500)
		for i := range ps {
			ps[i] = items.BeforeWriteParams{Tenant: "acme", Key: fmt.Sprintf("r%d-item-%d", round, i), Fingerprint: fp}
		}
		if _, err := l.BeforeWriteMany(ctx, "acme", ps); err != nil {
			t.Fatal(err)
		}
		largest = max(largest, walSize())
	}
	db, err := os.Stat(filepath.Join(dir, sqlitestore.FileName))
	if err != nil {
		t.Fatal(err)
	}
	// The database file holds what was checkpointed: more than the log may ever hold (40,000 claims are
	// about 10 MB), or the log kept it all.
	if db.Size() < limit {
		t.Errorf("the database file holds only %d bytes after 40,000 claims: the log was not copied back", db.Size())
	}
	if largest > limit {
		t.Errorf("the write-ahead log grew to %d bytes (database %d bytes); want at most %d", largest, db.Size(), limit)
	}
}

// TestCloseTwice: Close may be called again (a deferred Close after an explicit one), and answers nil.
func TestCloseTwice(t *testing.T) {
	t.Parallel()
	s := openIn(t, t.TempDir())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestASecondProcessCannotOpenTheLedger: while one store holds a data dir, a second Open of it (as a
// second companion serve would) fails at once, saying which process holds it; once the first is closed,
// the ledger opens again, and a lock file left behind by a process that ended does not stop it.
func TestASecondProcessCannotOpenTheLedger(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	first, err := sqlitestore.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sqlitestore.Open(ctx, dir)
	if !errors.Is(err, sqlitestore.ErrInUse) {
		t.Fatalf("a second Open while the first holds the ledger: %v; want ErrInUse", err)
	}
	if want := fmt.Sprintf("pid %d holds", os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Errorf("the error does not name the holder (%q): %v", want, err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, sqlitestore.LockName)); err != nil {
		t.Fatalf("the lock file: %v", err) // left behind, as after a crash
	}
	again, err := sqlitestore.Open(ctx, dir)
	if err != nil {
		t.Fatalf("Open after the first closed: %v", err)
	}
	again.Close()
}
