package check

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// denyCache remembers denied keys until their retry time, so a flood of
// requests that will be denied anyway does not reach Redis. It is exact:
// a denial is served from the cache only until the moment the store said
// the same request could be allowed, measured from when the call was sent
// (never later than the store's own instant), and only for a cost at least
// as large as the one that was denied, against the same limit (a
// descriptor's own limit may name another number for the same bucket on
// the next request). Other processes can only consume
// more, which makes the real retry time later, never earlier.
//
// A refund makes room in a bucket: forget drops its keys' denials, and a
// denial whose call was sent before the refund (still in flight when it
// came) is not remembered afterwards. A ban (the bucket's penalty box)
// is no room a refund can give: it denies every cost until its end, and
// refunds neither drop it nor keep it from being remembered. It is
// remembered until the ban's end and no longer, whatever the retry time
// of the limit whose denial issued it (a window's end, a concurrency
// limit's lease timeout): after the ban the bucket's limits decide again,
// with the room refunds and releases gave them meanwhile. A lift ends a
// ban: drop forgets it, and a ban whose call was sent before the lift is
// not remembered afterwards.
//
// A FLUSHALL or a lost Redis master resets state in Redis that the cache
// still remembers: such keys stay denied until their cached retry time.
type denyCache struct {
	seed   maphash.Seed
	shards [64]denyShard
	// forgotten holds, for the keys that hash to each slot, the last
	// moment (UnixNano) one of them was forgotten; forgottenAll the last
	// moment all were. A denial sent no later is not stored. Slots, not
	// keys, so the memory is fixed: a key that shares a slot with a
	// refunded one only misses the cache for calls in flight.
	forgotten    [forgetSlots]atomic.Int64
	forgottenAll atomic.Int64
	// lifted is forgotten for lifts (drop): a ban sent no later is not
	// stored.
	lifted [forgetSlots]atomic.Int64
}

const forgetSlots = 4096

// denyShard holds up to its size of denials, least recently used first
// out: a full shard makes room for a new denial in constant time.
type denyShard struct {
	mu      sync.Mutex
	entries *simplelru.LRU[string, deniedEntry]
	removed int // entries dropped, by expiry, eviction or clear; for tests
}

type deniedEntry struct {
	// until is when the denial stops being answered from the cache (its
	// ratelimit.Result.DeniedFor); retry is the retry time it reports,
	// which a ban's may pass (the limit that denied waits longer).
	until, retry time.Time
	cost         int64
	limit        ratelimit.Limit
	reset        time.Time
	// banned: the bucket is banned until until, whatever the cost.
	banned bool
}

func newDenyCache(maxEntries int) *denyCache {
	c := &denyCache{seed: maphash.MakeSeed()}
	perShard := max(maxEntries/len(c.shards), 16)
	for i := range c.shards {
		s := &c.shards[i]
		s.entries, _ = simplelru.NewLRU(perShard, func(string, deniedEntry) { s.removed++ }) // size > 0: no error
	}
	return c
}

func (c *denyCache) shard(key string) *denyShard {
	return &c.shards[maphash.String(c.seed, key)%uint64(len(c.shards))]
}

// slot is the index in forgotten and lifted of the slot of key.
func (c *denyCache) slot(key string) uint64 {
	return maphash.String(c.seed, key) / uint64(len(c.shards)) % forgetSlots
}

// lookup returns the cached denial of key for a request of the given cost
// against limit.
func (c *denyCache) lookup(key string, cost int64, limit ratelimit.Limit, now time.Time) (deniedEntry, bool) {
	s := c.shard(key)
	s.mu.Lock()
	e, ok := s.entries.Get(key)
	if ok && !now.Before(e.until) {
		s.entries.Remove(key)
		ok = false
	}
	s.mu.Unlock()
	if !ok || cost < e.cost && !e.banned || limit != e.limit {
		return deniedEntry{}, false
	}
	return e, true
}

// store caches a denial decided by a call sent at now, unless the key was
// forgotten since (see forget), or for a ban lifted since (drop). In a
// full shard it takes the place of the least recently used denial: the
// cache only ever answers less, never wrongly.
func (c *denyCache) store(key string, e deniedEntry, now time.Time) {
	sent, slot := now.UnixNano(), c.slot(key)
	if e.banned && sent <= c.lifted[slot].Load() {
		return // the call may have been decided before a lift
	}
	if !e.banned && (sent <= c.forgotten[slot].Load() || sent <= c.forgottenAll.Load()) {
		return // the call may have been decided before a refund
	}
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.entries.Peek(key); ok && !e.banned && (old.banned || old.limit == e.limit && old.cost < e.cost) && now.Before(old.until) {
		// The live denial of a smaller cost covers more requests, with
		// its own retry time; keep it.
		return
	}
	s.entries.Add(key, e)
}

// forget drops the denials of keys at now, bans excepted: a refund gave
// their buckets room, which lifts a limit's denial and never a ban.
func (c *denyCache) forget(keys []string, now time.Time) { c.remove(keys, now, false) }

// drop is forget, bans included: they were lifted.
func (c *denyCache) drop(keys []string, now time.Time) { c.remove(keys, now, true) }

func (c *denyCache) remove(keys []string, now time.Time, bans bool) {
	at := now.UnixNano()
	for _, key := range keys {
		slot := c.slot(key)
		raise(&c.forgotten[slot], at)
		if bans {
			raise(&c.lifted[slot], at)
		}
		s := c.shard(key)
		s.mu.Lock()
		if e, ok := s.entries.Peek(key); !ok || bans || !e.banned {
			s.entries.Remove(key)
		}
		s.mu.Unlock()
	}
}

// forgetAll is forget for every key: refunds of more buckets than one
// message names.
func (c *denyCache) forgetAll(now time.Time) {
	raise(&c.forgottenAll, now.UnixNano())
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for _, key := range s.entries.Keys() {
			if e, ok := s.entries.Peek(key); ok && !e.banned {
				s.entries.Remove(key)
			}
		}
		s.mu.Unlock()
	}
}

// raise sets v to at unless it holds a later moment.
func raise(v *atomic.Int64, at int64) {
	for {
		old := v.Load()
		if old >= at || v.CompareAndSwap(old, at) {
			return
		}
	}
}

// clear drops every entry: the policies changed.
func (c *denyCache) clear() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		s.entries.Purge()
		s.mu.Unlock()
	}
}
