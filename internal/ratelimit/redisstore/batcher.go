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

// job is one Check's calls (one per Cluster slot group), sent together.
// The flusher signals done when every call has its reply or error, and
// touches nothing of the job afterwards.
type job struct {
	ctx      context.Context
	deadline time.Time // zero: none
	calls    []*call
	done     chan struct{} // buffered (1), empty when the job is submitted
	// pending counts the calls without their reply or error yet; the
	// flusher that delivers the last one signals done.
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

// batcher pipelines concurrent calls. Calls queue; a few flushers each
// take everything queued into one pipeline. When a flusher is idle a call
// is sent at once (no timer adds latency); under load, calls that queue
// while all flushers wait on Redis go out together in the next pipeline,
// so throughput grows with load while connections stay few.
type batcher struct {
	exec     func(*flushScratch, []*job)
	maxBatch int

	mu     sync.Mutex
	queue  []*job
	closed bool

	wake chan struct{}
	stop chan struct{}
	wg   sync.WaitGroup
}

func newBatcher(flushers, maxBatch int, exec func(*flushScratch, []*job)) *batcher {
	b := &batcher{exec: exec, maxBatch: maxBatch, wake: make(chan struct{}, flushers), stop: make(chan struct{})}
	for range flushers {
		b.wg.Go(b.flusher)
	}
	return b
}

// submit queues j and wakes an idle flusher.
func (b *batcher) submit(j *job) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	b.queue = append(b.queue, j)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default: // every flusher is already awake and will find it
	}
	return nil
}

// take moves up to maxBatch calls' worth of jobs from the queue into
// batch (reused), and returns it; nil when the queue is empty.
func (b *batcher) take(batch []*job) []*job {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, calls := 0, 0
	for n < len(b.queue) && (n == 0 || calls+len(b.queue[n].calls) <= b.maxBatch) {
		calls += len(b.queue[n].calls)
		n++
	}
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
	var batch []*job
	for {
		select {
		case <-b.stop:
			return
		case <-b.wake:
		}
		for batch = b.take(batch); batch != nil; batch = b.take(batch) {
			b.exec(scratch, batch)
			clear(batch) // do not keep finished jobs reachable
		}
	}
}

// close stops the flushers after the batches in flight; queued jobs fail
// with ErrClosed.
func (b *batcher) close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	queued := b.queue
	b.queue = nil
	b.mu.Unlock()
	close(b.stop)
	b.wg.Wait()
	for _, j := range queued {
		for _, c := range j.calls {
			c.err = ErrClosed
		}
		j.signal()
	}
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

// set makes c the context for jobs.
func (c *batchDeadline) set(jobs []*job) context.Context {
	c.Context, c.deadline, c.ok = context.Background(), time.Time{}, true
	for _, j := range jobs {
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
