package alerts_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaysafe/companion/alerts"
	"github.com/replaysafe/companion/items"
)

const signingSecret = "8f742231b10e8888abcd99yyyzzz85a5"

func (e *env) dispatcher(l *items.Ledger, n alerts.Notifier, r alerts.Routing) *alerts.Dispatcher {
	e.t.Helper()
	d, err := alerts.NewDispatcher(alerts.DispatcherConfig{Ledger: l, Outbox: e.store, Notifier: n, Routing: r, Logger: e.logger})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(d.Wait)
	return d
}

func (e *env) dispatch(d *alerts.Dispatcher) alerts.DispatchCounts {
	e.t.Helper()
	c, err := d.RunOnce(e.ctx)
	if err != nil {
		e.t.Fatalf("dispatch: %v", err)
	}
	return c
}

// needsPerson makes n items of a batch whose outcome is unknown at a destination that can neither
// dedupe nor be searched: each needs a person at once.
func (e *env) needsPerson(prefix, batch string, n int, opts ...claimOpt) {
	e.t.Helper()
	for i := range n {
		o := append([]claimOpt{withDedupe(items.DedupeNone), withRef("QT-" + keyOf(prefix, i))}, opts...)
		if batch != "" {
			o = append(o, inBatch(batch, i))
		}
		it := e.unknownItem(keyOf(prefix, i), o...)
		if !it.NeedsPerson {
			e.t.Fatalf("%s does not need a person", it.Key)
		}
	}
}

func TestDispatchGroupsABatchIntoOneMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, items.Config{Destinations: map[string]items.Destination{
		"billing": {Owner: "U0BILLING", CheckHint: "search the billing tool for the quote reference"}}})
	slack := newFakeSlack(t)
	d := e.dispatcher(e.ledger, slack.notifier(t), alerts.Routing{})
	e.needsPerson("inv", "exec-1234:Send reminders", 40)
	e.advance(5 * time.Minute)

	c := e.dispatch(d)
	if c.Queued != 40 || c.Messages != 1 || c.Alerted != 40 {
		t.Fatalf("counts %+v, want 40 queued, 1 message, 40 alerted", c)
	}
	posts := slack.Posts()
	if len(posts) != 1 {
		t.Fatalf("%d messages for one batch of 40, want 1", len(posts))
	}
	m := posts[0]
	if m.Channel != "D0BILLING" {
		t.Fatalf("message went to %s, want the owner's direct messages (D0BILLING)", m.Channel)
	}
	if !strings.Contains(m.Text, "40 item(s) need a person in batch exec-1234:Send reminders") {
		t.Fatalf("text %q", m.Text)
	}
	text := m.texts()
	for _, want := range []string{"`inv-000`", "ref *QT-inv-000*", "billing", "attempts 1", "last error timeout",
		"waiting 5m", "check: search the billing tool for the quote reference",
		"and 30 more: `companion items list --needs-person --batch 'exec-1234:Send reminders' --owner U0BILLING`",
		"GET /v1/items?batch_id=exec-1234%3ASend+reminders&amp;needs_person=true&amp;owner=U0BILLING"} {
		if !strings.Contains(text, want) {
			t.Errorf("message lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "inv-010") {
		t.Errorf("message lists the 11th item; it lists 10")
	}
	buttons := m.buttons()
	if len(buttons) != 30 {
		t.Fatalf("%d buttons, want 3 for each of 10 listed items", len(buttons))
	}
	for i, b := range buttons[:3] {
		want := []string{alerts.ActionResolveCommitted, alerts.ActionResolveNotCommitted, alerts.ActionEscalate}[i]
		var v map[string]string
		if err := json.Unmarshal([]byte(b[1]), &v); err != nil {
			t.Fatalf("button value %q is not JSON: %v", b[1], err)
		}
		if b[0] != want || v["tenant"] != "default" || v["key"] != "inv-000" || len(v) != 2 {
			t.Fatalf("button %d is %s %v, want %s {tenant: default, key: inv-000}", i, b[0], v, want)
		}
	}
	it := e.get("inv-039")
	if it.AlertStatus != items.AlertSent {
		t.Fatalf("alert status %q after delivery, want sent", it.AlertStatus)
	}
	if last := it.History[len(it.History)-1]; last.Kind != items.EventAlerted || last.Note != "to U0BILLING" {
		t.Fatalf("history ends with %+v, want the alert to U0BILLING", last)
	}

	// Repeated dispatches send nothing more: one alert per item and cause.
	for range 3 {
		if c := e.dispatch(d); c.Changed() {
			t.Fatalf("repeated dispatch did %+v", c)
		}
	}
	if n := len(slack.Posts()); n != 1 {
		t.Fatalf("%d messages after repeated dispatches, want 1", n)
	}
}

func TestDispatchRoutesByWorkflowDestinationAndRequestOwner(t *testing.T) {
	t.Parallel()
	e := newEnv(t, items.Config{Destinations: map[string]items.Destination{"crm": {Owner: "C0CRM"}}})
	slack := newFakeSlack(t)
	d := e.dispatcher(e.ledger, slack.notifier(t), alerts.Routing{
		DefaultOwner: "U0DEFAULT",
		Routes: []alerts.Route{
			{Workflow: "billing-*", Owner: "U0BILLING"},
			{Workflow: "*", Destination: "mail", Owner: "C0MAIL"},
		},
	})
	cases := []struct {
		key  string
		opts []claimOpt
		want string
	}{
		{"a", []claimOpt{withWorkflow("billing-reminders"), withDest("billing")}, "U0BILLING"},
		{"b", []claimOpt{withWorkflow("billing-reminders"), withDest("crm")}, "U0BILLING"}, // the route comes before the destination
		{"c", []claimOpt{withWorkflow("onboarding"), withDest("crm")}, "C0CRM"},
		{"d", []claimOpt{withWorkflow("onboarding"), withDest("mail")}, "C0MAIL"},
		{"e", []claimOpt{withWorkflow("onboarding"), withDest("billing")}, "U0DEFAULT"},
		{"f", []claimOpt{withWorkflow("billing-reminders"), withDest("billing"), withOwner("U0OVERRIDE")}, "U0OVERRIDE"},
	}
	for _, c := range cases {
		e.unknownItem(c.key, append(c.opts, withDedupe(items.DedupeNone))...)
	}
	e.dispatch(d)
	got := map[string]string{}
	for _, p := range slack.Posts() {
		for _, b := range p.buttons() {
			var v alerts.ButtonValue
			_ = json.Unmarshal([]byte(b[1]), &v)
			got[v.Key] = p.Channel
		}
	}
	for _, c := range cases {
		want := c.want
		if strings.HasPrefix(want, "U") {
			want = "D" + want[1:]
		}
		if got[c.key] != want {
			t.Errorf("item %s went to %q, want %s", c.key, got[c.key], want)
		}
	}
	if n := len(slack.Posts()); n != 5 {
		t.Errorf("%d messages, want one per owner (5)", n)
	}
}

func TestDispatchersInTwoReplicasNeverSendAnAlertTwice(t *testing.T) {
	t.Parallel()
	e := newEnv(t, items.Config{Destinations: map[string]items.Destination{"billing": {Owner: "U0BILLING"}}})
	slack := newFakeSlack(t)
	slack.delay = 20 * time.Millisecond // widen the window between claim and delivery
	for b := range 4 {
		e.needsPerson(keyOf("b", b), keyOf("batch", b), 5)
	}
	var wg sync.WaitGroup
	counts := make([]alerts.DispatchCounts, 2)
	for r := range counts {
		d := e.dispatcher(e.newLedger(e.cfg), slack.notifier(t), alerts.Routing{})
		wg.Go(func() {
			for range 3 {
				c, err := d.RunOnce(e.ctx)
				if err != nil {
					t.Error(err)
				}
				counts[r].Messages += c.Messages
				counts[r].Alerted += c.Alerted
			}
		})
	}
	wg.Wait()
	posts := slack.Posts()
	perBatch := map[string]int{}
	for _, p := range posts {
		perBatch[p.Text]++
	}
	if len(posts) != 4 || counts[0].Alerted+counts[1].Alerted != 20 {
		t.Fatalf("two dispatchers sent %d messages (%v) carrying %d alerts, want 4 messages and 20 alerts", len(posts), perBatch,
			counts[0].Alerted+counts[1].Alerted)
	}
}

func TestDispatchEscalatesAfterEscalateAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, items.Config{Destinations: map[string]items.Destination{
		"billing": {Owner: "U0OWNER", EscalateTo: "U0BOSS", EscalateAfter: time.Hour}}})
	slack := newFakeSlack(t)
	d := e.dispatcher(e.ledger, slack.notifier(t), alerts.Routing{})
	e.needsPerson("inv", "exec-1", 2)
	e.dispatch(d)
	if n := len(slack.Posts()); n != 1 {
		t.Fatalf("%d messages, want 1", n)
	}

	e.advance(59 * time.Minute)
	if c := e.dispatch(d); c.Escalated != 0 {
		t.Fatalf("escalated %d before escalate_after", c.Escalated)
	}
	// Somebody resolves one item; the other waits on.
	if _, _, err := d.Resolve(e.ctx, items.ResolveParams{Tenant: "default", Key: "inv-000", Outcome: items.ResolveNotCommitted,
		Evidence: "no invoice for QT-inv-000 in the billing tool", By: "ops"}); err != nil {
		t.Fatal(err)
	}
	d.Wait()
	e.advance(time.Minute)
	c := e.dispatch(d)
	if c.Escalated != 1 || c.Messages != 1 {
		t.Fatalf("counts %+v after escalate_after, want one escalated alert in one message", c)
	}
	posts := slack.Posts()
	esc := posts[len(posts)-1]
	if esc.Channel != "D0BOSS" || !strings.HasPrefix(esc.Text, "Escalated: 1 item(s) still need a person") {
		t.Fatalf("escalation went to %s with %q", esc.Channel, esc.Text)
	}
	if b := esc.buttons(); len(b) != 3 || !strings.Contains(b[0][1], `"inv-001"`) {
		t.Fatalf("escalation buttons %v, want the three buttons of inv-001", b)
	}
	if st := e.get("inv-001").AlertStatus; st != items.AlertEscalated {
		t.Fatalf("alert status %q, want escalated", st)
	}
	// The first message now shows where inv-001 went and who settled inv-000.
	ups := slack.Updates()
	if len(ups) == 0 {
		t.Fatal("the first message was not updated")
	}
	last := ups[len(ups)-1]
	text := last.texts()
	if last.TS != posts[0].TS || !strings.Contains(text, "Escalated to <@U0BOSS>") || !strings.Contains(text, "Resolved as *not committed* by ops") {
		t.Fatalf("update of %s:\n%s", last.TS, text)
	}
	if c := e.dispatch(d); c.Changed() {
		t.Fatalf("dispatch after the escalation did %+v", c)
	}
}

func TestDispatchRetriesAFailedDelivery(t *testing.T) {
	t.Parallel()
	e := newEnv(t, items.Config{Destinations: map[string]items.Destination{"billing": {Owner: "U0OWNER"}}})
	slack := newFakeSlack(t)
	slack.failPosts = 1
	d := e.dispatcher(e.ledger, slack.notifier(t), alerts.Routing{})
	e.needsPerson("inv", "", 3)
	if c := e.dispatch(d); c.Failed != 1 || c.Alerted != 0 {
		t.Fatalf("counts %+v, want one failed delivery", c)
	}
	if st := e.get("inv-000").AlertStatus; st != items.AlertPending {
		t.Fatalf("alert status %q after a failed delivery, want pending", st)
	}
	if c := e.dispatch(d); c.Alerted != 3 || c.Messages != 1 {
		t.Fatalf("counts %+v on the retry, want 3 alerts in 1 message", c)
	}
}

func TestDispatchSkipsItemsSettledBeforeDelivery(t *testing.T) {
	t.Parallel()
	e := newEnv(t, items.Config{Destinations: map[string]items.Destination{"billing": {Owner: "U0OWNER"}}})
	slack := newFakeSlack(t)
	d := e.dispatcher(e.ledger, slack.notifier(t), alerts.Routing{})
	e.needsPerson("inv", "", 1)
	// Queue the alert without delivering it: a dispatcher with a failing Slack.
	slack.failPosts = 1
	e.dispatch(d)
	if _, _, err := e.ledger.Resolve(e.ctx, items.ResolveParams{Tenant: "default", Key: "inv-000", Outcome: items.ResolveSucceeded,
		Evidence: "found invoice INV-88 in the billing tool", By: "ops"}); err != nil {
		t.Fatal(err)
	}
	c := e.dispatch(d)
	if c.Closed != 1 || c.Messages != 0 {
		t.Fatalf("counts %+v, want the alert closed unsent", c)
	}
	if n := len(slack.Posts()); n != 0 {
		t.Fatalf("%d messages about a settled item", n)
	}
}

func TestDispatchWithoutSlackLogsTheAlert(t *testing.T) {
	t.Parallel()
	e := newEnv(t, items.Config{})
	d := e.dispatcher(e.ledger, nil, alerts.Routing{DefaultOwner: "U0OPS"})
	e.needsPerson("inv", "exec-9", 12)
	c := e.dispatch(d)
	if c.Messages != 1 || c.Alerted != 12 {
		t.Fatalf("counts %+v, want one logged message with 12 alerts", c)
	}
	logs := e.logs.String()
	for _, want := range []string{`msg="12 item(s) need a person in batch exec-9"`, "alert_owner=U0OPS", "more=2",
		`query="GET /v1/items?batch_id=exec-9&needs_person=true&owner=U0OPS"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %s:\n%s", want, logs)
		}
	}
	if st := e.get("inv-011").AlertStatus; st != items.AlertSent {
		t.Fatalf("alert status %q, want sent", st)
	}
	alertsOf, err := e.store.ItemAlerts(e.ctx, "default", "inv-011")
	if err != nil || len(alertsOf) != 1 || alertsOf[0].Channel != "log" {
		t.Fatalf("outbox holds %+v (%v), want one alert delivered to the log", alertsOf, err)
	}
}

func TestRoutingValidation(t *testing.T) {
	t.Parallel()
	for _, r := range []alerts.Routing{
		{Routes: []alerts.Route{{Workflow: "[", Owner: "U1"}}},
		{Routes: []alerts.Route{{Workflow: "billing-*"}}},
		{Routes: []alerts.Route{{Owner: "U1", EscalateAfter: -time.Second}}},
	} {
		if err := r.Validate(); err == nil {
			t.Errorf("routing %+v is accepted", r.Routes)
		}
	}
	ok := alerts.Routing{DefaultOwner: "U1", Routes: []alerts.Route{{Workflow: "billing-?x*", Owner: "U2"}}}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid routing refused: %v", err)
	}
	got := ok.Route(&items.Item{Workflow: "billing-Ax1"}, items.Destination{EscalateTo: "U9", CheckHint: "look"})
	if want := (alerts.Target{Owner: "U2", EscalateTo: "U9", CheckHint: "look"}); got != want {
		t.Errorf("route %+v, want %+v", got, want)
	}
}

func TestDispatchLinksEachLineToTheConsoleWhenAPublicURLIsSet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, items.Config{Destinations: map[string]items.Destination{"billing": {Owner: "U0BILLING"}}})
	slack := newFakeSlack(t)
	d, err := alerts.NewDispatcher(alerts.DispatcherConfig{Ledger: e.ledger, Outbox: e.store, Notifier: slack.notifier(t),
		Logger: e.logger, PublicURL: "https://companion.example.com/"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Wait)
	e.needsPerson("inv", "", 2)
	e.unknownItem("odd:key@1+2", withDedupe(items.DedupeNone))
	e.dispatch(d)
	posts := slack.Posts()
	if len(posts) != 1 {
		t.Fatalf("%d messages, want 1", len(posts))
	}
	text := posts[0].texts()
	for _, want := range []string{
		"<https://companion.example.com/console/item?key=inv-000|`inv-000`>",
		"<https://companion.example.com/console/item?key=inv-001|`inv-001`>",
		"<https://companion.example.com/console/item?key=odd%3Akey%401%2B2|`odd:key@1+2`>",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("message lacks the link %q:\n%s", want, text)
		}
	}

	// Without a public URL the key stays plain code, with no link.
	plain := newEnv(t, items.Config{})
	slack2 := newFakeSlack(t)
	d2 := plain.dispatcher(plain.ledger, slack2.notifier(t), alerts.Routing{DefaultOwner: "U0OPS"})
	plain.needsPerson("inv", "", 1)
	plain.dispatch(d2)
	if text := slack2.Posts()[0].texts(); strings.Contains(text, "console/item") || !strings.Contains(text, "`inv-000`") {
		t.Errorf("without a public URL the message links anyway or lacks the key:\n%s", text)
	}
}

// dispatcherWith is a dispatcher over the env's store with its own ledger clock and claim timeout.
func (e *env) dispatcherWith(now func() time.Time, claimTimeout time.Duration, n alerts.Notifier) *alerts.Dispatcher {
	e.t.Helper()
	cfg := e.cfg
	cfg.Now = now
	l, err := items.NewLedger(e.ctx, e.store, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	d, err := alerts.NewDispatcher(alerts.DispatcherConfig{Ledger: l, Outbox: e.store, Notifier: n, ClaimTimeout: claimTimeout, Logger: e.logger})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(d.Wait)
	return d
}

// TestSlowSlackPostIsSentOnce: Slack takes longer to answer a post than the dispatcher's claim on the
// group lasts, while a second dispatcher keeps dispatching. The first renews its claim while it posts,
// so the second never takes the group: one message, carrying every alert. On the wall clock, as the
// claim is renewed on a timer: about 3 s.
func TestSlowSlackPostIsSentOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, items.Config{Destinations: map[string]items.Destination{"billing": {Owner: "U0BILLING"}}})
	e.needsPerson("slow", "exec-9", 5)
	slack := newFakeSlack(t)
	const claimTimeout = 2 * time.Second
	slack.delay = claimTimeout + time.Second
	// The wall clock, shifted to the env's day, so that claims run out as real time passes.
	offset := time.Until(e.now())
	now := func() time.Time { return time.Now().Add(offset) }
	first := e.dispatcherWith(now, claimTimeout, slack.notifier(t))
	second := e.dispatcherWith(now, claimTimeout, slack.notifier(t))

	done := make(chan alerts.DispatchCounts)
	go func() { done <- e.dispatch(first) }()
	var firstCounts, secondCounts alerts.DispatchCounts
	for waiting := true; waiting; {
		select {
		case firstCounts = <-done:
			waiting = false
		case <-time.After(100 * time.Millisecond):
			c := e.dispatch(second)
			secondCounts.Messages += c.Messages
			secondCounts.Alerted += c.Alerted
		}
	}
	if posts := slack.Posts(); len(posts) != 1 || len(slack.Updates()) != 0 {
		t.Fatalf("%d messages posted and %d updated, want one posted: %+v", len(posts), len(slack.Updates()), posts)
	}
	if firstCounts.Messages != 1 || firstCounts.Alerted != 5 || secondCounts.Messages != 0 {
		t.Errorf("first dispatcher %+v, second %+v; want the first to send all 5 alerts in one message", firstCounts, secondCounts)
	}
	ts := slack.Posts()[0].TS
	for i := range 5 {
		as, err := e.store.ItemAlerts(e.ctx, "default", keyOf("slow", i))
		if err != nil || len(as) != 1 || as[0].Status != items.AlertSent || as[0].TS != ts {
			t.Errorf("%s alerts %+v (%v), want one sent in message %s", keyOf("slow", i), as, err, ts)
		}
	}
}

// TestClaimLostWhilePostingUpdatesTheMessage: the first dispatcher's post is so slow that its claim runs
// out (its renewals did not come in time) and a second dispatcher claims the group meanwhile; that one's
// post fails and it lets go. When the first post lands, its dispatcher finds its claim gone and leaves
// the message on the alerts; the next dispatch updates that message instead of posting a second.
func TestClaimLostWhilePostingUpdatesTheMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, items.Config{Destinations: map[string]items.Destination{"billing": {Owner: "U0BILLING"}}})
	e.needsPerson("lost", "exec-7", 3)
	slack := newFakeSlack(t)
	posting := make(chan struct{})
	var once sync.Once
	slack.onPost = func() { once.Do(func() { close(posting) }) }
	slack.delay = 300 * time.Millisecond
	first := e.dispatcherWith(e.clock.Now, time.Minute, slack.notifier(t))
	second := e.dispatcherWith(e.clock.Now, time.Minute, slack.notifier(t))

	done := make(chan alerts.DispatchCounts)
	go func() { done <- e.dispatch(first) }()
	<-posting
	slack.mu.Lock()
	slack.failPosts, slack.delay = 1, 0
	slack.mu.Unlock()
	e.advance(2 * time.Minute) // the first claim runs out on the ledger's clock
	if c := e.dispatch(second); c.Failed != 1 || c.Messages != 0 {
		t.Fatalf("the second dispatcher: %+v; want its claim and a failed post", c)
	}
	if c := <-done; c.Messages != 1 || c.Alerted != 0 {
		t.Fatalf("the first dispatcher: %+v; want its message sent and no alert finished (its claim is gone)", c)
	}
	c := e.dispatch(second)
	posts, updates := slack.Posts(), slack.Updates()
	if len(posts) != 1 || len(updates) != 1 || updates[0].TS != posts[0].TS || updates[0].Channel != posts[0].Channel {
		t.Fatalf("posts %+v, updates %+v; want the one message updated", posts, updates)
	}
	if c.Messages != 1 || c.Alerted != 3 {
		t.Errorf("the next dispatch: %+v; want the 3 alerts sent in the updated message", c)
	}
	for i := range 3 {
		as, err := e.store.ItemAlerts(e.ctx, "default", keyOf("lost", i))
		if err != nil || len(as) != 1 || as[0].Status != items.AlertSent || as[0].TS != posts[0].TS {
			t.Errorf("%s alerts %+v (%v), want one sent in message %s", keyOf("lost", i), as, err, posts[0].TS)
		}
	}
	if !strings.Contains(e.logs.String(), "alert message posted before; updating it") {
		t.Errorf("the update is not in the log:\n%s", e.logs)
	}
}
