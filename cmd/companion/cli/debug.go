package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// debugHandler serves Go's profiles (net/http/pprof) under /debug/pprof/. It is served only on the
// separate listener of --debug-addr, never on the service's own address: a profile names the code's
// functions and can run for as long as its caller asks, so only the machine's operator may take one.
func debugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// serveDebug listens on addr (loopback only) for the profiles, until Close. An empty addr serves nothing.
func (m *Main) serveDebug(addr string, log *slog.Logger) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--debug-addr: cannot listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: debugHandler(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		served <- err
	}()
	m.keep(daemon{name: "debug server", done: served, stop: srv.Shutdown})
	m.mu.Lock()
	m.debugAddr = ln.Addr().String()
	m.mu.Unlock()
	log.Info("profiles on http://"+ln.Addr().String()+"/debug/pprof/ (loopback only)", slog.String("debug_addr", ln.Addr().String()))
	return nil
}
