package cli

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/probes"
)

// lookupConfig is a destination's "lookup:" section: how the service looks an unknown item up itself.
type lookupConfig struct {
	URL     field[string]           `yaml:"url"`
	Headers map[string]headerConfig `yaml:"headers"`
	Found   foundConfig             `yaml:"found"`
	Absent  field[bool]             `yaml:"absent_on_404"`
	Settle  []field[durationValue]  `yaml:"settle_after"`
	Failed  field[int]              `yaml:"max_failed_reads"`
	Retry   field[durationValue]    `yaml:"retry_after"`
	Timeout field[durationValue]    `yaml:"timeout"`
	MaxBody field[int]              `yaml:"max_response_bytes"`
	Conc    field[int]              `yaml:"concurrency"`
	Rate    field[float64]          `yaml:"rate_per_second"`

	// Query are secret query parameters, named as headers are (env or file).
	Query map[string]headerConfig `yaml:"query"`
	// InsecureHTTP lets a lookup that sends secrets use plain http to a host that is not loopback.
	InsecureHTTP field[bool] `yaml:"insecure_http"`
}

// foundConfig is the found rule: the status, and the JSON path whose non-empty value is the external id.
type foundConfig struct {
	Status field[int]    `yaml:"status"`
	Path   field[string] `yaml:"path"`
}

// headerConfig names where a header's (or a secret query parameter's) value is: an environment variable
// (or, when that is unset, the file <env>_FILE names) or a file. The value itself is never written in the
// file.
type headerConfig struct {
	Env   field[string] `yaml:"env"`
	File  field[string] `yaml:"file"`
	Value field[string] `yaml:"value"`
}

func (lc *lookupConfig) line() int {
	return max(lc.URL.Line, lc.Found.Path.Line, lc.Found.Status.Line, lc.Timeout.Line, lc.Conc.Line)
}

// lookup checks the section and resolves its headers' secrets. Problems name the line; none of them
// carries a secret.
func (lc *lookupConfig) lookup(where string, getenv func(string) string, probs *configProblems) probes.Lookup {
	var l probes.Lookup
	line := map[string]int{"url": lc.URL.Line, "found.status": lc.Found.Status.Line, "found.path": lc.Found.Path.Line,
		"max_failed_reads": lc.Failed.Line, "retry_after": lc.Retry.Line, "timeout": lc.Timeout.Line,
		"max_response_bytes": lc.MaxBody.Line, "concurrency": lc.Conc.Line, "rate_per_second": lc.Rate.Line}
	if check(lc.URL, where+".url", probs) {
		l.URL = lc.URL.Value
	}
	if check(lc.Found.Status, where+".found.status", probs) {
		l.FoundStatus = lc.Found.Status.Value
	}
	if check(lc.Found.Path, where+".found.path", probs) {
		l.IDPath = lc.Found.Path.Value
	}
	if check(lc.Absent, where+".absent_on_404", probs) {
		l.AbsentOn404 = lc.Absent.Value
	}
	for _, d := range lc.Settle {
		if check(d, where+".settle_after", probs) {
			l.SettleAfter = append(l.SettleAfter, time.Duration(d.Value))
			line["settle_after"] = max(line["settle_after"], d.Line)
		}
	}
	for _, in := range []struct {
		f    field[int]
		name string
		dst  *int
	}{{lc.Failed, "max_failed_reads", &l.MaxFailedReads}, {lc.Conc, "concurrency", &l.Concurrency}} {
		if check(in.f, where+"."+in.name, probs) {
			*in.dst = in.f.Value
		}
	}
	if check(lc.MaxBody, where+".max_response_bytes", probs) {
		l.MaxResponseBytes = int64(lc.MaxBody.Value)
	}
	if check(lc.Rate, where+".rate_per_second", probs) {
		l.RatePerSecond = lc.Rate.Value
	}
	for _, d := range []struct {
		f    field[durationValue]
		name string
		dst  *time.Duration
	}{{lc.Retry, "retry_after", &l.RetryAfter}, {lc.Timeout, "timeout", &l.Timeout}} {
		if check(d.f, where+"."+d.name, probs) {
			*d.dst = time.Duration(d.f.Value)
		}
	}
	if check(lc.InsecureHTTP, where+".insecure_http", probs) {
		l.InsecureHTTP = lc.InsecureHTTP.Value
		line["url"] = max(line["url"], lc.InsecureHTTP.Line)
	}
	for _, sec := range []struct {
		section string
		secrets map[string]headerConfig
		add     func(name, value string)
	}{
		{"headers", lc.Headers, func(name, value string) { l.Headers = append(l.Headers, probes.Header{Name: name, Value: value}) }},
		{"query", lc.Query, func(name, value string) { l.Query = append(l.Query, probes.QueryParam{Name: name, Value: value}) }},
	} {
		for _, name := range slices.Sorted(maps.Keys(sec.secrets)) {
			hc := sec.secrets[name]
			hw := where + "." + sec.section + "." + name
			hline := max(hc.Env.Line, hc.File.Line, hc.Value.Line)
			line[sec.section+"."+name] = hline
			line[sec.section] = max(line[sec.section], hline)
			value, ok := hc.secret(hw, getenv, probs)
			if ok {
				sec.add(name, value)
			}
		}
	}
	for _, p := range l.WithDefaults().Check() {
		n := line[p.Field]
		if n == 0 {
			n = lc.line()
		}
		probs.add(n, where+"."+p.Field, p.Problem)
	}
	return l
}

// secret resolves the value where hc names it (env or file); problems name where (the header or query
// parameter) and its line, never the value.
func (hc headerConfig) secret(where string, getenv func(string) string, probs *configProblems) (string, bool) {
	hline := max(hc.Env.Line, hc.File.Line, hc.Value.Line)
	env, file := check(hc.Env, where+".env", probs), check(hc.File, where+".file", probs)
	var value string
	var err error
	switch {
	case hc.Value.Set:
		probs.add(hc.Value.Line, where+".value", "these values are secrets and are not written in the config file; name them with env or file")
		return "", false
	case env && file:
		probs.add(hc.File.Line, where+".file", "give env or file, not both")
		return "", false
	case env:
		value, err = secretFromEnv(hc.Env.Value, getenv)
	case file:
		value, err = secretFromFile(hc.File.Value)
	default:
		probs.add(hline, where, "needs env or file")
		return "", false
	}
	if err != nil {
		probs.add(hline, where, err.Error())
		return "", false
	}
	return value, true
}

// prober builds the prober of the configured lookups, or nil when there are none.
func newProber(ledger *items.Ledger, lookups map[string]probes.Lookup, log *slog.Logger) (*probes.Prober, error) {
	if len(lookups) == 0 {
		return nil, nil
	}
	store, ok := ledger.Store().(probes.Store)
	if !ok {
		return nil, fmt.Errorf("the store %T cannot claim probes", ledger.Store())
	}
	// A read in progress at a stop gets half the stop's time to finish, so that recording its finding and
	// giving back the claims left end before serve closes the store.
	return probes.New(probes.Config{Ledger: ledger, Store: store, Lookups: lookups, Logger: log, StopGrace: ShutdownTimeout / 2})
}

// runProbes runs the prober on the sweep's schedule until Close. Close cancels the loop's context and
// waits for it (probes.Run): no new read is claimed, a read in progress finishes and is recorded, the
// reads claimed and not started are given back; only then does the store close (it stops after).
func (m *Main) runProbes(p *probes.Prober, spec string) {
	if p == nil {
		return
	}
	m.keepRunning(context.Background(), "prober", func(ctx context.Context) error { return p.Run(ctx, spec) })
}

// probesDescription says what the prober reads, for the start line.
func probesDescription(p *probes.Prober) string {
	if p == nil {
		return "off (no destination has a lookup)"
	}
	return strings.Join(p.Destinations(), ", ")
}

// proberCollector presents the prober's totals as Prometheus counters.
type proberCollector struct{ p *probes.Prober }

var (
	descProbeReads = prometheus.NewDesc("companion_probe_reads_total",
		"Probe reads made by this process, by destination and outcome (found, absent, failed).", []string{"destination", "outcome"}, nil)
	descProbeSettled = prometheus.NewDesc("companion_probe_settled_total",
		"Items this process's probes settled, by destination and finding (found, absent, lookup_failed).", []string{"destination", "finding"}, nil)
)

// Describe implements prometheus.Collector.
func (proberCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descProbeReads
	ch <- descProbeSettled
}

// Collect implements prometheus.Collector: every destination and outcome, zeros included, so that a rate
// exists before the first read.
func (c proberCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.p.Totals()
	for _, d := range c.p.Destinations() {
		for _, o := range []string{items.ProbeFound, items.ProbeAbsent, items.ProbeFailed} {
			ch <- prometheus.MustNewConstMetric(descProbeReads, prometheus.CounterValue, float64(t.Reads[d][o]), d, o)
		}
		for _, f := range []string{items.FindingFound, items.FindingAbsent, items.FindingLookupFailed} {
			ch <- prometheus.MustNewConstMetric(descProbeSettled, prometheus.CounterValue, float64(t.Settled[d][f]), d, f)
		}
	}
}
