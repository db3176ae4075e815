package check

import (
	"fmt"
	"time"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Gathering: the policies that match each part of a request, their keys
// rendered, and the store entries of their limits, in a scratch the next
// stage decides.

// scratch is one check's working memory, pooled: a check allocates
// almost nothing once its slices have grown.
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
	// priceErr is a settlement's usage a reserve policy could not price.
	priceErr error
	// sent is when the store call was sent (a ban it issued runs from
	// then); zero when none was.
	sent time.Time
	// in and observed are what the observer is told of the check (see
	// Checker.observe), kept here so that telling it allocates nothing.
	in       Input
	observed Observation
}

// use is one limit of one matching policy, checked through one entry.
type use struct {
	entry int // index into req.Entries
	owner int // index into Outcome.Policies
	limit int // index into the policy's Limits
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
	sc.action, sc.holder, sc.noHolder, sc.refund, sc.priceErr = in.Action, in.Holder, nil, false, nil
	sc.sent = time.Time{}
}

// gather records the policies that match each part of in, and their
// limits' entries in sc's request: of the named policy when there is
// one, else of the part's own policies or its candidates in the set.
func (sc *scratch) gather(out *Outcome, set *policy.Set, named []*policy.Policy, in Input) {
	parts := in.Parts
	if len(parts) == 0 {
		sc.parts[0] = Part{Request: in.Request, Cost: in.Cost, CostSet: in.Cost > 0, Usage: in.Usage}
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
	if p.Reserve != nil {
		cost = sc.reserveCost(&pr, cost, part)
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
	for j := before; j < len(sc.req.Entries); j++ {
		switch {
		case part.Admitted:
			sc.req.Entries[j].ChargeAlways = true
		case part.Refunded: // a read for the answer, no decision: it counts toward no ban
			sc.req.Entries[j].Penalty = ratelimit.Penalty{}
		}
	}
	kept := before
	inFlight := p.HoldsInFlight()
	for l, e := range sc.req.Entries[before:] {
		if !part.Limits.selects(&limits[l]) {
			continue
		}
		route := sc.holds(p, owner, l, &e, part, inFlight)
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
