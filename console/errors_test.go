package console_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/replaysafe/companion/items"
)

// Every error page says in words what happened, with the status and code beside it and a way on: an
// unknown key or batch names what was asked for and links to Find (an unknown batch used to say "no item
// with this key"), a bad cursor links to the batch's first page, a store that cannot be read says nothing
// was changed and reloads itself, and a 500 shows nothing of its cause.
func TestErrorPagesSayWhatHappenedAndWhereToGoOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.unknownItem("inv-1", "QT-1", "b-1", 0)
	e.unknownItem("inv-2", "QT-2", "", 0)
	c := e.client()
	e.signIn(c, operatorSecret)
	for _, tc := range []struct {
		path   string
		status int
		want   []string
	}{
		{"/console/item?key=nope", 404, []string{"Not found", "No item has the key nope in tenant default", `href="/console/find?q=nope"`}},
		{"/console/item?key=bad%20key", 400, []string{"This request is not valid", "key: must be"}},
		{"/console/batch?id=nope", 404, []string{"No batch has the id nope in tenant default", `href="/console/find?q=nope"`}},
		{"/console/batch?id=b-1&cursor=zzz", 400, []string{"cursor:", `href="/console/batch?id=b-1"`}},
		{"/console/batch", 400, []string{"Which batch?", `href="/console/find"`}},
		{"/console/item", 400, []string{"Which item?", "named by its key (item?key=…)", `href="/console/find"`}},
		{"/console/item?key=", 400, []string{"Which item?"}},
		{"/console/nope", 404, []string{"Not found", "no such page"}},
	} {
		status, body, _ := e.page(c, tc.path)
		if status != tc.status {
			t.Errorf("%s answered %d, want %d", tc.path, status, tc.status)
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("%s does not say %q:\n%s", tc.path, w, errText(body))
			}
		}
		if strings.Contains(body, "no item with this key") && !strings.Contains(tc.path, "item") {
			t.Errorf("%s says no item with this key", tc.path)
		}
	}

	// A corrupt stored item is a 500 that names nothing of its cause.
	e.corrupt("inv-2")
	status, body, _ := e.page(c, "/console/item?key=inv-2")
	if status != http.StatusInternalServerError || !strings.Contains(body, "Something went wrong inside the service") {
		t.Errorf("a corrupt item answered %d:\n%s", status, errText(body))
	}
	for _, leak := range []string{"json", "unexpected", "invalid character", "sqlite", "doc"} {
		if strings.Contains(strings.ToLower(errText(body)), leak) {
			t.Errorf("the 500 page shows %q:\n%s", leak, errText(body))
		}
	}

	// A store that cannot be read: 503, nothing changed, the page tries again by itself.
	e.store.Close()
	for _, path := range []string{"/console/", "/console/item?key=inv-1", "/console/batch?id=b-1", "/console/find?q=QT-1", "/console/overview"} {
		resp, err := c.Get(e.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body := string(raw)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
			!strings.Contains(body, "The ledger is unavailable") || !strings.Contains(body, "Nothing was changed") ||
			!strings.Contains(body, "data-refresh=") {
			t.Errorf("%s with the store closed answered %d (Retry-After %q):\n%s", path, resp.StatusCode, resp.Header.Get("Retry-After"), errText(body))
		}
		if strings.Contains(strings.ToLower(body), "closed") || strings.Contains(strings.ToLower(body), "sql") {
			t.Errorf("%s shows the store's error:\n%s", path, errText(body))
		}
	}
}

// A session that ended (expired, signed out, its token removed) sends the browser to sign in with a
// sentence saying so, and signing in leads back to the page asked for (a Slack link's item); a form posted
// with it says that it was not recorded. The sign-in never leads to another site. (It used to send every
// such request to a bare sign-in page, and from there to the queue.)
func TestASessionThatEndedSaysSoAndSigningInLeadsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.unknownItem("inv-1", "QT-1", "", 0)
	c := e.client()
	u, _ := url.Parse(e.srv.URL + "/console/")
	c.Jar.SetCookies(u, []*http.Cookie{{Name: "companion_console", Value: "a-session-the-service-no-longer-knows", Path: "/console/"}})

	resp, err := c.Get(e.srv.URL + "/console/item?key=inv-1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || loc != "/console/signin?ended=1&next=%2Fconsole%2Fitem%3Fkey%3Dinv-1" {
		t.Fatalf("an ended session's item page answered %d to %q", resp.StatusCode, loc)
	}
	status, body, csrf := e.page(c, loc)
	if status != http.StatusOK || !strings.Contains(body, "Your session has ended") || !strings.Contains(body, `name="next" value="/console/item?key=inv-1"`) {
		t.Fatalf("the sign-in page after an ended session answered %d:\n%s", status, body)
	}
	resp, _ = e.post(c, "/console/signin", url.Values{"csrf": {csrf}, "token": {operatorSecret}, "next": {"/console/item?key=inv-1"}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/item?key=inv-1" {
		t.Fatalf("signing in answered %d to %q, want the item", resp.StatusCode, resp.Header.Get("Location"))
	}

	// A form posted with an ended session.
	c2 := e.client()
	c2.Jar.SetCookies(u, []*http.Cookie{{Name: "companion_console", Value: "another-unknown-session", Path: "/console/"}})
	resp, _ = e.post(c2, "/console/item/resolve", url.Values{"csrf": {"x"}, "key": {"inv-1"}, "outcome": {"succeeded"},
		"evidence": {"found invoice 1 in billing"}}, nil)
	loc = resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(loc, "ended=post") || !strings.Contains(loc, "next=%2Fconsole%2Fitem%3Fkey%3Dinv-1") {
		t.Fatalf("a resolution with an ended session answered %d to %q", resp.StatusCode, loc)
	}
	if _, body, _ := e.page(c2, loc); !strings.Contains(body, "what you submitted was not recorded") {
		t.Errorf("the sign-in page does not say the form was not recorded:\n%s", body)
	}
	if it := e.get("inv-1"); it.State != items.StateUnknown {
		t.Fatalf("a form posted with an ended session changed the item: %s", it.State)
	}

	// Signing in never leads off the console.
	for _, next := range []string{"https://evil.example/console/", "//evil.example/console/", "/console/\\\\evil.example", "/elsewhere", "/console/signout"} {
		c3 := e.client()
		_, _, csrf := e.page(c3, "/console/signin?next="+url.QueryEscape(next))
		resp, _ := e.post(c3, "/console/signin", url.Values{"csrf": {csrf}, "token": {operatorSecret}, "next": {next}}, nil)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/" {
			t.Errorf("signing in with next %q answered %d to %q, want the queue", next, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
}

// errText is the main part of a page, for a failure's message.
func errText(body string) string {
	i := strings.Index(body, "<main")
	if i < 0 {
		return body
	}
	return body[i:min(len(body), i+600)]
}
