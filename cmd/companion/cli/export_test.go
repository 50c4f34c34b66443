package cli

import "time"

// SetSlackCheckTimeout sets how long serve waits for Slack's answer to the token check, until the
// returned function restores it. Tests that change it do not run in parallel.
func SetSlackCheckTimeout(d time.Duration) (restore func()) {
	old := slackCheckTimeout
	slackCheckTimeout = d
	return func() { slackCheckTimeout = old }
}

// SetSlackRecheckEvery sets how often serve asks Slack again about a bot token it could not check at its
// start, until the returned function restores it.
func SetSlackRecheckEvery(d time.Duration) (restore func()) {
	old := slackRecheckEvery
	slackRecheckEvery = d
	return func() { slackRecheckEvery = old }
}

// ReadConfig reads and checks a configuration file as serve does, lookups included.
func ReadConfig(path string, getenv func(string) string) error {
	_, err := readConfig(path, getenv)
	return err
}
