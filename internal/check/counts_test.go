package check

import (
	"testing"

	"github.com/sluice-dev/sluice/internal/policy"
)

// Limits compiled per request each take a shortcut entry; the shortcuts
// stay bounded and the counts by name stay whole.
func TestCountsShortcutsStayBounded(t *testing.T) {
	var c counts
	p := &policy.Policy{Namespace: "ns", Name: policy.DescriptorLimitPolicy}
	const n = 3 * maxCountPointers
	for range n {
		c.add(p, &policy.Limit{Name: "minute"}, ResultAllowed)
	}
	held := 0
	c.byPtr.Range(func(_, _ any) bool { held++; return true })
	if held > maxCountPointers {
		t.Errorf("%d shortcuts held, want at most %d", held, maxCountPointers)
	}
	if got := c.counter("ns", policy.DescriptorLimitPolicy, "minute").allowed.Load(); got != n {
		t.Errorf("%d allowed counted, want %d", got, n)
	}
}
