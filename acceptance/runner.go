package acceptance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// Options configure one run of the suite.
type Options struct {
	// Service and Receiver are the two sides of every assertion. Required.
	Service  *Service
	Receiver *Receiver
	// Settings are the client settings; zero means DefaultSettings.
	Settings Settings
	// Skip names cases not to run, each with the reason printed in the table.
	Skip map[string]string
	// Only, when not empty, runs only the cases with these ids.
	Only []string
	// Parallel is how many cases run at once (the key-retention case always runs alone, last). Zero
	// means 4.
	Parallel int
	// Progress gets one line per case as it finishes; nil discards them.
	Progress io.Writer
	// OnStart, when set, is called with the header once both sides answered, before the first case.
	OnStart func(Header)
	// ServiceVersion and Store describe the service for the header when it does not report them itself
	// (an in-process service knows them).
	ServiceVersion string
	Store          string
	// SkipDestinationCheck runs the cases without first checking that the service has the suite's
	// destinations (their dedupe). Only for tests that misconfigure a destination on purpose to show
	// that a case fails on it; the check would refuse the run first.
	SkipDestinationCheck bool
	// AwaitProbeRun, when set, is called by a case that has seen the service's own probe settle its item,
	// before the case's next call, and returns once the probe run that settled it is over (an error: it
	// did not end in time). Nil: the case calls at once, as a workflow would. Only a service on a test
	// server whose single-document updates are not atomic needs it (InProcess.AwaitProbeRun says why).
	AwaitProbeRun func(ctx context.Context) error
}

// Header records what seed 000 asks a run to record: what ran, on what configuration, when.
type Header struct {
	ServiceURL        string            `json:"service_url"`
	ServiceVersion    string            `json:"service_version"`
	Store             string            `json:"store"`
	ReceiverURL       string            `json:"receiver_url"`
	ReceiverMode      ReceiverMode      `json:"receiver_mode"`
	ConfigurationHash string            `json:"configuration_hash"`
	Destinations      []DestinationSpec `json:"destinations"`
	Settings          Settings          `json:"settings"`
	// RetrySettings is the retry policy the run exercises, in words.
	RetrySettings string    `json:"retry_settings"`
	RunID         string    `json:"run_id"`
	Timestamp     time.Time `json:"timestamp"`
}

// Result is a whole run.
type Result struct {
	Header   Header       `json:"header"`
	Cases    []CaseResult `json:"cases"`
	Passed   int          `json:"passed"`
	Failed   int          `json:"failed"`
	Skipped  int          `json:"skipped"`
	Duration float64      `json:"duration_seconds"`
}

// Case statuses.
const (
	Pass = "PASS"
	Fail = "FAIL"
	Skip = "SKIP"
)

// CaseResult is one case: what was injected, what each side was expected to show and showed.
type CaseResult struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	// Fault is the injected fault and the boundary it acts at.
	Fault string `json:"fault"`
	// ClientSaw is what the workflow's HTTP step actually saw of each write, in order.
	ClientSaw       []string `json:"client_saw"`
	ExpectedLedger  string   `json:"expected_ledger"`
	ObservedLedger  string   `json:"observed_ledger"`
	ExpectedEffects string   `json:"expected_effects"`
	ObservedEffects string   `json:"observed_effects"`
	Status          string   `json:"status"`
	// SkipReason says why a skipped case did not run.
	SkipReason string `json:"skip_reason,omitempty"`
	// Failures explain every mismatch, and an error that stopped the case.
	Failures []string `json:"failures,omitempty"`
	Checks   []Check  `json:"checks"`
	Duration float64  `json:"duration_seconds"`
}

// Check is one assertion of a case.
type Check struct {
	// Step says when it was made ("after the dropped response").
	Step string `json:"step"`
	// Side is ledger, effects or evidence (what the client saw).
	Side     string `json:"side"`
	Expected string `json:"expected"`
	Observed string `json:"observed"`
	OK       bool   `json:"ok"`
}

// Sides of a check.
const (
	sideLedger   = "ledger"
	sideEffects  = "effects"
	sideEvidence = "evidence"
)

// Run runs the suite. It returns an error only when the run cannot start (the service or the receiver
// cannot be reached); failing cases are in the result.
func Run(ctx context.Context, opts Options) (*Result, error) {
	if opts.Service == nil || opts.Receiver == nil {
		return nil, errors.New("acceptance: a service and a receiver are required")
	}
	if opts.Settings == (Settings{}) {
		opts.Settings = DefaultSettings()
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 4
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	cases := Cases()
	for _, id := range opts.Only {
		if !slices.ContainsFunc(cases, func(c Case) bool { return c.ID == id }) {
			return nil, fmt.Errorf("acceptance: no case %q (cases are 1-%d)", id, len(cases))
		}
	}
	if len(opts.Only) > 0 {
		cases = slices.DeleteFunc(cases, func(c Case) bool { return !slices.Contains(opts.Only, c.ID) })
	}
	header, err := readHeader(ctx, opts)
	if err != nil {
		return nil, err
	}
	if !opts.SkipDestinationCheck {
		if err := checkDestinations(ctx, opts.Service, header.RunID); err != nil {
			return nil, err
		}
	}
	if opts.OnStart != nil {
		opts.OnStart(header)
	}
	r := &runner{opts: opts, runID: header.RunID}
	started := time.Now()

	results := make([]CaseResult, len(cases))
	var progress sync.Mutex
	done := 0
	finish := func(i int, res CaseResult) {
		results[i] = res
		progress.Lock()
		defer progress.Unlock()
		done++
		fmt.Fprintf(opts.Progress, "[%2d/%d] case %-3s %s  %s (%.1fs)\n", done, len(cases), res.ID, res.Status, res.Title, res.Duration)
		for _, f := range res.Failures {
			wrap(opts.Progress, "          ", "            ", f)
		}
	}

	// Slow cases (waiting out a lease) start first so that they overlap; exclusive ones run alone after
	// everything else, since they change the receiver's mode for all keys.
	var shared, exclusive []int
	for i, c := range cases {
		switch {
		case opts.Skip[c.ID] != "":
			finish(i, CaseResult{ID: c.ID, Title: c.Title, Fault: c.Fault, Status: Skip, SkipReason: opts.Skip[c.ID]})
		case c.Exclusive:
			exclusive = append(exclusive, i)
		default:
			shared = append(shared, i)
		}
	}
	slices.SortStableFunc(shared, func(a, b int) int {
		switch {
		case cases[a].Slow == cases[b].Slow:
			return 0
		case cases[a].Slow:
			return -1
		}
		return 1
	})
	queue := make(chan int)
	var wg sync.WaitGroup
	for range min(opts.Parallel, max(len(shared), 1)) {
		wg.Go(func() {
			for i := range queue {
				finish(i, r.runCase(ctx, cases[i]))
			}
		})
	}
	for _, i := range shared {
		queue <- i
	}
	close(queue)
	wg.Wait()
	for _, i := range exclusive {
		finish(i, r.runCase(ctx, cases[i]))
	}

	res := &Result{Header: header, Cases: results, Duration: time.Since(started).Seconds()}
	for _, c := range results {
		switch c.Status {
		case Pass:
			res.Passed++
		case Fail:
			res.Failed++
		default:
			res.Skipped++
		}
	}
	return res, nil
}

// readHeader checks that both sides answer and records what the run is about to exercise.
func readHeader(ctx context.Context, opts Options) (Header, error) {
	h := Header{
		ServiceURL:     opts.Service.URL(),
		ServiceVersion: opts.ServiceVersion,
		Store:          opts.Store,
		ReceiverURL:    opts.Receiver.URL(),
		Destinations:   Destinations(),
		Settings:       opts.Settings,
		RunID:          newRunID(),
		Timestamp:      time.Now().UTC().Truncate(time.Second),
	}
	health, server, err := opts.Service.Health(ctx)
	if err != nil {
		return h, fmt.Errorf("acceptance: the service at %s does not answer: %w; start it (companion serve) or point --service at it", h.ServiceURL, err)
	}
	if v, ok := health["version"].(string); ok && v != "" {
		h.ServiceVersion = v
	} else if h.ServiceVersion == "" && server != "" {
		h.ServiceVersion = server
	}
	if h.ServiceVersion == "" {
		h.ServiceVersion = "not reported by the service"
	}
	if s, ok := health["store"].(string); ok && s != "" {
		h.Store = s
	}
	if h.Store == "" {
		h.Store = "not reported by the service"
	}
	mode, err := opts.Receiver.Mode(ctx)
	if err != nil {
		return h, fmt.Errorf("acceptance: the sandbox receiver at %s does not answer: %w; start one (companion receiver --addr host:port) "+
			"or point --receiver at it", h.ReceiverURL, err)
	}
	h.ReceiverMode = mode
	h.ConfigurationHash = configurationHash(opts.Settings, mode)
	s := opts.Settings
	h.RetrySettings = fmt.Sprintf("ledger: max_attempts 3 per destination, lease %d s, same-key retries within key_retention_seconds, "+
		"service default backoff (1 s doubling, ±20%%) unless Retry-After; client: write timeout %s, one attempt per claim, "+
		"no retries by the HTTP client (fresh connection per write)", s.LeaseSeconds, s.WriteTimeout)
	return h, nil
}

// checkDestinations claims one item per destination of the suite and reads the dedupe the service gave
// it: a service started without the suite's destinations (docs/acceptance.md, step 1) runs every one on
// its defaults, and its cases would fail as if the ledger were not replay-safe. Each item is reported
// succeeded at once, so it needs nobody; its key starts with the run id, as the cases' keys do.
func checkDestinations(ctx context.Context, svc *Service, runID string) error {
	var wrong []string
	for _, d := range Destinations() {
		key := runID + ":check:" + d.Name + ":1"
		ans, err := svc.BeforeWrite(ctx, BeforeWrite{Key: key, Payload: json.RawMessage(`{"check":"destination"}`), Destination: d.Name})
		if apiErr := (*APIError)(nil); errors.As(err, &apiErr) && apiErr.Status == 401 {
			return fmt.Errorf("acceptance: the service at %s refused the suite's first call: %w. Give one of its tokens with --token "+
				"or COMPANION_TOKEN (role workflow; --operator-token with role operator for case 19)", svc.URL(), err)
		}
		if err != nil {
			return fmt.Errorf("acceptance: checking the service's destination %s: %w", d.Name, err)
		}
		it, err := svc.Item(ctx, key)
		if err != nil {
			return fmt.Errorf("acceptance: checking the service's destination %s: %w", d.Name, err)
		}
		if ans.Claim != "" {
			if _, err := svc.AfterWrite(ctx, AfterWrite{Key: key, Claim: ans.Claim, Outcome: "succeeded"}); err != nil {
				return fmt.Errorf("acceptance: checking the service's destination %s: %w", d.Name, err)
			}
		}
		if it.Dedupe != d.Dedupe {
			wrong = append(wrong, fmt.Sprintf("%s has dedupe %s there, the suite needs %s", d.Name, it.Dedupe, d.Dedupe))
		}
	}
	if len(wrong) > 0 {
		return fmt.Errorf("acceptance: the service at %s does not have the suite's destinations: %s. Add the destinations of "+
			"docs/acceptance.md#the-destination-configuration to its configuration file (--config) and restart it; no case was run",
			svc.URL(), strings.Join(wrong, "; "))
	}
	return nil
}

// newRunID names a run; keys and references of the run start with it, so runs never share an item.
func newRunID() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return "acc-" + time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b)
}

// runner holds what the cases of one run share.
type runner struct {
	opts  Options
	runID string
}

// runCase runs one case and turns its checks into a result.
func (r *runner) runCase(ctx context.Context, c Case) CaseResult {
	cr := &caseRun{runner: r, c: c}
	started := time.Now()
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("the case panicked: %v", p)
			}
		}()
		return c.run(ctx, cr)
	}()
	res := CaseResult{ID: c.ID, Title: c.Title, Fault: c.Fault, ClientSaw: cr.saw, Checks: cr.checks,
		Duration: time.Since(started).Seconds()}
	var wantL, gotL, wantE, gotE []string
	ledgerChecks, effectChecks := 0, 0
	for _, ch := range cr.checks {
		switch ch.Side {
		case sideLedger:
			ledgerChecks++
			wantL, gotL = append(wantL, ch.Expected), append(gotL, ch.Observed)
		case sideEffects:
			effectChecks++
			wantE, gotE = append(wantE, ch.Expected), append(gotE, ch.Observed)
		}
		if !ch.OK {
			res.Failures = append(res.Failures, fmt.Sprintf("%s: %s expected %s, observed %s", ch.Step, ch.Side, ch.Expected, ch.Observed))
		}
	}
	res.ExpectedLedger, res.ObservedLedger = strings.Join(wantL, " → "), strings.Join(gotL, " → ")
	res.ExpectedEffects, res.ObservedEffects = strings.Join(wantE, " → "), strings.Join(gotE, " → ")
	if err != nil {
		res.Failures = append(res.Failures, "stopped: "+err.Error())
		res.ObservedLedger = strings.TrimPrefix(res.ObservedLedger+" → error", " → ")
	} else if ledgerChecks == 0 || effectChecks == 0 {
		// A case that checks only one side of the boundary proves nothing about the other (seed 000).
		res.Failures = append(res.Failures, "the case did not assert both the ledger and the effects")
	}
	res.Status = Pass
	if len(res.Failures) > 0 {
		res.Status = Fail
	}
	return res
}
