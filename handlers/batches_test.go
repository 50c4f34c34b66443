package handlers_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/replaysafe/companion/batches"
	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
)

func TestSQLiteBatches(t *testing.T) {
	handlerstest.ExerciseBatches(t, func(t *testing.T) items.Store { return openSQLite(t) }, handlerstest.Options{})
}

// BenchmarkBatchVsSingle decides 500 new items per operation through HTTP on SQLite: in one batch call, or
// in 500 single before-write calls one after the other (as a workflow loop would). Compare items/s. The
// client is kept lean (bodies written by hand, answers decoded into small structs) so that the numbers are
// the service's rather than the test harness's.
func BenchmarkBatchVsSingle(b *testing.B) {
	asServed(b)
	const n = 500
	item := func(buf []byte, round, i int) []byte {
		return fmt.Appendf(buf, `{"key":"bench-%d-%d","payload":{"invoice":"%d","recipient":"c-%d","amount":120.5},"destination":"billing","execution_id":"%d"}`,
			round, i, i, i, round)
	}
	post := func(b *testing.B, s *handlerstest.Service, path string, body []byte, answer any) {
		req, err := http.NewRequest(http.MethodPost, s.URL+path, bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+handlerstest.WorkflowAcme)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(answer); err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: %d %v", path, resp.StatusCode, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body) // read to the end, so the connection is kept for the next call
	}
	b.Run("batch", func(b *testing.B) {
		s := handlerstest.NewService(b, openSQLite(b), handlerstest.ServiceConfig{})
		var body []byte
		for round := 0; b.Loop(); round++ {
			body = fmt.Appendf(body[:0], `{"batch_id":"exec-%d:Send reminders","items":[`, round)
			for i := range n {
				if i > 0 {
					body = append(body, ',')
				}
				body = item(body, round, i)
			}
			body = append(body, "]}"...)
			var answer struct {
				Counts batches.DecisionCounts `json:"counts"`
			}
			if post(b, s, "/v1/batches/before-write", body, &answer); answer.Counts.Proceed != n {
				b.Fatalf("batch %d: %+v", round, answer.Counts)
			}
		}
		b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "items/s")
	})
	b.Run("single", func(b *testing.B) {
		s := handlerstest.NewService(b, openSQLite(b), handlerstest.ServiceConfig{})
		var body []byte
		for round := 0; b.Loop(); round++ {
			for i := range n {
				body = item(body[:0], round, i)
				var answer struct {
					Decision string `json:"decision"`
				}
				if post(b, s, "/v1/before-write", body, &answer); answer.Decision != "proceed" {
					b.Fatalf("item %d: %s", i, answer.Decision)
				}
			}
		}
		b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "items/s")
	})
}
