package redisstore

import (
	"context"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// The store names the Cluster master a call goes to, and reports which
// one failed (ratelimit.NodeError); keeping a breaker per node is the
// checker's job, as is the breaker of a single server. So the breakers,
// their states and metrics live in one place for every store, and this
// package stays about Redis.
var _ ratelimit.Nodes = (*Store)(nil)

// NodesOf implements ratelimit.Nodes: in Cluster mode the addresses of
// the masters that serve req's slots now, as go-redis's slot map says
// (it follows a failover once reloaded); outside Cluster none: the store
// is one node.
func (s *Store) NodesOf(ctx context.Context, req *ratelimit.Request, dst []string) []string {
	if s.cluster == nil {
		return dst
	}
	from := len(dst)
	for i := range req.Entries {
		if node := s.nodeOf(ctx, req.Entries[i].Key); node != "" && !slices.Contains(dst[from:], node) {
			dst = append(dst, node)
		}
	}
	return dst
}

// AllNodes implements ratelimit.Nodes: the masters that serve slots now,
// from a fresh read of the slot map (Cluster), or none.
func (s *Store) AllNodes(ctx context.Context) ([]string, error) {
	if s.cluster == nil {
		return nil, nil
	}
	var mu sync.Mutex
	var nodes []string
	err := s.cluster.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		nodes = append(nodes, c.Options().Addr)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(nodes)
	return nodes, nil
}

// RefreshNodes implements ratelimit.Nodes: in Cluster mode it asks
// go-redis to re-read the slot map (ReloadState: in the background, one
// read at a time, then a pause of 200ms before another). The checker asks
// while a master's breaker is open, when no call goes there to fail and
// trigger a read (refreshSlotsAfterNetworkErrors): without it the map
// kept the dead master until the breaker's next probe failed, a cooldown
// after its replica had taken the slots over.
func (s *Store) RefreshNodes() {
	if s.cluster != nil {
		s.cluster.ReloadState(context.Background())
	}
}

// nodeOf returns the address of the master that serves key's slot now, or
// "" when the slot map cannot be read.
func (s *Store) nodeOf(ctx context.Context, key string) string {
	c, err := s.cluster.MasterForKey(ctx, key)
	if err != nil {
		return ""
	}
	return c.Options().Addr
}
