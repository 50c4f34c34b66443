package console_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/replaysafe/companion/items"
)

// week is what weekOfTraffic made happen: its releases and, per day (UTC, as the charts count), the items
// that became unknown.
type week struct {
	releases []items.Release
	unknown  map[string]int
}

// weekOfTraffic feeds the ledger a week of traffic, hour by hour, on the env's clock: claims at three
// destinations (billing dedupes by key, crm is looked up, mailer can do neither), more by day than by
// night, nearly all of them succeeding. Three releases of the service start on the ledger: v1.4.2 at the
// start, v1.5.0 in the middle of the week, which makes a third of the writes time out (their outcome is
// unknown), and v1.5.1 fourteen hours later, which fixes it. An unknown billing item is retried under
// its key ten minutes later and succeeds; an unknown crm item is found by a lookup; an unknown mailer
// item needs a person, who resolves it after half an hour, or after several hours while the bad
// release floods them.
func weekOfTraffic(t *testing.T, e *env) week {
	t.Helper()
	s, ok := e.store.(items.SeriesStore)
	if !ok {
		t.Fatalf("%T keeps no measures over time", e.store)
	}
	start := e.clock.Now()
	bad, fixed := start.Add(3*24*time.Hour+12*time.Hour), start.Add(4*24*time.Hour+2*time.Hour)
	w := week{unknown: map[string]int{}}
	release := func(version string) {
		if _, err := s.RecordRelease(e.ctx, version, e.clock.Now()); err != nil {
			t.Fatal(err)
		}
		w.releases = append(w.releases, items.Release{Version: version, At: e.clock.Now()})
	}
	release("v1.4.2")
	rng := rand.New(rand.NewPCG(36, 7)) // the same week every run
	type due struct {
		key string
		at  time.Time
	}
	var resolutions []due
	resolveDue := func() {
		now := e.clock.Now()
		rest := resolutions[:0]
		for _, d := range resolutions {
			if d.at.After(now) {
				rest = append(rest, d)
				continue
			}
			if _, _, err := e.ledger.Resolve(e.ctx, items.ResolveParams{Tenant: "default", Key: d.key, Outcome: items.ResolveNotCommitted,
				Evidence: "no such message in the mailer's log", By: "ops-alice"}); err != nil {
				t.Fatalf("resolve %s: %v", d.key, err)
			}
		}
		resolutions = rest
	}
	dests := []struct {
		name   string
		dedupe items.Dedupe
		share  int
	}{{"billing", items.DedupeKey, 3}, {"crm", items.DedupeLookup, 2}, {"mailer", items.DedupeNone, 1}}
	for h := 0; h < 7*24; h++ {
		hourStart := start.Add(time.Duration(h) * time.Hour)
		if now := e.clock.Now(); hourStart.After(now) {
			e.clock.Advance(hourStart.Sub(now))
		}
		switch {
		case !hourStart.Before(fixed) && w.releases[len(w.releases)-1].Version == "v1.5.0":
			release("v1.5.1")
		case !hourStart.Before(bad) && len(w.releases) == 1:
			release("v1.5.0")
		}
		broken := !hourStart.Before(bad) && hourStart.Before(fixed)
		busy := 4 + 6*dayShape(hourStart.Hour()) // claims per share: 4 at night, 10 by day, give or take a fifth
		timeouts := 0.025                        // one write in forty times out
		if broken {
			timeouts = 0.33
		}
		var later []func()
		for _, d := range dests {
			var ps []items.BeforeWriteParams
			for i := range int(float64(busy*d.share) * (0.8 + 0.4*rng.Float64())) {
				ps = append(ps, items.BeforeWriteParams{Tenant: "default", Key: fmt.Sprintf("%s-%03d-%02d", d.name, h, i), Fingerprint: fingerprint,
					Destination: d.name, Dedupe: d.dedupe, LeaseSeconds: 3600})
			}
			answers, err := e.ledger.BeforeWriteMany(e.ctx, "default", ps)
			if err != nil {
				t.Fatal(err)
			}
			reports := make([]items.AfterWriteParams, len(answers))
			var unknown []int
			for i, a := range answers {
				ev := items.Evidence{Outcome: items.OutcomeSucceeded}
				switch p := rng.Float64(); {
				case p < timeouts:
					ev = items.Evidence{Outcome: items.OutcomeUnknown, Class: items.ClassTimeout}
					unknown = append(unknown, i)
				case p < timeouts+0.01:
					ev = items.Evidence{Outcome: items.OutcomeFailed, HTTPStatus: 422, Class: items.ClassHTTP}
				}
				reports[i] = items.AfterWriteParams{Tenant: "default", Key: a.Key, Claim: a.Claim, ExternalID: "x-" + a.Key, Evidence: ev}
			}
			e.clock.Advance(2 * time.Second)
			if _, _, err := e.ledger.AfterWriteMany(e.ctx, "default", reports); err != nil {
				t.Fatal(err)
			}
			w.unknown[e.clock.Now().Format("2006-01-02")] += len(unknown)
			later = append(later, func() {
				for _, i := range unknown {
					key := ps[i].Key
					switch d.dedupe {
					case items.DedupeKey: // retried under the same key, and it succeeds
						a, err := e.ledger.BeforeWrite(e.ctx, ps[i])
						if err != nil || a.Decision != items.Proceed {
							t.Fatalf("retry %s: %v %+v", key, err, a)
						}
						if _, err := e.ledger.AfterWrite(e.ctx, items.AfterWriteParams{Tenant: "default", Key: key, Claim: a.Claim,
							ExternalID: "x-" + key, Evidence: items.Evidence{Outcome: items.OutcomeSucceeded}}); err != nil {
							t.Fatal(err)
						}
					case items.DedupeLookup: // found by the workflow's lookup
						if _, err := e.ledger.Reconcile(e.ctx, items.ReconcileParams{Tenant: "default", Key: key, Finding: items.FindingFound,
							ExternalID: "x-" + key, Evidence: "the CRM has the deal under the reference", By: "n8n-prod"}); err != nil {
							t.Fatal(err)
						}
					default: // a person looks, after half an hour; hours while the bad release floods them
						wait := 30 * time.Minute
						if broken {
							wait = time.Duration(2+len(resolutions)%5) * time.Hour
						}
						resolutions = append(resolutions, due{key, e.clock.Now().Add(wait)})
					}
				}
			})
		}
		// Ten minutes later: the retries, the lookups, and the people's resolutions that are due.
		e.clock.Advance(10 * time.Minute)
		for _, f := range later {
			f()
		}
		resolveDue()
		for range 4 {
			e.clock.Advance(10 * time.Minute)
			resolveDue()
		}
	}
	return w
}

// dayShape is 1 in the working hours (UTC), else 0.
func dayShape(hour int) int {
	if hour >= 8 && hour < 19 {
		return 1
	}
	return 0
}

// tableOf reads the numbers of a chart's table (its screen readers' fallback) from the page: per row, the
// bucket and the cells.
var chartRow = regexp.MustCompile(`<tr><th scope="row">([^<]*)</th>((?:<td>[^<]*</td>)*)</tr>`)
var chartCell = regexp.MustCompile(`<td>([^<]*)</td>`)

func tableOf(t *testing.T, page, id string) [][]string {
	t.Helper()
	at := strings.Index(page, `id="`+id+`"`)
	if at < 0 {
		t.Fatalf("the page has no chart %s", id)
	}
	fig := page[at:]
	fig = fig[:strings.Index(fig, "</figure>")]
	var rows [][]string
	for _, m := range chartRow.FindAllStringSubmatch(fig, -1) {
		row := []string{m[1]}
		for _, c := range chartCell.FindAllStringSubmatch(m[2], -1) {
			row = append(row, c[1])
		}
		rows = append(rows, row)
	}
	return rows
}

// TestOverviewDrawsAWeekWithABadRelease reads the Overview as a browser without script does: its charts
// are SVG in the page, each with its table, and the tables hold what the week's traffic made happen,
// per day and per hour, with the three releases where they started.
func TestOverviewDrawsAWeekWithABadRelease(t *testing.T) {
	e := newEnv(t, envOptions{open: true, refresh: time.Hour})
	w := weekOfTraffic(t, e)
	c := e.client()
	status, page, _ := e.page(c, "/console/overview")
	if status != http.StatusOK {
		t.Fatalf("overview: %d\n%s", status, page)
	}
	for _, id := range []string{"hours-claims", "hours-entered", "hours-waits", "days-claims", "days-entered", "days-waits"} {
		if !strings.Contains(page, `<figure class="chart" id="`+id+`">`) {
			t.Errorf("the page has no chart %s", id)
		}
	}
	if n := strings.Count(page, `<svg class="plot"`); n != 6 {
		t.Errorf("%d charts drawn, want 6", n)
	}
	days := tableOf(t, page, "days-entered")
	if len(days) != 30 {
		t.Fatalf("the 30 days' table has %d rows", len(days))
	}
	var unknown []int
	worst, worstDay := 0, ""
	for _, r := range days {
		n, _ := strconv.Atoi(r[1])
		if want := w.unknown[r[0]]; n != want {
			t.Errorf("%s: the chart counts %d unknown, the traffic made %d", r[0], n, want)
		}
		if n > 0 {
			unknown = append(unknown, n)
		}
		if n > worst {
			worst, worstDay = n, r[0]
		}
	}
	slices.Sort(unknown)
	bad := w.releases[1]
	if median := unknown[len(unknown)/2]; worst < 5*median || worstDay != bad.At.Format("2006-01-02") {
		t.Errorf("the worst day is %s with %d unknown, the median day %d: the bad release of %s does not stand out", worstDay, worst, median, bad.At)
	}
	claims := tableOf(t, page, "days-claims")
	for _, r := range w.releases {
		found := false
		for _, row := range claims {
			found = found || (row[0] == r.At.Format("2006-01-02") && strings.Contains(row[5], r.Version))
		}
		if !found {
			t.Errorf("release %s is not in the row of %s", r.Version, r.At.Format("2006-01-02"))
		}
		if !strings.Contains(page, ">"+r.Version+"</text>") {
			t.Errorf("no marker names release %s", r.Version)
		}
	}
	if hours := tableOf(t, page, "hours-waits"); len(hours) != 48 {
		t.Errorf("the 48 hours' table has %d rows", len(hours))
	}
	// Per destination: billing never needed a person (its unknowns were retried under their key).
	_, billing, _ := e.page(c, "/console/overview?destination=billing")
	for _, r := range tableOf(t, billing, "days-entered") {
		if r[2] != "0" {
			t.Errorf("billing on %s: %s started needing a person, want 0", r[0], r[2])
		}
	}
	if !strings.Contains(billing, `aria-current="page">billing</a>`) {
		t.Errorf("the billing tab is not marked as the one shown")
	}
}

// TestBrowserOverviewChartsShowABadRelease opens the Overview of a week with a bad release in chromium,
// checks that the charts are drawn where the tables say, and takes the screenshots of docs/operators.md:
// the top of the page (the last 48 hours) and the last 30 days, where the bad release stands out.
func TestBrowserOverviewChartsShowABadRelease(t *testing.T) {
	ctx := browser(t)
	e := newEnv(t, envOptions{open: true, refresh: time.Hour})
	w := weekOfTraffic(t, e)
	shots := t.TempDir()
	run(t, ctx, "overview", chromedp.Navigate(e.srv.URL+"/console/overview"), chromedp.WaitVisible(chromedp.ID("days-claims")))
	bars := get(t, ctx, "bars", chromedp.Evaluate[int](`document.querySelectorAll("#days-claims rect.c-unknown").length`))
	markers := get(t, ctx, "markers", chromedp.Evaluate[[]string](`[...document.querySelectorAll("#days-claims .release text")].map(t => t.textContent)`))
	if bars < 7 || strings.Join(markers, " ") != "v1.4.2 v1.5.0 v1.5.1" {
		t.Errorf("the 30 days' chart draws %d bars of unknowns and the releases %v", bars, markers)
	}
	// The tallest bar of unknowns is on the bad release's day.
	tallest := get(t, ctx, "tallest", chromedp.Evaluate[string](`[...document.querySelectorAll("#days-entered rect.c-unknown")]
		.sort((a, b) => b.height.baseVal.value - a.height.baseVal.value)[0].querySelector("title").textContent`))
	if !strings.HasPrefix(tallest, w.releases[1].At.Format("2006-01-02")) {
		t.Errorf("the tallest bar of unknowns is %q; want the day of %s", tallest, w.releases[1].Version)
	}
	screenshot(t, ctx, shots, "overview")
	run(t, ctx, "the last 30 days", chromedp.Evaluate[chromedp.Void](`document.getElementById("days").scrollIntoView({block: "start"})`))
	screenshot(t, ctx, shots, "overview-days")
}

// On a store that does not keep the measures over time the Overview says so, naming the store, and still
// shows the measures now.
func TestOverviewOnAStoreWithoutSeriesSaysSo(t *testing.T) {
	e := newEnv(t, envOptions{open: true, withoutSeries: true})
	e.unknownItem("inv-1", "QT-1", "", 0)
	status, page, _ := e.page(e.client(), "/console/overview")
	if status != http.StatusOK {
		t.Fatalf("overview: %d\n%s", status, page)
	}
	if !strings.Contains(page, `id="charts-unavailable"`) || !strings.Contains(page, "not available on the sqlite-without-series store") ||
		strings.Contains(page, `<svg class="plot"`) || !strings.Contains(page, `id="measures"`) {
		t.Errorf("the overview on a store without series:\n%s", page)
	}
}

// A new ledger's Overview draws its charts empty, saying so, with every bucket in the tables.
func TestOverviewOfANewLedger(t *testing.T) {
	e := newEnv(t, envOptions{open: true})
	_, page, _ := e.page(e.client(), "/console/overview?destination=nothing-yet")
	if n := strings.Count(page, ">nothing in this span</text>"); n != 6 {
		t.Errorf("%d empty charts say so, want 6", n)
	}
	if rows := tableOf(t, page, "days-claims"); len(rows) != 30 || rows[29][1] != "0" {
		t.Errorf("the 30 days' table: %v", rows)
	}
	if !strings.Contains(page, `aria-current="page">nothing-yet</a>`) {
		t.Errorf("the tab of a destination without items is not shown")
	}
}
