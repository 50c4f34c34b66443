package mongostore

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// retriedItem is an item as a ledger holds it after a retryable failure and a retry that succeeded: two
// attempts, eight events.
func retriedItem() *items.Item {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	fp := strings.Repeat("a", 64)
	it := &items.Item{Tenant: "acme", Key: "invoice-742", Workflow: "billing-sync", Destination: "billing", Dedupe: items.DedupeKey,
		Fingerprint: fp, State: items.StateSucceeded, Attempt: 2, ExternalID: "r-2", CreatedAt: at, UpdatedAt: at.Add(2 * time.Minute)}
	for n := 1; n <= 2; n++ {
		start, end := at.Add(time.Duration(n)*time.Minute), at.Add(time.Duration(n)*time.Minute+time.Second)
		outcome, status := items.StateFailed, 429
		if n == 2 {
			outcome, status = items.StateSucceeded, 201
		}
		it.Attempts = append(it.Attempts, items.Attempt{Number: n, Claim: fmt.Sprintf("claim-%d", n), Dedupe: items.DedupeKey, Fingerprint: fp,
			StartedAt: start, EndedAt: &end, Outcome: outcome, HTTPStatus: status, Reports: []string{strings.Repeat("d", 16)}})
		it.History = append(it.History,
			items.Event{At: start, Kind: items.EventClaimed, Attempt: n, Decision: items.Proceed, Reason: items.ReasonRetrySameKey, To: items.StateInFlight, Fingerprint: fp},
			items.Event{At: end, Kind: items.EventAfterWrite, Attempt: n, From: items.StateInFlight, To: outcome, HTTPStatus: status},
			items.Event{At: end, Kind: items.EventAfterWrite, Attempt: n, From: outcome, To: outcome, HTTPStatus: status, Note: "a repeated report"},
			items.Event{At: end, Kind: items.EventAfterWrite, Attempt: n, From: outcome, To: outcome, HTTPStatus: status, Note: "another repeat"})
	}
	return it
}

// BenchmarkWriteFactsAndCounts measures what a transition's write does in the process besides the round
// trip, for an item of two attempts and eight events (retriedItem) written over itself: the document and
// its entries of the kept counts (prepare), the next item's facts derived once for both.
//
//	go test ./items/mongostore -run '^$' -bench WriteFactsAndCounts -benchmem
func BenchmarkWriteFactsAndCounts(b *testing.B) {
	it := retriedItem()
	cur := toDoc(it, it.Facts())
	s := &Store{clock: time.Now}
	for b.Loop() {
		_ = s.prepare(&cur, decided(cur.item()))
	}
}
