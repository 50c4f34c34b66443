package alerts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/replaysafe/companion/items"
)

// DefaultSweepPageSize is how many items the sweeper reads per query.
const DefaultSweepPageSize = 100

// SweepStore is what the sweeper reads. Both queries page by (tenant, key) after the given reference and
// return ErrUnavailable when the store cannot be read.
type SweepStore interface {
	// ExpiredLeases returns items in flight whose lease ended at or before now.
	ExpiredLeases(ctx context.Context, now time.Time, after items.ItemRef, limit int) ([]items.ItemRef, error)
	// SweepCandidates returns items not yet needing a person that are unknown, or failed and retryable, or
	// flagged with a duplicate effect, and that nobody acknowledged in their current attempt
	// (items.Facts.SweepCandidate).
	SweepCandidates(ctx context.Context, after items.ItemRef, limit int) ([]*items.Item, error)
}

// SweeperConfig configures a Sweeper.
type SweeperConfig struct {
	// Ledger applies the changes (guarded transitions) and gives the clock. Required.
	Ledger *items.Ledger
	// Store is read for the items to look at. Required.
	Store SweepStore
	// PageSize bounds each query. Default DefaultSweepPageSize.
	PageSize int
	// Logger gets one line per run that changed something. Default slog.Default().
	Logger *slog.Logger
}

// Sweeper records expired leases and marks the items that need a person. Every change it makes is a
// guarded transition of the ledger, so any number of sweepers (one per replica) may run at once, and a
// report that lands first (a late after-write) wins. It holds no claim between two changes, so a sweep cut
// off by a stop leaves nothing to give back: the next sweep, here or in another replica, does the rest.
type Sweeper struct {
	cfg    SweeperConfig
	health runHealth
}

// NewSweeper validates cfg and returns a sweeper.
func NewSweeper(cfg SweeperConfig) (*Sweeper, error) {
	if cfg.Ledger == nil || cfg.Store == nil {
		return nil, errors.New("alerts: sweeper needs a ledger and a store")
	}
	if cfg.PageSize == 0 {
		cfg.PageSize = DefaultSweepPageSize
	}
	if cfg.PageSize < 1 {
		return nil, fmt.Errorf("alerts: sweeper page size %d must be positive", cfg.PageSize)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Sweeper{cfg: cfg}, nil
}

// SweepCounts says what one sweep did.
type SweepCounts struct {
	// Expired counts in-flight items recorded as unknown (cause lease_expired).
	Expired int `json:"expired"`
	// NeedsPerson counts the items newly marked as needing a person, per cause.
	NeedsPerson map[string]int `json:"needs_person"`
	// Looked counts the items the sweep read.
	Looked int `json:"looked"`
}

// Changed reports whether the sweep changed any item.
func (c SweepCounts) Changed() bool { return c.Expired > 0 || len(c.NeedsPerson) > 0 }

// RunOnce sweeps the whole ledger once, page by page. It returns what it did, and the first error that
// stopped it (what it did before the error stands).
func (s *Sweeper) RunOnce(ctx context.Context) (SweepCounts, error) {
	counts := SweepCounts{NeedsPerson: map[string]int{}}
	err := s.expireLeases(ctx, &counts)
	if err == nil {
		err = s.markNeedsPerson(ctx, &counts)
	}
	if len(counts.NeedsPerson) == 0 {
		counts.NeedsPerson = nil
	}
	if counts.Changed() {
		attrs := []any{"expired", counts.Expired, "looked", counts.Looked}
		for _, cause := range slices.Sorted(maps.Keys(counts.NeedsPerson)) {
			attrs = append(attrs, "needs_person."+cause, counts.NeedsPerson[cause])
		}
		s.cfg.Logger.InfoContext(ctx, "sweep changed items", attrs...)
	}
	if err != nil {
		s.cfg.Logger.ErrorContext(ctx, "sweep stopped", "error", err)
	}
	s.health.note(err)
	return counts, err
}

func (s *Sweeper) expireLeases(ctx context.Context, counts *SweepCounts) error {
	l := s.cfg.Ledger
	var after items.ItemRef
	for {
		refs, err := s.cfg.Store.ExpiredLeases(ctx, l.Now(), after, s.cfg.PageSize)
		if err != nil {
			return err
		}
		counts.Looked += len(refs)
		for _, r := range refs {
			// The ledger re-checks the lease inside its guarded transition: an after-write that landed
			// since the query wins, and of two sweepers only one records the expiry.
			changed, err := l.ExpireLease(ctx, r.Tenant, r.Key)
			if errors.Is(err, items.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if !changed {
				continue
			}
			counts.Expired++
			// An item in flight never needs a person (a claim clears that), so one that does now was
			// marked by the expiry (its destination cannot dedupe).
			if it, err := l.Store().Get(ctx, r.Tenant, r.Key); err == nil && it.NeedsPerson {
				counts.NeedsPerson[it.NeedsPersonCause]++
			}
		}
		if len(refs) < s.cfg.PageSize {
			return nil
		}
		after = refs[len(refs)-1]
	}
}

func (s *Sweeper) markNeedsPerson(ctx context.Context, counts *SweepCounts) error {
	l := s.cfg.Ledger
	var after items.ItemRef
	for {
		found, err := s.cfg.Store.SweepCandidates(ctx, after, s.cfg.PageSize)
		if err != nil {
			return err
		}
		counts.Looked += len(found)
		now := l.Now()
		for _, it := range found {
			if l.NeedsPersonCause(it, now) == "" {
				continue
			}
			cause, err := l.MarkNeedsPerson(ctx, it.Tenant, it.Key)
			if errors.Is(err, items.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if cause != "" {
				counts.NeedsPerson[cause]++
			}
		}
		if len(found) < s.cfg.PageSize {
			return nil
		}
		after = items.ItemRef{Tenant: found[len(found)-1].Tenant, Key: found[len(found)-1].Key}
	}
}
