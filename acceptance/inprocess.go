package acceptance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/sqlitestore"
	"github.com/replaysafe/companion/probes"
	"github.com/replaysafe/companion/sandbox"
)

// InProcessConfig configures a service and a receiver started inside this process.
type InProcessConfig struct {
	// OpenStore opens the ledger's store; nil opens SQLite in a temporary directory.
	OpenStore func(ctx context.Context) (items.Store, error)
	// StoreName is recorded in the header ("sqlite", "mongodb").
	StoreName string
	// Destinations is the service's destination configuration; nil means Destinations(), the one the
	// suite expects. Tests misconfigure it on purpose to show that the suite fails.
	Destinations []DestinationSpec
	// Receiver configures the sandbox receiver; the zero value honours keys and keeps them forever.
	Receiver sandbox.Config
	// ReceiverURL is the receiver the service's probes read (the destinations with a lookup); StartService
	// runs no probes without it.
	ReceiverURL string
	// Logger gets the service's and the receiver's request logs; nil discards them.
	Logger *slog.Logger
}

// InProcess is a running in-process service and receiver.
type InProcess struct {
	ServiceURL  string
	ReceiverURL string
	// Receiver is the sandbox receiver itself (tests read its effects directly too).
	Receiver *sandbox.Receiver
	// Store and Version describe the service for the report's header.
	Store   string
	Version string
	stop    func() error
	// runs counts the in-process prober's runs; nil when the service runs no probes.
	runs *probeRuns
}

// ledgerConfig turns destination specs into the ledger's configuration.
func ledgerConfig(specs []DestinationSpec) items.Config {
	cfg := items.Config{Destinations: map[string]items.Destination{}}
	for _, d := range specs {
		cfg.Destinations[d.Name] = items.Destination{
			Dedupe:                   items.Dedupe(d.Dedupe),
			MaxAttempts:              d.MaxAttempts,
			LeaseSeconds:             d.LeaseSeconds,
			KeyRetentionSeconds:      d.KeyRetentionSeconds,
			ServerErrorsNotCommitted: d.ServerErrorsNotCommitted,
		}
	}
	return cfg
}

// StartInProcess starts the service (open, on loopback, on its own ledger) and the sandbox receiver, each
// on a free loopback port. Close stops both and removes a temporary ledger.
func StartInProcess(ctx context.Context, cfg InProcessConfig) (*InProcess, error) {
	rp, err := StartReceiver(ctx, cfg)
	if err != nil {
		return nil, err
	}
	cfg.ReceiverURL = rp.ReceiverURL
	p, err := StartService(ctx, cfg)
	if err != nil {
		_ = rp.Close()
		return nil, err
	}
	p.ReceiverURL, p.Receiver = rp.ReceiverURL, rp.Receiver
	stopService := p.stop
	p.stop = func() error { return errors.Join(rp.stop(), stopService()) }
	return p, nil
}

// StartService starts only the service, open on a free loopback port, on the configured store.
func StartService(ctx context.Context, cfg InProcessConfig) (_ *InProcess, err error) {
	var cleanups []func() error
	stop := func() error {
		var errs []error
		for i := len(cleanups) - 1; i >= 0; i-- {
			errs = append(errs, cleanups[i]())
		}
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			_ = stop()
		}
	}()

	openStore, storeName := cfg.OpenStore, cfg.StoreName
	if openStore == nil {
		dir, err := os.MkdirTemp("", "companion-acceptance-")
		if err != nil {
			return nil, err
		}
		cleanups = append(cleanups, func() error { return os.RemoveAll(dir) })
		openStore = func(ctx context.Context) (items.Store, error) { return sqlitestore.Open(ctx, dir) }
		storeName = "sqlite (temporary, in-process)"
	}
	store, err := openStore(ctx)
	if err != nil {
		return nil, fmt.Errorf("acceptance: opening the store: %w", err)
	}
	cleanups = append(cleanups, store.Close)
	specs := cfg.Destinations
	if specs == nil {
		specs = Destinations()
	}
	ledger, err := items.NewLedger(ctx, store, ledgerConfig(specs))
	if err != nil {
		return nil, fmt.Errorf("acceptance: starting the ledger: %w", err)
	}
	serviceURL, err := serveHTTP(handlers.New(handlers.Config{Ledger: ledger, Open: true, Logger: discardIfNil(cfg.Logger)}), &cleanups)
	if err != nil {
		return nil, err
	}
	var runs *probeRuns
	if lookups := probeLookups(specs, cfg.ReceiverURL); len(lookups) > 0 {
		runs = newProbeRuns(store.(probes.Store))
		prober, err := probes.New(probes.Config{Ledger: ledger, Store: runs, Lookups: lookups, Logger: discardIfNil(cfg.Logger)})
		if err != nil {
			return nil, fmt.Errorf("acceptance: starting the probes: %w", err)
		}
		pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan error, 1)
		go func() { done <- prober.Run(pctx, ProbeEvery) }()
		cleanups = append(cleanups, func() error { cancel(); return <-done })
	}
	return &InProcess{ServiceURL: serviceURL, Store: storeName, Version: version(), stop: stop, runs: runs}, nil
}

// AwaitProbeRun returns once every run of the service's prober that was in progress when it was called
// is over, or an error when none ended within probeWait; at once when the service runs no probes. It is
// what Options.AwaitProbeRun needs of a service on the FerretDB test server.
//
// Why: a probe's verdict is a Transition of the store, and the MongoDB store answers a Transition only
// after it has taken the kept counts' entries off the item it wrote (mongostore's counts.go, step 2: a
// $pullAll on the item by _id). The verdict's write is visible before that, so a case that polls the item
// replays at once, and its before-write claims the item while the probe's step 2 is still running. On
// MongoDB each update of one document is atomic, so the $pullAll removes its entries from the document
// as the claim left it, and the claim stays. FerretDB v1 (the test server) applies an update by reading
// the matching document, changing it in memory and writing the whole document back by _id; when the
// claim lands between that read and that write, the write restores the verdict's document (state failed,
// no second attempt): the before-write answered a claim the item no longer holds, and the after-write
// with it is refused ("not a claim of this item"). On a loaded machine this happened in the
// acceptance suite; the store's own test of the interleaving is TestFerretDBUndoesAClaimBesideACount.
// Waiting for the probe's run to end (its Reconcile, step 2 included, returns before the run does) keeps
// the case about the ledger rather than the test server; SQLite, PostgreSQL and a real MongoDB replay at
// once.
func (p *InProcess) AwaitProbeRun(ctx context.Context) error {
	if p.runs == nil {
		return nil
	}
	return p.runs.awaitNext(ctx, probeWait)
}

// probeRuns is the store the in-process prober reads, counting the prober's runs as they start. A run
// begins with SweepCandidates from the start (a zero reference; the later pages of a run name the last
// item of the page before), and runs never overlap (probes.Prober.Run): so once a run has started after
// a moment, every run in progress at that moment is over.
type probeRuns struct {
	probes.Store

	mu   sync.Mutex
	next chan struct{} // closed when the next run starts
}

func newProbeRuns(s probes.Store) *probeRuns {
	return &probeRuns{Store: s, next: make(chan struct{})}
}

// SweepCandidates counts a run's start, then reads the store.
func (r *probeRuns) SweepCandidates(ctx context.Context, after items.ItemRef, limit int) ([]*items.Item, error) {
	if after == (items.ItemRef{}) {
		r.mu.Lock()
		close(r.next)
		r.next = make(chan struct{})
		r.mu.Unlock()
	}
	return r.Store.SweepCandidates(ctx, after, limit)
}

// awaitNext returns once a run has started after the call, or an error when none did within limit.
func (r *probeRuns) awaitNext(ctx context.Context, limit time.Duration) error {
	r.mu.Lock()
	next := r.next
	r.mu.Unlock()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-next:
		return nil
	case <-t.C:
		return fmt.Errorf("acceptance: the service's probe run in progress did not end within %s", limit)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ProbeEvery is the in-process service's probe schedule; a deployed service probes on its --sweep-every,
// which must be as frequent for the probe cases' short delays.
const ProbeEvery = "@every 1s"

// probeLookups returns the lookups of the specs that have one, reading the receiver at receiverURL; none
// without a receiver.
func probeLookups(specs []DestinationSpec, receiverURL string) map[string]probes.Lookup {
	out := map[string]probes.Lookup{}
	for _, d := range specs {
		if d.Lookup == nil || receiverURL == "" {
			continue
		}
		l := probes.Lookup{URL: strings.TrimSuffix(receiverURL, "/") + "/records?reference={reference}", IDPath: d.Lookup.Path,
			MaxFailedReads: d.Lookup.MaxFailedReads, RatePerSecond: 50}
		for _, s := range d.Lookup.SettleAfter {
			v, _ := time.ParseDuration(s)
			l.SettleAfter = append(l.SettleAfter, v)
		}
		l.RetryAfter, _ = time.ParseDuration(d.Lookup.RetryAfter)
		out[d.Name] = l
	}
	return out
}

// StartReceiver starts only the sandbox receiver, on a free loopback port.
func StartReceiver(ctx context.Context, cfg InProcessConfig) (*InProcess, error) {
	rcfg := cfg.Receiver
	if rcfg.Logger == nil {
		rcfg.Logger = discardIfNil(cfg.Logger)
	}
	rc, err := sandbox.New(rcfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() { served <- rc.Serve(rctx, ln) }()
	return &InProcess{ReceiverURL: "http://" + ln.Addr().String(), Receiver: rc,
		stop: func() error { cancel(); return <-served }}, nil
}

func discardIfNil(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return l
}

// Close stops what was started and releases the store.
func (p *InProcess) Close() error { return p.stop() }

// serveHTTP serves h on a free loopback port and registers its shutdown.
func serveHTTP(h http.Handler, cleanups *[]func() error) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	*cleanups = append(*cleanups, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(ctx)
	})
	return "http://" + ln.Addr().String(), nil
}

// version names the build the in-process service runs: the module version and VCS revision when the
// binary was built from a checkout.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown build (in-process)"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "development build"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
		if s.Key == "vcs.modified" && s.Value == "true" {
			v += "+modified"
		}
	}
	return v + " (in-process)"
}
