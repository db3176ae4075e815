package redisconn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// MemoryPolicy is what one Redis master does when it runs out of memory:
// its maxmemory (0: no limit) and maxmemory-policy, as INFO memory reports
// them.
type MemoryPolicy struct {
	// Addr is the master's address ("" for a single server or the
	// Sentinels' current master).
	Addr string
	// MaxMemory is maxmemory in bytes; 0 is no limit (nothing is evicted).
	MaxMemory int64
	// Policy is maxmemory-policy, e.g. "noeviction" or "allkeys-lru".
	Policy string
}

// EvictsTable reports whether the server may evict keys that have no TTL
// when it is full: an allkeys-* policy with a maxmemory. The policy table
// has no TTL, so only such a policy can evict it; volatile-* policies evict
// only keys with a TTL (rate-limit counters, which start over), and
// noeviction refuses writes instead (checks are answered by their
// policy's failureMode).
func (m MemoryPolicy) EvictsTable() bool {
	return m.MaxMemory > 0 && strings.HasPrefix(m.Policy, "allkeys-")
}

// String names the server and its settings for logs and events.
func (m MemoryPolicy) String() string {
	where := "Redis"
	if m.Addr != "" {
		where = "Redis " + m.Addr
	}
	return fmt.Sprintf("%s: maxmemory-policy %s, maxmemory %d bytes", where, m.Policy, m.MaxMemory)
}

// ReadMemoryPolicies reads INFO memory from the server c writes to: every
// master of a Cluster, else the one server (the Sentinels' current master
// for a failover client). It runs INFO memory, which the ACL grants alone
// as +info|memory (no other section); CONFIG GET would also do, but it can
// read every setting, passwords included.
func ReadMemoryPolicies(ctx context.Context, c redis.UniversalClient) ([]MemoryPolicy, error) {
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		m, err := readMemoryPolicy(ctx, c)
		return []MemoryPolicy{m}, err
	}
	var mu sync.Mutex
	var out []MemoryPolicy
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		m, err := readMemoryPolicy(ctx, node)
		if err != nil {
			return fmt.Errorf("%s: %w", node.Options().Addr, err)
		}
		m.Addr = node.Options().Addr
		mu.Lock()
		out = append(out, m)
		mu.Unlock()
		return nil
	})
	slices.SortFunc(out, func(a, b MemoryPolicy) int { return strings.Compare(a.Addr, b.Addr) })
	return out, err
}

func readMemoryPolicy(ctx context.Context, c redis.Cmdable) (MemoryPolicy, error) {
	text, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return MemoryPolicy{}, fmt.Errorf("INFO memory: %w", err)
	}
	var m MemoryPolicy
	var found bool
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "maxmemory":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return MemoryPolicy{}, fmt.Errorf("INFO memory: maxmemory %q: %w", v, err)
			}
			m.MaxMemory = n
		case "maxmemory_policy":
			m.Policy, found = v, true
		}
	}
	if !found {
		return MemoryPolicy{}, fmt.Errorf("INFO memory: no maxmemory_policy in the reply")
	}
	return m, nil
}

// IsPermissionDenied reports whether err is Redis refusing a command to
// the ACL user (NOPERM).
func IsPermissionDenied(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOPERM")
}
