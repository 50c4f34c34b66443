package alerts_test

import (
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/alerts"
	"github.com/replaysafe/companion/items"
)

// findEnv is a store of one kind with n items of prefix needing a person, owned by owner, and a fake Slack
// whose messages carry the ledger's time.
func findEnv(t *testing.T, open openStore, owner, prefix string, n int) (*env, *fakeSlack) {
	t.Helper()
	e := newEnvOn(t, open, items.Config{Destinations: map[string]items.Destination{"billing": {Owner: owner}}})
	e.needsPerson(prefix, "exec-"+prefix, n)
	slack := newFakeSlack(t)
	slack.now = e.clock.Now
	return e, slack
}

// TestLostAnswerIsFoundNotPostedTwice: Slack takes the post but its answer is lost (the connection is
// cut). The next dispatch reads the conversation's history, finds the message by its metadata and updates
// it: one message, and the alerts record it. (On the earlier main the next dispatch posted a second one.)
func TestLostAnswerIsFoundNotPostedTwice(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		for _, owner := range []string{"U0BILLING", "C0BILLING"} {
			t.Run(st.name+"/"+owner, func(t *testing.T) {
				t.Parallel()
				e, slack := findEnv(t, st.open, owner, "lost", 2)
				slack.loseAnswers = 1
				d := e.stopDispatcher(e.store, slack.notifier(t), 0)
				if c := e.dispatch(d); c.Failed != 1 || c.Messages != 0 || len(slack.Posts()) != 1 {
					t.Fatalf("first dispatch %+v, %d posts; want the post landed and counted failed (its answer lost)", c, len(slack.Posts()))
				}
				e.advance(30 * time.Second)
				c := e.dispatch(d)
				posts, updates := slack.Posts(), slack.Updates()
				if c.Messages != 1 || c.Alerted != 2 || len(posts) != 1 || len(updates) != 1 || updates[0].TS != posts[0].TS {
					t.Fatalf("second dispatch %+v, posts %+v, updates %+v; want the landed message found and updated, none posted", c, posts, updates)
				}
				if slack.Histories() != 1 {
					t.Errorf("%d history reads, want 1", slack.Histories())
				}
				e.checkSentIn("lost", 2, posts[0].TS)
				if !strings.Contains(e.logs.String(), "alert message found in Slack") {
					t.Errorf("the found message is not in the log:\n%s", e.logs)
				}
				// Recorded: later dispatches neither read nor post.
				e.advance(time.Hour)
				if c := e.dispatch(d); c.Changed() || len(slack.Posts()) != 1 || slack.Histories() != 1 {
					t.Fatalf("a later dispatch %+v, %d posts, %d history reads; want nothing", c, len(slack.Posts()), slack.Histories())
				}
			})
		}
	}
}

// TestHistoryReadFailsNoPost: the post's answer is lost, and the next history read fails (Slack answers
// missing_scope). Nothing is posted then (the message may be there); the claim is given back, so the
// dispatch after reads again, finds the message and updates it: one message.
func TestHistoryReadFailsNoPost(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			e, slack := findEnv(t, st.open, "U0BILLING", "hist", 3)
			slack.loseAnswers, slack.failHistory = 1, 1
			d := e.stopDispatcher(e.store, slack.notifier(t), 0)
			e.dispatch(d)
			c := e.dispatch(d)
			if c.Failed != 1 || c.Messages != 0 || len(slack.Posts()) != 1 || len(slack.Updates()) != 0 || slack.Histories() != 1 {
				t.Fatalf("dispatch with the history read failing: %+v, %d posts, %d updates, %d reads; want no post, no update, one failed read",
					c, len(slack.Posts()), len(slack.Updates()), slack.Histories())
			}
			if !strings.Contains(e.logs.String(), "Slack's history could not be read; will retry") {
				t.Errorf("the failed read is not in the log:\n%s", e.logs)
			}
			c = e.dispatch(d) // at once: the claim was given back
			posts := slack.Posts()
			if c.Messages != 1 || c.Alerted != 3 || len(posts) != 1 || len(slack.Updates()) != 1 {
				t.Fatalf("the next dispatch %+v, %d posts, %d updates; want the message found and updated", c, len(posts), len(slack.Updates()))
			}
			e.checkSentIn("hist", 3, posts[0].TS)
		})
	}
}

// TestHistoryUnreadableForTooLongPostsAnyway: the history cannot be read at all (the app lacks the scope).
// The group waits FindGiveUp for a read that works, then is posted all the same: a possible duplicate
// rather than a lost alert.
func TestHistoryUnreadableForTooLongPostsAnyway(t *testing.T) {
	t.Parallel()
	e, slack := findEnv(t, openSQLite, "U0BILLING", "never", 1)
	slack.loseAnswers, slack.failHistory = 1, 1000
	d := e.stopDispatcher(e.store, slack.notifier(t), 0)
	e.dispatch(d)
	e.advance(alerts.DefaultFindGiveUp - time.Minute)
	if c := e.dispatch(d); c.Messages != 0 || len(slack.Posts()) != 1 {
		t.Fatalf("within the give-up: %+v, %d posts; want none posted", c, len(slack.Posts()))
	}
	e.advance(2 * time.Minute)
	c := e.dispatch(d)
	posts := slack.Posts()
	if c.Messages != 1 || len(posts) != 2 {
		t.Fatalf("past the give-up: %+v, %d posts; want the group posted again", c, len(posts))
	}
	e.checkSentIn("never", 1, posts[1].TS)
	if !strings.Contains(e.logs.String(), "alert posted although an earlier post may have landed") {
		t.Errorf("the post past the give-up is not in the log:\n%s", e.logs)
	}
}

// TestNormalPostPaysNoHistoryRead: a post answered at once reads no history and carries the group's
// metadata (no item key, payload or secret). A post Slack refused (ok:false: nothing landed) is retried
// without a history read either. A post whose connection was cut before Slack took it is retried after
// one history read that proves nothing landed: one message.
func TestNormalPostPaysNoHistoryRead(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			e, slack := findEnv(t, st.open, "U0BILLING", "norm", 2)
			d := e.stopDispatcher(e.store, slack.notifier(t), 0)
			if c := e.dispatch(d); c.Messages != 1 || slack.Histories() != 0 || slack.opens != 0 {
				t.Fatalf("dispatch %+v, %d history reads, %d opens; want one message and no read", c, slack.Histories(), slack.opens)
			}
			md := slack.Posts()[0].Metadata
			p, _ := md["event_payload"].(map[string]any)
			if md["event_type"] != alerts.MetadataEventType || p["tenant"] != "default" || p["owner"] != "U0BILLING" || p["batch_id"] != "exec-norm" ||
				p["escalation"] != false || p["attempt"] == "" || len(p) != 5 {
				t.Errorf("metadata %v, want the group and the attempt only", md)
			}

			e.needsPerson("again", "exec-again", 1)
			slack.failPosts = 1
			if c := e.dispatch(d); c.Failed != 1 || slack.Histories() != 0 {
				t.Fatalf("refused post: %+v, %d reads", c, slack.Histories())
			}
			c := e.dispatch(d)
			if posts := slack.Posts(); c.Messages != 1 || len(posts) != 2 || slack.Histories() != 0 || len(slack.Updates()) != 0 {
				t.Fatalf("after the refused post: %+v, %d posts, %d reads, %d updates; want it posted, no read",
					c, len(posts), slack.Histories(), len(slack.Updates()))
			}

			e.needsPerson("cut", "exec-cut", 1)
			slack.dropPosts = 1
			if c := e.dispatch(d); c.Failed != 1 || len(slack.Posts()) != 2 {
				t.Fatalf("cut post: %+v, %d posts", c, len(slack.Posts()))
			}
			c = e.dispatch(d)
			if posts := slack.Posts(); c.Messages != 1 || len(posts) != 3 || slack.Histories() != 1 || len(slack.Updates()) != 0 {
				t.Fatalf("after the cut post: %+v, %d posts, %d reads, %d updates; want one read proving nothing landed, then one post",
					c, len(posts), slack.Histories(), len(slack.Updates()))
			}
			e.checkSentIn("cut", 1, slack.Posts()[2].TS)
		})
	}
}

// TestLostEscalationAnswerIsFound: the escalation's post lands but its answer is lost. The next dispatch
// finds the escalation message (not the first message of the same group, whose metadata says it is no
// escalation) and updates it: one escalation message, the alerts escalated in it.
func TestLostEscalationAnswerIsFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, items.Config{Destinations: map[string]items.Destination{
		"billing": {Owner: "U0OWNER", EscalateTo: "U0BOSS", EscalateAfter: time.Hour}}})
	e.needsPerson("esc", "exec-esc", 2)
	slack := newFakeSlack(t)
	slack.now = e.clock.Now
	d := e.stopDispatcher(e.store, slack.notifier(t), 0)
	if c := e.dispatch(d); c.Messages != 1 {
		t.Fatalf("first dispatch %+v, want the first message", c)
	}
	e.advance(time.Hour)
	slack.loseAnswers = 1
	if c := e.dispatch(d); c.Failed != 1 || len(slack.Posts()) != 2 {
		t.Fatalf("escalation dispatch %+v, %d posts; want the escalation landed, its answer lost", c, len(slack.Posts()))
	}
	c := e.dispatch(d)
	posts := slack.Posts()
	if c.Messages != 1 || c.Escalated != 2 || len(posts) != 2 || posts[1].Channel != "D0BOSS" {
		t.Fatalf("next dispatch %+v, posts %+v; want the escalation found, none posted", c, posts)
	}
	var toBoss int
	for _, u := range slack.Updates() {
		if u.Channel == "D0BOSS" {
			toBoss++
			if u.TS != posts[1].TS {
				t.Errorf("an update of %s/%s, want only the escalation %s", u.Channel, u.TS, posts[1].TS)
			}
		}
	}
	if toBoss != 1 {
		t.Errorf("%d updates of the escalation message, want 1", toBoss)
	}
	for i := range 2 {
		as, err := e.store.ItemAlerts(e.ctx, "default", keyOf("esc", i))
		if err != nil || len(as) != 1 || as[0].Status != items.AlertEscalated || as[0].EscalationTS != posts[1].TS || as[0].TS != posts[0].TS {
			t.Errorf("%s alerts %+v (%v), want escalated in %s, first sent in %s", keyOf("esc", i), as, err, posts[1].TS, posts[0].TS)
		}
	}
}
