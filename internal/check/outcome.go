package check

import (
	"errors"
	"time"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// The request a check decides (Input, its Parts) and what it decided
// (Outcome: the policies that took part, the limits' figures, the
// verdicts the renderers print).

// Input is one request to decide.
type Input struct {
	Namespace string
	// Policy, when set, checks only that policy of the namespace.
	Policy  string
	Request *policy.Request
	// Parts, when set, replace Request: the descriptors of one Envoy rate
	// limit service request (at most MaxParts), decided together in one
	// store call. Either every part's limits are counted or, when any
	// denies, none is.
	Parts []Part
	// Cost overrides every policy's cost when above 0.
	Cost int64
	// Action is what the check does to the limits: consume (the zero
	// Action), a dry run that evaluates without consuming anything, or a
	// refund that gives the costs back to the matching policies' limits
	// instead of taking them (units taken earlier and not used, Envoy's
	// negative hits). A refund is answered allowed, with the limits'
	// figures after it, and never from the denial cache. A policy with a
	// concurrency limit releases instead: its concurrency limits free what
	// the holder holds, and its other limits keep what the request was
	// charged. A release (ratelimit.Release) ends a request: the matching
	// policies' concurrency limits free what the holder holds, and nothing
	// else changes; it is answered allowed when something was freed. A
	// settlement (ratelimit.Settle) ends a request too: the matching
	// policies with charge Reserve replace the holder's reservation by
	// the actual cost (Cost, the usage's price, or without either the
	// policy's estimate, which leaves the reservation charged as it was),
	// and nothing else changes; it is answered allowed when something was
	// settled. A refund leaves reservations alone.
	Action ratelimit.Action
	// Usage, on a settlement, is what the request reports it used, which
	// each policy with charge Reserve prices (reserve.pricing) into its
	// actual cost. It must be valid (policy.Usage.Validate).
	Usage *policy.Usage
	// Holder names the request whose units the concurrency limits of
	// HTTP policies hold (the middleware's request, a /v1/check handle),
	// and which a release names again. Transports that cannot release
	// leave it empty: a concurrency limit met then is refused
	// (ErrNoRelease). A descriptor policy's limit reads its holder from
	// the descriptor (policy.Limit.Holder).
	Holder string
}

// MaxParts bounds the Parts of one Input: the descriptors of one Envoy
// rate limit service request, which the gRPC server refuses beyond it.
// With ratelimit.MaxEntries it bounds what a namespace's descriptor
// policies may add up to (the controller's TooManyLimits condition).
const MaxParts = 64

// Part is one of several requests decided together.
type Part struct {
	Request *policy.Request
	// Cost, when CostSet, overrides the cost of the policies the part
	// matches; 0 then checks the limits without counting.
	Cost    int64
	CostSet bool
	// Policies, when set, decide the part instead of the namespace's
	// policies that match it (the limit an Envoy descriptor carries,
	// which replaces them as it does in envoyproxy/ratelimit).
	Policies []*policy.Policy
	// Refunded says that the part gave its cost back (Envoy's negative
	// hits: a refund or a release, made by a check of its own just before)
	// and is checked only to read its limits' figures for the answer: a
	// give-back, no decision, so its limits count no decision and tell the
	// decision log and the top keys nothing.
	Refunded bool
	// Usage is Input.Usage for a part (see there).
	Usage *policy.Usage
	// Admitted says that the part's cost was admitted already (a usage
	// report of Envoy's rate limit quota service): its limits are charged
	// whatever the decision, over the limit if need be, as charge Always
	// charges (ratelimit.Entry.ChargeAlways).
	Admitted bool
	// Estimated, on a settlement without Usage, says that Cost (when
	// CostSet, else the policy's) is the admission's estimate, not an
	// actual: each reserve policy settles at it clamped to its
	// reserve.max, as its admission took it, so that the reservation
	// stays charged as estimated.
	Estimated bool
	// Limits, when set, selects the limits of the part's policies it
	// checks by their mode in force (the rest are left out): the quota
	// service reserves shares from the limits that enforce and charges
	// those that never deny what Envoy admitted.
	Limits LimitSelection
}

// LimitSelection selects a policy's limits by their mode in force.
type LimitSelection uint8

const (
	// AllLimits: every limit (the zero value).
	AllLimits LimitSelection = iota
	// EnforcedLimits: the limits that deny a request over them.
	EnforcedLimits
	// UnenforcedLimits: the limits that never deny (Shadow, Soft).
	UnenforcedLimits
)

// selects reports whether l is one of the limits s selects.
func (s LimitSelection) selects(l *policy.Limit) bool {
	return s == AllLimits || l.Enforced() == (s == EnforcedLimits)
}

// Reason says why a request was answered the way it was.
type Reason string

const (
	// ReasonAllowed: every enforced limit of every matching policy
	// admitted the request (and each counted it).
	ReasonAllowed Reason = "Allowed"
	// ReasonNoPolicy: no policy of the namespace matched; allowed.
	ReasonNoPolicy Reason = "NoPolicyMatched"
	// ReasonLimited: denied by a limit; nothing was counted anywhere.
	ReasonLimited Reason = "RateLimited"
	// ReasonBanned: denied, and the limit the answer reports was denied
	// by its bucket's ban (the policy's penalty box), or its denial issued
	// the ban: the client waits for the ban's end, not for a refill.
	ReasonBanned Reason = "Banned"
	// ReasonMissingKey: denied because a placeholder of a policy's key
	// had no value and its onMissingKey is Deny.
	ReasonMissingKey Reason = "MissingKey"
	// ReasonStoreUnavailable: the store could not answer in time, so the
	// failure modes decided: denied when an enforced matching policy's
	// failureMode is Closed, else allowed (degraded either way).
	ReasonStoreUnavailable Reason = "StoreUnavailable"
	// ReasonInvalidHolder: denied by a concurrency limit whose holder, the
	// descriptor entry it names (Envoy's x-request-id), is empty or longer
	// than ratelimit.MaxHolderLen: Sluice cannot track what such a request
	// holds, nor release it.
	ReasonInvalidHolder Reason = "InvalidHolder"
)

// ErrUnknownPolicy is returned when Input.Policy names no policy in force.
var ErrUnknownPolicy = errors.New("no such policy")

// ErrTooManyLimits is returned for a request that meets more limits than
// one check evaluates (ratelimit.MaxEntries).
var ErrTooManyLimits = errors.New("too many limits for one check")

// PolicyResult says how one matching policy took part.
type PolicyResult struct {
	Policy *policy.Policy
	// Part is the index of the Input's part the policy matched (0 for a
	// single request).
	Part     int
	KeyValue string
	// MissingKey is set when the key had a placeholder without a value;
	// the policy's onMissingKey then decided (Skip: not evaluated).
	MissingKey bool
	// WhenError is the `when` expression's evaluation error; the policy
	// was applied anyway, so an expression error never bypasses a limit.
	WhenError error
	// Ban is the length of the ban this check issued the policy's bucket
	// (its penalty box); for a shadow policy, of the ban it would have
	// issued. 0 when none.
	Ban time.Duration
	// Override is the key value's override in force, whose limits were
	// checked in place of the policy's; nil when none.
	Override *policy.Override

	// decided: a limit of the policy was decided (by the store, the cache
	// of denials or as a limit of 0); denied: one denied.
	decided, denied bool
	// givesBack: the policy matched a part that gave its cost back
	// (Part.Refunded), whose limits count no decision.
	givesBack bool
	// release is what a release of the policy's concurrency limits did
	// (sluice_releases_total); "" when none was made or refused.
	release ReleaseOutcome
	// reservation is what the check did to the policy's reservation
	// (charge Reserve).
	reservation reservation
}

// Limits are the limits checked for the policy's key value: its
// override's, else the policy's own.
func (pr *PolicyResult) Limits() []policy.Limit {
	if pr.Override != nil {
		return pr.Override.Limits()
	}
	return pr.Policy.Limits
}

// LimitResult is one limit's figures.
type LimitResult struct {
	Policy *policy.Policy
	// Limit is the limit in force: the policy's, or its override's for
	// the key value (then Override is set).
	Limit *policy.Limit
	// Override is the override whose numbers Limit has, nil when Limit is
	// the policy's own.
	Override *policy.Override
	// Part is the index of the Input's part the limit was checked for.
	Part int
	Key  string
	ratelimit.Result
	// Cached is set when the denial came from the cache of denials.
	Cached bool

	// owner indexes the limit's policy in Outcome.Policies, index the
	// limit in the policy's Limits.
	owner, index int
}

// countedLimit is the limit whose decisions count those of lr: the
// policy's own, whichever numbers were in force. An override's limits are
// copies of the policy's, one set per key value: counting by them would
// keep a counter's shortcut per key value.
func (lr *LimitResult) countedLimit() *policy.Limit { return &lr.Policy.Limits[lr.index] }

// Outcome is the decision for one request.
type Outcome struct {
	Allowed bool
	Reason  Reason
	// Policies are the matching policies, in evaluation order.
	Policies []PolicyResult
	// Limits are the evaluated limits (empty when none was).
	Limits []LimitResult
	// Tightest indexes the limit whose figures the answer's headers carry:
	// on a denial the one that waits longest, otherwise the one with the
	// fewest remaining; -1 when there is none. Renderers read it through
	// Reporting, and each part's through Part.
	Tightest int
	// RetryAfter is set on a denial: never earlier than the moment the
	// same request could be allowed. ratelimit.Never when it never can.
	RetryAfter time.Duration
	// Decider is the policy that denied (or the tightest one when allowed).
	Decider *policy.Policy
	// StoreErr is the store's error when the failure mode answered.
	StoreErr error
	// Degraded is set when the failure mode answered instead of Redis.
	Degraded bool

	// firstPart and moreParts are the verdicts of the Input's parts (see
	// Part): the first kept inline, so that a request without parts
	// costs no slice.
	firstPart partFacts
	moreParts []partFacts

	dryRun bool
	// decides: the check is a decision, which the observers count (see
	// Input.decides).
	decides bool
}

// decides reports whether checking in is a decision, which the observers
// (metrics, the dashboard's counts, the decision log, the top keys) are
// told of as one: it consumes, and not only to read the figures of parts
// that gave their cost back (Part.Refunded). Dry runs, refunds and
// releases are no decisions.
func (in *Input) decides() bool {
	if in.Action != ratelimit.Consume {
		return false
	}
	for i := range in.Parts {
		if !in.Parts[i].Refunded {
			return true
		}
	}
	return len(in.Parts) == 0
}

// reset empties o for reuse, keeping its slices' storage.
func (o *Outcome) reset() {
	clear(o.Policies)
	clear(o.Limits)
	*o = Outcome{Allowed: true, Reason: ReasonNoPolicy, Tightest: -1, Policies: o.Policies[:0], Limits: o.Limits[:0], moreParts: o.moreParts[:0]}
}
