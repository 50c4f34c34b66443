package sqlitestore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// BenchmarkBatchWrites sets issue 13's two throughput targets against what SQLite alone costs on this
// machine, in one run and with no HTTP at all. The batch target is a batch of 500, claimed and reported,
// at least 20× the single-item protocol at one caller; the other, 32 callers at least 2× the floor:
//
//   - floor: the disk's naive floor (Floor: two single-row transactions per item, each fsync'd), 500
//     items per op;
//   - single: one caller claims and reports one item at a time through the ledger (two commits, each
//     fsync'd: what one caller of the service waits for, less HTTP);
//   - group16-writes: the store's writes (as batch500-writes below) of 16 claims in one commit and their 16
//     reports in another: the groups of about 15 transitions per commit the committer runs at 32 callers,
//     with nothing else of the service. No ledger on this schema does better at 32 callers;
//   - batch500: one caller claims 500 items in one call and reports them in another, through the ledger;
//   - batch500-writes: only the store's writes of those two calls, as the committer runs them (write:
//     the documents encoded, the INSERTs of the 500 claims, the 500 UPDATEs of the reports, the kept
//     counts; one commit each), with no read, no decision and nothing of the ledger's. No ledger on this
//     schema can do less per item; it is the ceiling of any batch rate here.
//
// items/s is the rate of each; cpu-µs/item the process's CPU per item. Divide a batch's items/s by
// single's, and group16-writes' by floor's, for the ratios the targets name.
//
//	go test ./items/sqlitestore -run '^$' -bench BatchWrites -benchtime 3s -count 3
func BenchmarkBatchWrites(b *testing.B) {
	ctx := context.Background()
	for _, mode := range []string{"floor", "single", "group16-writes", "batch500", "batch500-writes"} {
		b.Run(mode, func(b *testing.B) {
			s, err := Open(ctx, b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			l, err := items.NewLedger(ctx, s, items.Config{})
			if err != nil {
				b.Fatal(err)
			}
			var claimed, reported *items.Item
			if strings.HasSuffix(mode, "-writes") {
				claimed, reported = claimedAndReported(b, l, s)
			}
			n, cpu0, start := 0, cpuTime(), time.Now()
			for b.Loop() {
				switch mode {
				case "floor":
					if _, err := Floor(ctx, b.TempDir(), 500); err != nil {
						b.Fatal(err)
					}
					n += 500
				case "group16-writes":
					writeClaimsAndReports(b, s, claimed, reported, n, 16)
					n += 16
				case "single":
					claimAndReport(b, l, n, 1)
					n++
				case "batch500":
					claimAndReport(b, l, n, 500)
					n += 500
				default:
					writeClaimsAndReports(b, s, claimed, reported, n, 500)
					n += 500
				}
			}
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "items/s")
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Microsecond)/float64(n), "cpu-µs/item")
		})
	}
}

// claimedAndReported claims and reports one item of a batch through l, and returns it as each call left
// it: the shapes writeClaimsAndReports writes.
func claimedAndReported(b *testing.B, l *items.Ledger, s *Store) (claimed, reported *items.Item) {
	ctx := context.Background()
	const key = "template:i0:write:0"
	current := func() *items.Item {
		got, err := s.TransitionMany(ctx, "acme", []string{key}, func(int, *items.Item) (*items.Item, error) { return nil, nil })
		if err != nil || got[0] == nil {
			b.Fatalf("read %s: %v", key, err)
		}
		return got[0]
	}
	a, err := l.BeforeWriteMany(ctx, "acme", []items.BeforeWriteParams{{Tenant: "acme", Key: key,
		Canonical: []byte(`{"amount":1000,"customer":"cus_0000000"}`), ExecutionID: "bench-e1"}})
	if err != nil || a[0].Decision != items.Proceed {
		b.Fatalf("claim %s: %v %+v", key, err, a)
	}
	claimed = current()
	_, refused, err := l.AfterWriteMany(ctx, "acme", []items.AfterWriteParams{{Tenant: "acme", Key: key, Claim: a[0].Claim,
		Evidence: items.Evidence{Outcome: items.OutcomeSucceeded}, ExternalID: "in_0"}})
	if err != nil || refused[0] != nil {
		b.Fatalf("report %s: %v %v", key, err, refused)
	}
	reported = current()
	if claimed.State != items.StateInFlight || reported.State != items.StateSucceeded {
		b.Fatalf("template states %s, %s", claimed.State, reported.State)
	}
	return claimed, reported
}

// writeClaimsAndReports writes count new items as claimed, in one transaction, then reports them as
// reported, in another, through the committer's own write (the benchmark stands in for the idle
// committer: nothing else transitions s meanwhile).
func writeClaimsAndReports(b *testing.B, s *Store, claimed, reported *items.Item, first, count int) {
	ctx := context.Background()
	ids := make([]string, count)
	claims, reports := make(map[string]*items.Item, count), make(map[string]*items.Item, count)
	for i := range ids {
		key := fmt.Sprintf("bench:i%07d:write:0", first+i)
		c, r := *claimed, *reported
		c.Key, r.Key = key, key
		ids[i] = itemID(c.Tenant, key)
		claims[ids[i]], reports[ids[i]] = &c, &r
	}
	commit := func(found map[string]*items.Item, stored map[string]*written, next map[string]*items.Item) []*written {
		tx, err := s.w.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer tx.Rollback() //nolint:errcheck // a no-op after Commit
		rows, err := s.write(ctx, tx, found, stored, next, ids)
		if err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		s.prepareUpdates()
		return rows
	}
	rows := commit(map[string]*items.Item{}, nil, claims)
	stored := make(map[string]*written, count)
	for i, id := range ids {
		stored[id] = rows[i]
	}
	commit(claims, stored, reports)
}
