package items

import (
	"context"
	"time"
)

// TransitionFunc decides a change to one item. It receives the stored item (nil when there is none),
// may modify it, and returns the item to write, or nil to write nothing. An error aborts the transition
// without writing. A store may call it more than once (after losing a compare-and-set race), so it must
// not have side effects beyond what it returns and what it records in variables it owns. The item it
// returns is of the tenant and key it was called for: a store refuses another (an error of kind internal,
// nothing written; in TransitionMany, nothing of the batch), itemstest's
// Store/TransitionReturningAnotherItemIsRefused.
type TransitionFunc func(current *Item) (next *Item, err error)

// Store keeps the ledger durably. Every implementation passes items/itemstest.
type Store interface {
	// Get returns the item for tenant and key. Returns ErrNotFound when there is none, ErrUnavailable when
	// the store cannot be read.
	Get(ctx context.Context, tenant, key string) (*Item, error)

	// Transition atomically reads the item for tenant and key, calls fn, and durably writes what fn
	// returns, guarded by the version fn saw: of any number of concurrent transitions on one item each
	// sees the result of the ones before it. It returns the stored item afterwards (what fn returned, or
	// the current item when fn returned nil; nil when there is none). Errors from fn are returned as they
	// are. Returns ErrUnavailable when the change cannot be durably recorded: then nothing was written.
	Transition(ctx context.Context, tenant, key string, fn TransitionFunc) (*Item, error)

	// TransitionMany runs fn for each key in order, as Transition does, where each call sees the changes
	// of the earlier ones (a key may repeat). Stores that can make the whole batch atomic and durable at
	// once (one transaction) do; others run item by item, each item atomic. If fn fails for any item,
	// nothing is written: a store without a batch transaction runs fn for every key before it writes any,
	// and when fn fails for an item it decides again after writing (another writer changed the item in
	// between), it takes back what it wrote before it returns, but where another writer has changed an
	// item since (that writer's change stays, built on this one).
	// Returns the stored items, in order, each as it was right after its own call and each an item of its
	// own, which the caller may change (a key named twice gets two; itemstest's
	// Store/TransitionManyAnswersEachPlaceItsOwnItem).
	TransitionMany(ctx context.Context, tenant string, keys []string, fn func(i int, current *Item) (*Item, error)) ([]*Item, error)

	// LedgerSecret returns the ledger's secret, creating it at the first call: the key of the
	// idempotency-key HMAC, stable across restarts and replicas. Returns ErrUnavailable.
	LedgerSecret(ctx context.Context) ([]byte, error)

	// Ping returns ErrUnavailable when the store cannot be reached.
	Ping(ctx context.Context) error

	// Close releases the store's resources.
	Close() error
}

// SharedStore is implemented by a store that several processes (replicas of the service) use at once.
// Their clocks differ, and a lease must be judged on one clock: a replica whose clock runs 20 s ahead
// would otherwise see another replica's live claim as expired, and let a second writer proceed.
type SharedStore interface {
	Store

	// HasClock reports whether the store reads a clock of its own (its server's) in ClockOffset. When it
	// does not, the ledger judges leases on this process's clock. Either way it counts a lease as expired
	// only Config.MaxClockSkew after its end (Ledger.ClockMargin).
	HasClock() bool

	// ClockOffset returns how far the store's clock is ahead of this process's clock (negative: behind),
	// from a recent reading; zero when the difference is below what one reading can tell, or too small to
	// matter to a lease (the margin covers both). Returns ErrUnavailable.
	ClockOffset(ctx context.Context) (time.Duration, error)
}
