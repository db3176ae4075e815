package check

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Tally is the Observer that counts what checks decided: each limit's
// decisions for the dashboard (Counts) and, with metrics, in
// sluice_decisions_total; and in the metrics the cache's hits, the
// answers of a failure mode, the bans issued, and the give-backs, which
// are no decisions (sluice_refunds_total, sluice_releases_total).
type Tally struct {
	checksOnly
	counts  counts
	metrics *Metrics
	// set is the policy set of the last check counted: when it changes,
	// the counters' shortcuts by limit are dropped with its limits.
	set atomic.Pointer[policy.Set]
}

// NewTally returns a Tally counting in m too, when m is not nil.
func NewTally(m *Metrics) *Tally { return &Tally{metrics: m} }

// Checked implements Observer: it counts the limits out decided, a
// check's error notwithstanding (a limit of 0 decides before the store
// is asked), and what its policies' releases did.
func (t *Tally) Checked(_ context.Context, ob *Observation) {
	if old := t.set.Load(); old != ob.set && t.set.CompareAndSwap(old, ob.set) {
		t.counts.forgetLimits() // the old set's limits are gone
	}
	out, m := ob.Outcome, t.metrics
	for i := range out.Limits {
		lr := &out.Limits[i]
		switch {
		case ob.Input.Action == ratelimit.Consume:
			if !out.Policies[lr.owner].givesBack { // a give-back part's read is no decision
				t.decided(lr)
			}
		case m != nil && ob.Input.Action != ratelimit.Settle && lr.Limit.Limit.Algorithm != ratelimit.Concurrency: // a refund's (a concurrency limit's is its policy's release)
			m.refunds.WithLabelValues(lr.Policy.Namespace, lr.Policy.Name, lr.Limit.Name).Inc()
		}
	}
	if m == nil {
		return
	}
	for i := range out.Policies {
		pr := &out.Policies[i]
		if pr.release != "" {
			m.releases.WithLabelValues(pr.Policy.Namespace, pr.Policy.Name, string(pr.release)).Inc()
		}
		m.countReservation(pr)
		if pr.Ban > 0 {
			m.banIssued(pr.Policy, pr.Ban)
		}
	}
	if out.Degraded && out.decides {
		m.failureAnswered(out)
	}
}

// decided counts the decision of lr, for the dashboard and in
// sluice_decisions_total.
func (t *Tally) decided(lr *LimitResult) {
	result := ResultAllowed
	switch {
	case lr.Cached:
		result = ResultCachedDenied
	case !lr.Allowed && lr.Limit.Shadow():
		result = ResultShadowDenied
	case !lr.Allowed && lr.Limit.Soft():
		result = ResultSoftOver
	case !lr.Allowed:
		result = ResultDenied
	}
	lc := t.counts.add(lr.Policy, lr.countedLimit(), result)
	if t.metrics != nil {
		lc.decided(t.metrics, result)
		if lr.Cached {
			t.metrics.cacheHits.Inc()
		}
	}
}

// failureAnswered counts a decision answered by a failure mode: closed
// when it denied, and apart when the store was full.
func (m *Metrics) failureAnswered(out *Outcome) {
	if errors.Is(out.StoreErr, ratelimit.ErrCapacity) {
		m.storeFull.Inc()
	}
	mode := "open"
	if !out.Allowed {
		mode = "closed"
	}
	m.failureMode.WithLabelValues(mode).Inc()
}

// LimitCount is how one limit has decided since the process started.
type LimitCount struct {
	Namespace, Policy, Limit string
	Allowed, Denied          int64
	// ShadowDenied counts what a shadow limit would have denied.
	ShadowDenied int64
	// SoftOver counts the requests a soft limit let through over it.
	SoftOver int64
}

// counts keeps live decision counts per limit for the dashboard; the
// Prometheus counters carry the same numbers for monitoring.
type counts struct {
	m     sync.Map // "ns/policy/limit" -> *limitCounter
	byPtr sync.Map // *policy.Limit -> *limitCounter: no key to build per request
	// ptrs is about how many entries byPtr holds: limits compiled per
	// request (a descriptor's own limit, when its number is not cached)
	// would grow it until the policies change. byPtr is only a shortcut
	// to m, so emptying it past maxCountPointers loses nothing.
	ptrs atomic.Int64
}

const maxCountPointers = 1 << 14

// forgetLimits empties byPtr: its limits are gone.
func (c *counts) forgetLimits() {
	c.byPtr.Clear()
	c.ptrs.Store(0)
}

type limitCounter struct {
	namespace, policy, limit              string
	allowed, denied, shadowDeny, softOver atomic.Int64
	// decisions are the limit's sluice_decisions_total counters by
	// result, in resultLabels' order, each looked up by its labels once:
	// a lookup per decision costs more than the count.
	decisions [len(resultLabels)]atomic.Pointer[prometheus.Counter]
}

// resultLabels are the results a decision is counted under.
var resultLabels = [...]ResultLabel{ResultAllowed, ResultDenied, ResultShadowDenied, ResultCachedDenied, ResultSoftOver}

// decided counts one decision in m's sluice_decisions_total.
func (lc *limitCounter) decided(m *Metrics, result ResultLabel) {
	i := slices.Index(resultLabels[:], result)
	if i < 0 {
		m.decisions.WithLabelValues(lc.namespace, lc.policy, lc.limit, string(result)).Inc()
		return
	}
	slot := &lc.decisions[i]
	c := slot.Load()
	if c == nil {
		counter := m.decisions.WithLabelValues(lc.namespace, lc.policy, lc.limit, string(result))
		c = &counter
		slot.Store(c)
	}
	(*c).Inc()
}

func (c *counts) counter(ns, policy, limit string) *limitCounter {
	key := ns + "/" + policy + "/" + limit
	if v, ok := c.m.Load(key); ok {
		return v.(*limitCounter)
	}
	v, _ := c.m.LoadOrStore(key, &limitCounter{namespace: ns, policy: policy, limit: limit})
	return v.(*limitCounter)
}

// add counts a decision of p's limit l, and returns the limit's counter.
func (c *counts) add(p *policy.Policy, l *policy.Limit, result ResultLabel) *limitCounter {
	var lc *limitCounter
	if v, ok := c.byPtr.Load(l); ok {
		lc = v.(*limitCounter)
	} else {
		// A compiled limit is new (a policy changed): find its counter by
		// name, so counts survive policy edits.
		lc = c.counter(p.Namespace, p.Name, l.Name)
		if c.ptrs.Add(1) > maxCountPointers {
			c.forgetLimits()
		}
		c.byPtr.Store(l, lc)
	}
	switch result {
	case ResultAllowed:
		lc.allowed.Add(1)
	case ResultShadowDenied:
		lc.shadowDeny.Add(1)
	case ResultSoftOver:
		lc.softOver.Add(1)
	default: // ResultDenied, ResultCachedDenied
		lc.denied.Add(1)
	}
	return lc
}

// Counts returns the decision counts of every limit that has decided,
// ordered by namespace, policy and limit.
func (t *Tally) Counts() []LimitCount {
	var out []LimitCount
	t.counts.m.Range(func(_, v any) bool {
		lc := v.(*limitCounter)
		out = append(out, LimitCount{Namespace: lc.namespace, Policy: lc.policy, Limit: lc.limit,
			Allowed: lc.allowed.Load(), Denied: lc.denied.Load(), ShadowDenied: lc.shadowDeny.Load(),
			SoftOver: lc.softOver.Load()})
		return true
	})
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Policy != b.Policy {
			return a.Policy < b.Policy
		}
		return a.Limit < b.Limit
	})
	return out
}
