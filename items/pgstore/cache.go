package pgstore

import (
	"sync"

	"github.com/replaysafe/companion/items"
)

// The committer's item cache: the items this process committed lately, as committed. An after-write
// report names the item its before-write wrote a moment earlier; a group whose items the cache holds (or
// that are new) is written without reading them (tryGroup). Unlike SQLite's, this cache is never trusted
// on its own: other replicas write the same table, and retention removes items. Every decision made on it
// is written with a guard the server checks (the version and time of change it was decided on; an insert
// where the item was taken as new), and the whole group is decided again on a fresh read when one fails.

// DefaultItemCache bounds the cache unless WithItemCache says otherwise: the oldest entry goes when a new
// one would pass it. 2,048 items hold the before-writes of four batches of 500, which their after-writes
// name seconds later.
const DefaultItemCache = 2048

// itemCache is a bounded map of itemID to the item committed, evicting the oldest put. A nil cache holds
// nothing.
type itemCache struct {
	mu    sync.Mutex
	max   int
	m     map[string]*cachedItem
	order []placedItem // puts, oldest first; an entry put again later is skipped when its old place comes
	head  int          // order[:head] are gone
	seq   uint64
}

type cachedItem struct {
	it  *items.Item
	seq uint64
}

type placedItem struct {
	id  string
	seq uint64
}

func newItemCache(bound int) *itemCache {
	return &itemCache{max: bound, m: make(map[string]*cachedItem, min(bound, DefaultItemCache))}
}

// lookup returns the items of ids the cache holds, by id: the cache's own, not to be changed or handed
// out (a transition's fn gets a clone, call). An id it does not hold is taken as a new item (absent from
// the map) when guess is true; when it is false, lookup returns nil.
func (c *itemCache) lookup(ids []string, guess bool) map[string]*items.Item {
	if c == nil {
		return nil
	}
	held := make(map[string]*items.Item, len(ids))
	c.mu.Lock()
	for _, id := range ids {
		if e := c.m[id]; e != nil {
			held[id] = e.it
		} else if !guess {
			c.mu.Unlock()
			return nil
		}
	}
	c.mu.Unlock()
	return held
}

// put records the committed states of ids (clones of states[id]).
func (c *itemCache) put(ids []string, states map[string]*items.Item) {
	if c == nil || len(ids) == 0 {
		return
	}
	clones := make([]*items.Item, len(ids))
	for i, id := range ids {
		clones[i] = states[id].Clone()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, id := range ids {
		c.seq++
		if e := c.m[id]; e != nil {
			e.it, e.seq = clones[i], c.seq
		} else {
			c.m[id] = &cachedItem{it: clones[i], seq: c.seq}
		}
		c.order = append(c.order, placedItem{id, c.seq})
	}
	for len(c.m) > c.max && c.head < len(c.order) {
		p := c.order[c.head]
		c.order[c.head] = placedItem{}
		c.head++
		if e := c.m[p.id]; e != nil && e.seq == p.seq {
			delete(c.m, p.id)
		}
	}
	// Keep order from growing with the places of entries put again: compact once half is gone, or once
	// it holds many more places than live entries (a few keys put again and again, under the bound).
	if c.head > len(c.order)/2 && c.head > 1024 {
		n := copy(c.order, c.order[c.head:])
		clear(c.order[n:])
		c.order, c.head = c.order[:n], 0
	}
	if len(c.order)-c.head > 4*max(c.max, 256) {
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

// places returns how many places order holds (live or not), for tests.
func (c *itemCache) places() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.order) - c.head
}

// drop removes ids.
func (c *itemCache) drop(ids []string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		delete(c.m, id)
	}
}

// ItemCacheBound returns how many items the store keeps of those it committed (WithItemCache); 0: none.
func (s *Store) ItemCacheBound() int {
	if s.cache == nil {
		return 0
	}
	return s.cache.max
}
