// Package policytest compiles policies for tests from the YAML a user
// writes in a RateLimitPolicy's spec, so that a test states its policies
// as text.
package policytest

import (
	"testing"

	"sigs.k8s.io/yaml"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policy"
)

// Spec parses specYAML, a RateLimitPolicy's spec, strictly: an unknown
// field fails the test, as a typo in a test's policy must.
func Spec(t testing.TB, specYAML string) ratelimitv1alpha1.RateLimitPolicySpec {
	t.Helper()
	var spec ratelimitv1alpha1.RateLimitPolicySpec
	if err := yaml.UnmarshalStrict([]byte(specYAML), &spec); err != nil {
		t.Fatalf("spec: %v", err)
	}
	return spec
}

// Compile compiles specYAML as the policy namespace/name, as the
// controller and local mode compile a RateLimitPolicy; a spec that does
// not parse or compile fails the test.
func Compile(t testing.TB, namespace, name, specYAML string) *policy.Policy {
	t.Helper()
	spec := Spec(t, specYAML)
	p, err := policy.Compile(namespace, name, &spec)
	if err != nil {
		t.Fatalf("compile %s/%s: %v", namespace, name, err)
	}
	return p
}
