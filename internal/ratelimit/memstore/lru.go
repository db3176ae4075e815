package memstore

import (
	"fmt"
	"sync"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// The sharded LRU: the buckets are split over shards, each locked on its
// own, and a capped store (WithMaxKeys) evicts from each shard its least
// recently used bucket, in constant time, to make room for a new one.
// Buckets whose state must outlive idleness (units held in flight, a ban)
// leave their shard's list while they hold it, so the list's tail is
// always evictable.

// maxShards split the key space so unrelated keys rarely contend.
const maxShards = 64

// minShardKeys is the fewest buckets a shard of a capped store may hold:
// a capped store has fewer shards than maxShards when its cap is below
// maxShards*minShardKeys, and one below 2*minShardKeys. Each shard
// evicts its own least recently used bucket: exactly the store's with one
// shard, and close to it when shards are this large.
const minShardKeys = 4096

// shardsFor returns how many shards a store capped at maxKeys has.
func shardsFor(maxKeys int64) int {
	if maxKeys <= 0 {
		return maxShards
	}
	return int(min(max(maxKeys/minShardKeys, 1), maxShards))
}

// shard is one lock's share of the buckets, with its list of them by
// last use.
type shard struct {
	mu sync.Mutex
	m  map[string]*item
	// max is the most buckets m may hold (0: no cap).
	max int
	// head and tail end the list of m's items through their prev and
	// next, most recently used first: a full shard evicts its tail.
	// A banned bucket, or one holding units in flight, leaves the list
	// (see item.offList), so that the tail is always evictable.
	head, tail *item
	// unlisted counts m's items off the list (see item.offList).
	unlisted int
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

// makeRoom evicts, from each shard of the call, as many least recently
// used buckets as the call's new buckets need. The call's own buckets,
// just used, are at the front of their shards' lists and never evicted:
// when they alone would exceed a shard's cap, it returns an error
// wrapping ratelimit.ErrCapacity having evicted nothing.
//
// State that must outlive idleness (units held in flight, bans) must
// never be evicted: a bucket holding such state leaves its shard's list
// while it holds it (see item.offList), so that the tail
// is always evictable and eviction stays O(1) per bucket.
func (s *Store) makeRoom(req *ratelimit.Request, allowed bool, sc *scratch, now int64) error {
	news := false
	for g := range sc.bucket {
		if sc.items[g] == nil && s.writes(req, allowed, sc, g) {
			news = true
			break
		}
	}
	if !news {
		return nil // the common case: every bucket written is held
	}
	// A shard's buckets that are neither the call's nor off the list are
	// evictable: they must make room for what the call needs.
	var need, kept [maxShards]int
	for g := range sc.bucket {
		switch it := sc.items[g]; {
		case it != nil:
			if !it.offList() { // those off the list count in the shard's unlisted
				kept[sc.shardOf[g]]++
			}
		case s.writes(req, allowed, sc, g):
			need[sc.shardOf[g]]++
		}
	}
	for _, i := range sc.locked {
		sh := &s.shards[i]
		if need[i] > 0 && need[i]+kept[i]+sh.unlisted > sh.max {
			sh.relinkEndedBans(now) // rare: a shard full of bans
		}
		if need[i] > 0 && need[i]+kept[i]+sh.unlisted > sh.max {
			return fmt.Errorf("memstore: %w: a request needs %d buckets of a shard that holds at most %d (the store at most %d), %d of them banned or holding units in flight",
				ratelimit.ErrCapacity, need[i]+kept[i]+sh.unlisted, sh.max, s.maxKeys, sh.unlisted)
		}
	}
	for _, i := range sc.locked {
		sh := &s.shards[i]
		for len(sh.m)+need[i] > sh.max {
			s.evict(sh, sh.tail, now)
		}
	}
	return nil
}

// evict removes it from sh, locked, counting it when its state was live.
func (s *Store) evict(sh *shard, it *item, now int64) {
	sh.unlink(it)
	delete(sh.m, it.key)
	if now < it.exp {
		s.evictions.Add(1)
	}
}

// touch moves it to the front of sh's list, the most recently used,
// unless it is off the list; a bucket whose ban is over rejoins the list
// (unless it holds units in flight).
func (sh *shard) touch(it *item, now int64) {
	if it.banned != 0 && now >= it.banned {
		sh.setOffList(it, 0, it.pinned, true)
	}
	if sh.head != it && !it.offList() {
		sh.unlink(it)
		sh.pushFront(it)
	}
}

// offList reports whether it stays off its shard's list: banned, or
// holding units in flight.
func (it *item) offList() bool { return it.banned != 0 || it.pinned }

// setOffList sets what keeps it off sh's list (its ban's end, 0 for none,
// and whether it holds units in flight), and takes it off the list or
// puts it back, at the front (the most recently used) or the back.
func (sh *shard) setOffList(it *item, banned int64, pinned bool, front bool) {
	was := it.offList()
	it.banned, it.pinned = banned, pinned
	switch is := it.offList(); {
	case is && !was:
		sh.unlink(it)
		sh.unlisted++
	case was && !is:
		sh.unlisted--
		if front || sh.tail == nil {
			sh.pushFront(it)
			return
		}
		it.prev, it.next = sh.tail, nil
		sh.tail.next = it
		sh.tail = it
	}
}

// relinkEndedBans ends the bans (and unpins the reservations) over by
// now: their buckets, untouched since, go back at the tail of sh's list
// (evictable, the least recently used) unless they hold units in flight.
func (sh *shard) relinkEndedBans(now int64) {
	if sh.unlisted == 0 {
		return
	}
	for _, it := range sh.m {
		if it.banned != 0 && now >= it.banned {
			sh.setOffList(it, 0, it.pinned, false)
		}
		if it.pinned && !it.holding(now) { // its reservations ended unsettled
			sh.setOffList(it, it.banned, false, false)
		}
	}
}

func (sh *shard) pushFront(it *item) {
	it.prev, it.next = nil, sh.head
	if sh.head != nil {
		sh.head.prev = it
	} else {
		sh.tail = it
	}
	sh.head = it
}

func (sh *shard) unlink(it *item) {
	if it.prev != nil {
		it.prev.next = it.next
	} else {
		sh.head = it.next
	}
	if it.next != nil {
		it.next.prev = it.prev
	} else {
		sh.tail = it.prev
	}
	it.prev, it.next = nil, nil
}

// Len returns how many buckets hold state, expired or not (until swept or
// evicted): the buckets WithMaxKeys caps.
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

// MaxKeys returns the most buckets the store holds (0: no cap).
func (s *Store) MaxKeys() int { return int(s.maxKeys) }

// Evictions returns how many buckets with live state the store has
// evicted to make room (WithMaxKeys) since New. A bucket whose state had
// expired is reclaimed, not counted.
func (s *Store) Evictions() uint64 { return s.evictions.Load() }
