package cli

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"golang.org/x/net/http/httpproxy"

	"github.com/replaysafe/companion/items/pgstore"
	"github.com/replaysafe/companion/items/sqlitestore"
)

func init() {
	commands = append(commands, command{"bench", "measure a deployment's throughput and latency (sizing)", (*Main).bench})
}

const benchSynopsis = `Measures a running deployment: it claims and reports new items through the workflow API, one item
per call pair (--mode single: before-write, then after-write) or --batch items per call pair (--mode
batch: batches/before-write, then batches/after-write), from --callers callers at once, and prints a
progress line while it runs and a summary (items/s, p50/p99 per call, errors).

  companion bench --items 10000 --callers 32
  companion bench --mode batch --batch 500 --callers 1 --items 100000
  companion bench --floor /var/lib/companion --items 0     (the disk's floor alone)
  companion bench --floor postgres --callers 32            (against PostgreSQL's floor)

--floor DIR also measures the disk's naive floor in DIR, in the same run: two fsync'd single-row SQLite
transactions per item through database/sql, no HTTP. Run it on the deployment's data disk. Half of its
items run before the run and half after it; when the two halves differ by more than 1.5× (a disk whose
fsync latency moves), the summary says so and gives the range of the ratio.
--floor postgres measures instead the rival a user would otherwise write on the deployment's PostgreSQL
(POSTGRES_URL or POSTGRES_URL_FILE, and POSTGRES_SCHEMA, as serve reads them): a table of its own, and
per item an INSERT … ON CONFLICT DO NOTHING to claim it, then an UPDATE to record it, each its own
transaction, through pgx, from --callers callers at once, no HTTP. The table is dropped at the end.

With an operator token (or against a service without tokens) it also reads the service's CPU time from
GET /metrics (process_cpu_seconds_total) before and after the run and prints it per item: on a machine
shared with other work, a steadier measure than items/s.
On SQLite it also prints how busy the ledger's one writer was (companion_sqlite_writer_busy_seconds_total),
how much of that was committing, and, when it was busy nearly all the run, whether its core or the disk's
fsync limits the writes; and what share of its item lookups its item cache answered (--item-cache of serve).

Every key it writes is "PREFIX:iNNNNNNN:write:0", so the items' workflow is PREFIX (--prefix, default
bench-<UTC time to the millisecond>, bench-20261201T201233.123: runs one after the other never share
keys): it prints how to list them at the end. Like the templates' items, each carries an execution_id
(PREFIX-eN: one per item, or one per batch call). They are real items of the tenant of the token; keep
them apart by running against a tenant of its own.

It talks to COMPANION_URL (default http://127.0.0.1:8080) with COMPANION_TOKEN, a workflow or operator
token (not needed when the service runs open on loopback); --url and --token override them. An https
URL's certificate is verified against the system's roots, or --cacert's. Each caller keeps one HTTP/1.1
connection of its own and reads answers without encoding/json, so that the bench takes little of the CPU
of a service on the same machine; a failed call is counted, never sent again. Through a proxy (HTTP_PROXY,
HTTPS_PROXY, NO_PROXY, as net/http reads them) it makes its calls with net/http instead.`

// benchOptions are the flags of companion bench.
type benchOptions struct {
	url, token, mode, prefix, floor, cacert string
	callers, items, batch, floorItems       int
}

// benchPrefix is what a key's workflow part may be.
var benchPrefix = regexp.MustCompile(`^[A-Za-z0-9._@+=~-]{1,120}$`)

func (m *Main) bench(ctx context.Context, args []string) error {
	fs := m.newFlags("bench", benchSynopsis)
	var o benchOptions
	fs.StringVar(&o.url, "url", m.env("COMPANION_URL", "http://127.0.0.1:8080"), "the deployment's `URL` (env COMPANION_URL)")
	fs.StringVar(&o.token, "token", m.Getenv("COMPANION_TOKEN"), "a workflow or operator `token` (env COMPANION_TOKEN)")
	fs.StringVar(&o.mode, "mode", "single", "single (before-write + after-write per item) or batch")
	fs.IntVar(&o.callers, "callers", 32, "callers at once")
	fs.IntVar(&o.items, "items", 10000, "items to claim and report (0: only --floor)")
	fs.IntVar(&o.batch, "batch", 500, "items per batch call, 1-500 (--mode batch)")
	// To the millisecond: two runs one after the other (the sizing commands pasted at once, a script's loop)
	// must not share their keys, or the second finds every key taken and fails.
	fs.StringVar(&o.prefix, "prefix", "bench-"+time.Now().UTC().Format("20060102T150405.000"), "the keys' first part (their `workflow`)")
	fs.StringVar(&o.floor, "floor", "", "also measure the fsync'd SQLite floor in `DIR`, or PostgreSQL's floor (postgres)")
	fs.IntVar(&o.floorItems, "floor-items", 2000, "items of the floor measurement")
	fs.StringVar(&o.cacert, "cacert", "", "PEM `file` of the certificate authorities an https --url's certificate must chain to (default: the system's)")
	if done, err := m.parse(fs, args); done {
		return err
	}
	switch {
	case o.mode != "single" && o.mode != "batch":
		return usageErrorf("bench: --mode is single or batch, not %q", o.mode)
	case o.callers < 1 || o.callers > 1024:
		return usageErrorf("bench: --callers must be 1-1024")
	case o.items < 0:
		return usageErrorf("bench: --items must not be negative")
	case o.batch < 1 || o.batch > 500:
		return usageErrorf("bench: --batch must be 1-500")
	case !benchPrefix.MatchString(o.prefix):
		return usageErrorf("bench: --prefix must be 1-120 characters of A-Z a-z 0-9 . _ @ + = ~ - (no colon)")
	case o.items == 0 && o.floor == "":
		return usageErrorf("bench: nothing to measure: --items 0 and no --floor")
	case o.floor != "" && o.floorItems < 1:
		return usageErrorf("bench: --floor-items must be at least 1")
	}
	base := strings.TrimRight(o.url, "/")
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return usageErrorf("bench: --url %q is not an http(s) URL", o.url)
	}
	if trimmed, ok := strings.CutSuffix(base, "/v1"); ok {
		// Copied from a request: every call would go to /v1/v1/… and count as an error.
		return usageErrorf("bench: --url (or COMPANION_URL) %q ends in /v1: give the service's address without it (the bench adds /v1/…), --url %s", o.url, trimmed)
	}
	if strings.ContainsAny(o.token, "\r\n\x00") {
		return usageErrorf("bench: the token has a line break or NUL in it")
	}
	var roots *x509.CertPool
	if o.cacert != "" {
		pem, err := os.ReadFile(o.cacert)
		if err != nil {
			return usageErrorf("bench: --cacert: %v", err)
		}
		if roots = x509.NewCertPool(); !roots.AppendCertsFromPEM(pem) {
			return usageErrorf("bench: --cacert %s has no PEM certificate", o.cacert)
		}
	}
	measureFloor, err := m.benchFloor(ctx, o)
	if err != nil {
		return err
	}
	var floor []sqlitestore.FloorResult
	firstHalf, when := o.floorItems, "" // the floor alone (--items 0), or of one item: not split
	if o.items > 0 && o.floorItems > 1 {
		firstHalf, when = (o.floorItems+1)/2, " before the run"
	}
	if o.floor != "" {
		r, err := measureFloor(firstHalf, when)
		floor = append(floor, r)
		if err != nil {
			return err
		}
	}
	var run *benchRun
	if o.items > 0 {
		run = newBenchRun(u, o, roots, m.proxyFunc())
		before, err := run.serviceTotals(ctx)
		if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" {
			// Nothing listens there: a run would only count every call as an error.
			return fmt.Errorf("bench: cannot reach companion at %s (--url, or COMPANION_URL): %v; start it (companion serve) "+
				"or point --url at it", base, op)
		}
		if st := metricsStatus(0); errors.As(err, &st) && st == http.StatusUnauthorized {
			// A token the service does not know (or none where it needs one): every call would be refused
			// the same way, so none is sent.
			why := "it knows no token with the secret in --token (COMPANION_TOKEN): check it against its tokens, in " + tokenSources
			if o.token == "" {
				why = "it runs with tokens and none was given: set COMPANION_TOKEN (or --token) to the secret of a workflow or operator token"
			}
			return fmt.Errorf("bench: companion at %s answered 401 (GET /metrics): %s; no item was sent", base, why)
		}
		if err := run.do(ctx, m.Stderr); err != nil {
			return err
		}
		if err == nil {
			var after serviceTotals
			if after, err = run.serviceTotals(ctx); err == nil {
				run.cpu = after.cpu - before.cpu
				if after.writer != nil && before.writer != nil {
					run.writer = &serviceWriter{busy: after.writer.busy - before.writer.busy,
						committing: after.writer.committing - before.writer.committing,
						commits:    after.writer.commits - before.writer.commits, transitions: after.writer.transitions - before.writer.transitions,
						cache: after.writer.cache && before.writer.cache, cacheBound: after.writer.cacheBound,
						cacheHits: after.writer.cacheHits - before.writer.cacheHits, cacheMiss: after.writer.cacheMiss - before.writer.cacheMiss}
				}
			}
		}
		run.cpuErr = err
	}
	if o.floor != "" && firstHalf < o.floorItems {
		r, err := measureFloor(o.floorItems-firstHalf, " after the run")
		floor = append(floor, r)
		if err != nil {
			return err
		}
	}
	m.benchSummary(o, run, floor)
	if run != nil && run.failed.Load() > 0 {
		return fmt.Errorf("bench: %d calls failed; the first: %s", run.failed.Load(), run.firstError())
	}
	return nil
}

// floorPostgres is the --floor that measures PostgreSQL's floor rather than a directory's disk.
const floorPostgres = "postgres"

// benchFloor checks --floor and returns what measures n items of the floor (when says when, for the
// progress line): the SQLite floor of the disk in the directory --floor names, or PostgreSQL's (--floor
// postgres), both as a sqlitestore.FloorResult.
func (m *Main) benchFloor(ctx context.Context, o benchOptions) (func(n int, when string) (sqlitestore.FloorResult, error), error) {
	switch {
	case o.floor == "":
		return nil, nil
	case o.floor == floorPostgres:
		if shared, err := m.sharedStore(); err != nil || shared != storePostgres {
			return nil, usageErrorf("bench: --floor postgres measures the PostgreSQL of POSTGRES_URL (or POSTGRES_URL_FILE), and it is not set")
		}
		url, err := secretFromEnv("POSTGRES_URL", m.Getenv)
		if err != nil {
			return nil, err
		}
		schema := m.env("POSTGRES_SCHEMA", pgstore.DefaultSchema)
		return func(n int, when string) (sqlitestore.FloorResult, error) {
			fmt.Fprintf(m.Stderr, "floor%s: %d items, an INSERT … ON CONFLICT and an UPDATE each, each its own transaction, %s, on PostgreSQL %s (schema %s)\n",
				when, n, callersWord(o.callers), pgstore.Describe(url), schema)
			r, err := pgstore.Floor(ctx, url, schema, n, o.callers)
			return sqlitestore.FloorResult{Items: r.Items, Took: r.Took, Commits: r.Commits}, err
		}, nil
	}
	if st, err := os.Stat(o.floor); errors.Is(err, os.ErrNotExist) {
		return nil, usageErrorf("bench: --floor %q does not exist: give a directory on the disk to measure (the data dir's, e.g. /var/lib/companion), "+
			"or postgres for PostgreSQL's floor", o.floor)
	} else if err != nil || !st.IsDir() {
		return nil, usageErrorf("bench: --floor %q is not a directory", o.floor)
	}
	return func(n int, when string) (sqlitestore.FloorResult, error) {
		fmt.Fprintf(m.Stderr, "floor%s: %d items, two fsync'd SQLite transactions each, in %s\n", when, n, o.floor)
		return sqlitestore.Floor(ctx, o.floor, n)
	}, nil
}

// benchRun is one load of a deployment.
type benchRun struct {
	o      benchOptions
	base   string
	client *http.Client // for GET /metrics, and every call behind a proxy
	header http.Header  // every call's through client: shared, as the client only reads it
	target *benchTarget // the lean client's; nil behind a proxy
	next   atomic.Int64 // the next item to claim
	done   atomic.Int64 // items reported
	failed atomic.Int64 // calls that failed
	took   time.Duration
	// cpu is the service's CPU time over the run, in seconds, unless cpuErr says why it is not known.
	cpu    float64
	cpuErr error
	// writer is what the SQLite ledger's writer did over the run; nil when the service has none (MongoDB).
	writer *serviceWriter

	mu    sync.Mutex
	first error
	calls map[string][]time.Duration // per kind of call, the duration of each call that succeeded
}

// newBenchRun prepares a run against u: the lean client (sizing_client.go), unless proxy (as net/http
// reads HTTP_PROXY, HTTPS_PROXY and NO_PROXY) names a proxy for u; then net/http makes the calls.
func newBenchRun(u *url.URL, o benchOptions, roots *x509.CertPool, proxy func(*url.URL) (*url.URL, error)) *benchRun {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = func(req *http.Request) (*url.URL, error) { return proxy(req.URL) }
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = o.callers*2, o.callers*2
	tr.DisableCompression = true // the answers are small JSON; no gzip reader per call
	if roots != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: roots}
	}
	header := http.Header{"Content-Type": {"application/json"}}
	if o.token != "" {
		header.Set("Authorization", "Bearer "+o.token)
	}
	r := &benchRun{o: o, base: u.String(), header: header, client: &http.Client{Transport: tr, Timeout: benchCallTimeout},
		calls: map[string][]time.Duration{}}
	if p, err := proxy(u); err == nil && p == nil {
		r.target = newBenchTarget(u, o.token, roots)
	}
	return r
}

// poster is a new caller's connection.
func (r *benchRun) poster() benchPoster {
	if r.target != nil {
		return &benchConn{t: r.target}
	}
	return &benchStd{client: r.client, base: r.base, header: r.header}
}

// proxyFunc returns the proxy of a URL as net/http's ProxyFromEnvironment finds it, from m.Getenv.
func (m *Main) proxyFunc() func(*url.URL) (*url.URL, error) {
	env := func(names ...string) string {
		for _, n := range names {
			if v := m.Getenv(n); v != "" {
				return v
			}
		}
		return ""
	}
	c := &httpproxy.Config{HTTPProxy: env("HTTP_PROXY", "http_proxy"), HTTPSProxy: env("HTTPS_PROXY", "https_proxy"),
		NoProxy: env("NO_PROXY", "no_proxy")}
	if m.Getenv("REQUEST_METHOD") != "" { // as net/http: under CGI, HTTP_PROXY may be a request's header
		c.HTTPProxy = ""
	}
	return c.ProxyFunc()
}

func (r *benchRun) firstError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first
}

// do runs the callers until every item is claimed and reported (or ctx ends), printing a progress line
// to progress every second.
func (r *benchRun) do(ctx context.Context, progress io.Writer) error {
	start := time.Now()
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stopProgress:
				fmt.Fprintf(progress, "\r%s\n", r.progressLine(time.Since(start)))
				return
			case <-tick.C:
				fmt.Fprintf(progress, "\r%s", r.progressLine(time.Since(start)))
			}
		}
	}()
	var wg sync.WaitGroup
	for range r.o.callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := &caller{conn: r.poster(), calls: map[string][]time.Duration{}}
			defer mine.conn.close()
			for ctx.Err() == nil {
				n := 1
				if r.o.mode == "batch" {
					n = r.o.batch
				}
				from := int(r.next.Add(int64(n))) - n
				if from >= r.o.items {
					break
				}
				to := min(from+n, r.o.items)
				if err := r.claimAndReport(ctx, from, to, mine); err != nil {
					r.failed.Add(1)
					r.mu.Lock()
					if r.first == nil {
						r.first = err
					}
					r.mu.Unlock()
				}
			}
			r.mu.Lock()
			for k, v := range mine.calls {
				r.calls[k] = append(r.calls[k], v...)
			}
			r.mu.Unlock()
		}()
	}
	wg.Wait()
	r.took = time.Since(start)
	close(stopProgress)
	<-progressDone
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bench: stopped: %w", err)
	}
	return nil
}

func (r *benchRun) progressLine(took time.Duration) string {
	done := r.done.Load()
	return fmt.Sprintf("%d/%d items  %.0f items/s  %d errors  %s", done, r.o.items, float64(done)/max(took.Seconds(), 1e-9),
		r.failed.Load(), took.Round(time.Second))
}

// appendKey appends the key of item i, PREFIX:iNNNNNNN:write:0.
func (r *benchRun) appendKey(b []byte, i int) []byte {
	b = append(b, r.o.prefix...)
	b = append(b, ":i"...)
	for n := 1000000; n > 1 && i < n; n /= 10 {
		b = append(b, '0')
	}
	b = strconv.AppendInt(b, int64(i), 10)
	return append(b, ":write:0"...)
}

// caller is what one caller keeps from one call to the next: its connection, the buffer bodies are
// written into, a batch's answers, and the durations of its calls. The bench shares the machine's CPU
// with the service it measures when both run on one host, so what it spends per call is kept small:
// bodies are written with append rather than json.Marshal of maps, answers are read by a scan of the
// fields it needs (sizing_json.go), and the connection is the lean client of sizing_client.go.
type caller struct {
	conn    benchPoster
	body    []byte
	answers []benchAnswer
	calls   map[string][]time.Duration
}

// claimAndReport claims items [from, to) and reports each succeeded: two calls, single or batch.
func (r *benchRun) claimAndReport(ctx context.Context, from, to int, c *caller) error {
	if r.o.mode == "single" {
		c.body = r.appendItem(c.body[:0], from, from)
		answer, took, err := r.call(ctx, c, "before-write", "/v1/before-write", c.body)
		if err != nil {
			return err
		}
		a, err := decodeAnswer(answer)
		if err != nil {
			return fmt.Errorf("before-write: %w", err)
		}
		c.calls["before-write"] = append(c.calls["before-write"], took)
		if err := claimed(a); err != nil {
			return err
		}
		c.body = appendReport(c.body[:0], a)
		if _, took, err = r.call(ctx, c, "after-write", "/v1/after-write", c.body); err != nil {
			return err
		}
		c.calls["after-write"] = append(c.calls["after-write"], took)
		r.done.Add(1)
		return nil
	}
	b := fmt.Appendf(c.body[:0], `{"batch_id":"%s-b%07d","items":[`, r.o.prefix, from)
	for i := from; i < to; i++ {
		if i > from {
			b = append(b, ',')
		}
		b = r.appendItem(b, i, from)
	}
	c.body = append(b, "]}"...)
	answer, took, err := r.call(ctx, c, "batch before-write", "/v1/batches/before-write", c.body)
	if err != nil {
		return err
	}
	if c.answers, err = decodeItems(answer, c.answers); err != nil {
		return fmt.Errorf("batch before-write: %w", err)
	}
	c.calls["batch before-write"] = append(c.calls["batch before-write"], took)
	if len(c.answers) != to-from {
		return fmt.Errorf("batch before-write of %d items answered %d", to-from, len(c.answers))
	}
	b = append(c.body[:0], `{"items":[`...)
	for i, a := range c.answers {
		if err := claimed(a); err != nil {
			return err
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = appendReport(b, a)
	}
	c.body = append(b, "]}"...)
	if answer, took, err = r.call(ctx, c, "batch after-write", "/v1/batches/after-write", c.body); err != nil {
		return err
	}
	// An item's unknown claim or missing key is an error of its own in a 200 answer.
	if c.answers, err = decodeItems(answer, c.answers); err != nil {
		return fmt.Errorf("batch after-write: %w", err)
	}
	c.calls["batch after-write"] = append(c.calls["batch after-write"], took)
	for _, a := range c.answers {
		if a.Error != "" {
			return fmt.Errorf("batch after-write %s answered %s", a.Key, a.Error)
		}
	}
	r.done.Add(int64(to - from))
	return nil
}

// appendItem appends the before-write of item i: its key, a payload, the execution it belongs to and a
// lease. The execution is the templates' execution_id (every n8n template sends it), here PREFIX-eN: one
// per item in single mode (a webhook-triggered run writes one item), one per call in batch mode (N is the
// call's first item), so that the ledger maintains what it maintains for a real workflow's items. The
// prefix is of characters that JSON writes as they are (benchPrefix).
func (r *benchRun) appendItem(b []byte, i, execution int) []byte {
	b = append(b, `{"key":"`...)
	b = r.appendKey(b, i)
	b = append(b, `","payload":{"bench":"`...)
	b = append(b, r.o.prefix...)
	b = append(b, `","n":`...)
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, `},"execution_id":"`...)
	b = append(b, r.o.prefix...)
	b = append(b, "-e"...)
	b = strconv.AppendInt(b, int64(execution), 10)
	return append(b, `","lease_seconds":300}`...)
}

// appendReport appends the after-write of a claimed item: succeeded, with an external id.
func appendReport(b []byte, a benchAnswer) []byte {
	b = append(b, `{"key":`...)
	b = appendJSONString(b, a.Key)
	b = append(b, `,"claim":`...)
	b = appendJSONString(b, a.Claim)
	b = append(b, `,"outcome":"succeeded","external_id":`...)
	b = appendJSONString(b, "bench-"+a.Key)
	return append(b, '}')
}

// appendJSONString appends s as a JSON string, as json.Marshal writes it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// claimed checks that a before-write answered proceed.
func claimed(a benchAnswer) error {
	if a.Decision != "proceed" {
		return fmt.Errorf("before-write %s answered %s/%s, not proceed (keys of an earlier run? use another --prefix)", a.Key, a.Decision, a.Reason)
	}
	return nil
}

// call POSTs body to path on the caller's connection and returns a 200 answer (valid until the
// caller's next call) and how long the call took.
func (r *benchRun) call(ctx context.Context, c *caller, kind, path string, body []byte) ([]byte, time.Duration, error) {
	start := time.Now()
	status, answer, err := c.conn.post(ctx, path, body)
	took := time.Since(start)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", kind, err)
	}
	if status != http.StatusOK {
		return nil, 0, fmt.Errorf("%s: HTTP %d: %s", kind, status, strings.TrimSpace(string(answer[:min(len(answer), 300)])))
	}
	return answer, took, nil
}

// serviceTotals are the service's counters that the bench reads from GET /metrics before and after the
// run.
type serviceTotals struct {
	cpu    float64        // process_cpu_seconds_total
	writer *serviceWriter // the companion_sqlite_ counters; nil when GET /metrics has none
}

// serviceWriter is what the SQLite ledger's one writer did: seconds busy, of which committing, commits,
// transitions; and, when the service has them (cache), its item cache's bound, hits and misses.
type serviceWriter struct {
	busy, committing     float64
	commits, transitions float64
	cache                bool
	cacheBound           float64
	cacheHits, cacheMiss float64
}

// serviceTotals returns the CPU time the service's process has used (user and system, in seconds), as
// its GET /metrics reports it in process_cpu_seconds_total, and its SQLite writer's counters when it has
// them. It needs an operator token (or a service that runs with --metrics-open or open). Behind a load
// balancer they are the replica's that answered.
func (r *benchRun) serviceTotals(ctx context.Context) (serviceTotals, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+"/metrics", nil)
	if err != nil {
		return serviceTotals{}, err
	}
	if a := r.header.Get("Authorization"); a != "" {
		req.Header.Set("Authorization", a)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return serviceTotals{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return serviceTotals{}, metricsStatus(resp.StatusCode)
	}
	return readServiceTotals(resp.Body)
}

// metricsStatus is serviceTotals' error when GET /metrics answered another status than 200.
type metricsStatus int

func (s metricsStatus) Error() string { return fmt.Sprintf("GET /metrics answered %d", int(s)) }

// cpuAdvice says, after the summary's "Service CPU not measured (…)", what would let the next run measure
// it: an operator token only where the service refused the token (403: a workflow token; 401: one it does
// not know). A service that stopped answering (killed during the run, a 503 while it drains) needs none:
// saying "run with an operator token" to a run that had one sent the operator after the wrong cause.
func cpuAdvice(err error) string {
	var st metricsStatus
	switch {
	case errors.As(err, &st) && st == http.StatusForbidden:
		return ": run with an operator token to read it from GET /metrics"
	case errors.As(err, &st) && st == http.StatusUnauthorized:
		return ": the service does not know COMPANION_TOKEN; run with one of its operator tokens to read it from GET /metrics"
	case errors.As(err, &st):
		return ": the service did not answer GET /metrics after the run"
	}
	return ": the service could not be reached for GET /metrics after the run (stopped or restarted meanwhile?)"
}

// readServiceTotals reads serviceTotals from a GET /metrics body (Prometheus text format).
func readServiceTotals(body io.Reader) (serviceTotals, error) {
	var t serviceTotals
	var w serviceWriter
	found, writer, cache := false, 0, 0
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		var dst *float64
		switch name {
		case "process_cpu_seconds_total":
			dst, found = &t.cpu, ok
		case "companion_sqlite_writer_busy_seconds_total":
			dst = &w.busy
		case "companion_sqlite_writer_commit_seconds_total":
			dst = &w.committing
		case "companion_sqlite_commits_total":
			dst = &w.commits
		case "companion_sqlite_transitions_total":
			dst = &w.transitions
		case "companion_sqlite_item_cache_bound_items":
			dst = &w.cacheBound
		case "companion_sqlite_item_cache_hits_total":
			dst = &w.cacheHits
		case "companion_sqlite_item_cache_misses_total":
			dst = &w.cacheMiss
		default:
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if !ok || err != nil {
			return serviceTotals{}, fmt.Errorf("GET /metrics: cannot read %q", sc.Text())
		}
		*dst = f
		switch dst {
		case &t.cpu:
		case &w.cacheBound, &w.cacheHits, &w.cacheMiss:
			cache++
		default:
			writer++
		}
	}
	w.cache = cache == 3 // a service of an earlier release has none
	if err := sc.Err(); err != nil {
		return serviceTotals{}, err
	}
	if !found {
		return serviceTotals{}, errors.New("GET /metrics has no process_cpu_seconds_total")
	}
	if writer == 4 {
		t.writer = &w
	}
	return t, nil
}

// percentile returns the p-th percentile (0-100) of sorted durations, by the nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// callersWord counts callers in words a reader expects: "1 caller", "32 callers".
func callersWord(n int) string {
	if n == 1 {
		return "1 caller"
	}
	return fmt.Sprintf("%d callers", n)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

// benchWriter prints what the SQLite ledger's one writer did over the run (w), and what limits the writes
// when it was busy nearly all the time: the writer's CPU (deciding and writing) or the disk (committing).
func (m *Main) benchWriter(w *serviceWriter, took time.Duration) {
	if took <= 0 || w.commits <= 0 {
		return
	}
	busy, committing := w.busy/took.Seconds(), w.committing/took.Seconds()
	fmt.Fprintf(m.Stdout, "\nSQLite writer: busy %.0f%% of the run (committing, the fsync included, %.0f%%; reading, deciding and\n"+
		"writing %.0f%%), %.1f transitions per commit (companion_sqlite_ of GET /metrics).\n",
		100*busy, 100*committing, 100*(busy-committing), w.transitions/w.commits)
	if lookups := w.cacheHits + w.cacheMiss; w.cache && lookups > 0 {
		if w.cacheBound == 0 {
			fmt.Fprintf(m.Stdout, "Its item cache is off (--item-cache 0, or a platform without the data dir's lock): all %.0f item\n"+
				"lookups read the database.\n", lookups)
		} else {
			// Each item's claim is a new key, which no cache holds: half the lookups at most are hits.
			fmt.Fprintf(m.Stdout, "Its item cache (--item-cache %.0f) answered %.0f%% of %.0f item lookups (a claim's new key is never\n"+
				"in it: half at most).\n", w.cacheBound, 100*w.cacheHits/lookups, lookups)
		}
	}
	switch {
	case busy < 0.85:
	case committing > busy/2:
		fmt.Fprintln(m.Stdout, "The ledger's one writer was busy nearly all the time, mostly committing: the disk's fsync limits\n"+
			"these writes. More callers share each fsync; a disk with faster syncs lifts the limit.")
	default:
		fmt.Fprintln(m.Stdout, "The ledger's one writer was busy nearly all the time, mostly deciding and writing: its one core limits\n"+
			"these writes. A faster core lifts the limit, more cores do not; batches cost it far less per item.")
	}
}

// benchSummary prints the summary table.
func (m *Main) benchSummary(o benchOptions, run *benchRun, halves []sqlitestore.FloorResult) {
	w := tabwriter.NewWriter(m.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "\tcalls\titems\titems/s\tp50/call\tp99/call\terrors\t")
	var rate float64
	if run != nil {
		rate = float64(run.done.Load()) / run.took.Seconds()
		kinds := []string{"before-write", "after-write"}
		if o.mode == "batch" {
			kinds = []string{"batch before-write", "batch after-write"}
		}
		for _, k := range kinds {
			d := slices.Clone(run.calls[k])
			slices.Sort(d)
			fmt.Fprintf(w, "%s\t%d\t\t\t%s\t%s\t\t\n", k, len(d), ms(percentile(d, 50)), ms(percentile(d, 99)))
		}
		name := fmt.Sprintf("%s, %s", o.mode, callersWord(o.callers))
		if o.mode == "batch" {
			name = fmt.Sprintf("batch of %d, %s", o.batch, callersWord(o.callers))
		}
		fmt.Fprintf(w, "%s\t\t%d\t%.0f\t\t\t%d\t\n", name, run.done.Load(), rate, run.failed.Load())
	}
	var floor sqlitestore.FloorResult
	for _, h := range halves {
		floor.Items += h.Items
		floor.Took += h.Took
		floor.Commits = append(floor.Commits, h.Commits...)
	}
	if len(halves) > 0 {
		d := slices.Clone(floor.Commits)
		slices.Sort(d)
		name := "floor (2 fsync'd SQLite commits/item)"
		if o.floor == floorPostgres {
			name = fmt.Sprintf("floor (PostgreSQL, 2 commits/item, %s)", callersWord(o.callers))
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%.0f\t%s\t%s\t0\t\n", name, len(d), floor.Items, floor.ItemsPerSecond(),
			ms(percentile(d, 50)), ms(percentile(d, 99)))
	}
	w.Flush()
	// A run that wrote nothing (every call failed: the error says why) has no rate to set against the floor.
	if run != nil && run.done.Load() > 0 && floor.ItemsPerSecond() > 0 {
		fmt.Fprintf(m.Stdout, "\n%.0f items/s is %.2f× the floor (%.0f items/s", rate, rate/floor.ItemsPerSecond(), floor.ItemsPerSecond())
		end := ")." // closes the floor's parenthesis
		if len(halves) == 2 {
			b, a := halves[0].ItemsPerSecond(), halves[1].ItemsPerSecond()
			fmt.Fprintf(m.Stdout, "; %.0f before the run, %.0f after it", b, a)
			if lo, hi := min(a, b), max(a, b); lo > 0 && hi/lo > 1.5 {
				fmt.Fprintf(m.Stdout, ").\nThe floor moved %.1f× between before and after the run: the disk's fsync latency changed, so\n"+
					"this ratio is uncertain (%.2f× to %.2f×); run again, or compare several runs", hi/lo, rate/hi, rate/lo)
				end = "." // the parenthesis was closed above
			}
		}
		fmt.Fprintln(m.Stdout, end)
	}
	switch {
	case run == nil:
	case run.cpuErr != nil:
		fmt.Fprintf(m.Stdout, "\nService CPU not measured (%v)%s.\n", run.cpuErr, cpuAdvice(run.cpuErr))
	case run.done.Load() > 0:
		fmt.Fprintf(m.Stdout, "\nService CPU: %.0f µs per item (%.2f s over the run, process_cpu_seconds_total of GET /metrics: "+
			"the replica that answered, with whatever else it served meanwhile).\n", run.cpu*1e6/float64(run.done.Load()), run.cpu)
	}
	if run != nil && run.cpuErr == nil && run.writer != nil {
		m.benchWriter(run.writer, run.took)
	}
	if run != nil {
		fmt.Fprintf(m.Stdout, "\nThe items are the tenant's, keys %s:i…:write:0; list them with\n  companion items list --workflow %s --all\n", o.prefix, o.prefix)
	}
}
