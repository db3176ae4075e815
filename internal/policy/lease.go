package policy

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// defaultLeaseTTL and maxLeaseTTL are spec.lease.ttl's default and bound,
// as the schema has them (files in local mode are not defaulted).
const (
	defaultLeaseTTL = "1s"
	maxLeaseTTL     = time.Minute
)

// compileLease reads spec.lease and checks what the schema's rules check,
// for policies that did not pass an API server (local mode's files).
func compileLease(spec *ratelimitv1alpha1.RateLimitPolicySpec, limits []Limit, cost int64, path *field.Path) (ratelimit.Lease, field.ErrorList) {
	if spec.Lease == nil {
		return ratelimit.Lease{}, nil
	}
	var n numbers
	units := n.count(path.Child("units"), spec.Lease.Units)
	ttl := n.duration(path.Child("ttl"), spec.Lease.TTL, defaultLeaseTTL)
	errs := n.errs
	if ttl > maxLeaseTTL {
		errs = append(errs, field.Invalid(path.Child("ttl"), spec.Lease.TTL, "a lease's ttl must be at most 1m"))
	}
	if units < cost {
		errs = append(errs, field.Invalid(path.Child("units"), units, "lease.units must be at least cost: a lease serves whole requests"))
	}
	for i := range limits {
		if limits[i].Limit.Algorithm == ratelimit.Concurrency {
			continue // takes no lease at all: checkInFlightPolicy
		}
		if c := limits[i].Limit.Capacity; units > c {
			errs = append(errs, field.Invalid(path.Child("units"), units,
				fmt.Sprintf("lease.units must not exceed any limit's capacity: limit %s holds %d", limits[i].Name, c)))
			break
		}
	}
	if spec.Charge != "" && spec.Charge != ratelimitv1alpha1.ChargeAdmitted {
		errs = append(errs, field.Invalid(path, "", "a lease cannot serve charge Always or Reserve: a cost charged whatever the decision goes into debt, and a reservation is held by its request; only Redis can count them"))
	}
	if spec.Mode == ratelimitv1alpha1.ModeShadow {
		errs = append(errs, field.Invalid(path, "", "a lease cannot serve mode Shadow: a shadow policy reports what Redis decides exactly; remove the lease or enforce the policy"))
	}
	return ratelimit.Lease{Units: units, TTL: ttl}, errs
}
