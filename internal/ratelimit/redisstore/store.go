// Package redisstore is the Redis ratelimit.Store: one Lua library (Redis 7
// Functions, or scripts through EVALSHA where functions are unavailable)
// that evaluates every limit of a request in one atomic call per Cluster
// slot, with calls from concurrent requests pipelined together.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/model"
)

// DefaultFlushers is Options.Flushers when unset.
const DefaultFlushers = 8

// Options configures a Store. The zero value is ready for production.
type Options struct {
	Mode Mode
	// Flushers is how many pipelines may be in flight at once per node
	// (default 8: per master in Cluster mode); it also bounds the
	// connections the store uses per node, and must not exceed the
	// client's PoolSize, or pipelines wait for a connection. Fewer
	// flushers make larger pipelines and merged commands under load: less
	// CPU per decision in Redis and here (a system call per pipeline).
	// More keep a burst from queueing behind round trips: with the CPU
	// busy, a reply reaches its flusher only when the Go scheduler polls
	// the network (every 10ms under load), so each round trip a queued
	// call waits for costs that much of its deadline; with 2, bursts of
	// 200 checks passed the 50ms deadline.
	Flushers int
	// MaxBatch bounds the calls in one pipeline (default 512).
	MaxBatch int
	// MaxMerge bounds how many calls (one request's entries in one slot)
	// share one library command (default 64; 1 sends every call as a
	// command of its own). Merged calls stay independent: each is all or
	// nothing and gets the result it would get alone, in queue order.
	MaxMerge int
	// NoLoad: the store never loads the library itself. When the library
	// is missing, calls fail (ErrLibraryMissing) until another process
	// loads it. For a process whose Redis user may not load code, as the
	// check process under config/redis/users.acl, where the controller
	// restores the library after a flush or failover within its sync.
	NoLoad bool
	// Clock, when set, is sent with every call as the time the library
	// uses instead of Redis TIME. Tests only: it drives a simulated clock.
	// It must not lag the server's clock, since expiry deadlines are
	// absolute times.
	Clock func() time.Time
}

// Store is the Redis Store. Create it with New; it is safe for concurrent use.
//
// Atomicity: the entries of a request that share a Cluster slot (all limits
// of one key value, by the key encoding) are evaluated and consumed in one
// library call, all or nothing. Without Cluster every request is one call.
// Calls queued together are merged into few library commands (Options.
// MaxMerge): any calls on a single server or Sentinel, calls of one slot in
// Cluster. A merged command evaluates its calls one after the other, each
// all or nothing, at one instant (one reading of the server's TIME).
// In Cluster mode a request spanning several slots is first evaluated as a
// dry run in every slot; only if all allow are the consuming calls sent.
// Between the two rounds another request may consume in some slot: then
// that slot denies in the second round while the others have consumed.
// The request is reported denied, and the units consumed elsewhere are lost
// for the window — a small over-count, never an over-admission.
//
// Retries: a call is sent at most once, except when the server answered
// that the library is missing (NOSCRIPT, "Function not found"): then the
// command, with every call merged into it, did not run, the library is
// loaded again (on every master) and only those commands are resent. A
// command that failed any other way, network errors and timeouts included,
// is never resent, since it may have run; its error goes to every call it
// carried.
type Store struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient
	opts    Options

	mode   atomic.Int32  // ModeFunctions or ModeScripts, in effect now
	gen    atomic.Uint64 // bumped by every successful load
	loadMu sync.Mutex

	b *batchers
	// betweenRounds, when set, runs between the dry run and the consuming
	// round of a request of several calls (tests: a concurrent consumer).
	betweenRounds func()

	pipelines, commands, calls, loads atomic.Uint64
	lostRefunds                       atomic.Uint64
}

// Stats counts the store's traffic since New.
type Stats struct {
	// Pipelines is how many pipelines were sent, Commands how many library
	// commands (FCALL or EVALSHA) they carried, and Calls how many calls
	// those merged (resends after a load included): Calls/Pipelines is the
	// batching factor, Calls/Commands the merging factor.
	Pipelines, Commands, Calls uint64
	// Loads is how many times the library was loaded (Load included).
	Loads uint64
	// LostRefunds is how many requests of several calls lost a race
	// between their rounds and could not give back what their earlier
	// calls took (see Store).
	LostRefunds uint64
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	return Stats{Pipelines: s.pipelines.Load(), Commands: s.commands.Load(), Calls: s.calls.Load(), Loads: s.loads.Load(), LostRefunds: s.lostRefunds.Load()}
}

var _ ratelimit.Store = (*Store)(nil)

// New returns a Store over client, which should come from NewClient or use
// PrepareOptions (see there why). It does not contact Redis: the library
// is loaded on first need, or by Load. redis.Ring is not supported (it
// shards by key without Cluster slots, so one request's limits could land
// on different shards).
func New(client redis.UniversalClient, opts Options) (*Store, error) {
	s := &Store{client: client, opts: opts}
	switch c := client.(type) {
	case nil:
		return nil, errors.New("redisstore: nil client")
	case *redis.Ring:
		return nil, errors.New("redisstore: redis.Ring is not supported: use a single, Sentinel or Cluster client")
	case *redis.ClusterClient:
		s.cluster = c
	}
	switch opts.Mode {
	case ModeAuto, ModeFunctions:
		s.mode.Store(int32(ModeFunctions))
	case ModeScripts:
		s.mode.Store(int32(ModeScripts))
	default:
		return nil, fmt.Errorf("redisstore: unknown mode %d", opts.Mode)
	}
	if s.opts.Flushers <= 0 {
		s.opts.Flushers = DefaultFlushers
	}
	if s.opts.MaxBatch <= 0 {
		s.opts.MaxBatch = 512
	}
	if s.opts.MaxMerge <= 0 {
		s.opts.MaxMerge = 64
	}
	s.opts.MaxMerge = min(s.opts.MaxMerge, maxMerge)
	s.b = &batchers{flushers: s.opts.Flushers, maxBatch: s.opts.MaxBatch, exec: s.exec}
	if s.cluster == nil {
		s.b.single = newBatcher(s.opts.Flushers, s.opts.MaxBatch, s.exec)
	} else {
		s.b.byNode = map[string]*batcher{}
		s.b.nodes = s.AllNodes
		s.b.nodeOf = func(key string) string { return s.nodeOf(context.Background(), key) }
	}
	return s, nil
}

// Client is the client the store sends through, for what else a process
// keeps in the same Redis.
func (s *Store) Client() redis.UniversalClient { return s.client }

// Mode reports how the library is invoked now (ModeFunctions or ModeScripts).
func (s *Store) Mode() Mode { return Mode(s.mode.Load()) }

// Close stops the flushers; calls still queued fail with ErrClosed. It
// does not close the client.
func (s *Store) Close() error {
	s.b.close()
	return nil
}

// checkState is one Check's working memory in one allocation for small
// requests. It is pooled, but only once the flusher has signaled done for
// every job it submitted: a Check that gave up (its context ended) drops
// its state, since a flusher may still hold its calls.
type checkState struct {
	done      chan struct{} // the job's; kept across uses (buffered, 1)
	timer     *time.Timer   // bounds the wait; kept across uses
	deadline  time.Time     // zero: none
	abandoned bool
	// op, when not 0, is the mode digit of an operator's reset or lift,
	// which a refund's request carries (see Reset).
	op       byte
	params   []model.Params
	verdicts []model.Verdict
	buckets  []string // entry i's bucket and field (ratelimit.SplitKey)
	fields   []string
	groups   [][]int
	consumed []bool
	job      job
	call     call // the only call of a single-slot round

	paramBuf   [8]model.Params
	verdictBuf [8]model.Verdict
	bucketBuf  [8]string
	fieldBuf   [8]string
	idxBuf     [8]int
	groupBuf   [1][]int
	boolBuf    [1]bool
	callPtrBuf [1]*call
}

var checkStates = sync.Pool{New: func() any { return new(checkState) }}

// Check implements ratelimit.Store. The wait ends at the earlier of ctx's
// deadline and timeout from now; it uses a timer kept with the pooled
// check state, so a check allocates no context and no timer.
func (s *Store) Check(ctx context.Context, timeout time.Duration, req *ratelimit.Request, dec *ratelimit.Decision) error {
	deadline, _ := ctx.Deadline()
	if timeout > 0 {
		if d := time.Now().Add(timeout); deadline.IsZero() || d.Before(deadline) {
			deadline = d
		}
	}
	if err := req.Validate(); err != nil {
		return fmt.Errorf("redisstore check: %w", err)
	}
	cs := checkStates.Get().(*checkState)
	done, timer := cs.done, cs.timer
	if done == nil {
		done = make(chan struct{}, 1)
	}
	*cs = checkState{done: done, timer: timer, deadline: deadline}
	err := s.check(ctx, req, dec, cs)
	if !cs.abandoned {
		checkStates.Put(cs)
	}
	return err
}

func (s *Store) check(ctx context.Context, req *ratelimit.Request, dec *ratelimit.Decision, cs *checkState) error {
	s.compile(req, cs)

	// One call (one slot, or not a Cluster, and at most MaxCallEntries
	// entries) decides and consumes. Several calls: a dry run in each
	// first. A refund, a release or a settlement has nothing to decide:
	// one round gives back (or settles) everywhere; a release or a
	// settlement is allowed when any call freed or settled something.
	dryFirst := len(cs.groups) > 1 && req.Action.Decides()
	if err := s.round(ctx, req, cs, req.Action == ratelimit.DryRun || dryFirst); err != nil {
		return err
	}
	allowed := all(cs.consumed)
	if req.Action == ratelimit.Release || req.Action == ratelimit.Settle {
		allowed = slices.Contains(cs.consumed, true)
	}
	if dryFirst && allowed && req.Action != ratelimit.DryRun {
		if s.betweenRounds != nil {
			s.betweenRounds()
		}
		if err := s.round(ctx, req, cs, false); err != nil {
			return err
		}
		if !all(cs.consumed) {
			s.giveBack(ctx, req, cs)
			clear(cs.consumed) // denied: reported as not consumed, as it is again
		}
		fill(dec, req, all(cs.consumed), cs)
		return nil
	}
	if dryFirst && !allowed && req.Action != ratelimit.DryRun {
		if err := s.chargeAlways(ctx, req, cs); err != nil {
			return err
		}
	}
	for g := range cs.consumed {
		cs.consumed[g] = allowed // consumed, or would be, only if the whole request is allowed
	}
	fill(dec, req, allowed, cs)
	return nil
}

// giveBack refunds what the consuming round took in the calls that
// consumed when another call of the same request denied: a concurrent
// consumer took that call's room after the dry run. A refund never goes
// past untouched, so at most what was taken comes back. Entries that
// charge always keep their charge (they are charged whatever the
// decision). When the refund fails, those units stay taken until their
// limits' windows pass: an over-count, never an over-admission; it is
// counted in Stats.LostRefunds. An entry that reserved is settled at 0
// instead: its cost comes back as a refund's, and its reservation goes.
func (s *Store) giveBack(ctx context.Context, req *ratelimit.Request, cs *checkState) {
	back := ratelimit.Request{Action: ratelimit.Refund}
	settle := ratelimit.Request{Action: ratelimit.Settle}
	for g, idx := range cs.groups {
		if !cs.consumed[g] {
			continue
		}
		for _, i := range idx {
			e := req.Entries[i]
			switch {
			case e.Cost == 0 || !cs.verdicts[i].Allowed || e.ChargeAlways:
			case model.Reserves(&e, req.Action):
				e.Cost, e.Reserve = 0, 0
				settle.Entries = append(settle.Entries, e)
			default:
				back.Entries = append(back.Entries, e)
			}
		}
	}
	for _, r := range [...]*ratelimit.Request{&back, &settle} {
		if len(r.Entries) == 0 {
			continue
		}
		bs := &checkState{done: make(chan struct{}, 1), deadline: cs.deadline}
		var dec ratelimit.Decision
		if err := s.check(ctx, r, &dec, bs); err != nil {
			s.lostRefunds.Add(1)
		}
	}
}

// chargeAlways is the real round of a denied request that spans slots,
// for its entries that charge always (and cost something): those are
// charged whatever the decision; for the buckets whose penalty box
// counts a denial (their own limits denied, and no ban did), so that the
// box counts it; and for the concurrency entries the dry run denied (and
// that cost something), so that a holder's duplicate is remembered on its
// hold, as it is whatever the decision (the dry run wrote nothing). Their
// verdicts replace the dry run's. A call of that round that is allowed
// after all (a concurrent refund or release made room) is given back, as
// the request is denied.
func (s *Store) chargeAlways(ctx context.Context, req *ratelimit.Request, cs *checkState) error {
	var charged [][]int
	for _, idx := range cs.groups {
		var keep []int
		counting := false
		for q, i := range idx {
			if boxOf(req, cs.buckets, idx, q) != nil {
				counting = countsDenial(cs, idx[q:])
			} else if q > 0 && cs.buckets[idx[q-1]] != cs.buckets[i] {
				counting = false
			}
			if e := &req.Entries[i]; counting || e.Cost > 0 && (e.ChargeAlways || mayDuplicate(e, &cs.verdicts[i])) {
				keep = append(keep, i) // in order: a bucket's entries stay adjacent
			}
		}
		if len(keep) > 0 {
			charged = append(charged, keep)
		}
	}
	if len(charged) == 0 {
		return nil
	}
	groups, consumed := cs.groups, cs.consumed
	cs.groups, cs.consumed = charged, make([]bool, len(charged))
	err := s.round(ctx, req, cs, false)
	if err == nil {
		s.giveBack(ctx, req, cs)
	}
	cs.groups, cs.consumed = groups, consumed
	return err
}

// mayDuplicate reports whether e, denied v by a dry run, is a
// concurrency entry whose holder may already hold, or a reserving one
// whose holder may already have reserved: a denied one (the verdict does
// not say whether its holder held).
func mayDuplicate(e *ratelimit.Entry, v *model.Verdict) bool {
	return (e.Limit.Algorithm == ratelimit.Concurrency || e.Reserve > 0 && e.Holder != "") && !v.Allowed
}

// countsDenial reports whether the bucket whose entries start idx had an
// entry denied by its own limits, not by a ban, in the verdicts so far.
func countsDenial(cs *checkState, idx []int) bool {
	for _, i := range idx {
		if cs.buckets[i] != cs.buckets[idx[0]] {
			break
		}
		if v := &cs.verdicts[i]; !v.Allowed && !v.Banned {
			return true
		}
	}
	return false
}

// round sends one call per group, waits, and parses the replies into
// cs.verdicts and each group's decision into cs.consumed.
func (s *Store) round(ctx context.Context, req *ratelimit.Request, cs *checkState, dry bool) error {
	var now int64 = -1
	if s.opts.Clock != nil {
		now = s.opts.Clock().UnixMicro()
	}
	j := s.prepare(ctx, req, cs, dry, now)
	s.b.submit(j)
	var expired <-chan time.Time
	if !cs.deadline.IsZero() {
		if cs.timer == nil {
			cs.timer = time.NewTimer(time.Until(cs.deadline))
		} else {
			cs.timer.Reset(time.Until(cs.deadline))
		}
		expired = cs.timer.C
	}
	// Given up (the context ended or the deadline passed): the call may
	// still run, its outcome is unknown, and the flusher may still use cs.
	// An answer already there wins: in a burst the waiter may run only
	// after its timer fired too, and select would pick either at random,
	// throwing away a decision Redis made.
	select {
	case <-j.done:
	case <-ctx.Done():
		if !j.answered() {
			cs.abandoned = true
			return fmt.Errorf("redisstore check: %w", onNode(j, context.Cause(ctx)))
		}
	case <-expired:
		if !j.answered() {
			cs.abandoned = true
			return fmt.Errorf("redisstore check: %w", onNode(j, context.DeadlineExceeded))
		}
	}
	if expired != nil {
		cs.timer.Stop()
	}
	return finish(req, cs)
}

// onNode returns err as a NodeError when every call of j still without
// an answer goes to one Cluster master: a dead or frozen master's calls
// end at their deadline (go-redis redials it with backoff), and that is
// its failure alone, even when the request's other calls, on healthy
// masters, were answered. When the unanswered calls span masters, which
// one kept the answer is unknown: err as it is. The flusher writes only
// answered (atomically); node is written before the job is sent.
func onNode(j *job, err error) error {
	node := ""
	for _, c := range j.calls {
		if c.answered.Load() {
			continue
		}
		if c.node == "" || node != "" && c.node != node {
			return err
		}
		node = c.node
	}
	if node == "" {
		return err
	}
	return &ratelimit.NodeError{Node: node, Err: err}
}

// prepare builds cs's job: one call per group, at time now (µs; -1: the
// server's TIME).
func (s *Store) prepare(ctx context.Context, req *ratelimit.Request, cs *checkState, dry bool, now int64) *job {
	j := &cs.job
	*j = job{ctx: ctx, deadline: cs.deadline, done: cs.done}
	if len(cs.groups) == 1 {
		cs.call = call{}
		cs.callPtrBuf[0] = &cs.call
		j.calls = cs.callPtrBuf[:]
	} else {
		j.calls = make([]*call, len(cs.groups))
		for g := range j.calls {
			j.calls[g] = &call{}
		}
	}
	for g, idx := range cs.groups {
		c := j.calls[g]
		c.build(req, cs, idx, dry, now, s.cluster != nil)
		c.job = j
		if s.cluster != nil {
			c.node = s.nodeOf(ctx, c.keys[0])
		}
	}
	return j
}

// finish parses the replies of cs's job, done, into cs.verdicts and each
// group's decision into cs.consumed.
func finish(req *ratelimit.Request, cs *checkState) error {
	for g, c := range cs.job.calls {
		if c.err != nil && c.node != "" {
			// Which node failed, so that the others' breakers stay closed.
			return fmt.Errorf("redisstore check: %w", &ratelimit.NodeError{Node: c.node, Err: c.err})
		}
		if c.err != nil {
			return fmt.Errorf("redisstore check: %w", c.err)
		}
		ok, err := parseReply(c.reply, req, cs.buckets, cs.groups[g], cs.verdicts)
		if err != nil {
			return fmt.Errorf("redisstore check: %w", err)
		}
		cs.consumed[g] = ok
	}
	return nil
}

// checkBatch evaluates reqs exactly as flushers do when the requests are
// queued together: their calls merged into as few commands as MaxMerge
// allows, in one pipeline, request i at time at[i] (µs; -1: the server's
// TIME). Tests use it to drive merged commands deterministically. Every
// request must be single-round (one Cluster slot).
func (s *Store) checkBatch(ctx context.Context, reqs []*ratelimit.Request, at []int64, decs []ratelimit.Decision) error {
	states := make([]*checkState, len(reqs))
	jobs := make([]*job, len(reqs))
	for i, req := range reqs {
		if err := req.Validate(); err != nil {
			return fmt.Errorf("redisstore check: %w", err)
		}
		cs := &checkState{done: make(chan struct{}, 1)}
		cs.deadline, _ = ctx.Deadline()
		s.compile(req, cs)
		if len(cs.groups) != 1 {
			return fmt.Errorf("redisstore check batch: request %d spans %d slots", i, len(cs.groups))
		}
		states[i], jobs[i] = cs, s.prepare(ctx, req, cs, req.Action == ratelimit.DryRun, at[i])
	}
	var calls []*call
	for _, j := range jobs {
		j.pending.Store(int64(len(j.calls)))
		calls = append(calls, j.calls...)
	}
	s.exec(new(flushScratch), calls)
	for i, cs := range states {
		<-cs.done
		if err := finish(reqs[i], cs); err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		fill(&decs[i], reqs[i], cs.consumed[0], cs) // one group: its decision is the request's
	}
	return nil
}

// fill writes the Decision: an entry reports its numbers after consumption
// when its group consumed (or, on a dry run, would have).
func fill(dec *ratelimit.Decision, req *ratelimit.Request, allowed bool, cs *checkState) {
	dec.Allowed = allowed
	n := len(cs.verdicts)
	if cap(dec.Results) < n {
		dec.Results = make([]ratelimit.Result, n)
	}
	dec.Results = dec.Results[:n]
	for g, idx := range cs.groups {
		for _, i := range idx {
			dec.Results[i] = cs.verdicts[i].Result(model.Consumed(cs.consumed[g], &req.Entries[i]))
		}
	}
}

func all(bs []bool) bool {
	for _, b := range bs {
		if !b {
			return false
		}
	}
	return true
}
