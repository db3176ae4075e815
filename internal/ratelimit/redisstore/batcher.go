package redisstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by Check after Close.
var ErrClosed = errors.New("redisstore: store closed")

// job is one Check's calls (one per Cluster slot group). In Cluster mode
// they may go to different masters' batchers; the flusher that delivers the
// last of them signals done, and nothing touches the job afterwards.
type job struct {
	ctx      context.Context
	deadline time.Time // zero: none
	calls    []*call
	done     chan struct{} // buffered (1), empty when the job is submitted
	// pending counts the calls without their reply or error yet (set
	// before the calls are submitted); the flusher that delivers the last
	// one signals done.
	pending atomic.Int64
}

// delivered records that c has its reply or error, and signals its job
// when that was the job's last call. Nothing of the job may be touched
// afterwards.
func delivered(c *call) {
	c.answered.Store(true)
	if j := c.job; j.pending.Add(-1) == 0 {
		j.signal()
	}
}

// givenUp is why the job's owner no longer waits for it, or nil.
func (j *job) givenUp(now time.Time) error {
	if err := j.ctx.Err(); err != nil {
		return err
	}
	if !j.deadline.IsZero() && !now.Before(j.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// answered reports, without waiting, whether the flusher has signaled the
// job (taking the signal).
func (j *job) answered() bool {
	select {
	case <-j.done:
		return true
	default:
		return false
	}
}

// signal wakes the job's owner. It never blocks a flusher: done has room
// for the one signal a job gets.
func (j *job) signal() {
	select {
	case j.done <- struct{}{}:
	default:
	}
}

// batcher pipelines concurrent calls to one node. Calls queue; a few
// flushers each take everything queued into one pipeline and wait for its
// replies. When a flusher is idle a call is sent at once (no timer adds
// latency); under load, calls that queue while all flushers wait on Redis
// go out together in the next pipeline, so throughput grows with load
// while connections stay few: at most one per flusher.
type batcher struct {
	exec     func(*flushScratch, []*call)
	maxBatch int

	mu     sync.Mutex
	queue  []*call
	closed bool

	wake chan struct{}
	stop chan struct{}
	wg   sync.WaitGroup
}

func newBatcher(flushers, maxBatch int, exec func(*flushScratch, []*call)) *batcher {
	b := &batcher{exec: exec, maxBatch: maxBatch, wake: make(chan struct{}, flushers), stop: make(chan struct{})}
	for range flushers {
		b.wg.Go(b.flusher)
	}
	return b
}

// submit queues c and wakes an idle flusher.
func (b *batcher) submit(c *call) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default: // every flusher is already awake and will find it
	}
	return nil
}

// take moves up to maxBatch calls from the queue into batch (reused), and
// returns it; nil when the queue is empty.
func (b *batcher) take(batch []*call) []*call {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := min(len(b.queue), b.maxBatch)
	if n == 0 {
		return nil
	}
	batch = append(batch[:0], b.queue[:n]...)
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	return batch
}

func (b *batcher) flusher() {
	scratch := new(flushScratch)
	var batch []*call
	for {
		select {
		case <-b.stop:
			return
		case <-b.wake:
		}
		for batch = b.take(batch); batch != nil; batch = b.take(batch) {
			b.exec(scratch, batch)
			clear(batch) // do not keep finished calls reachable
		}
	}
}

// close stops the flushers after the batches in flight, and returns the
// calls still queued, never sent: the caller fails or resubmits them.
func (b *batcher) close() []*call {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	queued := b.queue
	b.queue = nil
	b.mu.Unlock()
	close(b.stop)
	b.wg.Wait()
	return queued
}

// batchDeadline is the context a flusher's pipeline runs under, reused
// batch after batch so that a batch allocates none: never canceled (a
// caller that gives up stops waiting, the others still get their answers)
// and with the latest of the jobs' deadlines, so no call is cut short by
// another's shorter deadline. go-redis takes its socket deadlines from it.
// Without a deadline on every job, the client's timeouts apply.
type batchDeadline struct {
	context.Context // Background: no Done channel, no values
	deadline        time.Time
	ok              bool
}

func (c *batchDeadline) Deadline() (time.Time, bool) { return c.deadline, c.ok }

// set makes c the context for the calls' jobs.
func (c *batchDeadline) set(calls []*call) context.Context {
	c.Context, c.deadline, c.ok = context.Background(), time.Time{}, true
	for _, k := range calls {
		j := k.job
		if j.deadline.IsZero() {
			c.deadline, c.ok = time.Time{}, false
			break
		}
		if j.deadline.After(c.deadline) {
			c.deadline = j.deadline
		}
	}
	return c
}
