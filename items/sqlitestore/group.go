package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/replaysafe/companion/items"
)

// Group commit. Every transition of the ledger goes through one committer goroutine, which takes all the
// transitions waiting at that moment and decides them in one transaction: one commit, one fsync, for as
// many callers as arrived while the previous commit was on disk. A caller alone waits for nothing more
// than before; 32 callers at once share their fsyncs instead of queueing for the writer's connection one
// commit each. The group behaves as its transitions run one after the other in arrival order: each
// decides against the state the earlier ones left, and a fault of one transition stays with its caller:
// one whose fn fails or panics, whose item is stored corrupt, or whose new state cannot be encoded leaves
// no trace and answers its own error (a 500), while the others get their own answers, as if it had not
// been in the group. Only if the transaction itself fails (a read, a write, the commit) does every caller
// of the group get ErrUnavailable, as none of them was recorded.

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
	// fault is this transition's own failure, which stays its answer when the rest of its group is
	// decided again.
	fault error
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
		start := time.Now()
		s.commitGroupRecovering(group)
		s.busy.Add(int64(time.Since(start)))
		s.decided.Add(int64(len(group)))
		for _, t := range group {
			close(t.done)
		}
		if len(s.unprepared) > 0 {
			s.prepareUpdates()
		}
		if s.grown >= checkpointPages {
			s.grown = 0
			_, _ = s.w.ExecContext(context.Background(), `PRAGMA wal_checkpoint(PASSIVE)`)
		}
	}
}

// commitGroupRecovering is commitGroup, turning a panic outside any one transition's decision (a bug in
// the driver or in this file) into an error for the group's callers: in a request's own goroutine it would
// have become that request's 500, and here it would stop the committer, and every later write with it.
func (s *Store) commitGroupRecovering(group []*transition) {
	defer func() {
		if r := recover(); r != nil {
			s.forgetWrites() // whatever the panic left undone, the database is read again
			failGroup(group, fmt.Errorf("sqlitestore: a group commit panicked: %v", r))
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

// WriterTotals are what the committer has done since Open: it is the ledger's one writer, so when it is
// busy nearly all the time, it is what limits the writes, whatever the service's other cores do.
type WriterTotals struct {
	// Busy is the time spent on groups: reading their items, deciding, writing and committing them;
	// Committing the part spent committing (writing the write-ahead log, and its fsync).
	Busy, Committing time.Duration
	// Commits counts the groups committed; Transitions the callers' transitions taken (a batch call is
	// one), committed or answered an error.
	Commits, Transitions int64
}

// ItemCacheTotals are what the committer's item cache (cache.go) has done since Open.
type ItemCacheTotals struct {
	// Bound is how many items it keeps at most (0: there is no cache); Items how many it holds now.
	Bound, Items int
	// Hits counts the items the committer's groups found in the cache, Misses those it read from the
	// database (all of them, without a cache): an item named by a group is one lookup, however many of
	// its transitions name it.
	Hits, Misses int64
}

// ItemCacheTotals returns the item cache's totals since Open.
func (s *Store) ItemCacheTotals() ItemCacheTotals {
	t := ItemCacheTotals{Hits: s.cacheHits.Load(), Misses: s.cacheMisses.Load()}
	if s.cache != nil {
		t.Bound, t.Items = s.cache.Bound(), s.cache.Len()
	}
	return t
}

// WriterTotals returns the committer's totals since Open.
func (s *Store) WriterTotals() WriterTotals {
	return WriterTotals{Busy: time.Duration(s.busy.Load()), Committing: time.Duration(s.committing.Load()),
		Commits: s.commits.Load(), Transitions: s.decided.Load()}
}

// itemID names a tenant's key inside a group, which may span tenants.
func itemID(tenant, key string) string { return tenant + "\x00" + key }

// itemFault is a failure that belongs to one item of a group (its new state cannot be encoded) rather than
// to the group's transaction: it fails the transition that made that state, and the group is decided again
// without it.
type itemFault struct {
	id  string
	err error
}

func (f *itemFault) Error() string { return f.err.Error() }

// commitGroup decides the group's transitions in one transaction and answers each. One transition's fault
// stays with it: a decision that fails or panics, or an item stored corrupt, answers that transition's
// caller alone (its changes are undone in memory, the others go on); a state that cannot be encoded fails
// the transition that made it, and the group is decided again, in a new transaction, without it. Only a
// failure of the transaction itself (reading, writing, committing) answers every caller ErrUnavailable.
func (s *Store) commitGroup(group []*transition) {
	// A caller that gave up before its turn is not decided; the others' contexts do not end the group.
	for _, t := range group {
		if err := t.ctx.Err(); err != nil {
			t.fault = unavailable(err)
		}
	}
	for {
		for _, t := range group {
			t.out, t.err = nil, t.fault
		}
		var fault *itemFault
		if !errors.As(s.tryGroup(group), &fault) {
			return
		}
		// Blame the first transition that made a state of the item that cannot be encoded (a later one
		// may only have carried it on), and decide the others again without it.
		blamed := false
		for _, t := range group {
			for i, k := range t.keys {
				if t.err == nil && !blamed && itemID(t.tenant, k) == fault.id && t.out[i] != nil {
					if _, _, err := document(nil, t.out[i]); err != nil {
						t.fault, blamed = err, true
					}
				}
			}
		}
		if !blamed {
			failGroup(group, fault.err)
			return
		}
	}
}

// tryGroup decides the group's transitions that have no fault in one transaction and answers each. It
// returns an *itemFault, with the transaction rolled back, when one item's new state cannot be written;
// every other failure it answers itself.
func (s *Store) tryGroup(group []*transition) error {
	// A failed group drops the whole cache: whatever it wrote is undone, or (a commit that failed after
	// all) may not be, and the database alone knows. Failures are rare; reading again is cheap.
	fail := func(err error) {
		s.forgetWrites()
		failGroup(group, err)
	}
	ctx := context.Background()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		fail(unavailable(err))
		return nil
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	// Every item (nil: none) as the transaction found it, and as the earlier transitions left it; the
	// items whose stored document is corrupt.
	gen := s.cache.Generation()
	found, stored, bad, hits, repeats, err := s.readGroup(ctx, tx, group)
	if err != nil {
		fail(err)
		return nil
	}
	seen := maps.Clone(found)
	var changed []string // items with a new state, in the order of their first change
	for _, t := range group {
		if t.err != nil {
			continue
		}
		if bad != nil {
			if t.err = corruptKey(t, bad); t.err != nil {
				continue
			}
		}
		if err := decide(t, found, seen, &changed); err != nil {
			t.out, t.err = nil, err
		}
	}
	unshare(group, found, hits, repeats)
	if len(changed) == 0 {
		return nil
	}
	rows, err := s.write(ctx, tx, found, stored, seen, changed)
	if err != nil {
		var fault *itemFault
		if errors.As(err, &fault) {
			s.forgetWrites()
			return fault
		}
		fail(err)
		return nil
	}
	// A failed commit writes nothing: the transaction is one, so a group answered ErrUnavailable leaves
	// no claim behind, whichever of its statements failed (TestFailedGroupLeavesNoClaim).
	if err := s.injected("commit"); err != nil {
		fail(unavailable(err))
		return nil
	}
	start := time.Now()
	err = tx.Commit()
	s.committing.Add(int64(time.Since(start)))
	if err != nil {
		fail(unavailable(err))
		return nil
	}
	s.commits.Add(1)
	s.grown += estimatedPages(len(changed))
	if s.cache != nil {
		final := make([]*items.Item, len(changed))
		for i, id := range changed {
			final[i] = seen[id]
		}
		s.cache.PutAll(gen, changed, final, rows)
	}
	return nil
}

// forgetWrites drops what the committer remembers of its own writes, the cache and the last id it gave, so
// that the next group reads both from the database: after a group that failed or panicked, what it wrote
// is undone, or (a commit that failed after all) may not be.
func (s *Store) forgetWrites() {
	s.cache.DropAll()
	s.lastID = -1
}

// unshare gives every answer an item of its own, as callers may change what they are given. An answer is
// copied when it is an item of the cache (found, where a transition changed nothing), or when an earlier
// answer of the group, of another transition or of the same one at another place, was the same item: a
// call that changed nothing is answered the state an earlier call of its key left, or the item as found
// (32 callers racing for one key make such a group, and so does a batch that names a key twice). The
// first answered an item that is not the cache's keeps it. Without a key named twice in the group (repeats
// false) only the cache's items can be shared.
func unshare(group []*transition, found map[string]*items.Item, hits int, repeats bool) {
	if hits == 0 && !repeats {
		return
	}
	var given map[*items.Item]bool
	if repeats {
		given = make(map[*items.Item]bool)
	}
	for _, t := range group {
		if t.err != nil {
			continue
		}
		for i, k := range t.keys {
			it := t.out[i]
			if it == nil {
				continue
			}
			if hits > 0 && it == found[itemID(t.tenant, k)] {
				t.out[i] = it.Clone()
				continue
			}
			if given == nil {
				continue
			}
			if given[it] {
				t.out[i] = it.Clone()
				continue
			}
			given[it] = true
		}
	}
}

// readGroup reads every item the group's transitions (those without a fault) name, before any of them
// is decided: one readMany per tenant for the whole group rather than one per transition, as nothing is
// written until every transition is decided. 32 single-item transitions are then one statement instead of
// 32, each with its own binding, stepping and rows. found has every item that was read (nil: none), stored
// the rows of those found; bad, nil when empty, those whose stored document is corrupt. The items the
// cache holds (hits of them) are taken from there, not read: found then holds the cache's own items, which
// no one may change or hand out (unshare). repeats says that an item is named more than once in the group
// (by two transitions, or twice by one).
func (s *Store) readGroup(ctx context.Context, tx *sql.Tx, group []*transition) (found map[string]*items.Item, stored map[string]*written, bad map[string]error, hits int, repeats bool, err error) {
	var tenants []string
	keys := map[string][]string{} // per tenant, its distinct keys in the order of their first mention
	queued := map[string]bool{}
	var ids []string // the items' ids, each once
	for _, t := range group {
		if t.err != nil {
			continue
		}
		for _, k := range t.keys {
			id := itemID(t.tenant, k)
			if queued[id] {
				repeats = true
				continue
			}
			queued[id] = true
			ids = append(ids, id)
			if _, ok := keys[t.tenant]; !ok {
				tenants = append(tenants, t.tenant)
			}
			keys[t.tenant] = append(keys[t.tenant], k)
		}
	}
	found = make(map[string]*items.Item, len(queued))
	stored = make(map[string]*written, len(queued))
	if s.cache != nil {
		s.cache.Lookup(ids, func(id string, e *cached) {
			found[id], stored[id] = e.Item, e.Row
			hits++
		})
		if hits > 0 {
			for _, tenant := range tenants {
				keys[tenant] = slices.DeleteFunc(keys[tenant], func(k string) bool { return found[itemID(tenant, k)] != nil })
			}
		}
	}
	s.cacheHits.Add(int64(hits))
	s.cacheMisses.Add(int64(len(ids) - hits))
	for _, tenant := range tenants {
		if len(keys[tenant]) == 0 {
			continue
		}
		its, rows, corrupt, err := s.readMany(ctx, tx, tenant, keys[tenant])
		s.groupReads.Add(1)
		if err != nil {
			return nil, nil, nil, 0, false, err
		}
		for k, it := range its {
			found[itemID(tenant, k)] = it
		}
		for k, r := range rows {
			stored[itemID(tenant, k)] = r
		}
		for k, err := range corrupt {
			if bad == nil {
				bad = map[string]error{}
			}
			bad[itemID(tenant, k)] = err
		}
	}
	return found, stored, bad, hits, repeats, nil
}

// corruptKey returns the error of the first of t's keys whose stored item is corrupt (in bad), or nil.
func corruptKey(t *transition, bad map[string]error) error {
	for _, k := range t.keys {
		if err := bad[itemID(t.tenant, k)]; err != nil {
			return err
		}
	}
	return nil
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
		next, err := call(t, i, cur)
		if err == nil && next != nil {
			err = sameItem(t.tenant, key, next)
		}
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

// sameItem refuses a new state of another item than the transition's (a bug of its fn): stored, it would
// go under the tenant and key it names (or change only the document of the transition's row), while the
// committer's cache keeps it under the transition's, and hands it to the next transition of that key
// (TestTransitionRefusesAnotherItemsKey).
func sameItem(tenant, key string, next *items.Item) error {
	if next.Tenant != tenant || next.Key != key {
		return fmt.Errorf("sqlitestore: a transition of one item returned another item's state")
	}
	return nil
}

// call runs t's fn for its i-th key on a copy of cur, turning a panic into that transition's error: a
// bug in one decision answers the request that asked for it (a 500), not the others of its group.
func call(t *transition, i int, cur *items.Item) (next *items.Item, err error) {
	defer func() {
		if r := recover(); r != nil {
			next, err = nil, fmt.Errorf("sqlitestore: deciding item %d of a transition panicked: %v", i, r)
		}
	}()
	if cur != nil {
		cur = cur.Clone()
	}
	return t.fn(i, cur)
}
