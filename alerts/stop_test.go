package alerts_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/alerts"
	"github.com/replaysafe/companion/internal/stopgrace/stopgracetest"
	"github.com/replaysafe/companion/items"
)

// pausingOutbox is a real store's alert outbox that stands still after the first claim that took alerts,
// until the pause's Resume is closed: the dispatcher holds the group's claim and has not posted yet, and
// the test stops it there. Every call goes to the real store; only the moment is the test's.
type pausingOutbox struct {
	alerts.Outbox
	*stopgracetest.Pause
}

func newPausingOutbox(o alerts.Outbox) *pausingOutbox {
	return &pausingOutbox{Outbox: o, Pause: stopgracetest.NewPause()}
}

func (p *pausingOutbox) ClaimAlerts(ctx context.Context, c items.AlertClaim) ([]items.Alert, error) {
	as, err := p.Outbox.ClaimAlerts(ctx, c)
	if err == nil && len(as) > 0 {
		p.Hold()
	}
	return as, err
}

// stopDispatcher is a dispatcher over outbox posting to Slack, with the given grace at a stop (0: the
// default).
func (e *env) stopDispatcher(outbox alerts.Outbox, n alerts.Notifier, grace time.Duration) *alerts.Dispatcher {
	e.t.Helper()
	d, err := alerts.NewDispatcher(alerts.DispatcherConfig{Ledger: e.ledger, Outbox: outbox, Notifier: n, Logger: e.logger, StopGrace: grace})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(d.Wait)
	return d
}

// running starts alerts.Run as serve does, on a schedule that never comes during the test (the run at
// start is the one that matters); stop cancels its context, as a graceful stop does, calls then (if not
// nil), and returns when Run has returned.
func (e *env) running(d *alerts.Dispatcher) (stop func(then func())) {
	e.t.Helper()
	return stopgracetest.Running(e.t, e.ctx, func(ctx context.Context) error {
		return alerts.Run(ctx, "@every 1h", e.sweeper(e.ledger, e.store, 0), d)
	})
}

var wait = stopgracetest.Wait

// checkSentIn checks that each of the n items of prefix has one alert, sent in the message ts.
func (e *env) checkSentIn(prefix string, n int, ts string) {
	e.t.Helper()
	for i := range n {
		as, err := e.store.ItemAlerts(e.ctx, "default", keyOf(prefix, i))
		if err != nil || len(as) != 1 || as[0].Status != items.AlertSent || as[0].TS != ts {
			e.t.Errorf("%s alerts %+v (%v), want one sent in message %s", keyOf(prefix, i), as, err, ts)
		}
	}
}

// TestStopGivesBackAClaimNotYetPosted: serve stops while its dispatcher holds the claim on a group it has
// not posted. The claim is given back at the stop, so a second dispatcher (another replica, or the
// restarted process) sends the group at once, with the ledger's clock nowhere near the claim's end: one
// message.
func TestStopGivesBackAClaimNotYetPosted(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			e := newEnvOn(t, st.open, items.Config{Destinations: map[string]items.Destination{"billing": {Owner: "U0BILLING"}}})
			e.needsPerson("stop", "exec-3", 3)
			slack := newFakeSlack(t)
			outbox := newPausingOutbox(e.store)
			stop := e.running(e.stopDispatcher(outbox, slack.notifier(t), 0))
			wait(t, outbox.Held, "claim")
			stop(func() { close(outbox.Resume) }) // the dispatcher goes on once its context is cancelled
			if posts := slack.Posts(); len(posts) != 0 {
				t.Fatalf("the stopped dispatcher posted %d messages, want none: %+v", len(posts), posts)
			}
			if !strings.Contains(e.logs.String(), "alert group given back unsent") {
				t.Errorf("the stop's give-back is not in the log:\n%s", e.logs)
			}

			c := e.dispatch(e.stopDispatcher(e.store, slack.notifier(t), 0))
			posts := slack.Posts()
			if c.Messages != 1 || c.Alerted != 3 || len(posts) != 1 || len(slack.Updates()) != 0 {
				t.Fatalf("the second dispatcher at once: %+v, posts %+v, %d updates; want the 3 alerts in one new message",
					c, posts, len(slack.Updates()))
			}
			e.checkSentIn("stop", 3, posts[0].TS)
		})
	}
}

// TestStopDuringASlowPostPostsOnce: serve stops while Slack is slow to answer the group's post. The post
// is not cut off (it has the stop's grace): it lands, where it landed is recorded, and no other
// dispatcher posts the group again, then or after the claim would have run out: one message.
func TestStopDuringASlowPostPostsOnce(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			e := newEnvOn(t, st.open, items.Config{Destinations: map[string]items.Destination{"billing": {Owner: "U0BILLING"}}})
			e.needsPerson("slow", "exec-4", 3)
			slack := newFakeSlack(t)
			posting := make(chan struct{})
			var once sync.Once
			slack.onPost = func() { once.Do(func() { close(posting) }) }
			slack.delay = 500 * time.Millisecond
			stop := e.running(e.stopDispatcher(e.store, slack.notifier(t), 0))
			wait(t, posting, "post")
			stop(nil) // while Slack has not answered
			slack.Settle()
			posts := slack.Posts()
			if len(posts) != 1 {
				t.Fatalf("%d messages posted by the stopped dispatcher, want 1: %+v", len(posts), posts)
			}
			e.checkSentIn("slow", 3, posts[0].TS)

			second := e.stopDispatcher(e.store, slack.notifier(t), 0)
			first := e.dispatch(second)
			e.advance(alerts.DefaultClaimTimeout + time.Minute)
			later := e.dispatch(second)
			if first.Messages+later.Messages != 0 || len(slack.Posts()) != 1 || len(slack.Updates()) != 0 {
				t.Fatalf("the second dispatcher: %+v at once, %+v past the claim's end; %d posts, %d updates; want the one message only",
					first, later, len(slack.Posts()), len(slack.Updates()))
			}
		})
	}
}

// TestStopCutsAPostPastTheGraceAndKeepsItsClaim: Slack answers the post later than the stop's grace, so
// the post is cut off. It may have landed (here it does), so the group keeps its claim: a second
// dispatcher at once posts nothing. Once the claim runs out, the next dispatcher finds the message in the
// conversation's history (the post was marked on the alerts before it began) and updates it: one message.
// (On the earlier main it posted a second one.)
func TestStopCutsAPostPastTheGraceAndKeepsItsClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t, items.Config{Destinations: map[string]items.Destination{"billing": {Owner: "U0BILLING"}}})
	e.needsPerson("cut", "exec-5", 2)
	slack := newFakeSlack(t)
	slack.now = e.clock.Now
	posting := make(chan struct{})
	var once sync.Once
	slack.onPost = func() { once.Do(func() { close(posting) }) }
	slack.delay = 2 * time.Second
	stop := e.running(e.stopDispatcher(e.store, slack.notifier(t), 200*time.Millisecond))
	wait(t, posting, "post")
	start := time.Now()
	stop(nil)
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("Run returned %v after its stop, want about the grace (200ms), before Slack answered", took)
	}
	if !strings.Contains(e.logs.String(), "alert post cut off at stop; it may have landed") {
		t.Errorf("the cut post is not in the log:\n%s", e.logs)
	}
	slack.Settle()
	c := e.dispatch(e.stopDispatcher(e.store, slack.notifier(t), 0))
	if posts := slack.Posts(); c.Messages != 0 || len(posts) != 1 {
		t.Fatalf("the second dispatcher at once: %+v, posts %+v; want nothing posted (the claim is kept)", c, posts)
	}
	e.advance(alerts.DefaultClaimTimeout + time.Second)
	c = e.dispatch(e.stopDispatcher(e.store, slack.notifier(t), 0))
	posts := slack.Posts()
	if c.Messages != 1 || c.Alerted != 2 || len(posts) != 1 || len(slack.Updates()) != 1 || slack.Updates()[0].TS != posts[0].TS {
		t.Fatalf("once the claim ran out: %+v, %d posts, updates %+v; want the cut post found and updated", c, len(posts), slack.Updates())
	}
	e.checkSentIn("cut", 2, posts[0].TS)
}

// TestStopCutsAnUpdateAndGivesItsClaimBack: the group's message went out before (a dispatcher that lost
// its claim while posting noted it on the alerts), so its sender updates that message; Slack answers the
// update later than the stop's grace. A repeated update changes nothing, so the claim is given back: a
// second dispatcher at once updates the same message, and no message is posted.
func TestStopCutsAnUpdateAndGivesItsClaimBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, items.Config{Destinations: map[string]items.Destination{"billing": {Owner: "U0BILLING"}}})
	e.needsPerson("upd", "exec-6", 2)
	slack := newFakeSlack(t)
	// A first dispatch queues the alerts, and its post fails; the earlier message is then noted on them
	// as a dispatcher whose claim ran out while posting leaves it.
	slack.failPosts = 1
	if c := e.dispatch(e.stopDispatcher(e.store, slack.notifier(t), 0)); c.Queued != 2 || c.Failed != 1 {
		t.Fatalf("first dispatch %+v, want 2 queued and a failed post", c)
	}
	var queued []items.Alert
	for i := range 2 {
		as, err := e.store.ItemAlerts(e.ctx, "default", keyOf("upd", i))
		if err != nil || len(as) != 1 || as[0].Status != items.AlertPending {
			t.Fatalf("%s alerts %+v (%v), want one pending", keyOf("upd", i), as, err)
		}
		queued = append(queued, as[0])
	}
	if n, err := e.store.NoteAlertMessage(e.ctx, queued, items.AlertDelivery{Channel: "DBILLING", TS: "1764439100.000001"}); err != nil || n != 2 {
		t.Fatalf("note: %d, %v", n, err)
	}
	updating := make(chan struct{})
	var once sync.Once
	slack.onUpdate = func() { once.Do(func() { close(updating) }) }
	slack.updateDelay = 2 * time.Second
	stop := e.running(e.stopDispatcher(e.store, slack.notifier(t), 200*time.Millisecond))
	wait(t, updating, "update")
	stop(nil)
	slack.mu.Lock()
	slack.updateDelay = 0
	slack.mu.Unlock()

	c := e.dispatch(e.stopDispatcher(e.store, slack.notifier(t), 0))
	slack.Settle()
	if c.Messages != 1 || c.Alerted != 2 || len(slack.Posts()) != 0 {
		t.Fatalf("the second dispatcher at once: %+v, %d posts; want the 2 alerts sent by updating the message", c, len(slack.Posts()))
	}
	for _, u := range slack.Updates() {
		if u.TS != "1764439100.000001" {
			t.Errorf("an update of message %s, want only 1764439100.000001", u.TS)
		}
	}
	e.checkSentIn("upd", 2, "1764439100.000001")
}
