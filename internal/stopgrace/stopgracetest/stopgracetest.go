// Package stopgracetest holds what the graceful-stop tests of the dispatcher and the prober share.
package stopgracetest

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Running starts run(ctx) in a goroutine, as serve starts its background work; stop cancels its context,
// as a graceful stop does, calls then (if not nil), and returns when run has returned, failing t if run
// returned an error or took more than 20 s.
func Running(t testing.TB, ctx context.Context, run func(context.Context) error) (stop func(then func())) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	return func(then func()) {
		t.Helper()
		cancel()
		if then != nil {
			then()
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Run did not return within 20 s of its stop")
		}
	}
}

// Wait waits up to 20 s for ch to be closed (or to deliver), failing t with what did not come.
func Wait(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("no %s within 20 s", what)
	}
}

// Pause holds the first call that reaches Hold until Resume is closed: a test wrapping a real store stops
// the work right after a claim was granted (Held is closed then), cancels it, and lets it go on.
type Pause struct {
	Held   chan struct{} // closed when the first call reached Hold
	Resume chan struct{} // closed by the test to let that call go on
	once   sync.Once
}

// NewPause returns a Pause that holds nothing yet.
func NewPause() *Pause { return &Pause{Held: make(chan struct{}), Resume: make(chan struct{})} }

// Hold, on its first call only, closes Held and waits for Resume.
func (p *Pause) Hold() {
	p.once.Do(func() {
		close(p.Held)
		<-p.Resume
	})
}
