package policy

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Reserve is a policy's charge Reserve (spec.reserve), compiled: a
// request's estimate is taken at admission and held under its holder
// until its actual cost settles it (token budgets).
type Reserve struct {
	// Holder is a descriptor policy's entry whose value names the request
	// that holds the reservation; "" for an HTTP policy (the transport
	// names the holder).
	Holder string
	// TTL is how long a reservation waits for its settlement.
	TTL time.Duration
	// Max is the most one request reserves; 0: no cap but the limits'.
	Max     int64
	pricing pricing
}

// defaultReserveTTL is reserve.ttl's default, as the schema has it.
const defaultReserveTTL = "5m"

// Estimate is what a request with estimate est reserves: est clamped to
// Max, and whether it was clamped.
func (r *Reserve) Estimate(est int64) (int64, bool) {
	if r.Max > 0 && est > r.Max {
		return r.Max, true
	}
	return est, false
}

// Price is the cost of the usage u as the policy prices it (weights or
// its expression), within 0..ratelimit.MaxCount: a negative result is 0,
// a larger one the largest count. u must be valid (Usage.Validate); an
// expression that fails on it (a division by zero) is an error.
func (r *Reserve) Price(u Usage) (int64, error) { return r.pricing.price(u) }

// compileReserve reads spec.reserve for a policy with charge Reserve, and
// checks what only code can: the engine's bounds and the pricing. The
// schema's rules on the holder and the charge are ValidateSpec's.
func compileReserve(spec *ratelimitv1alpha1.RateLimitPolicySpec, path *field.Path) (*Reserve, field.ErrorList) {
	if spec.Charge != ratelimitv1alpha1.ChargeReserve || spec.Reserve == nil {
		return nil, nil
	}
	var n numbers
	src := spec.Reserve
	r := &Reserve{Holder: src.Holder, TTL: n.duration(path.Child("ttl"), src.TTL, defaultReserveTTL)}
	if src.Max != nil {
		r.Max = n.count(path.Child("max"), *src.Max)
	}
	errs := n.errs
	if len(r.Holder) > ratelimit.MaxHolderLen {
		errs = append(errs, field.TooLong(path.Child("holder"), r.Holder, ratelimit.MaxHolderLen))
	}
	p, perrs := compilePricing(src.Pricing, path.Child("pricing"))
	r.pricing = p
	return r, append(errs, perrs...)
}

// checkReserveLimits refuses, for charge Reserve, limits whose state in
// debt the engine cannot count exactly (a settlement above the estimate
// takes the difference into debt, as charge Always does).
func checkReserveLimits(limits []Limit, specPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i := range limits {
		if limits[i].Limit.Algorithm == ratelimit.Concurrency {
			continue // refused with charge Reserve: checkInFlightPolicy
		}
		if err := limits[i].Limit.ValidateDebt(); err != nil {
			errs = append(errs, field.Invalid(specPath.Child("limits").Index(i), limits[i].Name,
				fmt.Sprintf("too large for charge Reserve (%v): a settlement above the estimate goes into debt; use a shorter period or a smaller capacity", err)))
		}
	}
	return errs
}

// Reserves reports whether p has charge Reserve: a request it admits
// holds a reservation until it is settled, so only transports that settle
// (the rate limit service's stream-done, the middleware, POST /v1/check
// with its handle) may check it.
func (p *Policy) Reserves() bool { return p.Reserve != nil }

// Holds reports whether a request p admits holds something it must give
// back when it ends: units in flight, or a reservation.
func (p *Policy) Holds() bool { return p.Reserves() || p.HoldsInFlight() }
