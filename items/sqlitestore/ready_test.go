package sqlitestore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/replaysafe/companion/internal/tmpdisk"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/sqlitestore"
)

// TestReadyFollowsAFullDisk fills the disk the ledger lives on (a 4 MB tmpfs): once a claim cannot be
// recorded the ledger is not ready, and stays so through probes while the disk is full, although the
// store's ping may still succeed; when room comes back it turns ready by itself, with no claim made, and
// claims are recorded again. A claim's answer that wrote nothing (a skip) does not turn it ready.
func TestReadyFollowsAFullDisk(t *testing.T) {
	ctx := context.Background()
	disk := tmpdisk.Mount(t, 4<<20)
	s, err := sqlitestore.Open(ctx, filepath.Join(disk, "ledger"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	l, err := items.NewLedger(ctx, s, items.Config{})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(key string) error {
		_, err := l.BeforeWrite(ctx, items.BeforeWriteParams{Tenant: "acme", Key: key, Canonical: []byte(`{"n":1}`)})
		return err
	}
	if err := claim("before"); err != nil {
		t.Fatal(err)
	}
	done, err := l.BeforeWrite(ctx, items.BeforeWriteParams{Tenant: "acme", Key: "done", Canonical: []byte(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.AfterWrite(ctx, items.AfterWriteParams{Tenant: "acme", Key: "done", Claim: done.Claim,
		Evidence: items.Evidence{Outcome: items.OutcomeSucceeded, HTTPStatus: 201}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Ready(ctx); err != nil {
		t.Fatalf("ready before the disk filled: %v", err)
	}

	free := tmpdisk.Fill(t, disk)
	refused := 0
	for i := 0; i < 200 && refused == 0; i++ {
		if err := claim(fmt.Sprintf("full-%d", i)); errors.Is(err, items.ErrUnavailable) {
			refused = i + 1
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if refused == 0 {
		t.Fatal("200 claims recorded on a full disk")
	}
	t.Logf("claim %d was the first refused; the store's ping now says %v", refused, s.Ping(ctx))
	for range 3 {
		if err := l.Ready(ctx); !errors.Is(err, items.ErrUnavailable) {
			t.Fatalf("ready on a full disk after a refused claim: %v", err)
		}
	}
	// The item done before the disk filled: its replay answers skip and writes nothing, which proves nothing.
	if ans, err := l.BeforeWrite(ctx, items.BeforeWriteParams{Tenant: "acme", Key: "done", Canonical: []byte(`{"n":1}`)}); err != nil || ans.Decision != items.Skip {
		t.Fatalf("replay of a done item: %+v, %v", ans, err)
	}
	if since, err := l.Unwritable(); err == nil || since.IsZero() {
		t.Fatal("a skip that wrote nothing turned the ledger ready")
	}

	free()
	if err := l.Ready(ctx); err != nil {
		t.Fatalf("not ready after the disk was freed, with no claim made: %v", err)
	}
	if _, err := l.Unwritable(); err != nil {
		t.Fatalf("the probe write succeeded and the ledger still holds %v", err)
	}
	if err := claim("after"); err != nil {
		t.Fatalf("claim after the disk was freed: %v", err)
	}
}
