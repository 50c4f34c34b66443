// Package itemcache is the bounded cache of items a store's committer keeps of those it committed, so
// that the next transition of one of them need not read it again (sqlitestore, pgstore). Each store says
// why trusting it is sound for that store; the cache only keeps, bounds and hands out.
package itemcache

import (
	"sync"

	"github.com/replaysafe/companion/items"
)

// Entry is an item as a committer committed it, and R, what its store keeps beside it (SQLite's row).
type Entry[R any] struct {
	Item *items.Item
	Row  R
	seq  uint64 // the put that made it, to tell its place in order
}

// Cache is a bounded map of item id to Entry, evicting the oldest put. A nil Cache holds nothing.
type Cache[R any] struct {
	mu    sync.Mutex
	max   int
	m     map[string]*Entry[R]
	order []placed // puts, oldest first; an entry put again later is skipped when its old place comes
	head  int      // order[:head] are gone
	seq   uint64
	// gen counts drops: a committer puts a group's items only if no drop came since it read them.
	gen uint64
}

type placed struct {
	id  string
	seq uint64
}

// New returns a cache of at most bound items.
func New[R any](bound int) *Cache[R] {
	// The map grows as items come: a large bound costs nothing until it is used.
	return &Cache[R]{max: bound, m: make(map[string]*Entry[R], min(bound, 2048))}
}

// Bound returns how many items the cache keeps at most (0 for a nil cache).
func (c *Cache[R]) Bound() int {
	if c == nil {
		return 0
	}
	return c.max
}

// Generation returns the drop count, to be given to PutAll.
func (c *Cache[R]) Generation() uint64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// Lookup calls each with the entry of each id that has one: the cache's own, not to be changed or handed
// out.
func (c *Cache[R]) Lookup(ids []string, each func(id string, e *Entry[R])) {
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

// PutAll records the committed states of ids (clones of its, with rows; nil rows: R's zero value each),
// if no drop came since gen; else it drops ids too, whatever an earlier put of them said.
func (c *Cache[R]) PutAll(gen uint64, ids []string, its []*items.Item, rows []R) {
	if c == nil || len(ids) == 0 {
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
		var row R
		if rows != nil {
			row = rows[i]
		}
		c.seq++
		if e := c.m[id]; e != nil {
			e.Item, e.Row, e.seq = clones[i], row, c.seq
		} else {
			c.m[id] = &Entry[R]{Item: clones[i], Row: row, seq: c.seq}
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
	// Keep order from growing with the places of entries put again: compact once half is gone, or once
	// it holds many more places than the bound (a few keys put again and again, under it).
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

// Drop removes ids, and tells the puts of groups read before that they are stale.
func (c *Cache[R]) Drop(ids []string) {
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

// DropAll empties the cache, and tells the puts of groups read before that they are stale.
func (c *Cache[R]) DropAll() {
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

// Len returns how many items the cache holds.
func (c *Cache[R]) Len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// Places returns how many places its record of the order of puts holds, live or not: what the
// compaction bounds.
func (c *Cache[R]) Places() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.order) - c.head
}

// Each calls fn with a copy of every entry (for checks of a whole cache against its store).
func (c *Cache[R]) Each(fn func(id string, e Entry[R])) {
	if c == nil {
		return
	}
	c.mu.Lock()
	entries := make(map[string]Entry[R], len(c.m))
	for id, e := range c.m {
		entries[id] = *e
	}
	c.mu.Unlock()
	for id, e := range entries {
		fn(id, e)
	}
}
