package check

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// fullLog logs when the store becomes full (ratelimit.ErrCapacity: Redis
// out of memory) and when it decides again: once each per episode and
// node (a Redis Cluster master; "" for the store as one node), not per
// check, since while it lasts every check that needs the store is full.
type fullLog struct {
	log *slog.Logger
	// active counts the nodes full now: a check the store decided reads
	// only this while none is.
	active atomic.Int32
	mu     sync.Mutex
	full   map[string]bool
}

// began records that a check found the store full with err.
func (f *fullLog) began(err error) {
	node := ""
	if ne := (*ratelimit.NodeError)(nil); errors.As(err, &ne) {
		node = ne.Node
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.full[node] {
		return
	}
	f.full[node] = true
	f.active.Add(1)
	f.log.Warn("store full: checks are answered by their policies' failureMode until it has room", nodeAttrs(node, "err", err)...)
}

// decided records that the store decided a check on r's nodes.
func (f *fullLog) decided(r *route) {
	if f.active.Load() == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, node := range r.nodes {
		if f.full[node] {
			delete(f.full, node)
			f.active.Add(-1)
			f.log.Info("store has room again: checks are decided by the store", nodeAttrs(node)...)
		}
	}
}

// nodeAttrs is attrs with the node first, when there is one.
func nodeAttrs(node string, attrs ...any) []any {
	if node == "" {
		return attrs
	}
	return append([]any{"node", node}, attrs...)
}
