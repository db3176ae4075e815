// Package memstore is an in-process ratelimit.Store built on the model:
// exact for one process, safe for concurrent use, with memory bounded by
// the keys whose state is still live (a sweeper drops expired state) and,
// optionally, by a cap on those keys (WithMaxKeys).
// It backs `manager local` when no Redis is configured, and serves as a
// second implementation in the differential tests.
package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
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

// DefaultMaxKeys is the cap `manager local` puts on the keys it holds:
// about 175 MB at about 175 bytes per key.
const DefaultMaxKeys = 1_000_000

// reclaimEvery is the least time between two sweeps of one shard to make
// room for new keys while the store is full: a store full of live keys
// does not scan its shards for every request that brings a new key.
const reclaimEvery = 100 * time.Millisecond

// Store is the in-memory Store. A call locks the shards of all its keys in
// ascending shard order (so calls never deadlock), reads the clock, then
// evaluates and commits every entry under those locks: the call is atomic
// with respect to every key it touches.
type Store struct {
	shards [numShards]shard
	seed   maphash.Seed
	now    func() time.Time
	sweep  time.Duration

	// keys counts the keys the maps hold, expired or not; a new key is
	// counted before it is added, so maxKeys is never exceeded.
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

// item is one key's state and the µs at which it becomes untouched again
// (its TTL end); from then on it is ignored and may be swept.
type item struct {
	st  model.State
	exp int64
}

// Option configures a Store.
type Option func(*Store)

// WithClock replaces time.Now (tests drive a simulated clock with it).
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithSweepInterval sets how often expired state is removed; 0 or less
// disables the sweeper (expired state is then only replaced on use).
func WithSweepInterval(d time.Duration) Option { return func(s *Store) { s.sweep = d } }

// WithMaxKeys caps the keys the store holds (0 or less: no cap, the
// default). When it holds n keys and expired ones cannot be reclaimed, a
// request that needs a key it does not hold gets an error wrapping
// ratelimit.ErrCapacity and changes nothing; requests on the keys it holds
// are decided as always.
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
type scratch struct {
	params   []model.Params
	shardOf  []uint8
	locked   []uint8
	verdicts []model.Verdict
	nexts    []model.State
	absent   []bool // the key is not in its shard's map
}

func (sc *scratch) reset(n int) {
	sc.params = grow(sc.params, n)
	sc.shardOf = grow(sc.shardOf, n)
	sc.verdicts = grow(sc.verdicts, n)
	sc.nexts = grow(sc.nexts, n)
	sc.absent = grow(sc.absent, n)
	sc.locked = sc.locked[:0]
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
		sc.shardOf[i] = uint8(maphash.String(s.seed, e.Key) % numShards)
		sc.locked = insertSorted(sc.locked, sc.shardOf[i])
	}
	err := s.check(req, dec, sc)
	if errors.Is(err, errNoRoom) && s.reclaim() {
		err = s.check(req, dec, sc) // decided again: time and state may have moved
	}
	if errors.Is(err, errNoRoom) {
		return s.errFull
	}
	return err
}

// errNoRoom: the request needs new keys and the store holds its maximum.
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
	for i := range req.Entries {
		e := &req.Entries[i]
		var st *model.State
		it := s.shards[sc.shardOf[i]].m[e.Key]
		if it != nil && now < it.exp {
			st = &it.st
		}
		sc.absent[i] = it == nil
		sc.verdicts[i], sc.nexts[i] = model.Check(sc.params[i], st, now, e.Cost)
	}
	dec.Allowed = model.Decide(req.Entries, sc.verdicts)
	commit := dec.Allowed && !req.DryRun
	if commit {
		var added int64
		for i := range req.Entries {
			if sc.absent[i] && sc.verdicts[i].Allowed && req.Entries[i].Cost > 0 {
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
		dec.Results = append(dec.Results, v.Result(dec.Allowed))
		if commit && v.Allowed && req.Entries[i].Cost > 0 {
			s.commit(sc.shardOf[i], req.Entries[i].Key, sc.nexts[i], now+v.ResetAfter)
		}
		sc.nexts[i] = model.State{} // drop references held by the pool
	}
	return nil
}

// commit stores a key's state; a new key was counted in s.keys already.
func (s *Store) commit(sh uint8, key string, st model.State, exp int64) {
	shard := &s.shards[sh]
	shard.minExp = min(shard.minExp, exp)
	if it := shard.m[key]; it != nil {
		it.st, it.exp = st, exp
		return
	}
	shard.m[key] = &item{st: st, exp: exp}
	if len(shard.m) > shard.peak {
		shard.peak = len(shard.m)
	}
}

// reclaim sweeps the shards that may hold expired keys and were not swept
// in the last reclaimEvery, and reports whether it removed any.
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

// Len returns how many keys hold state, expired or not (until swept): the
// keys WithMaxKeys caps.
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
