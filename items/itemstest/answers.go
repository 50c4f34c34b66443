package itemstest

import (
	"testing"

	"github.com/replaysafe/companion/items"
)

// exerciseOwnAnswers: TransitionMany answers each place of a batch "as it was right after its own call",
// and that is an item of the place's own, even where the batch names one key more than once and a later
// call changes nothing: a caller that changes its answer at one place (to build its reply) must not
// change it at another. Both when the first call creates the item and the others keep it, and when no
// call changes a stored item.
func exerciseOwnAnswers(t *testing.T, open func(t *testing.T) items.Store) {
	h := newHarness(t, open)
	keys := []string{"k", "k", "k"}
	claimFirst := func(i int, cur *items.Item) (*items.Item, error) {
		if i > 0 || cur != nil {
			return nil, nil
		}
		return items.NewPrepared(h.params("k", payloadA), h.now())
	}
	keep := func(int, *items.Item) (*items.Item, error) { return nil, nil }
	for _, c := range []struct {
		name string
		fn   func(int, *items.Item) (*items.Item, error)
	}{{"created, then kept", claimFirst}, {"stored, kept", keep}} {
		out, err := h.store.TransitionMany(h.ctx, tenantA, keys, c.fn)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(out) != len(keys) {
			t.Fatalf("%s: %d answers for %d keys", c.name, len(out), len(keys))
		}
		for i, it := range out {
			if it == nil || it.Key != "k" {
				t.Fatalf("%s: answer %d is %+v, want the item k", c.name, i, it)
			}
		}
		out[0].Reference = "changed by the caller"
		for i := 1; i < len(out); i++ {
			if out[i] == out[0] || out[i].Reference == out[0].Reference {
				t.Errorf("%s: changing the answer at place 0 changed the one at place %d", c.name, i)
			}
		}
		if got := h.item("k"); got.Reference == "changed by the caller" {
			t.Errorf("%s: changing an answer changed the stored item", c.name)
		}
	}
}
