package policy

import (
	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Eval holds the per-request state of evaluating one request against
// several policies: the CEL variables (built lazily, once) and a key
// buffer. Reset it for each request; pool it to avoid allocations.
type Eval struct {
	r    *Request
	vars requestVars
	buf  []byte
	// bucket is a bucket id's request with its entries in a policy's
	// order (KeyValue), in ordered's storage.
	bucket  Request
	ordered []DescriptorEntry
}

// Reset prepares e for request r.
func (e *Eval) Reset(r *Request) {
	e.r = r
	e.vars.reset(r)
	e.buf = e.buf[:0]
}

// Match reports whether p applies to the request. An error comes from the
// policy's `when` expression (a missing map key, its deadline, a request
// larger than its cost was estimated for); callers treat the policy as
// matching so that an expression error never lets a request skip a limit.
func (e *Eval) Match(p *Policy) (bool, error) {
	return p.match.matches(e.r, &e.vars)
}

// KeyValue renders p's key for the request. ok is false when a
// placeholder has no value; p.OnMissingKey then decides. With
// OnMissingKey Shared the value of the shared bucket is returned instead.
func (e *Eval) KeyValue(p *Policy) (value string, ok bool) {
	e.buf = e.buf[:0]
	r := e.r
	if r.Unordered && !p.match.anyDescriptor {
		// A bucket id keys as the descriptor listing its entries in the
		// policy's order, so RLS and RLQS share the policy's buckets.
		e.ordered = p.match.inOrder(e.ordered[:0], r)
		e.bucket = *r
		e.bucket.Descriptor = e.ordered
		r = &e.bucket
	}
	var found bool
	e.buf, found = p.key.render(e.buf, r)
	if found {
		return string(e.buf), true
	}
	if p.OnMissingKey == ratelimitv1alpha1.OnMissingKeyShared {
		return sharedKeyValue, true
	}
	return "", false
}

// AppendEntries appends one engine entry per limit of p for the key value.
func (p *Policy) AppendEntries(entries []ratelimit.Entry, keyValue string, cost int64) []ratelimit.Entry {
	return p.AppendEntriesOf(entries, p.Limits, keyValue, cost)
}

// AppendEntriesOf is AppendEntries with limits in place of p's own: those
// of an override of the key value (Override.Limits), which keep p's
// names and order.
func (p *Policy) AppendEntriesOf(entries []ratelimit.Entry, limits []Limit, keyValue string, cost int64) []ratelimit.Entry {
	for i := range limits {
		l := &limits[i]
		e := ratelimit.Entry{
			Key:    ratelimit.Key(p.Namespace, p.Name, keyValue, l.Name),
			Limit:  l.Limit,
			Cost:   cost,
			Shadow: !l.Enforced(),

			ChargeAlways: p.ChargeAlways,
			Lease:        p.Lease,
			// The box follows spec.mode (Penalty.Shadow): an enforcing
			// one counts the enforced limits' denials only.
			Penalty: p.Penalty,
		}
		entries = append(entries, e)
	}
	return entries
}
