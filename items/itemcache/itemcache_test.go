package itemcache_test

import (
	"testing"

	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemcache"
)

// TestCacheStaysWithinItsBound: the cache keeps no more items than its bound, the latest put, and its
// record of puts does not grow with a few keys put again and again.
func TestCacheStaysWithinItsBound(t *testing.T) {
	c := itemcache.New[int](4)
	put := func(key string, version int) {
		c.PutAll(c.Generation(), []string{key}, []*items.Item{{Tenant: "acme", Key: key, Version: int64(version)}}, []int{version})
	}
	for i := range 10_000 {
		put(string(rune('a'+i%3)), i)
	}
	if n := c.Len(); n != 3 {
		t.Errorf("the cache holds %d items; want the 3 put", n)
	}
	if p := c.Places(); p > 4*4+1 {
		t.Errorf("the cache records %d places for 3 items", p)
	}
	for i := range 10 {
		put(string(rune('k'+i)), i)
	}
	if n := c.Len(); n != 4 {
		t.Errorf("the cache holds %d items; want its bound, 4", n)
	}
	held := map[string]int{}
	c.Lookup([]string{"q", "r", "s", "t", "a"}, func(id string, e *itemcache.Entry[int]) { held[id] = e.Row })
	if len(held) != 4 || held["t"] != 9 {
		t.Errorf("the cache holds %v; want the last 4 put (q, r, s, t) with their rows", held)
	}
}

// TestPutAfterADropIsNotKept: a group read before a drop puts nothing, and forgets what the cache held of
// its items; a nil cache holds nothing and takes every call.
func TestPutAfterADropIsNotKept(t *testing.T) {
	c := itemcache.New[struct{}](10)
	it := &items.Item{Tenant: "acme", Key: "a", Version: 1}
	c.PutAll(c.Generation(), []string{"a"}, []*items.Item{it}, nil)
	gen := c.Generation()
	c.Drop([]string{"b"})
	c.PutAll(gen, []string{"a", "b"}, []*items.Item{it, it}, nil)
	if n := c.Len(); n != 0 {
		t.Fatalf("%d items cached; want none", n)
	}
	var none *itemcache.Cache[struct{}]
	none.PutAll(0, []string{"a"}, []*items.Item{it}, nil)
	none.Drop([]string{"a"})
	none.DropAll()
	if none.Len() != 0 || none.Bound() != 0 || none.Places() != 0 {
		t.Error("a nil cache holds something")
	}
}
