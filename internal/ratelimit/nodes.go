package ratelimit

import (
	"context"
	"fmt"
)

// Nodes is implemented by a store whose keys live on several servers that
// fail independently (the masters of a Redis Cluster). Its caller keeps a
// circuit breaker per node with it, so that one server away does not stop
// the keys of the others. A store that does not implement it, or names no
// node, is one node.
//
// Nodes are opaque names to the caller (a Redis store uses the master's
// address): the store alone knows how keys map to servers, and the map may
// change (a failover moves a master's slots to its replica).
type Nodes interface {
	// NodesOf appends to dst the nodes req's calls go to now, each once,
	// and returns it. It does no I/O but, at most, a first read of the
	// map of nodes.
	NodesOf(ctx context.Context, req *Request, dst []string) []string
	// AllNodes returns the nodes that serve keys now; it may ask the
	// servers.
	AllNodes(ctx context.Context) ([]string, error)
	// RefreshNodes says the map of nodes may be out of date: the caller
	// refused a call to a node it found down (its breaker is open), so no
	// call will fail there to tell the store that the node's keys moved.
	// The store re-reads the map in the background, one read at a time,
	// and NodesOf answers from the new map once it is read. It never
	// blocks.
	RefreshNodes()
}

// NodeError is a store call's failure on one node: the call's other nodes,
// if any, are not known to have failed.
type NodeError struct {
	Node string
	Err  error
}

func (e *NodeError) Error() string { return fmt.Sprintf("node %s: %v", e.Node, e.Err) }

func (e *NodeError) Unwrap() error { return e.Err }
