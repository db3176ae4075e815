package v1alpha1

// Condition types follow kstatus, so `kubectl wait --for=condition=Ready`,
// Flux and Argo CD read a policy's health without knowing Sluice:
// Ready is always present; Reconciling and Stalled are present only while
// true and are never true together. TooManyLimits is a warning beside
// them, present only while true: kstatus and the GitOps tools ignore it,
// and it changes neither Ready nor what is in force.
const (
	// ConditionReady is True when the current generation is compiled and
	// in force in Redis.
	ConditionReady = "Ready"

	// ConditionReconciling is True while the controller is applying a
	// generation it has not finished with.
	ConditionReconciling = "Reconciling"

	// ConditionStalled is True when the controller cannot make progress
	// without a change from a person (an invalid spec).
	ConditionStalled = "Stalled"

	// ConditionTooManyLimits is True when one request could meet more
	// limits of this policy and the policies it can match together with
	// than one check evaluates (8,192): such a request is refused (HTTP
	// 400 too-many-limits, RLS and ext_authz INVALID_ARGUMENT) and counted
	// nowhere. The policy stays in force for every other request; the
	// message names the worst case, the bound and what to change. Absent
	// otherwise.
	ConditionTooManyLimits = "TooManyLimits"

	// ConditionQuotaUnservable is True on a descriptor policy that Envoy's
	// rate limit quota service cannot serve as token buckets (a
	// concurrency limit, a penalty box, a cost other than 1, charge
	// Always): a quota bucket it matches is answered by its failureMode as
	// a blanket rule (allow all when Open, deny all when Closed). The
	// policy stays in force, for the rate limit service too; the message
	// says why. Absent otherwise.
	ConditionQuotaUnservable = "QuotaUnservable"
)

// Condition reasons.
const (
	// ReasonFailureModeAnswers: QuotaUnservable's reason: the quota
	// service answers the policy's buckets by its failureMode.
	ReasonFailureModeAnswers = "FailureModeAnswers"

	// ReasonApplied: the generation is compiled and written to the policy table.
	ReasonApplied = "Applied"

	// ReasonInvalidSpec: the spec does not compile (a key template, a CEL
	// expression or a limit is wrong); the message names the field. The
	// last good version stays in force.
	ReasonInvalidSpec = "InvalidSpec"

	// ReasonRedisUnavailable: Redis could not be reached or refused the
	// write; the controller retries with backoff.
	ReasonRedisUnavailable = "RedisUnavailable"

	// ReasonTargetNotFound: a targetRef names an HTTPRoute, Gateway, rule
	// or listener that does not exist; the message says which. The
	// policy applies to its other targets, and to this one once it exists.
	ReasonTargetNotFound = "TargetNotFound"

	// ReasonHTTPPoliciesOverBound: the namespace's HTTP policies have
	// more limits together than one check evaluates, and any request can
	// match all of them as far as their specs tell.
	ReasonHTTPPoliciesOverBound = "HTTPPoliciesOverBound"

	// ReasonDescriptorPoliciesOverBound: 64 descriptors (the most one
	// Envoy rate limit service request carries) could each match
	// descriptor policies of the namespace with more limits together than
	// one check evaluates.
	ReasonDescriptorPoliciesOverBound = "DescriptorPoliciesOverBound"

	// ReasonPartiallyApplied: a RateLimitOverrides object's entries are in
	// force but those whose expiry has passed, which status.invalid lists.
	ReasonPartiallyApplied = "PartiallyApplied"

	// ReasonInvalidOverrides: an entry of a RateLimitOverrides object
	// cannot work as written (a limit the policy does not have, a number
	// it cannot take, a key another entry gives already); the message
	// names the field, status.invalid lists every such entry. None of the
	// object's new entries applies, and the entries it had in force stay.
	ReasonInvalidOverrides = "InvalidOverrides"

	// ReasonPolicyNotFound: a RateLimitOverrides object names a policy
	// that does not exist in its namespace; its entries apply once it does.
	ReasonPolicyNotFound = "PolicyNotFound"
)
