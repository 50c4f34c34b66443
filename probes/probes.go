// Package probes settles unknown items by looking them up in their destination itself, so that a person
// is paged only when a lookup cannot tell.
//
// A destination with a configured Lookup gets probes: for an item that is unknown, whose recorded dedupe is
// lookup and whose lookup has not failed, the prober reads the destination at the lookup's settle_after
// delays after the attempt ended. What it promises:
//
//   - found at any read settles the item as succeeded with the external id the answer names (a replay
//     then gets the stored id); absent settles it as failed and retryable once more, and only at a read
//     after the last delay, because a destination's search may show a write late; MaxFailedReads failed
//     reads give lookup_failed, and the item waits for its owner with every read in the evidence.
//   - Every read is one line of the item's history, and the verdict is a reconcile by resolver
//     "probe:<destination>": the evidence is the URL without credentials, the status, what the path held,
//     when, and which read. A header's value is never logged, stored or returned.
//   - Each change is a guarded transition of the ledger: a probe that loses a race with a workflow's own
//     reconcile or after-write changes nothing. A read is claimed in the store first (ClaimProbe), so of
//     several replicas one reads, and only for an item that is unknown, so never under a live lease.
//   - Reads are bounded per destination: Concurrency at once, RatePerSecond, a Timeout and a response-size
//     cap per read; TLS is verified and a redirect to another host is not followed.
//   - At a graceful stop nothing new is claimed, a claimed read not yet started is given back at once (the
//     restarted process, or another replica, reads it without waiting for the claim to run out), and a
//     read in progress gets StopGrace to finish and have its finding recorded (RunOnce says more).
//
// The outbound HTTP client of the service lives here alone.
package probes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/replaysafe/companion/internal/stopgrace"
	"github.com/replaysafe/companion/items"
)

const (
	// DefaultPageSize is how many candidates the prober reads per query.
	DefaultPageSize = 100
	// DefaultStopGrace is how long a read in progress when the prober is told to stop may take to finish.
	DefaultStopGrace = 10 * time.Second
)

// Store is what the prober reads and claims. Every method returns ErrUnavailable when the store cannot be
// reached.
type Store interface {
	// SweepCandidates returns items not yet needing a person that are unknown (among others), by (tenant,
	// key) after the given reference.
	SweepCandidates(ctx context.Context, after items.ItemRef, limit int) ([]*items.Item, error)
	// ClaimProbe takes one read of an item's attempt while the item is unknown at that attempt; of
	// concurrent claims of one read one wins.
	ClaimProbe(ctx context.Context, c items.ProbeClaim) (bool, error)
	// ReleaseProbe gives a read's claim back, only while c.Claim still holds it (a claim that ran out and
	// was taken over is another prober's); the read is claimable at once. It reports whether it did.
	ReleaseProbe(ctx context.Context, c items.ProbeClaim) (bool, error)
}

// Config configures a Prober.
type Config struct {
	// Ledger records the reads and the verdicts, and gives the clock. Required.
	Ledger *items.Ledger
	// Store is read for candidates and claims the reads. Required.
	Store Store
	// Lookups by destination name. Destinations without one are not probed.
	Lookups map[string]Lookup
	// Transport makes the requests; nil means a clone of http.DefaultTransport (TLS verified).
	Transport http.RoundTripper
	// PageSize bounds each candidates query. Default DefaultPageSize.
	PageSize int
	// StopGrace is how long a read in progress may take once the run's context has ended (a graceful
	// stop); past it the read is cut off and its claim given back. Default DefaultStopGrace.
	StopGrace time.Duration
	// Logger gets one line per run that read something. Default slog.Default().
	Logger *slog.Logger
}

// Prober makes the probes of every configured destination. Its methods are safe for concurrent use, and
// any number of probers (one per replica) may run against one store.
type Prober struct {
	cfg     Config
	readers map[string]*reader

	mu     sync.Mutex
	totals Totals
}

// New validates cfg and returns a prober.
func New(cfg Config) (*Prober, error) {
	if cfg.Ledger == nil || cfg.Store == nil {
		return nil, errors.New("probes: a prober needs a ledger and a store")
	}
	if cfg.PageSize == 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.StopGrace == 0 {
		cfg.StopGrace = DefaultStopGrace
	}
	if cfg.PageSize < 1 || cfg.StopGrace < 0 {
		return nil, errors.New("probes: the page size and the stop grace must be positive")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Transport == nil {
		cfg.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	p := &Prober{cfg: cfg, readers: map[string]*reader{}, totals: newTotals()}
	for _, name := range slices.Sorted(maps.Keys(cfg.Lookups)) {
		l := cfg.Lookups[name].WithDefaults()
		if probs := l.Check(); len(probs) > 0 {
			return nil, fmt.Errorf("probes: destination %s: lookup.%s: %s", name, probs[0].Field, probs[0].Problem)
		}
		p.readers[name] = newReader(name, l, cfg.Transport)
	}
	return p, nil
}

// Destinations returns the names of the destinations the prober reads, sorted.
func (p *Prober) Destinations() []string { return slices.Sorted(maps.Keys(p.readers)) }

// Counts says what one run did.
type Counts struct {
	// Looked counts the candidates read from the store.
	Looked int `json:"looked"`
	// Reads counts the reads made, by outcome (found, absent, failed).
	Reads map[string]int `json:"reads"`
	// Settled counts the items a verdict changed, by finding (found, absent, lookup_failed).
	Settled map[string]int `json:"settled"`
	// Lost counts reads whose claim or verdict lost to another prober or a workflow's own report.
	Lost int `json:"lost"`
}

// Totals are the counts of every run of this prober, per destination, for the metrics.
type Totals struct {
	// Reads[destination][outcome] and Settled[destination][finding].
	Reads   map[string]map[string]int
	Settled map[string]map[string]int
}

func newTotals() Totals {
	return Totals{Reads: map[string]map[string]int{}, Settled: map[string]map[string]int{}}
}

// Totals returns a copy of the prober's totals.
func (p *Prober) Totals() Totals {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := newTotals()
	for d, m := range p.totals.Reads {
		out.Reads[d] = maps.Clone(m)
	}
	for d, m := range p.totals.Settled {
		out.Settled[d] = maps.Clone(m)
	}
	return out
}

// RunOnce probes every candidate whose next read is due, page by page, and waits for the reads it
// started. It returns what it did, and the first error that stopped it (what it did before stands).
//
// When ctx ends (a graceful stop), RunOnce claims no further read and returns without error once the reads
// it started are over: a read claimed and not yet started is given back at once, so that another prober
// (or the restarted process) makes it without waiting out the claim (twice the lookup's timeout plus
// 30 s). A read in progress is not cut off by ctx: it gets StopGrace to finish, and its finding is
// recorded. A read cut off at the end of StopGrace has learned nothing; as a lookup only reads the
// destination, asking again is harmless, so its claim is given back too, and it is not recorded as a
// failed read (that would count towards lookup_failed for a fault that is not the destination's).
func (p *Prober) RunOnce(ctx context.Context) (Counts, error) {
	counts := Counts{Reads: map[string]int{}, Settled: map[string]int{}}
	if len(p.readers) == 0 {
		return counts, nil
	}
	work, done := stopgrace.Extend(ctx, p.cfg.StopGrace)
	defer done()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	stopped := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return firstErr != nil
	}
	var after items.ItemRef
	for !stopped() && ctx.Err() == nil {
		found, err := p.cfg.Store.SweepCandidates(work, after, p.cfg.PageSize)
		if err != nil {
			fail(err)
			break
		}
		mu.Lock()
		counts.Looked += len(found)
		mu.Unlock()
		for _, it := range found {
			r := p.readers[it.Destination]
			// An item of a tenant the destination is not open to (written before its tenants were set) is
			// never read: the lookup's credentials read for the destination's tenants only.
			if r == nil || !it.Probeable() || !p.cfg.Ledger.Config().DestinationAllows(it.Destination, it.Tenant) {
				continue
			}
			read, due := p.next(it, r.lookup)
			if p.cfg.Ledger.Now().Before(due) {
				continue
			}
			if r.acquire(ctx) != nil {
				break // only a stop ends the wait for a slot: nothing more is claimed
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer r.release()
				if err := p.probe(work, ctx, r, it, read, &counts, &mu); err != nil {
					fail(err)
				}
			}()
		}
		if len(found) < p.cfg.PageSize {
			break
		}
		after = items.ItemRef{Tenant: found[len(found)-1].Tenant, Key: found[len(found)-1].Key}
	}
	wg.Wait()
	if len(counts.Reads) > 0 {
		attrs := []any{"looked", counts.Looked, "lost", counts.Lost}
		for _, o := range slices.Sorted(maps.Keys(counts.Reads)) {
			attrs = append(attrs, "reads."+o, counts.Reads[o])
		}
		for _, f := range slices.Sorted(maps.Keys(counts.Settled)) {
			attrs = append(attrs, "settled."+f, counts.Settled[f])
		}
		p.cfg.Logger.InfoContext(ctx, "probes read destinations", attrs...)
	}
	if firstErr != nil {
		p.cfg.Logger.ErrorContext(ctx, "probes stopped", "error", firstErr)
	}
	return counts, firstErr
}

// next returns the number of the item's next read and when it is due: read n ≤ len(SettleAfter) at the
// attempt's end plus its delay; a read past the last delay (only after a failed one) RetryAfter after the
// read before.
func (p *Prober) next(it *items.Item, l Lookup) (int, time.Time) {
	done := it.ProbeReads()
	n := len(done) + 1
	if n <= len(l.SettleAfter) {
		return n, it.ProbeBase().Add(l.SettleAfter[n-1])
	}
	return n, done[len(done)-1].At.Add(l.RetryAfter)
}

// claimLength is how long a read's claim holds: long enough for the read (Timeout) and its recording.
func claimLength(l Lookup) time.Duration { return 2*l.Timeout + 30*time.Second }

// probe claims read n of the item, reads, and records the read or the verdict, working in ctx. Once stop
// has ended it claims nothing, and a claim it holds whose read has not started is given back.
func (p *Prober) probe(ctx, stop context.Context, r *reader, it *items.Item, n int, counts *Counts, mu *sync.Mutex) error {
	if stop.Err() != nil {
		return nil
	}
	l := p.cfg.Ledger
	now := l.Now()
	claim := items.ProbeClaim{Tenant: it.Tenant, Key: it.Key, Attempt: it.Attempt, Read: n,
		Claim: newClaim(), Now: now, Until: now.Add(claimLength(r.lookup))}
	won, err := p.cfg.Store.ClaimProbe(ctx, claim)
	if err != nil {
		return err
	}
	if !won {
		mu.Lock()
		counts.Lost++
		mu.Unlock()
		return nil
	}
	if stop.Err() != nil {
		p.giveBack(ctx, r, claim, "prober stopping: read claim given back unread; the next prober reads it at once")
		return nil
	}
	a := r.read(ctx, it, l.IdempotencyKey(it.Tenant, it.Key))
	if a.outcome == items.ProbeFailed && ctx.Err() != nil {
		// Cut off at the end of the stop's grace: the read learned nothing about the destination. A lookup
		// only reads, so asking again is harmless: the claim is given back (the next prober reads at once)
		// and no failed read is recorded, as it would count towards lookup_failed and page a person for a
		// fault that is not the destination's.
		p.giveBack(ctx, r, claim, "prober stopping: read cut off at the end of the stop grace, claim given back; the next prober reads it at once")
		return nil
	}
	// The read is over: its finding is recorded even when ctx ended meanwhile.
	ctx, cancel := stopgrace.Detached(ctx)
	defer cancel()
	read := items.ProbeRead{Read: n, Of: len(r.lookup.SettleAfter), URL: a.url, Status: a.status, Outcome: a.outcome,
		ExternalID: a.externalID, Detail: a.detail, At: l.Now()}
	by := items.ProbeResolverPrefix + r.destination
	failed := 1
	if a.outcome != items.ProbeFailed {
		failed = 0
	}
	for _, e := range it.ProbeReads() {
		if e.Outcome == items.ProbeFailed {
			failed++
		}
	}
	finding := ""
	switch {
	case a.outcome == items.ProbeFound:
		finding = items.FindingFound
	case a.outcome == items.ProbeAbsent && n >= len(r.lookup.SettleAfter):
		finding = items.FindingAbsent
	case a.outcome == items.ProbeFailed && (failed >= r.lookup.MaxFailedReads || a.final):
		finding = items.FindingLookupFailed
	}
	changed := false
	if finding == "" {
		changed, err = l.RecordProbe(ctx, it.Tenant, it.Key, it.Attempt, read, by)
	} else {
		_, err = l.Reconcile(ctx, items.ReconcileParams{Tenant: it.Tenant, Key: it.Key, Finding: finding, ExternalID: a.externalID,
			Evidence: items.ProbeEvidence(it, read), By: by, Attempt: it.Attempt})
		changed = err == nil
		if items.ErrorCode(err) == items.CodeConflict || errors.Is(err, items.ErrNotFound) {
			err = nil // a workflow's report or another prober settled it first
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	counts.Reads[a.outcome]++
	bump(p.totals.Reads, r.destination, a.outcome)
	switch {
	case !changed:
		counts.Lost++
	case finding != "":
		counts.Settled[finding]++
		bump(p.totals.Settled, r.destination, finding)
	}
	return err
}

// giveBack releases a read's claim on a context of its own (ctx may have ended), so that the read is
// claimable at once; a failure is logged: the read then waits for the claim to run out.
func (p *Prober) giveBack(ctx context.Context, r *reader, c items.ProbeClaim, why string) {
	rctx, cancel := stopgrace.Detached(ctx)
	defer cancel()
	attrs := []any{"destination", r.destination, "tenant", c.Tenant, "key", c.Key, "attempt", c.Attempt, "read", c.Read}
	if _, err := p.cfg.Store.ReleaseProbe(rctx, c); err != nil {
		p.cfg.Logger.WarnContext(ctx, "probe claim release failed; the read waits for its claim to run out",
			append(attrs, "claim_length", claimLength(r.lookup).String(), "error", err)...)
		return
	}
	p.cfg.Logger.InfoContext(ctx, why, attrs...)
}

func bump(m map[string]map[string]int, dest, name string) {
	if m[dest] == nil {
		m[dest] = map[string]int{}
	}
	m[dest][name]++
}

func newClaim() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // crypto/rand never fails on supported platforms
	return "p_" + hex.EncodeToString(b)
}

// Run probes once at start and then on the cron schedule spec ("@every 30s", five fields), until ctx is
// done. Runs never overlap: a tick that comes while one runs is dropped. Errors are logged by RunOnce and
// do not stop the loop.
//
// When ctx ends (a graceful stop), Run starts no new run, and a run in progress ends as RunOnce says: no
// further read is claimed, a claimed read not yet started is given back at once, and a read in progress
// gets StopGrace to finish and be recorded (one cut off is given back). So Run returns within about
// StopGrace of ctx's end, holding no claim, and the store may be closed after it.
func (p *Prober) Run(ctx context.Context, spec string) error {
	tick := make(chan struct{}, 1)
	c := cron.New()
	if _, err := c.AddFunc(spec, func() {
		select {
		case tick <- struct{}{}:
		default:
		}
	}); err != nil {
		return fmt.Errorf("probes: schedule %q: %w", spec, err)
	}
	c.Start()
	defer func() { <-c.Stop().Done() }()
	_, _ = p.RunOnce(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
			_, _ = p.RunOnce(ctx)
		}
	}
}
