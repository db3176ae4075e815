package policy

import (
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// OverrideSource says where an override comes from. A run-time override
// takes precedence over a declared one, which takes precedence over the
// policy's own numbers.
type OverrideSource string

const (
	// OverrideRuntime: set through the admin API, kept in the store.
	OverrideRuntime OverrideSource = "Runtime"
	// OverrideDeclared: an entry of a RateLimitOverrides object (or file).
	OverrideDeclared OverrideSource = "Declared"
)

// Override is other numbers for the limits of one key value of a policy,
// compiled against that policy. It is immutable once compiled.
type Override struct {
	Source OverrideSource
	// Quotas are the numbers asked for, by limit name.
	Quotas map[string]int64
	// Expires is when the override stops applying; zero: never.
	Expires time.Time
	// SetBy names who set a run-time override; Object names the
	// RateLimitOverrides object of a declared one.
	SetBy, Object string

	// limits are the policy's limits with the overridden ones rescaled, in
	// the policy's order.
	limits []Limit
}

// Limits are the limits in force for the override's key: the policy's,
// with the overridden ones rescaled.
func (o *Override) Limits() []Limit { return o.limits }

// Applies reports whether o is in force at now.
func (o *Override) Applies(now time.Time) bool {
	return o != nil && (o.Expires.IsZero() || now.Before(o.Expires))
}

// Overrides reports whether o changes the policy's limit of that name.
func (o *Override) Overrides(name string) bool {
	_, ok := o.Quotas[name]
	return ok
}

// overrideLimits checks quotas against p's limits and returns p's limits
// with the overridden ones rescaled. The error names the first limit that
// is unknown or whose number the policy cannot take.
func (p *Policy) overrideLimits(quotas map[string]int64) ([]Limit, error) {
	if len(quotas) == 0 {
		return nil, fmt.Errorf("limits: at least one limit's number is needed")
	}
	names := make([]string, 0, len(quotas))
	for name := range quotas {
		names = append(names, name)
	}
	slices.Sort(names)
	limits := slices.Clone(p.Limits)
	for _, name := range names {
		i := slices.IndexFunc(limits, func(l Limit) bool { return l.Name == name })
		if i < 0 {
			return nil, &UnknownLimitError{Name: name, Policy: p}
		}
		q := quotas[name]
		if q < 1 || q > ratelimit.MaxCount {
			return nil, fmt.Errorf("limit %q: %d must be from 1 to %d", name, q, ratelimit.MaxCount)
		}
		if q < p.Cost {
			return nil, fmt.Errorf("limit %q: %d is below the policy's cost %d: no request could be allowed", name, q, p.Cost)
		}
		scaled, err := ScaleLimit(limits[i].Limit, q)
		if err != nil {
			return nil, fmt.Errorf("limit %q: %d: %w", name, q, err)
		}
		limits[i].Limit, limits[i].Window = scaled, quotaWindow(scaled)
	}
	return limits, nil
}

// NewOverride compiles quotas (numbers by limit name) against p into an
// Override from source. The error names the first limit that is unknown
// or whose number p cannot take, and nothing is compiled then.
func (p *Policy) NewOverride(source OverrideSource, quotas map[string]int64, expires time.Time, setBy, object string) (*Override, error) {
	limits, err := p.overrideLimits(quotas)
	if err != nil {
		return nil, err
	}
	return &Override{Source: source, Quotas: quotas, Expires: expires, SetBy: setBy, Object: object, limits: limits}, nil
}

// UnknownLimitError is NewOverride's error for a limit name the policy
// does not have.
type UnknownLimitError struct {
	Name   string
	Policy *Policy
}

func (e *UnknownLimitError) Error() string {
	return fmt.Sprintf("limit %q is not a limit of policy %s (its limits: %s)", e.Name, e.Policy, strings.Join(e.Policy.LimitNames(), ", "))
}

// LimitNames lists the names of p's limits in order.
func (p *Policy) LimitNames() []string {
	names := make([]string, len(p.Limits))
	for i := range p.Limits {
		names[i] = p.Limits[i].Name
	}
	return names
}

// ScaleLimit gives l the quota q (what the RateLimit-Policy header reports
// as q: a window's limit, a bucket's capacity, GCRA's burst). The bucket
// algorithms' rates scale in proportion, so that ten times the quota is ten
// times the sustained rate too and the time to refill from empty stays the
// same: rate per interval becomes rate·q/capacity per interval, as the
// reduced fraction a/b taken as a per b intervals when that fits the
// engine's bounds, else rounded to the nearest whole rate (at least 1) per
// interval. Calendar and Concurrency limits take q as their limit, as the
// windows do.
func ScaleLimit(l ratelimit.Limit, q int64) (ratelimit.Limit, error) {
	out := l
	out.Capacity = q
	if l.Rate > 0 && q != l.Capacity {
		out.Rate, out.Interval = scaleRate(l.Rate, l.Interval, q, l.Capacity)
	}
	if err := out.Validate(); err != nil {
		return ratelimit.Limit{}, err
	}
	return out, nil
}

// scaleRate returns rate·q/capacity per interval as a whole rate per a
// whole number of intervals, or rounded per interval when that does not fit.
func scaleRate(rate int64, interval time.Duration, q, capacity int64) (int64, time.Duration) {
	num := new(big.Int).Mul(big.NewInt(rate), big.NewInt(q))
	g := new(big.Int).GCD(nil, nil, num, big.NewInt(capacity)).Int64()
	a, b := new(big.Int).Quo(num, big.NewInt(g)), capacity/g
	if a.IsInt64() && a.Int64() <= ratelimit.MaxCount && b <= int64(ratelimit.MaxInterval/interval) {
		return a.Int64(), time.Duration(b) * interval
	}
	r := math.Round(float64(rate) * float64(q) / float64(capacity))
	return int64(min(max(r, 1), ratelimit.MaxCount)), interval
}
