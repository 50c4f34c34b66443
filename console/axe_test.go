package console_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/replaysafe/companion/alerts"
	"github.com/replaysafe/companion/items"
)

// The accessibility checks run axe-core (the version pinned in testdata/axe/package-lock.json, installed
// by testdata/install-axe.sh, which .ci/run calls) inside the browser tests' chromium: its axe.min.js is
// read from the local install and injected into each page, never fetched at test time. Without npm they
// skip, except in CI (CI=true), where they fail.

// axeTags are the rules checked: WCAG 2.0 and 2.1, levels A and AA.
var axeTags = []string{"wcag2a", "wcag2aa", "wcag21a", "wcag21aa"}

var axeSource = sync.OnceValues(func() (string, error) {
	file := filepath.Join("testdata", "axe", "node_modules", "axe-core", "axe.min.js")
	if _, err := os.Stat(file); err != nil {
		out, err := exec.Command("bash", filepath.Join("testdata", "install-axe.sh")).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("testdata/install-axe.sh: %v\n%s", err, out)
		}
	}
	b, err := os.ReadFile(file)
	return string(b), err
})

// axeViolation is one rule a page breaks, with the elements that break it.
type axeViolation struct {
	ID     string   `json:"id"`
	Impact string   `json:"impact"`
	Help   string   `json:"help"`
	Nodes  []string `json:"nodes"`
}

func (v axeViolation) String() string {
	return fmt.Sprintf("%s (%s): %s\n    %s", v.ID, v.Impact, v.Help, strings.Join(v.Nodes, "\n    "))
}

// axeCheck runs axe-core's WCAG 2.1 A and AA rules on the page open in ctx and fails the test for each
// violation, naming the page. It returns how many it found.
func axeCheck(t *testing.T, ctx context.Context, page string) int {
	t.Helper()
	src, err := axeSource()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("axe-core is not installed: %v", err)
		}
		t.Skipf("axe-core is not installed (run console/testdata/install-axe.sh; in CI, CI=true, this test fails instead): %v", err)
	}
	// The console's CSP allows no script but its own file: axe is evaluated through the DevTools
	// protocol, which the page's CSP does not govern.
	run(t, ctx, "axe: inject on "+page, chromedp.Evaluate[chromedp.Void](src+";undefined"))
	tags := `["` + strings.Join(axeTags, `","`) + `"]`
	found := get(t, ctx, "axe: run on "+page, chromedp.Evaluate[[]axeViolation](`axe.run(document, {runOnly: {type: "tag", values: `+tags+`},
		resultTypes: ["violations"]}).then(r => r.violations.map(v => ({id: v.id, impact: v.impact || "", help: v.help,
		nodes: v.nodes.map(n => n.target.join(" ") + ": " + (n.failureSummary || "").replace(/\s+/g, " "))})))`, chromedp.EvalAwaitPromise))
	for _, v := range found {
		t.Errorf("%s breaks %s", page, v)
	}
	return len(found)
}

// TestBrowserEveryPagePassesAxe opens every page of the console in chromium (the sign-in, with and
// without an error; the queue, full and empty; an item of every kind, its alerts card with records of
// each status, a refused and a recorded resolution; a batch; find, empty and with matches of each kind;
// the overview; an error page) and runs axe-core's WCAG 2.1 A and AA rules on each: 0 violations.
func TestBrowserEveryPagePassesAxe(t *testing.T) {
	// About 30 pages, each with axe-core injected and run: a few minutes on a loaded 2-core machine.
	ctx := browserFor(t, 6*time.Minute)
	e := newEnv(t, envOptions{refresh: time.Hour})
	kinds := e.kinds()
	for i, key := range []string{"inv-740", "inv-741"} {
		e.unknownItem(key, "QT-"+strings.TrimPrefix(key, "inv-"), "exec-1234:Send reminders", i)
	}
	e.succeededItem("inv-743", "exec-1234:Send reminders", 2)
	e.slackAlert("inv-740", "C0ALERTS", "1764612003.000100")
	e.dispatchToTheLog()
	base := e.srv.URL + "/console/"
	total := 0
	check := func(page string) { total += axeCheck(t, ctx, page) }

	run(t, ctx, "sign-in", chromedp.Navigate(base+"signin"), chromedp.WaitVisible(chromedp.ID("token")))
	check("the sign-in page")
	run(t, ctx, "refused sign-in",
		chromedp.SendKeys(chromedp.ID("token"), workflowSecret),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("error")))
	check("the sign-in page refusing a workflow token")
	run(t, ctx, "sign in",
		chromedp.Navigate(base+"signin"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), operatorSecret),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("total")))
	check("the queue")
	for _, kind := range slices.Sorted(maps.Keys(kinds)) {
		run(t, ctx, kind, chromedp.Navigate(base+"item?key="+kinds[kind]), chromedp.WaitVisible(chromedp.ID("situation")))
		check("the item page of an item " + kind)
	}
	// An alert the dispatcher wrote to the log (no Slack here) says nobody was notified.
	run(t, ctx, "alert in the log", chromedp.Navigate(base+"item?key=inv-741"), chromedp.WaitVisible(chromedp.ID("alerts")))
	if card := get(t, ctx, "alert in the log", chromedp.Text(chromedp.ID("alerts"))); !strings.Contains(card, "written to the service's log for U0BILLING, not sent to them") {
		t.Errorf("the alerts card of an alert written to the log says:\n%s", card)
	}
	run(t, ctx, "alert in the log", chromedp.ScrollIntoView(chromedp.ID("alerts")))
	screenshot(t, ctx, t.TempDir(), "item-alerts-log")
	run(t, ctx, "alerts", chromedp.Navigate(base+"item?key=inv-740"), chromedp.WaitVisible(chromedp.ID("alerts")))
	check("the item page with alert records")
	run(t, ctx, "refused resolution",
		chromedp.Click(chromedp.ID("outcome-not-committed")),
		chromedp.SendKeys(chromedp.ID("evidence"), "short"),
		chromedp.Click(chromedp.ID("resolve-submit")),
		chromedp.WaitVisible(chromedp.ID("refused")))
	check("the item page refusing a resolution")
	run(t, ctx, "resolution",
		chromedp.Clear(chromedp.ID("evidence")),
		chromedp.SendKeys(chromedp.ID("evidence"), "no invoice for QT-740 in the billing tool"),
		chromedp.Click(chromedp.ID("resolve-submit")),
		chromedp.WaitVisible(chromedp.ID("done")))
	check("the item page after a resolution")
	run(t, ctx, "batch", chromedp.Navigate(base+"batch?id="+urlQuery("exec-1234:Send reminders")), chromedp.WaitVisible(chromedp.ID("counts")))
	check("the batch page")
	run(t, ctx, "find", chromedp.Navigate(base+"find"), chromedp.WaitVisible(chromedp.ID("q")))
	check("the find page")
	for _, q := range []string{"inv-741", "exec-1234:Send reminders", "QT-D", "exec-k-unknown", "nothing-like-it"} {
		run(t, ctx, "find "+q, chromedp.Navigate(base+"find?q="+urlQuery(q)), chromedp.WaitVisible(chromedp.ID("q")))
		check("the find page looking up " + q)
	}
	run(t, ctx, "overview", chromedp.Navigate(base+"overview"), chromedp.WaitVisible(chromedp.ID("measures")))
	check("the overview")
	run(t, ctx, "not found", chromedp.Navigate(base+"no-such-page"), chromedp.WaitVisible(chromedp.CSS("main")))
	check("an error page")
	run(t, ctx, "no item", chromedp.Navigate(base+"item?key=no-such-item"), chromedp.WaitVisible(chromedp.CSS("main")))
	check("the page of an item not in the ledger")

	// Every item settled: the queue is empty.
	page, err := e.store.ListItems(e.ctx, items.ListParams{Tenant: "default", NeedsPerson: new(true), Limit: items.MaxListLimit})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range page.Items {
		outcome := items.ResolveNotCommitted
		if it.Acknowledgeable() {
			outcome = items.ResolveAcknowledged
		}
		if _, _, err := e.ledger.Resolve(e.ctx, items.ResolveParams{Tenant: "default", Key: it.Key, Outcome: outcome,
			Evidence: "checked in the billing tool", By: "ops-alice"}); err != nil {
			t.Fatalf("resolve %s: %v", it.Key, err)
		}
	}
	run(t, ctx, "empty queue", chromedp.Navigate(base), chromedp.WaitVisible(chromedp.ID("empty")))
	check("the empty queue")
	t.Logf("axe-core %v: %d violation(s) over every page", axeTags, total)
}

// slackAlert records the alert of key (attempt 1, no dedupe) as the dispatcher does once its Slack message
// landed in channel at ts: its owner U0BILLING, escalating to U0LEAD after an hour.
func (e *env) slackAlert(key, channel, ts string) {
	e.t.Helper()
	ob := e.store.(outbox)
	it := e.get(key)
	if _, err := ob.AddAlerts(e.ctx, []items.Alert{{Tenant: "default", Key: key, Attempt: it.Attempt, Cause: it.NeedsPersonCause, Owner: "U0BILLING",
		EscalateTo: "U0LEAD", EscalateAfter: time.Hour, BatchID: it.BatchID, Destination: it.Destination, CreatedAt: e.clock.Now()}}); err != nil {
		e.t.Fatal(err)
	}
	claim := "c-" + key
	if _, err := ob.ClaimAlerts(e.ctx, items.AlertClaim{Group: items.AlertGroup{Tenant: "default", Owner: "U0BILLING", BatchID: it.BatchID},
		Claim: claim, Now: e.clock.Now(), Until: e.clock.Now().Add(time.Minute)}); err != nil {
		e.t.Fatal(err)
	}
	if n, err := ob.FinishAlerts(e.ctx, items.AlertDelivery{Claim: claim, Channel: channel, TS: ts, At: e.clock.Now()}); err != nil || n != 1 {
		e.t.Fatalf("finish: %d %v", n, err)
	}
	mark := []items.AlertMark{{Key: key, Attempt: it.Attempt, Cause: it.NeedsPersonCause}}
	if _, err := e.ledger.RecordAlerts(e.ctx, "default", mark, items.AlertSent, "U0BILLING"); err != nil {
		e.t.Fatal(err)
	}
}

// dispatchToTheLog runs the alert dispatcher once without Slack, as companion serve does without
// SLACK_BOT_TOKEN: every due alert goes to the service's log, to its owner's name (destination billing:
// U0BILLING) or, for an item nobody owns (destination slow), to nobody.
func (e *env) dispatchToTheLog() alerts.DispatchCounts {
	e.t.Helper()
	d, err := alerts.NewDispatcher(alerts.DispatcherConfig{Ledger: e.ledger, Outbox: e.store.(alerts.Outbox),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		e.t.Fatal(err)
	}
	counts, err := d.RunOnce(e.ctx)
	d.Wait()
	if err != nil {
		e.t.Fatal(err)
	}
	return counts
}
