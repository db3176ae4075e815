package v1alpha1

// Condition types follow kstatus, so `kubectl wait --for=condition=Ready`,
// Flux and Argo CD read a policy's health without knowing Sluice:
// Ready is always present; Reconciling and Stalled are present only while
// true and are never true together.
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
)

// Condition reasons.
const (
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
)
