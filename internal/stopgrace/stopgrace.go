// Package stopgrace gives background work (the alert dispatcher, the prober) what a graceful stop needs:
// a context that outlives the stop by a grace, so that a call already out (a Slack post, a destination
// read) can land, and a bounded context for the store writes that must be made after the stop (recording
// where a call landed, giving a claim back).
package stopgrace

import (
	"context"
	"sync"
	"time"
)

// RecordTimeout bounds each store write made once the work's own context has ended.
const RecordTimeout = 5 * time.Second

// Extend returns the context to work in: ctx's values, but not its end; it ends grace after ctx does (or
// when done is called, which the caller must do when the work is over).
func Extend(ctx context.Context, grace time.Duration) (work context.Context, done func()) {
	work, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var mu sync.Mutex
	var timer *time.Timer
	stopWatching := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		timer = time.AfterFunc(grace, cancel)
	})
	return work, func() {
		stopWatching()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// Detached returns a context for a store write that must be made even when ctx has ended, bounded by
// RecordTimeout.
func Detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), RecordTimeout)
}
