package sqlitestore

import (
	"context"
	"errors"
	"fmt"

	"github.com/replaysafe/companion/items"
)

// Group commit. Every transition of the ledger goes through one committer goroutine, which takes all the
// transitions waiting at that moment and decides them in one transaction: one commit, one fsync, for as
// many callers as arrived while the previous commit was on disk. A caller alone waits for nothing more
// than before; 32 callers at once share their fsyncs instead of queueing for the writer's connection one
// commit each. The group behaves as its transitions run one after the other in arrival order: each
// decides against the state the earlier ones left, a transition whose fn fails leaves no trace (the
// others go on), and if the commit fails every caller of the group gets ErrUnavailable, as none of them
// was recorded.

// groupKeys bounds a group: a transition of more keys runs alone, and a group is closed once it holds
// this many keys, so that one commit never grows without bound.
const groupKeys = 2000

// errClosed answers a transition that arrives after Close.
var errClosed = errors.New("the store is closed")

// transition is one caller's TransitionMany, handed to the committer.
type transition struct {
	ctx    context.Context
	tenant string
	keys   []string
	fn     func(i int, cur *items.Item) (*items.Item, error)
	// out and err are the answer, valid once done is closed.
	out  []*items.Item
	err  error
	done chan struct{}
}

// TransitionMany implements items.Store: the batch's items are decided in order, each against the state
// the earlier ones left, and written in one transaction and one fsync (shared with the transitions of
// other callers that arrive at the same time); if fn fails for any item, nothing of the batch is written.
//
// fn decides every item first (in memory); only then is each key's final state written, new items many
// rows to an INSERT. A batch of 500 new claims is then a handful of statements instead of 500, and each
// statement's fixed cost (binding, stepping, its journal) is paid a few times instead of once per item.
func (s *Store) TransitionMany(ctx context.Context, tenant string, keys []string, fn func(i int, cur *items.Item) (*items.Item, error)) ([]*items.Item, error) {
	t := &transition{ctx: ctx, tenant: tenant, keys: keys, fn: fn, done: make(chan struct{})}
	select {
	case s.transitions <- t:
	case <-s.stop:
		return nil, unavailable(errClosed)
	case <-ctx.Done():
		return nil, unavailable(ctx.Err())
	}
	// Once taken, the transition is waited for even if ctx ends: it may be committed already.
	<-t.done
	return t.out, t.err
}

// commitGroups is the committer: until Close, it takes the transitions waiting and commits them as one,
// and checkpoints the write-ahead log after the answers when it has grown by checkpointPages.
func (s *Store) commitGroups() {
	defer close(s.committerDone)
	for {
		var first *transition
		select {
		case first = <-s.transitions:
		case <-s.stop:
			return
		}
		group := []*transition{first}
		for n := len(first.keys); n < groupKeys; {
			select {
			case t := <-s.transitions:
				group = append(group, t)
				n += len(t.keys)
				continue
			default:
			}
			break
		}
		s.commitGroupRecovering(group)
		for _, t := range group {
			close(t.done)
		}
		if s.grown >= checkpointPages {
			s.grown = 0
			_, _ = s.w.ExecContext(context.Background(), `PRAGMA wal_checkpoint(PASSIVE)`)
		}
	}
}

// commitGroupRecovering is commitGroup, turning a panic (a bug in a decision or in the driver) into an
// error for the group's callers: in a request's own goroutine it would have become that request's 500, and
// here it would stop the committer, and every later write with it.
func (s *Store) commitGroupRecovering(group []*transition) {
	defer func() {
		if r := recover(); r != nil {
			failGroup(group, fmt.Errorf("sqlitestore: a transition panicked: %v", r))
		}
	}()
	s.commitGroup(group)
}

// failGroup answers err to every transition of group that has no answer of its own yet.
func failGroup(group []*transition, err error) {
	for _, t := range group {
		if t.err == nil {
			t.out, t.err = nil, err
		}
	}
}

// itemID names a tenant's key inside a group, which may span tenants.
func itemID(tenant, key string) string { return tenant + "\x00" + key }

// commitGroup decides the group's transitions in one transaction and answers each.
func (s *Store) commitGroup(group []*transition) {
	fail := func(err error) { failGroup(group, err) }
	// A caller that gave up before its turn is not decided; the others' contexts do not end the group.
	ctx := context.Background()
	for _, t := range group {
		if err := t.ctx.Err(); err != nil {
			t.err = unavailable(err)
		}
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		fail(unavailable(err))
		return
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	// Every item (nil: none) as the transaction found it, and as the earlier transitions left it.
	found := map[string]*items.Item{}
	seen := map[string]*items.Item{}
	var changed []string // items with a new state, in the order of their first change
	for _, t := range group {
		if t.err != nil {
			continue
		}
		var unread []string
		for _, k := range t.keys {
			if _, ok := found[itemID(t.tenant, k)]; !ok {
				unread = append(unread, k)
			}
		}
		if len(unread) > 0 {
			stored, err := s.readMany(ctx, tx, t.tenant, unread)
			if err != nil {
				fail(err)
				return
			}
			for k, it := range stored {
				id := itemID(t.tenant, k)
				found[id], seen[id] = it, it
			}
		}
		if err := decide(t, found, seen, &changed); err != nil {
			t.out, t.err = nil, err
		}
	}
	if len(changed) == 0 {
		return
	}
	if err := s.write(ctx, tx, found, seen, changed); err != nil {
		fail(err)
		return
	}
	if err := tx.Commit(); err != nil {
		fail(unavailable(err))
		return
	}
	s.commits.Add(1)
	s.grown += estimatedPages(len(changed))
}

// decide runs t's fn over its keys against seen, recording each new state there and each item changed
// for the first time (its state in seen is still the one found) in changed. If fn fails, seen and changed
// are left as they were and the error is returned.
func decide(t *transition, found, seen map[string]*items.Item, changed *[]string) error {
	type undo struct {
		id   string
		prev *items.Item
	}
	var undos []undo
	from := len(*changed)
	rollback := func() {
		for i := len(undos) - 1; i >= 0; i-- {
			seen[undos[i].id] = undos[i].prev
		}
		*changed = (*changed)[:from]
	}
	t.out = make([]*items.Item, len(t.keys))
	for i, key := range t.keys {
		id := itemID(t.tenant, key)
		cur := seen[id]
		var arg *items.Item
		if cur != nil {
			arg = cur.Clone()
		}
		next, err := t.fn(i, arg)
		if err == nil && next != nil {
			err = advance(cur, next)
		}
		if err != nil {
			rollback()
			return err
		}
		if next == nil {
			t.out[i] = cur
			continue
		}
		undos = append(undos, undo{id, cur})
		if cur == found[id] {
			*changed = append(*changed, id)
		}
		t.out[i] = next
		seen[id] = next
	}
	return nil
}
