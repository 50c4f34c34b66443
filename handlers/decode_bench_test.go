package handlers

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
)

// BenchmarkDecodeBatch decodes the 500-item batch of BenchmarkBatchVsSingle, without HTTP or a store: the
// part of a batch before-write that is the handler's own.
func BenchmarkDecodeBatch(b *testing.B) {
	body := []byte(`{"batch_id":"exec-1:Send reminders","items":[`)
	for i := range 500 {
		if i > 0 {
			body = append(body, ',')
		}
		body = fmt.Appendf(body, `{"key":"bench-1-%d","payload":{"invoice":"%d","recipient":"c-%d","amount":120.5},"destination":"billing","execution_id":"1"}`, i, i, i)
	}
	body = append(body, "]}"...)
	gin.SetMode(gin.ReleaseMode)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		c, _ := gin.CreateTestContext(httptest.NewRecorder())
		c.Request = httptest.NewRequest(http.MethodPost, "/v1/batches/before-write", bytes.NewReader(body))
		c.Request.Header.Set("Content-Type", "application/json")
		if _, err := decodeBatch(c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeReports decodes a 500-report batch after-write body, the quick way (the body decoded
// once) and the careful way (item by item, as for a body with something unusual in it).
func BenchmarkDecodeReports(b *testing.B) {
	body := []byte(`{"items":[`)
	for i := range 500 {
		if i > 0 {
			body = append(body, ',')
		}
		body = fmt.Appendf(body, `{"key":"bench-1-%d","claim":"c_0123456789abcdef%08d","outcome":"succeeded","external_id":"rec_%d","http_status":201,"result":{"id":%d}}`, i, i, i, i)
	}
	body = append(body, "]}"...)
	for _, quick := range []bool{true, false} {
		b.Run(fmt.Sprintf("quick=%v", quick), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := reportsFromBody(body, "acme", quick); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
