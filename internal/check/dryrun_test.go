package check

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
)

// TestDryRunRefusalCountsNothing: a dry run without a holder (explain, as
// a transport that cannot release) of a concurrency limit gets the
// refusal that transport gets, and counts nothing; a check counts it.
func TestDryRunRefusalCountsNothing(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	c := newChecker(t, Options{Metrics: m}, policytest.Compile(t, "ns", "p", "key: global\nlimits: [{name: l, concurrency: {limit: 1}}]"))
	refused := func() float64 {
		return testutil.ToFloat64(m.releases.WithLabelValues("ns", "p", string(ReleaseRefused)))
	}
	for _, action := range []ratelimit.Action{ratelimit.DryRun, ratelimit.Consume} {
		_, err := c.Check(context.Background(), Input{Namespace: "ns", Request: request(), Action: action})
		if !errors.Is(err, ErrNoRelease) {
			t.Fatalf("%s: %v, want ErrNoRelease", action, err)
		}
	}
	if got := refused(); got != 1 {
		t.Fatalf("%v refusals counted, want 1 (the check's)", got)
	}
}
