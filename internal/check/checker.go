// Package check decides one request against the policies in force: it
// selects the matching policies, renders their keys, makes one atomic store
// call for every limit, and applies shadow mode, the failure mode, the
// circuit breaker and the cache of denials. It knows nothing of HTTP; the
// webhook package turns its Outcome into an answer.
//
// The stages live in files of their own: outcome.go (what a check is
// given and decides), options.go (construction), gather.go (matching,
// keys, store entries), decide.go (the store call, failure modes, the
// cache of denials). Who is told of a decision (metrics, the dashboard's
// counts, the decision log, top keys, the index of bans, the other check
// processes) is an Observer registered where the checker is assembled
// (observe.go, tally.go); an operator's operations on buckets are
// Buckets; what the store can do besides checking is its
// ratelimit.Backend.
package check

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Source gives the policy set in force. Implementations swap whole Sets
// atomically (files in local mode, the Redis policy table in a cluster).
type Source interface {
	Policies() *policy.Set
}

// Checker decides requests. It is safe for concurrent use.
type Checker struct {
	store     ratelimit.Store
	source    Source
	overrides Overrides
	timeout   time.Duration
	breaker   *breakers // one per store node (Redis Cluster master), or one
	denials   *denyCache
	// keeper is the store's own memory of denials (a lease store's), which
	// refunds drop too; nil when the store has none.
	keeper ratelimit.DenialKeeper
	// buckets are the operator's operations on buckets (Buckets).
	buckets  *Buckets
	metrics  *Metrics
	observer Observer
	full     fullLog
	now      func() time.Time

	mu      sync.Mutex
	seenSet *policy.Set

	scratch sync.Pool
}

// Breaker returns the circuit breaker of a store that is one node (a
// single Redis, Sentinel, the memory store), for health pages and tests.
// A Redis Cluster store has one per master: see BreakerStates.
func (c *Checker) Breaker() *Breaker { return c.breaker.whole }

// BreakerStates returns the state of every node's breaker, by the node's
// name (a Cluster master's address; "" for the store as one node).
func (c *Checker) BreakerStates() map[string]BreakerState { return c.breaker.snapshot() }

// Policies returns the policy set in force.
func (c *Checker) Policies() *policy.Set { return c.currentSet() }

// Buckets returns the operator's operations on the buckets of the
// policies in force (the admin API's).
func (c *Checker) Buckets() *Buckets { return c.buckets }

func (c *Checker) currentSet() *policy.Set {
	var set *policy.Set
	if c.source != nil {
		set = c.source.Policies()
	}
	if set == nil {
		set = policy.NewSet(0, nil)
	}
	c.mu.Lock()
	if set != c.seenSet {
		if c.seenSet != nil && c.denials != nil {
			c.denials.clear() // limits changed: old denials may no longer hold
		}
		c.seenSet = set
		if c.metrics != nil {
			c.metrics.revision.Set(float64(set.Revision))
		}
	}
	c.mu.Unlock()
	return set
}

// Check decides in.
func (c *Checker) Check(ctx context.Context, in Input) (*Outcome, error) {
	out := &Outcome{}
	if err := c.CheckInto(ctx, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// CheckInto decides in and fills out, reusing its slices: the hot path
// pools Outcomes so a check allocates almost nothing. The observer is
// told of it once it is decided, a dry run excepted.
func (c *Checker) CheckInto(ctx context.Context, in Input, out *Outcome) error {
	start := c.now()
	sc := c.scratch.Get().(*scratch)
	defer c.scratch.Put(sc)
	set := c.currentSet()
	named, err := named(set, in, sc)
	if err != nil {
		return err
	}
	sc.reset(in)
	sc.overrides, sc.now = c.overrides, start
	out.reset()
	out.decides = in.decides()
	sc.gather(out, set, named, in)
	err = c.evaluate(ctx, sc, out, in, start)
	if err == nil {
		out.judgeParts(max(len(in.Parts), 1))
	}
	if c.observer != nil && in.Action != ratelimit.DryRun {
		c.observe(ctx, sc, set, in, out, err)
	}
	return err
}

// observe tells the observer of the check of in, decided into out (err:
// it failed), through sc's copies so that nothing escapes to the heap.
func (c *Checker) observe(ctx context.Context, sc *scratch, set *policy.Set, in Input, out *Outcome, err error) {
	sc.in = in
	sc.observed = Observation{Input: &sc.in, Outcome: out, Err: err, Sent: sc.sent, set: set, clock: c.now}
	c.observer.Checked(ctx, &sc.observed)
	sc.in, sc.observed = Input{}, Observation{} // the pool keeps no request alive
}

// evaluate decides the entries sc gathered for in into out.
func (c *Checker) evaluate(ctx context.Context, sc *scratch, out *Outcome, in Input, start time.Time) error {
	if sc.noHolder != nil {
		return refuseNoRelease(out, sc.noHolder)
	}
	if sc.priceErr != nil {
		return sc.priceErr // before the store: nothing settled
	}
	defer c.observeLatency(start)
	if !out.Allowed { // a missing key denied: consume nothing anywhere
		c.noteDuplicates(ctx, sc)
		return nil
	}
	switch {
	case len(sc.zeros) == 0:
	case givesBack(in.Action): // a limit of 0 has nothing to give back, an untracked holder nothing to free
		untrackedReleases(sc, out)
		untrackedSettlements(sc, out)
	default:
		out.Reason = ReasonAllowed
		if decideZeros(sc, out, start) { // denied: consume nothing anywhere
			c.noteDuplicates(ctx, sc)
			return nil
		}
	}
	if len(sc.req.Entries) == 0 {
		out.Allowed = in.Action != ratelimit.Release && in.Action != ratelimit.Settle // nothing held: nothing freed
		return nil
	}
	if n := len(sc.req.Entries); n > ratelimit.MaxEntries {
		// Refused before the store: it is no store failure, and the
		// store could not decide it either.
		return fmt.Errorf("%w: the request meets %d limits of namespace %s (limits of one bucket met twice count once), more than the %d one check evaluates",
			ErrTooManyLimits, n, in.Namespace, ratelimit.MaxEntries)
	}
	out.Reason = ReasonAllowed

	out.dryRun = in.Action == ratelimit.DryRun
	if !givesBack(in.Action) && c.answerFromCache(sc, out, start) {
		return nil
	}
	return c.decide(ctx, sc, out)
}

func (c *Checker) observeLatency(start time.Time) {
	if c.metrics != nil {
		c.metrics.checkLatency.Observe(c.now().Sub(start).Seconds())
	}
}
