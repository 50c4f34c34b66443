package items

import (
	"fmt"
	"slices"
	"time"
)

// Defaults of a destination's configuration.
const (
	DefaultMaxAttempts         = 3
	DefaultLeaseSeconds        = 300
	DefaultKeyRetentionSeconds = 86400
	MinLeaseSeconds            = 5
	MaxLeaseSeconds            = 86400
	// MaxResultBytes is the largest result the ledger stores; a larger one is dropped, never the success.
	MaxResultBytes = 4096
)

// Destination is what the ledger knows about one destination: how it dedupes, how many attempts an item
// gets, how long it keeps idempotency keys, and who owns its items.
type Destination struct {
	// Dedupe is used when a request names none. Default none.
	Dedupe Dedupe
	// MaxAttempts is the attempt budget of an item. Default 3.
	MaxAttempts int
	// LeaseSeconds is the claim lease when a request names none. Default 300.
	LeaseSeconds int
	// KeyRetentionSeconds is how long the destination keeps idempotency keys; past it a same-key retry is
	// no longer safe. Default 86400.
	KeyRetentionSeconds int
	// ServerErrorsNotCommitted is a stronger receiver contract: the destination documents that a 5xx
	// answer means nothing was committed, so a 5xx is a retryable failure instead of unknown.
	ServerErrorsNotCommitted bool
	// Owner is who gets alerts about this destination's items (a Slack user or channel id).
	Owner string
	// EscalateTo is who gets an alert escalated from Owner.
	EscalateTo string
	// EscalateAfter is how long an unknown or failed item may wait with nobody acting before it needs a
	// person (and an alert escalates). Zero means never.
	EscalateAfter time.Duration
	// CheckHint tells the owner where to look ("search the billing tool for the quote reference").
	CheckHint string
	// Retention is how long a settled item is kept after its last change (see Retention). Default
	// DefaultRetention; never shorter than KeyRetentionSeconds (Config.Check).
	Retention time.Duration
	// Tenants are the tenants whose requests may name this destination; empty: every tenant. Another
	// tenant's before-write naming it is refused with destination_not_allowed, and nothing is written: the
	// destination's lookup reads with credentials meant for its tenants only.
	Tenants []string
}

// Config is the ledger's configuration.
type Config struct {
	// Defaults apply to destinations without their own entry, and fill the zero fields of those with one.
	Defaults Destination
	// Destinations by name.
	Destinations map[string]Destination
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// MaxClockSkew is how far the clocks of two processes sharing a store may differ. On a store several
	// processes share (a SharedStore), a lease counts as expired only MaxClockSkew after its end: judged on
	// this process's clock where the store has no clock of its own, and, where it has one, as the margin
	// for what a reading of it cannot tell (its round trip, and after a failover another server's clock).
	// The service's default is DefaultMaxClockSkew; zero means none.
	MaxClockSkew time.Duration
	// SeriesHoursKept and SeriesDaysKept are how long a store that keeps the measures over time
	// (SeriesStore) keeps its hour rows and its day rows, counted from the start of their bucket, before
	// Retention removes them; DefaultSeriesHoursKept and DefaultSeriesDaysKept when 0.
	SeriesHoursKept, SeriesDaysKept time.Duration
	// Owners are the owners (Slack users or channels) each tenant's requests may name in owner, by tenant.
	// A tenant without a list of its own may name the owners in RoutedOwners; when that is empty too, any
	// owner. A request naming another is refused with owner_not_allowed, and nothing is written.
	Owners map[string][]string
	// RoutedOwners are the owners the alert routing names (its default owner, routes and destinations):
	// the owners a tenant without a list of its own may name.
	RoutedOwners []string
}

// SeriesKept returns how long the hour rows and the day rows of the measures over time are kept.
func (c Config) SeriesKept() (hours, days time.Duration) {
	hours, days = c.SeriesHoursKept, c.SeriesDaysKept
	if hours <= 0 {
		hours = DefaultSeriesHoursKept
	}
	if days <= 0 {
		days = DefaultSeriesDaysKept
	}
	return hours, days
}

// DefaultMaxClockSkew is the service's default Config.MaxClockSkew (max_clock_skew).
const DefaultMaxClockSkew = 2 * time.Second

// Destination returns the configuration of the named destination, with defaults filled in.
func (c Config) Destination(name string) Destination {
	d := c.Destinations[name]
	def := c.Defaults
	if d.Dedupe == "" {
		d.Dedupe = def.Dedupe
	}
	if d.Dedupe == "" {
		d.Dedupe = DedupeNone
	}
	if d.MaxAttempts == 0 {
		d.MaxAttempts = def.MaxAttempts
	}
	if d.MaxAttempts == 0 {
		d.MaxAttempts = DefaultMaxAttempts
	}
	if d.LeaseSeconds == 0 {
		d.LeaseSeconds = def.LeaseSeconds
	}
	if d.LeaseSeconds == 0 {
		d.LeaseSeconds = DefaultLeaseSeconds
	}
	if d.KeyRetentionSeconds == 0 {
		d.KeyRetentionSeconds = def.KeyRetentionSeconds
	}
	if d.KeyRetentionSeconds == 0 {
		d.KeyRetentionSeconds = DefaultKeyRetentionSeconds
	}
	if d.Owner == "" {
		d.Owner = def.Owner
	}
	if d.EscalateTo == "" {
		d.EscalateTo = def.EscalateTo
	}
	if d.EscalateAfter == 0 {
		d.EscalateAfter = def.EscalateAfter
	}
	if d.CheckHint == "" {
		d.CheckHint = def.CheckHint
	}
	if d.Retention == 0 {
		d.Retention = def.Retention
	}
	if d.Retention == 0 {
		d.Retention = DefaultRetention
	}
	if d.Tenants == nil {
		d.Tenants = def.Tenants
	}
	if !d.ServerErrorsNotCommitted {
		d.ServerErrorsNotCommitted = def.ServerErrorsNotCommitted
	}
	return d
}

// Check returns a problem of the destination named name (the defaults when name is empty), with defaults
// filled in, or "": a retention shorter than the key retention would forget an item while a same-key
// replay of it could still come, and answer it proceed.
func (c Config) Check(name string) string {
	d := c.Destination(name)
	if d.Retention < time.Duration(d.KeyRetentionSeconds)*time.Second {
		return fmt.Sprintf("retention %s is shorter than key_retention_seconds %d: an item would be forgotten while a replay of it may still come",
			d.Retention, d.KeyRetentionSeconds)
	}
	return ""
}

// Error codes of the allow-lists: a request naming a destination or an owner its tenant may not name.
const (
	CodeDestinationNotAllowed Code = "destination_not_allowed"
	CodeOwnerNotAllowed       Code = "owner_not_allowed"
)

// OwnersOf returns the owners the tenant's requests may name, and false when they may name any.
func (c Config) OwnersOf(tenant string) ([]string, bool) {
	if own, ok := c.Owners[tenant]; ok && len(own) > 0 {
		return own, true
	}
	return c.RoutedOwners, len(c.RoutedOwners) > 0
}

// DestinationAllows reports whether the tenant may name the destination (its Tenants, or the defaults').
func (c Config) DestinationAllows(destination, tenant string) bool {
	if destination == "" {
		destination = "default"
	}
	d := c.Destination(destination)
	return len(d.Tenants) == 0 || slices.Contains(d.Tenants, tenant)
}

// checkAllowed refuses a before-write whose destination or owner its tenant may not name.
func (c Config) checkAllowed(p BeforeWriteParams) error {
	if !c.DestinationAllows(p.Destination, p.Tenant) {
		problem := "this tenant may not use this destination: its configuration's tenants list does not name " + p.Tenant
		return &Error{Code: CodeDestinationNotAllowed, Message: "destination: " + problem,
			Fields: []FieldProblem{{Field: "destination", Problem: problem}}}
	}
	if p.Owner == "" {
		return nil
	}
	if owners, limited := c.OwnersOf(p.Tenant); limited && !slices.Contains(owners, p.Owner) {
		problem := "is not an owner this tenant may name: name one of the owners configured for it " +
			"(tenants." + p.Tenant + ".owners, else the owners the alert routes name), or leave owner out and let the routes choose"
		return &Error{Code: CodeOwnerNotAllowed, Message: "owner: " + problem, Fields: []FieldProblem{{Field: "owner", Problem: problem}}}
	}
	return nil
}
