package policy

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// defaultLeaseTimeout is concurrency.leaseTimeout's default, as the
// schema has it (files in local mode are not defaulted).
const defaultLeaseTimeout = "1m"

func compileConcurrency(l *ratelimitv1alpha1.Limit, p *field.Path, n *numbers) (ratelimit.Limit, string, bool) {
	c := l.Concurrency
	if c == nil {
		return ratelimit.Limit{}, "", false
	}
	lim := ratelimit.Limit{Algorithm: ratelimit.Concurrency,
		Capacity: n.count(p.Child("limit"), c.Limit),
		Interval: n.duration(p.Child("leaseTimeout"), c.LeaseTimeout, defaultLeaseTimeout)}
	return lim, fmt.Sprintf("%s(%d,lease %s)", ratelimitv1alpha1.AlgorithmConcurrency, c.Limit, lim.Interval), true
}

// checkConcurrency repeats the schema's rules on concurrency limits, for
// policies that did not pass through an API server (local mode's files):
// units in flight are held by the request admitted, so no lease and no
// charge Always; a descriptor policy names each limit's holder, an entry
// of match.descriptor that its key leaves out (a key of the holder would
// make a bucket per request); an HTTP policy names none (the transport
// holds per request).
func checkConcurrency(spec *ratelimitv1alpha1.RateLimitPolicySpec, limits []Limit, key keyTemplate, forDescriptors bool, specPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	first := true // the lease and charge are the policy's: named once
	for i := range limits {
		l := &limits[i]
		if l.Limit.Algorithm != ratelimit.Concurrency {
			continue
		}
		if first {
			errs = append(errs, checkInFlightPolicy(spec, specPath, specPath.Child("limits").Index(i), l.Name)...)
			first = false
		}
		path := specPath.Child("limits").Index(i).Child(ratelimitv1alpha1.AlgorithmConcurrency, "holder")
		switch {
		case !forDescriptors && l.Holder != "":
			errs = append(errs, field.Invalid(path, l.Holder, "an HTTP policy sets no holder: the middleware and POST /v1/check hold per request"))
		case forDescriptors && l.Holder == "":
			errs = append(errs, field.Required(path, "a concurrency limit of a descriptor policy names its holder: the entry of match.descriptor that tells requests apart, such as Envoy's x-request-id"))
		case forDescriptors && !listsEntry(spec.Match.Descriptor, l.Holder):
			errs = append(errs, field.Invalid(path, l.Holder, "must be one of match.descriptor's keys: a request without it has no holder to release"))
		case forDescriptors && key.reads(l.Holder):
			errs = append(errs, field.Invalid(path, l.Holder,
				fmt.Sprintf("must be an entry that the key %q leaves out (no {descriptor}, no {descriptor:%s}): a key of the holder makes a bucket per request, which a concurrency limit never fills", key.source, l.Holder)))
		}
	}
	return errs
}

// checkInFlightPolicy refuses what a policy with a concurrency limit (at
// limitPath, named name) cannot have, each at its own field, once: units
// in flight are held by the request that was admitted, so no lease (which
// would hand them to a process, not a request) and no charge Always or
// Reserve (a request never admitted holds nothing to release). The other rules on the
// lease and on debt (lease.units within each capacity, a debt the engine
// counts exactly) leave concurrency limits to this one.
func checkInFlightPolicy(spec *ratelimitv1alpha1.RateLimitPolicySpec, specPath, limitPath *field.Path, name string) field.ErrorList {
	var errs field.ErrorList
	if spec.Lease != nil {
		errs = append(errs, field.Forbidden(specPath.Child("lease"),
			fmt.Sprintf("a concurrency limit takes no lease (%s, %s): units in flight are held by the request that was admitted, until it releases them", limitPath, name)))
	}
	if spec.Charge != "" && spec.Charge != ratelimitv1alpha1.ChargeAdmitted {
		errs = append(errs, field.Invalid(specPath.Child("charge"), spec.Charge,
			fmt.Sprintf("must be Admitted with a concurrency limit (%s, %s): units in flight are held by the request that was admitted, until it releases them; a request never admitted holds none", limitPath, name)))
	}
	return errs
}

func listsEntry(entries []ratelimitv1alpha1.DescriptorEntryMatch, key string) bool {
	for _, e := range entries {
		if e.Key == key {
			return true
		}
	}
	return false
}

// reads reports whether the key's value includes the descriptor entry
// named name.
func (t *keyTemplate) reads(name string) bool {
	for _, p := range t.parts {
		if p.kind == partDescriptor || p.kind == partDescriptorEntry && p.text == name {
			return true
		}
	}
	return false
}

// HoldsInFlight reports whether p has a concurrency limit, whose units a
// request holds until it is released: only transports that release (the
// rate limit service's stream-done, the middleware, POST /v1/check with
// its handle) may check it.
func (p *Policy) HoldsInFlight() bool {
	for i := range p.Limits {
		if p.Limits[i].Limit.Algorithm == ratelimit.Concurrency {
			return true
		}
	}
	return false
}
