package items_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/sqlitestore"
)

// A derived key is the same for every ledger on one store (so that every replica opens what another
// sealed), differs between purposes, and is neither an idempotency key nor a fingerprint of the secret.
func TestDeriveKeyIsTheStoresAndThePurposes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := sqlitestore.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	a, err := items.NewLedger(ctx, s, items.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := items.NewLedger(ctx, s, items.Config{})
	if err != nil {
		t.Fatal(err)
	}
	k := a.DeriveKey("console sessions v1")
	if len(k) != 32 || !bytes.Equal(k, b.DeriveKey("console sessions v1")) {
		t.Fatalf("two ledgers on one store derive %x and %x", k, b.DeriveKey("console sessions v1"))
	}
	if bytes.Equal(k, a.DeriveKey("console sessions v2")) {
		t.Fatal("two purposes derive the same key")
	}
	s.Close()
	other, err := sqlitestore.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	c, err := items.NewLedger(ctx, other, items.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(k, c.DeriveKey("console sessions v1")) {
		t.Fatal("the ledgers of two stores derive the same key")
	}
}
