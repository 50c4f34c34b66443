// Package alerts tells a named person about the items that need one, and lets them settle those items
// with evidence.
//
// It holds the background services that make an unknown outcome a state somebody handles instead of a
// failure nobody reads:
//
//   - the Sweeper (run on a cron schedule, or once) records expired leases as unknown and marks the items
//     that need a person;
//   - the Dispatcher reads the alert outbox, routes each alert to an owner (Routing), groups alerts into one
//     message per owner and batch, claims each group with a guarded update before sending (so several
//     replicas never send the same alert), records where the message landed, and escalates alerts nobody
//     acted on;
//   - a Notifier delivers the messages: Slack (the only slack-go importer in the module) or, without Slack
//     settings, the log;
//   - Actions answers Slack's interactivity requests: the resolve and escalate buttons and the evidence
//     modal, resolving through the same Resolve as the operator API.
//
// The sweeper lives here, beside the dispatcher it feeds, because the top-level packages are prescribed.
package alerts

import (
	"fmt"
	"path"
	"time"

	"github.com/replaysafe/companion/items"
)

// Routing decides who hears about an item that needs a person. It is read from the "alerts" section of
// the YAML configuration; destinations add their own owner, escalation and check hint (items.Destination).
type Routing struct {
	// DefaultOwner gets the alerts that neither a route nor the destination gives an owner.
	DefaultOwner string `yaml:"default_owner"`
	// Routes are checked in order; the first that matches the item gives its owner.
	Routes []Route `yaml:"routes"`
}

// Route sends the alerts of matching items to an owner. Empty match fields match anything.
type Route struct {
	// Workflow is a glob (path.Match syntax: * ? [...]) over the item's workflow label.
	Workflow string `yaml:"workflow"`
	// Destination is the item's destination name.
	Destination string `yaml:"destination"`
	// Owner is a Slack user id (the alert comes as a direct message) or channel id.
	Owner string `yaml:"owner"`
	// EscalateTo and EscalateAfter override the destination's.
	EscalateTo    string        `yaml:"escalate_to"`
	EscalateAfter time.Duration `yaml:"escalate_after"`
	// CheckHint overrides the destination's: where the owner looks ("search the billing tool for the
	// quote reference").
	CheckHint string `yaml:"check_hint"`
}

// Target is where an item's alert goes and what it says about checking.
type Target struct {
	Owner         string
	EscalateTo    string
	EscalateAfter time.Duration
	CheckHint     string
}

// Validate reports the first route with an unusable workflow glob or without anything to say.
func (r Routing) Validate() error {
	for i, rt := range r.Routes {
		if _, err := path.Match(rt.Workflow, ""); err != nil {
			return fmt.Errorf("alerts.routes[%d].workflow: %q is not a valid glob", i, rt.Workflow)
		}
		if rt.Owner == "" && rt.EscalateTo == "" && rt.CheckHint == "" && rt.EscalateAfter == 0 {
			return fmt.Errorf("alerts.routes[%d]: names no owner, escalate_to, escalate_after or check_hint", i)
		}
		if rt.EscalateAfter < 0 {
			return fmt.Errorf("alerts.routes[%d].escalate_after: must not be negative", i)
		}
	}
	return nil
}

// Route returns the target of an item's alert. The owner is, first found: the owner the request named
// (a per-request owner overrides every route), the first matching route's, the destination's, the
// default. Escalation and check hint come from the first matching route that sets them, else from the
// destination.
func (r Routing) Route(it *items.Item, dest items.Destination) Target {
	t := Target{Owner: it.Owner}
	for _, rt := range r.Routes {
		if !rt.matches(it) {
			continue
		}
		if t.Owner == "" {
			t.Owner = rt.Owner
		}
		if t.EscalateTo == "" {
			t.EscalateTo = rt.EscalateTo
		}
		if t.EscalateAfter == 0 {
			t.EscalateAfter = rt.EscalateAfter
		}
		if t.CheckHint == "" {
			t.CheckHint = rt.CheckHint
		}
	}
	if t.Owner == "" {
		t.Owner = dest.Owner
	}
	if t.Owner == "" {
		t.Owner = r.DefaultOwner
	}
	if t.EscalateTo == "" {
		t.EscalateTo = dest.EscalateTo
	}
	if t.EscalateAfter == 0 {
		t.EscalateAfter = dest.EscalateAfter
	}
	if t.CheckHint == "" {
		t.CheckHint = dest.CheckHint
	}
	return t
}

func (rt Route) matches(it *items.Item) bool {
	if rt.Destination != "" && rt.Destination != it.Destination {
		return false
	}
	if rt.Workflow == "" {
		return true
	}
	ok, err := path.Match(rt.Workflow, it.Workflow)
	return err == nil && ok
}
