package alerts

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/replaysafe/companion/internal/stopgrace"
	"github.com/replaysafe/companion/items"
)

// Defaults of the dispatcher's configuration.
const (
	// DefaultDispatchPageSize is how many pending items the dispatcher reads per query.
	DefaultDispatchPageSize = 200
	// DefaultMaxGroups bounds the messages one dispatch sends; the rest wait for the next.
	DefaultMaxGroups = 50
	// DefaultClaimTimeout is how long a claimed group stays with its dispatcher: past it (the dispatcher
	// died between claiming and recording), another dispatcher may send it. A dispatcher renews its claim
	// every third of it until it has finished the group, so a slow post keeps its group.
	DefaultClaimTimeout = 2 * time.Minute
	// DefaultRefreshTimeout bounds a message update made after a button press.
	DefaultRefreshTimeout = 10 * time.Second
	// DefaultStopGrace is how long a dispatch that is told to stop lets a message being posted finish.
	DefaultStopGrace = 10 * time.Second
	// DefaultFindGiveUp is how long a group whose earlier post may have landed unrecorded waits for a
	// history read that works: past it, the group is posted even though the read failed (a possible
	// duplicate rather than a lost alert).
	DefaultFindGiveUp = 10 * time.Minute
	// findMargin is how far before the earlier post began the history read starts: Slack's clock and the
	// ledger's may differ a little.
	findMargin = 2 * time.Minute
)

// Outbox is the alert outbox the dispatcher works on. Every method returns ErrUnavailable when the store
// cannot be reached.
type Outbox interface {
	// PendingAlertItems returns items that need a person and whose alert has not gone out, by (tenant, key)
	// after the given reference.
	PendingAlertItems(ctx context.Context, after items.ItemRef, limit int) ([]*items.Item, error)
	// AddAlerts records pending alerts, except those that exist for the same item, attempt and cause; it
	// returns how many it added.
	AddAlerts(ctx context.Context, as []items.Alert) (int, error)
	// AlertGroups returns the groups with alerts claimable at now (pending, or due for escalation).
	AlertGroups(ctx context.Context, now time.Time, limit int) ([]items.AlertGroup, error)
	// ClaimAlerts takes a group's claimable alerts in one guarded update; a concurrent claim gets none.
	ClaimAlerts(ctx context.Context, c items.AlertClaim) ([]items.Alert, error)
	// FinishAlerts records a claimed group's delivery and releases the claim.
	FinishAlerts(ctx context.Context, f items.AlertDelivery) (int, error)
	// ReleaseAlerts gives up a claim without sending; only the alerts that claim still holds are released
	// (a claim that ran out and was taken over is another token's).
	ReleaseAlerts(ctx context.Context, claim string) error
	// RenewAlertClaim extends a claim while its message is being posted; 0 means the claim is gone.
	RenewAlertClaim(ctx context.Context, claim string, until time.Time) (int, error)
	// NoteAlertMessage records where a message carrying the alerts landed, on those not yet finished that
	// have none, without finishing them: for a dispatcher that lost its claim while posting.
	NoteAlertMessage(ctx context.Context, as []items.Alert, m items.AlertDelivery) (int, error)
	// MarkAlertPost records on the alerts held by claim that their message is about to be posted at at
	// (items.Alert.PostAttemptAt); FinishAlerts clears it, and so does a zero at (a refused post).
	MarkAlertPost(ctx context.Context, claim string, at time.Time) (int, error)
	// CloseAlert closes one alert; CloseItemAlerts every open alert about an item.
	CloseAlert(ctx context.Context, a items.Alert, now time.Time) (bool, error)
	CloseItemAlerts(ctx context.Context, tenant, key string, now time.Time) (int, error)
	// RequestEscalation makes an item's sent alerts due for escalation now.
	RequestEscalation(ctx context.Context, tenant, key, by string, now time.Time) (int, error)
	// ItemAlerts returns the alerts about an item; MessageAlerts those a message carried.
	ItemAlerts(ctx context.Context, tenant, key string) ([]items.Alert, error)
	MessageAlerts(ctx context.Context, channel, ts string) ([]items.Alert, error)
	// SettledAlerts returns up to limit alerts that went out (sent or escalated) and are still open
	// although their item no longer waits for a person in their attempt (settled, claimed again, or gone):
	// their messages may still carry live buttons.
	SettledAlerts(ctx context.Context, limit int) ([]items.Alert, error)
}

// DispatcherConfig configures a Dispatcher.
type DispatcherConfig struct {
	// Ledger gives the items, the destinations' configuration and the clock. Required.
	Ledger *items.Ledger
	// Outbox is the alert outbox. Required.
	Outbox Outbox
	// Routing decides who gets each alert.
	Routing Routing
	// Notifier delivers messages. Default: the log (LogNotifier).
	Notifier Notifier
	// PageSize, MaxGroups, ClaimTimeout, RefreshTimeout and StopGrace default to the Default… constants.
	PageSize       int
	MaxGroups      int
	ClaimTimeout   time.Duration
	RefreshTimeout time.Duration
	// StopGrace is how long a message being posted may take once the dispatch's context has ended (a
	// graceful stop); past it the post is cut off.
	StopGrace time.Duration
	// FindGiveUp is how long a group whose earlier post may have landed unrecorded waits for a history
	// read of its conversation that works before it is posted all the same. Default DefaultFindGiveUp.
	FindGiveUp time.Duration
	// Logger gets one line per dispatch that sent or changed something. Default slog.Default().
	Logger *slog.Logger
	// PublicURL is the service's address as people reach it (https://companion.example.com); when set,
	// each listed item links to its page in the operator console.
	PublicURL string
}

// Dispatcher sends the alert outbox: one message per owner, tenant and batch, each group claimed before it
// is sent, so several dispatchers (one per replica) never send the same alert.
type Dispatcher struct {
	cfg  DispatcherConfig
	log  Notifier
	kick chan struct{}
	wg   sync.WaitGroup
	// health and totals are what this process's dispatches did, for the metrics.
	health runHealth
	totals dispatchTotals
}

// NewDispatcher validates cfg and returns a dispatcher.
func NewDispatcher(cfg DispatcherConfig) (*Dispatcher, error) {
	if cfg.Ledger == nil || cfg.Outbox == nil {
		return nil, errors.New("alerts: dispatcher needs a ledger and an outbox")
	}
	if err := cfg.Routing.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PageSize == 0 {
		cfg.PageSize = DefaultDispatchPageSize
	}
	if cfg.MaxGroups == 0 {
		cfg.MaxGroups = DefaultMaxGroups
	}
	if cfg.ClaimTimeout == 0 {
		cfg.ClaimTimeout = DefaultClaimTimeout
	}
	if cfg.RefreshTimeout == 0 {
		cfg.RefreshTimeout = DefaultRefreshTimeout
	}
	if cfg.StopGrace == 0 {
		cfg.StopGrace = DefaultStopGrace
	}
	if cfg.FindGiveUp == 0 {
		cfg.FindGiveUp = DefaultFindGiveUp
	}
	if cfg.PageSize < 1 || cfg.MaxGroups < 1 || cfg.ClaimTimeout < time.Second || cfg.RefreshTimeout <= 0 || cfg.StopGrace <= 0 || cfg.FindGiveUp <= 0 {
		return nil, fmt.Errorf("alerts: dispatcher page size, max groups, claim timeout (at least 1s), refresh timeout, stop grace and find give-up must be positive")
	}
	log := LogNotifier{Logger: cfg.Logger}
	if cfg.Notifier == nil {
		cfg.Notifier = log
	}
	return &Dispatcher{cfg: cfg, log: log, kick: make(chan struct{}, 1)}, nil
}

// DispatchCounts says what one dispatch did.
type DispatchCounts struct {
	// Queued counts the alerts added to the outbox.
	Queued int `json:"queued"`
	// Messages counts the messages delivered; Alerted the alerts they carried for the first time and
	// Escalated those they carried to an escalate_to owner.
	Messages  int `json:"messages"`
	Alerted   int `json:"alerted"`
	Escalated int `json:"escalated"`
	// Closed counts alerts closed unsent: their item was settled meanwhile.
	Closed int `json:"closed"`
	// Updated counts the messages brought up to date because items they carried were settled elsewhere
	// (a lookup, a report, the API or the console): their buttons are gone.
	Updated int `json:"updated"`
	// Failed counts the groups whose delivery failed, and the messages whose update failed; they are
	// tried again at the next dispatch.
	Failed int `json:"failed"`
}

// Changed reports whether the dispatch did anything.
func (c DispatchCounts) Changed() bool {
	return c.Queued+c.Messages+c.Alerted+c.Escalated+c.Closed+c.Updated+c.Failed > 0
}

// RunOnce adds an alert to the outbox for each item that newly needs a person, then delivers the claimable
// groups (pending alerts, and sent alerts whose escalation is due). It returns what it did and the first
// error that stopped it; a failed delivery does not stop it (the group is tried again next time).
//
// When ctx ends (a graceful stop), RunOnce claims no further group and posts nothing new: a group it has
// claimed and not begun to post is given back at once, so that another dispatcher (or the restarted
// process) sends it without waiting for the claim to run out. A message being posted is not cut off by
// ctx: it gets StopGrace to land, and where it landed is recorded. A post cut off at the end of
// StopGrace may have landed, so its group keeps its claim until it runs out rather than being posted
// twice.
func (d *Dispatcher) RunOnce(ctx context.Context) (DispatchCounts, error) {
	work, done := stopgrace.Extend(ctx, d.cfg.StopGrace)
	defer done()
	var counts DispatchCounts
	err := d.enqueue(work, ctx, &counts)
	if err == nil {
		err = d.deliver(work, ctx, &counts)
	}
	if err == nil {
		err = d.updateSettled(work, ctx, &counts)
	}
	if counts.Changed() {
		d.cfg.Logger.InfoContext(ctx, "alerts dispatched", "queued", counts.Queued, "messages", counts.Messages,
			"alerted", counts.Alerted, "escalated", counts.Escalated, "closed", counts.Closed, "updated", counts.Updated, "failed", counts.Failed)
	}
	if err != nil {
		d.cfg.Logger.ErrorContext(ctx, "alert dispatch stopped", "error", err)
	}
	d.health.note(err)
	d.totals.add(counts)
	return counts, err
}

// Target returns where an item's alert goes and what its owner should check (the console shows both).
func (d *Dispatcher) Target(it *items.Item) Target { return d.target(it) }

func (d *Dispatcher) target(it *items.Item) Target {
	return d.cfg.Routing.Route(it, d.cfg.Ledger.Config().Destination(it.Destination))
}

// enqueue adds one outbox record per item, attempt and cause; the outbox ignores repeats, so several
// dispatchers may enqueue at once. It works in ctx and stops between pages once stop has ended.
func (d *Dispatcher) enqueue(ctx, stop context.Context, counts *DispatchCounts) error {
	var after items.ItemRef
	now := d.cfg.Ledger.Now()
	for {
		if stop.Err() != nil {
			return nil
		}
		found, err := d.cfg.Outbox.PendingAlertItems(ctx, after, d.cfg.PageSize)
		if err != nil {
			return err
		}
		batch := make([]items.Alert, len(found))
		for i, it := range found {
			t := d.target(it)
			batch[i] = items.Alert{Tenant: it.Tenant, Key: it.Key, Attempt: it.Attempt,
				Cause: it.NeedsPersonCause, Owner: t.Owner, EscalateTo: t.EscalateTo, EscalateAfter: t.EscalateAfter,
				BatchID: it.BatchID, Destination: it.Destination, Status: items.AlertPending, CreatedAt: now}
		}
		added, err := d.cfg.Outbox.AddAlerts(ctx, batch)
		if err != nil {
			return err
		}
		counts.Queued += added
		if len(found) < d.cfg.PageSize {
			return nil
		}
		after = items.ItemRef{Tenant: found[len(found)-1].Tenant, Key: found[len(found)-1].Key}
	}
}

// deliver sends the claimable groups one by one, working in ctx; once stop has ended it claims no more.
func (d *Dispatcher) deliver(ctx, stop context.Context, counts *DispatchCounts) error {
	if stop.Err() != nil {
		return nil
	}
	groups, err := d.cfg.Outbox.AlertGroups(ctx, d.cfg.Ledger.Now().Add(-d.cfg.Ledger.ClockMargin()), d.cfg.MaxGroups)
	if err != nil {
		return err
	}
	for _, g := range groups {
		if stop.Err() != nil {
			return nil
		}
		if err := d.deliverGroup(ctx, stop, g, counts); err != nil {
			return err
		}
	}
	return nil
}

func newClaimToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // crypto/rand does not fail on supported platforms
	return "d_" + hex.EncodeToString(b)
}

// deliverGroup claims a group, drops the alerts whose item was settled meanwhile, sends one message, and
// records where it landed. A delivery failure releases the claim and is counted, not returned. Once stop
// has ended, a claimed group whose message has not begun to go out is given back unsent.
//
// The claim is given back on every way out that neither finishes the group nor may have left a message
// nobody recorded, on a context of its own (ctx may have ended): the group is then claimable at once
// instead of when the claim runs out. A post cut off by the end of ctx may have landed: its claim is kept
// until it runs out, so that the message is not posted twice at once.
func (d *Dispatcher) deliverGroup(ctx, stop context.Context, g items.AlertGroup, counts *DispatchCounts) error {
	now := d.cfg.Ledger.Now()
	claim := newClaimToken()
	// Another replica's claim ended on its clock: it is taken for ended on this one only the margin later.
	claimed, err := d.cfg.Outbox.ClaimAlerts(ctx, items.AlertClaim{Group: g, Claim: claim, Now: now.Add(-d.cfg.Ledger.ClockMargin()),
		Until: now.Add(d.cfg.ClaimTimeout)})
	if err != nil || len(claimed) == 0 {
		return err // another dispatcher took the group, or there is nothing left in it
	}
	giveBack := true
	defer func() {
		if giveBack {
			_ = d.release(ctx, claim, g)
		}
	}()
	// Renewed until the group is finished or released, however long reading its items and posting take.
	// (Deferred after giveBack, so it stops first.)
	defer d.renew(ctx, claim)()
	var live []items.Alert
	found := map[items.ItemRef]*items.Item{}
	for _, a := range claimed {
		it, err := d.cfg.Ledger.Store().Get(ctx, a.Tenant, a.Key)
		if err != nil && !errors.Is(err, items.ErrNotFound) {
			return err
		}
		if !stillNeeded(it, a) {
			if _, err := d.cfg.Outbox.CloseAlert(ctx, a, now); err != nil {
				return err
			}
			counts.Closed++
			continue
		}
		found[a.Ref()] = it
		live = append(live, a)
	}
	if len(live) == 0 {
		giveBack = false // every alert closed, and with it its claim
		return nil
	}
	// groupAttrs are the log attributes naming the group, then more.
	groupAttrs := func(more ...any) []any {
		return append([]any{"owner", g.Owner, "tenant", g.Tenant, "batch_id", g.BatchID, "escalation", g.Escalation, "items", len(live)}, more...)
	}
	if stop.Err() != nil {
		d.cfg.Logger.InfoContext(ctx, "dispatcher stopping: alert group given back unsent; the next dispatch sends it", groupAttrs()...)
		return nil
	}
	msg := d.message(g, live, found, now)
	notifier := d.cfg.Notifier
	if g.Owner == "" {
		// Nobody is named for these items: the log is the only place left, and the operator API shows them.
		notifier = d.log
	}
	ref, update, err := d.send(ctx, notifier, g, live, msg, claim)
	if errors.Is(err, errClaimLost) {
		// The claim ran out while the group was read (a replica that stalled, or whose renewals failed) and
		// another dispatcher holds some of its alerts now: that one posts them. What this claim still holds
		// is given back.
		d.cfg.Logger.WarnContext(ctx, "alert not posted: its claim ran out before the post and another dispatcher holds the group", groupAttrs()...)
		return nil
	}
	if errors.Is(err, errHistoryUnread) {
		// An earlier post may have landed and its conversation could not be read: posting now could post
		// it twice. The claim is given back; the next dispatch reads again (posting once FindGiveUp passed).
		counts.Failed++
		d.cfg.Logger.ErrorContext(ctx, "alert not posted: an earlier post of it may have landed unrecorded and Slack's history could not be read; will retry",
			groupAttrs("error", err)...)
		return nil
	}
	if err != nil && ctx.Err() != nil && !update {
		// Cut off at the end of the stop's grace: Slack may have posted it all the same. Giving the group
		// back would post it again at once; its claim runs out instead (it is no longer renewed). (A cut
		// update is given back: the next sender finds the message on the alerts and updates it again.)
		giveBack = false
		d.cfg.Logger.WarnContext(ctx, "alert post cut off at stop; it may have landed, so the group keeps its claim until it runs out",
			groupAttrs("claim_timeout", d.cfg.ClaimTimeout.String(), "error", err)...)
		return err
	}
	if err != nil {
		counts.Failed++
		d.cfg.Logger.ErrorContext(ctx, "alert delivery failed; will retry", groupAttrs("error", err)...)
		if errors.Is(err, ErrPostRefused) && !update {
			// Slack answered that it took nothing: the next sender posts without looking for it first.
			// (Should clearing fail, the next sender reads the history once, and finds nothing.)
			rctx, cancel := stopgrace.Detached(ctx)
			_, _ = d.cfg.Outbox.MarkAlertPost(rctx, claim, time.Time{})
			cancel()
		}
		giveBack = false
		return d.release(ctx, claim, g)
	}
	// The message is out: where it landed is recorded even when ctx ended meanwhile.
	rctx, cancel := stopgrace.Detached(ctx)
	defer cancel()
	delivery := items.AlertDelivery{Claim: claim, Channel: ref.Channel, TS: ref.TS, At: now, Escalation: g.Escalation}
	n, err := d.cfg.Outbox.FinishAlerts(rctx, delivery)
	if err != nil || n < len(live) {
		// The claim ran out and was taken over while the message went out (or the outbox failed): leave
		// the message on the alerts, so that whoever sends them next updates it instead of posting again.
		if _, nerr := d.cfg.Outbox.NoteAlertMessage(rctx, live, delivery); nerr != nil {
			// Nowhere to find the message: give nothing back, the claim runs out first.
			giveBack = false
			if err == nil {
				err = nerr
			}
		}
	} else {
		giveBack = false // finished: the claim is released
	}
	if err != nil {
		return err
	}
	counts.Messages++
	status := items.AlertSent
	if g.Escalation {
		counts.Escalated += n
		status = items.AlertEscalated
	} else {
		counts.Alerted += n
	}
	to := g.Owner
	if ref.Channel == "log" {
		to = "the log"
		if g.Owner != "" {
			to = g.Owner + " (in the log)"
		}
	}
	originals := map[MessageRef]bool{}
	marks := make([]items.AlertMark, len(live))
	for i, a := range live {
		marks[i] = items.AlertMark{Key: a.Key, Attempt: a.Attempt, Cause: a.Cause}
		if g.Escalation && a.TS != "" {
			originals[MessageRef{Channel: a.Channel, TS: a.TS}] = true
		}
	}
	if _, err := d.cfg.Ledger.RecordAlerts(rctx, g.Tenant, marks, status, to); err != nil {
		return err
	}
	// The first message shows where its items went.
	for ref := range originals {
		if err := d.Refresh(ctx, ref); err != nil {
			d.cfg.Logger.WarnContext(ctx, "alert message update failed", "channel", ref.Channel, "ts", ref.TS, "error", err)
		}
	}
	return nil
}

// errClaimLost says a group was not posted because its claim no longer holds every alert of it.
var errClaimLost = errors.New("the claim no longer holds the group")

// errHistoryUnread says a group was not posted because an earlier post of it may have landed and the history
// read that would find it failed.
var errHistoryUnread = errors.New("an earlier post may have landed; the history read failed")

// send delivers a claimed group's message. When a message carrying these alerts went out already (a
// dispatcher that lost its claim while posting noted it on them), that message is updated instead of
// posting another: a group gets one message. The bool says it updated.
//
// With a notifier that finds its posts (Slack), each post is marked on the alerts before it begins; a
// group whose alerts carry such a mark had a post whose landing was never recorded (its answer was lost):
// the conversation's history since then is read, and a message found there is updated instead of posting
// another. Only when the read proves there is none is the group posted; when the read fails, send returns
// errHistoryUnread (nothing posted) until FindGiveUp has passed since the earlier post, then posts anyway.
func (d *Dispatcher) send(ctx context.Context, notifier Notifier, g items.AlertGroup, live []items.Alert, msg Message, claim string) (MessageRef, bool, error) {
	for _, a := range live {
		ref := MessageRef{Channel: a.Channel, TS: a.TS}
		if g.Escalation {
			ref = MessageRef{Channel: a.EscalationChannel, TS: a.EscalationTS}
		}
		if ref.TS != "" && (ref.Channel == "log") == (notifier == Notifier(d.log)) {
			d.cfg.Logger.InfoContext(ctx, "alert message posted before; updating it", "channel", ref.Channel, "ts", ref.TS,
				"owner", g.Owner, "tenant", g.Tenant, "batch_id", g.BatchID)
			return ref, true, notifier.Update(ctx, ref, msg)
		}
	}
	finder, ok := notifier.(PostFinder)
	if !ok {
		// Posted only while the claim holds the whole group (renewed here, as the finder's path marks it).
		if n, err := d.cfg.Outbox.RenewAlertClaim(ctx, claim, d.cfg.Ledger.Now().Add(d.cfg.ClaimTimeout)); err != nil {
			return MessageRef{}, false, err
		} else if n < len(live) {
			return MessageRef{}, false, errClaimLost
		}
		ref, err := notifier.Post(ctx, g.Owner, msg)
		return ref, false, err
	}
	var attempts []string
	var first time.Time
	for _, a := range live {
		if a.PostAttemptAt == nil {
			continue
		}
		if id := attemptID(*a.PostAttemptAt); !slices.Contains(attempts, id) {
			attempts = append(attempts, id)
		}
		if first.IsZero() || a.PostAttemptAt.Before(first) {
			first = *a.PostAttemptAt
		}
	}
	if len(attempts) > 0 {
		ref, found, err := finder.FindPost(ctx, g.Owner, msg, attempts, first.Add(-findMargin))
		switch {
		case err == nil && found:
			d.cfg.Logger.InfoContext(ctx, "alert message found in Slack (its post's answer was lost); updating it", "channel", ref.Channel, "ts", ref.TS,
				"owner", g.Owner, "tenant", g.Tenant, "batch_id", g.BatchID)
			return ref, true, notifier.Update(ctx, ref, msg)
		case err != nil && d.cfg.Ledger.Now().Sub(first) < d.cfg.FindGiveUp:
			return MessageRef{}, false, fmt.Errorf("%w: %w", errHistoryUnread, err)
		case err != nil:
			d.cfg.Logger.WarnContext(ctx, "alert posted although an earlier post may have landed: Slack's history could not be read for longer than the find give-up (check the app's history scopes)",
				"owner", g.Owner, "tenant", g.Tenant, "batch_id", g.BatchID, "since", first, "find_give_up", d.cfg.FindGiveUp.String(), "error", err)
		}
	}
	// Marked before the post, so that a post whose answer is lost is looked for, not posted again; and
	// posted only if the mark found the claim holding the whole group (a claim that ran out and was taken
	// over marks fewer: the dispatcher holding them now posts them).
	at := d.cfg.Ledger.Now()
	if n, err := d.cfg.Outbox.MarkAlertPost(ctx, claim, at); err != nil {
		return MessageRef{}, false, err
	} else if n < len(live) {
		_, _ = d.cfg.Outbox.MarkAlertPost(ctx, claim, time.Time{}) // nothing was posted
		return MessageRef{}, false, errClaimLost
	}
	msg.Attempt = attemptID(at)
	ref, err := notifier.Post(ctx, g.Owner, msg)
	return ref, false, err
}

// attemptID names a post attempt by the time it began, to the millisecond (as both stores keep it).
func attemptID(at time.Time) string { return strconv.FormatInt(at.UnixMilli(), 10) }

// release gives a claim back, on a context of its own (ctx may have ended), so that the group it holds
// is claimable at once; a failure is logged (the group waits for the claim to run out) and returned.
func (d *Dispatcher) release(ctx context.Context, claim string, g items.AlertGroup) error {
	rctx, cancel := stopgrace.Detached(ctx)
	defer cancel()
	err := d.cfg.Outbox.ReleaseAlerts(rctx, claim)
	if err != nil {
		d.cfg.Logger.WarnContext(ctx, "alert claim release failed; the group waits for the claim to run out", "owner", g.Owner,
			"tenant", g.Tenant, "batch_id", g.BatchID, "claim_timeout", d.cfg.ClaimTimeout.String(), "error", err)
	}
	return err
}

// renew keeps claim live, every third of the claim timeout, until the returned stop is called: a post
// slower than the claim timeout must not look like a dead dispatcher, whose group another one sends.
func (d *Dispatcher) renew(ctx context.Context, claim string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(d.cfg.ClaimTimeout / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			n, err := d.cfg.Outbox.RenewAlertClaim(ctx, claim, d.cfg.Ledger.Now().Add(d.cfg.ClaimTimeout))
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				d.cfg.Logger.WarnContext(ctx, "alert claim renewal failed; will retry", "error", err)
			case n == 0:
				return // finished, released, or taken over: a message posted meanwhile is noted on the alerts
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// message builds the message of a group from its alerts (ordered by key) and their items.
func (d *Dispatcher) message(g items.AlertGroup, alerts []items.Alert, found map[items.ItemRef]*items.Item, now time.Time) Message {
	m := Message{Tenant: g.Tenant, Owner: g.Owner, BatchID: g.BatchID, Escalation: g.Escalation}
	m.Query, m.Command = groupQuery(g)
	for i, a := range alerts {
		if i >= MaxListedItems {
			m.More = len(alerts) - MaxListedItems
			break
		}
		it := found[a.Ref()]
		if it == nil {
			m.Lines = append(m.Lines, Line{Tenant: a.Tenant, Key: a.Key, Destination: a.Destination, Cause: a.Cause, Note: "no longer in the ledger"})
			continue
		}
		open := a.Status != items.AlertClosed && stillNeeded(it, a)
		l := newLine(it, a, d.target(it).CheckHint, open, now)
		l.URL = ItemURL(d.cfg.PublicURL, it.Key)
		m.Lines = append(m.Lines, l)
	}
	return m
}

// Refresh rebuilds a delivered message from the current state of its items and replaces it: settled
// items lose their buttons and say who settled them and how.
func (d *Dispatcher) Refresh(ctx context.Context, ref MessageRef) error {
	if ref.TS == "" {
		return nil
	}
	alerts, err := d.cfg.Outbox.MessageAlerts(ctx, ref.Channel, ref.TS)
	if err != nil || len(alerts) == 0 {
		return err
	}
	a0 := alerts[0]
	g := items.AlertGroup{Tenant: a0.Tenant, Owner: a0.Owner, BatchID: a0.BatchID}
	if a0.EscalationChannel == ref.Channel && a0.EscalationTS == ref.TS {
		g.Owner, g.Escalation = a0.EscalateTo, true
	}
	found := map[items.ItemRef]*items.Item{}
	for i, a := range alerts {
		if i >= MaxListedItems {
			break
		}
		it, err := d.cfg.Ledger.Store().Get(ctx, a.Tenant, a.Key)
		if err != nil && !errors.Is(err, items.ErrNotFound) {
			return err
		}
		found[a.Ref()] = it
	}
	notifier := d.cfg.Notifier
	if ref.Channel == "log" {
		notifier = d.log
	}
	return notifier.Update(ctx, ref, d.message(g, alerts, found, d.cfg.Ledger.Now()))
}

// Resolve settles an item on a person's evidence: the ledger's Resolve, then the item's open alerts are
// closed and the messages that carried them updated (in the background, so a Slack request is answered
// in time). The operator API and the Slack modal both resolve through here. Errors are the ledger's.
func (d *Dispatcher) Resolve(ctx context.Context, p items.ResolveParams) (*items.Item, items.Reason, error) {
	it, reason, err := d.cfg.Ledger.Resolve(ctx, p)
	if err != nil || reason != items.ReasonRecorded {
		return it, reason, err
	}
	d.settled(p.Tenant, p.Key)
	return it, reason, nil
}

// settled updates the messages about an item that no longer needs a person and closes its open alerts, in
// the background (bringUpToDate: an alert whose message could not be updated stays open for the next
// dispatch).
func (d *Dispatcher) settled(tenant, key string) {
	d.background(func(ctx context.Context) {
		alerts, err := d.cfg.Outbox.ItemAlerts(ctx, tenant, key)
		if err != nil {
			d.cfg.Logger.WarnContext(ctx, "reading the alerts of a settled item failed; the next dispatch updates their messages",
				"tenant", tenant, "key", key, "error", err)
			return
		}
		if _, _, err := d.bringUpToDate(ctx, alerts); err != nil {
			d.cfg.Logger.WarnContext(ctx, "closing alerts failed", "tenant", tenant, "key", key, "error", err)
		}
	})
}

// updateSettled brings up to date the messages that carry alerts whose item no longer waits for a person
// for them: settled elsewhere (a lookup, a report, the API, the console of any replica), claimed again, or
// removed. Such a message would otherwise keep live-looking buttons until someone pressed one. It works in
// ctx and does nothing once stop has ended.
func (d *Dispatcher) updateSettled(ctx, stop context.Context, counts *DispatchCounts) error {
	if stop.Err() != nil {
		return nil
	}
	settled, err := d.cfg.Outbox.SettledAlerts(ctx, d.cfg.PageSize)
	if err != nil || len(settled) == 0 {
		return err
	}
	updated, failed, err := d.bringUpToDate(ctx, settled)
	counts.Updated += updated
	counts.Failed += failed
	return err
}

// bringUpToDate updates each message that carried one of the alerts (Refresh: settled items lose their
// buttons), then closes the open alerts whose messages all took the update. An alert whose message could
// not be updated stays open, so that SettledAlerts gives it to the next dispatch; a message Slack refused
// to update (deleted, or in a channel the app left) is not tried again. It returns how many messages it
// updated and how many updates failed; the error is the outbox's.
func (d *Dispatcher) bringUpToDate(ctx context.Context, alerts []items.Alert) (updated, failed int, err error) {
	done := map[MessageRef]bool{}
	for _, a := range alerts {
		for _, ref := range []MessageRef{{Channel: a.Channel, TS: a.TS}, {Channel: a.EscalationChannel, TS: a.EscalationTS}} {
			if _, seen := done[ref]; seen || ref.TS == "" {
				continue
			}
			err := d.Refresh(ctx, ref)
			switch {
			case err == nil:
				updated++
			case errors.Is(err, ErrPostRefused):
				d.cfg.Logger.WarnContext(ctx, "alert message could not be updated, and will not be tried again: Slack refused", "channel", ref.Channel,
					"ts", ref.TS, "error", err)
				err = nil
			default:
				failed++
				d.cfg.Logger.WarnContext(ctx, "alert message update failed; the next dispatch tries again", "channel", ref.Channel, "ts", ref.TS, "error", err)
			}
			done[ref] = err == nil
		}
	}
	now := d.cfg.Ledger.Now()
	for _, a := range alerts {
		first, escalation := MessageRef{Channel: a.Channel, TS: a.TS}, MessageRef{Channel: a.EscalationChannel, TS: a.EscalationTS}
		if a.Status == items.AlertClosed || (first.TS != "" && !done[first]) || (escalation.TS != "" && !done[escalation]) {
			continue
		}
		if _, err := d.cfg.Outbox.CloseAlert(ctx, a, now); err != nil {
			return updated, failed, err
		}
	}
	return updated, failed, nil
}

// EscalateResult says what an escalation request did.
type EscalateResult struct {
	// Requested counts the alerts made due for escalation now.
	Requested int
	// Already lists where the item's alerts escalated before (a repeated click).
	Already []string
	// NoTarget is true when no alert about the item has an escalate_to owner.
	NoTarget bool
}

// Escalate makes the item's sent alerts due for escalation now, naming who asked, and wakes the
// dispatcher loop. A repeated request changes nothing.
func (d *Dispatcher) Escalate(ctx context.Context, tenant, key, by string) (EscalateResult, error) {
	var res EscalateResult
	n, err := d.cfg.Outbox.RequestEscalation(ctx, tenant, key, by, d.cfg.Ledger.Now())
	if err != nil {
		return res, err
	}
	res.Requested = n
	if n > 0 {
		d.Kick()
		return res, nil
	}
	alerts, err := d.cfg.Outbox.ItemAlerts(ctx, tenant, key)
	if err != nil {
		return res, err
	}
	res.NoTarget = true
	for _, a := range alerts {
		if a.EscalateTo != "" {
			res.NoTarget = false
			if a.Status == items.AlertEscalated || a.EscalatedBy != "" {
				res.Already = append(res.Already, a.EscalateTo)
			}
		}
	}
	return res, nil
}

// Kick asks the dispatcher loop (Run) for a dispatch now, without waiting for the schedule.
func (d *Dispatcher) Kick() {
	select {
	case d.kick <- struct{}{}:
	default: // a dispatch is already asked for
	}
}

// background runs f with its own bounded context, so work started by a request outlives the request but
// not the process: Wait waits for all of it.
func (d *Dispatcher) background(f func(ctx context.Context)) {
	d.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), d.cfg.RefreshTimeout)
		defer cancel()
		f(ctx)
	})
}

// Wait waits for the message updates started in the background.
func (d *Dispatcher) Wait() { d.wg.Wait() }
