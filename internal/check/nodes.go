package check

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// breakers keeps a circuit breaker per node of the store: per master of a
// Redis Cluster, as the store names them (ratelimit.Nodes), so that keys on
// healthy masters keep their decisions while one master is away. A store
// that names no nodes (a single server, Sentinel, the memory store) is one
// node, guarded by whole, exactly as when there was one breaker.
//
// The breakers live here, not in the store: the checker already owns the
// breaker, its cooldown, its failure mode and its metrics, and the store
// only says where calls go and which node failed. So neither package
// learns the other's job, and every store gets the same breaker.
type breakers struct {
	threshold int
	cooldown  time.Duration
	now       func() time.Time
	metrics   *Metrics
	nodes     ratelimit.Nodes // nil: the store is one node

	whole *Breaker

	mu     sync.RWMutex
	byNode map[string]*Breaker
	// states are the breakers' states as last reported ("": whole), for
	// sluice_breaker_state, the worst of them.
	states  map[string]BreakerState
	pruning atomic.Bool
}

// newBreakers keeps the breakers of the nodes that nodes names (nil: the
// store is one node).
func newBreakers(threshold int, cooldown time.Duration, now func() time.Time, m *Metrics, nodes ratelimit.Nodes) *breakers {
	bs := &breakers{threshold: threshold, cooldown: cooldown, now: now, metrics: m, nodes: nodes,
		byNode: map[string]*Breaker{}, states: map[string]BreakerState{}}
	bs.whole = NewBreaker(threshold, cooldown, now, nil)
	bs.whole.onChange = func(s BreakerState) { bs.changed("", bs.whole, s) }
	return bs
}

// get returns node's breaker, made on first use.
func (bs *breakers) get(node string) *Breaker {
	bs.mu.RLock()
	b := bs.byNode[node]
	bs.mu.RUnlock()
	if b != nil {
		return b
	}
	bs.mu.Lock()
	if b = bs.byNode[node]; b == nil {
		b = NewBreaker(bs.threshold, bs.cooldown, bs.now, nil)
		b.openErr = &nodeOpenError{node: node}
		b.onChange = func(s BreakerState) { bs.changed(node, b, s) }
		bs.byNode[node] = b
		bs.states[node] = BreakerClosed
		if bs.metrics != nil {
			bs.metrics.nodeBreakers.WithLabelValues(node).Set(float64(BreakerClosed))
		}
	}
	bs.mu.Unlock()
	// A node not seen before: the map of nodes changed (start, or a
	// failover). Forget nodes that serve no slots any more, so a replaced
	// master's open breaker does not stay in the metrics for good.
	if bs.nodes != nil && bs.pruning.CompareAndSwap(false, true) {
		go bs.prune()
	}
	return b
}

// changed records b's new state, unless b is no longer node's breaker.
// It runs under b's lock; it takes bs.mu, and nothing holds bs.mu while
// calling a breaker.
func (bs *breakers) changed(node string, b *Breaker, s BreakerState) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if node != "" && bs.byNode[node] != b {
		return // pruned
	}
	bs.states[node] = s
	if bs.metrics != nil {
		if node != "" {
			bs.metrics.nodeBreakers.WithLabelValues(node).Set(float64(s))
		}
		bs.metrics.breakerState.Set(float64(worst(bs.states)))
	}
}

// worst is open when any breaker is open, else half-open when any is
// probing, else closed.
func worst(states map[string]BreakerState) BreakerState {
	w := BreakerClosed
	for _, s := range states {
		if s == BreakerOpen {
			return BreakerOpen
		}
		if s == BreakerHalfOpen {
			w = BreakerHalfOpen
		}
	}
	return w
}

// pruneTimeout bounds the store's read of its nodes.
const pruneTimeout = 5 * time.Second

// prune drops the breakers of nodes the store no longer has.
func (bs *breakers) prune() {
	defer bs.pruning.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), pruneTimeout)
	defer cancel()
	all, err := bs.nodes.AllNodes(ctx)
	if err != nil || len(all) == 0 {
		return // keep them all: a breaker too many is better than one too few
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for node := range bs.byNode {
		if slices.Contains(all, node) {
			continue
		}
		delete(bs.byNode, node)
		delete(bs.states, node)
		if bs.metrics != nil {
			bs.metrics.nodeBreakers.DeleteLabelValues(node)
		}
	}
	if bs.metrics != nil {
		bs.metrics.breakerState.Set(float64(worst(bs.states)))
	}
}

// states returns every node's breaker state ("" for the store as one node).
func (bs *breakers) snapshot() map[string]BreakerState {
	bs.mu.RLock()
	defer bs.mu.RUnlock()
	out := make(map[string]BreakerState, len(bs.states)+1)
	out[""] = BreakerClosed
	for node, s := range bs.states {
		out[node] = s
	}
	return out
}

// route is the breakers one check's store call passes: one per node of
// the request, and whether the call is that breaker's probe.
type route struct {
	nodes []string
	brs   []*Breaker
	probe []bool
}

// allow takes the breakers of req's nodes. It returns the error to answer
// with when one of them is open: then the call must not be made, and no
// breaker is held.
func (bs *breakers) allow(ctx context.Context, req *ratelimit.Request, r *route) error {
	r.nodes, r.brs, r.probe = r.nodes[:0], r.brs[:0], r.probe[:0]
	if bs.nodes != nil {
		r.nodes = bs.nodes.NodesOf(ctx, req, r.nodes)
	}
	if len(r.nodes) == 0 {
		r.nodes, r.brs = append(r.nodes, ""), append(r.brs, bs.whole)
	} else {
		for _, node := range r.nodes {
			r.brs = append(r.brs, bs.get(node))
		}
	}
	for _, b := range r.brs {
		ok, probe := b.allow()
		if !ok {
			r.release()
			if bs.nodes != nil && b != bs.whole {
				// No call goes to the node to find out that its keys
				// moved (a failover): the store's map must be read
				// again to learn it.
				bs.nodes.RefreshNodes()
			}
			return b.openErr
		}
		r.probe = append(r.probe, probe)
	}
	return nil
}

// success: the store answered, from every node.
func (r *route) success() {
	for _, b := range r.brs {
		b.Success()
	}
}

// failure: the store did not answer. A ratelimit.NodeError names the node
// that failed, and says nothing of the others; any other error counts
// against every node of the call.
func (r *route) failure(err error) {
	var ne *ratelimit.NodeError
	if errors.As(err, &ne) && slices.Contains(r.nodes, ne.Node) {
		for i, b := range r.brs {
			switch {
			case r.nodes[i] == ne.Node:
				b.Failure()
			case r.probe[i]:
				b.release()
			}
		}
		return
	}
	for _, b := range r.brs {
		b.Failure()
	}
}

// release gives back the probes taken, their outcome unknown.
func (r *route) release() {
	for i, p := range r.probe {
		if p {
			r.brs[i].release()
		}
	}
}

// nodeOpenError answers a check with a key on a node whose breaker is open.
type nodeOpenError struct{ node string }

func (e *nodeOpenError) Error() string {
	return fmt.Sprintf("circuit breaker open for Redis node %s: it failed repeatedly", e.node)
}

func (e *nodeOpenError) Unwrap() error { return errBreakerOpen }
