package alerts_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/alerts"
	"github.com/replaysafe/companion/items"
)

// stalling is an outbox that runs stall once, just before the first post of a group is marked (Slack) or
// its claim checked (a notifier that cannot find its posts): a dispatcher that stalls between its claim and
// its post (a pause, renewals failing in a partition), at the one point where it decides to post.
type stalling struct {
	testStore
	once  sync.Once
	stall func()
}

func (s *stalling) MarkAlertPost(ctx context.Context, claim string, at time.Time) (int, error) {
	if !at.IsZero() {
		s.once.Do(s.stall)
	}
	return s.testStore.MarkAlertPost(ctx, claim, at)
}

func (s *stalling) RenewAlertClaim(ctx context.Context, claim string, until time.Time) (int, error) {
	s.once.Do(s.stall)
	return s.testStore.RenewAlertClaim(ctx, claim, until)
}

// plainNotifier records its posts; it cannot find them again (no alerts.PostFinder).
type plainNotifier struct {
	mu    sync.Mutex
	posts []alerts.Message
}

func (n *plainNotifier) Post(_ context.Context, _ string, m alerts.Message) (alerts.MessageRef, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.posts = append(n.posts, m)
	return alerts.MessageRef{Channel: "D-plain", TS: time.Now().Format("150405.000000000")}, nil
}

func (n *plainNotifier) Update(context.Context, alerts.MessageRef, alerts.Message) error { return nil }

func (n *plainNotifier) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.posts)
}

// TestDispatcherThatLostItsClaimDoesNotPost (API.md, "Alerts are posted once"): a dispatcher claims a
// group and stalls before its post, past the claim's end and the clock margin; a second dispatcher (another
// replica) claims the group and posts it. When the first goes on, its claim holds none of the alerts: it
// posts nothing, so the group has one message. On every store, with Slack (the post is marked first) and
// with a notifier that cannot find its posts (the claim is checked first).
func TestDispatcherThatLostItsClaimDoesNotPost(t *testing.T) {
	for _, st := range stores {
		for _, finder := range []bool{true, false} {
			name := st.name + "/plain"
			if finder {
				name = st.name + "/slack"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				e := newEnvOn(t, st.open, items.Config{Destinations: map[string]items.Destination{"billing": {Owner: "U0BILLING"}}})
				e.needsPerson("stalled", "exec-3", 3)
				var first, second alerts.Notifier
				var posts func() int
				if finder {
					slack := newFakeSlack(t)
					first, second = slack.notifier(t), slack.notifier(t)
					posts = func() int { return len(slack.Posts()) }
				} else {
					n := &plainNotifier{}
					first, second, posts = n, n, n.count
				}
				const claimTimeout = time.Minute
				other := e.dispatcherWith(e.clock.Now, claimTimeout, second)
				var otherCounts alerts.DispatchCounts
				outbox := &stalling{testStore: e.store, stall: func() {
					margin := e.ledger.ClockMargin()
					e.advance(claimTimeout + margin + time.Second)
					otherCounts = e.dispatch(other)
				}}
				stalled := e.dispatcherOver(outbox, claimTimeout, first)
				c := e.dispatch(stalled)
				if otherCounts.Messages != 1 || otherCounts.Alerted != 3 {
					t.Fatalf("the second dispatcher: %+v; want the group's 3 alerts in one message", otherCounts)
				}
				if n := posts(); n != 1 || c.Messages != 0 || c.Alerted != 0 {
					t.Fatalf("%d messages posted; the stalled dispatcher %+v; want one message, none from the stalled one", n, c)
				}
				for i := range 3 {
					as, err := e.store.ItemAlerts(e.ctx, "default", keyOf("stalled", i))
					if err != nil || len(as) != 1 || as[0].Status != items.AlertSent || as[0].PostAttemptAt != nil {
						t.Errorf("%s alerts %+v (%v), want one sent, with no post in doubt", keyOf("stalled", i), as, err)
					}
				}
			})
		}
	}
}

// TestAlertClaimRunsOutPastTheMargin: another dispatcher's claim counts as ended only the ledger's clock
// margin after its end (max_clock_skew, 5 s here, on a store several replicas share; none on SQLite, which
// one process holds). A dispatcher stalls between its claim and its post until 1 s past the claim's end,
// and a second one dispatches then: on MongoDB it leaves the group alone (within the margin), and the
// first posts it; on SQLite it takes the group and posts it, and the first posts nothing. One message
// either way.
func TestAlertClaimRunsOutPastTheMargin(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			e := newEnvOn(t, st.open, items.Config{MaxClockSkew: 5 * time.Second, Destinations: map[string]items.Destination{"billing": {Owner: "U0BILLING"}}})
			e.needsPerson("held", "exec-4", 2)
			const claimTimeout = time.Minute
			slack := newFakeSlack(t)
			other := e.dispatcherWith(e.clock.Now, claimTimeout, slack.notifier(t))
			var otherCounts alerts.DispatchCounts
			outbox := &stalling{testStore: e.store, stall: func() {
				e.advance(claimTimeout + time.Second)
				otherCounts = e.dispatch(other)
			}}
			c := e.dispatch(e.dispatcherOver(outbox, claimTimeout, slack.notifier(t)))
			margin := e.ledger.ClockMargin()
			if want := time.Duration(0); st.name == "mongodb" {
				want = 5 * time.Second
				if margin != want {
					t.Fatalf("margin %s on %s, want %s", margin, st.name, want)
				}
			}
			taken := margin < time.Second
			if n := len(slack.Posts()); n != 1 || (otherCounts.Messages == 1) != taken || (c.Messages == 1) == taken {
				t.Fatalf("margin %s: %d messages; the stalled dispatcher %+v, the other %+v", margin, n, c, otherCounts)
			}
		})
	}
}

// dispatcherOver is dispatcherWith on another outbox than the env's store.
func (e *env) dispatcherOver(outbox alerts.Outbox, claimTimeout time.Duration, n alerts.Notifier) *alerts.Dispatcher {
	e.t.Helper()
	d, err := alerts.NewDispatcher(alerts.DispatcherConfig{Ledger: e.ledger, Outbox: outbox, Notifier: n, ClaimTimeout: claimTimeout, Logger: e.logger})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(d.Wait)
	return d
}
