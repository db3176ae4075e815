package check

import (
	"sort"
	"sync"
	"sync/atomic"

	"github.com/sluice-dev/sluice/internal/policy"
)

// LimitCount is how one limit has decided since the process started.
type LimitCount struct {
	Namespace, Policy, Limit string
	Allowed, Denied          int64
	// ShadowDenied counts what a shadow policy would have denied.
	ShadowDenied int64
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
	namespace, policy, limit    string
	allowed, denied, shadowDeny atomic.Int64
}

func (c *counts) counter(ns, policy, limit string) *limitCounter {
	key := ns + "/" + policy + "/" + limit
	if v, ok := c.m.Load(key); ok {
		return v.(*limitCounter)
	}
	v, _ := c.m.LoadOrStore(key, &limitCounter{namespace: ns, policy: policy, limit: limit})
	return v.(*limitCounter)
}

func (c *counts) add(p *policy.Policy, l *policy.Limit, result ResultLabel) {
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
	default: // ResultDenied, ResultCachedDenied
		lc.denied.Add(1)
	}
}

// Counts returns the decision counts of every limit that has decided,
// ordered by namespace, policy and limit.
func (c *Checker) Counts() []LimitCount {
	var out []LimitCount
	c.counts.m.Range(func(_, v any) bool {
		lc := v.(*limitCounter)
		out = append(out, LimitCount{Namespace: lc.namespace, Policy: lc.policy, Limit: lc.limit,
			Allowed: lc.allowed.Load(), Denied: lc.denied.Load(), ShadowDenied: lc.shadowDeny.Load()})
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
