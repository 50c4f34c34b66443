package itemstest

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// exerciseFingerprints checks the keyed fingerprints (API.md, additions: "Fingerprints are keyed"), and
// that items stored before them, with the unkeyed SHA-256, keep deciding as they did.
func exerciseFingerprints(t *testing.T, open func(t *testing.T) items.Store) {
	t.Run("StoredFingerprintIsKeyed", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		// The example: a card number, a payload anyone could guess and hash.
		const card = `{"card": "4111111111111111"}`
		h.claim("card", card)
		it := h.item("card")
		wantFP := keyedHex(t, h.store, card)
		if it.Fingerprint != wantFP || it.Attempts[0].Fingerprint != wantFP || it.History[0].Fingerprint != wantFP {
			t.Errorf("stored fingerprint %s (attempt %s, history %s), want HMAC-SHA256(ledger secret, canonical form) %s",
				it.Fingerprint, it.Attempts[0].Fingerprint, it.History[0].Fingerprint, wantFP)
		}
		if unkeyed := unkeyedHex(t, card); it.Fingerprint == unkeyed {
			t.Errorf("stored fingerprint %s is the plain SHA-256 of the canonical form", it.Fingerprint)
		}
		// The same payload, members in another order: the same intent.
		h.checkAnswer("card", h.bw("card", `{ "card":"4111111111111111" }`),
			want{Decision: items.Skip, Reason: items.ReasonInProgress, State: items.StateInFlight, Attempt: 1, RetryAfter: 300})
		h.checkAnswer("card", h.bw("card", `{"card": "4111111111111112"}`),
			want{Decision: items.Conflict, Reason: items.ReasonFingerprintMismatch, State: items.StateInFlight, Attempt: 1})
		// A batch keys its items as a single before-write does.
		answers, err := h.ledger.BeforeWriteMany(h.ctx, tenantA, []items.BeforeWriteParams{
			{Tenant: tenantA, Key: "card-2", Canonical: canonical(t, card)},
			{Tenant: tenantA, Key: "card", Canonical: canonical(t, card)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if answers[0].Decision != items.Proceed || answers[1].Decision != items.Skip || answers[1].Reason != items.ReasonInProgress {
			t.Errorf("batch answers %s/%s %s/%s, want proceed/new skip/in_progress", answers[0].Decision, answers[0].Reason,
				answers[1].Decision, answers[1].Reason)
		}
		if got := h.item("card-2").Fingerprint; got != wantFP {
			t.Errorf("a batch stored fingerprint %s, want %s", got, wantFP)
		}
	})

	// An item stored before fingerprints were keyed holds the unkeyed SHA-256 of the canonical form. The
	// same payload still answers as it did (skip/succeeded, skip/in_progress), a changed one is still a
	// conflict, and the item keeps its fingerprint until a new attempt replaces it with the keyed one.
	t.Run("UnkeyedFingerprintOfAnOldItemStillDecides", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, open)
		// Written as the ledger wrote before the change: the fingerprint is the unkeyed one.
		old := func(key string) items.Answer {
			t.Helper()
			a, err := h.ledger.BeforeWrite(h.ctx, items.BeforeWriteParams{Tenant: tenantA, Key: key, Fingerprint: unkeyedHex(t, payloadA)})
			if err != nil || a.Decision != items.Proceed {
				t.Fatalf("old claim of %s: %s/%s %v", key, a.Decision, a.Reason, err)
			}
			if got := h.item(key).Fingerprint; got != unkeyedHex(t, payloadA) {
				t.Fatalf("the old item stores %s, want the unkeyed fingerprint", got)
			}
			return a
		}

		h.aw("done", succeeded(old("done").Claim, "r-1"))
		before := h.item("done")
		a := h.bw("done", payloadA)
		h.checkAnswer("done", a, want{Decision: items.Skip, Reason: items.ReasonSucceeded, State: items.StateSucceeded, Attempt: 1})
		if a.ExternalID != "r-1" {
			t.Errorf("skip/succeeded without the stored external id: %+v", a)
		}
		h.checkAnswer("done", h.bw("done", payloadA2), want{Decision: items.Skip, Reason: items.ReasonSucceeded, State: items.StateSucceeded, Attempt: 1})
		h.checkAnswer("done", h.bw("done", payloadB), want{Decision: items.Conflict, Reason: items.ReasonFingerprintMismatch,
			State: items.StateSucceeded, Attempt: 1})
		h.checkUnchanged("done", before)

		old("flying")
		h.checkAnswer("flying", h.bw("flying", payloadA), want{Decision: items.Skip, Reason: items.ReasonInProgress,
			State: items.StateInFlight, Attempt: 1, RetryAfter: 300})
		h.checkAnswer("flying", h.bw("flying", payloadB), want{Decision: items.Conflict, Reason: items.ReasonFingerprintMismatch,
			State: items.StateInFlight, Attempt: 1})

		// A batch decides old items the same way.
		answers, err := h.ledger.BeforeWriteMany(h.ctx, tenantA, []items.BeforeWriteParams{h.params("done", payloadA), h.params("done", payloadB)})
		if err != nil {
			t.Fatal(err)
		}
		if answers[0].Reason != items.ReasonSucceeded || answers[1].Reason != items.ReasonFingerprintMismatch {
			t.Errorf("batch over the old item: %s/%s %s/%s, want skip/succeeded conflict/fingerprint_mismatch",
				answers[0].Decision, answers[0].Reason, answers[1].Decision, answers[1].Reason)
		}

		// A retry of an old item with the same payload is a new attempt: from then on the keyed fingerprint.
		h.aw("retried", failedClass(old("retried").Claim, items.ClassConnectionRefused))
		h.advance(time.Hour)
		h.checkAnswer("retried", h.bw("retried", payloadA), want{Decision: items.Proceed, Reason: items.ReasonRetry,
			State: items.StateInFlight, Attempt: 2})
		it := h.item("retried")
		if it.Fingerprint != h.fingerprint(payloadA) || it.Attempts[0].Fingerprint != unkeyedHex(t, payloadA) {
			t.Errorf("after the retry: fingerprint %s, first attempt %s; want the keyed one now, the old one kept in the attempt",
				it.Fingerprint, it.Attempts[0].Fingerprint)
		}
		h.checkAnswer("retried", h.bw("retried", payloadB), want{Decision: items.Conflict, Reason: items.ReasonFingerprintMismatch,
			State: items.StateInFlight, Attempt: 2})
	})
}

// KeyedFingerprint checks the fingerprint a ledger over store keeps for payload under key, and returns
// it. If nothing is stored under key it claims key first. It checks that the stored fingerprint is
// HMAC-SHA256(the store's ledger secret, canonical form), differs from the plain SHA-256 of the canonical
// form, and that a ledger over store recognises the payload (skip/in_progress, members reordered too) and
// refuses a changed one (conflict). Call it on stores that share one ledger (the same store reopened, two
// replicas on one database) and compare what it returns.
func KeyedFingerprint(t *testing.T, store items.Store, key, payload string) string {
	t.Helper()
	ctx := context.Background()
	l, err := items.NewLedger(ctx, store, items.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get(ctx, tenantA, key); err != nil {
		a, err := l.BeforeWrite(ctx, items.BeforeWriteParams{Tenant: tenantA, Key: key, Canonical: canonical(t, payload)})
		if err != nil || a.Decision != items.Proceed {
			t.Fatalf("claim %s: %s/%s %v", key, a.Decision, a.Reason, err)
		}
	}
	it, err := store.Get(ctx, tenantA, key)
	if err != nil {
		t.Fatal(err)
	}
	if want := keyedHex(t, store, payload); it.Fingerprint != want {
		t.Errorf("stored fingerprint %s, want HMAC-SHA256(ledger secret, canonical form) %s", it.Fingerprint, want)
	}
	if it.Fingerprint == unkeyedHex(t, payload) {
		t.Errorf("stored fingerprint %s is the plain SHA-256 of the canonical form", it.Fingerprint)
	}
	if got, err := l.Fingerprint([]byte(payload)); err != nil || got != it.Fingerprint {
		t.Errorf("Ledger.Fingerprint = %s, %v; stored %s", got, err, it.Fingerprint)
	}
	ask := func(payload string) items.Answer {
		t.Helper()
		a, err := l.BeforeWrite(ctx, items.BeforeWriteParams{Tenant: tenantA, Key: key, Canonical: canonical(t, payload)})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	if a := ask(" " + payload + " "); a.Decision != items.Skip || a.Reason != items.ReasonInProgress {
		t.Errorf("the same payload: %s/%s, want skip/in_progress", a.Decision, a.Reason)
	}
	if a := ask(`{"changed":true}`); a.Decision != items.Conflict || a.Reason != items.ReasonFingerprintMismatch {
		t.Errorf("a changed payload: %s/%s, want conflict/fingerprint_mismatch", a.Decision, a.Reason)
	}
	return it.Fingerprint
}

// keyedHex computes the contract's keyed fingerprint of payload independently of the ledger.
func keyedHex(t *testing.T, store items.Store, payload string) string {
	t.Helper()
	secret, err := store.LedgerSecret(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, secret)
	m.Write(canonical(t, payload))
	return hex.EncodeToString(m.Sum(nil))
}

// unkeyedHex is the fingerprint ledgers stored before fingerprints were keyed: the plain SHA-256.
func unkeyedHex(t *testing.T, payload string) string {
	t.Helper()
	sum := sha256.Sum256(canonical(t, payload))
	return hex.EncodeToString(sum[:])
}
