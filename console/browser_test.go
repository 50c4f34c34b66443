package console_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/replaysafe/companion/items"
)

// The browser tests drive Debian's chromium (console/testdata/install-chromium.sh installs it). Without
// it they skip, except in CI (CI=true), where a missing browser fails them.

// screenshotEnv, when set to 1, copies the screenshots the tests take into docs/images/.
const screenshotEnv = "COMPANION_UPDATE_SCREENSHOTS"

// browser starts a headless chromium for the test and returns a context of its first tab, which ends
// after 90 seconds.
func browser(t *testing.T) context.Context {
	t.Helper()
	return browserFor(t, 90*time.Second)
}

// browserFor is browser with a context that ends after timeout.
func browserFor(t *testing.T, timeout time.Duration) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("chromium is not installed (run console/testdata/install-chromium.sh): %v", err)
		}
		t.Skip("chromium is not installed: run console/testdata/install-chromium.sh (in CI, CI=true, this test fails instead)")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, timeout)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// screenshot saves the viewport (1280×800) as name.png in the test's directory, and into docs/images/
// when COMPANION_UPDATE_SCREENSHOTS=1.
func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	file := filepath.Join(dir, "console-"+name+".png")
	if err := os.WriteFile(file, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", file)
	if os.Getenv(screenshotEnv) == "1" {
		if err := os.WriteFile(filepath.Join("..", "docs", "images", "console-"+name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func run(t *testing.T, ctx context.Context, step string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", step, err)
	}
}

// get runs one action that returns a value.
func get[T any](t *testing.T, ctx context.Context, step string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", step, err)
	}
	return v
}

func TestBrowserSignInFindResolveAndWatchItLeaveTheQueue(t *testing.T) {
	ctx := browser(t)
	e := newEnv(t, envOptions{refresh: time.Hour})
	for i, key := range []string{"inv-740", "inv-741", "inv-742"} {
		e.unknownItem(key, "QT-"+strings.TrimPrefix(key, "inv-"), "exec-1234:Send reminders", i)
		e.clock.Advance(90 * time.Second)
	}
	e.succeededItem("inv-743", "exec-1234:Send reminders", 3)
	e.unknownItem("crm-17", `<script>window.__xss=1</script>ACME "Ltd" & co`, "", 0)
	// inv-742's alert went to its owner in Slack, and escalates in an hour.
	ob := e.store.(outbox)
	if _, err := ob.AddAlerts(e.ctx, []items.Alert{{Tenant: "default", Key: "inv-742", Attempt: 1, Cause: items.CauseNoDedupe, Owner: "U0BILLING",
		EscalateTo: "U0LEAD", EscalateAfter: time.Hour, BatchID: "exec-1234:Send reminders", Destination: "billing", CreatedAt: e.clock.Now()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ob.ClaimAlerts(e.ctx, items.AlertClaim{Group: items.AlertGroup{Tenant: "default", Owner: "U0BILLING", BatchID: "exec-1234:Send reminders"},
		Claim: "c1", Now: e.clock.Now(), Until: e.clock.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if n, err := ob.FinishAlerts(e.ctx, items.AlertDelivery{Claim: "c1", Channel: "C0ALERTS", TS: "1764612003.000100", At: e.clock.Now()}); err != nil || n != 1 {
		t.Fatalf("finish: %d %v", n, err)
	}
	if _, err := e.ledger.RecordAlerts(e.ctx, "default", []items.AlertMark{{Key: "inv-742", Attempt: 1, Cause: items.CauseNoDedupe}}, items.AlertSent, "U0BILLING"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(7 * time.Minute)
	shots := t.TempDir()
	base := e.srv.URL + "/console/"

	// A workflow token cannot sign in.
	var msg string
	run(t, ctx, "workflow sign-in",
		chromedp.Navigate(base),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), workflowSecret),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("error")))
	msg = get(t, ctx, "workflow sign-in", chromedp.Text(chromedp.ID("error")))
	if !strings.Contains(msg, "n8n-prod is a workflow token") {
		t.Fatalf("a workflow token's sign-in says %q", msg)
	}
	screenshot(t, ctx, shots, "signin")

	// An operator token signs in and lands on the queue, oldest first.
	var total string
	var keys []string
	run(t, ctx, "operator sign-in",
		chromedp.Navigate(base+"signin"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), operatorSecret),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("total")))
	total = get(t, ctx, "operator sign-in", chromedp.Text(chromedp.ID("total")))
	keys = get(t, ctx, "operator sign-in", chromedp.Evaluate[[]string](`[...document.querySelectorAll("tr.queue-row")].map(r => r.dataset.key)`))
	if total != "4" || strings.Join(keys, " ") != "inv-740 inv-741 inv-742 crm-17" {
		t.Fatalf("queue shows %s item(s): %v, want 4, oldest first", total, keys)
	}
	screenshot(t, ctx, shots, "queue")

	// The reference with a script renders as text, and the script never ran.
	var ref string
	var xss bool
	run(t, ctx, "script reference")
	ref = get(t, ctx, "script reference", chromedp.Text(chromedp.CSS(`tr[data-key="crm-17"] td.ref`)))
	xss = get(t, ctx, "script reference", chromedp.Evaluate[bool](`window.__xss !== undefined`))
	if ref != `<script>window.__xss=1</script>ACME "Ltd" & co` || xss {
		t.Fatalf("the reference renders as %q (script ran: %v)", ref, xss)
	}

	// Open the unknown item and read its timeline.
	var timeline, idem string
	run(t, ctx, "open item",
		chromedp.Click(chromedp.CSS(`tr[data-key="inv-742"] a.key`)),
		chromedp.WaitVisible(chromedp.ID("timeline")))
	timeline = get(t, ctx, "open item", chromedp.Text(chromedp.ID("timeline")))
	idem = get(t, ctx, "open item", chromedp.Text(chromedp.ID("idem")))
	flat := strings.Join(strings.Fields(timeline), " ")
	for _, want := range []string{"Claimed state → in flight execution exec-inv-742", "Report after the write",
		"outcome unknown: the workflow does not know unknown error no answer in time: the request may have been written timeout",
		"Needs a person why the outcome is unknown and the destination can neither dedupe nor be searched unknown_no_dedupe"} {
		if !strings.Contains(flat, want) {
			t.Errorf("timeline lacks %q:\n%s", want, timeline)
		}
	}
	alertCard := strings.Join(strings.Fields(get(t, ctx, "open item", chromedp.Text(chromedp.ID("alerts")))), " ")
	slackLink := get(t, ctx, "open item", chromedp.Evaluate[string](`document.querySelector("#alerts a").href`))
	if !strings.Contains(alertCard, "sent to the owner") || !strings.Contains(alertCard, "escalation to U0LEAD, due at") ||
		slackLink != "https://slack.com/archives/C0ALERTS/p1764612003000100" {
		t.Errorf("the alerts card says %q, links %q", alertCard, slackLink)
	}
	if want := e.ledger.IdempotencyKey("default", "inv-742"); idem != want {
		t.Errorf("idempotency key %q, want %q", idem, want)
	}
	screenshot(t, ctx, shots, "item")
	run(t, ctx, "alerts card", chromedp.ScrollIntoView(chromedp.ID("alerts")))
	screenshot(t, ctx, shots, "item-alerts")
	run(t, ctx, "back to the top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))

	// An unknown item is offered committed and not committed, never acknowledged (the contract refuses it).
	if n := get(t, ctx, "offered outcomes", chromedp.Evaluate[int](`document.querySelectorAll('input[name=outcome]').length`)); n != 2 {
		t.Errorf("the form offers %d outcomes for an unknown item, want 2", n)
	}
	// The contract refuses evidence under 10 characters; the page says why and keeps the evidence.
	var refused, kept string
	run(t, ctx, "refused resolution",
		chromedp.Click(chromedp.ID("outcome-not-committed")),
		chromedp.SendKeys(chromedp.ID("evidence"), "no INV"),
		chromedp.Click(chromedp.ID("resolve-submit")),
		chromedp.WaitVisible(chromedp.ID("refused")))
	refused = get(t, ctx, "refused resolution", chromedp.Text(chromedp.ID("refused")))
	kept = get(t, ctx, "refused resolution", chromedp.Value(chromedp.ID("evidence")))
	if !strings.Contains(refused, "400 invalid_request") || !strings.Contains(refused, "at least 10 characters") || kept != "no INV" {
		t.Fatalf("refusal shows %q, evidence kept %q", refused, kept)
	}
	screenshot(t, ctx, shots, "item-refused")

	// Resolve it as committed with evidence and an external id.
	var done, state string
	run(t, ctx, "resolve",
		chromedp.Click(chromedp.ID("outcome-succeeded")),
		chromedp.Clear(chromedp.ID("evidence")),
		chromedp.SendKeys(chromedp.ID("evidence"), "Invoice INV-742 exists in the billing tool, sent 18:03"),
		chromedp.SendKeys(chromedp.ID("external_id"), "in_1Q742"),
		chromedp.Click(chromedp.ID("resolve-submit")),
		chromedp.WaitVisible(chromedp.ID("done")))
	done = get(t, ctx, "resolve", chromedp.Text(chromedp.ID("done")))
	state = get(t, ctx, "resolve", chromedp.Text(chromedp.ID("state")))
	timeline = get(t, ctx, "resolve", chromedp.Text(chromedp.ID("timeline")))
	if state != "succeeded" || !strings.Contains(timeline, "Resolved by a person") || !strings.Contains(timeline, "ops-alice") {
		t.Fatalf("after resolving: %q, state %q, timeline:\n%s", done, state, timeline)
	}
	it := e.get("inv-742")
	if it.State != items.StateSucceeded || it.Resolution == nil || it.Resolution.ExternalID != "in_1Q742" || it.Resolution.By != "ops-alice" {
		t.Fatalf("the ledger has %s %+v", it.State, it.Resolution)
	}

	// It has left the queue.
	run(t, ctx, "queue after",
		chromedp.Click(chromedp.CSS(`nav a[href="/console/"]`)),
		chromedp.WaitVisible(chromedp.ID("total")))
	total = get(t, ctx, "queue after", chromedp.Text(chromedp.ID("total")))
	keys = get(t, ctx, "queue after", chromedp.Evaluate[[]string](`[...document.querySelectorAll("tr.queue-row")].map(r => r.dataset.key)`))
	if total != "3" || strings.Contains(strings.Join(keys, " "), "inv-742") {
		t.Fatalf("after resolving, the queue shows %s: %v", total, keys)
	}

	// The other pages, for the screenshots and a look at each.
	var counts, found, measures string
	run(t, ctx, "batch",
		chromedp.Navigate(base+"batch?id="+urlQuery("exec-1234:Send reminders")),
		chromedp.WaitVisible(chromedp.ID("counts")))
	counts = get(t, ctx, "batch", chromedp.Text(chromedp.ID("counts")))
	if c := strings.Join(strings.Fields(counts), " "); !strings.Contains(c, "succeeded 2") || !strings.Contains(c, "unknown 2") {
		t.Fatalf("batch counts %q, want 2 succeeded and 2 unknown", c)
	}
	marked := get(t, ctx, "batch", chromedp.Evaluate[[]string](`[...document.querySelectorAll("tr.needs-person")].map(r => r.dataset.key)`))
	if strings.Join(marked, " ") != "inv-740 inv-741" {
		t.Errorf("the batch page marks %v as needing a person, want inv-740 inv-741", marked)
	}
	screenshot(t, ctx, shots, "batch")
	run(t, ctx, "find",
		chromedp.Navigate(base+"find"),
		chromedp.WaitVisible(chromedp.ID("q")),
		chromedp.SendKeys(chromedp.ID("q"), "crm-17\n"),
		chromedp.WaitVisible(chromedp.CSS(`a.key[href*="crm-17"]`)))
	found = get(t, ctx, "find", chromedp.Text(chromedp.CSS("main")))
	if !strings.Contains(found, `<script>window.__xss=1</script>ACME`) {
		t.Fatalf("find shows:\n%s", found)
	}
	screenshot(t, ctx, shots, "find")
	// By business reference, and by the execution id of an item's latest claim, through the same box.
	var byRef, byExec []string
	run(t, ctx, "find by reference",
		chromedp.Navigate(base+"find"),
		chromedp.WaitVisible(chromedp.ID("q")),
		chromedp.SendKeys(chromedp.ID("q"), "QT-741\n"),
		chromedp.WaitVisible(chromedp.ID("found-reference")))
	byRef = get(t, ctx, "find by reference", chromedp.Evaluate[[]string](`[...document.querySelectorAll("#found-reference tr.find-row")].map(r => r.dataset.key)`))
	if strings.Join(byRef, " ") != "inv-741" {
		t.Fatalf("find QT-741 lists %v, want inv-741", byRef)
	}
	run(t, ctx, "find by execution",
		chromedp.Clear(chromedp.ID("q")),
		chromedp.SendKeys(chromedp.ID("q"), "exec-inv-742\n"),
		chromedp.WaitVisible(chromedp.ID("found-execution")),
		chromedp.Click(chromedp.CSS(`#found-execution a.key`)),
		chromedp.WaitVisible(chromedp.ID("state")))
	byExec = get(t, ctx, "find by execution", chromedp.Evaluate[[]string](`[location.search]`))
	if len(byExec) != 1 || byExec[0] != "?key=inv-742" {
		t.Fatalf("the execution's item links to %v, want ?key=inv-742", byExec)
	}
	run(t, ctx, "overview",
		chromedp.Navigate(base+"overview"),
		chromedp.WaitVisible(chromedp.ID("measures")))
	measures = get(t, ctx, "overview", chromedp.Text(chromedp.ID("measures")))
	if !strings.Contains(measures, "billing") || !strings.Contains(measures, "all destinations") {
		t.Fatalf("overview shows:\n%s", measures)
	}
}

func TestBrowserQueueRefreshesItself(t *testing.T) {
	ctx := browser(t)
	e := newEnv(t, envOptions{open: true, refresh: time.Second})
	e.unknownItem("inv-1", "QT-1", "", 0)
	var n int
	run(t, ctx, "queue", chromedp.Navigate(e.srv.URL+"/console/"), chromedp.WaitVisible(chromedp.CSS(`tr[data-key="inv-1"]`)))
	// Settled elsewhere (the API, Slack), the item leaves the open page on its own.
	if _, _, err := e.ledger.Resolve(e.ctx, items.ResolveParams{Tenant: "default", Key: "inv-1", Outcome: items.ResolveSucceeded,
		Evidence: "found it in the billing tool", By: "slack:U1"}); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "refreshed", chromedp.WaitVisible(chromedp.ID("empty")))
	n = get(t, ctx, "refreshed", chromedp.Evaluate[int](`document.querySelectorAll("tr.queue-row").length`))
	if n != 0 {
		t.Fatalf("%d rows after the refresh", n)
	}
}

// TestBrowserEveryKindOfItemSaysWhatToDo opens an item of every kind in chromium: each says what its state
// means and what to do next, offers exactly the outcomes resolve accepts, and a duplicate effect is
// acknowledged from its page.
func TestBrowserEveryKindOfItemSaysWhatToDo(t *testing.T) {
	ctx := browser(t)
	e := newEnv(t, envOptions{open: true})
	k := e.kinds()
	for kind, key := range k {
		run(t, ctx, kind, chromedp.Navigate(e.srv.URL+"/console/item?key="+key+"&norefresh=1"), chromedp.WaitVisible(chromedp.ID("situation")))
		situation := get(t, ctx, kind, chromedp.Text(chromedp.ID("situation")))
		n := get(t, ctx, kind, chromedp.Evaluate[int](`document.querySelectorAll('input[name=outcome]').length`))
		if len(situation) < 30 {
			t.Errorf("%s: the page says %q of what to do", kind, situation)
		}
		if offers := n > 0; offers != strings.Contains(situation, "below") {
			t.Errorf("%s: %d outcomes offered, and the page says %q", kind, n, situation)
		}
	}
	var done, situation string
	run(t, ctx, "acknowledge",
		chromedp.Navigate(e.srv.URL+"/console/item?key="+k["duplicate effect"]+"&norefresh=1"),
		chromedp.WaitVisible(chromedp.ID("outcome-acknowledged")),
		chromedp.SendKeys(chromedp.ID("evidence"), "Refunded the second invoice in billing"),
		chromedp.Click(chromedp.ID("resolve-submit")),
		chromedp.WaitVisible(chromedp.ID("done")))
	done = get(t, ctx, "acknowledge", chromedp.Text(chromedp.ID("done")))
	situation = get(t, ctx, "acknowledge", chromedp.Text(chromedp.ID("situation")))
	if done != "Resolution recorded." || !strings.Contains(situation, "acknowledged. Nothing to do") {
		t.Errorf("after acknowledging: %q, %q", done, situation)
	}
	if it := e.get(k["duplicate effect"]); it.NeedsPerson || it.Resolution == nil || it.Resolution.Outcome != items.ResolveAcknowledged {
		t.Errorf("the ledger has %+v", it.Resolution)
	}
}
