package lease

import (
	"context"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// The lease store's calls go to the wrapped store's nodes: it names them
// as that store does (ratelimit.Nodes), so a caller's breaker per node
// sees through it. A wrapped store that names none is one node.
var _ ratelimit.Nodes = (*Store)(nil)

// NodesOf implements ratelimit.Nodes by the wrapped store.
func (s *Store) NodesOf(ctx context.Context, req *ratelimit.Request, dst []string) []string {
	if n, ok := s.inner.(ratelimit.Nodes); ok {
		return n.NodesOf(ctx, req, dst)
	}
	return dst
}

// RefreshNodes implements ratelimit.Nodes by the wrapped store.
func (s *Store) RefreshNodes() {
	if n, ok := s.inner.(ratelimit.Nodes); ok {
		n.RefreshNodes()
	}
}

// AllNodes implements ratelimit.Nodes by the wrapped store.
func (s *Store) AllNodes(ctx context.Context) ([]string, error) {
	if n, ok := s.inner.(ratelimit.Nodes); ok {
		return n.AllNodes(ctx)
	}
	return nil, nil
}
