package check

import "github.com/sluice-dev/sluice/internal/policy"

// Overrides give other numbers for the limits of one key value of a
// policy (the overrides package keeps them: run time over declared).
type Overrides interface {
	// Override returns the override of p's key value, nil when it has
	// none. The checker asks once per matching policy whose key rendered,
	// and applies it while Override.Applies: an expired override that was
	// not removed yet no longer counts. It must be cheap, and allocate
	// nothing, for a policy without overrides.
	Override(p *policy.Policy, keyValue string) *policy.Override
}

// PolicyQuota is the quota of the limit as its policy has it, without the
// override: what the limit's number would be for a key without one.
func (lr *LimitResult) PolicyQuota() int64 {
	for i := range lr.Policy.Limits {
		if l := &lr.Policy.Limits[i]; l.Name == lr.Limit.Name {
			return l.Limit.Capacity
		}
	}
	return lr.Limit.Limit.Capacity
}
