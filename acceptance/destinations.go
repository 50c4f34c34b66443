package acceptance

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// The destinations the suite writes to. A service under test needs exactly this configuration (see
// docs/acceptance.md); the in-process service is started with it.
const (
	// DestinationKey honours the Idempotency-Key header: an unknown outcome is retried with the same key.
	DestinationKey = "acceptance-key"
	// DestinationLookup cannot dedupe but can be searched by business reference: an unknown outcome is
	// reconciled by a lookup.
	DestinationLookup = "acceptance-lookup"
	// DestinationNone can do neither: an unknown outcome waits for a person.
	DestinationNone = "acceptance-none"
	// DestinationRetention honours keys but forgets them after a second: past that, a same-key retry is
	// no longer safe.
	DestinationRetention = "acceptance-retention"
	// DestinationProbe can be searched by business reference, and the service searches it itself (a
	// lookup: in its configuration): an unknown outcome is settled by the service's probes.
	DestinationProbe = "acceptance-probe"
)

// DefaultReceiverURL is where `companion receiver` listens by default: the lookup URL of
// DestinationsYAML.
const DefaultReceiverURL = "http://127.0.0.1:9090"

// LookupSpec is a destination's lookup: the service's own search of the receiver, in the YAML's words.
type LookupSpec struct {
	Path           string   `json:"path"`
	SettleAfter    []string `json:"settle_after"`
	MaxFailedReads int      `json:"max_failed_reads"`
	RetryAfter     string   `json:"retry_after"`
}

// DestinationSpec is one destination's configuration, in the words of the service's YAML.
type DestinationSpec struct {
	Name                string `json:"name"`
	Dedupe              string `json:"dedupe"`
	MaxAttempts         int    `json:"max_attempts"`
	LeaseSeconds        int    `json:"lease_seconds"`
	KeyRetentionSeconds int    `json:"key_retention_seconds"`
	// ServerErrorsNotCommitted is false for every acceptance destination: the sandbox receiver can commit
	// and then answer 500, so a 5xx proves nothing.
	ServerErrorsNotCommitted bool `json:"server_errors_not_committed"`
	// Lookup is set for the destination the service probes itself.
	Lookup *LookupSpec `json:"lookup,omitempty"`
}

// ReceiverRetentionSeconds is how long the receiver keeps keys during the key-retention case: the same
// as DestinationRetention's key_retention_seconds, the longest a ledger may safely trust it.
const ReceiverRetentionSeconds = 1

// Destinations returns the destination configuration the suite expects of the service.
func Destinations() []DestinationSpec {
	return []DestinationSpec{
		{Name: DestinationKey, Dedupe: "key", MaxAttempts: 3, LeaseSeconds: 5, KeyRetentionSeconds: 3600},
		{Name: DestinationLookup, Dedupe: "lookup", MaxAttempts: 3, LeaseSeconds: 5, KeyRetentionSeconds: 3600},
		{Name: DestinationNone, Dedupe: "none", MaxAttempts: 3, LeaseSeconds: 5, KeyRetentionSeconds: 3600},
		{Name: DestinationRetention, Dedupe: "key", MaxAttempts: 3, LeaseSeconds: 5, KeyRetentionSeconds: ReceiverRetentionSeconds},
		{Name: DestinationProbe, Dedupe: "lookup", MaxAttempts: 3, LeaseSeconds: 5, KeyRetentionSeconds: 3600,
			Lookup: &LookupSpec{Path: "records.0.id", SettleAfter: []string{"1s", "3s"}, MaxFailedReads: 2, RetryAfter: "1s"}},
	}
}

// DestinationsYAML returns the destination configuration the suite expects, as the "destinations:"
// section of the service's YAML configuration file, for a receiver at DefaultReceiverURL.
// docs/acceptance.md shows exactly this text.
func DestinationsYAML() string { return DestinationsYAMLFor(DefaultReceiverURL) }

// DestinationsYAMLFor is DestinationsYAML for the receiver at receiverURL, which the probed destination's
// lookup reads.
func DestinationsYAMLFor(receiverURL string) string {
	var b strings.Builder
	b.WriteString("destinations:\n")
	for _, d := range Destinations() {
		fmt.Fprintf(&b, "  %s:\n", d.Name)
		fmt.Fprintf(&b, "    dedupe: %s\n", d.Dedupe)
		fmt.Fprintf(&b, "    max_attempts: %d\n", d.MaxAttempts)
		fmt.Fprintf(&b, "    lease_seconds: %d\n", d.LeaseSeconds)
		fmt.Fprintf(&b, "    key_retention_seconds: %d\n", d.KeyRetentionSeconds)
		fmt.Fprintf(&b, "    server_errors_not_committed: %t\n", d.ServerErrorsNotCommitted)
		if l := d.Lookup; l != nil {
			fmt.Fprintf(&b, "    lookup:\n      url: %s/records?reference={reference}\n", strings.TrimSuffix(receiverURL, "/"))
			fmt.Fprintf(&b, "      found: {status: 200, path: %s}\n", l.Path)
			fmt.Fprintf(&b, "      settle_after: [%s]\n", strings.Join(l.SettleAfter, ", "))
			fmt.Fprintf(&b, "      max_failed_reads: %d\n      retry_after: %s\n", l.MaxFailedReads, l.RetryAfter)
		}
	}
	return b.String()
}

// destination returns the spec of name.
func destination(name string) DestinationSpec {
	for _, d := range Destinations() {
		if d.Name == name {
			return d
		}
	}
	panic("acceptance: no destination " + name)
}

// Settings are the client side of the run: what a workflow would configure on its HTTP step and its
// before-write call. They are recorded in the report's header.
type Settings struct {
	// LeaseSeconds is sent with every before-write (the contract's minimum is 5), so that the lease cases
	// take seconds, not minutes.
	LeaseSeconds int `json:"lease_seconds"`
	// WriteTimeout is the HTTP step's timeout for a write to the destination (write_timeout_ms in JSON).
	WriteTimeout time.Duration `json:"-"`
	// DelayMs is how long the receiver holds its answer for commit_then_delay: longer than WriteTimeout.
	DelayMs int `json:"delay_ms"`
	// RetryAfterSeconds is the Retry-After of the injected 429.
	RetryAfterSeconds int `json:"retry_after_seconds"`
	// Triggers is the number of simultaneous duplicate triggers of the concurrency case.
	Triggers int `json:"triggers"`
}

// settingsJSON is Settings as JSON, with the timeout in milliseconds.
type settingsJSON struct {
	plainSettings
	WriteTimeoutMs int64 `json:"write_timeout_ms"`
}

type plainSettings Settings

// MarshalJSON writes the write timeout as write_timeout_ms.
func (s Settings) MarshalJSON() ([]byte, error) {
	return json.Marshal(settingsJSON{plainSettings(s), s.WriteTimeout.Milliseconds()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *Settings) UnmarshalJSON(b []byte) error {
	var v settingsJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = Settings(v.plainSettings)
	s.WriteTimeout = time.Duration(v.WriteTimeoutMs) * time.Millisecond
	return nil
}

// DefaultSettings are the settings of a normal run.
func DefaultSettings() Settings {
	// The write timeout leaves a loaded CI machine room to answer a normal write; the delay is three
	// times it, so that commit_then_delay is a timeout for the client whatever the load.
	return Settings{LeaseSeconds: 5, WriteTimeout: 2 * time.Second, DelayMs: 6000, RetryAfterSeconds: 1, Triggers: 50}
}

// configurationHash is the SHA-256 (first 16 hex characters) of everything that decides what the run
// expects: the destination configuration, the client settings and the receiver's mode. Two reports with
// the same hash ran the same configuration.
func configurationHash(s Settings, receiverMode ReceiverMode) string {
	b, _ := json.Marshal(struct {
		Destinations []DestinationSpec `json:"destinations"`
		Settings     Settings          `json:"settings"`
		Receiver     ReceiverMode      `json:"receiver"`
	}{Destinations(), s, receiverMode})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
