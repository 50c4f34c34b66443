package cli

import (
	"encoding/json"
	"io"
	"time"

	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/items"
)

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

// WriteSeries prints the answer of GET /v1/stats/series (its JSON) as companion stats --since does.
func WriteSeries(w io.Writer, answer []byte, destination string) error {
	var s handlers.SeriesAnswer
	if err := json.Unmarshal(answer, &s); err != nil {
		return err
	}
	return writeSeries(w, &s, destination)
}

// LedgerConfig reads a configuration file as serve does and returns the ledger's configuration.
func LedgerConfig(path string, getenv func(string) string) (items.Config, error) {
	f, err := readConfig(path, getenv)
	return f.cfg, err
}
