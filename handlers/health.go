package handlers

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
)

// readyTimeout bounds a readiness probe: a store that cannot answer in this time is not ready.
const readyTimeout = 2 * time.Second

// healthz answers while the process serves requests.
func (s *server) healthz(c *gin.Context) {
	body := gin.H{"status": "ok"}
	if s.version != "" {
		body["version"] = s.version
	}
	if s.storeKind != "" {
		body["store"] = s.storeKind
	}
	c.Render(http.StatusOK, jsonLine{body})
}

// readyz answers 200 when the ledger can durably write now, 503 store_unavailable otherwise: while the
// store cannot be reached, and from a write it could not record until a write succeeds (items.Ledger.Ready).
func (s *server) readyz(c *gin.Context) {
	if err := s.ready(c.Request.Context()); err != nil {
		s.writeError(c, err)
		return
	}
	c.Render(http.StatusOK, jsonLine{gin.H{"status": "ready"}})
}

// ready returns nil when the ledger can durably write now (items.Ledger.Ready), within readyTimeout: what
// GET /readyz answers and /metrics reports as companion_store_ready.
func (s *server) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	return s.ledger.Ready(ctx)
}
