package handlers_test

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
)

// asServed runs the garbage collector as companion serve does: at handlers.GCPercent unless GOGC is set
// (GOGC=100 go test … measures at Go's default).
func asServed(b *testing.B) {
	if os.Getenv("GOGC") == "" {
		old := debug.SetGCPercent(handlers.GCPercent)
		b.Cleanup(func() { debug.SetGCPercent(old) })
	}
}

// runCallers runs op b.N times in total from exactly callers goroutines, and reports requests per second.
func runCallers(b *testing.B, callers int, op func(i int) error) {
	asServed(b)
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	b.ResetTimer()
	for range callers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N {
					return
				}
				if err := op(i); err != nil {
					once.Do(func() { b.Error(err) })
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// BenchmarkBeforeWrite claims a new key per request through HTTP: one durable (fsynced) SQLite commit each.
func BenchmarkBeforeWrite(b *testing.B) {
	for _, callers := range []int{1, 32} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			s := handlerstest.NewService(b, openSQLite(b), handlerstest.ServiceConfig{})
			runCallers(b, callers, func(i int) error {
				r := s.BeforeWrite(map[string]any{"key": fmt.Sprintf("bench-%d", i), "payload": map[string]any{"invoice": i, "amount": "120.50"}})
				if r.Str("decision") != "proceed" {
					return fmt.Errorf("request %d: %d %s", i, r.Status, r.Body)
				}
				return nil
			})
		})
	}
}

// BenchmarkAfterWrite reports success for a claimed key per request through HTTP. The claims are made
// beforehand, outside the timer, in batches.
func BenchmarkAfterWrite(b *testing.B) {
	for _, callers := range []int{1, 32} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			s := handlerstest.NewService(b, openSQLite(b), handlerstest.ServiceConfig{})
			claims := make([]string, 0, b.N)
			for start := 0; start < b.N; start += 500 {
				var ps []items.BeforeWriteParams
				for i := start; i < min(start+500, b.N); i++ {
					ps = append(ps, items.BeforeWriteParams{Tenant: "acme", Key: fmt.Sprintf("bench-%d", i), Fingerprint: fmt.Sprintf("%064x", i)})
				}
				answers, err := s.Ledger.BeforeWriteMany(context.Background(), "acme", ps)
				if err != nil {
					b.Fatal(err)
				}
				for _, a := range answers {
					claims = append(claims, a.Claim)
				}
			}
			runCallers(b, callers, func(i int) error {
				r := s.AfterWrite(map[string]any{"key": fmt.Sprintf("bench-%d", i), "claim": claims[i], "outcome": "succeeded",
					"external_id": fmt.Sprintf("rec_%d", i), "result": map[string]any{"id": i}})
				if r.Str("state") != "succeeded" {
					return fmt.Errorf("request %d: %d %s", i, r.Status, r.Body)
				}
				return nil
			})
		})
	}
}
