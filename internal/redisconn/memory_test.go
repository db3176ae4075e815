package redisconn

import "testing"

// Only an allkeys-* policy with a maxmemory can evict a key without a TTL,
// which the policy table is.
func TestEvictsTable(t *testing.T) {
	for _, tc := range []struct {
		policy    string
		maxMemory int64
		want      bool
	}{
		{"allkeys-lru", 1 << 20, true},
		{"allkeys-lfu", 1 << 20, true},
		{"allkeys-random", 1 << 20, true},
		{"allkeys-lru", 0, false}, // no maxmemory: nothing is evicted
		{"volatile-lru", 1 << 20, false},
		{"volatile-lfu", 1 << 20, false},
		{"volatile-random", 1 << 20, false},
		{"volatile-ttl", 1 << 20, false},
		{"noeviction", 1 << 20, false},
	} {
		if got := (MemoryPolicy{Policy: tc.policy, MaxMemory: tc.maxMemory}).EvictsTable(); got != tc.want {
			t.Errorf("%s with maxmemory %d: EvictsTable %v, want %v", tc.policy, tc.maxMemory, got, tc.want)
		}
	}
}
