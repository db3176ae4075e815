// Package redisstore is the Redis ratelimit.Store: one Lua library (Redis 7
// Functions, or scripts through EVALSHA where functions are unavailable)
// that evaluates every limit of a request in one atomic call per Cluster
// slot, with calls from concurrent requests pipelined together.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/model"
)

// Mode selects how the library is invoked.
type Mode int32

const (
	// ModeAuto uses Functions and switches to scripts for good the first
	// time the server answers that FCALL or FUNCTION is an unknown command.
	ModeAuto Mode = iota
	// ModeFunctions uses FUNCTION LOAD REPLACE and FCALL.
	ModeFunctions
	// ModeScripts uses SCRIPT LOAD and EVALSHA (Redis < 7, proxies without
	// FUNCTION; tests force it to cover the fallback).
	ModeScripts
)

func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeFunctions:
		return "functions"
	case ModeScripts:
		return "scripts"
	}
	return fmt.Sprintf("Mode(%d)", int32(m))
}

// Options configures a Store. The zero value is ready for production.
type Options struct {
	Mode Mode
	// Flushers is how many pipelines may be in flight at once (default 4);
	// it also bounds the connections the store uses per node.
	Flushers int
	// MaxBatch bounds the commands in one pipeline (default 512).
	MaxBatch int
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
// In Cluster mode a request spanning several slots is first evaluated as a
// dry run in every slot; only if all allow are the consuming calls sent.
// Between the two rounds another request may consume in some slot: then
// that slot denies in the second round while the others have consumed.
// The request is reported denied, and the units consumed elsewhere are lost
// for the window — a small over-count, never an over-admission.
//
// Retries: a call is sent at most once, except when the server answered
// that the library is missing (NOSCRIPT, "Function not found"): then it did
// not run, the library is loaded again (on every master) and only those
// calls are resent. A call that failed any other way, network errors and
// timeouts included, is never resent, since it may have run.
type Store struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient
	opts    Options

	mode   atomic.Int32  // ModeFunctions or ModeScripts, in effect now
	gen    atomic.Uint64 // bumped by every successful load
	loadMu sync.Mutex

	b *batcher

	pipelines, calls, loads atomic.Uint64
}

// Stats counts the store's traffic since New.
type Stats struct {
	// Pipelines is how many pipelines were sent, Calls how many library
	// calls they carried (resends after a load included): Calls/Pipelines
	// is the batching factor.
	Pipelines, Calls uint64
	// Loads is how many times the library was loaded (Load included).
	Loads uint64
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	return Stats{Pipelines: s.pipelines.Load(), Calls: s.calls.Load(), Loads: s.loads.Load()}
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
		s.opts.Flushers = 4
	}
	if s.opts.MaxBatch <= 0 {
		s.opts.MaxBatch = 512
	}
	s.b = newBatcher(s.opts.Flushers, s.opts.MaxBatch, s.exec)
	return s, nil
}

// Mode reports how the library is invoked now (ModeFunctions or ModeScripts).
func (s *Store) Mode() Mode { return Mode(s.mode.Load()) }

// Close stops the flushers; calls still queued fail with ErrClosed. It
// does not close the client.
func (s *Store) Close() error {
	s.b.close()
	return nil
}

// call is one library invocation: the command arguments, with the command
// name and function name or SHA filled in at send time (the mode can
// change between a first try and a resend). Keys and numbers are passed to
// go-redis by pointer into the call's own storage, which boxes them
// without allocating.
type call struct {
	args []any
	keys []string
	nums []int64
	cmd  noRetryCmd
	err  error

	// Inline storage for calls of up to inlineEntries entries.
	argBuf [3 + inlineEntries + 1 + 6*inlineEntries + 1]any
	keyBuf [inlineEntries]string
	numBuf [5*inlineEntries + 1]int64
}

const inlineEntries = 4

// checkState is one Check's working memory in one allocation for small
// requests. It is never reused: a flusher may still hold its calls after
// the caller gave up.
type checkState struct {
	params   []model.Params
	verdicts []model.Verdict
	groups   [][]int
	consumed []bool
	job      job
	call     call // the only call of a single-slot round

	paramBuf   [8]model.Params
	verdictBuf [8]model.Verdict
	idxBuf     [8]int
	groupBuf   [1][]int
	boolBuf    [1]bool
	callPtrBuf [1]*call
}

// Check implements ratelimit.Store.
func (s *Store) Check(ctx context.Context, req *ratelimit.Request, dec *ratelimit.Decision) error {
	if err := req.Validate(); err != nil {
		return fmt.Errorf("redisstore check: %w", err)
	}
	n := len(req.Entries)
	cs := &checkState{}
	cs.params, cs.verdicts = cs.paramBuf[:0], cs.verdictBuf[:0]
	if n > len(cs.paramBuf) {
		cs.params, cs.verdicts = make([]model.Params, 0, n), make([]model.Verdict, 0, n)
	}
	for i := range req.Entries {
		cs.params = append(cs.params, model.CompileValid(req.Entries[i].Limit))
	}
	cs.verdicts = cs.verdicts[:n]
	s.group(req, cs)

	// One slot, or not a Cluster: one call decides and consumes.
	// Several slots: a dry run everywhere first.
	dryFirst := len(cs.groups) > 1
	if err := s.round(ctx, req, cs, req.DryRun || dryFirst); err != nil {
		return err
	}
	allowed := all(cs.consumed)
	if dryFirst && allowed && !req.DryRun {
		if err := s.round(ctx, req, cs, false); err != nil {
			return err
		}
		fill(dec, all(cs.consumed), cs)
		return nil
	}
	for g := range cs.consumed {
		cs.consumed[g] = allowed // consumed, or would be, only if the whole request is allowed
	}
	fill(dec, allowed, cs)
	return nil
}

// round sends one call per group, waits, and parses the replies into
// cs.verdicts and each group's decision into cs.consumed.
func (s *Store) round(ctx context.Context, req *ratelimit.Request, cs *checkState, dry bool) error {
	var now int64 = -1
	if s.opts.Clock != nil {
		now = s.opts.Clock().UnixMicro()
	}
	j := &cs.job
	*j = job{ctx: ctx, done: make(chan struct{})}
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
		j.calls[g].build(req, cs.params, idx, dry, now)
	}
	if err := s.b.submit(j); err != nil {
		return fmt.Errorf("redisstore check: %w", err)
	}
	select {
	case <-j.done:
	case <-ctx.Done():
		// The call may still run: its outcome is unknown.
		return fmt.Errorf("redisstore check: %w", context.Cause(ctx))
	}
	for g, c := range j.calls {
		if c.err != nil {
			return fmt.Errorf("redisstore check: %w", c.err)
		}
		ok, err := parseReply(c.cmd.Val(), req, cs.groups[g], cs.verdicts)
		if err != nil {
			return fmt.Errorf("redisstore check: %w", err)
		}
		cs.consumed[g] = ok
	}
	return nil
}

// build fills the command: placeholders for the command and function,
// numkeys, keys, then the library's arguments (see lua/sluice.lua).
func (c *call) build(req *ratelimit.Request, params []model.Params, idx []int, dry bool, now int64) {
	n := len(idx)
	c.args, c.keys, c.nums = c.argBuf[:0], c.keyBuf[:0], c.numBuf[:0]
	if n > inlineEntries {
		c.args, c.keys, c.nums = make([]any, 0, 3+n+1+6*n+1), make([]string, 0, n), make([]int64, 0, 5*n+1)
	}
	for _, i := range idx {
		c.keys = append(c.keys, req.Entries[i].Key)
		p, e := &params[i], &req.Entries[i]
		c.nums = append(c.nums, int64(p.Alg), p.Capacity, p.Rate, p.Interval, e.Cost)
	}
	if now >= 0 {
		c.nums = append(c.nums, now)
	}
	c.args = append(c.args, nil, nil, n)
	for k := range c.keys {
		c.args = append(c.args, &c.keys[k])
	}
	c.args = append(c.args, flag(dry))
	for k, i := range idx {
		f := c.nums[5*k : 5*k+5]
		c.args = append(c.args, &f[0], &f[1], &f[2], &f[3], &f[4], flag(req.Entries[i].Shadow))
	}
	if now >= 0 {
		c.args = append(c.args, &c.nums[len(c.nums)-1])
	}
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// group splits the entries by Cluster slot, in order of first appearance;
// without Cluster all entries form one group. It sets cs.groups and
// cs.consumed.
func (s *Store) group(req *ratelimit.Request, cs *checkState) {
	n := len(req.Entries)
	if s.cluster == nil {
		idx := cs.idxBuf[:0]
		if n > len(cs.idxBuf) {
			idx = make([]int, 0, n)
		}
		for i := range n {
			idx = append(idx, i)
		}
		cs.groupBuf[0] = idx
		cs.groups, cs.consumed = cs.groupBuf[:], cs.boolBuf[:]
		return
	}
	var slots []uint16
	for i := range req.Entries {
		slot := ratelimit.HashSlot(req.Entries[i].Key)
		g := 0
		for g < len(slots) && slots[g] != slot {
			g++
		}
		if g == len(slots) {
			slots = append(slots, slot)
			cs.groups = append(cs.groups, nil)
		}
		cs.groups[g] = append(cs.groups[g], i)
	}
	cs.consumed = make([]bool, len(cs.groups))
}

// fill writes the Decision: an entry reports its numbers after consumption
// when its group consumed (or, on a dry run, would have).
func fill(dec *ratelimit.Decision, allowed bool, cs *checkState) {
	dec.Allowed = allowed
	n := len(cs.verdicts)
	if cap(dec.Results) < n {
		dec.Results = make([]ratelimit.Result, n)
	}
	dec.Results = dec.Results[:n]
	for g, idx := range cs.groups {
		for _, i := range idx {
			dec.Results[i] = cs.verdicts[i].Result(cs.consumed[g])
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
