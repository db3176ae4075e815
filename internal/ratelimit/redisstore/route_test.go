package redisstore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeCluster is what batchers needs of a Cluster: the masters serving
// slots, and where a key's slot is, both changeable by the test.
type fakeCluster struct {
	mu      sync.Mutex
	masters []string
	owner   map[string]string // key -> master
}

func (f *fakeCluster) nodes(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.masters), nil
}

func (f *fakeCluster) nodeOf(key string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.owner[key]
}

func (f *fakeCluster) failover(from, to string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, m := range f.masters {
		if m == from {
			f.masters[i] = to
		}
	}
	for k, m := range f.owner {
		if m == from {
			f.owner[k] = to
		}
	}
}

// oneCall is a job of one call on key, as built for node.
func oneCall(key, node string) *job {
	j := &job{ctx: context.Background(), done: make(chan struct{}, 1)}
	j.calls = []*call{{keys: []string{key}, node: node, job: j}}
	return j
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (bs *batchers) has(node string) bool {
	bs.mu.RLock()
	defer bs.mu.RUnlock()
	_, ok := bs.byNode[node]
	return ok
}

// TestBatchersFollowTheMasters: each master gets its own batcher on first
// use; after a failover, the batcher of the master that left is closed
// (its flushers stop), and a call still queued there is sent where its
// slot is now instead of failing.
func TestBatchersFollowTheMasters(t *testing.T) {
	fc := &fakeCluster{masters: []string{"a", "b"}, owner: map[string]string{"ka": "a", "kb": "b", "held": "a", "queued": "a"}}
	hold, holding := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var sent []string
	bs := &batchers{flushers: 1, maxBatch: 8, byNode: map[string]*batcher{}, nodes: fc.nodes, nodeOf: fc.nodeOf,
		exec: func(_ *flushScratch, calls []*call) {
			for _, c := range calls {
				if c.keys[0] == "held" {
					close(holding)
					<-hold // a's only flusher is busy: the next call on a queues
				}
				mu.Lock()
				sent = append(sent, c.keys[0])
				mu.Unlock()
				delivered(c)
			}
		}}
	defer bs.close()

	for _, j := range []*job{oneCall("ka", "a"), oneCall("kb", "b")} {
		bs.submit(j)
		<-j.done
	}
	if !bs.has("a") || !bs.has("b") {
		t.Fatalf("after calls on a and b: batchers of a %v, b %v", bs.has("a"), bs.has("b"))
	}

	bs.mu.RLock()
	onA := bs.byNode["a"]
	bs.mu.RUnlock()
	held, queued := oneCall("held", "a"), oneCall("queued", "a")
	bs.submit(held)
	<-holding
	bs.submit(queued)
	fc.failover("a", "c")
	onC := oneCall("ka", "c") // the first call on c: a new master, so a prune
	bs.submit(onC)
	<-onC.done
	waitFor(t, "the batcher of master a, which serves no slots any more, closed", func() bool {
		onA.mu.Lock()
		defer onA.mu.Unlock()
		return onA.closed
	})
	if bs.has("a") {
		t.Fatal("master a's batcher is closed but still routed to")
	}
	close(hold) // the close of a waits for its flusher
	<-held.done
	select {
	case <-queued.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the call queued on the master that left was never answered")
	}
	if err := queued.calls[0].err; err != nil {
		t.Fatalf("the call queued on the master that left: %v; want it sent to its slot's new master", err)
	}
	if !bs.has("b") || !bs.has("c") {
		t.Fatalf("batchers of b %v and c %v after the failover; want both", bs.has("b"), bs.has("c"))
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"ka", "kb", "ka", "held", "queued"}; !slices.Equal(sent, want) {
		t.Fatalf("sent %v, want %v", sent, want)
	}
}

// TestBatchersClose: after close, calls fail with ErrClosed at once, on a
// master seen before and on a new one.
func TestBatchersClose(t *testing.T) {
	fc := &fakeCluster{masters: []string{"a"}, owner: map[string]string{"ka": "a", "kb": "b"}}
	bs := &batchers{flushers: 2, maxBatch: 8, byNode: map[string]*batcher{}, nodes: fc.nodes, nodeOf: fc.nodeOf,
		exec: func(_ *flushScratch, calls []*call) {
			for _, c := range calls {
				delivered(c)
			}
		}}
	j := oneCall("ka", "a")
	bs.submit(j)
	<-j.done
	bs.close()
	for _, j := range []*job{oneCall("ka", "a"), oneCall("kb", "b")} {
		bs.submit(j)
		<-j.done
		if err := j.calls[0].err; !errors.Is(err, ErrClosed) {
			t.Fatalf("a call on %s after close: %v, want ErrClosed", j.calls[0].node, err)
		}
	}
}
