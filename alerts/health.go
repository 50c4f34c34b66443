package alerts

import (
	"sync/atomic"
	"time"
)

// RunHealth says how the runs of a service (the sweeper, the dispatcher) went in this process, for the
// service's metrics: a run that ends without an error is a success; an alert rule fires when the last one
// is too old (the loop stopped, or every run fails).
type RunHealth struct {
	// Runs and Failures count the runs that ended, and those that ended in an error.
	Runs, Failures int64
	// LastSuccess is when the last run without an error ended (wall clock); zero before the first.
	LastSuccess time.Time
}

// runHealth keeps a RunHealth, safe for concurrent use.
type runHealth struct {
	runs, failures atomic.Int64
	// lastSuccess is in Unix nanoseconds; 0 before the first.
	lastSuccess atomic.Int64
}

// note records the end of a run that returned err.
func (h *runHealth) note(err error) {
	h.runs.Add(1)
	if err != nil {
		h.failures.Add(1)
		return
	}
	h.lastSuccess.Store(time.Now().UnixNano())
}

func (h *runHealth) read() RunHealth {
	r := RunHealth{Runs: h.runs.Load(), Failures: h.failures.Load()}
	if n := h.lastSuccess.Load(); n != 0 {
		r.LastSuccess = time.Unix(0, n)
	}
	return r
}

// dispatchTotals adds up what the dispatches of this process did.
type dispatchTotals struct {
	queued, messages, alerted, escalated, closed, updated, failed atomic.Int64
}

func (t *dispatchTotals) add(c DispatchCounts) {
	t.queued.Add(int64(c.Queued))
	t.messages.Add(int64(c.Messages))
	t.alerted.Add(int64(c.Alerted))
	t.escalated.Add(int64(c.Escalated))
	t.closed.Add(int64(c.Closed))
	t.updated.Add(int64(c.Updated))
	t.failed.Add(int64(c.Failed))
}

func (t *dispatchTotals) read() DispatchCounts {
	return DispatchCounts{Queued: int(t.queued.Load()), Messages: int(t.messages.Load()), Alerted: int(t.alerted.Load()),
		Escalated: int(t.escalated.Load()), Closed: int(t.closed.Load()), Updated: int(t.updated.Load()), Failed: int(t.failed.Load())}
}

// Health returns how this process's sweeps went.
func (s *Sweeper) Health() RunHealth { return s.health.read() }

// Health returns how this process's dispatches went.
func (d *Dispatcher) Health() RunHealth { return d.health.read() }

// Totals returns what this process's dispatches did, added up since it started.
func (d *Dispatcher) Totals() DispatchCounts { return d.totals.read() }
