package handlerstest

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/items"
)

// ExerciseSeries runs the HTTP tests of GET /v1/stats/series against stores from open, which must keep
// the measures over time (items.SeriesStore): the answers for a day of traffic on a moved clock, per
// destination and for all together, and the limits. open must return a new, empty store for each call.
func ExerciseSeries(t *testing.T, open func(t *testing.T) items.Store) {
	newService := func(t *testing.T) *Service {
		store := open(t)
		ops, ok := store.(handlers.OperatorStore)
		if !ok {
			t.Fatalf("%T serves no operator surface", store)
		}
		return NewService(t, store, ServiceConfig{Configure: func(c *handlers.Config) { c.Operators = ops }})
	}

	t.Run("ADayOfTrafficOnAMovedClock", func(t *testing.T) {
		t.Parallel()
		s := newService(t)
		start := s.Clock.Now() // 18:00 UTC
		want := s.dayOfTraffic(t)
		series := func(query string) Response {
			t.Helper()
			r := s.Get(OperatorAcme, "/v1/stats/series?"+query)
			Expect(t, r, http.StatusOK, "", "")
			return r
		}
		span := "from=" + url.QueryEscape(start.Format(time.RFC3339)) + "&to=" + url.QueryEscape(start.Add(25*time.Hour).Format(time.RFC3339))
		for _, dest := range []string{"billing", "crm", ""} {
			q := span
			if dest != "" {
				q += "&destination=" + dest
			}
			r := series(q)
			if r.Str("step") != "1h" || r.Str("from") != "2026-11-29T18:00:00Z" || r.Str("to") != "2026-11-30T19:00:00Z" {
				t.Errorf("%q: step %q from %q to %q; want 1h from 2026-11-29T18:00:00Z to 2026-11-30T19:00:00Z", dest, r.Str("step"), r.Str("from"), r.Str("to"))
			}
			points, _ := r.At("series").([]any)
			if len(points) != 25 {
				t.Fatalf("%q: %d points; want 25, one per hour, empty ones included: %s", dest, len(points), r.Body)
			}
			for i, p := range points {
				got := p.(map[string]any)
				if at := start.Add(time.Duration(i) * time.Hour).Format(time.RFC3339); got["start"] != at {
					t.Errorf("%q: point %d starts at %v; want %s", dest, i, got["start"], at)
				}
				if d, ok := got["destination"]; (dest == "") == ok || (ok && d != dest) {
					t.Errorf("%q: point %d has destination %v; want it only for a destination asked for", dest, i, d)
				}
				w := want.hour(i, dest)
				for name, n := range w {
					if got[name] != float64(n) {
						t.Errorf("%q %s: %s = %v; want %d", dest, got["start"], name, got[name], n)
					}
				}
			}
		}
		// Hour 3 holds hour 2's unknown item's resolution by a person, 45 minutes after it needed one:
		// p50 and p90 are read from the 15m–1h bucket.
		r := series(span + "&destination=billing")
		third := r.At("series").([]any)[3].(map[string]any)["resolution_seconds"]
		if fmt.Sprint(third) != "map[count:1 p50:2250 p90:3330 sum:2700]" {
			t.Errorf("hour 3's time to resolution: %v; want count 1, sum 2700, p50 2250, p90 3330", third)
		}
		if r.At("releases") == nil {
			t.Errorf("the answer has no releases: %s", r.Body)
		}
		// By day: the 29th (18:00–23:59) and the 30th.
		days := series(span + "&step=1d&destination=billing")
		dps, _ := days.At("series").([]any)
		if len(dps) != 2 || days.Str("from") != "2026-11-29T00:00:00Z" || days.Str("to") != "2026-12-01T00:00:00Z" {
			t.Fatalf("by day: %s", days.Body)
		}
		for d, p := range dps {
			w := want.day(d, "billing")
			for name, n := range w {
				if got := p.(map[string]any)[name]; got != float64(n) {
					t.Errorf("day %d: %s = %v; want %d", d, name, got, n)
				}
			}
		}
		// Another tenant's series is its own: zeros.
		other := s.Get(OperatorGlobex, "/v1/stats/series?"+span)
		for _, p := range other.At("series").([]any) {
			if p.(map[string]any)["proceeds"] != float64(0) {
				t.Fatalf("globex sees acme's claims: %s", other.Body)
			}
		}
	})

	t.Run("Limits", func(t *testing.T) {
		t.Parallel()
		s := newService(t)
		end := s.Clock.Now().Truncate(time.Hour)
		span := func(from, to time.Time) string {
			return "from=" + url.QueryEscape(from.Format(time.RFC3339)) + "&to=" + url.QueryEscape(to.Format(time.RFC3339))
		}
		r := s.Get(OperatorAcme, "/v1/stats/series?step=1h&"+span(end.Add(-1000*time.Hour), end))
		Expect(t, r, http.StatusOK, "", "")
		if n := len(r.At("series").([]any)); n != 1000 {
			t.Errorf("1000 hours: %d points", n)
		}
		r = s.Get(OperatorAcme, "/v1/stats/series?step=1h&"+span(end.Add(-1001*time.Hour), end))
		Expect(t, r, http.StatusBadRequest, items.CodeInvalid, "from")
		if !strings.Contains(r.Str("error.message"), "at most 1000 buckets per call") {
			t.Errorf("1001 hours: %q; want the limit named", r.Str("error.message"))
		}
		midnight := end.Truncate(24 * time.Hour)
		if r := s.Get(OperatorAcme, "/v1/stats/series?step=1d&"+span(midnight.Add(-1000*24*time.Hour), midnight)); r.Status != http.StatusOK {
			t.Errorf("1000 days: %d %s", r.Status, r.Body)
		}
		for query, field := range map[string]string{
			"step=1w":                      "step",
			"step=60m":                     "step",
			"from=yesterday":               "from",
			"to=2026-12-01":                "to",
			span(end, end):                 "from",
			span(end, end.Add(-time.Hour)): "from",
			"bogus=1":                      "bogus",
			"step=1h&step=1d":              "step",
			"destination=" + strings.Repeat("d", 501): "destination",
		} {
			Expect(t, s.Get(OperatorAcme, "/v1/stats/series?"+query), http.StatusBadRequest, items.CodeInvalid, field)
		}
		Expect(t, s.Get(WorkflowAcme, "/v1/stats/series"), http.StatusForbidden, handlers.CodeForbidden, "")
		Expect(t, s.Get("", "/v1/stats/series"), http.StatusUnauthorized, handlers.CodeUnauthorized, "")
		// Without parameters: the last 48 hours by hour, the current one included.
		r = s.Get(OperatorAcme, "/v1/stats/series")
		Expect(t, r, http.StatusOK, "", "")
		if n := len(r.At("series").([]any)); n != 48 || r.Str("to") != end.Add(time.Hour).Format(time.RFC3339) {
			t.Errorf("the default series: %d points to %s; want 48 to the end of the current hour", n, r.Str("to"))
		}
	})
}

// StoreWithoutSeries is a real store that does not keep the measures over time: the store it wraps,
// seen only through items.Store and handlers.OperatorStore (interface values: the wrapped store's other
// methods, items.SeriesStore's among them, are not promoted). The tests of a service over a store without
// the series use it, now that every store of the project keeps them.
type StoreWithoutSeries struct {
	items.Store
	handlers.OperatorStore
}

// WithoutSeries returns s without its measures over time.
func WithoutSeries(s interface {
	items.Store
	handlers.OperatorStore
}) *StoreWithoutSeries {
	return &StoreWithoutSeries{Store: s, OperatorStore: s}
}

// ExpectNoSeries checks that a service over store, which does not keep the measures over time, says so
// in GET /v1/stats/series: 501 not_implemented naming the store (kind, as GET /healthz names it).
func ExpectNoSeries(t *testing.T, store items.Store, kind string) {
	t.Helper()
	ops, ok := store.(handlers.OperatorStore)
	if !ok {
		t.Fatalf("%T serves no operator surface", store)
	}
	if _, ok := store.(items.SeriesStore); ok {
		t.Fatalf("%T keeps the measures over time", store)
	}
	s := NewService(t, store, ServiceConfig{Configure: func(c *handlers.Config) { c.Operators, c.StoreKind = ops, kind }})
	r := s.Get(OperatorAcme, "/v1/stats/series?step=1d")
	Expect(t, r, http.StatusNotImplemented, handlers.CodeNotImplemented, "")
	if !strings.Contains(r.Str("error.message"), "not available on the "+kind+" store") {
		t.Errorf("the answer does not name the store: %s", r.Body)
	}
	// The conflicts it counts still reach the kept counter.
	c := s.Claim("inv-1", nil)
	s.AfterWrite(map[string]any{"key": "inv-1", "claim": c.Str("claim"), "outcome": "succeeded"})
	if r := s.BeforeWrite(map[string]any{"key": "inv-1", "payload": map[string]any{"other": true}}); r.Str("decision") != "conflict" {
		t.Fatalf("a changed payload: %s", r.Body)
	}
	if st := s.Get(OperatorAcme, "/v1/stats"); st.Num("fingerprint_conflicts") != 1 {
		t.Errorf("stats after a conflict: %s", st.Body)
	}
}

// dayWant is what the day of traffic must count: per hour from the start, per destination, per field.
type dayWant map[int]map[string]map[string]int

// hour returns the counts of hour i for dest ("": every destination together).
func (w dayWant) hour(i int, dest string) map[string]int {
	out := map[string]int{}
	for d, counts := range w[i] {
		if dest == "" || d == dest {
			for name, n := range counts {
				out[name] += n
			}
		}
	}
	for _, name := range seriesFields {
		out[name] += 0
	}
	return out
}

// day returns the counts of day d (0: the day of the start, whose first hour is 18:00) for dest.
func (w dayWant) day(d int, dest string) map[string]int {
	out := map[string]int{}
	for i := range 48 {
		if (i < 6) != (d == 0) {
			continue
		}
		for name, n := range w.hour(i, dest) {
			out[name] += n
		}
	}
	return out
}

// seriesFields are the counts of a point of the series.
var seriesFields = []string{"proceeds", "succeeded", "failed", "unknown", "needs_person", "resolved_by_person", "settled_by_lookup",
	"same_key_recoveries", "conflicts", "duplicate_effects"}

// dayOfTraffic sends 24 hours of traffic through the API from the clock's start, hour 5 without any, and
// returns what each hour must count, by its own bookkeeping. Every hour h but the fifth:
//
//   - at :10, 1 + h%3 claims at billing (dedupe none) and one at crm;
//   - at :20, billing's first is reported succeeded, its second failed (422), its third unknown (it needs
//     a person at once: billing can neither dedupe nor be searched); crm's succeeds at :30;
//   - at :40, billing's first is asked for again with another payload: a fingerprint conflict;
//   - at :05 of the next hour, an operator resolves the unknown one as not committed (45 minutes).
func (s *Service) dayOfTraffic(t *testing.T) dayWant {
	t.Helper()
	start := s.Clock.Now()
	at := func(h int, d time.Duration) {
		if then := start.Add(time.Duration(h)*time.Hour + d); then.After(s.Clock.Now()) {
			s.Clock.Advance(then.Sub(s.Clock.Now()))
		}
	}
	want := dayWant{}
	add := func(h int, dest, name string) {
		if want[h] == nil {
			want[h] = map[string]map[string]int{}
		}
		if want[h][dest] == nil {
			want[h][dest] = map[string]int{}
		}
		want[h][dest][name]++
	}
	pending := ""
	for h := range 24 {
		if pending != "" {
			at(h, 5*time.Minute)
			r := s.Post(OperatorAcme, "/v1/items/"+pending+"/resolve", map[string]any{"outcome": "not_committed",
				"evidence": "no such invoice in the billing tool"})
			Expect(t, r, http.StatusOK, "", "")
			add(h, "billing", "resolved_by_person")
			add(h, "billing", "failed")
			pending = ""
		}
		if h == 5 {
			continue
		}
		at(h, 10*time.Minute)
		var claims []string
		for j := range 1 + h%3 {
			claims = append(claims, s.Claim(fmt.Sprintf("inv-%02d-%d", h, j), map[string]any{"destination": "billing", "lease_seconds": 3600}).Str("claim"))
			add(h, "billing", "proceeds")
		}
		crm := s.Claim(fmt.Sprintf("crm-%02d", h), map[string]any{"destination": "crm", "lease_seconds": 3600}).Str("claim")
		add(h, "crm", "proceeds")
		at(h, 20*time.Minute)
		for j, c := range claims {
			key := fmt.Sprintf("inv-%02d-%d", h, j)
			body := map[string]any{"key": key, "claim": c, "outcome": "succeeded", "external_id": "x-" + key}
			switch j {
			case 1:
				body = map[string]any{"key": key, "claim": c, "outcome": "failed", "http_status": 422}
				add(h, "billing", "failed")
			case 2:
				body = map[string]any{"key": key, "claim": c, "outcome": "unknown", "error": map[string]any{"class": "timeout"}}
				add(h, "billing", "unknown")
				add(h, "billing", "needs_person")
				pending = key
			default:
				add(h, "billing", "succeeded")
			}
			Expect(t, s.AfterWrite(body), http.StatusOK, "", "")
		}
		at(h, 30*time.Minute)
		Expect(t, s.AfterWrite(map[string]any{"key": fmt.Sprintf("crm-%02d", h), "claim": crm, "outcome": "succeeded"}), http.StatusOK, "", "")
		add(h, "crm", "succeeded")
		at(h, 40*time.Minute)
		r := s.BeforeWrite(map[string]any{"key": fmt.Sprintf("inv-%02d-0", h), "payload": map[string]any{"invoice": "changed"}, "destination": "billing"})
		if r.Str("decision") != "conflict" {
			t.Fatalf("a changed payload at hour %d: %s", h, r.Body)
		}
		add(h, "billing", "conflicts")
	}
	return want
}
