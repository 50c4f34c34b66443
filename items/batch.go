package items

import (
	"context"
	"fmt"
)

// AfterWriteMany records the after-write reports of one tenant in order, each as AfterWrite would and
// each against the state the earlier ones left. On a store that runs TransitionMany as one transaction
// the whole batch costs one durable write.
//
// A report about a missing item (ErrNotFound) or with a claim that is not one of the item's (a conflict
// *Error) is refused on its own: its slot in the returned errors says why, its Report is zero, and the
// other reports are recorded. The last error refuses the whole batch: an invalid report (nothing is
// written; callers check every report with CheckAfterWrite first to name it) or ErrUnavailable (on a
// one-transaction store nothing was written; on others the reports before the failure may have been,
// and repeating the batch is safe because an identical repeat is recorded as unchanged).
func (l *Ledger) AfterWriteMany(ctx context.Context, tenant string, ps []AfterWriteParams) ([]Report, []error, error) {
	keys := make([]string, len(ps))
	for i, p := range ps {
		if p.Tenant != tenant {
			return nil, nil, fmt.Errorf("items: batch mixes tenants %q and %q", tenant, p.Tenant)
		}
		if err := CheckAfterWrite(p); err != nil {
			return nil, nil, err
		}
		keys[i] = p.Key
	}
	now := l.now()
	reports := make([]Report, len(ps))
	refused := make([]error, len(ps))
	stored, err := l.TransitionMany(ctx, tenant, keys, func(i int, cur *Item) (*Item, error) {
		// A store may call fn again for the same report after losing a race: start from nothing.
		reports[i], refused[i] = Report{}, nil
		if cur == nil {
			refused[i] = ErrNotFound
			return nil, nil
		}
		next, rep, err := l.applyReport(cur, ps[i], now)
		if err != nil {
			refused[i] = err
			return nil, nil
		}
		reports[i] = rep
		return next, nil
	})
	if err != nil {
		return nil, nil, err
	}
	for i := range reports {
		if refused[i] == nil {
			reports[i].Key, reports[i].State = stored[i].Key, stored[i].State
		}
	}
	return reports, refused, nil
}
