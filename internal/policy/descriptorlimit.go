package policy

import (
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

// DescriptorLimitPolicy is the name the limits Envoy's rate limit
// descriptors carry are counted and reported under (current_limit
// "@descriptor-limit/minute"). A policy's name is a DNS subdomain, which
// never holds '@', so these buckets' keys never meet a policy's.
const DescriptorLimitPolicy = "@descriptor-limit"

// domainDescriptorKey is the key of a descriptor's own limit: the domain,
// the placeholder separator, then every entry of the descriptor, as
// envoyproxy/ratelimit keys such a bucket (domain and entries). Both
// values escape the separator, so the rendering is injective.
var domainDescriptorKey = func() keyTemplate {
	t := keyTemplate{
		source: "{domain}{descriptor}",
		parts: []keyPart{
			{kind: partDomain},
			{kind: partLiteral, text: string(placeholderSeparator)},
			{kind: partDescriptor},
		},
		dynamic:        true,
		usesDescriptor: true,
	}
	t.escape['%'] = true
	t.escape[0] = true
	t.escape[placeholderSeparator] = true
	return t
}()

// DescriptorLimit compiles the limit an Envoy rate limit service
// descriptor carries (RateLimitDescriptor.limit: requestsPerUnit per unit)
// as envoyproxy/ratelimit applies it: a fixed window of the unit's length
// aligned to the clock (windows are whole multiples of it since the Unix
// epoch, as the peer's keys are), counted per domain, descriptor (every
// entry, in order) and unit. requestsPerUnit is not part of the bucket:
// requests that carry different numbers for one descriptor and unit share
// one count, as they share the peer's key. unit names the limit (a DNS
// label such as "minute") and window is its length.
//
// requestsPerUnit 0 is a limit that admits nothing (Limit.AdmitsNothing),
// as the peer denies every request of such a descriptor.
//
// The policy matches every descriptor: the caller decides which
// descriptors it answers, instead of the namespace's policies.
func DescriptorLimit(namespace, unit string, window time.Duration, requestsPerUnit int64) (*Policy, error) {
	w := &ratelimitv1alpha1.WindowLimit{
		// The engine counts from 1: a limit of 0 compiles as 1, then is
		// emptied below.
		Limit:     ratelimitv1alpha1.Count(max(requestsPerUnit, 1)),
		Window:    ratelimitv1alpha1.Duration(window.String()),
		Alignment: ratelimitv1alpha1.WindowAlignmentClock,
	}
	spec := ratelimitv1alpha1.RateLimitPolicySpec{Limits: []ratelimitv1alpha1.Limit{{Name: ratelimitv1alpha1.LimitName(unit), FixedWindow: w}}}
	p := newPolicy(namespace, DescriptorLimitPolicy, &spec)
	limits, summary, errs := compileLimits(spec.Limits, p.Cost, spec.Mode, field.NewPath("descriptor"))
	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	if requestsPerUnit == 0 {
		w.Limit = 0
		limits[0].Limit.Capacity = 0
		summary = unit + "=" + fixedWindowSummary(w)
	}
	for i := range limits {
		limits[i].Window = quotaWindow(limits[i].Limit)
	}
	p.Limits, p.Summary = limits, summary
	p.match = matcher{forDescriptors: true, anyDescriptor: true}
	p.key = domainDescriptorKey
	return p, nil
}
