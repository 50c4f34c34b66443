package items

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Readiness: a store can answer a ping while it cannot record an item. On a full disk SQLite's ping
// rewrites one page in room the write-ahead log already holds, and succeeds, while every claim needs a
// new page and fails; a PostgreSQL or MongoDB server can accept a tiny update and refuse the rest. So
// the ledger keeps the outcome of the writes it makes: from the first write that the store could not
// durably record (ErrUnavailable) until one succeeds, Ready answers ErrUnavailable. A write that
// succeeds ends it; so does a probe write that Ready makes itself (WriteProber, else Ping), so that a
// replica that an orchestrator took out of traffic turns ready again with no request reaching it.

// WriteProber is implemented by a store whose Ping does not prove that an item can be written now.
type WriteProber interface {
	// ProbeWrite durably writes about as much as a group of item writes does, outside the items, so that
	// it fails where they would. Returns ErrUnavailable.
	ProbeWrite(ctx context.Context) error
}

// unwritable is the write the store could not record, and when.
type unwritable struct {
	err   error
	since time.Time
}

// noteWrite records the outcome of a store write for Ready: err is what the store returned, wrote
// whether the transition had anything to write (one that wrote nothing proves nothing). A write the
// caller gave up on (its context ended) says nothing about the store either.
func (l *Ledger) noteWrite(ctx context.Context, err error, wrote bool) {
	switch {
	case err == nil && wrote:
		if l.unwritable.Load() != nil {
			l.unwritable.Store(nil)
		}
	case errors.Is(err, ErrUnavailable) && ctx.Err() == nil:
		if l.unwritable.Load() == nil {
			l.unwritable.Store(&unwritable{err: err, since: l.now()})
		}
	}
}

// Ready returns nil when the store can durably record a change now. While the last write the ledger
// made could not be recorded it writes a probe (the store's ProbeWrite, else Ping) and stays unready
// until one succeeds; otherwise it pings the store. Returns ErrUnavailable.
func (l *Ledger) Ready(ctx context.Context) error {
	u := l.unwritable.Load()
	if u == nil {
		return l.store.Ping(ctx)
	}
	probe := l.store.Ping
	if p, ok := l.store.(WriteProber); ok {
		probe = p.ProbeWrite
	}
	if err := probe(ctx); err != nil {
		if !errors.Is(err, ErrUnavailable) {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return fmt.Errorf("writes failing since %s (%v), and the probe write too: %w", u.since.Format(time.RFC3339), u.err, err)
	}
	l.unwritable.CompareAndSwap(u, nil)
	return nil
}

// Unwritable returns when the write that the store could not record failed, and the store's error, while
// no write has succeeded since; zero and nil otherwise.
func (l *Ledger) Unwritable() (since time.Time, err error) {
	if u := l.unwritable.Load(); u != nil {
		return u.since, u.err
	}
	return time.Time{}, nil
}

// transition is the store's Transition, its outcome noted for Ready.
func (l *Ledger) transition(ctx context.Context, tenant, key string, fn TransitionFunc) (*Item, error) {
	wrote := false
	it, err := l.store.Transition(ctx, tenant, key, func(cur *Item) (*Item, error) {
		next, err := fn(cur)
		wrote = next != nil && err == nil
		return next, err
	})
	l.noteWrite(ctx, err, wrote)
	return it, err
}

// TransitionMany is the store's TransitionMany, its outcome noted for Ready: the way for a package
// beside the ledger (batches) to write items.
func (l *Ledger) TransitionMany(ctx context.Context, tenant string, keys []string, fn func(i int, cur *Item) (*Item, error)) ([]*Item, error) {
	var wrote atomic.Bool
	out, err := l.store.TransitionMany(ctx, tenant, keys, func(i int, cur *Item) (*Item, error) {
		next, err := fn(i, cur)
		if next != nil && err == nil {
			wrote.Store(true)
		}
		return next, err
	})
	l.noteWrite(ctx, err, wrote.Load())
	return out, err
}
