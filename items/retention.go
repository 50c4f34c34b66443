package items

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Retention: settled items are removed once their destination's retention has passed since their last
// change, so that a ledger of a million items a day does not grow for ever. An item is settled when
// nothing can happen to it any more without a new request: it succeeded or failed, it does not need a
// person, and no rule of the sweeper can ever flag it again without a new request (it is no sweep
// candidate: Facts.SweepCandidate). That is: it succeeded (without a duplicate effect, or with one a person
// acknowledged), or it failed for good (not retryable), or it failed and is retryable but a person
// acknowledged it (resolve outcome acknowledged) in its current attempt. Items that are in flight,
// unknown, prepared, failed and retryable with nobody's acknowledgement, or that need a person are never
// removed, however old.
//
// A removed item is forgotten: a before-write for its key afterwards is a new item (proceed, reason new),
// so retention must outlast any replay a workflow could still make. Config refuses a retention shorter
// than the destination's key_retention_seconds.
//
// That is also why removing an acknowledged retryable failure is safe. A person took it over: the
// service has no more to say about it unless the workflow comes back, and a workflow that comes back
// within the retention finds the item and retries it (a new attempt, which is no longer acknowledged,
// so not settled until it settles again). One that comes back after the retention (longer than
// key_retention_seconds, by which the receiver may have forgotten the key anyway) gets a new item and
// proceeds: the write the retry would have made, as a retryable failure is evidence that nothing was
// written (the destination refused it, or it never reached it). An acknowledged duplicate effect is a
// succeeded item, and a replay after its removal writes again like that of any succeeded item. The
// person who acknowledged either had the whole retention to act.

// DefaultRetention is how long a settled item is kept after its last change when its destination names
// no retention.
const DefaultRetention = 30 * 24 * time.Hour

// Settled reports whether the item may be removed by retention: it succeeded or failed, it does not need
// a person, and the sweeper has nothing left to look at without a new request (not a sweep candidate:
// not retryable and no duplicate effect, or a person acknowledged them in the current attempt). An
// unknown item is never settled.
func (it *Item) Settled() bool {
	return (it.State == StateSucceeded || it.State == StateFailed) && !it.NeedsPerson && !it.sweepCandidate()
}

// StateRemoved is the state of the kept counts' group of removed items (CountGroup): its Items are the
// items retention removed, and its sums keep their measures, so that the cumulative measures (retries,
// recoveries, resolutions, …) never go down when items are removed. No item is ever in it.
const StateRemoved State = "removed"

// DestinationRef names a tenant's destination.
type DestinationRef struct {
	Tenant      string
	Destination string
}

// RemoveParams select the settled items RemoveSettled removes: those of one tenant, destination and
// state (succeeded or failed), in the order of their last change.
type RemoveParams struct {
	DestinationRef
	State State
	// ChangedBefore: only items whose last change is at or before it.
	ChangedBefore time.Time
	// After continues where the previous call stopped; nil starts at the oldest item.
	After *RemovePosition
	// Limit bounds the items removed by one call (and so the time the writer is held).
	Limit int
}

// RemovePosition is where a RemoveSettled call stopped: the last change and key of the last item it
// looked at.
type RemovePosition struct {
	UpdatedAt time.Time
	Key       string
}

// RetentionStore is what Retention needs of a store.
type RetentionStore interface {
	// SettledDestinations returns the tenants' destinations that may hold settled items. Returns
	// ErrUnavailable.
	SettledDestinations(ctx context.Context) ([]DestinationRef, error)
	// RemoveSettled removes up to p.Limit settled items (Item.Settled) of p's tenant, destination and
	// state whose last change is at or before p.ChangedBefore, after p.After, with their alerts, and
	// counts them removed in the kept counts. The items are selected without holding the writer (items of
	// other destinations passed over cost no pause); an item that changed since it was selected is not
	// removed. It returns how many it removed and where to continue, nil when there is nothing more.
	// Returns ErrUnavailable.
	RemoveSettled(ctx context.Context, p RemoveParams) (int, *RemovePosition, error)
}

// DefaultRemoveLimit is how many items one RemoveSettled call removes at most: small enough that the
// writer is held for milliseconds, not seconds.
const DefaultRemoveLimit = 100

// RetentionConfig configures Retention.
type RetentionConfig struct {
	Store RetentionStore
	// Config gives each destination's retention and the clock. Required.
	Config Config
	// Limit is the items removed per call. Default DefaultRemoveLimit.
	Limit int
	// Logger gets one line per run that removed something. Default slog.Default().
	Logger *slog.Logger
}

// Retention removes settled items past their destination's retention.
type Retention struct {
	cfg RetentionConfig
}

// NewRetention returns a Retention. It fails when cfg has no store.
func NewRetention(cfg RetentionConfig) (*Retention, error) {
	if cfg.Store == nil {
		return nil, errors.New("items: retention without a store")
	}
	if cfg.Limit <= 0 {
		cfg.Limit = DefaultRemoveLimit
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Config.Now == nil {
		cfg.Config.Now = time.Now
	}
	return &Retention{cfg: cfg}, nil
}

// RetentionCounts is what one run did.
type RetentionCounts struct {
	Removed int
	// LongestCall is the longest RemoveSettled call: how long the run held the store's writer at most
	// (on SQLite every other write waits that long).
	LongestCall time.Duration
	// Took is how long the whole run took.
	Took time.Duration
	// SeriesRows counts the rows of the measures over time removed (hours and days past their keeping).
	SeriesRows int
}

// RunOnce removes, destination by destination, the settled items past their retention, a call of up to
// Limit items at a time, until none is left; then, on a store that keeps the measures over time, the
// hour and day rows past their keeping. It returns what it did and the errors (it goes on with the other
// destinations after one).
func (r *Retention) RunOnce(ctx context.Context) (RetentionCounts, error) {
	var c RetentionCounts
	began := time.Now()
	dests, err := r.cfg.Store.SettledDestinations(ctx)
	if err != nil {
		c.Took = time.Since(began)
		return c, err
	}
	now := r.cfg.Config.Now()
	var errs []error
	for _, d := range dests {
		cutoff := now.Add(-r.cfg.Config.Destination(d.Destination).Retention)
		for _, state := range []State{StateSucceeded, StateFailed} {
			p := RemoveParams{DestinationRef: d, State: state, ChangedBefore: cutoff, Limit: r.cfg.Limit}
			for ctx.Err() == nil {
				start := time.Now()
				n, next, err := r.cfg.Store.RemoveSettled(ctx, p)
				c.LongestCall = max(c.LongestCall, time.Since(start))
				c.Removed += n
				if err != nil {
					errs = append(errs, fmt.Errorf("retention of %s/%s: %w", d.Tenant, d.Destination, err))
					break
				}
				if next == nil {
					break
				}
				p.After = next
			}
		}
	}
	if ss, ok := r.cfg.Store.(SeriesStore); ok && ctx.Err() == nil {
		hours, days := r.cfg.Config.SeriesKept()
		n, err := ss.RemoveSeriesRows(ctx, now.Add(-hours), now.Add(-days))
		c.SeriesRows = n
		if err != nil {
			errs = append(errs, fmt.Errorf("retention of the measures over time: %w", err))
		}
	}
	c.Took = time.Since(began)
	if c.SeriesRows > 0 {
		r.cfg.Logger.Info(fmt.Sprintf("retention removed %d rows of the measures over time", c.SeriesRows),
			slog.Int("series_rows", c.SeriesRows))
	}
	if c.Removed > 0 {
		r.cfg.Logger.Info(fmt.Sprintf("retention removed %d settled items in %s", c.Removed, c.Took.Round(time.Millisecond)),
			slog.Int("removed", c.Removed), slog.Duration("took", c.Took), slog.Duration("longest_call", c.LongestCall))
	}
	if len(errs) > 0 {
		r.cfg.Logger.Error("retention failed", slog.Any("error", errors.Join(errs...)))
	}
	return c, errors.Join(errs...)
}

// Run runs RunOnce every interval until ctx ends.
func (r *Retention) Run(ctx context.Context, every time.Duration) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		_, _ = r.RunOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
