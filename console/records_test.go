package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/alerts"
	"github.com/replaysafe/companion/items"
)

// rowOf returns the table row of key in a page (from its data-key to its end).
func rowOf(t *testing.T, body, key string) string {
	t.Helper()
	i := strings.Index(body, `data-key="`+key+`"`)
	if i < 0 {
		t.Fatalf("no row for %s", key)
	}
	j := strings.Index(body[i:], "</tr>")
	return body[i : i+j]
}

// The batch page marks the items that need a person, says why in words and their alert status; the API's
// GET /v1/batches/{id} keeps the item fields API.md gives it (the marks are the console's). The batch page
// used to show state, attempt and external id only, so an owner opening a batch from Slack had to open
// each unknown item to learn whether it waited for them.
func TestTheBatchPageMarksTheItemsThatNeedAPerson(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{open: true})
	e.unknownItem("k-b0", "QT-B0", "b-7", 0)
	e.succeededItem("k-b1", "b-7", 1)
	e.unknownItem("k-b2", "QT-B2", "b-7", 2)
	mark := []items.AlertMark{{Key: "k-b2", Attempt: 1, Cause: items.CauseNoDedupe}}
	if _, err := e.ledger.RecordAlerts(e.ctx, "default", mark, items.AlertSent, "U0BILLING"); err != nil {
		t.Fatal(err)
	}
	c := e.client()
	status, body, _ := e.page(c, "/console/batch?id=b-7")
	if status != http.StatusOK {
		t.Fatalf("batch page: %d\n%s", status, body)
	}
	why := alerts.CauseText(items.CauseNoDedupe)
	for key, want := range map[string][]string{
		"k-b0": {"needs a person", why, `<code class="muted">` + items.CauseNoDedupe + "</code>", "Alert: due, not sent yet"},
		"k-b2": {"needs a person", why, "Alert: sent to the owner"},
	} {
		if !strings.Contains(body, `class="batch-row needs-person" data-key="`+key+`"`) {
			t.Errorf("the batch page does not mark the row of %s", key)
		}
		r := rowOf(t, body, key)
		for _, w := range want {
			if !strings.Contains(r, w) {
				t.Errorf("the batch page's row of %s does not say %q:\n%s", key, w, r)
			}
		}
	}
	if r := rowOf(t, body, "k-b1"); strings.Contains(r, "needs a person") || !strings.Contains(body, `class="batch-row" data-key="k-b1"`) {
		t.Errorf("the batch page marks the succeeded item as needing a person:\n%s", r)
	}
	if !strings.Contains(body, `id="waiting">2 items on this page need a person`) {
		t.Errorf("the batch page does not count the items needing a person:\n%s", body)
	}

	// The API's body keeps to API.md's item fields.
	resp, err := http.Get(e.srv.URL + "/v1/batches/b-7")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct{ Items []map[string]any }
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/batches/b-7: %d %v", resp.StatusCode, err)
	}
	contract := map[string]bool{"key": true, "batch_index": true, "state": true, "attempt": true, "external_id": true, "updated_at": true}
	if len(got.Items) != 3 {
		t.Fatalf("GET /v1/batches/b-7 lists %d items, want 3", len(got.Items))
	}
	for _, it := range got.Items {
		for f := range it {
			if !contract[f] {
				t.Errorf("GET /v1/batches/b-7 answers field %q, which API.md does not give it: %v", f, it)
			}
		}
	}
}

// outbox is the alert outbox of the env's store (the dispatcher's side of it).
type outbox interface {
	AddAlerts(ctx context.Context, as []items.Alert) (int, error)
	ClaimAlerts(ctx context.Context, c items.AlertClaim) ([]items.Alert, error)
	MarkAlertPost(ctx context.Context, claim string, at time.Time) (int, error)
	ReleaseAlerts(ctx context.Context, claim string) error
	FinishAlerts(ctx context.Context, f items.AlertDelivery) (int, error)
	NoteAlertMessage(ctx context.Context, as []items.Alert, m items.AlertDelivery) (int, error)
}

// The item page shows the item's alert outbox records in words: due, a post under way (also after a stop
// gave the claim back), where it was posted with a link to the Slack message, when it escalates, and the
// escalation and its message. The page used to say only "due, not sent yet" from the item's alert status.
func TestTheItemPageShowsItsAlertRecords(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{open: true, mongo: kind.mongo})
			ob := e.store.(outbox)
			e.unknownItem("k-a", "QT-A", "", 0)
			e.succeededItem("k-quiet", "", 0)
			c := e.client()
			section := func(key string) (string, string) {
				t.Helper()
				status, body, _ := e.page(c, "/console/item?key="+key)
				if status != http.StatusOK {
					t.Fatalf("item page of %s: %d\n%s", key, status, body)
				}
				i := strings.Index(body, `id="alerts"`)
				if i < 0 {
					t.Fatalf("the item page of %s has no alerts section:\n%s", key, body)
				}
				j := strings.Index(body[i:], "</section>")
				return body, body[i : i+j]
			}
			want := func(where, got string, wants ...string) {
				t.Helper()
				for _, w := range wants {
					if !strings.Contains(got, w) {
						t.Errorf("%s does not say %q:\n%s", where, w, got)
					}
				}
			}
			if _, s := section("k-quiet"); !strings.Contains(s, "No alert was due for this item.") {
				t.Errorf("an item without alerts does not say so:\n%s", s)
			}

			now := e.clock.Now()
			if _, err := ob.AddAlerts(e.ctx, []items.Alert{{Tenant: "default", Key: "k-a", Attempt: 1, Cause: items.CauseNoDedupe,
				Owner: "U0BILLING", EscalateTo: "U0LEAD", EscalateAfter: time.Hour, Destination: "billing", CreatedAt: now}}); err != nil {
				t.Fatal(err)
			}
			_, s := section("k-a")
			want("the due alert", s, "Attempt 1: "+alerts.CauseText(items.CauseNoDedupe), "due, not sent yet", "U0BILLING",
				"to U0LEAD if nobody acts within 1h0m0s of the post")

			// A dispatcher begins to post, then a stop gives its claim back: the post stays in doubt.
			group := items.AlertGroup{Tenant: "default", Owner: "U0BILLING"}
			claim := func(name string, g items.AlertGroup) {
				t.Helper()
				now := e.clock.Now()
				if got, err := ob.ClaimAlerts(e.ctx, items.AlertClaim{Group: g, Claim: name, Now: now, Until: now.Add(time.Minute)}); err != nil || len(got) != 1 {
					t.Fatalf("claim %s: %v %v", name, got, err)
				}
			}
			claim("c1", group)
			if _, err := ob.MarkAlertPost(e.ctx, "c1", e.clock.Now()); err != nil {
				t.Fatal(err)
			}
			e.clock.Advance(5 * time.Second)
			if err := ob.ReleaseAlerts(e.ctx, "c1"); err != nil {
				t.Fatal(err)
			}
			body, s := section("k-a")
			want("the alert whose post is in doubt", s, "being posted: the post&#39;s landing is not recorded yet", "post under way",
				"a post began "+now.UTC().Format("2006-01-02 15:04:05Z")+" (5s ago)")
			want("the item's alert fact", body, `id="alert">being posted since `+now.UTC().Format("2006-01-02 15:04:05Z"))

			// The message had landed: the dispatcher that finds it notes it, to update it rather than post again.
			as := []items.Alert{{Tenant: "default", Key: "k-a", Attempt: 1, Cause: items.CauseNoDedupe}}
			if n, err := ob.NoteAlertMessage(e.ctx, as, items.AlertDelivery{Channel: "C0ALERTS", TS: "1764590000.000100"}); err != nil || n != 1 {
				t.Fatalf("note the message: %d %v", n, err)
			}
			_, s = section("k-a")
			want("the alert whose message was found", s, "posted, not recorded as sent yet", `href="https://slack.com/archives/C0ALERTS/p1764590000000100"`)

			// The next dispatcher records it as sent.
			claim("c2", group)
			sentAt := e.clock.Now()
			if n, err := ob.FinishAlerts(e.ctx, items.AlertDelivery{Claim: "c2", Channel: "C0ALERTS", TS: "1764590000.000100", At: sentAt}); err != nil || n != 1 {
				t.Fatalf("finish: %d %v", n, err)
			}
			if _, err := e.ledger.RecordAlerts(e.ctx, "default", []items.AlertMark{{Key: "k-a", Attempt: 1, Cause: items.CauseNoDedupe}}, items.AlertSent, "U0BILLING"); err != nil {
				t.Fatal(err)
			}
			body, s = section("k-a")
			want("the sent alert", s, "sent to the owner", `href="https://slack.com/archives/C0ALERTS/p1764590000000100"`,
				"in C0ALERTS at ts 1764590000.000100", "posted</dt><dd>"+sentAt.UTC().Format("2006-01-02 15:04:05Z"),
				"to U0LEAD, due at "+sentAt.Add(time.Hour).UTC().Format("2006-01-02 15:04:05Z"))
			if strings.Contains(s, "post under way") {
				t.Errorf("the sent alert still says a post is under way:\n%s", s)
			}
			want("the item's alert fact", body, `id="alert">sent to the owner`)

			// An hour later it escalates.
			e.clock.Advance(time.Hour + time.Minute)
			claim("c3", items.AlertGroup{Tenant: "default", Owner: "U0LEAD", Escalation: true})
			escAt := e.clock.Now()
			if n, err := ob.FinishAlerts(e.ctx, items.AlertDelivery{Claim: "c3", Channel: "C0LEAD", TS: "1764593700.000200", At: escAt, Escalation: true}); err != nil || n != 1 {
				t.Fatalf("finish the escalation: %d %v", n, err)
			}
			_, s = section("k-a")
			want("the escalated alert", s, "escalated: sent on to the escalation contact",
				"to U0LEAD at "+escAt.UTC().Format("2006-01-02 15:04:05Z")+", when it was due",
				`href="https://slack.com/archives/C0LEAD/p1764593700000200"`, `href="https://slack.com/archives/C0ALERTS/p1764590000000100"`)
		})
	}
}

// An alert that went to the service's log (no owner configured, or no Slack) says so on the item page, its
// alerts card, its timeline, the queue and the batch page: nobody was notified. They used to say "sent to
// the owner", and the card "to (no owner configured)" with a message "in log at ts " and no ts.
func TestAnAlertWrittenToTheLogSaysNobodyWasNotified(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{open: true})
	// billing names its owner (U0BILLING), and there is no Slack: the log, for U0BILLING.
	e.unknownItem("k-owned", "QT-O", "b-log", 0)
	// slow names none: the log, for nobody.
	a, err := e.ledger.BeforeWrite(e.ctx, items.BeforeWriteParams{Tenant: "default", Key: "k-unowned", Fingerprint: fingerprint,
		Destination: "slow", Dedupe: items.DedupeNone, BatchID: "b-log", BatchIndex: new(1)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.ledger.AfterWrite(e.ctx, items.AfterWriteParams{Tenant: "default", Key: "k-unowned", Claim: a.Claim,
		Evidence: items.Evidence{Outcome: items.OutcomeUnknown, Class: items.ClassTimeout}}); err != nil {
		t.Fatal(err)
	}
	if n := e.dispatchToTheLog(); n.Messages != 2 || n.Alerted != 2 {
		t.Fatalf("the dispatch to the log did %+v, want 2 messages with an alert each", n)
	}
	c := e.client()
	for key, why := range map[string]string{
		"k-owned":   "written to the service&#39;s log for U0BILLING, not sent to them: Slack is not configured (SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET)",
		"k-unowned": "written to the service&#39;s log, not sent to anyone: no owner is configured for this item",
	} {
		status, body, _ := e.page(c, "/console/item?key="+key)
		if status != http.StatusOK {
			t.Fatalf("item page of %s: %d", key, status)
		}
		i := strings.Index(body, `id="alerts"`)
		card := body[i : i+strings.Index(body[i:], "</section>")]
		for where, got := range map[string]string{"the item's alert fact": body[strings.Index(body, `id="alert"`):], "the alerts card": card} {
			if !strings.Contains(got, why) {
				t.Errorf("%s of %s does not say %q:\n%s", where, key, why, got[:min(len(got), 1500)])
			}
		}
		for _, untrue := range []string{"sent to the owner", "at ts", "(no owner configured)", "posted</dt>"} {
			if strings.Contains(card, untrue) {
				t.Errorf("the alerts card of %s says %q:\n%s", key, untrue, card)
			}
		}
		if !strings.Contains(card, "none in Slack: a warning line in the service&#39;s log names the item") {
			t.Errorf("the alerts card of %s does not say where the alert is:\n%s", key, card)
		}
		if !strings.Contains(body, "Alert written to the service&#39;s log (nobody was notified)") || strings.Contains(body, "Alert sent") {
			t.Errorf("the timeline of %s does not say the alert went to the log", key)
		}
	}
	_, queue, _ := e.page(c, "/console/")
	_, batch, _ := e.page(c, "/console/batch?id=b-log")
	for page, body := range map[string]string{"queue": queue, "batch page": batch} {
		if r := rowOf(t, body, "k-unowned"); !strings.Contains(r, "Alert: written to the service&#39;s log, not sent to anyone") {
			t.Errorf("the %s's row of k-unowned says:\n%s", page, r)
		}
		if r := rowOf(t, body, "k-owned"); !strings.Contains(r, "for U0BILLING, not sent to them") {
			t.Errorf("the %s's row of k-owned says:\n%s", page, r)
		}
	}
}
