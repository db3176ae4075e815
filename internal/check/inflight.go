package check

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Concurrency limits hold units from a request's admission until it is
// released. A release names the request again (its holder), so it frees
// only what that request holds: Envoy sends the stream-done descriptors of
// denied requests too, and an anonymous give-back would free units their
// senders never held.

// ErrNoRelease is returned for a check that meets a concurrency limit
// without a holder: the transport (the HTTP auth hooks, ext_authz) has no
// completion callback to release it, so its units would be held until
// the lease timeout, and the limit would count requests per lease timeout
// rather than in flight. It is refused rather than silently meaning that.
var ErrNoRelease = errors.New("a concurrency limit needs a release this transport cannot send")

// ReleaseOutcome labels sluice_releases_total: what a release of one
// policy's concurrency limits did.
type ReleaseOutcome string

const (
	// ReleaseFreed: the holder held units, now freed.
	ReleaseFreed ReleaseOutcome = "freed"
	// ReleaseNothingHeld: the holder held nothing (its request was denied,
	// released already, its lease timed out, or it never was admitted; a
	// holder Sluice cannot track holds nothing), or the release is a denied
	// duplicate's.
	ReleaseNothingHeld ReleaseOutcome = "nothing_held"
	// ReleaseRefused: a check met the policy's concurrency limit where no
	// release can follow (ErrNoRelease).
	ReleaseRefused ReleaseOutcome = "refused_no_release"
)

// givesBack reports whether action returns units instead of taking them.
func givesBack(a ratelimit.Action) bool {
	return a == ratelimit.Refund || a == ratelimit.Release || a == ratelimit.Settle
}

// entryRoute is where holds sends an entry.
type entryRoute int8

const (
	// toStore: the entry goes to the store.
	toStore entryRoute = iota
	// notSent: the entry is not the action's (a release names only
	// concurrency limits), or it is refused (sc.noHolder).
	notSent
	// untracked: a concurrency limit whose holder, named by the
	// descriptor, Sluice cannot track (empty, or over
	// ratelimit.MaxHolderLen): it admits no cost but 0 and frees nothing,
	// decided without the store as a limit of 0 (decideZeros).
	untracked
)

// holds says where entry e, of limit l of the matching policy p (owner
// in the Outcome's Policies; inFlight: p has a concurrency limit), goes, and gives a concurrency
// entry its holder. A release names only concurrency limits; a refund
// (Envoy's negative hits) of a policy with one releases it, its other
// limits keeping what the request was charged. A concurrency limit
// without a holder is recorded in sc.noHolder when the transport names
// none (it cannot release), and is untracked when the descriptor's
// holder is one Sluice cannot track: that request is decided, never an
// error (an error answer lets it through by the proxy's default).
func (sc *scratch) holds(p *policy.Policy, owner, l int, e *ratelimit.Entry, part *Part, inFlight bool) entryRoute {
	if p.Reserve != nil {
		return sc.reserves(p, owner, l, e, part)
	}
	lim := &p.Limits[l]
	conc := lim.Limit.Algorithm == ratelimit.Concurrency
	switch {
	case sc.action == ratelimit.Settle: // settles reservations only
		return notSent
	case sc.action == ratelimit.Release && !conc:
		return notSent
	case sc.action == ratelimit.Refund && inFlight && !conc:
		return notSent
	case !conc:
		return toStore
	}
	e.Holder = sc.holder
	named := lim.Holder != "" && part.Request != nil // none: the bucket is named (Inspect)
	if named {
		e.Holder, _ = part.Request.Lookup(lim.Holder)
	}
	if e.Holder == "" || len(e.Holder) > ratelimit.MaxHolderLen {
		if named {
			return untracked
		}
		if sc.noHolder == nil {
			sc.noHolder = &LimitResult{Policy: p, Limit: lim, owner: owner, index: l}
		}
		return notSent
	}
	if sc.action == ratelimit.Refund {
		sc.req.Action = ratelimit.Release // a refund that releases: see Input.Action
		sc.refund = true
	}
	return toStore
}

// noteDuplicates tells the store of a consuming check denied before it (a
// missing key, a limit of 0, an untrackable holder) the admissions its
// concurrency limits met, so that the hold of a holder that holds
// remembers the duplicate, as a denial by the store would: its release,
// which names the same holder, is to come and must free nothing. The
// store takes nothing (see duplicatesOnly) and the answer stays the one
// decided. With the breaker open, or the store failing, nothing is
// remembered (the README's caveat).
func (c *Checker) noteDuplicates(ctx context.Context, sc *scratch) {
	if sc.req.Action != ratelimit.Consume || !sc.duplicatesOnly() {
		return
	}
	if c.breaker.allow(ctx, &sc.req, &sc.route) != nil {
		return
	}
	err := c.store.Check(ctx, c.timeout, &sc.req, &sc.dec)
	switch {
	case err == nil, errors.Is(err, ratelimit.ErrCapacity): // answered
		sc.route.success()
	case errors.Is(err, ratelimit.ErrInvalidRequest):
		sc.route.release()
	default:
		sc.route.failure(err)
	}
}

// duplicatesOnly rewrites sc's request, decided already, into the one
// that remembers its duplicates and takes nothing: its concurrency
// entries that cost something, each at a cost above its limit's
// capacity, which the store denies whatever the limit holds while the
// hold of a holder that holds counts the duplicate all the same (see
// ratelimit.Entry.Cost and Holder); without their penalty box, which
// counts no such denial, and out of shadow mode. A limit of
// ratelimit.MaxCount has no such cost and is left out: no client holds a
// billion requests in flight. It reports whether an entry is left.
func (sc *scratch) duplicatesOnly() bool {
	kept := 0
	for _, e := range sc.req.Entries {
		if e.Limit.Algorithm != ratelimit.Concurrency && e.Reserve == 0 || e.Cost == 0 || e.Limit.Capacity >= ratelimit.MaxCount {
			continue
		}
		e.Cost, e.Penalty, e.Shadow = e.Limit.Capacity+1, ratelimit.Penalty{}, false
		sc.req.Entries[kept] = e
		kept++
	}
	clear(sc.req.Entries[kept:])
	sc.req.Entries = sc.req.Entries[:kept]
	return kept > 0
}

// untrackedReleases records the release of each policy whose holder
// could not be tracked (untracked): nothing held, nothing freed, unless a
// limit of the policy went to the store (applyRelease records it).
func untrackedReleases(sc *scratch, out *Outcome) {
	for _, z := range sc.zeros {
		if z.untracked && !slices.ContainsFunc(sc.uses, func(u use) bool { return u.owner == z.owner }) {
			out.Policies[z.owner].release = ReleaseNothingHeld
		}
	}
}

// refuseNoRelease records the refusal of a concurrency limit met without
// a holder, r, and returns its error.
func refuseNoRelease(out *Outcome, r *LimitResult) error {
	if r.Policy.Reserves() {
		out.Policies[r.owner].reservation.outcome = ReservationRefused
		return noSettlement(fmt.Sprintf("charge Reserve needs a settlement this transport cannot send: policy %s has charge Reserve: check it through Envoy's rate limit service (a descriptor holder), the middleware or POST /v1/check, which settle when the request ends",
			r.Policy))
	}
	out.Policies[r.owner].release = ReleaseRefused
	return fmt.Errorf("%w: policy %s, limit %s: check it through Envoy's rate limit service (a descriptor holder), the middleware or POST /v1/check, which release when the request ends; or give it a rate limit instead",
		ErrNoRelease, r.Policy, r.Limit.Name)
}

// applyRelease copies a release's figures into out and records, per
// policy, whether it freed something (each limit of another algorithm is
// a refund's, which the release made: see holds). A release is allowed
// when it freed something; a refund that released is allowed, as every
// refund.
func applyRelease(sc *scratch, out *Outcome) {
	out.Allowed = sc.dec.Allowed || sc.refund
	out.Reason = ReasonAllowed
	for _, u := range sc.uses {
		e := &sc.req.Entries[u.entry]
		r := sc.dec.Results[u.entry]
		out.Limits = append(out.Limits, newLimitResult(out, u.owner, u.limit, e.Key, r))
		if e.Limit.Algorithm != ratelimit.Concurrency {
			continue
		}
		// One outcome per policy: freed when any of its limits freed.
		if pr := &out.Policies[u.owner]; r.Allowed {
			pr.release = ReleaseFreed
		} else if pr.release == "" {
			pr.release = ReleaseNothingHeld
		}
	}
}

// Holds reports whether the request o allowed now holds units in flight:
// a policy it matched (with a key) has a concurrency limit, so a release
// must follow when the request ends.
func (o *Outcome) Holds() bool {
	if !o.Allowed || o.dryRun {
		return false
	}
	for i := range o.Policies {
		if pr := &o.Policies[i]; !pr.MissingKey && pr.Policy.Holds() {
			return true
		}
	}
	return false
}
