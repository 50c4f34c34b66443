package sandbox

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"
)

// logEntry collects what one request's log line says. Handlers fill in what
// only they know (reference, fault); the body itself is never logged, since a
// record may carry personal data.
type logEntry struct {
	requestID string
	reference string
	fault     Fault
	replayed  bool
}

type logEntryKey struct{}

// logEntryFrom returns the request's log entry; outside logRequests it
// returns a throwaway one so handlers need not check.
func logEntryFrom(ctx context.Context) *logEntry {
	if e, ok := ctx.Value(logEntryKey{}).(*logEntry); ok {
		return e
	}
	return &logEntry{}
}

// logRequests gives every response its X-Request-Id and writes one log line
// per request once it is answered (status 0: the connection was dropped).
func (rc *Receiver) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		entry := &logEntry{requestID: "req_" + strconv.FormatUint(rc.requests.Add(1), 10)}
		w.Header().Set(HeaderRequestID, entry.requestID)
		rec := &statusRecorder{ResponseWriter: w}
		defer func() {
			rc.logger.LogAttrs(r.Context(), slog.LevelInfo, "request",
				slog.String("request_id", entry.requestID),
				slog.String("method", r.Method),
				slog.String("path", r.URL.Path),
				slog.String("idempotency_key", r.Header.Get(HeaderIdempotencyKey)),
				slog.String("reference", entry.reference),
				slog.String("fault", string(entry.fault)),
				slog.Int("status", rec.status),
				slog.Bool("replayed", entry.replayed),
				slog.Int64("duration_ms", time.Since(start).Milliseconds()),
			)
		}()
		next.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), logEntryKey{}, entry)))
	})
}

// statusRecorder remembers the status written. Unwrap lets
// http.ResponseController reach the connection for commit_then_drop.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
