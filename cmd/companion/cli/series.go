package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/items"
)

// seriesConfig is the "series" section of the configuration file: how long the store keeps the measures
// over time, its hour rows and its day rows (items.Config.SeriesHoursKept, SeriesDaysKept).
type seriesConfig struct {
	HoursKept field[durationValue] `yaml:"hours_kept"`
	DaysKept  field[durationValue] `yaml:"days_kept"`
}

// The shortest keeping of the series' rows: what the console's charts show, the last 48 hours by hour and
// the last 30 days by day.
const (
	minSeriesHoursKept = items.DefaultHourSpan
	minSeriesDaysKept  = items.DefaultDaySpan
)

// apply checks the section and sets what it gives in cfg.
func (sc seriesConfig) apply(cfg *items.Config, probs *configProblems) {
	for _, f := range []struct {
		f     field[durationValue]
		name  string
		least time.Duration
		into  *time.Duration
	}{
		{sc.HoursKept, "series.hours_kept", minSeriesHoursKept, &cfg.SeriesHoursKept},
		{sc.DaysKept, "series.days_kept", minSeriesDaysKept, &cfg.SeriesDaysKept},
	} {
		if !check(f.f, f.name, probs) {
			continue
		}
		if v := time.Duration(f.f.Value); v < f.least {
			probs.add(f.f.Line, f.name, fmt.Sprintf("must be at least %s: the console's charts show the last %s", hoursText(f.least), spanText(f.least)))
		} else {
			*f.into = v
		}
	}
}

// hoursText writes a duration of whole hours as a person writes it in the file: 720h.
func hoursText(d time.Duration) string { return fmt.Sprintf("%dh", int(d/time.Hour)) }

// spanText writes a span in hours up to two days, else in days.
func spanText(d time.Duration) string {
	if d <= 48*time.Hour {
		return fmt.Sprintf("%d hours", int(d/time.Hour))
	}
	return fmt.Sprintf("%d days", int(d/(24*time.Hour)))
}

// recordRelease records this build's version in a ledger that keeps the measures over time, when it is
// not the version that started on it last: the charts mark each release. A store that does not keep them
// records nothing; a failure is a warning, as the marker matters less than serving.
func recordRelease(ctx context.Context, store items.Store, version string, now time.Time, log *slog.Logger) {
	s, ok := store.(items.SeriesStore)
	if !ok {
		return
	}
	recorded, err := s.RecordRelease(ctx, version, now)
	switch {
	case err != nil:
		log.Warn("the release was not recorded in the ledger: the charts will not mark it", slog.String("version", version), slog.Any("error", err))
	case recorded:
		log.Info("a new release on this ledger: recorded for the charts", slog.String("version", version))
	}
}

// sinceDuration reads --since: a Go duration (48h, 90m) or whole days (7d).
func sinceDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n > 0 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d, nil
	}
	return 0, fmt.Errorf("%q is not a span such as 7d, 48h or 90m", s)
}

// statsSeries prints the measures over time: GET /v1/stats/series from since before now, by step ("":
// by hour up to 48 hours, else by day), of one destination or all.
func (m *Main) statsSeries(ctx context.Context, c *apiClient, since, step, destination string, asJSON bool) error {
	span := items.DefaultHourSpan
	if step == string(items.StepDay) {
		span = items.DefaultDaySpan
	}
	if since != "" {
		var err error
		if span, err = sinceDuration(since); err != nil {
			return usageErrorf("stats: --since: %v", err)
		}
	}
	if step == "" {
		step = string(items.StepHour)
		if span > items.DefaultHourSpan {
			step = string(items.StepDay)
		}
	}
	st := items.SeriesStep(step)
	if !st.Valid() {
		return usageErrorf("stats: --step: must be 1h or 1d")
	}
	if n := int(span/st.Duration()) + 1; n > items.MaxSeriesBuckets { // the current bucket is one more
		return usageErrorf("stats: --since %s by %s is %d buckets with the current one; at most %d: give a shorter --since, or --step 1d",
			since, step, n, items.MaxSeriesBuckets)
	}
	// The series ends with the bucket that holds now, and holds as many buckets before it as --since spans.
	q := url.Values{"step": {step}, "from": {time.Now().Add(-span).UTC().Format(time.RFC3339)}}
	if destination != "" {
		q.Set("destination", destination)
	}
	b, err := c.do(ctx, http.MethodGet, "/v1/stats/series?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	if asJSON {
		return m.printJSON(b)
	}
	var s handlers.SeriesAnswer
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("unexpected answer from /v1/stats/series")
	}
	return writeSeries(m.Stdout, &s, destination)
}

// writeSeries prints a series as two tables that fit 100 columns, one row per bucket and a total: what
// happened to the claims, then how the items were settled; then the releases in it.
func writeSeries(w io.Writer, s *handlers.SeriesAnswer, destination string) error {
	of := "all destinations"
	if destination != "" {
		of = "destination " + destination
	}
	column, layout, per := "HOUR (UTC)", "2006-01-02 15:04", "hour"
	if s.Step == items.StepDay {
		column, layout, per = "DAY (UTC)", "2006-01-02", "day"
	}
	// The first column is padded to one width, so that it reads left-aligned among the right-aligned counts.
	first := func(v string) string { return fmt.Sprintf("%-*s", len(layout), v) }
	column = first(column)
	last := s.To
	if s.Step.Valid() {
		last = s.To.Add(-s.Step.Duration())
	}
	fmt.Fprintf(w, "%s, by %s (UTC), %s to %s\n\n", of, per, s.From.UTC().Format(layout), last.UTC().Format(layout))
	age := func(secs int64, n int) string {
		if n == 0 {
			return "-"
		}
		return items.Age(time.Duration(secs) * time.Second)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tCLAIMS\tSUCCEEDED\tFAILED\tUNKNOWN\tNEEDS A PERSON\t\n", column)
	var t [10]int
	var resolved int
	for _, p := range s.Series {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t\n", first(p.Start.UTC().Format(layout)), p.Proceeds, p.Succeeded, p.Failed, p.Unknown, p.NeedsPerson)
		for i, n := range []int{p.Proceeds, p.Succeeded, p.Failed, p.Unknown, p.NeedsPerson, p.ResolvedByPerson, p.SettledByLookup,
			p.SameKeyRecoveries, p.Conflicts, p.DuplicateEffects} {
			t[i] += n
		}
		resolved += p.ResolutionSeconds.Count
	}
	fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t\n", first("total"), t[0], t[1], t[2], t[3], t[4])
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	fmt.Fprintf(tw, "%s\tBY PERSON\tBY LOOKUP\tSAME-KEY\tCONFLICTS\tDUPLICATES\tRESOLVED\tP50\tP90\t\n", column)
	for _, p := range s.Series {
		r := p.ResolutionSeconds
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t\n", first(p.Start.UTC().Format(layout)), p.ResolvedByPerson, p.SettledByLookup,
			p.SameKeyRecoveries, p.Conflicts, p.DuplicateEffects, r.Count, age(r.P50, r.Count), age(r.P90, r.Count))
	}
	fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t\t\t\n", first("total"), t[5], t[6], t[7], t[8], t[9], resolved)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nBY PERSON: resolved by a person; BY LOOKUP: settled by a lookup; SAME-KEY: recovered by a")
	fmt.Fprintln(w, "retry under the same key; RESOLVED: items whose need of a person ended; P50, P90: how long")
	fmt.Fprintln(w, "they waited for it.")
	if len(s.Releases) > 0 {
		fmt.Fprintln(w, "\nreleases:")
		for _, r := range s.Releases {
			fmt.Fprintf(w, "  %s  %s\n", r.At.UTC().Format("2006-01-02 15:04"), r.Version)
		}
	}
	return nil
}
