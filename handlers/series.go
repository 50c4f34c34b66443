package handlers

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/replaysafe/companion/items"
)

// CodeNotImplemented answers a request the service understands but its store cannot serve: the measures
// over time on a store that does not keep them yet.
const CodeNotImplemented items.Code = "not_implemented"

// seriesQuery names the query parameters of GET /v1/stats/series; any other is refused.
var seriesQuery = map[string]bool{"destination": true, "from": true, "to": true, "step": true}

// queryProblems checks a query's parameters against the known ones: an unknown one gets the problem
// unknown (which names the known ones), so that a misspelt parameter cannot silently change nothing; a
// parameter given twice, or longer than 500 characters, is refused too.
func queryProblems(q url.Values, known map[string]bool, unknown string) problems {
	var ps problems
	for name, vs := range q {
		switch {
		case !known[name]:
			ps.add(name, unknown)
		case len(vs) > 1:
			ps.add(name, "is given more than once")
		case len(vs[0]) > 500:
			ps.add(name, "must be at most 500 characters")
		}
	}
	return ps
}

// seriesParams reads the parameters of GET /v1/stats/series: step (1h, the default, or 1d), from and to
// (RFC 3339; to defaults to the end of the bucket that holds now, from to the span of the console's chart
// of the step before to), destination.
func (s *server) seriesParams(c *gin.Context, tenant string) (items.SeriesQuery, error) {
	q := c.Request.URL.Query()
	p := items.SeriesQuery{Tenant: tenant, Step: items.StepHour, Destination: q.Get("destination")}
	ps := queryProblems(q, seriesQuery, "is not a parameter of the series; use destination, from, to, step")
	if v := q.Get("step"); v != "" {
		p.Step = items.SeriesStep(v)
		if !p.Step.Valid() {
			ps.add("step", "must be 1h or 1d")
		}
	}
	for _, t := range []struct {
		name string
		into *time.Time
	}{{"from", &p.From}, {"to", &p.To}} {
		if v := q.Get(t.name); v != "" {
			at, err := time.Parse(time.RFC3339, v)
			if err != nil {
				ps.add(t.name, "must be an RFC 3339 time such as 2026-12-07T10:00:00Z")
				continue
			}
			*t.into = at
		}
	}
	if p.To.IsZero() && p.Step.Valid() { // the series ends with the bucket that holds now
		p.To = p.Step.BucketStart(s.ledger.Now()).Add(p.Step.Duration())
	}
	return p, ps.err()
}

// SeriesAnswer is the answer of GET /v1/stats/series (the CLI reads it too).
type SeriesAnswer struct {
	Step   items.SeriesStep `json:"step"`
	From   time.Time        `json:"from"`
	To     time.Time        `json:"to"`
	Series []SeriesPoint    `json:"series"`
	// Releases are the versions of the service that started within the series, oldest first.
	Releases []items.Release `json:"releases"`
}

// SeriesPoint is one bucket of the series.
type SeriesPoint struct {
	Start             time.Time         `json:"start"`
	Destination       string            `json:"destination,omitempty"`
	Proceeds          int               `json:"proceeds"`
	Succeeded         int               `json:"succeeded"`
	Failed            int               `json:"failed"`
	Unknown           int               `json:"unknown"`
	NeedsPerson       int               `json:"needs_person"`
	ResolvedByPerson  int               `json:"resolved_by_person"`
	SettledByLookup   int               `json:"settled_by_lookup"`
	SameKeyRecoveries int               `json:"same_key_recoveries"`
	Conflicts         int               `json:"conflicts"`
	DuplicateEffects  int               `json:"duplicate_effects"`
	ResolutionSeconds ResolutionSeconds `json:"resolution_seconds"`
}

// ResolutionSeconds is a bucket's time to resolution, in whole seconds.
type ResolutionSeconds struct {
	Count int   `json:"count"`
	Sum   int64 `json:"sum"`
	P50   int64 `json:"p50"`
	P90   int64 `json:"p90"`
}

func seconds(d time.Duration) int64 { return int64(math.Round(d.Seconds())) }

func (s *server) statsSeries(c *gin.Context) {
	if s.operators == nil {
		s.writeError(c, errNoOperatorStore)
		return
	}
	store, ok := s.operators.(items.SeriesStore)
	if !ok {
		s.writeError(c, noSeries(s.storeKind))
		return
	}
	q, err := s.seriesParams(c, principal(c).Tenant)
	if err != nil {
		s.writeError(c, err)
		return
	}
	series, err := items.ReadSeries(c.Request.Context(), store, q)
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := SeriesAnswer{Step: series.Step, From: series.From, To: series.To, Series: make([]SeriesPoint, len(series.Points)),
		Releases: series.Releases}
	if out.Releases == nil {
		out.Releases = []items.Release{}
	}
	for i, p := range series.Points {
		r := p.Resolution
		out.Series[i] = SeriesPoint{Start: p.Start, Destination: series.Destination, Proceeds: p.Proceeds, Succeeded: p.Succeeded,
			Failed: p.Failed, Unknown: p.Unknown, NeedsPerson: p.NeedsPerson, ResolvedByPerson: p.ResolvedByPerson,
			SettledByLookup: p.SettledByLookup, SameKeyRecoveries: p.SameKeyRecoveries, Conflicts: p.Conflicts,
			DuplicateEffects: p.DuplicateEffects, ResolutionSeconds: ResolutionSeconds{Count: r.Count,
				Sum: seconds(time.Duration(r.SumMillis) * time.Millisecond), P50: seconds(r.Quantile(0.5)), P90: seconds(r.Quantile(0.9))}}
	}
	c.Render(http.StatusOK, jsonLine{out})
}

// noSeries is the answer of the measures over time on a store that does not keep them (kind names it,
// as GET /healthz does; empty: "this store").
func noSeries(kind string) error {
	store := "this store"
	if kind != "" {
		store = "the " + kind + " store"
	}
	return &items.Error{Code: CodeNotImplemented, Message: fmt.Sprintf(
		"the measures over time are not available on %s: it does not keep them yet; GET /v1/stats has the totals", store)}
}
