package handlers

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/replaysafe/companion/console"
	"github.com/replaysafe/companion/items"
)

// requestLine is what a request's log line reports besides its method, route, status and latency: the
// handlers fill it in as they learn it (authorize the tenant, noteItem the item, writeError the code).
// Never the payload.
type requestLine struct {
	// who is the caller, once authorize has authenticated them (authenticated).
	who           Principal
	authenticated bool

	tenant, key, code string
	decision          items.Decision
	reason            items.Reason
	state             items.State
}

// lineKey is where the request's *requestLine lives in its gin context.
const lineKey = "handlers.line"

// lineOf returns the request's line; a request that did not pass serveRequests (a test's engine) gets one
// of its own.
func lineOf(c *gin.Context) *requestLine {
	if v, ok := c.Get(lineKey); ok {
		return v.(*requestLine)
	}
	l := &requestLine{}
	c.Set(lineKey, l)
	return l
}

// routeOf names the request's route for its log line and metrics: gin's route pattern, never the raw path,
// except for the console, whose one route serves several pages: its page (console.Route).
func routeOf(c *gin.Context) string {
	switch r := c.FullPath(); r {
	case "":
		return "unmatched"
	case consoleRoute:
		return console.Route(c.Request.URL.Path)
	default:
		return r
	}
}

// serveRequests runs every request: a panic in its handler becomes a 500 (recoverPanics), then its
// duration goes to the metrics by route pattern and one line to the log. One middleware with one
// *requestLine, rather than three with a context key per field, because every call of the protocol
// pays for it.
func (s *server) serveRequests(c *gin.Context) {
	start := time.Now()
	line := &requestLine{}
	c.Set(lineKey, line)
	s.recoverPanics(c)
	took := time.Since(start)
	status, route := c.Writer.Status(), routeOf(c)
	s.metricsOf.ObserveRequest(c.Request.Method, route, status, took)
	s.logRequest(c, line, route, status, took)
}

// logRequest writes the request's line: method, route, status, latency, tenant, key, decision, reason,
// state and error code. It logs the route pattern, not the path, so keys appear only in their own field.
func (s *server) logRequest(c *gin.Context, line *requestLine, route string, status int, took time.Duration) {
	attrs := make([]slog.Attr, 0, 10)
	attrs = append(attrs,
		slog.String("method", c.Request.Method),
		slog.String("route", route),
		slog.Int("status", status),
		slog.Float64("latency_ms", float64(took.Microseconds())/1000),
	)
	for _, f := range [...]struct{ name, value string }{
		{"tenant", line.tenant}, {"key", line.key}, {"decision", string(line.decision)}, {"reason", string(line.reason)},
		{"state", string(line.state)}, {"error", line.code},
	} {
		if f.value != "" {
			attrs = append(attrs, slog.String(f.name, f.value))
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
	l := lineOf(c)
	l.key = key
	if decision != "" {
		l.decision = decision
	}
	if reason != "" {
		l.reason = reason
	}
	if state != "" {
		l.state = state
	}
}
