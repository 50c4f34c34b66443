package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/replaysafe/companion/handlers"
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

// listenDebug binds --debug-addr (loopback only, checked before) for the profiles; an empty addr binds
// nothing and returns nil.
func listenDebug(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--debug-addr: cannot listen on %s: %w", addr, err)
	}
	return ln, nil
}

// serveDebug serves the profiles on ln (listenDebug's; nil when --debug-addr is off) until Close.
func (m *Main) serveDebug(ln net.Listener, log *slog.Logger) {
	if ln == nil {
		return
	}
	// The profiles have no token: like the service in open mode, they answer only a request naming a
	// loopback Host, so a page whose name was rebound to 127.0.0.1 cannot read them.
	srv := &http.Server{Handler: handlers.LoopbackHosts(debugHandler()), ReadHeaderTimeout: 10 * time.Second,
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
}
