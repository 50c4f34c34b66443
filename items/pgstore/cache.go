package pgstore

import (
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemcache"
)

// The committer's item cache: the items this process committed lately, as committed. An after-write
// report names the item its before-write wrote a moment earlier; a group whose items the cache holds (or
// that are new) is written without reading them (tryGroup). Unlike SQLite's, this cache is never trusted
// on its own: other replicas write the same table, and retention removes items. Every decision made on it
// is written with a guard the server checks (the version, time of change and row version it was decided
// on; an insert where the item was taken as new), and the whole group is decided again on a fresh read
// when one fails.

// DefaultItemCache bounds the cache unless WithItemCache says otherwise: the oldest entry goes when a new
// one would pass it. 2,048 items hold the before-writes of four batches of 500, which their after-writes
// name seconds later.
const DefaultItemCache = 2048

// itemCache is the committer's cache (itemcache): the items, and the xmin of the rows that hold them (the
// id of the transaction that wrote them), which a write decided on the cache checks.
type itemCache struct{ c *itemcache.Cache[int64] }

func newItemCache(bound int) *itemCache { return &itemCache{itemcache.New[int64](bound)} }

// lookup returns the items of ids the cache holds, by id, and the xmin of their rows: the cache's own
// items, not to be changed or handed out (a transition's fn gets a clone, call). An id it does not hold is
// taken as a new item (absent from the maps) when guess is true; when it is false, lookup returns nil.
func (c *itemCache) lookup(ids []string, guess bool) (map[string]*items.Item, map[string]int64) {
	if c == nil {
		return nil, nil
	}
	held, xmins := make(map[string]*items.Item, len(ids)), make(map[string]int64, len(ids))
	c.c.Lookup(ids, func(id string, e *itemcache.Entry[int64]) { held[id], xmins[id] = e.Item, e.Row })
	if !guess && len(held) < len(ids) {
		return nil, nil
	}
	return held, xmins
}

// put records the committed states of ids (clones of states[id]), in rows of the xmin given.
func (c *itemCache) put(ids []string, states map[string]*items.Item, xmin int64) {
	if c == nil || len(ids) == 0 {
		return
	}
	its, xmins := make([]*items.Item, len(ids)), make([]int64, len(ids))
	for i, id := range ids {
		its[i], xmins[i] = states[id], xmin
	}
	c.c.PutAll(c.c.Generation(), ids, its, xmins)
}

// drop removes ids.
func (c *itemCache) drop(ids []string) {
	if c != nil {
		c.c.Drop(ids)
	}
}

// ItemCacheBound returns how many items the store keeps of those it committed (WithItemCache); 0: none.
func (s *Store) ItemCacheBound() int {
	if s.cache == nil {
		return 0
	}
	return s.cache.c.Bound()
}
