package schemavalues

import (
	"strings"
	"testing"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

// A Go caller cannot leave a field out: a required field at its zero
// value is reported as required, as the API server reports a manifest
// without it; the other rules name their fields in the API server's words.
func TestPolicySpec(t *testing.T) {
	valid := ratelimitv1alpha1.RateLimitPolicySpec{Limits: []ratelimitv1alpha1.Limit{{Name: "l",
		FixedWindow: &ratelimitv1alpha1.WindowLimit{Limit: 10, Window: "1m"}}}}
	if errs := PolicySpec(&valid); len(errs) != 0 {
		t.Fatalf("a valid spec: %v", errs)
	}
	for name, c := range map[string]struct {
		edit func(*ratelimitv1alpha1.RateLimitPolicySpec)
		want string
	}{
		"a count left out": {func(s *ratelimitv1alpha1.RateLimitPolicySpec) { s.Limits[0].FixedWindow.Limit = 0 },
			"spec.limits[0].fixedWindow.limit: Required value"},
		"a limit name twice": {func(s *ratelimitv1alpha1.RateLimitPolicySpec) { s.Limits = append(s.Limits, s.Limits[0]) },
			`spec.limits[1]: Duplicate value: {"name":"l"}`},
		"an enum": {func(s *ratelimitv1alpha1.RateLimitPolicySpec) { s.Mode = "Loud" },
			`spec.mode: Unsupported value: "Loud": supported values: "Enforce", "Shadow"`},
		"a bound": {func(s *ratelimitv1alpha1.RateLimitPolicySpec) { s.Cost = -1 },
			"spec.cost: Invalid value: -1: should be greater than or equal to"},
	} {
		spec := valid.DeepCopy()
		c.edit(spec)
		if errs := PolicySpec(spec); len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), c.want) {
			t.Errorf("%s: %v; want %q", name, errs, c.want)
		}
	}
}
