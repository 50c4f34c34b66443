package sqlitestore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// TestFailedGroupLeavesNoClaim: a batch of claims (four new items, three prepared ones) whose transaction
// fails after its k-th statement, or at its commit, answers ErrUnavailable and leaves nothing: the new
// items do not exist, the prepared ones are prepared, no claim is held. SQLite needs no undo for it: the
// group is one transaction, rolled back whole. The same batch then proceeds in full, at attempt 1.
func TestFailedGroupLeavesNoClaim(t *testing.T) {
	ctx := t.Context()
	s := openTemp(t)
	l, err := items.NewLedger(ctx, s, items.Config{})
	if err != nil {
		t.Fatal(err)
	}
	fp := strings.Repeat("c", 64)
	// An update per prepared item, the inserts of the four new ones, the series' hour and day rows of the
	// claims, the commit.
	inserts, rows := 0, 4
	for _, size := range insertRows {
		inserts += rows / size
		rows %= size
	}
	statements := 3 + inserts + 2 + 1
	for k := 1; k <= statements; k++ {
		var ps []items.BeforeWriteParams
		for i := range 3 {
			p := items.BeforeWriteParams{Tenant: "acme", Key: fmt.Sprintf("k%d-prepared-%d", k, i), Fingerprint: fp}
			it, err := items.NewPrepared(p, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Transition(ctx, "acme", p.Key, func(*items.Item) (*items.Item, error) { return it, nil }); err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		for i := range 4 {
			ps = append(ps, items.BeforeWriteParams{Tenant: "acme", Key: fmt.Sprintf("k%d-new-%d", k, i), Fingerprint: fp})
		}
		var ops []string
		s.fault = func(op string) error {
			ops = append(ops, op)
			if len(ops) == k {
				return errors.New("injected failure")
			}
			return nil
		}
		_, err := l.BeforeWriteMany(ctx, "acme", ps)
		s.fault = nil
		if !errors.Is(err, items.ErrUnavailable) {
			t.Fatalf("failure at %d (%s): err = %v, want ErrUnavailable", k, strings.Join(ops, ", "), err)
		}
		for _, p := range ps {
			it, err := l.Get(ctx, "acme", p.Key)
			switch {
			case errors.Is(err, items.ErrNotFound) && strings.Contains(p.Key, "new"):
			case err != nil:
				t.Fatalf("%s: %v", p.Key, err)
			case it.State != items.StatePrepared || it.Claim != "" || it.Attempt != 0:
				t.Fatalf("failure at %d (%s): %s is left %s, attempt %d, claim %q", k, ops[k-1], p.Key, it.State, it.Attempt, it.Claim)
			}
		}
		answers, err := l.BeforeWriteMany(ctx, "acme", ps)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range answers {
			if a.Decision != items.Proceed || a.Attempt != 1 {
				t.Fatalf("after the failure: %s got %s/%s attempt %d, want proceed at attempt 1", a.Key, a.Decision, a.Reason, a.Attempt)
			}
		}
		if k == statements && ops[k-1] != "commit" {
			t.Fatalf("the last fault point was %s, want the commit: %s", ops[k-1], strings.Join(ops, ", "))
		}
	}
}
