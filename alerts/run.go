package alerts

import (
	"context"
	"fmt"

	"github.com/robfig/cron/v3"
)

// DefaultSweepEvery is the sweep's default cron schedule (COMPANION_SWEEP_EVERY, --sweep-every).
const DefaultSweepEvery = "@every 30s"

// ParseSchedule checks a cron schedule: five fields ("*/1 * * * *") or a descriptor ("@every 30s",
// "@hourly").
func ParseSchedule(spec string) error {
	if _, err := cron.ParseStandard(spec); err != nil {
		return fmt.Errorf("sweep schedule %q: %w", spec, err)
	}
	return nil
}

// Run sweeps and then dispatches once at start and then on the cron schedule spec, until ctx is done.
// A Kick of the dispatcher (an escalate button) dispatches between ticks. Runs never overlap: a tick
// that comes while one is running is dropped. Errors of a run are logged by the services and do not stop
// the loop. Before returning, Run waits for the message updates the dispatcher started in the background.
//
// When ctx ends (a graceful stop), Run starts no new run. A dispatch in progress ends as RunOnce says: no
// further group is claimed, a claimed group not yet being posted is given back at once (another
// dispatcher, or the restarted process, sends it without waiting for the claim to run out), and a message
// being posted gets the dispatcher's StopGrace to land and be recorded. So Run returns within about
// StopGrace of ctx's end, holding no claim it could give back, and the store may be closed after it.
func Run(ctx context.Context, spec string, s *Sweeper, d *Dispatcher) error {
	if err := ParseSchedule(spec); err != nil {
		return err
	}
	tick := make(chan struct{}, 1)
	c := cron.New()
	if _, err := c.AddFunc(spec, func() {
		select {
		case tick <- struct{}{}:
		default: // a run is pending already
		}
	}); err != nil {
		return fmt.Errorf("sweep schedule %q: %w", spec, err)
	}
	c.Start()
	defer func() {
		<-c.Stop().Done()
		d.Wait()
	}()
	sweep := func() {
		_, _ = s.RunOnce(ctx)
		_, _ = d.RunOnce(ctx)
	}
	sweep()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
			sweep()
		case <-d.kick:
			_, _ = d.RunOnce(ctx)
		}
	}
}
