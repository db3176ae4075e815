package check

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Deciding: the one store call for the gathered entries (unless the
// breaker is open or the cache of denials answers), the failure mode when
// the store cannot answer, and the store's decision copied into the
// Outcome with the limit the answer reports. What the decision is told to
// (metrics, counts, logs) is the observer's: see observe.go.

// decide makes the one store call, unless the breaker is open, and
// answers by the store's decision or by the failure mode.
func (c *Checker) decide(ctx context.Context, sc *scratch, out *Outcome) error {
	if err := c.breaker.allow(ctx, &sc.req, &sc.route); err != nil {
		failureAnswer(out, err)
		return nil
	}
	sc.sent = c.now()
	err := c.store.Check(ctx, c.timeout, &sc.req, &sc.dec)
	if c.metrics != nil {
		c.metrics.storeLatency.Observe(c.now().Sub(sc.sent).Seconds())
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
		if sc.req.Action == ratelimit.Release && !sc.refund || sc.req.Action == ratelimit.Settle {
			out.Allowed = false // a release the store did not make freed nothing known
		}
		return ferr
	}
	sc.route.success()
	c.full.decided(&sc.route)
	switch sc.req.Action {
	case ratelimit.Release:
		applyRelease(sc, out)
		return nil
	case ratelimit.Settle:
		applySettle(sc, out)
		return nil
	}
	c.applyDecision(sc, out)
	if sc.req.Action == ratelimit.Consume {
		noteReservations(sc, out)
	}
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
		failureAnswer(out, err)
		return nil
	}
	r.failure(err)
	if c.metrics != nil {
		c.metrics.storeErrors.Inc()
	}
	failureAnswer(out, err)
	return nil
}

var errBreakerOpen = errors.New("circuit breaker open: Redis failed repeatedly")

// answerFromCache denies the request without Redis when one of its
// enforced limits is known to deny it until later than now. Not a dry
// run: that is a diagnosis, which reports every limit from the store.
func (c *Checker) answerFromCache(sc *scratch, out *Outcome, now time.Time) bool {
	if c.denials == nil || out.dryRun {
		return false
	}
	for i := range sc.req.Entries {
		if e := &sc.req.Entries[i]; e.Cost > 0 && (e.ChargeAlways || e.Reserve > 0 || e.Limit.Algorithm == ratelimit.Concurrency) {
			// A cost charged whatever the decision must reach the store;
			// so must a holder's duplicate, which its hold or reservation
			// remembers whatever the decision (so that its release or
			// settlement changes nothing).
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
		r := ratelimit.Result{Allowed: false, Remaining: 0, Reset: max(d.reset.Sub(now), 0), RetryAfter: d.retry.Sub(now), Banned: d.banned}
		if d.banned {
			r.BanLeft = d.until.Sub(now)
		}
		lr := newLimitResult(out, u.owner, u.limit, e.Key, r)
		lr.Cached = true
		out.Limits = append(out.Limits, lr)
		out.Allowed, out.Reason, out.Decider = false, ReasonLimited, lr.Policy
		out.Tightest = len(out.Limits) - 1
		out.RetryAfter = r.RetryAfter
		pr := &out.Policies[u.owner]
		pr.decided, pr.denied = true, true
		return true
	}
	return false
}

// failureAnswer applies the failure modes: any enforced matching policy
// with failureMode Closed denies; otherwise the request is allowed. A
// full store (ratelimit.ErrCapacity) is answered the same way.
func failureAnswer(out *Outcome, err error) {
	out.Degraded, out.StoreErr = true, err
	out.Reason = ReasonStoreUnavailable
	for _, pr := range out.Policies {
		if pr.Policy.FailClosed && !pr.Policy.Shadow && !pr.MissingKey {
			out.Allowed, out.Decider = false, pr.Policy
			out.RetryAfter = time.Second
			return
		}
	}
	out.Allowed = true
}

// applyDecision copies the store's decision into out, picks the limit the
// headers report, and remembers denials.
func (c *Checker) applyDecision(sc *scratch, out *Outcome) {
	out.Allowed = sc.dec.Allowed
	if !out.Allowed {
		out.Reason = ReasonLimited
	}
	for _, u := range sc.uses {
		e := &sc.req.Entries[u.entry]
		r := sc.dec.Results[u.entry]
		addLimit(out, u.owner, u.limit, e.Key, r)
		if pr := &out.Policies[u.owner]; r.Ban > 0 && pr.Ban == 0 {
			pr.Ban = r.Ban
		}
		if sc.req.Action == ratelimit.Consume {
			c.rememberDenial(e, &r, sc.sent)
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

// newLimitResult is the figures r of limit of the matching policy owner,
// read through the entry of key.
func newLimitResult(out *Outcome, owner, limit int, key string, r ratelimit.Result) LimitResult {
	pr := &out.Policies[owner]
	return LimitResult{Policy: pr.Policy, Limit: &pr.Limits()[limit], Override: pr.Override, Part: pr.Part, Key: key, Result: r,
		owner: owner, index: limit}
}

// addLimit records limit of the matching policy owner, decided r, in out,
// and makes it the limit the answer reports when it is the tightest so
// far: on a denial the enforced limit that waits longest, otherwise a
// soft limit over (the one that waits longest), else the one with the
// fewest remaining. A shadow limit never reports.
func addLimit(out *Outcome, owner, limit int, key string, r ratelimit.Result) {
	out.Limits = append(out.Limits, newLimitResult(out, owner, limit, key, r))
	pr := &out.Policies[owner]
	p, l := pr.Policy, &pr.Limits()[limit]
	pr.decided, pr.denied = true, pr.denied || !r.Allowed
	switch {
	case l.Shadow():
	case !r.Allowed && l.Enforced():
		if r.RetryAfter >= out.RetryAfter {
			out.RetryAfter = r.RetryAfter
			out.Tightest, out.Decider = len(out.Limits)-1, p
		}
	case out.Allowed && (out.Tightest < 0 || allowedBefore(&r, &out.Limits[out.Tightest].Result)):
		out.Tightest, out.Decider = len(out.Limits)-1, p
	}
}

// allowedBefore reports whether, on a request allowed, a limit decided r
// reports rather than the one that decided best: one over (a soft
// limit's) before one under, the one that waits longer among those over,
// else the one with fewer remaining.
func allowedBefore(r, best *ratelimit.Result) bool {
	if r.Allowed != best.Allowed {
		return !r.Allowed
	}
	if !r.Allowed {
		return r.RetryAfter > best.RetryAfter
	}
	return r.Remaining < best.Remaining
}
