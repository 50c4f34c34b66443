package handlers_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/replaysafe/companion/handlers/handlerstest"
	"github.com/replaysafe/companion/items"
)

// A browser opening the service's address (GET / accepting HTML) is sent to the console; an API client's
// GET /, and a browser's unknown path, keep the JSON 404 that says where to go. Without a console, GET /
// is a 404 for everyone.
func TestHomeSendsABrowserToTheConsole(t *testing.T) {
	t.Parallel()
	withConsole, _ := operatorService(t, items.Config{}, nil)
	without := handlerstest.NewService(t, openSQLite(t), handlerstest.ServiceConfig{})
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	const browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
	for _, tc := range []struct {
		s            *handlerstest.Service
		method, path string
		accept       string
		status       int
		location     string
	}{
		{withConsole, http.MethodGet, "/", browser, http.StatusSeeOther, "/console/"},
		{withConsole, http.MethodHead, "/", browser, http.StatusSeeOther, "/console/"},
		{withConsole, http.MethodGet, "/", "application/json", http.StatusNotFound, ""},
		{withConsole, http.MethodGet, "/", "", http.StatusNotFound, ""},
		{withConsole, http.MethodGet, "/nothing-here", browser, http.StatusNotFound, ""},
		{without, http.MethodGet, "/", browser, http.StatusNotFound, ""},
	} {
		req, _ := http.NewRequest(tc.method, tc.s.URL+tc.path, nil)
		if tc.accept != "" {
			req.Header.Set("Accept", tc.accept)
		}
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ Error struct{ Code string } }
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("Location") != tc.location {
			t.Errorf("%s %s (Accept %q): %d to %q, want %d to %q", tc.method, tc.path, tc.accept, resp.StatusCode,
				resp.Header.Get("Location"), tc.status, tc.location)
		}
		if tc.status == http.StatusNotFound && tc.method == http.MethodGet && body.Error.Code != string(items.CodeNotFound) {
			t.Errorf("%s %s (Accept %q): the 404 is not the API's JSON error", tc.method, tc.path, tc.accept)
		}
	}
}

// A console request's log line and its request-duration metric name its page, not the console's one
// route (/console/*path); a path that is no page is named /console/*path, so no caller's text becomes a
// label.
func TestConsoleRequestsAreLoggedWithTheirPage(t *testing.T) {
	t.Parallel()
	svc, _ := operatorService(t, items.Config{}, nil)
	for _, path := range []string{"/console/signin", "/console/item?key=inv-1", "/console/static/console.css", "/console/secret-guess-1"} {
		svc.Get("", path)
	}
	var routes []string
	for line := range strings.SplitSeq(strings.TrimSpace(svc.Log.String()), "\n") {
		var l struct{ Msg, Route string }
		if err := json.Unmarshal([]byte(line), &l); err == nil && l.Msg == "request" {
			routes = append(routes, l.Route)
		}
	}
	// (Without a session, the item page and the unknown path lead to the sign-in, which the client follows.)
	if got, want := strings.Join(routes, " "), "/console/signin /console/item /console/signin /console/static/*file /console/*path /console/signin"; got != want {
		t.Errorf("logged routes %q, want %q", got, want)
	}
	metrics := svc.Get(handlerstest.OperatorAcme, "/metrics")
	for _, want := range []string{`route="/console/item"`, `route="/console/*path"`} {
		if !strings.Contains(string(metrics.Body), want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	if strings.Contains(string(metrics.Body), "secret-guess-1") {
		t.Error("/metrics names a path a caller made up")
	}
}
