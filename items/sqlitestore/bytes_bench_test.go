package sqlitestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/sqlitestore"
)

// BenchmarkBytesPerItem loads items through the ledger the way the service does (batches of 500 claims,
// then their 500 reports: a tenth fail with a 503 first and succeed at a second attempt, one in a hundred
// is unknown and then settled by a person, the rest succeed at once), closes the store (which
// checkpoints the write-ahead log) and reports the file's size per item, and where its bytes are (table
// and each index, from dbstat). 100k items by default; COMPANION_BYTES_ITEMS names another count (1M
// takes a few minutes):
//
//	go test ./items/sqlitestore -run '^$' -bench BytesPerItem -benchtime 1x
//	COMPANION_BYTES_ITEMS=1000000 go test ./items/sqlitestore -run '^$' -bench BytesPerItem -benchtime 1x -timeout 30m
func BenchmarkBytesPerItem(b *testing.B) {
	n := 100000
	if env := os.Getenv("COMPANION_BYTES_ITEMS"); env != "" {
		var err error
		if n, err = strconv.Atoi(env); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		dir := b.TempDir()
		start := time.Now()
		loadServiceItems(b, dir, n)
		took := time.Since(start)
		fi, err := os.Stat(filepath.Join(dir, sqlitestore.FileName))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(fi.Size())/float64(n), "bytes/item")
		b.ReportMetric(float64(n)/took.Seconds(), "items/s")
		logSpace(b, filepath.Join(dir, sqlitestore.FileName), n)
	}
}

// loadServiceItems fills a ledger in dir with n items as BenchmarkBytesPerItem describes, and closes it.
func loadServiceItems(b testing.TB, dir string, n int) {
	b.Helper()
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, dir)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 8, 0, 0, 123456789, time.UTC)
	l, err := items.NewLedger(ctx, s, items.Config{Now: func() time.Time { return now },
		Destinations: map[string]items.Destination{"billing": {Dedupe: items.DedupeKey}}})
	if err != nil {
		b.Fatal(err)
	}
	tick := func(d time.Duration) { now = now.Add(d) }
	for start := 0; start < n; start += 500 {
		exec := strconv.Itoa(48213 + start/500)
		batch := "n8n-" + exec + "-send-invoice"
		var ps []items.BeforeWriteParams
		for i := start; i < min(start+500, n); i++ {
			index := i - start
			ps = append(ps, items.BeforeWriteParams{Tenant: "acme", Key: fmt.Sprintf("invoices:inv-%07d:send:1", i),
				Canonical:   []byte(fmt.Sprintf(`{"amount":%d,"customer":"cus_%07d"}`, 1000+i%5000, i)),
				Destination: "billing", Reference: fmt.Sprintf("INV-2026-%07d", i), BatchID: batch, BatchIndex: &index,
				ExecutionID: exec})
		}
		tick(37 * time.Millisecond)
		answers, err := l.BeforeWriteMany(ctx, "acme", ps)
		if err != nil {
			b.Fatal(err)
		}
		reports := make([]items.AfterWriteParams, len(answers))
		for j, a := range answers {
			i := start + j
			reports[j] = items.AfterWriteParams{Tenant: "acme", Key: a.Key, Claim: a.Claim,
				Evidence: items.Evidence{Outcome: items.OutcomeSucceeded}, ExternalID: fmt.Sprintf("in_1Q%022d", i)}
			switch i % 100 {
			case 10, 20, 30, 40, 50, 60, 70, 80, 90, 0:
				reports[j] = items.AfterWriteParams{Tenant: "acme", Key: a.Key, Claim: a.Claim,
					Evidence: items.Evidence{Outcome: items.OutcomeFailed, HTTPStatus: 503}, ErrorMessage: "Service Unavailable"}
			case 1:
				reports[j] = items.AfterWriteParams{Tenant: "acme", Key: a.Key, Claim: a.Claim,
					Evidence: items.Evidence{Outcome: items.OutcomeUnknown, Class: items.ClassTimeout}}
			}
		}
		tick(412 * time.Millisecond)
		if _, _, err := l.AfterWriteMany(ctx, "acme", reports); err != nil {
			b.Fatal(err)
		}
		// The failed items' retry, a minute later, succeeds; the unknown ones are settled by a person.
		tick(time.Minute)
		var retries []items.BeforeWriteParams
		for j, p := range ps {
			if r := reports[j]; r.Outcome == items.OutcomeFailed {
				retries = append(retries, p)
			} else if r.Outcome == items.OutcomeUnknown {
				if _, _, err := l.Resolve(ctx, items.ResolveParams{Tenant: "acme", Key: p.Key, Outcome: items.ResolveSucceeded,
					Evidence: "found it in the billing dashboard, sent at 08:02", ExternalID: "in_1Q" + p.Key[13:20], By: "maria"}); err != nil {
					b.Fatal(err)
				}
			}
		}
		answers, err = l.BeforeWriteMany(ctx, "acme", retries)
		if err != nil {
			b.Fatal(err)
		}
		reports = reports[:0]
		for _, a := range answers {
			if a.Decision != items.Proceed {
				b.Fatalf("retry of %s: %s/%s", a.Key, a.Decision, a.Reason)
			}
			reports = append(reports, items.AfterWriteParams{Tenant: "acme", Key: a.Key, Claim: a.Claim,
				Evidence: items.Evidence{Outcome: items.OutcomeSucceeded}, ExternalID: "in_1Q" + a.Key[13:20] + "r"})
		}
		tick(388 * time.Millisecond)
		if _, _, err := l.AfterWriteMany(ctx, "acme", reports); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
}

// logSpace logs the bytes per item of every table and index of the ledger at path (dbstat).
func logSpace(b testing.TB, path string, n int) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name, sum(pgsize), sum(unused) FROM dbstat GROUP BY name ORDER BY 2 DESC`)
	if err != nil {
		b.Logf("dbstat: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var size, unused int64
		if err := rows.Scan(&name, &size, &unused); err != nil {
			b.Fatal(err)
		}
		b.Logf("%-28s %7.1f bytes/item (%4.1f%% unused)", name, float64(size)/float64(n), 100*float64(unused)/float64(max(size, 1)))
	}
	var free int64
	if err := db.QueryRow(`PRAGMA freelist_count`).Scan(&free); err == nil {
		b.Logf("%-28s %7.1f bytes/item", "free pages", float64(free*4096)/float64(n))
	}
}
