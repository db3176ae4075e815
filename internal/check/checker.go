// Package check decides one request against the policies in force: it
// selects the matching policies, renders their keys, makes one atomic store
// call for every limit, and applies shadow mode, the failure mode, the
// circuit breaker and the cache of denials. It knows nothing of HTTP; the
// webhook package turns its Outcome into an answer.
package check

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Source gives the policy set in force. Implementations swap whole Sets
// atomically (files in local mode, the Redis policy table in a cluster).
type Source interface {
	Policies() *policy.Set
}

// Options configure a Checker.
type Options struct {
	Store ratelimit.Store
	// StoreCalls, when set, is what the checks call instead of Store:
	// Store wrapped (a trace span per call). The checker learns what Store
	// is (its nodes, evictions, refunds) from Store itself.
	StoreCalls ratelimit.Store
	Source     Source
	// Overrides, when set, give the overrides of key values (other
	// numbers for a policy's limits); nil: every key has its policy's.
	Overrides Overrides
	// Timeout bounds each store call; when it passes, the failure mode
	// answers. Default 50ms.
	Timeout time.Duration
	// BreakerThreshold consecutive store failures open the circuit
	// breaker (default 5); while open, one probe per BreakerCooldown
	// (default 1s) goes to the store.
	BreakerThreshold int
	BreakerCooldown  time.Duration
	// DenyCacheSize bounds the cache of denied keys (default 100,000);
	// negative disables it.
	DenyCacheSize int
	// Metrics, when set, receive every decision.
	Metrics *Metrics
	// Denials, when set, is told of every denial of a consuming check
	// (the decision log). It must not block.
	Denials DenialLog
	// Keys, when set, is told each policy's key value and decision for
	// every check that consumes (not dry runs, refunds or releases).
	Keys KeyRecorder
	// AnnounceRefunds, when set, is given the keys of every refund this
	// Checker's store made (an Input's refund, and the units a lease store
	// gives back), so that the other check processes forget their
	// denials of them too (ForgetDenials). keys is valid only during the
	// call; it must not block.
	AnnounceRefunds func(keys []string)
	// AnnounceLifts, when set, is given the keys of every bucket whose
	// ban Lift ended, so that the other check processes forget their
	// denials of them, bans included (ForgetLifted). Same terms as
	// AnnounceRefunds.
	AnnounceLifts func(keys []string)
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives when the store becomes full and when it decides
	// again, once each per episode (default slog.Default()).
	Logger *slog.Logger
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
	keeper denialKeeper
	// admin is the store the admin operations reach (Inspect excepted):
	// a ratelimit.Resetter, a ratelimit.BanIndex, or neither.
	admin    ratelimit.Store
	announce func(keys []string)
	// announceLifts is Options.AnnounceLifts.
	announceLifts func(keys []string)
	metrics       *Metrics
	keys          KeyRecorder
	full          fullLog
	counts        counts
	now           func() time.Time
	// denialLog is Options.Denials.
	denialLog DenialLog

	mu           sync.Mutex
	seenRevision int64
	seenSet      *policy.Set

	scratch sync.Pool
}

// New returns a Checker.
func New(o Options) *Checker {
	if o.Timeout <= 0 {
		o.Timeout = 50 * time.Millisecond
	}
	if o.BreakerThreshold <= 0 {
		o.BreakerThreshold = 5
	}
	if o.BreakerCooldown <= 0 {
		o.BreakerCooldown = time.Second
	}
	if o.DenyCacheSize == 0 {
		o.DenyCacheSize = 100_000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.StoreCalls == nil {
		o.StoreCalls = o.Store
	}
	c := &Checker{store: o.StoreCalls, source: o.Source, overrides: o.Overrides, timeout: o.Timeout, metrics: o.Metrics, denialLog: o.Denials, keys: o.Keys, now: o.Now, announce: o.AnnounceRefunds,
		full: fullLog{log: o.Logger, full: map[string]bool{}}}
	if ev, ok := o.Store.(evictingStore); ok && o.Metrics != nil {
		o.Metrics.evictions.Store(&ev)
	}
	c.breaker = newBreakers(o.BreakerThreshold, o.BreakerCooldown, o.Now, o.Metrics, o.Store)
	if o.DenyCacheSize > 0 {
		c.denials = newDenyCache(o.DenyCacheSize)
	}
	c.keeper, _ = o.Store.(denialKeeper)
	c.admin = o.Store
	c.announceLifts = o.AnnounceLifts
	if r, ok := o.Store.(refunder); ok {
		r.NotifyRefunds(c.refunded)
	}
	c.scratch.New = func() any { return &scratch{} }
	return c
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

// Input is one request to decide.
type Input struct {
	Namespace string
	// Policy, when set, checks only that policy of the namespace.
	Policy  string
	Request *policy.Request
	// Parts, when set, replace Request: the descriptors of one Envoy rate
	// limit service request (at most MaxParts), decided together in one
	// store call. Either every part's limits are counted or, when any
	// denies, none is.
	Parts []Part
	// Cost overrides every policy's cost when above 0.
	Cost int64
	// Action is what the check does to the limits: consume (the zero
	// Action), a dry run that evaluates without consuming anything, or a
	// refund that gives the costs back to the matching policies' limits
	// instead of taking them (units taken earlier and not used, Envoy's
	// negative hits). A refund is answered allowed, with the limits'
	// figures after it, and never from the denial cache. A policy with a
	// concurrency limit releases instead: its concurrency limits free what
	// the holder holds, and its other limits keep what the request was
	// charged. A release (ratelimit.Release) ends a request: the matching
	// policies' concurrency limits free what the holder holds, and nothing
	// else changes; it is answered allowed when something was freed.
	Action ratelimit.Action
	// Holder names the request whose units the concurrency limits of
	// HTTP policies hold (the middleware's request, a /v1/check handle),
	// and which a release names again. Transports that cannot release
	// leave it empty: a concurrency limit met then is refused
	// (ErrNoRelease). A descriptor policy's limit reads its holder from
	// the descriptor (policy.Limit.Holder).
	Holder string
}

// MaxParts bounds the Parts of one Input: the descriptors of one Envoy
// rate limit service request, which the gRPC server refuses beyond it.
// With ratelimit.MaxEntries it bounds what a namespace's descriptor
// policies may add up to (the controller's TooManyLimits condition).
const MaxParts = 64

// Part is one of several requests decided together.
type Part struct {
	Request *policy.Request
	// Cost, when CostSet, overrides the cost of the policies the part
	// matches; 0 then checks the limits without counting.
	Cost    int64
	CostSet bool
	// Policies, when set, decide the part instead of the namespace's
	// policies that match it (the limit an Envoy descriptor carries,
	// which replaces them as it does in envoyproxy/ratelimit).
	Policies []*policy.Policy
	// Refunded says that the part gave its cost back (Envoy's negative
	// hits: a refund or a release, made by a check of its own just before)
	// and is checked only to read its limits' figures for the answer: a
	// give-back, no decision, so its limits count no decision and tell the
	// decision log and the top keys nothing.
	Refunded bool
}

// Reason says why a request was answered the way it was.
type Reason string

const (
	// ReasonAllowed: every enforced limit of every matching policy
	// admitted the request (and each counted it).
	ReasonAllowed Reason = "Allowed"
	// ReasonNoPolicy: no policy of the namespace matched; allowed.
	ReasonNoPolicy Reason = "NoPolicyMatched"
	// ReasonLimited: denied by a limit; nothing was counted anywhere.
	ReasonLimited Reason = "RateLimited"
	// ReasonBanned: denied, and the limit the answer reports was denied
	// by its bucket's ban (the policy's penalty box), or its denial issued
	// the ban: the client waits for the ban's end, not for a refill.
	ReasonBanned Reason = "Banned"
	// ReasonMissingKey: denied because a placeholder of a policy's key
	// had no value and its onMissingKey is Deny.
	ReasonMissingKey Reason = "MissingKey"
	// ReasonStoreUnavailable: the store could not answer in time, so the
	// failure modes decided: denied when an enforced matching policy's
	// failureMode is Closed, else allowed (degraded either way).
	ReasonStoreUnavailable Reason = "StoreUnavailable"
	// ReasonInvalidHolder: denied by a concurrency limit whose holder, the
	// descriptor entry it names (Envoy's x-request-id), is empty or longer
	// than ratelimit.MaxHolderLen: Sluice cannot track what such a request
	// holds, nor release it.
	ReasonInvalidHolder Reason = "InvalidHolder"
)

// ErrUnknownPolicy is returned when Input.Policy names no policy in force.
var ErrUnknownPolicy = errors.New("no such policy")

// ErrTooManyLimits is returned for a request that meets more limits than
// one check evaluates (ratelimit.MaxEntries).
var ErrTooManyLimits = errors.New("too many limits for one check")

// PolicyResult says how one matching policy took part.
type PolicyResult struct {
	Policy *policy.Policy
	// Part is the index of the Input's part the policy matched (0 for a
	// single request).
	Part     int
	KeyValue string
	// MissingKey is set when the key had a placeholder without a value;
	// the policy's onMissingKey then decided (Skip: not evaluated).
	MissingKey bool
	// WhenError is the `when` expression's evaluation error; the policy
	// was applied anyway, so an expression error never bypasses a limit.
	WhenError error
	// Ban is the length of the ban this check issued the policy's bucket
	// (its penalty box); for a shadow policy, of the ban it would have
	// issued. 0 when none.
	Ban time.Duration
	// Override is the key value's override in force, whose limits were
	// checked in place of the policy's; nil when none.
	Override *policy.Override

	// decided: a limit of the policy was decided (by the store, the cache
	// of denials or as a limit of 0); denied: one denied.
	decided, denied bool
	// givesBack: the policy matched a part that gave its cost back
	// (Part.Refunded), whose limits count no decision.
	givesBack bool
}

// Limits are the limits checked for the policy's key value: its
// override's, else the policy's own.
func (pr *PolicyResult) Limits() []policy.Limit {
	if pr.Override != nil {
		return pr.Override.Limits()
	}
	return pr.Policy.Limits
}

// countedLimit is the limit whose decisions count those of limit i: the
// policy's own, whichever numbers were in force. An override's limits are
// copies of the policy's, one set per key value: counting by them would
// keep a counter's shortcut per key value.
func (pr *PolicyResult) countedLimit(i int) *policy.Limit { return &pr.Policy.Limits[i] }

// LimitResult is one limit's figures.
type LimitResult struct {
	Policy *policy.Policy
	// Limit is the limit in force: the policy's, or its override's for
	// the key value (then Override is set).
	Limit *policy.Limit
	// Override is the override whose numbers Limit has, nil when Limit is
	// the policy's own.
	Override *policy.Override
	// Part is the index of the Input's part the limit was checked for.
	Part int
	Key  string
	ratelimit.Result
	// Cached is set when the denial came from the cache of denials.
	Cached bool
}

// Outcome is the decision for one request.
type Outcome struct {
	Allowed bool
	Reason  Reason
	// Policies are the matching policies, in evaluation order.
	Policies []PolicyResult
	// Limits are the evaluated limits (empty when none was).
	Limits []LimitResult
	// Tightest indexes the limit whose figures the answer's headers carry:
	// on a denial the one that waits longest, otherwise the one with the
	// fewest remaining; -1 when there is none. Renderers read it through
	// Reporting, and each part's through Part.
	Tightest int
	// RetryAfter is set on a denial: never earlier than the moment the
	// same request could be allowed. ratelimit.Never when it never can.
	RetryAfter time.Duration
	// Decider is the policy that denied (or the tightest one when allowed).
	Decider *policy.Policy
	// StoreErr is the store's error when the failure mode answered.
	StoreErr error
	// Degraded is set when the failure mode answered instead of Redis.
	Degraded bool

	// firstPart and moreParts are the verdicts of the Input's parts (see
	// Part): the first kept inline, so that a request without parts
	// costs no slice.
	firstPart partFacts
	moreParts []partFacts

	dryRun bool
	// decides: the check is a decision, which the observers count (see
	// Input.decides).
	decides bool
}

type scratch struct {
	eval policy.Eval
	req  ratelimit.Request
	dec  ratelimit.Decision
	// uses are the limits checked, in order: one per entry, except that
	// parts whose keys coincide share one entry (with their costs added).
	uses []use
	// zeros are the limits of 0 met, and the concurrency limits whose
	// holder cannot be tracked, which have no entry (decideZeros).
	zeros []zeroUse
	one   [1]*policy.Policy
	// candidates are the policies of the namespace that one part can
	// match (policy.Set.AppendCandidates).
	candidates []*policy.Policy
	// overrides and now are the checker's overrides and the check's
	// start, at which an override must still apply.
	overrides Overrides
	now       time.Time
	parts     [1]Part
	route     route    // the breakers the store call passes
	keys      []string // the keys of a refund
	// action and holder are the Input's; noHolder a concurrency limit met without
	// one (ErrNoRelease); refund says that the Input's refund became a
	// release (see holds).
	action   ratelimit.Action
	holder   string
	noHolder *LimitResult
	refund   bool
}

// use is one limit of one matching policy, checked through one entry.
type use struct {
	entry int // index into req.Entries
	owner int // index into Outcome.Policies
	limit int // index into the policy's Limits
}

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
		c.counts.forgetLimits() // the old set's limits are gone

		c.seenSet, c.seenRevision = set, set.Revision
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
// pools Outcomes so a check allocates almost nothing.
func (c *Checker) CheckInto(ctx context.Context, in Input, out *Outcome) error {
	if err := c.checkInto(ctx, in, out); err != nil {
		return err
	}
	out.judgeParts(max(len(in.Parts), 1))
	if !out.Allowed && c.denialLog != nil && out.decides {
		c.logDenial(ctx, in, out)
	}
	if c.keys != nil && out.decides {
		c.recordKeys(out)
	}
	return nil
}

// decides reports whether checking in is a decision, which the observers
// (metrics, the dashboard's counts, the decision log, the top keys) are
// told of: it consumes, and not only to read the figures of parts that
// gave their cost back (Part.Refunded). Dry runs, refunds and releases
// are no decisions.
func (in *Input) decides() bool {
	if in.Action != ratelimit.Consume {
		return false
	}
	for i := range in.Parts {
		if !in.Parts[i].Refunded {
			return true
		}
	}
	return len(in.Parts) == 0
}

// logDenial tells the decision log of a denial. The copy of in it takes
// escapes to the heap on this path only, not on every check's.
func (c *Checker) logDenial(ctx context.Context, in Input, out *Outcome) {
	c.denialLog.Denied(ctx, &in, out)
}

// DenialLog is told of denials: see Options.Denials.
type DenialLog interface {
	Denied(ctx context.Context, in *Input, out *Outcome)
}

func (c *Checker) checkInto(ctx context.Context, in Input, out *Outcome) error {
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
	return c.evaluate(ctx, sc, out, in, start)
}

// evaluate decides the entries sc gathered for in into out.
func (c *Checker) evaluate(ctx context.Context, sc *scratch, out *Outcome, in Input, start time.Time) error {
	if sc.noHolder != nil {
		return c.refuseNoRelease(sc.noHolder, in.Action == ratelimit.DryRun)
	}
	defer c.observeLatency(start)
	if !out.Allowed { // a missing key denied: consume nothing anywhere
		c.noteDuplicates(ctx, sc)
		return nil
	}
	switch {
	case len(sc.zeros) == 0:
	case givesBack(in.Action): // a limit of 0 has nothing to give back, an untracked holder nothing to free
		c.countUntrackedReleases(sc, out)
	default:
		out.Reason = ReasonAllowed
		if c.decideZeros(sc, out, start) { // denied: consume nothing anywhere
			c.noteDuplicates(ctx, sc)
			return nil
		}
	}
	if len(sc.req.Entries) == 0 {
		out.Allowed = in.Action != ratelimit.Release // nothing held: nothing freed
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

// named is the one policy in.Policy names, or nil when it names none and
// each part is checked against its candidates in the namespace.
func named(set *policy.Set, in Input, sc *scratch) ([]*policy.Policy, error) {
	if in.Policy == "" {
		return nil, nil
	}
	p := set.Get(in.Namespace, in.Policy)
	if p == nil {
		return nil, fmt.Errorf("%w: %s/%s", ErrUnknownPolicy, in.Namespace, in.Policy)
	}
	sc.one[0] = p
	return sc.one[:], nil
}

// reset prepares sc for in, keeping its slices' storage.
func (sc *scratch) reset(in Input) {
	sc.req.Entries = sc.req.Entries[:0]
	sc.req.Action = in.Action
	sc.uses = sc.uses[:0]
	clear(sc.zeros)
	sc.zeros = sc.zeros[:0]
	sc.action, sc.holder, sc.noHolder, sc.refund = in.Action, in.Holder, nil, false
}

// gather records the policies that match each part of in, and their
// limits' entries in sc's request: of the named policy when there is
// one, else of the part's own policies or its candidates in the set.
func (sc *scratch) gather(out *Outcome, set *policy.Set, named []*policy.Policy, in Input) {
	parts := in.Parts
	if len(parts) == 0 {
		sc.parts[0] = Part{Request: in.Request, Cost: in.Cost, CostSet: in.Cost > 0}
		parts = sc.parts[:]
	}
	for i := range parts {
		part := &parts[i]
		sc.eval.Reset(part.Request)
		policies := named
		switch {
		case part.Policies != nil:
			policies = part.Policies
		case policies == nil:
			sc.candidates = set.AppendCandidates(sc.candidates[:0], in.Namespace, part.Request)
			policies = sc.candidates
		}
		for _, p := range policies {
			matched, werr := sc.eval.Match(p)
			if werr != nil {
				matched = true // an expression's error never bypasses a limit
			}
			if matched {
				sc.add(out, p, werr, i, part, len(parts) > 1)
			}
		}
	}
	sc.parts[0] = Part{}
	clear(sc.candidates[:cap(sc.candidates)]) // the pool keeps no old set alive
}

// add records the matching policy p for part i: its key's value and its
// limits' entries, or without a value the answer of its onMissingKey.
// shared says that another part may have rendered the same key already,
// whose entry is then charged this part's cost too.
func (sc *scratch) add(out *Outcome, p *policy.Policy, werr error, i int, part *Part, shared bool) {
	pr := PolicyResult{Policy: p, Part: i, WhenError: werr, givesBack: part.Refunded}
	value, ok := sc.eval.KeyValue(p)
	if !ok {
		pr.MissingKey = true
		out.Policies = append(out.Policies, pr)
		if p.OnMissingKey == ratelimitv1alpha1.OnMissingKeyDeny && !p.Shadow {
			out.Allowed, out.Reason, out.Decider = false, ReasonMissingKey, p
			out.RetryAfter = ratelimit.Never
		}
		return
	}
	pr.KeyValue = value
	cost := p.Cost
	if part.CostSet {
		cost = part.Cost
	}
	sc.addKeyed(out, pr, cost, part, shared)
}

// addKeyed records the matching policy of pr, whose key value is
// rendered, and its limits' entries at cost.
func (sc *scratch) addKeyed(out *Outcome, pr PolicyResult, cost int64, part *Part, shared bool) {
	p, value := pr.Policy, pr.KeyValue
	if sc.overrides != nil {
		if o := sc.overrides.Override(p, value); o.Applies(sc.now) {
			pr.Override = o
		}
	}
	out.Policies = append(out.Policies, pr)
	owner := len(out.Policies) - 1
	before := len(sc.req.Entries)
	limits := pr.Limits()
	sc.req.Entries = p.AppendEntriesOf(sc.req.Entries, limits, value, cost)
	kept := before
	inFlight := p.HoldsInFlight()
	for l, e := range sc.req.Entries[before:] {
		route := sc.holds(p, l, &e, part, inFlight)
		if route == notSent {
			continue
		}
		if route == untracked || limits[l].AdmitsNothing() { // no bucket: not for the store
			sc.zeros = append(sc.zeros, zeroUse{owner: owner, limit: l, key: e.Key, cost: e.Cost, untracked: route == untracked})
			continue
		}
		sc.req.Entries[kept] = e
		sc.uses = append(sc.uses, use{entry: kept, owner: owner, limit: l})
		kept++
	}
	clear(sc.req.Entries[kept:])
	sc.req.Entries = sc.req.Entries[:kept]
	if shared {
		sc.mergeSharedKeys(before)
	}
}

// mergeSharedKeys folds the entries from index from on into earlier
// entries with the same key (two descriptors of one request that name one
// bucket): the bucket is charged both costs in one entry, as two requests
// would be, and both uses read its result.
func (sc *scratch) mergeSharedKeys(from int) {
	entries := sc.req.Entries
	kept := from
	for j := from; j < len(entries); j++ {
		target := -1
		for i := 0; i < from; i++ {
			if entries[i].Key == entries[j].Key {
				target = i
				break
			}
		}
		if target < 0 {
			entries[kept] = entries[j]
			sc.retarget(j, kept)
			kept++
			continue
		}
		entries[target].Cost = min(entries[target].Cost+entries[j].Cost, ratelimit.MaxCount)
		sc.retarget(j, target)
	}
	clear(entries[kept:])
	sc.req.Entries = entries[:kept]
}

// retarget points the uses of entry from at entry to.
func (sc *scratch) retarget(from, to int) {
	for k := len(sc.uses) - 1; k >= 0 && sc.uses[k].entry >= from; k-- {
		if sc.uses[k].entry == from {
			sc.uses[k].entry = to
		}
	}
}

// decide makes the one store call, unless the breaker is open, and
// answers by the store's decision or by the failure mode.
func (c *Checker) decide(ctx context.Context, sc *scratch, out *Outcome) error {
	if err := c.breaker.allow(ctx, &sc.req, &sc.route); err != nil {
		c.failureAnswer(out, err)
		return nil
	}
	sent := c.now()
	err := c.store.Check(ctx, c.timeout, &sc.req, &sc.dec)
	if c.metrics != nil {
		c.metrics.storeLatency.Observe(c.now().Sub(sent).Seconds())
	}
	if givesBack(sc.req.Action) && !errors.Is(err, ratelimit.ErrInvalidRequest) {
		// Sent: applied, or (after an error) perhaps applied.
		sc.keys = sc.keys[:0]
		for i := range sc.req.Entries {
			sc.keys = append(sc.keys, sc.req.Entries[i].Key)
		}
		c.refunded(sc.keys)
		clear(sc.keys)
	}
	if err != nil {
		ferr := c.storeFailed(out, &sc.route, err)
		if sc.req.Action == ratelimit.Release && !sc.refund {
			out.Allowed = false // a release the store did not make freed nothing known
		}
		return ferr
	}
	sc.route.success()
	c.full.decided(&sc.route)
	if sc.req.Action == ratelimit.Release {
		c.applyRelease(sc, out)
		return nil
	}
	c.applyDecision(sc, out, sent)
	return nil
}

// storeFailed answers a check whose store call failed: by the failure
// mode, telling the breaker whether the store is away.
func (c *Checker) storeFailed(out *Outcome, r *route, err error) error {
	if errors.Is(err, ratelimit.ErrInvalidRequest) {
		r.release()
		return err // a programming error, not Redis being away
	}
	if errors.Is(err, ratelimit.ErrCapacity) {
		// The store answered, full (Redis out of memory): the failure
		// mode answers this check, but the store is not away, so the
		// breaker stays closed and counts no outage.
		r.success()
		c.full.began(err)
		c.failureAnswer(out, err)
		return nil
	}
	r.failure(err)
	if c.metrics != nil {
		c.metrics.storeErrors.Inc()
	}
	c.failureAnswer(out, err)
	return nil
}

var errBreakerOpen = errors.New("circuit breaker open: Redis failed repeatedly")

// reset empties o for reuse, keeping its slices' storage.
func (o *Outcome) reset() {
	clear(o.Policies)
	clear(o.Limits)
	*o = Outcome{Allowed: true, Reason: ReasonNoPolicy, Tightest: -1, Policies: o.Policies[:0], Limits: o.Limits[:0], moreParts: o.moreParts[:0]}
}

func (c *Checker) observeLatency(start time.Time) {
	if c.metrics != nil {
		c.metrics.checkLatency.Observe(c.now().Sub(start).Seconds())
	}
}

// answerFromCache denies the request without Redis when one of its
// enforced limits is known to deny it until later than now. Not a dry
// run: that is a diagnosis, which reports every limit from the store.
func (c *Checker) answerFromCache(sc *scratch, out *Outcome, now time.Time) bool {
	if c.denials == nil || out.dryRun {
		return false
	}
	for i := range sc.req.Entries {
		if e := &sc.req.Entries[i]; e.Cost > 0 && (e.ChargeAlways || e.Limit.Algorithm == ratelimit.Concurrency) {
			// A cost charged whatever the decision must reach the store;
			// so must a holder's duplicate, which its hold remembers
			// whatever the decision (so that its release frees nothing).
			return false
		}
	}
	for _, u := range sc.uses {
		e := &sc.req.Entries[u.entry]
		if e.Shadow {
			continue
		}
		d, ok := c.denials.lookup(e.Key, e.Cost, e.Limit, now)
		if !ok {
			continue
		}
		pr := &out.Policies[u.owner]
		p := pr.Policy
		l := &pr.Limits()[u.limit]
		r := ratelimit.Result{Allowed: false, Remaining: 0, Reset: max(d.reset.Sub(now), 0), RetryAfter: d.retry.Sub(now), Banned: d.banned}
		if d.banned {
			r.BanLeft = d.until.Sub(now)
		}
		out.Limits = append(out.Limits, LimitResult{Policy: p, Limit: l, Override: pr.Override, Part: pr.Part, Key: e.Key, Cached: true, Result: r})
		out.Allowed, out.Reason, out.Decider = false, ReasonLimited, p
		out.Tightest = len(out.Limits) - 1
		out.RetryAfter = r.RetryAfter
		pr.decided, pr.denied = true, true
		if !pr.givesBack { // a give-back part's read is no decision
			c.countDecision(p, pr.countedLimit(u.limit), ResultCachedDenied)
			if c.metrics != nil {
				c.metrics.cacheHits.Inc()
			}
		}
		return true
	}
	return false
}

// failureAnswer applies the failure modes: any enforced matching policy
// with failureMode Closed denies; otherwise the request is allowed. A
// full store (ratelimit.ErrCapacity) is answered the same way, and
// counted apart. Only a decision is counted (a give-back or a dry run
// answered so is none).
func (c *Checker) failureAnswer(out *Outcome, err error) {
	out.Degraded, out.StoreErr = true, err
	out.Reason = ReasonStoreUnavailable
	m := c.metrics
	if !out.decides {
		m = nil
	}
	if m != nil && errors.Is(err, ratelimit.ErrCapacity) {
		m.storeFull.Inc()
	}
	for _, pr := range out.Policies {
		if pr.Policy.FailClosed && !pr.Policy.Shadow && !pr.MissingKey {
			out.Allowed, out.Decider = false, pr.Policy
			out.RetryAfter = time.Second
			if m != nil {
				m.failureMode.WithLabelValues("closed").Inc()
			}
			return
		}
	}
	out.Allowed = true
	if m != nil {
		m.failureMode.WithLabelValues("open").Inc()
	}
}

// applyDecision copies the store's decision into out, picks the limit the
// headers report, and remembers denials.
func (c *Checker) applyDecision(sc *scratch, out *Outcome, sent time.Time) {
	out.Allowed = sc.dec.Allowed
	if !out.Allowed {
		out.Reason = ReasonLimited
	}
	for _, u := range sc.uses {
		e := &sc.req.Entries[u.entry]
		r := sc.dec.Results[u.entry]
		c.addLimit(out, u.owner, u.limit, e.Key, r, sc.req.Action)
		if pr := &out.Policies[u.owner]; r.Ban > 0 && pr.Ban == 0 {
			pr.Ban = r.Ban
			c.metrics.banIssued(pr.Policy, r.Ban, sc.req.Action == ratelimit.DryRun)
			if sc.req.Action == ratelimit.Consume {
				c.recordBan(pr, r.Ban, sent)
			}
		}
		if sc.req.Action == ratelimit.Consume {
			c.rememberDenial(e, &r, sent)
		}
	}
	if out.Allowed {
		out.RetryAfter = 0
	}
}

// rememberDenial caches the denial r of entry e, decided by a call sent
// at sent, until it stops standing (ratelimit.Result.DeniedFor). Only a
// check's: a dry run (explain, inspect, /v1/check's) is a read, and an
// operator's read changes nothing that enforcement sees.
func (c *Checker) rememberDenial(e *ratelimit.Entry, r *ratelimit.Result, sent time.Time) {
	banned := r.BanLeft > 0
	// A penalty box counts every denial, so only its bans are cached:
	// a limit's denials go to the store until the bucket is banned. A
	// concurrency limit's are not cached either: a release frees its
	// units before their retry time.
	if r.Allowed || e.Shadow || c.denials == nil || r.RetryAfter <= 0 || r.RetryAfter == ratelimit.Never ||
		!banned && (e.Penalty.Enabled() || e.Limit.Algorithm == ratelimit.Concurrency) {
		return
	}
	// The store decided at an instant after sent: counting from sent can
	// only end the cached denial early.
	c.denials.store(e.Key, deniedEntry{until: sent.Add(r.DeniedFor()), retry: sent.Add(r.RetryAfter), cost: e.Cost, limit: e.Limit,
		reset: sent.Add(r.Reset), banned: banned}, sent)
}

// countRefund counts a refund of limit l of policy p.
func (c *Checker) countRefund(p *policy.Policy, l *policy.Limit) {
	if c.metrics != nil {
		c.metrics.refunds.WithLabelValues(p.Namespace, p.Name, l.Name).Inc()
	}
}

// addLimit records limit of the matching policy owner, decided r by a
// call doing action, in out and in what counts it (a decision when it
// consumes, a refund when it gives units back; a dry run counts nothing,
// a release is counted by its outcome), and makes it the limit the answer
// reports when it is the tightest so far: on a denial the enforced limit
// that waits longest, otherwise the one with the fewest remaining.
func (c *Checker) addLimit(out *Outcome, owner, limit int, key string, r ratelimit.Result, action ratelimit.Action) {
	pr := &out.Policies[owner]
	p := pr.Policy
	l := &pr.Limits()[limit]
	out.Limits = append(out.Limits, LimitResult{Policy: p, Limit: l, Override: pr.Override, Part: pr.Part, Key: key, Result: r})
	pr.decided, pr.denied = true, pr.denied || !r.Allowed
	result := ResultAllowed
	switch {
	case !r.Allowed && p.Shadow:
		result = ResultShadowDenied
	case !r.Allowed:
		result = ResultDenied
	}
	switch {
	case action == ratelimit.Consume && !pr.givesBack:
		c.countDecision(p, pr.countedLimit(limit), result)
	case action == ratelimit.Refund:
		c.countRefund(p, l)
	}
	switch {
	case p.Shadow:
	case !r.Allowed:
		if r.RetryAfter >= out.RetryAfter {
			out.RetryAfter = r.RetryAfter
			out.Tightest, out.Decider = len(out.Limits)-1, p
		}
	case out.Allowed && (out.Tightest < 0 || r.Remaining < out.Limits[out.Tightest].Remaining):
		out.Tightest, out.Decider = len(out.Limits)-1, p
	}
}
