package items_test

import (
	"context"
	"testing"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/sqlitestore"
)

// BenchmarkFingerprint fingerprints the payload of BenchmarkBatchVsSingle (handlers) per item: unkeyed
// (the plain SHA-256 that ledgers stored before) and keyed (HMAC-SHA256 under the ledger secret, from
// the ledger's pool of HMACs), both with the canonical form; and the keyed fingerprint alone of an
// already canonical form, as a batch's KeyFingerprints does it.
func BenchmarkFingerprint(b *testing.B) {
	payload := []byte(`{"invoice":"742","recipient":"c-742","amount":120.5}`)
	s, err := sqlitestore.Open(context.Background(), b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	l, err := items.NewLedger(context.Background(), s, items.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("unkeyed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := items.Fingerprint(payload); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("keyed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := l.Fingerprint(payload); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("keyed-batch-of-500", func(b *testing.B) {
		canon, err := items.Canonical(payload)
		if err != nil {
			b.Fatal(err)
		}
		ps := make([]items.BeforeWriteParams, 500)
		b.ReportAllocs()
		for b.Loop() {
			for i := range ps {
				ps[i] = items.BeforeWriteParams{Canonical: canon}
			}
			l.KeyFingerprints(ps)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ps)), "ns/item")
	})
}
