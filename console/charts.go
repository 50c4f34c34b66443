package console

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/replaysafe/companion/items"
)

// The Overview's charts: the measures over time (items.ReadSeries) drawn as SVG on the server, so that a
// page reads without script, with nothing from elsewhere (the CSP allows none), in the console's own
// stylesheet. Each chart is a figure with a caption, a legend, axes with labels, a dashed line with the
// version for each release of the service, and a table of the same numbers for screen readers (the SVG
// itself is hidden from them). The colours are Paul Tol's "vibrant" scheme, told apart with every kind of
// colour blindness; the legend says which is which, and the table needs no colour at all.

// chartsView is what the Overview draws: the last 48 hours by hour and the last 30 days by day.
type chartsView struct {
	// Unavailable says why there are no charts (a store that does not keep the measures over time).
	Unavailable string
	Spans       []spanView
}

// spanView is one span's charts.
type spanView struct {
	ID, Title string
	Claims    chartView
	Entered   chartView
	Waits     chartView
}

// chartView is one chart, its geometry worked out in the viewBox's units.
type chartView struct {
	ID, Title string
	// Summary says in a sentence what the chart shows (the table's caption).
	Summary       string
	Width, Height int
	// Plot is the area inside the axes.
	Plot           box
	YTicks, XTicks []tick
	Rects          []mark
	Lines          []polyline
	Dots           []mark
	Releases       []release
	Legend         []legendEntry
	// TableHead and TableRows are the table of the same numbers, for screen readers.
	TableHead []string
	TableRows [][]string
	// Empty: nothing happened in the span; the chart says so.
	Empty bool
}

type box struct{ X, Y, W, H float64 }

// Right and Bottom are the plot's far edges; LabelX and LabelY where the y axis's and the x axis's labels
// go; Middle its centre.
func (b box) Right() float64   { return b.X + b.W }
func (b box) Bottom() float64  { return b.Y + b.H }
func (b box) LabelX() float64  { return b.X - 6 }
func (b box) LabelY() float64  { return b.Y + b.H + 17 }
func (b box) MiddleX() float64 { return b.X + b.W/2 }
func (b box) MiddleY() float64 { return b.Y + b.H/2 }

func init() {
	// Coordinates are written with one decimal: enough for a pixel, and short.
	funcs["f1"] = func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
}

// tick is a label on an axis, and where its grid line goes.
type tick struct {
	At    float64
	Label string
}

// mark is a bar (X, Y, W, H) or a dot (X, Y, and W its radius), of a class, with a tip for the mouse.
type mark struct {
	X, Y, W, H float64
	Class, Tip string
}

type polyline struct {
	Points string
	Class  string
}

// release is a release's marker: where it is, the version (empty where it would cover another's; the
// tip and the table still name it), the height of its label, and a tip.
type release struct {
	X, LabelY   float64
	Label, Tip  string
	LabelAnchor string
}

type legendEntry struct{ Kind, Class, Label string }

// chartWidth is the viewBox width of a chart across the page; halfWidth of one of a pair.
const (
	chartWidth  = 1160
	halfWidth   = 570
	chartHeight = 230
	pairHeight  = 200
)

// tab is a link that chooses what a page shows; On marks the one shown.
type tab struct {
	Name, URL string
	On        bool
}

// overviewCharts reads the charts of the destination the request names (?destination=; none: every
// destination together), and the tabs that choose one of names.
func (c *Console) overviewCharts(r *http.Request, s *session, names []string) ([]tab, chartsView, error) {
	dest := r.URL.Query().Get("destination")
	tabs := []tab{{Name: "All destinations", URL: Prefix + "overview", On: dest == ""}}
	known := dest == ""
	for _, n := range names {
		tabs = append(tabs, tab{Name: n, URL: Prefix + "overview?destination=" + url.QueryEscape(n), On: n == dest})
		known = known || n == dest
	}
	if !known { // a destination without items yet: its tab says what the charts show
		tabs = append(tabs, tab{Name: dest, URL: Prefix + "overview?destination=" + url.QueryEscape(dest), On: true})
	}
	charts, err := c.charts(r.Context(), s.who.Tenant, dest, c.cfg.Ledger.Now())
	return tabs, charts, err
}

// charts reads the tenant's series of the destination ("": all) and lays out the Overview's charts.
func (c *Console) charts(ctx context.Context, tenant, destination string, now time.Time) (chartsView, error) {
	store, ok := c.cfg.Store.(items.SeriesStore)
	if !ok {
		kind := "this store"
		if c.cfg.StoreKind != "" {
			kind = "the " + c.cfg.StoreKind + " store"
		}
		return chartsView{Unavailable: "The charts of the measures over time are not available on " + kind +
			": it does not keep them yet. The measures now are below."}, nil
	}
	var out chartsView
	for _, span := range []struct {
		id, title string
		step      items.SeriesStep
	}{{"hours", "The last 48 hours, by hour (UTC)", items.StepHour}, {"days", "The last 30 days, by day (UTC)", items.StepDay}} {
		to := span.step.BucketStart(now).Add(span.step.Duration())
		s, err := items.ReadSeries(ctx, store, items.SeriesQuery{Tenant: tenant, Destination: destination, Step: span.step, To: to})
		if err != nil {
			return chartsView{}, err
		}
		out.Spans = append(out.Spans, spanView{ID: span.id, Title: span.title,
			Claims:  claimsChart(span.id+"-claims", s),
			Entered: enteredChart(span.id+"-entered", s),
			Waits:   waitsChart(span.id+"-waits", s)})
	}
	return out, nil
}

// frame returns a chart of the given size with its plot area, and the x of a bucket's left edge and its
// width (a slot) for s.
func frame(id, title string, width, height int, s *items.Series) (chartView, func(i int) float64, float64) {
	ch := chartView{ID: id, Title: title, Width: width, Height: height,
		Plot: box{X: 56, Y: 36, W: float64(width) - 56 - 12, H: float64(height) - 36 - 28}}
	slot := ch.Plot.W / float64(max(len(s.Points), 1))
	left := func(i int) float64 { return ch.Plot.X + float64(i)*slot }
	// The x axis: hours every 6 (the date at midnight), days every 5th counted back from the last one.
	for i, p := range s.Points {
		label := ""
		switch s.Step {
		case items.StepHour:
			if p.Start.Hour()%6 == 0 {
				label = p.Start.Format("15:04")
				if p.Start.Hour() == 0 {
					label = p.Start.Format("2 Jan")
				}
			}
		default:
			if (len(s.Points)-1-i)%5 == 0 {
				label = p.Start.Format("2 Jan")
			}
		}
		if label != "" {
			ch.XTicks = append(ch.XTicks, tick{At: left(i) + slot/2, Label: label})
		}
	}
	// Each release where it started, within its bucket; its label on the first of two rows above the plot
	// where it covers no other, else without one.
	span := s.To.Sub(s.From)
	rows := [2]struct{ y, free float64 }{{ch.Plot.Y - 8, math.Inf(-1)}, {ch.Plot.Y - 24, math.Inf(-1)}}
	for _, r := range s.Releases {
		x := ch.Plot.X + ch.Plot.W*float64(r.At.Sub(s.From))/float64(span)
		m := release{X: x, LabelAnchor: "start", Tip: "release " + r.Version + " at " + r.At.UTC().Format("2006-01-02 15:04 UTC")}
		width := 6.5*float64(len(r.Version)) + 8 // of 11 px text, with room on either side
		from, to := x, x+width
		if to > ch.Plot.Right() {
			m.LabelAnchor, from, to = "end", x-width, x
		}
		for i := range rows {
			if from >= rows[i].free {
				m.Label, m.LabelY, rows[i].free = r.Version, rows[i].y, to
				break
			}
		}
		ch.Releases = append(ch.Releases, m)
	}
	return ch, left, slot
}

// bucketName says a bucket's time in the table and the tips: "2026-12-03 14:00" or "2026-12-03".
func bucketName(step items.SeriesStep, t time.Time) string {
	if step == items.StepHour {
		return t.UTC().Format("2006-01-02 15:04")
	}
	return t.UTC().Format("2006-01-02")
}

// releasesIn names the releases that started in a bucket, for its row of a table.
func releasesIn(s *items.Series, start time.Time) string {
	var names []string
	end := start.Add(s.Step.Duration())
	for _, r := range s.Releases {
		if !r.At.Before(start) && r.At.Before(end) {
			names = append(names, r.Version)
		}
	}
	return strings.Join(names, ", ")
}

// yScale returns the y ticks of counts up to top (about four, at round numbers) and the function from a
// count to its y.
func (ch *chartView) yScale(top float64, label func(float64) string, step float64) func(float64) float64 {
	if step <= 0 {
		step = niceStep(top / 4)
	}
	limit := math.Max(step, math.Ceil(top/step)*step)
	y := func(v float64) float64 { return ch.Plot.Y + ch.Plot.H - ch.Plot.H*v/limit }
	for v := 0.0; v <= limit+step/2; v += step {
		ch.YTicks = append(ch.YTicks, tick{At: y(v), Label: label(v)})
	}
	return y
}

// niceStep rounds a step up to 1, 2 or 5 times a power of ten (at least 1).
func niceStep(raw float64) float64 {
	if raw <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func count(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// claimsChart stacks, per bucket, the items that succeeded, failed and became unknown, and draws the
// claims made as a line over them.
func claimsChart(id string, s *items.Series) chartView {
	ch, left, slot := frame(id, "Claims and their outcomes", chartWidth, chartHeight, s)
	ch.Summary = "Per " + stepWord(s.Step) + ": the claims made (the line), and the items that succeeded, failed or became unknown (the stacked bars)."
	ch.Legend = []legendEntry{{"box", "c-succeeded", "succeeded"}, {"box", "c-failed", "failed"}, {"box", "c-unknown", "became unknown"},
		{"line", "c-claims", "claims"}}
	top := 0.0
	for _, p := range s.Points {
		top = math.Max(top, math.Max(float64(p.Proceeds), float64(p.Succeeded+p.Failed+p.Unknown)))
	}
	ch.Empty = top == 0
	y := ch.yScale(top, count, 0)
	bar := slot * 0.7
	var line []string
	ch.TableHead = []string{stepWord(s.Step), "claims", "succeeded", "failed", "became unknown", "release"}
	for i, p := range s.Points {
		name := bucketName(s.Step, p.Start)
		x := left(i) + (slot-bar)/2
		base := 0
		for _, part := range []struct {
			n           int
			class, word string
		}{{p.Succeeded, "c-succeeded", "succeeded"}, {p.Failed, "c-failed", "failed"}, {p.Unknown, "c-unknown", "became unknown"}} {
			if part.n == 0 {
				continue
			}
			top, bottom := y(float64(base+part.n)), y(float64(base))
			ch.Rects = append(ch.Rects, mark{X: x, Y: top, W: bar, H: bottom - top, Class: part.class,
				Tip: fmt.Sprintf("%s: %d %s", name, part.n, part.word)})
			base += part.n
		}
		cx, cy := left(i)+slot/2, y(float64(p.Proceeds))
		line = append(line, fmt.Sprintf("%.1f,%.1f", cx, cy))
		if p.Proceeds > 0 {
			ch.Dots = append(ch.Dots, mark{X: cx, Y: cy, W: math.Min(3, slot/4), Class: "c-claims", Tip: fmt.Sprintf("%s: %d claims", name, p.Proceeds)})
		}
		ch.TableRows = append(ch.TableRows, []string{name, strconv.Itoa(p.Proceeds), strconv.Itoa(p.Succeeded), strconv.Itoa(p.Failed),
			strconv.Itoa(p.Unknown), releasesIn(s, p.Start)})
	}
	ch.Lines = []polyline{{Points: strings.Join(line, " "), Class: "c-claims"}}
	return ch
}

// enteredChart draws, per bucket, the items that became unknown and those that started needing a person,
// side by side.
func enteredChart(id string, s *items.Series) chartView {
	ch, left, slot := frame(id, "Unknowns and needs a person, entered", halfWidth, pairHeight, s)
	ch.Summary = "Per " + stepWord(s.Step) + ": the items that became unknown, and those that started needing a person."
	ch.Legend = []legendEntry{{"box", "c-unknown", "became unknown"}, {"box", "c-person", "started needing a person"}}
	top := 0.0
	for _, p := range s.Points {
		top = math.Max(top, float64(max(p.Unknown, p.NeedsPerson)))
	}
	ch.Empty = top == 0
	y := ch.yScale(top, count, 0)
	bar := slot * 0.36
	ch.TableHead = []string{stepWord(s.Step), "became unknown", "started needing a person", "release"}
	for i, p := range s.Points {
		name := bucketName(s.Step, p.Start)
		for j, part := range []struct {
			n           int
			class, word string
		}{{p.Unknown, "c-unknown", "became unknown"}, {p.NeedsPerson, "c-person", "started needing a person"}} {
			if part.n == 0 {
				continue
			}
			x := left(i) + slot*0.14 + float64(j)*bar
			ch.Rects = append(ch.Rects, mark{X: x, Y: y(float64(part.n)), W: bar, H: y(0) - y(float64(part.n)), Class: part.class,
				Tip: fmt.Sprintf("%s: %d %s", name, part.n, part.word)})
		}
		ch.TableRows = append(ch.TableRows, []string{name, strconv.Itoa(p.Unknown), strconv.Itoa(p.NeedsPerson), releasesIn(s, p.Start)})
	}
	return ch
}

// waitStep is a round step of the waits' axis for the longest one.
func waitStep(top time.Duration) float64 {
	for _, d := range []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour,
		6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 48 * time.Hour} {
		if top <= 4*d {
			return d.Seconds()
		}
	}
	return (48 * time.Hour).Seconds()
}

// waitLabel writes a wait on the axis in its round unit: 0, 15m, 6h, 2d.
func waitLabel(v float64) string {
	d := time.Duration(v) * time.Second
	switch {
	case d == 0:
		return "0"
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return items.Age(d)
}

// waitsChart draws, per bucket with resolutions, how long the items that needed a person waited: the
// median as a dot, and a line up to the 90th percentile.
func waitsChart(id string, s *items.Series) chartView {
	ch, left, slot := frame(id, "Time to resolution", halfWidth, pairHeight, s)
	ch.Summary = "Per " + stepWord(s.Step) + ": how long the items whose need of a person ended had waited, the median (p50) and the 90th percentile (p90)."
	ch.Legend = []legendEntry{{"dot", "c-p50", "median (p50)"}, {"line", "c-p90", "up to the 90th percentile (p90)"}}
	var top time.Duration
	for _, p := range s.Points {
		top = max(top, p.Resolution.Quantile(0.9))
	}
	ch.Empty = top == 0
	y := ch.yScale(top.Seconds(), waitLabel, waitStep(top))
	ch.TableHead = []string{stepWord(s.Step), "resolutions", "median", "90th percentile", "release"}
	for i, p := range s.Points {
		name := bucketName(s.Step, p.Start)
		r := p.Resolution
		row := []string{name, strconv.Itoa(r.Count), "–", "–", releasesIn(s, p.Start)}
		if r.Count > 0 {
			p50, p90 := r.Quantile(0.5), r.Quantile(0.9)
			row[2], row[3] = items.Age(p50), items.Age(p90)
			cx := left(i) + slot/2
			ch.Lines = append(ch.Lines, polyline{Points: fmt.Sprintf("%.1f,%.1f %.1f,%.1f", cx, y(p50.Seconds()), cx, y(p90.Seconds())), Class: "c-p90"})
			ch.Dots = append(ch.Dots, mark{X: cx, Y: y(p50.Seconds()), W: math.Min(3.5, slot/3), Class: "c-p50",
				Tip: fmt.Sprintf("%s: %d resolved, median %s, p90 %s", name, r.Count, items.Age(p50), items.Age(p90))})
		}
		ch.TableRows = append(ch.TableRows, row)
	}
	return ch
}

func stepWord(s items.SeriesStep) string {
	if s == items.StepHour {
		return "hour"
	}
	return "day"
}
