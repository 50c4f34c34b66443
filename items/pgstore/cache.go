package pgstore

import (
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemcache"
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

// itemCache is the committer's cache (itemcache), of items only.
type itemCache struct{ c *itemcache.Cache[struct{}] }

func newItemCache(bound int) *itemCache { return &itemCache{itemcache.New[struct{}](bound)} }

// lookup returns the items of ids the cache holds, by id: the cache's own, not to be changed or handed
// out (a transition's fn gets a clone, call). An id it does not hold is taken as a new item (absent from
// the map) when guess is true; when it is false, lookup returns nil.
func (c *itemCache) lookup(ids []string, guess bool) map[string]*items.Item {
	if c == nil {
		return nil
	}
	held := make(map[string]*items.Item, len(ids))
	c.c.Lookup(ids, func(id string, e *itemcache.Entry[struct{}]) { held[id] = e.Item })
	if !guess && len(held) < len(ids) {
		return nil
	}
	return held
}

// put records the committed states of ids (clones of states[id]).
func (c *itemCache) put(ids []string, states map[string]*items.Item) {
	if c == nil || len(ids) == 0 {
		return
	}
	its := make([]*items.Item, len(ids))
	for i, id := range ids {
		its[i] = states[id]
	}
	c.c.PutAll(c.c.Generation(), ids, its, nil)
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
