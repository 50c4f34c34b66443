package alerts_test

import (
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/alerts"
	"github.com/replaysafe/companion/items"
)

// An alert message stays true when its items are settled elsewhere: a lookup reported through the API, a
// late success report, a person's resolution recorded by another replica whose message update was lost.
// The next dispatch (any replica's) updates the message: the settled items lose their buttons and say how
// they were settled, the item still waiting keeps its own. A message is updated once; an update Slack
// fails for now is tried again at the next dispatch, one Slack refuses for good (the message was deleted)
// is not. On each store.
func TestMessagesOfItemsSettledElsewhereLoseTheirButtons(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			e := newEnvOn(t, st.open, items.Config{Destinations: map[string]items.Destination{"billing": {Owner: "U0OWNER"},
				"crm": {Owner: "U0OWNER", Dedupe: items.DedupeLookup, EscalateAfter: time.Hour}}})
			slack := newFakeSlack(t)
			d := e.dispatcher(e.ledger, slack.notifier(t), alerts.Routing{})
			// inv-lookup waits for a lookup of crm that does not come within the hour: it needs a person (stale).
			e.unknownItem("inv-lookup", withDest("crm"), inBatch("exec-1", 2))
			e.advance(2 * time.Hour)
			e.sweep(100)
			e.needsPerson("inv", "exec-1", 2)
			late := e.claim("inv-late", withDedupe(items.DedupeNone), inBatch("exec-1", 3))
			e.report("inv-late", late.Claim, timeout)
			if c := e.dispatch(d); c.Messages != 1 || c.Alerted != 4 {
				t.Fatalf("first dispatch %+v, want one message with 4 alerts", c)
			}
			msg := slack.Posts()[0]
			for _, key := range []string{"inv-000", "inv-001", "inv-lookup", "inv-late"} {
				buttonOf(t, msg, key, alerts.ActionResolveCommitted)
			}

			// Settled elsewhere, the dispatcher not told: a replica's ledger records each.
			other := e.newLedger(e.cfg)
			if _, err := other.Reconcile(e.ctx, items.ReconcileParams{Tenant: "default", Key: "inv-lookup", Finding: items.FindingFound,
				ExternalID: "INV-1000", Evidence: "found by the workflow's lookup"}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := other.Resolve(e.ctx, items.ResolveParams{Tenant: "default", Key: "inv-000", Outcome: items.ResolveNotCommitted,
				Evidence: "no invoice in billing for QT-inv-000", By: "ops-bob"}); err != nil {
				t.Fatal(err)
			}
			if _, err := other.AfterWrite(e.ctx, items.AfterWriteParams{Tenant: "default", Key: "inv-late", Claim: late.Claim,
				ExternalID: "INV-LATE", Evidence: succeeded}); err != nil {
				t.Fatal(err)
			}
			if it := e.get("inv-late"); it.NeedsPerson || it.State != items.StateSucceeded {
				t.Fatalf("the late success left inv-late %s, needs a person %v", it.State, it.NeedsPerson)
			}

			// Slack fails the first update for now: the alerts stay open, and the next dispatch tries again.
			slack.mu.Lock()
			slack.failUpdates, slack.updateError = 1, "internal_error"
			slack.mu.Unlock()
			if c := e.dispatch(d); c.Updated != 0 || c.Failed != 1 || len(slack.Updates()) != 0 {
				t.Fatalf("dispatch with Slack failing: %+v, %d updates", c, len(slack.Updates()))
			}
			if c := e.dispatch(d); c.Updated != 1 || c.Failed != 0 {
				t.Fatalf("next dispatch %+v, want the message updated", c)
			}
			ups := slack.Updates()
			if len(ups) != 1 || ups[0].TS != msg.TS || ups[0].Channel != msg.Channel {
				t.Fatalf("updates %+v, want one of the message %s", ups, msg.TS)
			}
			var keys []string
			for _, b := range ups[0].buttons() {
				for _, key := range []string{"inv-000", "inv-001", "inv-lookup", "inv-late"} {
					if strings.Contains(b[1], `"`+key+`"`) && !strings.Contains(strings.Join(keys, " "), key) {
						keys = append(keys, key)
					}
				}
			}
			if strings.Join(keys, " ") != "inv-001" {
				t.Errorf("after the update the message has buttons for %v, want only inv-001 (still waiting)", keys)
			}
			text := ups[0].texts()
			for _, want := range []string{"settled without a person: now succeeded", "Resolved as *not committed* by ops-bob: no invoice in billing for QT-inv-000"} {
				if !strings.Contains(text, want) {
					t.Errorf("the updated message does not say %q:\n%s", want, text)
				}
			}
			if c := e.dispatch(d); c.Updated != 0 || len(slack.Updates()) != 1 {
				t.Fatalf("a dispatch with nothing newly settled: %+v, %d updates", c, len(slack.Updates()))
			}

			// The message was deleted in Slack: the update is refused for good, and not asked again.
			if _, _, err := other.Resolve(e.ctx, items.ResolveParams{Tenant: "default", Key: "inv-001", Outcome: items.ResolveSucceeded,
				Evidence: "invoice INV-1001 is in billing", By: "ops-bob"}); err != nil {
				t.Fatal(err)
			}
			slack.mu.Lock()
			slack.failUpdates, slack.updateError = 1, "message_not_found"
			slack.mu.Unlock()
			if c := e.dispatch(d); c.Updated != 0 || c.Failed != 0 {
				t.Fatalf("a refused update: %+v, want neither updated nor failed", c)
			}
			if c := e.dispatch(d); c.Updated != 0 || len(slack.Updates()) != 1 {
				t.Fatalf("the refused update was asked again: %+v", c)
			}
			if !strings.Contains(e.logs.String(), "will not be tried again: Slack refused") {
				t.Errorf("the refused update was not logged:\n%s", e.logs)
			}
		})
	}
}

// A button pressed on a message whose item was settled without a person (a lookup), before any dispatch
// updated it, opens no dialog: the person is told, and the message is brought up to date at once.
func TestAButtonOfAnItemSettledByALookupSaysSoAndUpdatesTheMessage(t *testing.T) {
	t.Parallel()
	s := newSlackSide(t, items.Config{Destinations: map[string]items.Destination{
		"crm": {Owner: "U0OWNER", Dedupe: items.DedupeLookup, EscalateAfter: time.Hour}}}, alerts.Routing{})
	e := s.e
	e.unknownItem("inv-000", withDest("crm"))
	e.advance(2 * time.Hour)
	e.sweep(100)
	e.dispatch(s.d)
	msg := s.Posts()[0]
	if _, err := e.ledger.Reconcile(e.ctx, items.ReconcileParams{Tenant: "default", Key: "inv-000", Finding: items.FindingFound,
		ExternalID: "INV-1000", Evidence: "found by the workflow's lookup"}); err != nil {
		t.Fatal(err)
	}
	s.send(t, s.click("U0ALICE", msg, alerts.ActionResolveCommitted, buttonOf(t, msg, "inv-000", alerts.ActionResolveCommitted)))
	if n := len(s.Views()); n != 0 {
		t.Fatalf("%d dialogs opened for a settled item", n)
	}
	if told := s.Ephemerals(); len(told) != 1 || !strings.Contains(told[0], "`inv-000` no longer needs a person: it was settled without one, and is succeeded now.") {
		t.Fatalf("the person was told %q", told)
	}
	ups := s.Updates()
	if len(ups) != 1 || len(ups[0].buttons()) != 0 {
		t.Fatalf("updates %+v, want the message updated without buttons", ups)
	}
}
