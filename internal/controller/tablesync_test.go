package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

func testPolicy(uid types.UID, generation int64, when string) ratelimitv1alpha1.RateLimitPolicy {
	return ratelimitv1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "api", UID: uid, Generation: generation},
		Spec: ratelimitv1alpha1.RateLimitPolicySpec{
			Key:   "global",
			Match: ratelimitv1alpha1.RequestMatch{When: when},
			Limits: []ratelimitv1alpha1.Limit{{
				Name:        "hourly",
				FixedWindow: &ratelimitv1alpha1.WindowLimit{Limit: 10, Window: "1h"},
			}},
		},
	}
}

// A generation's spec never changes, so the sync compiles it once: here a
// spec changed under the same generation (which the API server never does)
// shows that the second sync did not compile it again.
func TestTableSyncCompilesEachGenerationOnce(t *testing.T) {
	const typo = `request.hedaers["x-plan"] == "free"`
	s := &TableSync{}
	if errs := s.compileErrors([]ratelimitv1alpha1.RateLimitPolicy{testPolicy("u1", 1, "")}); errs[0] != nil {
		t.Fatalf("a valid policy does not compile: %v", errs[0])
	}
	if errs := s.compileErrors([]ratelimitv1alpha1.RateLimitPolicy{testPolicy("u1", 1, typo)}); errs[0] != nil {
		t.Fatalf("generation 1 was compiled again: %v", errs[0])
	}
	if errs := s.compileErrors([]ratelimitv1alpha1.RateLimitPolicy{testPolicy("u1", 2, typo)}); errs[0] == nil {
		t.Fatal("generation 2, which does not compile, was not compiled")
	}
	// A policy deleted and created again under the same name has a new UID.
	if errs := s.compileErrors([]ratelimitv1alpha1.RateLimitPolicy{testPolicy("u2", 2, "")}); errs[0] != nil {
		t.Fatalf("a new object was taken for the old one: %v", errs[0])
	}
	if _, ok := s.checked["u1"]; ok {
		t.Fatal("a policy no longer listed is still remembered")
	}
}
