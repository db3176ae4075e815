package check

import (
	"sync/atomic"

	"github.com/sluice-dev/sluice/internal/policy"
)

// StaticSource serves a policy set that its owner replaces with Set: for
// programs that build policies in code (the middleware), and for tests.
type StaticSource struct {
	set      atomic.Pointer[policy.Set]
	revision atomic.Int64
}

// NewStaticSource serves policies.
func NewStaticSource(policies ...*policy.Policy) *StaticSource {
	s := &StaticSource{}
	s.Set(policies...)
	return s
}

// Set replaces the policies in force.
func (s *StaticSource) Set(policies ...*policy.Policy) {
	s.set.Store(policy.NewSet(s.revision.Add(1), policies))
}

// Policies implements Source.
func (s *StaticSource) Policies() *policy.Set { return s.set.Load() }
