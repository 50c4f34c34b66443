// Command replicafaults proves that several replicas of companion on one shared store keep the ledger's
// promises while replicas are killed and the database crashes under them.
//
// It starts --replicas `companion serve` processes on one PostgreSQL (or MongoDB) store and drives the
// protocol through them as workflows do: for every key two callers race, each asking another replica's
// before-write; the one told "proceed" writes (here: notes the effect) and reports success to a third
// replica. Meanwhile one replica is SIGKILLed and started again every --kill-every, and the database is
// stopped by --db-stop (a crash: `pg_ctl … stop -m immediate`) and started again by --db-start every
// --db-crash-every. At the end, with every replica and the database up, it reads every key it touched
// and checks what the ledger promises:
//
//   - every proceed a caller received (acknowledged: the answer reached it) is in the ledger, with its
//     attempt number and its claim;
//   - every success report the service acknowledged is `succeeded`;
//   - no key was told "proceed" twice for one attempt.
//
// It speaks only the HTTP contract and starts the service as an operator would: it imports nothing of
// the service. It prints a progress line every 10 s and a summary, and exits 1 when a promise was broken.
// scripts/replica-faults.sh runs it against a PostgreSQL cluster of its own; docs/deploying.md says how
// to run it against yours.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const usage = `usage: replicafaults --postgres URL | --mongodb URI [flags]

Starts --replicas companion serve processes on one shared store, races two callers per key through
different replicas while replicas are SIGKILLed and the database is crashed, then checks that every
acknowledged proceed is in the ledger with its attempt, every acknowledged success is succeeded, and
no key was told proceed twice for one attempt. Exits 1 if any promise was broken, 2 on a usage mistake.

The ledger is written in a schema (PostgreSQL) or database (MongoDB) of its own, named on the first
line, so an existing ledger on the same server is not touched; it is left in place afterwards.

flags:
`

type options struct {
	companion    string
	postgres     string
	mongodb      string
	schema       string
	replicas     int
	pairs        int
	duration     time.Duration
	killEvery    time.Duration
	dbCrashEvery time.Duration
	dbDown       time.Duration
	dbStop       string
	dbStart      string
	workDir      string
	keep         bool
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("replicafaults", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	fs.StringVar(&o.companion, "companion", "companion", "the companion `program` to start (a path, or a name on PATH)")
	fs.StringVar(&o.postgres, "postgres", os.Getenv("COMPANION_TEST_POSTGRES_URL"), "PostgreSQL `URL` of the shared store (env COMPANION_TEST_POSTGRES_URL)")
	fs.StringVar(&o.mongodb, "mongodb", os.Getenv("COMPANION_TEST_MONGODB_URI"), "MongoDB replica set `URI` of the shared store (env COMPANION_TEST_MONGODB_URI)")
	fs.StringVar(&o.schema, "schema", "", "PostgreSQL schema or MongoDB database of the run's ledger (default: replicafaults_ and a random suffix)")
	fs.IntVar(&o.replicas, "replicas", 3, "companion serve processes on the store")
	fs.IntVar(&o.pairs, "pairs", 8, "pairs of callers; the two callers of a pair race for each key")
	fs.DurationVar(&o.duration, "duration", time.Minute, "how long the faults go on")
	fs.DurationVar(&o.killEvery, "kill-every", time.Second, "SIGKILL one replica (in turn) and start it again this often; 0: never")
	fs.DurationVar(&o.dbCrashEvery, "db-crash-every", 5*time.Second, "run --db-stop, wait --db-down, run --db-start this often; 0 or no --db-stop: never")
	fs.DurationVar(&o.dbDown, "db-down", time.Second, "how long the database stays down")
	fs.StringVar(&o.dbStop, "db-stop", "", "shell `command` that crash-stops the database (e.g. pg_ctlcluster 15 main stop -m immediate)")
	fs.StringVar(&o.dbStart, "db-start", "", "shell `command` that starts the database again and returns once it accepts connections")
	fs.StringVar(&o.workDir, "work-dir", "", "`directory` for the replicas' logs and config (default: a new temporary one)")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory afterwards (it is kept anyway when a promise was broken)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if err := o.check(given); err != nil {
		fmt.Fprintln(stderr, "replicafaults:", err)
		return 2
	}
	r, err := newRunner(o, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "replicafaults:", err)
		return 1
	}
	broken, err := r.run(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "replicafaults:", err)
		fmt.Fprintf(stderr, "replicafaults: the replicas' logs are in %s\n", r.dir)
		return 1
	}
	if broken || o.keep {
		fmt.Fprintf(stdout, "the replicas' logs are in %s\n", r.dir)
	} else {
		os.RemoveAll(r.dir)
	}
	if broken {
		return 1
	}
	return 0
}

// check refuses a run that cannot say anything. given names the flags the command line set.
func (o *options) check(given map[string]bool) error {
	switch {
	case o.postgres == "" && o.mongodb == "":
		return errors.New("give the shared store: --postgres URL (or COMPANION_TEST_POSTGRES_URL) or --mongodb URI (or COMPANION_TEST_MONGODB_URI)")
	case o.postgres != "" && o.mongodb != "" && !given["postgres"] && !given["mongodb"]:
		return errors.New("both COMPANION_TEST_POSTGRES_URL and COMPANION_TEST_MONGODB_URI are set: say which store with --postgres or --mongodb")
	case o.replicas < 2:
		return errors.New("--replicas must be at least 2: the run races callers across replicas")
	case o.pairs < 1:
		return errors.New("--pairs must be at least 1")
	case o.duration <= 0:
		return errors.New("--duration must be more than 0")
	case (o.dbStop == "") != (o.dbStart == ""):
		return errors.New("give --db-stop and --db-start together (or neither: the database is then not crashed)")
	}
	if given["postgres"] {
		o.mongodb = ""
	} else if given["mongodb"] {
		o.postgres = ""
	}
	if o.schema == "" {
		o.schema = "replicafaults_" + randomHex(4)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// runner holds one run: the replicas, the callers' record of what the service acknowledged, and the
// counts the summary prints.
type runner struct {
	o      options
	out    io.Writer
	dir    string
	token  string
	prefix string
	client *http.Client
	reps   []*replica

	mu        sync.Mutex
	proceeds  map[attemptRef]string // the claim each acknowledged proceed carried
	doubles   []string              // (key, attempt) told proceed with two claims
	successes map[string]int        // key → the attempt whose success report was acknowledged
	keys      map[string]bool

	n struct {
		keys, proceeds, sameKey, successes, skips, gaveUp atomic.Int64
		transport, unavailable, otherStatus               atomic.Int64
		kills, dbCrashes                                  atomic.Int64
	}
}

type attemptRef struct {
	key     string
	attempt int
}

func newRunner(o options, out io.Writer) (*runner, error) {
	dir := o.workDir
	var err error
	if dir == "" {
		dir, err = os.MkdirTemp("", "replicafaults-")
	} else {
		err = os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		return nil, err
	}
	r := &runner{
		o: o, out: out, dir: dir,
		token:     "faults-" + randomHex(16),
		prefix:    "rf-" + randomHex(3),
		client:    &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 5 * time.Second}},
		proceeds:  map[attemptRef]string{},
		successes: map[string]int{},
		keys:      map[string]bool{},
	}
	// One destination of its own: the receiver honours the idempotency key (so an unknown outcome is
	// retried with the same key), and enough attempts that a key survives many lost claims.
	cfg := "destinations:\n  faults:\n    dedupe: key\n    max_attempts: 50\n    lease_seconds: 5\n"
	if err := os.WriteFile(filepath.Join(dir, "companion.yaml"), []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	for i := range o.replicas {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		r.reps = append(r.reps, &replica{n: i, addr: fmt.Sprintf("127.0.0.1:%d", port), r: r})
	}
	return r, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (r *runner) storeEnv() []string {
	if r.o.postgres != "" {
		return []string{"POSTGRES_URL=" + r.o.postgres, "POSTGRES_SCHEMA=" + r.o.schema}
	}
	return []string{"MONGODB_URI=" + r.o.mongodb, "MONGODB_DATABASE=" + r.o.schema}
}

func (r *runner) storeName() string {
	if r.o.postgres != "" {
		return "postgres schema " + r.o.schema
	}
	return "mongodb database " + r.o.schema
}

func (r *runner) run(ctx context.Context) (broken bool, err error) {
	fmt.Fprintf(r.out, "replicafaults: %d replicas on %s, %d callers in pairs, %s of faults (kill every %s, database crash every %s), logs in %s\n",
		len(r.reps), r.storeName(), 2*r.o.pairs, r.o.duration, r.o.killEvery, r.crashEvery(), r.dir)
	// The first replica alone first: it creates the ledger, so the others do not race to migrate a new
	// schema (they may; that is the store's business, but a failed start here would say nothing useful).
	if err := r.reps[0].start(); err != nil {
		return false, err
	}
	if err := r.reps[0].waitReady(ctx, time.Minute); err != nil {
		return false, err
	}
	for _, rep := range r.reps[1:] {
		if err := rep.start(); err != nil {
			return false, err
		}
	}
	for _, rep := range r.reps[1:] {
		if err := rep.waitReady(ctx, time.Minute); err != nil {
			return false, err
		}
	}
	defer func() {
		for _, rep := range r.reps {
			rep.kill()
		}
	}()

	faultsCtx, endFaults := context.WithTimeout(ctx, r.o.duration)
	defer endFaults()
	var faults sync.WaitGroup
	faults.Go(func() { r.killLoop(faultsCtx) })
	faults.Go(func() { r.crashLoop(faultsCtx) })
	faults.Go(func() { r.progressLoop(faultsCtx) })

	// Callers start new keys until the faults end; the key each is on then is finished (its report
	// delivered, or its budget spent) with every replica and the database up again.
	var callers sync.WaitGroup
	for p := range r.o.pairs {
		callers.Go(func() { r.pair(faultsCtx, ctx, p) })
	}
	faults.Wait()
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	for _, rep := range r.reps {
		if !rep.running() {
			if err := rep.start(); err != nil {
				return false, err
			}
		}
	}
	for _, rep := range r.reps {
		if err := rep.waitReady(ctx, time.Minute); err != nil {
			return false, err
		}
	}
	callers.Wait()
	fmt.Fprintf(r.out, "faults over after %s; every replica ready; checking %d keys\n", r.o.duration, len(r.keys))
	return r.verify(ctx)
}

func (r *runner) crashEvery() string {
	if r.o.dbStop == "" || r.o.dbCrashEvery <= 0 {
		return "never"
	}
	return r.o.dbCrashEvery.String()
}

func (r *runner) killLoop(ctx context.Context) {
	if r.o.killEvery <= 0 {
		return
	}
	t := time.NewTicker(r.o.killEvery)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rep := r.reps[i%len(r.reps)]
		rep.kill()
		r.n.kills.Add(1)
		if err := rep.start(); err != nil {
			fmt.Fprintf(r.out, "replica %d did not start again: %v\n", rep.n, err)
		}
	}
}

func (r *runner) crashLoop(ctx context.Context) {
	if r.o.dbStop == "" || r.o.dbCrashEvery <= 0 {
		return
	}
	t := time.NewTicker(r.o.dbCrashEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := shell(r.o.dbStop); err != nil {
			fmt.Fprintf(r.out, "--db-stop failed: %v\n", err)
		} else {
			r.n.dbCrashes.Add(1)
		}
		time.Sleep(r.o.dbDown)
		// The database must come back, even when the run is over: the check reads through it.
		for attempt := 1; ; attempt++ {
			err := shell(r.o.dbStart)
			if err == nil {
				break
			}
			fmt.Fprintf(r.out, "--db-start failed (try %d): %v\n", attempt, err)
			if attempt == 10 {
				return
			}
			time.Sleep(time.Second)
		}
	}
}

func shell(command string) error {
	out, err := exec.Command("sh", "-c", command).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", command, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (r *runner) progressLoop(ctx context.Context) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fmt.Fprintf(r.out, "%3.0fs: %s\n", time.Since(start).Seconds(), r.counts())
	}
}

func (r *runner) counts() string {
	return fmt.Sprintf("keys %d, proceeds %d (same-key retries %d), successes recorded %d, replica kills %d, database crashes %d, "+
		"refused 503 %d, no answer %d",
		r.n.keys.Load(), r.n.proceeds.Load(), r.n.sameKey.Load(), r.n.successes.Load(), r.n.kills.Load(), r.n.dbCrashes.Load(),
		r.n.unavailable.Load(), r.n.transport.Load())
}

// pair runs two callers per key, one key after another, until ctx (the faults) ends. Key n of pair p
// is asked of replicas b and b+1 (b = p+n, in turn) and reported to b+2: each caller of a race asks
// another replica, and the report may reach a third.
func (r *runner) pair(ctx, runCtx context.Context, p int) {
	for n := 0; ctx.Err() == nil; n++ {
		key := fmt.Sprintf("%s-%d-%d", r.prefix, p, n)
		r.mu.Lock()
		r.keys[key] = true
		r.mu.Unlock()
		r.n.keys.Add(1)
		b := p + n
		var race sync.WaitGroup
		for c := range 2 {
			race.Go(func() { r.caller(runCtx, key, b+c, b+2) })
		}
		race.Wait()
	}
}

// keyBudget bounds the time one caller spends on one key: past it the key is left as it is (a claim
// nobody reports expires into unknown, which the ledger handles; nothing is checked of a claim whose
// answer never arrived).
const keyBudget = 45 * time.Second

// caller asks before-write until it is told something final, and reports the write when it is told to
// proceed: what a workflow does.
func (r *runner) caller(ctx context.Context, key string, ask, report int) {
	deadline := time.Now().Add(keyBudget)
	refused := false // an earlier ask of this caller got no answer or a 503: a claim of ours may be held
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var a struct {
			Decision   string `json:"decision"`
			Reason     string `json:"reason"`
			Attempt    int    `json:"attempt"`
			Claim      string `json:"claim"`
			RetryAfter int    `json:"retry_after"`
		}
		status, err := r.post(ctx, ask, "/v1/before-write", map[string]any{
			"key": key, "payload": map[string]any{"key": key, "amount": "120.50"},
			"destination": "faults", "lease_seconds": 5, "execution_id": "faults",
		}, &a)
		if err != nil || status != http.StatusOK {
			refused = true
			ask++ // a workflow's retry may land on any replica
			pause(ctx, 100*time.Millisecond)
			continue
		}
		switch a.Decision {
		case "proceed":
			r.proceeded(key, a.Attempt, a.Claim, a.Reason)
			r.reportSuccess(ctx, key, a.Claim, a.Attempt, report, deadline)
			return
		case "skip":
			switch a.Reason {
			case "in_progress":
				if !refused {
					return // the other caller holds it: its report is its business
				}
				// Maybe our own claim, whose answer we lost: wait for its lease, then ask again (the ledger
				// then offers the same key again, as retry_same_key).
				pause(ctx, time.Duration(max(a.RetryAfter, 1))*time.Second)
				continue
			case "succeeded":
				r.n.skips.Add(1)
				return
			default: // awaiting_owner, attempts_exhausted…: the ledger gave it to a person
				r.n.gaveUp.Add(1)
				return
			}
		default:
			r.violation(fmt.Sprintf("%s: before-write answered %s/%s to the same payload", key, a.Decision, a.Reason))
			return
		}
	}
}

func (r *runner) proceeded(key string, attempt int, claim, reason string) {
	r.n.proceeds.Add(1)
	if reason == "retry_same_key" {
		r.n.sameKey.Add(1)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ref := attemptRef{key, attempt}
	if first, ok := r.proceeds[ref]; ok && first != claim {
		r.doubles = append(r.doubles, fmt.Sprintf("%s attempt %d: proceed with claim %s and again with %s", key, attempt, first, claim))
		return
	}
	r.proceeds[ref] = claim
}

func (r *runner) violation(what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.doubles = append(r.doubles, what)
}

// reportSuccess tells the service the write succeeded, until a replica acknowledges it.
func (r *runner) reportSuccess(ctx context.Context, key, claim string, attempt, report int, deadline time.Time) {
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var a struct {
			State  string `json:"state"`
			Reason string `json:"reason"`
		}
		status, err := r.post(ctx, report, "/v1/after-write", map[string]any{
			"key": key, "claim": claim, "outcome": "succeeded", "external_id": "x-" + key,
		}, &a)
		if err == nil && status == http.StatusOK {
			if a.State != "succeeded" {
				r.violation(fmt.Sprintf("%s: a success report of attempt %d answered state %s (%s)", key, attempt, a.State, a.Reason))
				return
			}
			r.n.successes.Add(1)
			r.mu.Lock()
			r.successes[key] = attempt
			r.mu.Unlock()
			return
		}
		report++
		pause(ctx, 100*time.Millisecond)
	}
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// post sends one request to a replica and decodes a 200's answer into answer. It counts what did not
// answer 200.
func (r *runner) post(ctx context.Context, rep int, path string, body, answer any) (int, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+r.reps[rep%len(r.reps)].addr+path, bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	return r.do(req, answer)
}

func (r *runner) do(req *http.Request, answer any) (int, error) {
	req.Header.Set("Authorization", "Bearer "+r.token)
	resp, err := r.client.Do(req)
	if err != nil {
		r.n.transport.Add(1)
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		r.n.transport.Add(1)
		return 0, err
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		if err := json.Unmarshal(body, answer); err != nil {
			return 0, fmt.Errorf("%s: %w", req.URL.Path, err)
		}
	case resp.StatusCode == http.StatusServiceUnavailable:
		r.n.unavailable.Add(1)
	default:
		r.n.otherStatus.Add(1)
		if r.n.otherStatus.Load() <= 5 {
			fmt.Fprintf(r.out, "%s %s answered %d: %s\n", req.Method, req.URL.Path, resp.StatusCode, bytes.TrimSpace(body))
		}
	}
	return resp.StatusCode, nil
}

// ledgerItem is what the check reads of GET /v1/items/{key}.
type ledgerItem struct {
	State    string `json:"state"`
	Attempt  int    `json:"attempt"`
	Attempts []struct {
		Number int    `json:"number"`
		Claim  string `json:"claim"`
	} `json:"attempts"`
}

// verify reads every key touched and holds the ledger to the three promises.
func (r *runner) verify(ctx context.Context) (broken bool, err error) {
	var lost, wrong []string
	r.mu.Lock()
	keys := make([]string, 0, len(r.keys))
	for k := range r.keys {
		keys = append(keys, k)
	}
	r.mu.Unlock()
	sort.Strings(keys)
	ledger := map[string]*ledgerItem{}
	for i, key := range keys {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.reps[i%len(r.reps)].addr+"/v1/items/"+url.PathEscape(key), nil)
		if err != nil {
			return false, err
		}
		var it ledgerItem
		status, err := r.do(req, &it)
		switch {
		case err != nil:
			return false, fmt.Errorf("reading %s for the check: %w", key, err)
		case status == http.StatusNotFound:
			ledger[key] = nil
		case status != http.StatusOK:
			return false, fmt.Errorf("reading %s for the check: HTTP %d", key, status)
		default:
			ledger[key] = &it
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for ref, claim := range r.proceeds {
		it := ledger[ref.key]
		if it == nil || !slicesContain(it, ref.attempt, claim) {
			lost = append(lost, fmt.Sprintf("%s: the proceed of attempt %d (claim %s) is not in the ledger", ref.key, ref.attempt, claim))
		}
	}
	for key, attempt := range r.successes {
		if it := ledger[key]; it == nil || it.State != "succeeded" {
			state := "missing"
			if it != nil {
				state = it.State
			}
			wrong = append(wrong, fmt.Sprintf("%s: the success of attempt %d was acknowledged, the ledger says %s", key, attempt, state))
		}
	}
	sort.Strings(lost)
	sort.Strings(wrong)
	fmt.Fprintf(r.out, "%s\n", r.counts())
	fmt.Fprintf(r.out, "acknowledged: %d proceeds, %d successes; skipped as succeeded %d, handed to a person %d; other answers %d\n",
		len(r.proceeds), len(r.successes), r.n.skips.Load(), r.n.gaveUp.Load(), r.n.otherStatus.Load())
	fmt.Fprintf(r.out, "losses %d (proceeds missing %d, successes not succeeded %d), double proceeds %d\n",
		len(lost)+len(wrong), len(lost), len(wrong), len(r.doubles))
	for _, l := range append(append(lost, wrong...), r.doubles...) {
		fmt.Fprintln(r.out, "  ", l)
	}
	broken = len(lost)+len(wrong)+len(r.doubles) > 0
	if broken {
		fmt.Fprintln(r.out, "FAIL")
	} else {
		fmt.Fprintln(r.out, "PASS")
	}
	return broken, nil
}

func slicesContain(it *ledgerItem, attempt int, claim string) bool {
	for _, a := range it.Attempts {
		if a.Number == attempt && a.Claim == claim {
			return true
		}
	}
	return false
}

// replica is one companion serve process, started again after each kill on the same address.
type replica struct {
	n    int
	addr string
	r    *runner

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	starts int
}

func (p *replica) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.starts++
	log, err := os.OpenFile(filepath.Join(p.r.dir, fmt.Sprintf("replica-%d.log", p.n)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "--- start %d\n", p.starts)
	cmd := exec.Command(p.r.o.companion, "serve", "--addr", p.addr, "--sweep-every", "@every 1s",
		"--config", filepath.Join(p.r.dir, "companion.yaml"), "--data-dir", filepath.Join(p.r.dir, "data"))
	cmd.Env = append(os.Environ(), p.r.storeEnv()...)
	cmd.Env = append(cmd.Env, "COMPANION_TOKENS=faults:faults:operator:"+p.r.token)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting %s: %w", p.r.o.companion, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(exited) }()
	p.cmd, p.exited = cmd, exited
	return nil
}

func (p *replica) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill ends the process at once, as a crash or an OOM kill would, and waits for it to be gone.
func (p *replica) kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

func (p *replica) waitReady(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if !p.running() {
			return fmt.Errorf("replica %d (%s) exited at its start: see %s", p.n, p.addr, filepath.Join(p.r.dir, fmt.Sprintf("replica-%d.log", p.n)))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+"/readyz", nil)
		if resp, err := p.r.client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("replica %d (%s) not ready within %s: see %s", p.n, p.addr, within, filepath.Join(p.r.dir, fmt.Sprintf("replica-%d.log", p.n)))
}
