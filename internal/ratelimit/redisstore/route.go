package redisstore

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// batchers routes calls to the batcher of the node that serves them: one
// batcher for a single server or Sentinel; in Cluster mode one per master,
// made when a call first goes there, so that each master has its own
// flushers and at most Flushers pipelines (and connections) in flight.
// A frozen or dead master holds only its own calls; the others' go on.
type batchers struct {
	flushers, maxBatch int
	exec               func(*flushScratch, []*call)
	// nodes lists the masters serving slots now (Store.AllNodes); nil:
	// not a Cluster, every call goes to single.
	nodes func(context.Context) ([]string, error)
	// nodeOf is the master serving a key's slot now ("": unknown).
	nodeOf func(key string) string

	single *batcher

	mu     sync.RWMutex
	byNode map[string]*batcher // Cluster: per master address ("": slot map unreadable)
	closed bool
	// A prune runs at a time (pruning); one asked for meanwhile
	// (prunePending) runs after it, since it may know of a newer failover.
	pruning, prunePending atomic.Bool
}

// pruneTimeout bounds the read of the masters when pruning.
const pruneTimeout = 5 * time.Second

// submit queues j's calls. A call that cannot be queued (the store is
// closed) is delivered at once with the error, so j is done when its
// queued calls are; submit itself never fails.
func (bs *batchers) submit(j *job) {
	calls := j.calls // read before the last delivery: j is not ours then
	j.pending.Store(int64(len(calls)))
	for _, c := range calls {
		if err := bs.submitCall(c, c.node); err != nil {
			c.err = err
			delivered(c)
		}
	}
}

// submitCall queues c on node's batcher. A batcher closed meanwhile
// (pruned: its node left the slot map) sends c where its slot is now.
func (bs *batchers) submitCall(c *call, node string) error {
	if bs.nodes == nil {
		return bs.single.submit(c)
	}
	for range 3 {
		b := bs.of(node)
		if b == nil {
			return ErrClosed
		}
		if err := b.submit(c); err != ErrClosed {
			return err
		}
		node = bs.nodeOf(c.keys[0])
	}
	return ErrClosed
}

// of returns node's batcher, made on first use; nil once closed.
func (bs *batchers) of(node string) *batcher {
	bs.mu.RLock()
	b, closed := bs.byNode[node], bs.closed
	bs.mu.RUnlock()
	if b != nil || closed {
		return b
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if bs.closed {
		return nil
	}
	if b = bs.byNode[node]; b == nil {
		b = newBatcher(bs.flushers, bs.maxBatch, bs.exec)
		bs.byNode[node] = b
		// A master not seen before: the slot map changed (start, or a
		// failover). Stop the flushers of masters that serve no slots
		// any more, so a replaced master's do not stay for good.
		if len(bs.byNode) > 1 {
			bs.schedulePrune()
		}
	}
	return b
}

// schedulePrune runs prune in the background, or again after the one
// running.
func (bs *batchers) schedulePrune() {
	bs.prunePending.Store(true)
	if bs.pruning.CompareAndSwap(false, true) {
		go bs.pruneWhilePending()
	}
}

func (bs *batchers) pruneWhilePending() {
	for {
		bs.prunePending.Store(false)
		bs.prune()
		bs.pruning.Store(false)
		if !bs.prunePending.Load() || !bs.pruning.CompareAndSwap(false, true) {
			return
		}
	}
}

// prune closes the batchers of masters that no longer serve slots. Their
// calls still queued go where their slots are now.
func (bs *batchers) prune() {
	ctx, cancel := context.WithTimeout(context.Background(), pruneTimeout)
	defer cancel()
	all, err := bs.nodes(ctx)
	if err != nil || len(all) == 0 {
		return // keep them all: idle flushers are cheap, lost calls are not
	}
	var gone []*batcher
	bs.mu.Lock()
	for node, b := range bs.byNode {
		if node != "" && !slices.Contains(all, node) {
			delete(bs.byNode, node)
			gone = append(gone, b)
		}
	}
	bs.mu.Unlock()
	for _, b := range gone {
		for _, c := range b.close() {
			if err := bs.submitCall(c, bs.nodeOf(c.keys[0])); err != nil {
				c.err = err
				delivered(c)
			}
		}
	}
}

// close stops every flusher after the batches in flight; calls still
// queued fail with ErrClosed.
func (bs *batchers) close() {
	bs.mu.Lock()
	if bs.closed {
		bs.mu.Unlock()
		return
	}
	bs.closed = true
	all := slices.Collect(maps.Values(bs.byNode))
	bs.byNode = nil
	bs.mu.Unlock()
	if bs.single != nil {
		all = append(all, bs.single)
	}
	for _, b := range all {
		for _, c := range b.close() {
			c.err = ErrClosed
			delivered(c)
		}
	}
}
