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

	"github.com/replaysafe/companion/items"
)

// DefaultPageSize is how many candidates the prober reads per query.
const DefaultPageSize = 100

// Store is what the prober reads and claims. Both methods return ErrUnavailable when the store cannot be
// reached.
type Store interface {
	// SweepCandidates returns items not yet needing a person that are unknown (among others), by (tenant,
	// key) after the given reference.
	SweepCandidates(ctx context.Context, after items.ItemRef, limit int) ([]*items.Item, error)
	// ClaimProbe takes one read of an item's attempt while the item is unknown at that attempt; of
	// concurrent claims of one read one wins.
	ClaimProbe(ctx context.Context, c items.ProbeClaim) (bool, error)
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
func (p *Prober) RunOnce(ctx context.Context) (Counts, error) {
	counts := Counts{Reads: map[string]int{}, Settled: map[string]int{}}
	if len(p.readers) == 0 {
		return counts, nil
	}
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
	for !stopped() {
		found, err := p.cfg.Store.SweepCandidates(ctx, after, p.cfg.PageSize)
		if err != nil {
			fail(err)
			break
		}
		mu.Lock()
		counts.Looked += len(found)
		mu.Unlock()
		for _, it := range found {
			r := p.readers[it.Destination]
			if r == nil || !it.Probeable() {
				continue
			}
			read, due := p.next(it, r.lookup)
			if p.cfg.Ledger.Now().Before(due) {
				continue
			}
			if err := r.acquire(ctx); err != nil {
				fail(err)
				break
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer r.release()
				if err := p.probe(ctx, r, it, read, &counts, &mu); err != nil {
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

// probe claims read n of the item, reads, and records the read or the verdict.
func (p *Prober) probe(ctx context.Context, r *reader, it *items.Item, n int, counts *Counts, mu *sync.Mutex) error {
	l := p.cfg.Ledger
	now := l.Now()
	won, err := p.cfg.Store.ClaimProbe(ctx, items.ProbeClaim{Tenant: it.Tenant, Key: it.Key, Attempt: it.Attempt, Read: n,
		Claim: newClaim(), Now: now, Until: now.Add(2*r.lookup.Timeout + 30*time.Second)})
	if err != nil {
		return err
	}
	if !won {
		mu.Lock()
		counts.Lost++
		mu.Unlock()
		return nil
	}
	a := r.read(ctx, it, l.IdempotencyKey(it.Tenant, it.Key))
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
	case a.outcome == items.ProbeFailed && failed >= r.lookup.MaxFailedReads:
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
