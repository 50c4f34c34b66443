package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/replaysafe/companion/items"
)

// Transactions of transitions. Every transition runs in a transaction that reads its items FOR UPDATE,
// decides them, writes what changed and commits: two round trips, one for the read (BEGIN, the
// transaction's id and the clock, the items) and one for the writes and the COMMIT, sent together.
// Transitions that arrive while the committers are busy share one such transaction (a group): one commit,
// one WAL flush, for as many callers as arrived meanwhile, one group at a time (DefaultCommitters). The
// group behaves as its transitions run one after the other in arrival order, each deciding against the
// state the earlier ones left, and a fault of one transition stays with its caller: one whose fn fails or
// panics, whose item is stored corrupt, or whose new state cannot be stored leaves no trace and answers
// its own error, while the others get their own answers, as if it had not been in the group. Only if the
// transaction itself fails does every caller of the group get ErrUnavailable, as none of them was
// recorded.
//
// Under load a group often takes one round trip: its transaction was begun with the previous group's
// COMMIT (begun: on the same connection, for up to a minute and while the pool has another to spare,
// mayCarry), and its items are ones the replica committed lately (the item cache) or new ones, so that it
// is decided without reading them and written with guards the server checks (tryGroup).
//
// A transaction that lost a race (another writer created one of its new items or changed one it decided
// on), that the server aborted to break a deadlock, or whose connection failed before its COMMIT was sent
// wrote nothing: it is decided again, fn called again, on a fresh read, within the store's timeout. A
// COMMIT whose answer was lost (the connection broke, the server crashed) is settled before anyone is
// answered: the transaction's id was read before its writes were sent, and pg_xact_status says on
// another connection whether it committed (the callers get their answers), or not (the group is decided
// again). Only when the server cannot be asked within the timeout is the group answered ErrUnavailable
// with its outcome unknown.

// groupKeys bounds a group: it is closed once it holds this many keys, so that one commit never grows
// without bound.
const groupKeys = 2000

// errClosed answers a transition that arrives after Close.
var errClosed = errors.New("pgstore: the store is closed")

// errNotCommitted says that a transaction whose COMMIT's answer was lost did not commit: nothing was
// written, and the group is decided again.
var errNotCommitted = errors.New("pgstore: the transaction did not commit")

// transition is one caller's TransitionMany.
type transition struct {
	ctx    context.Context
	tenant string
	keys   []string
	fn     func(i int, cur *items.Item) (*items.Item, error)
	// out and err are the answer (valid once done is closed, when a committer took the transition).
	out  []*items.Item
	err  error
	done chan struct{}
	// fault is the transition's own failure, which stays its answer when the group is decided again.
	fault error
}

// TransitionMany implements items.Store: the batch's items are decided in order, each against the state
// the earlier ones left, and written in one transaction (shared with the transitions of other callers
// that arrive at the same time); if fn fails for any item, nothing of the batch is written.
func (s *Store) TransitionMany(ctx context.Context, tenant string, keys []string, fn func(i int, cur *items.Item) (*items.Item, error)) ([]*items.Item, error) {
	t := &transition{ctx: ctx, tenant: tenant, keys: keys, fn: fn}
	select {
	case <-s.stop:
		return nil, fmt.Errorf("%w: %w", items.ErrUnavailable, errClosed)
	default:
	}
	if s.committers == 0 {
		s.commitGroup([]*transition{t}, nil, nil)
		return t.out, t.err
	}
	t.done = make(chan struct{})
	s.waiting.Add(1)
	select {
	case s.transitions <- t:
		s.waiting.Add(-1)
	case <-s.stop:
		s.waiting.Add(-1)
		return nil, fmt.Errorf("%w: %w", items.ErrUnavailable, errClosed)
	case <-ctx.Done():
		s.waiting.Add(-1)
		return nil, interpretError(ctx.Err())
	}
	// Once taken, the transition is waited for even if ctx ends: it may be committed already.
	<-t.done
	return t.out, t.err
}

// commitGroups is a committer: until Close, it takes the transitions waiting and commits them as one.
// When more are waiting as a group's writes are sent, the next group's transaction begins with them
// (begun): a group whose items the cache holds then costs one round trip to the server, not two.
func (s *Store) commitGroups() {
	defer s.committerDone.Done()
	var next *begun
	idle := time.NewTimer(time.Hour)
	defer idle.Stop()
	for {
		var first *transition
		if next == nil {
			select {
			case first = <-s.transitions:
			case <-s.stop:
				return
			}
		} else {
			idle.Reset(idleBegun)
			select {
			case first = <-s.transitions:
			case <-s.stop:
				next.end()
				return
			case <-idle.C:
				// Those waiting gave up: the transaction begun for them is not left open.
				next.end()
				next = nil
				continue
			}
		}
		group := s.gather([]*transition{first}, len(first.keys))
		carried := next
		next = nil
		if carried != nil {
			s.carried.Add(1)
		}
		s.commitGroup(group, carried, &next)
		for _, t := range group {
			close(t.done)
		}
	}
}

// idleBegun is how long a transaction begun for the transitions waiting stays open when none comes.
const idleBegun = 100 * time.Millisecond

// gather adds the transitions waiting to group, which names n keys, until it names groupKeys.
func (s *Store) gather(group []*transition, n int) []*transition {
	for n < groupKeys {
		select {
		case t := <-s.transitions:
			group = append(group, t)
			n += len(t.keys)
			continue
		default:
		}
		break
	}
	return group
}

// begun is a transaction begun on conn, whose id xid was read: one a group's COMMIT began for the next.
type begun struct {
	conn *pgxpool.Conn
	xid  string
	// since is when conn was taken from the pool (mayCarry).
	since time.Time
}

// end rolls the transaction back and gives the connection back to the pool.
func (b *begun) end() {
	rollback(b.conn)
	b.conn.Release()
}

// commitGroup decides the group's transitions in one transaction and answers each, deciding the group
// again after a lost race, within the store's timeout. carried, when not nil, is a transaction begun for
// the group; next, when not nil, takes one begun for the group after it.
func (s *Store) commitGroup(group []*transition, carried *begun, next **begun) {
	defer func() {
		// A panic outside any one decision (a bug here or in the driver) answers the group: in a committer
		// it would stop every later write.
		if r := recover(); r != nil {
			failGroup(group, fmt.Errorf("pgstore: a transaction of transitions panicked: %v", r))
		}
	}()
	s.decided.Add(int64(len(group)))
	// A caller that gave up before its turn is not decided; the others' contexts do not end the group.
	for _, t := range group {
		if err := t.ctx.Err(); err != nil {
			t.fault = interpretError(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	var err error
	for race := 0; ; race++ {
		for _, t := range group {
			t.out, t.err = nil, t.fault
		}
		err = s.tryGroup(ctx, group, carried, race == 0, next)
		carried = nil // a group decided again begins afresh, and reads its items
		if err == nil {
			return
		}
		again := retryInside(err) || errors.Is(err, errNotCommitted)
		if !again || race == maxRaces || ctx.Err() != nil {
			break
		}
		if !serverSaid(err) {
			// A connection that failed: the server may be restarting. Races are decided again at once.
			select {
			case <-ctx.Done():
			case <-time.After(min(time.Duration(race+1)*20*time.Millisecond, 500*time.Millisecond)):
			}
		}
	}
	failGroup(group, interpretError(err))
}

// failGroup answers err to every transition of group that has no answer of its own yet.
func failGroup(group []*transition, err error) {
	for _, t := range group {
		if t.err == nil {
			t.out, t.err = nil, err
		}
	}
}

// itemID names a tenant's key inside a group, which may span tenants.
func itemID(tenant, key string) string { return tenant + "\x00" + key }

// groupItems are the items a group names: its ids in (tenant, key) order, as the read locks them.
type groupItems struct {
	tenants, keys []string
}

// ids returns the items' ids (itemID).
func (g groupItems) ids() []string {
	ids := make([]string, len(g.keys))
	for i := range g.keys {
		ids[i] = itemID(g.tenants[i], g.keys[i])
	}
	return ids
}

func namedItems(group []*transition) groupItems {
	type ref struct{ tenant, key string }
	seen := map[ref]bool{}
	var refs []ref
	for _, t := range group {
		if t.err != nil {
			continue
		}
		for _, k := range t.keys {
			r := ref{t.tenant, k}
			if !seen[r] {
				seen[r] = true
				refs = append(refs, r)
			}
		}
	}
	slices.SortFunc(refs, func(a, b ref) int { return cmp.Or(cmp.Compare(a.tenant, b.tenant), cmp.Compare(a.key, b.key)) })
	var g groupItems
	for _, r := range refs {
		g.tenants, g.keys = append(g.tenants, r.tenant), append(g.keys, r.key)
	}
	return g
}

// tryGroup runs the group's transaction once. It returns nil when every transition has its answer
// (recorded, or its own error), else why the transaction did not commit. carried, when not nil, is the
// group's transaction, begun already; next, when not nil, takes the one begun for the next group.
//
// Unless unreadOK is false (a group decided again), the group is first decided on the items the cache
// holds, those it does not hold taken as new (unless such a guess was wrong lately: guessNew). When every
// transition got its answer and every item it named changed, those decisions are written without reading
// the items, since the writes check what was assumed: an item the cache holds is updated only at the
// version and time of change it was decided on, and one taken as new is inserted, which fails if it
// exists. Either way the transaction then writes nothing, and the group is decided again on a read.
// Otherwise (a transition failed or changed nothing, which no write would check) the decisions are
// dropped and the items read.
func (s *Store) tryGroup(ctx context.Context, group []*transition, carried *begun, unreadOK bool, next **begun) (err error) {
	named := namedItems(group)
	ids := named.ids()
	var conn *pgxpool.Conn
	open := false // a transaction is open on conn
	keep := false // conn goes on holding the transaction begun for the next group
	xid := ""
	var since time.Time // when conn was taken from the pool
	if carried != nil {
		conn, open, xid, since = carried.conn, true, carried.xid, carried.since
	}
	defer func() {
		if err != nil {
			s.cache.drop(ids)
		}
		if conn == nil || keep {
			return
		}
		if open {
			rollback(conn)
		}
		conn.Release()
	}()
	if len(named.keys) == 0 {
		return nil // every transition has its own error
	}

	var found, seen map[string]*items.Item
	var xmins map[string]int64 // the row versions found were written by (xmin)
	var docs map[string][]byte
	var changed []string // items with a new state, in the order of their first change
	unread := false      // decided on the cache and guesses, not on a read
	var bad map[string]error
	if s.cache != nil && unreadOK {
		found, xmins = s.cache.lookup(ids, s.guessed())
		if found != nil {
			seen, docs, changed = decideAll(group, found, nil)
			if unread = allChanged(group, changed); !unread {
				for _, t := range group {
					t.out, t.err = nil, t.fault
				}
			}
		}
	}
	if conn == nil {
		if conn, err = s.pool.Acquire(ctx); err != nil {
			return uncommitted{err}
		}
		since = time.Now()
	}
	if !open || !unread {
		if err := s.injected("read"); err != nil {
			return err
		}
		// The read: BEGIN, the transaction's id and the database's clock (unless begun already), and the
		// items locked in key order (unless decided already).
		b := &pgx.Batch{}
		young := false
		if !open {
			young = s.queueBegin(b)
		}
		if !unread {
			b.Queue(s.q.ReadGroup, named.tenants, named.keys)
		}
		sent := time.Now()
		br := conn.SendBatch(ctx, b)
		if !open {
			open = true
			xid, err = s.takeBegin(br, young, sent)
		}
		if err == nil && !unread {
			found, xmins, bad, err = takeItems(br)
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			if !serverSaid(err) && conn.Conn().IsClosed() {
				return uncommitted{err} // a connection that failed (a server restarted): nothing was written
			}
			return err
		}
	}
	if !unread {
		// The decisions, in arrival order, each against what the earlier ones left.
		seen, docs, changed = decideAll(group, found, bad)
		if len(changed) == 0 {
			open = false
			rollback(conn) // nothing to write: the locks go, no commit to flush
			unshare(group)
			return nil
		}
	} else {
		// An answer that is an item of the cache (a transition that changed nothing, after an earlier one
		// of the group changed it) gets a copy of its own.
		for _, t := range group {
			for i, it := range t.out {
				if it != nil && it == found[itemID(t.tenant, t.keys[i])] {
					t.out[i] = it.Clone()
				}
			}
		}
	}

	// The writes and the COMMIT, sent together: an error of the server skips what follows it, COMMIT included.
	var inserts, updates itemRows
	counts, series := items.CountChanges{}, items.SeriesChanges{}
	// The rows in key order (itemID sorts as tenant, then key), as the read locks them: two transactions
	// that lock the same items by their writes never wait for each other in a circle.
	byKey := slices.Clone(changed)
	slices.Sort(byKey)
	for _, id := range byKey {
		cur, next := found[id], seen[id]
		f := next.Facts()
		counts.Move(cur, next)
		series.Move(cur, next)
		if cur == nil {
			inserts.add(next, f, docs[id])
		} else {
			updates.add(next, f, docs[id])
			updates.seenVersion, updates.seenUpdatedAt = append(updates.seenVersion, cur.Version), append(updates.seenUpdatedAt, cur.UpdatedAt)
			updates.seenXmin = append(updates.seenXmin, xmins[id])
		}
	}
	b := &pgx.Batch{}
	if updates.len() > 0 {
		b.Queue(s.q.UpdateItems, updates.args(true)...)
	}
	if inserts.len() > 0 {
		b.Queue(s.q.InsertItems, inserts.args(false)...)
	}
	if c := countArgs(counts); c != nil {
		b.Queue(s.q.AddCounts, c.args()...)
	}
	if r := seriesArgs(series); r != nil {
		b.Queue(s.q.AddSeries, r.args()...)
	}
	b.Queue("COMMIT")
	writes := b.Len()
	// When more transitions wait, the next group's transaction begins once this one committed.
	beginning, nextYoung := next != nil && s.waiting.Load() > 0 && s.mayCarry(since), false
	if beginning {
		nextYoung = s.queueBegin(b)
	}
	// A fault of a test in "write" stands for a connection lost as the writes were sent, "answer" for the
	// answer of a COMMIT that was lost.
	var tag string
	var nextXid string
	if err = s.injected("write"); err == nil {
		sent := time.Now()
		br := conn.SendBatch(ctx, b)
		for range writes {
			var t pgconn.CommandTag
			if t, err = br.Exec(); err != nil {
				break
			}
			tag = t.String()
		}
		if err == nil {
			err = s.injected("answer")
		}
		if err == nil && tag == "COMMIT" && beginning {
			if nextXid, err = s.takeBegin(br, nextYoung, sent); err != nil {
				nextXid, err = "", nil // the group committed; the next one begins afresh
			}
		}
		if cerr := br.Close(); err == nil && tag != "COMMIT" {
			err = cerr
		} else if cerr != nil {
			nextXid = ""
		}
	}
	if err != nil && unread && isDuplicate(err) {
		s.guessNew.Store(guessPause) // an item taken as new existed: read for a while rather than guess
	}
	switch {
	case err == nil && tag != "COMMIT":
		open = beginning       // the next group's BEGIN ran after the rollback
		return errNotCommitted // the server rolled the transaction back (it cannot have, but then nothing was written)
	case err == nil:
	case serverSaid(err):
		return err // the server aborted the transaction, and skipped its COMMIT: rolled back on return
	default:
		// The COMMIT may have reached the server: ask another connection whether it committed, for as long
		// as a server that crashed as it committed takes to come back (settleWait), rather than answer a
		// 503 that may be untrue (a claim recorded, held by nobody).
		open = false
		conn.Conn().Close(context.Background()) //nolint:errcheck // the connection failed already
		sctx, cancel := context.WithTimeout(context.Background(), s.settleWait)
		defer cancel()
		if err := s.settle(sctx, xid, err, writtenStates(byKey, seen)); err != nil {
			return err
		}
	}
	open = beginning && !conn.Conn().IsClosed() // the next group's transaction, begun or not
	s.commits.Add(1)
	if unread {
		s.unread.Add(1)
	}
	s.cache.put(changed, seen, rowXmin(xid))
	unshare(group)
	if nextXid != "" {
		*next, keep = &begun{conn: conn, xid: nextXid, since: since}, true
	}
	return nil
}

// carryFor bounds how long a connection goes on from group to group (begun) before it goes back to the
// pool, whose lifetime and health checks then reach it.
const carryFor = time.Minute

// mayCarry reports whether the connection of a group, taken from the pool at since, may hold the next
// group's transaction: for less than carryFor, and only while the pool has a connection to spare, so
// that the other users of the pool (the operators' reads, the sweeper, another committer) never wait for
// the load to end.
func (s *Store) mayCarry(since time.Time) bool {
	if time.Since(since) >= carryFor {
		return false
	}
	st := s.pool.Stat()
	return st.IdleConns() > 0 || st.TotalConns() < st.MaxConns()
}

// guessPause is how many groups are read, after one whose item taken as new existed, before the store
// takes items its cache does not hold as new again.
const guessPause = 64

// guessed reports whether items the cache does not hold may be taken as new, counting down guessNew
// (see guessPause) when they may not.
func (s *Store) guessed() bool {
	for {
		n := s.guessNew.Load()
		if n <= 0 {
			return true
		}
		if s.guessNew.CompareAndSwap(n, n-1) {
			return false
		}
	}
}

// lockTimeout bounds a lock wait inside a group's transaction (ReadClock sets it), at two fifths of the
// store's timeout: a lock another transaction holds too long ends the wait with an error of the server,
// and the group is decided again on a read, rather than the store's timeout cutting the connection while
// the writes of a group decided without a read wait with their COMMIT queued behind them.
func (s *Store) lockTimeout() string {
	return strconv.FormatInt(max(s.timeout.Milliseconds()*2/5, 1), 10) + "ms"
}

// writtenState is an item as a transaction wrote it: what a settled COMMIT is checked against.
type writtenState struct {
	tenant, key string
	version     int64
	updatedAt   time.Time
}

// writtenStates returns the states of the items ids (itemID) as states holds them.
func writtenStates(ids []string, states map[string]*items.Item) []writtenState {
	w := make([]writtenState, len(ids))
	for i, id := range ids {
		it := states[id]
		w[i] = writtenState{it.Tenant, it.Key, it.Version, it.UpdatedAt}
	}
	return w
}

// queueBegin queues the start of a group's transaction into b: BEGIN, and the transaction's id and the
// database's clock. It reports whether the table is young (customPlans).
func (s *Store) queueBegin(b *pgx.Batch) (young bool) {
	young = s.young()
	b.Queue("BEGIN")
	if young {
		b.Queue(customPlans)
	}
	b.Queue(s.q.ReadClock, s.lockTimeout())
	return young
}

// takeBegin takes the answers of what queueBegin queued (young as it reported), sent at sent, and
// returns the transaction's id.
func (s *Store) takeBegin(br pgx.BatchResults, young bool, sent time.Time) (string, error) {
	_, err := br.Exec()
	if err == nil && young {
		_, err = br.Exec()
	}
	var xid string
	var dbNow time.Time
	if err == nil {
		err = br.QueryRow().Scan(&xid, &dbNow, nil, nil)
	}
	if err != nil {
		return "", err
	}
	s.noteClock(dbNow, sent, time.Now())
	return xid, nil
}

// takeItems takes the answer of a group's read: the items found, by itemID, and the errors of those stored
// corrupt.
func takeItems(br pgx.BatchResults) (found map[string]*items.Item, xmins map[string]int64, bad map[string]error, err error) {
	rows, err := br.Query()
	if err != nil {
		return nil, nil, nil, err
	}
	found, xmins = map[string]*items.Item{}, map[string]int64{}
	var tenant, key string
	var doc []byte
	var xmin int64
	_, err = pgx.ForEachRow(rows, []any{&tenant, &key, &doc, &xmin}, func() error {
		it, derr := decodeItem(doc, tenant, key)
		if derr != nil {
			if bad == nil {
				bad = map[string]error{}
			}
			bad[itemID(tenant, key)] = derr
			return nil
		}
		found[itemID(tenant, key)], xmins[itemID(tenant, key)] = it, xmin
		return nil
	})
	return found, xmins, bad, err
}

// rowXmin returns the xmin of the rows a transaction wrote, from its id (pg_current_xact_id, an xid8
// whose low 32 bits are the xid rows carry); -1 when xid cannot be read, which no row's xmin equals.
func rowXmin(xid string) int64 {
	n, err := strconv.ParseUint(xid, 10, 64)
	if err != nil {
		return -1
	}
	return int64(n & 0xFFFFFFFF)
}

// decideAll decides the group's transitions in arrival order, each against what the earlier ones left,
// on the items found (by itemID; bad: those stored corrupt): it returns the items' states after the group,
// the documents of the new ones, and the items changed, in the order of their first change.
func decideAll(group []*transition, found map[string]*items.Item, bad map[string]error) (seen map[string]*items.Item, docs map[string][]byte, changed []string) {
	seen = maps.Clone(found)
	docs = map[string][]byte{}
	for _, t := range group {
		if t.err != nil {
			continue
		}
		if t.err = corruptKey(t, bad); t.err != nil {
			continue
		}
		if err := decide(t, found, seen, docs, &changed); err != nil {
			t.out, t.err = nil, err
		}
	}
	return seen, docs, changed
}

// allChanged reports whether every transition decided (those whose caller gave up aside) got an answer
// and changed every item it named: then the writes check every item the decisions read.
func allChanged(group []*transition, changed []string) bool {
	set := make(map[string]bool, len(changed))
	for _, id := range changed {
		set[id] = true
	}
	for _, t := range group {
		if t.fault != nil {
			continue
		}
		if t.err != nil {
			return false
		}
		for _, k := range t.keys {
			if !set[itemID(t.tenant, k)] {
				return false
			}
		}
	}
	return true
}

// customPlans makes the statements of a transaction planned at each execution, for the table as it is
// then. A prepared statement's plan is otherwise made generic after five executions and kept for the
// connection's life: made while a new ledger's table was a few pages (a sequential scan and a hash join
// are cheapest then), it reads the items whole, and keeps doing so as the table grows (1,591 sequential
// scans of 2,900 rows each in a 6,000-item bench run on a new schema). Planning at each execution costs a
// group's transaction about a fifth of the server's CPU, so it is done only while the table is young
// (young): a generic plan made once the table is youngPages pages reads the items by their primary key
// whatever it grows to, as the planner counts the table's pages as they are when it plans, and a
// ledger's table does not shrink. SET LOCAL ends with the transaction, so that a pooler's next client
// (PgBouncer in transaction mode) does not inherit it.
const customPlans = "SET LOCAL plan_cache_mode = force_custom_plan"

// youngPages is the size of the items table, in pages (1 MB: a thousand items or so, their versions
// included), from which the store trusts the planner's generic plans (customPlans): at 150 pages the
// generic plans of the group's read and UPDATE are already a nested loop over the keys and the primary
// key.
const youngPages = 128

// youngCheck is how often the store reads the table's size while it is young.
const youngCheck = 250 * time.Millisecond

// young reports whether the items table is young (customPlans). While it is, its size is read again at
// most every youngCheck, in a goroutine of its own on a connection of the pool: a group never waits for
// that read (it may hold the locks of its items, and it may be the transaction begun for the next
// group). Once the table is not young, it is not read again.
func (s *Store) young() bool {
	if s.mature.Load() {
		return false
	}
	last := s.youngAt.Load()
	if time.Since(time.Unix(0, last)) >= youngCheck && s.readingAge.CompareAndSwap(false, true) {
		s.youngAt.Store(time.Now().UnixNano())
		go func() {
			defer s.readingAge.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
			defer cancel()
			s.readAge(ctx)
		}()
	}
	return true
}

// readAge reads the items table's size and sets mature when it is no longer young. An error leaves it
// young: a group planned afresh is only slower.
func (s *Store) readAge(ctx context.Context) {
	var pages int64
	if err := s.pool.QueryRow(ctx, s.q.ItemsPages, s.quoted).Scan(&pages); err == nil && pages >= youngPages {
		s.mature.Store(true)
	}
}

// uncommitted is a failure of a transaction of transitions before its COMMIT was sent (no connection to be
// had, one that broke during the read): nothing was written, and it may be tried again.
type uncommitted struct{ err error }

func (e uncommitted) Error() string     { return e.err.Error() }
func (e uncommitted) Unwrap() error     { return e.err }
func (e uncommitted) SafeToRetry() bool { return true }

// DefaultSettleWait is how long a transaction whose COMMIT's answer was lost waits to learn whether it
// committed (settle): a server that crashed has that long to come back.
const DefaultSettleWait = 30 * time.Second

// settle learns the outcome of the transaction xid whose COMMIT's answer was lost (lost), which wrote the
// items written: nil when it committed, errNotCommitted when it did not, and an error of unknown outcome
// when the server cannot be asked before ctx ends. A transaction still in progress (its server process
// has not noticed the lost connection yet) is asked about again.
//
// pg_xact_status alone is not trusted with "committed": a transaction id that never reached the WAL (a
// transaction that had written nothing yet when the server crashed) may be given again after a restart,
// to a transaction that did commit. So the items are read too: every one must be at the version and time
// of change written, or past that version. One that is not proves the transaction did not commit, as it
// was all or nothing. An id the restarted server calls "in the future" never reached the WAL, and its
// transaction did not commit either.
func (s *Store) settle(ctx context.Context, xid string, lost error, written []writtenState) error {
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		var status *string
		err := s.injected("settle")
		if err == nil {
			err = s.pool.QueryRow(ctx, s.q.XactStatus, xid).Scan(&status)
		}
		if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "22023" && strings.Contains(pe.Message, "in the future") {
			return errNotCommitted
		}
		switch {
		case err == nil && status != nil && *status == "committed":
			ok, cerr := s.writtenAsSaid(ctx, written)
			if cerr == nil {
				if !ok {
					return errNotCommitted
				}
				return nil
			}
		case err == nil && (status == nil || *status == "aborted"):
			return errNotCommitted
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: postgres: the answer to a COMMIT was lost (%v), and whether it committed could not be learned "+
				"from the server within %s (transaction %s)", items.ErrUnavailable, lost, s.settleWait, xid)
		case <-time.After(wait):
		}
	}
}

// writtenAsSaid reports whether every item of written is stored at the version and time of change
// written, or past that version (changed again since).
func (s *Store) writtenAsSaid(ctx context.Context, written []writtenState) (bool, error) {
	if len(written) == 0 {
		return true, nil
	}
	tenants, keys := make([]string, len(written)), make([]string, len(written))
	for i, w := range written {
		tenants[i], keys[i] = w.tenant, w.key
	}
	rows, err := s.pool.Query(ctx, s.q.WrittenStates, tenants, keys)
	if err != nil {
		return false, err
	}
	type stored struct {
		version   int64
		updatedAt time.Time
	}
	got := map[string]stored{}
	var tenant, key string
	var st stored
	if _, err := pgx.ForEachRow(rows, []any{&tenant, &key, &st.version, &st.updatedAt}, func() error {
		got[itemID(tenant, key)] = st
		return nil
	}); err != nil {
		return false, err
	}
	for _, w := range written {
		g, ok := got[itemID(w.tenant, w.key)]
		if !ok || g.version < w.version || (g.version == w.version && !g.updatedAt.Equal(w.updatedAt)) {
			return false, nil
		}
	}
	return true, nil
}

// rollback ends the transaction open on conn; a connection that cannot is closed, so that the pool does
// not hand it out again.
func rollback(conn *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
		conn.Conn().Close(ctx) //nolint:errcheck // it is being discarded
	}
}

// countArgs returns the rows of the changes of the kept counts, in the order of their groups (so that
// two transactions that change the same rows lock them in the same order); nil when nothing changes.
func countArgs(cc items.CountChanges) *countRows {
	groups := slices.SortedFunc(maps.Keys(cc), func(a, b items.CountGroup) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Destination, b.Destination), cmp.Compare(a.State, b.State),
			cmp.Compare(boolInt(a.NeedsPerson), boolInt(b.NeedsPerson)))
	})
	var r countRows
	for _, g := range groups {
		if c := cc[g]; !c.IsZero() {
			r.add(g, c)
		}
	}
	if len(r.tenant) == 0 {
		return nil
	}
	return &r
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// corruptKey returns the error of the first of t's keys whose stored item is corrupt (in bad), or nil.
func corruptKey(t *transition, bad map[string]error) error {
	for _, k := range t.keys {
		if err := bad[itemID(t.tenant, k)]; err != nil {
			return err
		}
	}
	return nil
}

// decide runs t's fn over its keys against seen, recording each new state there (and its document in
// docs) and each item changed for the first time (its state in seen is still the one found) in changed.
// If fn fails, or returns a state that is not the item's or cannot be stored, seen, docs and changed are
// left as they were and the error is returned.
func decide(t *transition, found, seen map[string]*items.Item, docs map[string][]byte, changed *[]string) error {
	type undo struct {
		id   string
		prev *items.Item
		doc  []byte
	}
	var undos []undo
	from := len(*changed)
	t.out = make([]*items.Item, len(t.keys))
	for i, key := range t.keys {
		id := itemID(t.tenant, key)
		cur := seen[id]
		next, err := call(t, i, cur)
		var doc []byte
		if err == nil && next != nil {
			if err = advance(t.tenant, key, cur, next); err == nil {
				doc, err = encodeItem(next)
			}
		}
		if err != nil {
			for j := len(undos) - 1; j >= 0; j-- {
				seen[undos[j].id], docs[undos[j].id] = undos[j].prev, undos[j].doc
			}
			*changed = (*changed)[:from]
			return err
		}
		if next == nil {
			t.out[i] = cur
			continue
		}
		undos = append(undos, undo{id, cur, docs[id]})
		if cur == found[id] {
			*changed = append(*changed, id)
		}
		t.out[i], seen[id], docs[id] = next, next, doc
	}
	return nil
}

// call runs t's fn for its i-th key on a copy of cur, turning a panic into that transition's error: a
// bug in one decision answers the request that asked for it (a 500), not the others of its group.
func call(t *transition, i int, cur *items.Item) (next *items.Item, err error) {
	defer func() {
		if r := recover(); r != nil {
			next, err = nil, fmt.Errorf("pgstore: deciding item %d of a transition panicked: %v", i, r)
		}
	}()
	if cur != nil {
		cur = cur.Clone()
	}
	return t.fn(i, cur)
}

// advance checks that next, the state fn made of cur (nil: a new item), is tenant's key, and stamps it
// with the version and times it is stored with. updated_at orders the operator's list: it moves forward
// by a microsecond (the column's precision) at least, even when the clock stands still.
func advance(tenant, key string, cur, next *items.Item) error {
	if next.Tenant != tenant || next.Key != key {
		return fmt.Errorf("pgstore: a transition of %q returned the state of %q of tenant %q", key, next.Key, next.Tenant)
	}
	next.Version = 1
	if next.CreatedAt.IsZero() {
		next.CreatedAt = time.Now().UTC()
	}
	next.UpdatedAt = next.UpdatedAt.Truncate(time.Microsecond)
	if cur != nil {
		next.Version = cur.Version + 1
		if !next.UpdatedAt.After(cur.UpdatedAt) {
			next.UpdatedAt = cur.UpdatedAt.Add(time.Microsecond)
		}
	}
	return nil
}

// unshare gives every answer of the group an item of its own, as callers may change what they are
// given: a call that changed nothing is answered the state as found or as an earlier call of its key
// left it, which another answer may hold too (32 callers racing for one key make such a group, and so
// does a batch that names a key twice).
func unshare(group []*transition) {
	given := map[*items.Item]bool{}
	for _, t := range group {
		if t.err != nil {
			continue
		}
		for i, it := range t.out {
			switch {
			case it == nil:
			case given[it]:
				t.out[i] = it.Clone()
			default:
				given[it] = true
			}
		}
	}
}
