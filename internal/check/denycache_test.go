package check

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// shardKeys returns n keys that c puts in its first shard.
func shardKeys(c *denyCache, prefix string, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if k := prefix + strconv.Itoa(i); c.shard(k) == &c.shards[0] {
			keys = append(keys, k)
		}
	}
	return keys
}

// TestDenyCacheFullShard: a shard full of denials takes a new one by
// dropping a single entry, the least recently used, however many of its
// entries have expired: the insert's work does not grow with the shard.
func TestDenyCacheFullShard(t *testing.T) {
	const perShard = 1000
	c := newDenyCache(perShard * len(denyCache{}.shards))
	s := &c.shards[0]
	now := time.Unix(1_800_000_000, 0)
	keys := shardKeys(c, "k", perShard+2)
	live := func(until time.Duration) deniedEntry { return deniedEntry{until: now.Add(until), cost: 1} }

	// Full of expired denials: one insert drops one of them, not all.
	for _, k := range keys[:perShard] {
		c.store(k, live(time.Second), now)
	}
	now = now.Add(time.Minute)
	before := s.removed
	c.store(keys[perShard], live(time.Hour), now)
	if dropped := s.removed - before; dropped != 1 {
		t.Fatalf("insert into a full shard of expired denials dropped %d entries, want 1", dropped)
	}
	if _, ok := c.lookup(keys[perShard], 1, ratelimit.Limit{}, now); !ok {
		t.Fatal("the new denial is not cached")
	}

	// Full of live denials: the new one takes the place of the least
	// recently used; the others still answer.
	for _, k := range keys[:perShard] {
		c.store(k, live(time.Hour), now)
	}
	for _, k := range keys[1:perShard] {
		if _, ok := c.lookup(k, 1, ratelimit.Limit{}, now); !ok {
			t.Fatalf("%s: live denial not cached", k)
		}
	}
	before = s.removed
	c.store(keys[perShard+1], live(time.Hour), now)
	if dropped := s.removed - before; dropped != 1 {
		t.Fatalf("insert into a full shard of live denials dropped %d entries, want 1", dropped)
	}
	if _, ok := c.lookup(keys[perShard+1], 1, ratelimit.Limit{}, now); !ok {
		t.Fatal("the new denial is not cached")
	}
	if _, ok := c.lookup(keys[0], 1, ratelimit.Limit{}, now); ok {
		t.Fatal("the least recently used denial is still cached")
	}
	for _, k := range keys[1:perShard] {
		if _, ok := c.lookup(k, 1, ratelimit.Limit{}, now); !ok {
			t.Fatalf("%s: a recently used denial was dropped", k)
		}
	}
}
