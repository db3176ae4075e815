// Package v1alpha1 contains the RateLimitPolicy API of the ratelimit.sluice.dev group.
//
// The types carry only schema markers and small helpers; compiling a policy
// into something that can be enforced lives in internal/policy.
//
// +kubebuilder:object:generate=true
// +groupName=ratelimit.sluice.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "ratelimit.sluice.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
