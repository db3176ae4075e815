package source

import (
	"sync/atomic"

	"github.com/sluice-dev/sluice/internal/policy"
)

// Static serves a policy set that its owner replaces with Set: for
// programs that build policies in code, and for tests.
type Static struct {
	set      atomic.Pointer[policy.Set]
	revision atomic.Int64
}

// NewStatic serves policies.
func NewStatic(policies ...*policy.Policy) *Static {
	s := &Static{}
	s.Set(policies...)
	return s
}

// Set replaces the policies in force.
func (s *Static) Set(policies ...*policy.Policy) {
	s.set.Store(policy.NewSet(s.revision.Add(1), policies))
}

// Policies implements check.Source.
func (s *Static) Policies() *policy.Set { return s.set.Load() }
