// Package memstore is an in-process ratelimit.Store built on the model:
// exact for one process, safe for concurrent use, with memory bounded by
// the buckets whose state is still live (a sweeper drops expired state)
// and, optionally, by a cap on those buckets (WithMaxKeys). Like the Redis
// store it keeps one bucket per (policy, key value) (ratelimit.SplitKey),
// holding the state of each of its limits, which expires with the
// longest-lived of them.
// It backs `manager local` when no Redis is configured, and serves as a
// second implementation in the differential tests.
package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/model"
)

// numShards splits the key space so unrelated keys rarely contend.
const numShards = 64

// DefaultSweepInterval is how often expired state is removed.
const DefaultSweepInterval = 10 * time.Second

// DefaultMaxKeys is the cap `manager local` puts on the buckets it holds:
// about 200 MB at about 200 bytes per bucket of one limit (a bucket of
// three takes about 360).
const DefaultMaxKeys = 1_000_000

// reclaimEvery is the least time between two sweeps of one shard to make
// room for new buckets while the store is full: a store full of live
// buckets does not scan its shards for every request that brings a new one.
const reclaimEvery = 100 * time.Millisecond

// Store is the in-memory Store. A call locks the shards of all its buckets
// in ascending shard order (so calls never deadlock), reads the clock, then
// evaluates and commits every entry under those locks: the call is atomic
// with respect to every bucket it touches.
type Store struct {
	shards [numShards]shard
	seed   maphash.Seed
	now    func() time.Time
	sweep  time.Duration

	// keys counts the buckets the maps hold, expired or not; a new bucket
	// is counted before it is added, so maxKeys is never exceeded.
	keys    atomic.Int64
	maxKeys int64 // 0: no cap
	errFull error

	scratch   sync.Pool
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

type shard struct {
	mu sync.Mutex
	m  map[string]*item
	// peak is the most keys m has held since it was last rebuilt. A Go map
	// never shrinks, so after a spike of distinct keys has expired, Sweep
	// moves the survivors into a new map and the memory goes back.
	peak int
	// minExp is at most the earliest expiry in m (µs; MaxInt64 when
	// empty): before it, the shard has nothing to reclaim.
	minExp int64
	// swept is when the shard was last swept (µs).
	swept int64
}

// shrinkBelow: a shard whose map holds fewer than 1/shrinkRatio of its peak
// (and had at least shrinkMinPeak keys) is rebuilt by Sweep.
const (
	shrinkRatio   = 4
	shrinkMinPeak = 1024
)

// item is one bucket: the state of each of its limits and the µs at which
// the last of them becomes untouched again (its TTL end); from then on it
// is ignored and may be swept. A limit's state stays until the bucket
// goes, also when the limit is no longer used (renamed, removed): reading
// a state after its own expiry gives what an untouched one would.
type item struct {
	exp   int64
	first limit   // most buckets hold one to three limits
	more  []limit // the others
}

// limit is one limit's state in its bucket.
type limit struct {
	field string
	st    model.State
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
// limits (see ratelimit.SplitKey). When it holds n buckets and expired
// ones cannot be reclaimed, a request that needs a bucket it does not hold
// gets an error wrapping ratelimit.ErrCapacity and changes nothing;
// requests on the buckets it holds are decided as always.
func WithMaxKeys(n int) Option { return func(s *Store) { s.maxKeys = int64(max(n, 0)) } }

// New returns a Store and starts its sweeper; Close stops it.
func New(opts ...Option) *Store {
	s := &Store{seed: maphash.MakeSeed(), now: time.Now, sweep: DefaultSweepInterval, stop: make(chan struct{}), done: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*item)
		s.shards[i].minExp = math.MaxInt64
	}
	s.errFull = fmt.Errorf("memstore: %w: it holds %d keys, its maximum", ratelimit.ErrCapacity, s.maxKeys)
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
			sh := uint8(maphash.String(s.seed, bucket) % numShards)
			sc.bucket, sc.shardOf = append(sc.bucket, bucket), append(sc.shardOf, sh)
			sc.locked = insertSorted(sc.locked, sh)
		}
		sc.bucketOf[i] = g
	}
	sc.items = grow(sc.items, len(sc.bucket))
	err := s.check(req, dec, sc)
	if errors.Is(err, errNoRoom) && s.reclaim() {
		err = s.check(req, dec, sc) // decided again: time and state may have moved
	}
	clear(sc.items) // drop references held by the pool
	clear(sc.bucket)
	clear(sc.index)
	clear(sc.field)
	if errors.Is(err, errNoRoom) {
		return s.errFull
	}
	return err
}

// errNoRoom: the request needs new buckets and the store holds its maximum.
var errNoRoom = errors.New("no room")

// check evaluates and commits req under the locks of its shards, or
// returns errNoRoom having changed nothing.
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
		sc.items[g] = s.shards[sc.shardOf[g]].m[b]
	}
	for i := range req.Entries {
		var st *model.State
		if it := sc.items[sc.bucketOf[i]]; it != nil && now < it.exp {
			st = it.state(sc.field[i])
		}
		switch {
		case req.Refund:
			sc.verdicts[i], sc.nexts[i] = model.Refund(sc.params[i], st, now, req.Entries[i].Cost)
		case req.Entries[i].ChargeAlways:
			sc.verdicts[i], sc.nexts[i] = model.CheckAlways(sc.params[i], st, now, req.Entries[i].Cost)
		default:
			sc.verdicts[i], sc.nexts[i] = model.Check(sc.params[i], st, now, req.Entries[i].Cost)
		}
	}
	dec.Allowed = model.Decide(req.Entries, sc.verdicts)
	if !req.DryRun {
		var added int64
		for g := range sc.bucket {
			if sc.items[g] == nil && s.writes(req, dec.Allowed, sc, g) {
				added++
			}
		}
		if added > 0 {
			if total := s.keys.Add(added); s.maxKeys > 0 && total > s.maxKeys {
				s.keys.Add(-added)
				clear(sc.nexts)
				return errNoRoom
			}
		}
	}
	dec.Results = dec.Results[:0]
	for i := range req.Entries {
		v := &sc.verdicts[i]
		dec.Results = append(dec.Results, v.Result(model.Consumed(dec.Allowed, &req.Entries[i])))
		if !req.DryRun && s.written(req, dec.Allowed, sc, i) {
			s.commit(sc, sc.bucketOf[i], sc.field[i], sc.nexts[i], now+v.ResetAfter)
		}
		sc.nexts[i] = model.State{} // drop references held by the pool
	}
	return nil
}

// writes reports whether req, decided allowed or not, writes to bucket g.
func (s *Store) writes(req *ratelimit.Request, allowed bool, sc *scratch, g int) bool {
	for i := range req.Entries {
		if sc.bucketOf[i] == g && s.written(req, allowed, sc, i) {
			return true
		}
	}
	return false
}

// written reports whether entry i of req, decided allowed or not, writes
// its state (model.Writes).
func (s *Store) written(req *ratelimit.Request, allowed bool, sc *scratch, i int) bool {
	if req.Refund {
		return sc.nexts[i].Alg != 0 // never a new bucket: a refund changes only held units
	}
	return model.Writes(allowed, &req.Entries[i], &sc.verdicts[i], &sc.nexts[i])
}

// commit stores a limit's state in bucket g, whose expiry moves to exp
// if that is later; a new bucket was counted in s.keys already.
func (s *Store) commit(sc *scratch, g int, field string, st model.State, exp int64) {
	shard := &s.shards[sc.shardOf[g]]
	it := sc.items[g]
	if it == nil {
		it = &item{exp: exp, first: limit{field: field, st: st}}
		sc.items[g] = it
		shard.m[sc.bucket[g]] = it
		if len(shard.m) > shard.peak {
			shard.peak = len(shard.m)
		}
	} else {
		it.set(field, st)
		it.exp = max(it.exp, exp)
	}
	shard.minExp = min(shard.minExp, it.exp)
}

// reclaim sweeps the shards that may hold expired buckets and were not
// swept in the last reclaimEvery, and reports whether it removed any.
func (s *Store) reclaim() bool {
	removed := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		now := s.now().UnixMicro()
		if now >= sh.minExp && now-sh.swept >= reclaimEvery.Microseconds() {
			removed += s.sweepLocked(sh, now)
		}
		sh.mu.Unlock()
	}
	return removed > 0
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

// Len returns how many buckets hold state, expired or not (until swept):
// the buckets WithMaxKeys caps.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
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
	return removed
}

// sweepLocked removes sh's expired state; sh is locked.
func (s *Store) sweepLocked(sh *shard, now int64) int {
	removed := 0
	minExp := int64(math.MaxInt64)
	for k, it := range sh.m {
		if now >= it.exp {
			delete(sh.m, k)
			removed++
		} else {
			minExp = min(minExp, it.exp)
		}
	}
	sh.minExp, sh.swept = minExp, now
	s.keys.Add(int64(-removed))
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
