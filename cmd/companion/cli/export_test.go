package cli

import "time"

// SetSlackCheckTimeout sets how long serve waits for Slack's answer to the token check, until the
// returned function restores it. Tests that change it do not run in parallel.
func SetSlackCheckTimeout(d time.Duration) (restore func()) {
	old := slackCheckTimeout
	slackCheckTimeout = d
	return func() { slackCheckTimeout = old }
}
