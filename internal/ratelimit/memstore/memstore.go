// Package memstore is an in-process ratelimit.Store built on the model:
// exact for one process, safe for concurrent use, with memory bounded by
// the keys whose state is still live (a sweeper drops expired state).
// It backs `manager local` when no Redis is configured, and serves as a
// second implementation in the differential tests.
package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/model"
)

// numShards splits the key space so unrelated keys rarely contend.
const numShards = 64

// DefaultSweepInterval is how often expired state is removed.
const DefaultSweepInterval = 10 * time.Second

// Store is the in-memory Store. A call locks the shards of all its keys in
// ascending shard order (so calls never deadlock), reads the clock, then
// evaluates and commits every entry under those locks: the call is atomic
// with respect to every key it touches.
type Store struct {
	shards [numShards]shard
	seed   maphash.Seed
	now    func() time.Time
	sweep  time.Duration

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

// New returns a Store and starts its sweeper; Close stops it.
func New(opts ...Option) *Store {
	s := &Store{seed: maphash.MakeSeed(), now: time.Now, sweep: DefaultSweepInterval, stop: make(chan struct{}), done: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*item)
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
type scratch struct {
	params   []model.Params
	shardOf  []uint8
	locked   []uint8
	verdicts []model.Verdict
	nexts    []model.State
}

func (sc *scratch) reset(n int) {
	sc.params = grow(sc.params, n)
	sc.shardOf = grow(sc.shardOf, n)
	sc.verdicts = grow(sc.verdicts, n)
	sc.nexts = grow(sc.nexts, n)
	sc.locked = sc.locked[:0]
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// Check implements ratelimit.Store.
func (s *Store) Check(ctx context.Context, req *ratelimit.Request, dec *ratelimit.Decision) error {
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
		if it := s.shards[sc.shardOf[i]].m[e.Key]; it != nil && now < it.exp {
			st = &it.st
		}
		sc.verdicts[i], sc.nexts[i] = model.Check(sc.params[i], st, now, e.Cost)
	}
	dec.Allowed = model.Decide(req.Entries, sc.verdicts)
	dec.Results = dec.Results[:0]
	for i := range req.Entries {
		v := &sc.verdicts[i]
		dec.Results = append(dec.Results, v.Result(dec.Allowed))
		if dec.Allowed && !req.DryRun && v.Allowed && req.Entries[i].Cost > 0 {
			s.commit(sc.shardOf[i], req.Entries[i].Key, sc.nexts[i], now+v.ResetAfter)
		}
		sc.nexts[i] = model.State{} // drop references held by the pool
	}
	return nil
}

func (s *Store) commit(sh uint8, key string, st model.State, exp int64) {
	m := s.shards[sh].m
	if it := m[key]; it != nil {
		it.st, it.exp = st, exp
		return
	}
	m[key] = &item{st: st, exp: exp}
	if shard := &s.shards[sh]; len(m) > shard.peak {
		shard.peak = len(m)
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

// Len returns how many keys hold state, expired or not (until swept).
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
		now := s.now().UnixMicro()
		for k, it := range sh.m {
			if now >= it.exp {
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
		sh.mu.Unlock()
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

// InMemory reports that Check does no I/O, so callers need not put a
// deadline on it.
func (s *Store) InMemory() bool { return true }

// Close stops the sweeper. The store still answers afterwards, without
// sweeping.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.stop) })
	<-s.done
	return nil
}
