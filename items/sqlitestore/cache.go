package sqlitestore

import (
	"sync"

	"github.com/replaysafe/companion/items"
)

// The committer's item cache. An after-write report reads the item its before-write wrote a moment
// earlier: reading and decoding it again was a fifth of the service's CPU in a batch of 500. The ledger
// has one writer: the data dir's lock (lock_unix.go) keeps every other process out, the writer's one
// connection (SetMaxOpenConns(1)) every other transaction of this one, and every transition of an item
// goes through the committer. So the committer keeps the items it committed, each with its row as now
// stored, and reads from the database only the others.
//
// It is sound while nothing else writes items, which holds because:
//   - an entry is put only after its group's commit succeeded, and only if nothing dropped entries between
//     the group's read and that moment (gen): retention, which runs between the committer's transactions,
//     drops the keys it removes inside its own transaction, before its commit;
//   - a group that fails for any reason (a statement, a changed-row count, a commit, an injected fault, a
//     panic) drops the whole cache: what the database holds is then read again;
//   - the migrations and conversions that write items run in Open, before the cache holds anything;
//   - the cache owns its items: it keeps a clone of what it is given and hands out clones, so no caller
//     can change an entry (a transition's fn gets a clone of cur already, call).
//
// A document stored corrupt is never in the cache: readMany finds it and answers as before.

// DefaultItemCache bounds the cache unless WithItemCache says otherwise: the oldest entry goes when a new
// one would pass it. 2,048 items hold the before-writes of four batches of 500, which their after-writes
// read seconds later; 4,096 cost about 30 MB more RSS (GOGC=400) for no gain that two rounds could tell
// from noise (docs/deploying.md).
const DefaultItemCache = 2048

// MaxItemCache is the largest bound a service is given (companion serve --item-cache refuses more): an item
// costs about 2.2 KB of heap (about 12 KB of RSS at the service's GOGC=400: 2,048 cost about 25 MB, docs/deploying.md),
// so a million is about 2.2 GB of heap and several times that of RSS, past any use (the after-writes read the
// items of seconds earlier).
const MaxItemCache = 1_000_000

// cached is an item as the committer committed it, and its row as stored (for write's UPDATE).
type cached struct {
	it  *items.Item
	row *written
	seq uint64 // the put that made it, to tell its place in order
}

// itemCache is a bounded map of itemID to cached, evicting the oldest put.
type itemCache struct {
	mu    sync.Mutex
	max   int
	m     map[string]*cached
	order []placed // puts, oldest first; an entry put again later is skipped when its old place comes
	head  int      // order[:head] are gone
	seq   uint64
	// gen counts drops: the committer puts a group's items only if no drop came since it read them.
	gen uint64
}

type placed struct {
	id  string
	seq uint64
}

func newItemCache(bound int) *itemCache {
	// The map grows as items come: a large bound costs nothing until it is used.
	return &itemCache{max: bound, m: make(map[string]*cached, min(bound, DefaultItemCache))}
}

// generation returns the drop count, to be given to putAll.
func (c *itemCache) generation() uint64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// lookup returns the entry of each id that has one (the cache's own: not to be handed out).
func (c *itemCache) lookup(ids []string, each func(id string, e *cached)) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if e := c.m[id]; e != nil {
			each(id, e)
		}
	}
}

// putAll records the committed states of ids (clones of its, with their rows), if no drop came since gen;
// else it drops ids too, whatever an earlier put of them said.
func (c *itemCache) putAll(gen uint64, ids []string, its []*items.Item, rows []*written) {
	if c == nil {
		return
	}
	clones := make([]*items.Item, len(its))
	for i, it := range its {
		clones[i] = it.Clone()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		for _, id := range ids {
			delete(c.m, id)
		}
		return
	}
	for i, id := range ids {
		c.seq++
		if e := c.m[id]; e != nil {
			e.it, e.row, e.seq = clones[i], rows[i], c.seq
		} else {
			c.m[id] = &cached{it: clones[i], row: rows[i], seq: c.seq}
		}
		c.order = append(c.order, placed{id, c.seq})
	}
	for len(c.m) > c.max && c.head < len(c.order) {
		p := c.order[c.head]
		c.order[c.head] = placed{}
		c.head++
		if e := c.m[p.id]; e != nil && e.seq == p.seq {
			delete(c.m, p.id)
		}
	}
	// Keep order from growing with the places of entries put again: compact once half is gone.
	if c.head > len(c.order)/2 && c.head > 1024 {
		n := copy(c.order, c.order[c.head:])
		clear(c.order[n:])
		c.order, c.head = c.order[:n], 0
	}
	if len(c.order)-c.head > 4*c.max {
		live := c.order[:0]
		for _, p := range c.order[c.head:] {
			if e := c.m[p.id]; e != nil && e.seq == p.seq {
				live = append(live, p)
			}
		}
		clear(c.order[len(live):])
		c.order, c.head = live, 0
	}
}

// drop removes ids, and tells the puts of groups read before that they are stale.
func (c *itemCache) drop(ids []string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for _, id := range ids {
		delete(c.m, id)
	}
}

// dropAll empties the cache, and tells the puts of groups read before that they are stale.
func (c *itemCache) dropAll() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.m)
	clear(c.order)
	c.order, c.head = c.order[:0], 0
}

// len returns how many items the cache holds.
func (c *itemCache) len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
