package policy

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Policy is a compiled RateLimitPolicy, ready to evaluate requests. It is
// immutable once compiled and safe to share between goroutines.
type Policy struct {
	Namespace string
	Name      string
	// Generation is the object's metadata.generation when it came from the
	// API server (0 for files).
	Generation int64

	match        matcher
	key          keyTemplate
	OnMissingKey ratelimitv1alpha1.OnMissingKey
	Limits       []Limit
	Cost         int64
	// Shadow: the policy is in mode Shadow (spec.mode, or every limit's
	// own mode), which decides its penalty box, failureMode, onMissingKey
	// and the default of its limits' modes.
	Shadow     bool
	FailClosed bool
	// ChargeAlways: spec.charge is Always (every matching request is
	// counted, over the limit if need be).
	ChargeAlways bool
	// Reserve is spec.reserve for charge Reserve (a request's estimate held
	// until its settlement); nil for the other charges.
	Reserve *Reserve
	// Lease is spec.lease: zero when the policy is decided exactly.
	Lease ratelimit.Lease
	// Penalty is spec.penalty: zero when the policy has no penalty box.
	Penalty ratelimit.Penalty
	// DenyStatus is the policy's spec.response.denyStatus, 0 when unset
	// (the check endpoint's profile then decides).
	DenyStatus  int
	HeaderStyle ratelimitv1alpha1.HeaderStyle
	// Summary describes the limits for `kubectl get` and the dashboard,
	// e.g. "burst=tokenBucket(10/1s) day=fixedWindow(1000/24h)".
	Summary string
}

// Limit is one compiled limit of a policy.
type Limit struct {
	Name  string
	Limit ratelimit.Limit
	// Window is the span the limit's quota is counted over, for the
	// RateLimit-Policy header's "w" parameter: the window, or the time a
	// bucket takes to refill from empty.
	Window time.Duration
	// Holder is a concurrency limit's descriptor entry whose value names
	// the request that holds its units (descriptor policies only).
	Holder string
	// Mode is the limit's mode in force (LimitModeOf): its own, else its
	// policy's.
	Mode ratelimitv1alpha1.LimitMode
	// Hidden: the limit's state is kept from the client (visibility
	// Hidden): it never reports in the answer's headers nor a problem.
	Hidden bool
}

// Enforced reports whether the limit denies a request over it.
func (l *Limit) Enforced() bool { return l.Mode == ratelimitv1alpha1.LimitModeEnforce }

// Shadow reports whether the limit reports only to operators.
func (l *Limit) Shadow() bool { return l.Mode == ratelimitv1alpha1.LimitModeShadow }

// Soft reports whether a request over the limit goes on, flagged.
func (l *Limit) Soft() bool { return l.Mode == ratelimitv1alpha1.LimitModeSoft }

// AdmitsNothing reports a limit of 0, which only an Envoy descriptor's
// own limit can be (DescriptorLimit): the engine counts from 1, so it has
// no bucket, and the checker denies every request it would count there.
func (l *Limit) AdmitsNothing() bool { return l.Limit.Capacity == 0 }

// Compile turns a spec into a Policy. Every problem is reported, each
// naming its field (such as "spec.limits[1].gcra.period"), so a person can
// fix them all at once. The CRD schema's other rules are not repeated
// here: the API server applies them in a cluster, internal/crdschema to
// local mode's files, and ValidateSpec (their copy in Go) to the
// middleware's specs. Compile checks what only code can: the key
// template's placeholders, the CEL `when` expression, the engine's numeric
// bounds, and what the limits' names and numbers must be for the engine.
func Compile(namespace, name string, spec *ratelimitv1alpha1.RateLimitPolicySpec) (*Policy, error) {
	return CompileTargeted(namespace, name, spec, nil)
}

// CompileTargeted is Compile for a policy whose targetRefs the controller
// resolved into routes (nil when it has none).
func CompileTargeted(namespace, name string, spec *ratelimitv1alpha1.RateLimitPolicySpec, routes *Routes) (*Policy, error) {
	specPath := field.NewPath("spec")
	p := newPolicy(namespace, name, spec)
	errs := checkCost(spec, specPath)
	errs = append(errs, checkRoutes(spec, routes, specPath)...)

	match, merrs := compileMatchField(&spec.Match, specPath.Child("match"))
	errs = append(errs, merrs...)
	if routes != nil && len(spec.TargetRefs) > 0 {
		compiled, err := compileRoutes(routes)
		if err != nil {
			errs = append(errs, field.Invalid(specPath.Child("targetRefs"), "", err.Error()))
		}
		match.routes = compiled
	}
	p.match = match

	key, kerrs := compileKey(spec.Key, match.forDescriptors, specPath.Child("key"))
	errs = append(errs, kerrs...)
	p.key = key

	status, serrs := compileDenyStatus(spec.Response.DenyStatus, specPath.Child("response", "denyStatus"))
	errs = append(errs, serrs...)
	p.DenyStatus = status

	limits, summary, lerrs := compileLimits(spec.Limits, p.Cost, spec.Mode, specPath)
	errs = append(errs, lerrs...)
	for i := range limits {
		limits[i].Window = quotaWindow(limits[i].Limit)
	}
	if p.ChargeAlways {
		errs = append(errs, checkDebt(limits, specPath)...)
	}
	p.Limits, p.Summary = limits, summary
	reserve, rerrs := compileReserve(spec, specPath.Child("reserve"))
	errs = append(errs, rerrs...)
	if p.Reserve = reserve; reserve != nil {
		errs = append(errs, checkReserveLimits(limits, specPath)...)
	}
	p.Shadow = p.Shadow || allShadow(limits)
	lease, lerrs := compileLease(spec, limits, p.Cost, specPath.Child("lease"))
	errs = append(errs, lerrs...)
	p.Lease = lease
	penalty, perrs := compilePenalty(spec, specPath.Child("penalty"))
	errs = append(errs, perrs...)
	p.Penalty = penalty
	p.Penalty.Shadow = penalty.Enabled() && p.Shadow // the box follows spec.mode
	errs = append(errs, checkConcurrency(spec, limits, key, match.forDescriptors, specPath)...)

	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return p, nil
}

// allShadow reports whether every limit is in mode Shadow: such a policy
// is a shadow policy (its penalty box, failureMode, onMissingKey), as if
// spec.mode said so, whatever spec.mode says.
func allShadow(limits []Limit) bool {
	for i := range limits {
		if !limits[i].Shadow() {
			return false
		}
	}
	return len(limits) > 0
}

// newPolicy takes the spec's plain fields, with the schema's defaults:
// files in local mode are not defaulted by an API server, and both sources
// must mean the same.
func newPolicy(namespace, name string, spec *ratelimitv1alpha1.RateLimitPolicySpec) *Policy {
	p := &Policy{
		Namespace:    namespace,
		Name:         name,
		OnMissingKey: spec.OnMissingKey,
		Cost:         int64(spec.Cost),
		Shadow:       spec.Mode == ratelimitv1alpha1.ModeShadow,
		FailClosed:   spec.FailureMode == ratelimitv1alpha1.FailureModeClosed,
		ChargeAlways: spec.Charge == ratelimitv1alpha1.ChargeAlways,
		HeaderStyle:  spec.Response.Headers,
	}
	if p.OnMissingKey == "" {
		p.OnMissingKey = ratelimitv1alpha1.OnMissingKeySkip
	}
	if p.Cost == 0 {
		p.Cost = 1
	}
	if p.HeaderStyle == "" {
		p.HeaderStyle = ratelimitv1alpha1.HeaderStyleBoth
	}
	return p
}

// The key template of a policy that names none: one bucket per client
// address, or for a descriptor policy one per distinct descriptor (as
// Envoy's ratelimit service counts).
const (
	defaultKey           = "{client_ip}"
	defaultDescriptorKey = "{descriptor}"
)

// compileKey compiles spec.key for a descriptor policy or an HTTP one:
// each reads only the values its kind of request has.
func compileKey(src string, forDescriptors bool, path *field.Path) (keyTemplate, field.ErrorList) {
	if src == "" {
		src = defaultKey
		if forDescriptors {
			src = defaultDescriptorKey
		}
	}
	key, err := parseKeyTemplate(src)
	if err != nil {
		return key, field.ErrorList{field.Invalid(path, src, err.Error())}
	}
	switch {
	case forDescriptors && key.usesHTTP:
		return key, field.ErrorList{field.Invalid(path, src, "a descriptor policy (match.domain or match.descriptor set) builds its key from {descriptor} and {descriptor:name} only: Envoy rate limit service requests carry no HTTP attributes")}
	case !forDescriptors && key.usesDescriptor:
		return key, field.ErrorList{field.Invalid(path, src, "{descriptor} placeholders need a descriptor policy (match.domain or match.descriptor set): HTTP checks carry no descriptor")}
	}
	return key, nil
}

// compileMatchField compiles spec.match, its `when` expression included.
func compileMatchField(m *ratelimitv1alpha1.RequestMatch, path *field.Path) (matcher, field.ErrorList) {
	match := compileMatch(m)
	var errs field.ErrorList
	for i, c := range m.ExemptClients {
		p, err := parseClientNetwork(c)
		if err != nil {
			errs = append(errs, field.Invalid(path.Child("exemptClients").Index(i), c, err.Error()))
			continue
		}
		match.exempt = append(match.exempt, p)
	}
	if m.When != "" {
		w, err := compileWhen(m.When)
		if err != nil {
			errs = append(errs, field.Invalid(path.Child("when"), m.When, err.Error()))
		}
		match.when = w
	}
	return match, errs
}

// compileDenyStatus reads spec.response.denyStatus: 0 when unset.
func compileDenyStatus(denyStatus *int32, path *field.Path) (int, field.ErrorList) {
	if denyStatus == nil {
		return 0, nil
	}
	status := int(*denyStatus)
	if status < 400 || status > 599 {
		return status, field.ErrorList{field.Invalid(path, status, "must be an HTTP error status from 400 to 599")}
	}
	return status, nil
}

// checkCost holds spec.cost to the engine's counts (0: the default, 1).
func checkCost(spec *ratelimitv1alpha1.RateLimitPolicySpec, path *field.Path) field.ErrorList {
	if spec.Cost < 0 || spec.Cost > ratelimit.MaxCount {
		return field.ErrorList{field.Invalid(path.Child("cost"), spec.Cost, fmt.Sprintf("must be from 1 to %d", ratelimit.MaxCount))}
	}
	return nil
}

// checkRoutes refuses a policy with targets that come without their
// resolved routes: only the controller resolves them.
func checkRoutes(spec *ratelimitv1alpha1.RateLimitPolicySpec, routes *Routes, path *field.Path) field.ErrorList {
	if len(spec.TargetRefs) == 0 || routes != nil {
		return nil
	}
	return field.ErrorList{field.Invalid(path.Child("targetRefs"), "", "targets are resolved from the cluster's Gateways and HTTPRoutes by the controller; local mode has none, so use match.hosts and match.paths there")}
}

// quotaWindow is the span the IETF RateLimit-Policy "w" parameter names:
// the window for window algorithms, and for buckets the time to refill
// from empty (the span over which capacity units are the quota).
func quotaWindow(l ratelimit.Limit) time.Duration {
	switch l.Algorithm {
	case ratelimit.TokenBucket:
		refills := (l.Capacity + l.Rate - 1) / l.Rate
		return time.Duration(refills) * l.Interval
	case ratelimit.LeakyBucket, ratelimit.GCRA:
		// Capacity units drain (or are earned back) at Rate per Interval.
		return time.Duration(float64(l.Interval) * float64(l.Capacity) / float64(l.Rate))
	default:
		return l.Interval
	}
}

// String names the policy as namespace/name.
func (p *Policy) String() string { return p.Namespace + "/" + p.Name }

// KeyTemplate returns the key template's source text.
func (p *Policy) KeyTemplate() string { return p.key.source }

// Global reports whether the key has no placeholder: one bucket for all.
func (p *Policy) Global() bool { return !p.key.dynamic }

// ForDescriptors reports whether p is a descriptor policy, which answers
// Envoy rate limit service requests (and only those).
func (p *Policy) ForDescriptors() bool { return p.match.forDescriptors }

// Domain is the Envoy rate limit domain p is limited to; "" for any domain
// bound to its namespace (and for HTTP policies).
func (p *Policy) Domain() string { return p.match.domain }
