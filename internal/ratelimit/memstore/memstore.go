// Package memstore is an in-process ratelimit.Store built on the model:
// exact for one process, safe for concurrent use, with memory bounded by
// the buckets whose state is still live (a sweeper drops expired state)
// and, optionally, by a cap on those buckets (WithMaxKeys), beyond which
// the least recently used are evicted. Like the Redis
// store it keeps one bucket per (policy, key value) (ratelimit.SplitKey),
// holding the state of each of its limits, which expires with the
// longest-lived of them.
// It backs `manager local` when no Redis is configured, and serves as a
// second implementation in the differential tests.
package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/model"
)

// DefaultSweepInterval is how often expired state is removed.
const DefaultSweepInterval = 10 * time.Second

// DefaultMaxKeys is the cap `manager local` and the middleware put on the
// buckets the store holds: about 250 MB at about 250 bytes per bucket of
// one limit (a bucket of three takes about 400).
const DefaultMaxKeys = 1_000_000

// Store is the in-memory Store. A call locks the shards of all its buckets
// in ascending shard order (so calls never deadlock), reads the clock, then
// evaluates and commits every entry under those locks: the call is atomic
// with respect to every bucket it touches.
type Store struct {
	shards []shard
	seed   maphash.Seed
	now    func() time.Time
	sweep  time.Duration

	maxKeys   int64 // 0: no cap; else the sum of the shards' max
	evictions atomic.Uint64

	bans banIndex

	scratch   sync.Pool
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// item is one bucket: the state of each of its limits and the µs at which
// the last of them becomes untouched again (its TTL end); from then on it
// is ignored and may be swept. A limit's state stays until the bucket
// goes, also when the limit is no longer used (renamed, removed): reading
// a state after its own expiry gives what an untouched one would.
type item struct {
	key        string // its key in the shard's map
	prev, next *item  // its neighbors in the shard's list
	exp        int64
	first      limit   // most buckets hold one to three limits
	more       []limit // the others
	penalty    model.PenaltyState
	// banned, when not 0, is the end (µs) of the ban the bucket holds,
	// and pinned says that it holds units in flight (a Concurrency
	// limit's holds) or a live reservation. Either keeps it off its
	// shard's list, never evicted: an evicted ban would be lifted,
	// evicted holds freed before their release or lease timeout, an
	// evicted reservation's settlement would take nothing.
	banned int64
	pinned bool
}

// limit is one limit's state in its bucket, and its reservations
// (Entry.Reserve), which the bucket's expiry covers.
type limit struct {
	field string
	st    model.State
	res   []model.Reservation
}

// state returns the state of field, or nil.
func (it *item) state(field string) *model.State {
	if it.first.field == field {
		return &it.first.st
	}
	for i := range it.more {
		if it.more[i].field == field {
			return &it.more[i].st
		}
	}
	return nil
}

// holding reports whether a limit of it holds units in flight, or a
// reservation live at now (an ended one, not yet purged, pins nothing).
func (it *item) holding(now int64) bool {
	if len(it.first.st.Holds) > 0 || model.ReservationsEnd(it.first.res) > now {
		return true
	}
	for i := range it.more {
		if len(it.more[i].st.Holds) > 0 || model.ReservationsEnd(it.more[i].res) > now {
			return true
		}
	}
	return false
}

// reservations returns field's reservations, or nil.
func (it *item) reservations(field string) []model.Reservation {
	if it.first.field == field {
		return it.first.res
	}
	for i := range it.more {
		if it.more[i].field == field {
			return it.more[i].res
		}
	}
	return nil
}

// setReservations stores field's reservations (a field it has no state
// for yet gets an untouched one).
func (it *item) setReservations(field string, res []model.Reservation) {
	if it.first.field == field {
		it.first.res = res
		return
	}
	for i := range it.more {
		if it.more[i].field == field {
			it.more[i].res = res
			return
		}
	}
	it.more = append(it.more, limit{field: strings.Clone(field), res: res})
}

// set stores field's state. A new field is copied: it is a substring of
// its request's key, which it would otherwise keep alive (the first
// field's key is the bucket's map key anyway).
func (it *item) set(field string, st model.State) {
	if p := it.state(field); p != nil {
		*p = st
		return
	}
	it.more = append(it.more, limit{field: strings.Clone(field), st: st})
}

// Option configures a Store.
type Option func(*Store)

// WithClock replaces time.Now (tests drive a simulated clock with it).
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithSweepInterval sets how often expired state is removed; 0 or less
// disables the sweeper (expired state is then only replaced on use).
func WithSweepInterval(d time.Duration) Option { return func(s *Store) { s.sweep = d } }

// WithMaxKeys caps the buckets the store holds (0 or less: no cap, the
// default): a bucket is one (policy, key value), whatever the number of its
// limits (see ratelimit.SplitKey). A request that writes a bucket the full
// store does not hold first evicts the least recently used bucket of that
// bucket's shard (see minShardKeys); a request uses its buckets whether it
// is allowed or denied, and an evicted bucket starts afresh, as a key
// Redis evicted does. A request that needs more buckets of one shard than
// it may hold gets an error wrapping ratelimit.ErrCapacity and changes
// nothing.
func WithMaxKeys(n int) Option { return func(s *Store) { s.maxKeys = int64(max(n, 0)) } }

// New returns a Store and starts its sweeper; Close stops it.
func New(opts ...Option) *Store {
	s := &Store{seed: maphash.MakeSeed(), now: time.Now, sweep: DefaultSweepInterval, stop: make(chan struct{}), done: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	n := shardsFor(s.maxKeys)
	s.shards = make([]shard, n)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.m = make(map[string]*item)
		if s.maxKeys > 0 {
			// The shards' caps add up to the store's.
			sh.max = int(s.maxKeys / int64(n))
			if int64(i) < s.maxKeys%int64(n) {
				sh.max++
			}
		}
	}
	s.scratch.New = func() any { return new(scratch) }
	if s.sweep > 0 {
		go s.sweeper()
	} else {
		close(s.done)
	}
	return s
}

var _ ratelimit.Store = (*Store)(nil)

// scratch holds one call's working slices, pooled to avoid allocations.
// Entries i, buckets g (in order of first appearance).
type scratch struct {
	params   []model.Params
	field    []string // entry i's field in its bucket
	bucketOf []int    // entry i's bucket
	verdicts []model.Verdict
	nexts    []model.State
	res      [][]model.Reservation // entry i's reservations to store (see model.ApplyReserved)
	boxes    []model.Box           // bucket g's penalty box

	bucket  []string // bucket g's key
	shardOf []uint8
	items   []*item // bucket g's item when the map holds it, else nil
	locked  []uint8
	// index maps a bucket to g once a request has many (see find).
	index map[string]int
}

// find returns the index of bucket in sc.bucket, len(sc.bucket) when it
// is not there. A policy's limits come together, so the last bucket is
// the likely one; a few more are scanned, and past that a map answers (a
// namespace of many policies gives a request thousands of buckets).
func (sc *scratch) find(bucket string) int {
	n := len(sc.bucket)
	if n > 0 && sc.bucket[n-1] == bucket {
		return n - 1
	}
	if n <= 32 {
		for g := range n {
			if sc.bucket[g] == bucket {
				return g
			}
		}
		if n == 32 { // the next bucket makes the request large
			if sc.index == nil {
				sc.index = make(map[string]int)
			}
			for g, b := range sc.bucket {
				sc.index[b] = g
			}
			sc.index[bucket] = n
		}
		return n
	}
	if g, ok := sc.index[bucket]; ok {
		return g
	}
	sc.index[bucket] = n
	return n
}

func (sc *scratch) reset(n int) {
	sc.params = grow(sc.params, n)
	sc.field = grow(sc.field, n)
	sc.bucketOf = grow(sc.bucketOf, n)
	sc.verdicts = grow(sc.verdicts, n)
	sc.nexts = grow(sc.nexts, n)
	sc.res = grow(sc.res, n)
	sc.bucket, sc.shardOf, sc.items, sc.locked = sc.bucket[:0], sc.shardOf[:0], sc.items[:0], sc.locked[:0]
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// Check implements ratelimit.Store. It does no I/O, so it has no use for
// the timeout.
func (s *Store) Check(ctx context.Context, _ time.Duration, req *ratelimit.Request, dec *ratelimit.Decision) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore check: %w", err)
	}
	if err := req.Validate(); err != nil {
		return fmt.Errorf("memstore check: %w", err)
	}
	sc := s.scratch.Get().(*scratch)
	defer s.scratch.Put(sc)
	n := len(req.Entries)
	sc.reset(n)
	for i := range req.Entries {
		e := &req.Entries[i]
		sc.params[i] = model.CompileValid(e.Limit)
		bucket, field := ratelimit.SplitKey(e.Key)
		sc.field[i] = field
		g := sc.find(bucket)
		if g == len(sc.bucket) {
			sh := uint8(maphash.String(s.seed, bucket) % uint64(len(s.shards))) //nolint:gosec // below len(s.shards) <= maxShards
			sc.bucket, sc.shardOf = append(sc.bucket, bucket), append(sc.shardOf, sh)
			sc.locked = insertSorted(sc.locked, sh)
		}
		sc.bucketOf[i] = g
	}
	sc.items = grow(sc.items, len(sc.bucket))
	sc.boxes = grow(sc.boxes, len(sc.bucket))
	clear(sc.boxes)
	err := s.check(req, dec, sc)
	clear(sc.items) // drop references held by the pool
	clear(sc.bucket)
	clear(sc.index)
	clear(sc.field)
	return err
}

// check evaluates and commits req under the locks of its shards, or
// returns an error wrapping ratelimit.ErrCapacity having changed nothing.
func (s *Store) check(req *ratelimit.Request, dec *ratelimit.Decision, sc *scratch) error {
	for _, i := range sc.locked {
		s.shards[i].mu.Lock()
	}
	defer func() {
		for j := len(sc.locked) - 1; j >= 0; j-- {
			s.shards[sc.locked[j]].mu.Unlock()
		}
	}()

	now := s.now().UnixMicro()
	for g, b := range sc.bucket {
		sh := &s.shards[sc.shardOf[g]]
		it := sh.m[b]
		if it != nil {
			sh.touch(it, now) // used, whether the call allows, denies or only reads
		}
		sc.items[g] = it
	}
	for i := range req.Entries {
		sc.apply(req, i, now)
		if req.Action.Decides() {
			if g := sc.bucketOf[i]; sc.boxes[g].Open(&req.Entries[i]) {
				sc.boxes[g].State = sc.penaltyState(g, now)
			}
		}
	}
	if req.Action.Decides() {
		model.ApplyBans(sc.bucketOf[:len(req.Entries)], sc.boxes, sc.verdicts, sc.nexts, now)
	}
	dec.Allowed = model.Decide(req, sc.verdicts)
	if req.Action.Decides() {
		model.CountDenials(req.Entries, sc.bucketOf[:len(req.Entries)], sc.boxes, sc.verdicts, now)
	}
	if req.Action != ratelimit.DryRun && s.maxKeys > 0 {
		if err := s.makeRoom(req, dec.Allowed, sc, now); err != nil {
			clear(sc.nexts)
			return err
		}
	}
	dec.Results = dec.Results[:0]
	for i := range req.Entries {
		v := &sc.verdicts[i]
		dec.Results = append(dec.Results, v.Result(model.Consumed(dec.Allowed, &req.Entries[i])))
		if req.Action != ratelimit.DryRun && s.written(req, dec.Allowed, sc, i) {
			s.commit(sc, sc.bucketOf[i], sc.field[i], sc.nexts[i], now, now+v.ResetAfter)
		}
		if s.reserved(req, dec.Allowed, sc, i) {
			s.commitReservations(sc, sc.bucketOf[i], sc.field[i], sc.res[i], now)
		}
		sc.nexts[i], sc.res[i] = model.State{}, nil // drop references held by the pool
	}
	if req.Action == ratelimit.Consume {
		for g := range sc.boxes {
			if b := &sc.boxes[g]; b.Write {
				s.commitPenalty(sc, g, b.Next, b.Next.Expiry(b.Params), b.Ban > 0 && !b.Shadow)
			}
		}
	}
	return nil
}

// apply evaluates entry i of req at now against its stored state (and
// reservations) into sc.verdicts, sc.nexts and sc.res.
func (sc *scratch) apply(req *ratelimit.Request, i int, now int64) {
	var st *model.State
	it := sc.items[sc.bucketOf[i]]
	live := it != nil && now < it.exp
	if live {
		st = it.state(sc.field[i])
	}
	e := &req.Entries[i]
	if !model.Reserves(e, req.Action) {
		sc.verdicts[i], sc.nexts[i] = model.Apply(sc.params[i], st, now, e, req.Action)
		return
	}
	var res []model.Reservation
	if live {
		res = it.reservations(sc.field[i])
	}
	sc.verdicts[i], sc.nexts[i], sc.res[i] = model.ApplyReserved(sc.params[i], st, res, now, e, req.Action)
}

// penaltyState returns bucket g's stored penalty state at now.
func (sc *scratch) penaltyState(g int, now int64) model.PenaltyState {
	if it := sc.items[g]; it != nil && now < it.exp {
		return it.penalty
	}
	return model.PenaltyState{}
}

// writes reports whether req, decided allowed or not, writes to bucket g.
func (s *Store) writes(req *ratelimit.Request, allowed bool, sc *scratch, g int) bool {
	if req.Action == ratelimit.Consume && sc.boxes[g].Write {
		return true
	}
	for i := range req.Entries {
		if sc.bucketOf[i] == g && (s.written(req, allowed, sc, i) || s.reserved(req, allowed, sc, i)) {
			return true
		}
	}
	return false
}

// reserved reports whether entry i of req, decided allowed or not, stores
// its reservations (model.StoresReserved).
func (s *Store) reserved(req *ratelimit.Request, allowed bool, sc *scratch, i int) bool {
	e := &req.Entries[i]
	return model.Reserves(e, req.Action) && model.StoresReserved(allowed, &sc.verdicts[i], req.Action, sc.res[i])
}

// written reports whether entry i of req, decided allowed or not, writes
// its state (model.Writes).
func (s *Store) written(req *ratelimit.Request, allowed bool, sc *scratch, i int) bool {
	if !req.Action.Decides() {
		return sc.nexts[i].Alg != 0 // never a new bucket: a refund, release or settlement changes only held units
	}
	return model.Writes(allowed, &req.Entries[i], &sc.verdicts[i], &sc.nexts[i])
}

// commit stores a limit's state in bucket g, at now, whose expiry moves
// to exp if that is later; room for a new bucket was made already. A
// bucket that holds units in flight or a reservation leaves its shard's
// list until it holds none.
func (s *Store) commit(sc *scratch, g int, field string, st model.State, now, exp int64) {
	it := sc.items[g]
	if it == nil {
		it = &item{key: sc.bucket[g], exp: exp, first: limit{field: field, st: st}}
		s.add(sc, g, it)
	} else {
		it.set(field, st)
		it.exp = max(it.exp, exp)
	}
	s.pin(sc, g, it, now)
}

// pin takes bucket g's item it off its shard's list while it holds units
// in flight or a live reservation, and puts it back once it holds none.
func (s *Store) pin(sc *scratch, g int, it *item, now int64) {
	if holding := it.holding(now); holding != it.pinned {
		s.shards[sc.shardOf[g]].setOffList(it, it.banned, holding, true)
	}
}

// commitReservations stores a limit's reservations in bucket g, whose
// expiry moves to the end of the last of them if that is later; room for
// a new bucket was made already.
func (s *Store) commitReservations(sc *scratch, g int, field string, res []model.Reservation, now int64) {
	exp := model.ReservationsEnd(res)
	it := sc.items[g]
	if it == nil {
		it = &item{key: sc.bucket[g], exp: exp, first: limit{field: field, res: res}}
		s.add(sc, g, it)
	} else {
		it.setReservations(field, res)
		it.exp = max(it.exp, exp)
	}
	s.pin(sc, g, it, now)
}

// add makes it bucket g's item, new in its shard, the most recently used.
func (s *Store) add(sc *scratch, g int, it *item) {
	shard := &s.shards[sc.shardOf[g]]
	sc.items[g] = it
	shard.m[it.key] = it
	shard.pushFront(it)
	if len(shard.m) > shard.peak {
		shard.peak = len(shard.m)
	}
}

// commitPenalty stores bucket g's penalty state, whose expiry moves to
// exp if that is later, and takes a bucket it bans out of its shard's
// list until the ban's end; room for a new bucket was made already.
func (s *Store) commitPenalty(sc *scratch, g int, st model.PenaltyState, exp int64, ban bool) {
	it := sc.items[g]
	if it == nil {
		it = &item{key: sc.bucket[g], exp: exp}
		s.add(sc, g, it)
	} else {
		it.exp = max(it.exp, exp)
	}
	it.penalty = st
	if ban {
		s.shards[sc.shardOf[g]].setOffList(it, st.Until, it.pinned, true)
	}
}

// insertSorted adds v to the ascending set s.
func insertSorted(s []uint8, v uint8) []uint8 {
	i := 0
	for i < len(s) && s[i] < v {
		i++
	}
	if i < len(s) && s[i] == v {
		return s
	}
	s = append(s, 0)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}

// Sweep removes every expired state now and returns how many it removed.
func (s *Store) Sweep() int {
	removed := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		removed += s.sweepLocked(sh, s.now().UnixMicro())
		sh.mu.Unlock()
	}
	s.bans.sweep(s.now())
	return removed
}

// sweepLocked removes sh's expired state; sh is locked.
func (s *Store) sweepLocked(sh *shard, now int64) int {
	removed := 0
	sh.relinkEndedBans(now) // a bucket expires after its ban's end
	for k, it := range sh.m {
		if now >= it.exp {
			if it.offList() {
				sh.unlisted--
			} else {
				sh.unlink(it)
			}
			delete(sh.m, k)
			removed++
		}
	}
	if sh.peak >= shrinkMinPeak && len(sh.m)*shrinkRatio < sh.peak {
		m := make(map[string]*item, len(sh.m))
		for k, it := range sh.m {
			m[k] = it
		}
		sh.m, sh.peak = m, len(m)
	}
	return removed
}

func (s *Store) sweeper() {
	defer close(s.done)
	t := time.NewTicker(s.sweep)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep()
		}
	}
}

// Close stops the sweeper. The store still answers afterwards, without
// sweeping.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.stop) })
	<-s.done
	return nil
}
