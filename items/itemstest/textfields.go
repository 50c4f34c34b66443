package itemstest

import (
	"errors"
	"strings"
	"testing"

	"github.com/replaysafe/companion/items"
)

// hostile are texts that act on a terminal or on how text is shown: a screen clear, an OSC title (ended
// by BEL), a NUL, an 8-bit CSI (C1) and a right-to-left override.
var hostile = []string{"QT-\x1b[2J", "QT-\x1b]0;owned\x07", "QT-\x00", "QT-\u009b31m", "QT-\u202eKCABDLOG"}

// exerciseTextFields: the fields that name things refuse control characters and bidi overrides, naming the
// field, and nothing is written, single or in a batch; evidence and error messages keep every report with
// those characters escaped.
func exerciseTextFields(t *testing.T, open func(t *testing.T) items.Store) {
	t.Run("NamingFieldsRefuseControlsAndWriteNothing", func(t *testing.T) {
		h := newHarness(t, open)
		fields := map[string]func(*items.BeforeWriteParams, string){
			"reference":    func(p *items.BeforeWriteParams, v string) { p.Reference = v },
			"destination":  func(p *items.BeforeWriteParams, v string) { p.Destination = v },
			"owner":        func(p *items.BeforeWriteParams, v string) { p.Owner = v },
			"workflow":     func(p *items.BeforeWriteParams, v string) { p.Workflow = v },
			"execution_id": func(p *items.BeforeWriteParams, v string) { p.ExecutionID = v },
		}
		for field, set := range fields {
			for _, v := range hostile {
				p := h.params("inv-1", payloadA)
				set(&p, v)
				_, err := h.ledger.BeforeWrite(h.ctx, p)
				expectInvalidField(t, err, field, v)
				ps := []items.BeforeWriteParams{h.params("inv-0", payloadA), p}
				_, err = h.ledger.BeforeWriteMany(h.ctx, h.tenant, ps)
				expectInvalidField(t, err, field, v)
			}
		}
		for _, key := range []string{"inv-0", "inv-1"} {
			if _, err := h.store.Get(h.ctx, h.tenant, key); !errors.Is(err, items.ErrNotFound) {
				t.Fatalf("a refused request wrote %s: %v", key, err)
			}
		}
		// Printable text of any script passes (a tab is a C0 control: refused too).
		h.claim("inv-2", payloadA, reference("Angebot Nr. 742 – Größe: XL (東京) ✓"), execution("exec-1"))
	})
	t.Run("EvidenceAndMessagesAreKeptEscaped", func(t *testing.T) {
		h := newHarness(t, open)
		a := h.claim("inv-1", payloadA)
		p := failedStatus(a.Claim, 500)
		p.ErrorMessage = "upstream said \x1b[31mno\x1b[0m\r\nsee log"
		h.aw("inv-1", p)
		if got, want := h.item("inv-1").FailureMessage, `upstream said \u001b[31mno\u001b[0m\u000d`+"\nsee log"; got != want {
			t.Errorf("failure message stored as %q, want %q", got, want)
		}
		h.unknownAfterTimeout("inv-2", dest(destSearchable))
		if _, err := h.reconcile("inv-2", items.FindingAbsent, "", "searched\tby hand \x1b]52;c;cm0gLXJmIH4=\x07 nothing \u202efound"); err != nil {
			t.Fatalf("reconcile with control characters in its evidence was refused: %v", err)
		}
		last := h.item("inv-2").History
		if got, want := last[len(last)-1].Note, `searched`+"\t"+`by hand \u001b]52;c;cm0gLXJmIH4=\u0007 nothing \u202efound`; got != want {
			t.Errorf("reconcile evidence stored as %q, want %q", got, want)
		}
		h.unknownAfterTimeout("inv-3")
		it, _, err := h.resolve("inv-3", items.ResolveSucceeded, "found it\x1b[2J in the tool", "")
		if err != nil {
			t.Fatalf("resolve with an ESC in its evidence was refused: %v", err)
		}
		if got := it.Resolution.Evidence; got != `found it\u001b[2J in the tool` || strings.ContainsRune(h.item("inv-3").Resolution.Evidence, 0x1b) {
			t.Errorf("resolution evidence stored as %q", got)
		}
		// The same evidence again is the identical repeat it was.
		if _, reason, err := h.resolve("inv-3", items.ResolveSucceeded, "found it\x1b[2J in the tool", ""); err != nil || reason != items.ReasonUnchanged {
			t.Errorf("the repeated resolution: %s, %v; want unchanged", reason, err)
		}
	})
}

func expectInvalidField(t *testing.T, err error, field, value string) {
	t.Helper()
	var e *items.Error
	if !errors.As(err, &e) || e.Code != items.CodeInvalid || len(e.Fields) != 1 || e.Fields[0].Field != field {
		t.Fatalf("%s %q: %v, want invalid_request naming %s", field, value, err, field)
	}
	if strings.ContainsAny(e.Message, "\x1b\x00\x07\u009b\u202e") {
		t.Fatalf("%s %q: the message repeats the character: %q", field, value, e.Message)
	}
}

// exerciseAllowLists: a destination scoped to tenants, and the owners a tenant may name (its own list, else
// the routes' owners), refuse the others with their codes, naming the field, and write nothing.
func exerciseAllowLists(t *testing.T, open func(t *testing.T) items.Store) {
	h := newHarnessWith(t, open, func(c *items.Config) {
		c.Destinations["crm"] = items.Destination{Dedupe: items.DedupeLookup, Tenants: []string{tenantA}}
		c.Owners = map[string][]string{tenantA: {"U0ACME", "#acme-ops"}}
		c.RoutedOwners = []string{"U0ROUTED"}
	})
	b := h.as(tenantB)
	owner := func(o string) bwOpt { return func(p *items.BeforeWriteParams) { p.Owner = o } }
	refused := []struct {
		h     *harness
		key   string
		opts  []bwOpt
		code  items.Code
		field string
	}{
		{b, "b-1", []bwOpt{dest("crm")}, items.CodeDestinationNotAllowed, "destination"},
		{h, "a-1", []bwOpt{owner("U0ROUTED")}, items.CodeOwnerNotAllowed, "owner"}, // acme has a list of its own
		{h, "a-2", []bwOpt{owner("U0ELSE")}, items.CodeOwnerNotAllowed, "owner"},
		{b, "b-2", []bwOpt{owner("U0ACME")}, items.CodeOwnerNotAllowed, "owner"}, // globex may name the routes' owners only
	}
	for _, r := range refused {
		_, err := r.h.ledger.BeforeWrite(r.h.ctx, r.h.params(r.key, payloadA, r.opts...))
		var e *items.Error
		if !errors.As(err, &e) || e.Code != r.code || len(e.Fields) != 1 || e.Fields[0].Field != r.field {
			t.Errorf("%s of %s: %v, want %s naming %s", r.key, r.h.tenant, err, r.code, r.field)
		}
		ps := []items.BeforeWriteParams{r.h.params(r.key+"-first", payloadA), r.h.params(r.key, payloadA, r.opts...)}
		if _, err := r.h.ledger.BeforeWriteMany(r.h.ctx, r.h.tenant, ps); items.ErrorCode(err) != r.code {
			t.Errorf("%s of %s in a batch: %v, want %s", r.key, r.h.tenant, err, r.code)
		}
		for _, key := range []string{r.key, r.key + "-first"} {
			if _, err := r.h.store.Get(r.h.ctx, r.h.tenant, key); !errors.Is(err, items.ErrNotFound) {
				t.Errorf("a refused request wrote %s of %s: %v", key, r.h.tenant, err)
			}
		}
	}
	h.claim("a-3", payloadA, dest("crm"), owner("#acme-ops"))
	h.claim("a-4", payloadA)
	b.claim("b-3", payloadA, owner("U0ROUTED"))
	b.claim("b-4", payloadA, dest(destKeyed))

	// Without any list, every owner is honoured.
	free := newHarness(t, open)
	free.claim("f-1", payloadA, owner("U0ANYONE"))
}
