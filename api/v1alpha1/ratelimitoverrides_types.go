package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RateLimitOverridesSpec gives other numbers for the limits of single key
// values (a tenant, an API key, a client network) of one RateLimitPolicy
// in the same namespace. A run-time override set through the admin API
// takes precedence over an entry here, which takes precedence over the
// policy's own numbers.
type RateLimitOverridesSpec struct {
	// policyName names the RateLimitPolicy, in this namespace, whose key
	// values the entries override.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	PolicyName string `json:"policyName"`

	// overrides are the entries, one per key value. A policy has at most
	// 100,000 overrides, from all its RateLimitOverrides objects and the
	// admin API together; an object holds at most 10,000 (an object's size
	// is bounded by the API server).
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=10000
	// +listType=map
	// +listMapKey=key
	Overrides []Override `json:"overrides"`
}

// Override is other numbers for the limits of one key value.
type Override struct {
	// key is the key value as the policy's key template renders it, such
	// as "203.0.113.7" for {client_ip}, "203.0.113.0/24" for
	// {client_ip/24} or "acme" for {header:X-Tenant}.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Key string `json:"key"`

	// limits are the numbers, by limit name. A number is the limit's quota
	// (what the RateLimit-Policy header reports as q): a window's limit, a
	// bucket's capacity, GCRA's burst, a concurrency limit's limit. A
	// bucket's rate scales in proportion, so ten times the quota is ten
	// times the sustained rate too. Limits left out keep the policy's
	// numbers.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=name
	Limits []OverrideLimit `json:"limits"`

	// expires is when the entry stops applying; unset: never. An entry
	// whose expiry has passed is reported in status and applies no more.
	// +optional
	Expires *metav1.Time `json:"expires,omitempty"`
}

// OverrideLimit is one limit's number in an Override.
type OverrideLimit struct {
	// name is the name of one of the policy's limits. (A pattern rather
	// than LimitName's CEL rule: 10,000 entries of 8 limits would exceed
	// the API server's budget for CEL.)
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// limit is the limit's quota for the key value.
	// +required
	Limit Count `json:"limit"`
}

// RateLimitOverridesStatus is what the controller applied.
type RateLimitOverridesStatus struct {
	// observedGeneration is the spec generation the conditions describe;
	// -1 until the controller has decided one.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration"`

	// conditions: Ready, Reconciling and Stalled, following kstatus.
	// Ready is True when the entries are in force (reason Applied, or
	// PartiallyApplied when some have expired), False when the policy
	// does not exist (PolicyNotFound), while Redis is unavailable
	// (Reconciling), or when an entry cannot work as written (Stalled,
	// reason InvalidOverrides, naming the field; the entries in force
	// before stay).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// applied is how many entries are in force.
	// +optional
	Applied int32 `json:"applied,omitempty"`

	// invalid are the entries that are not applied (the first 100), each
	// with the field at fault and why: a limit the policy does not have, a
	// number it cannot take, a key another entry gives, an expiry that has
	// passed.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	Invalid []InvalidOverride `json:"invalid,omitempty"`

	// invalidCount is how many entries are not applied, all of them.
	// +optional
	InvalidCount int32 `json:"invalidCount,omitempty"`
}

// InvalidOverride is an entry of spec.overrides that is not applied.
type InvalidOverride struct {
	// index is the entry's index in spec.overrides.
	// +required
	Index int32 `json:"index"`

	// key is the entry's key.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	Key string `json:"key"`

	// message says what is wrong.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message"`
}

// RateLimitOverrides gives other numbers for the limits of single key
// values of a RateLimitPolicy in the same namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rlo,categories=sluice
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.policyName`
// +kubebuilder:printcolumn:name="Applied",type=integer,JSONPath=`.status.applied`
// +kubebuilder:printcolumn:name="Invalid",type=integer,JSONPath=`.status.invalidCount`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RateLimitOverrides struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired overrides.
	// +required
	Spec RateLimitOverridesSpec `json:"spec"`

	// status is what the controller applied.
	// +optional
	// +kubebuilder:default={observedGeneration:-1}
	Status RateLimitOverridesStatus `json:"status,omitempty"`
}

// GetConditions returns the status conditions.
func (o *RateLimitOverrides) GetConditions() []metav1.Condition { return o.Status.Conditions }

// SetConditions replaces the status conditions.
func (o *RateLimitOverrides) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

// RateLimitOverridesList is a list of RateLimitOverrides.
//
// +kubebuilder:object:root=true
type RateLimitOverridesList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RateLimitOverrides `json:"items"`
}
