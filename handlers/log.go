package handlers

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/replaysafe/companion/items"
)

// Keys under which handlers leave what the request line reports. Never the payload.
const (
	logTenant   = "log.tenant"
	logKey      = "log.key"
	logDecision = "log.decision"
	logReason   = "log.reason"
	logState    = "log.state"
	logCode     = "log.code"
)

func routeOf(c *gin.Context) string {
	if r := c.FullPath(); r != "" {
		return r
	}
	return "unmatched"
}

// logRequests writes one line per request: method, route, status, latency, tenant, key, decision and
// state. It logs the route pattern, not the path, so keys appear only in their own field.
func (s *server) logRequests(c *gin.Context) {
	start := time.Now()
	c.Next()
	status := c.Writer.Status()
	attrs := []slog.Attr{
		slog.String("method", c.Request.Method),
		slog.String("route", routeOf(c)),
		slog.Int("status", status),
		slog.Float64("latency_ms", float64(time.Since(start).Microseconds())/1000),
	}
	for _, k := range []struct{ ctx, name string }{
		{logTenant, "tenant"}, {logKey, "key"}, {logDecision, "decision"}, {logReason, "reason"},
		{logState, "state"}, {logCode, "error"},
	} {
		if v := c.GetString(k.ctx); v != "" {
			attrs = append(attrs, slog.String(k.name, v))
		}
	}
	level := slog.LevelInfo
	if status >= 500 {
		level = slog.LevelError
	}
	s.log.LogAttrs(c.Request.Context(), level, "request", attrs...)
}

// recoverPanics turns a panic in a handler into a 500 whose body says only "internal error"; the panic
// and its stack go to the log.
func (s *server) recoverPanics(c *gin.Context) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if r == http.ErrAbortHandler {
			panic(r)
		}
		s.writeError(c, &items.Error{Code: items.CodeInternal, Message: msgInternal,
			Err: fmt.Errorf("panic: %v\n%s", r, debug.Stack())})
	}()
	c.Next()
}

// noteItem records the key and where the item stands for the request line.
func noteItem(c *gin.Context, key string, decision items.Decision, reason items.Reason, state items.State) {
	c.Set(logKey, key)
	if decision != "" {
		c.Set(logDecision, string(decision))
	}
	if reason != "" {
		c.Set(logReason, string(reason))
	}
	if state != "" {
		c.Set(logState, string(state))
	}
}
