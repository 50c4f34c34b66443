package itemstest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// exerciseProbes holds a store to ClaimProbe's contract: one claim per item, attempt and read at a time,
// and only while the item is unknown at that attempt; and to ReleaseProbe's: only the claim's holder gives
// it back, and the read is then claimable at once.
func exerciseProbes(t *testing.T, open func(t *testing.T) OperatorStore, opts Options) {
	claim := func(h *opsHarness, key string, attempt, read int, who string, hold time.Duration) bool {
		t.Helper()
		ok, err := h.ops.ClaimProbe(h.ctx, items.ProbeClaim{Tenant: h.tenant, Key: key, Attempt: attempt, Read: read,
			Claim: who, Now: h.now(), Until: h.now().Add(hold)})
		if err != nil {
			t.Fatalf("ClaimProbe(%s, attempt %d, read %d): %v", key, attempt, read, err)
		}
		return ok
	}

	t.Run("OneClaimPerReadUntilItEnds", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		h.unknownAfterTimeout("k", dest(destSearchable))
		if !claim(h, "k", 1, 1, "p-a", 30*time.Second) {
			t.Fatal("the first claim of read 1 was refused")
		}
		if claim(h, "k", 1, 1, "p-b", 30*time.Second) {
			t.Error("a second claim of read 1 won while the first was live")
		}
		if !claim(h, "k", 1, 2, "p-b", 30*time.Second) {
			t.Error("read 2 was refused: claims are per read")
		}
		if claim(&opsHarness{harness: h.as(tenantB), ops: h.ops}, "k", 1, 1, "p-c", 30*time.Second) {
			t.Error("another tenant's claim won for an item it does not have")
		}
		h.advance(30 * time.Second)
		if !claim(h, "k", 1, 1, "p-c", 30*time.Second) {
			t.Error("read 1 was refused after its claim ended: a crashed prober would hold it forever")
		}
	})

	t.Run("ReleaseOnlyByItsHolder", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		h.unknownAfterTimeout("k", dest(destSearchable))
		release := func(attempt, read int, who string) bool {
			t.Helper()
			ok, err := h.ops.ReleaseProbe(h.ctx, items.ProbeClaim{Tenant: h.tenant, Key: "k", Attempt: attempt, Read: read, Claim: who})
			if err != nil {
				t.Fatalf("ReleaseProbe(attempt %d, read %d, %s): %v", attempt, read, who, err)
			}
			return ok
		}
		if release(1, 1, "p-a") {
			t.Error("a read nobody claimed was given back")
		}
		if !claim(h, "k", 1, 1, "p-a", time.Minute) || !claim(h, "k", 1, 2, "p-a", time.Minute) {
			t.Fatal("the first claims of reads 1 and 2 were refused")
		}
		if release(1, 1, "p-b") || release(1, 3, "p-a") || release(2, 1, "p-a") {
			t.Error("a claim was given back by another token, or for another read or attempt")
		}
		if claim(h, "k", 1, 1, "p-b", time.Minute) {
			t.Fatal("read 1 was claimed while p-a held it: a wrong release freed it")
		}
		if !release(1, 1, "p-a") {
			t.Fatal("p-a could not give back its own claim of read 1")
		}
		if release(1, 1, "p-a") {
			t.Error("a claim was given back twice")
		}
		if !claim(h, "k", 1, 1, "p-b", time.Minute) {
			t.Error("read 1 was refused at once after its holder gave it back")
		}
		if claim(h, "k", 1, 2, "p-b", time.Minute) {
			t.Error("read 2 was claimed while p-a held it: giving back read 1 freed read 2")
		}
		// p-a's claim of read 2 runs out and p-c takes it over: p-a, late, gives back nothing of p-c's.
		h.advance(time.Minute)
		if !claim(h, "k", 1, 2, "p-c", time.Minute) {
			t.Fatal("read 2 was refused after its claim ran out")
		}
		if release(1, 2, "p-a") {
			t.Error("a claim that ran out and was taken over was given back by its old holder")
		}
		if claim(h, "k", 1, 2, "p-d", time.Minute) {
			t.Error("read 2 was claimed while p-c held it: the old holder's release freed it")
		}
	})

	t.Run("OnlyWhileUnknownAtTheAttempt", func(t *testing.T) {
		t.Parallel()
		h := newOpsHarness(t, open)
		h.claim("in-flight", payloadA, dest(destSearchable))
		if claim(h, "in-flight", 1, 1, "p-a", time.Minute) {
			t.Error("a probe was claimed for an item under a live lease")
		}
		h.unknownAfterTimeout("unknown", dest(destSearchable))
		if claim(h, "unknown", 2, 1, "p-a", time.Minute) {
			t.Error("a probe was claimed for an attempt the item is not at")
		}
		if claim(h, "missing", 1, 1, "p-a", time.Minute) {
			t.Error("a probe was claimed for a missing item")
		}
		if _, err := h.reconcile("unknown", items.FindingFound, "rec-1", "found it in the destination"); err != nil {
			t.Fatal(err)
		}
		if claim(h, "unknown", 1, 1, "p-a", time.Minute) {
			t.Error("a probe was claimed for a settled item")
		}
	})

	t.Run("ConcurrentClaimsOneWinner", func(t *testing.T) {
		if opts.SkipConcurrency != "" {
			t.Skip(opts.SkipConcurrency)
		}
		t.Parallel()
		h := newOpsHarness(t, open)
		h.unknownAfterTimeout("k", dest(destSearchable))
		var mu sync.Mutex
		winners := 0
		race(8, func(i int) {
			ok, err := h.ops.ClaimProbe(h.ctx, items.ProbeClaim{Tenant: tenantA, Key: "k", Attempt: 1, Read: 1,
				Claim: fmt.Sprintf("p%d", i), Now: h.now(), Until: h.now().Add(time.Minute)})
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if ok {
				winners++
			}
		})
		if winners != 1 {
			t.Errorf("8 concurrent claims of one read: %d won, want 1", winners)
		}
	})
}
