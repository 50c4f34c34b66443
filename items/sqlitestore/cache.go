package sqlitestore

import "github.com/replaysafe/companion/items/itemcache"

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

// itemCache is the committer's cache: each item with its row as stored (for write's UPDATE).
type itemCache = itemcache.Cache[*written]

// cached is an entry of the cache.
type cached = itemcache.Entry[*written]

func newItemCache(bound int) *itemCache { return itemcache.New[*written](bound) }
