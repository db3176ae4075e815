// Package v1alpha1 contains the RateLimitPolicy and RateLimitOverrides API of
// the ratelimit.sluice.dev group.
//
// The types carry only schema markers and small helpers; compiling a policy
// into something that can be enforced lives in internal/policy.
//
// +kubebuilder:object:generate=true
// +groupName=ratelimit.sluice.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "ratelimit.sluice.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a
	// runtime.Scheme. It is apimachinery's, so that importing the API needs
	// no controller-runtime.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &RateLimitPolicy{}, &RateLimitPolicyList{}, &RateLimitOverrides{}, &RateLimitOverridesList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
