package policy

import (
	"fmt"
	"slices"
	"strings"
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
	Shadow       bool
	FailClosed   bool
	// ChargeAlways: spec.charge is Always (every matching request is
	// counted, over the limit if need be).
	ChargeAlways bool
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
}

// AdmitsNothing reports a limit of 0, which only an Envoy descriptor's
// own limit can be (DescriptorLimit): the engine counts from 1, so it has
// no bucket, and the checker denies every request it would count there.
func (l *Limit) AdmitsNothing() bool { return l.Limit.Capacity == 0 }

// Compile turns a spec into a Policy. Every problem is reported, each
// naming its field (such as "spec.limits[1].gcra.period"), so a person can
// fix them all at once. The API server's schema already rejects most
// mistakes; Compile checks what only code can: the key template's
// placeholders, the CEL `when` expression and the engine's numeric bounds.
func Compile(namespace, name string, spec *ratelimitv1alpha1.RateLimitPolicySpec) (*Policy, error) {
	return CompileTargeted(namespace, name, spec, nil)
}

// CompileTargeted is Compile for a policy whose targetRefs the controller
// resolved into routes (nil when it has none).
func CompileTargeted(namespace, name string, spec *ratelimitv1alpha1.RateLimitPolicySpec, routes *Routes) (*Policy, error) {
	specPath := field.NewPath("spec")
	p := newPolicy(namespace, name, spec)
	errs := checkEnums(spec, specPath)
	errs = append(errs, checkTargets(spec, routes, specPath)...)

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

	limits, summary, lerrs := compileLimits(spec.Limits, p.Cost, specPath)
	errs = append(errs, lerrs...)
	for i := range limits {
		limits[i].Window = quotaWindow(limits[i].Limit)
	}
	if p.ChargeAlways {
		errs = append(errs, checkDebt(limits, specPath)...)
	}
	p.Limits, p.Summary = limits, summary
	lease, lerrs := compileLease(spec, limits, p.Cost, specPath.Child("lease"))
	errs = append(errs, lerrs...)
	p.Lease = lease
	penalty, perrs := compilePenalty(spec, specPath.Child("penalty"))
	errs = append(errs, perrs...)
	p.Penalty = penalty
	errs = append(errs, checkConcurrency(spec, limits, key, match.forDescriptors, specPath)...)

	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return p, nil
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
	errs := validateMatch(m, path)
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

func checkEnums(spec *ratelimitv1alpha1.RateLimitPolicySpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = checkEnum(errs, path.Child("onMissingKey"), spec.OnMissingKey,
		ratelimitv1alpha1.OnMissingKeySkip, ratelimitv1alpha1.OnMissingKeyDeny, ratelimitv1alpha1.OnMissingKeyShared)
	errs = checkEnum(errs, path.Child("mode"), spec.Mode, ratelimitv1alpha1.ModeEnforce, ratelimitv1alpha1.ModeShadow)
	errs = checkEnum(errs, path.Child("failureMode"), spec.FailureMode, ratelimitv1alpha1.FailureModeOpen, ratelimitv1alpha1.FailureModeClosed)
	errs = checkEnum(errs, path.Child("charge"), spec.Charge, ratelimitv1alpha1.ChargeAdmitted, ratelimitv1alpha1.ChargeAlways)
	errs = checkEnum(errs, path.Child("response", "headers"), spec.Response.Headers,
		ratelimitv1alpha1.HeaderStyleIETF, ratelimitv1alpha1.HeaderStyleLegacy, ratelimitv1alpha1.HeaderStyleBoth, ratelimitv1alpha1.HeaderStyleNone)
	if spec.Cost < 0 || spec.Cost > ratelimit.MaxCount {
		errs = append(errs, field.Invalid(path.Child("cost"), spec.Cost, fmt.Sprintf("must be from 1 to %d", ratelimit.MaxCount)))
	}
	return errs
}

// checkEnum reports got unless it is empty (the default applies) or one
// of allowed.
func checkEnum[T ~string](errs field.ErrorList, path *field.Path, got T, allowed ...T) field.ErrorList {
	if got == "" || slices.Contains(allowed, got) {
		return errs
	}
	return append(errs, field.NotSupported(path, string(got), allowed))
}

// validateMatch repeats the schema's rules for policies that did not pass
// through an API server (local mode reads files).
func validateMatch(m *ratelimitv1alpha1.RequestMatch, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, h := range m.Hosts {
		if !hostPattern.MatchString(string(h)) {
			errs = append(errs, field.Invalid(path.Child("hosts").Index(i), h, "must be a host name such as api.example.com, or *.example.com for any subdomain"))
		}
	}
	for i, p := range m.Paths {
		s := string(p)
		star := strings.IndexByte(s, '*')
		if !strings.HasPrefix(s, "/") || (star >= 0 && star != len(s)-1) || strings.ContainsAny(s, "?# \t") {
			errs = append(errs, field.Invalid(path.Child("paths").Index(i), p, "must start with '/', hold no '?', '#' or spaces, and hold '*' only as its last character (a prefix match)"))
		}
	}
	for i, method := range m.Methods {
		switch method {
		case "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE":
		default:
			errs = append(errs, field.NotSupported(path.Child("methods").Index(i), method,
				[]string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"}))
		}
	}
	for i, h := range m.Headers {
		if !validHeaderName(string(h.Name)) {
			errs = append(errs, field.Invalid(path.Child("headers").Index(i).Child("name"), h.Name, "must be an HTTP header name"))
		}
	}
	return append(errs, validateDescriptorMatch(m, path)...)
}

// validateDescriptorMatch repeats the schema's rules on match.domain and
// match.descriptor.
func validateDescriptorMatch(m *ratelimitv1alpha1.RequestMatch, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if m.Domain == "" && len(m.Descriptor) == 0 {
		return nil
	}
	if len(m.Hosts) > 0 || len(m.Paths) > 0 || len(m.Methods) > 0 || len(m.Headers) > 0 || len(m.ExemptClients) > 0 {
		errs = append(errs, field.Invalid(path, "", "hosts, paths, methods, headers and exemptClients select HTTP checks; a descriptor policy (domain or descriptor set) answers Envoy rate limit service requests, which carry none of them"))
	}
	if len(m.Domain) > 253 {
		errs = append(errs, field.TooLong(path.Child("domain"), m.Domain, 253))
	}
	if len(m.Descriptor) > maxDescriptorMatch {
		errs = append(errs, field.TooMany(path.Child("descriptor"), len(m.Descriptor), maxDescriptorMatch))
	}
	for i, e := range m.Descriptor {
		ep := path.Child("descriptor").Index(i)
		switch {
		case e.Key == "":
			errs = append(errs, field.Required(ep.Child("key"), "the entry's key, such as remote_address or generic_key"))
		case len(e.Key) > 256:
			errs = append(errs, field.TooLong(ep.Child("key"), e.Key, 256))
		}
		if e.Value != nil && len(*e.Value) > 1024 {
			errs = append(errs, field.TooLong(ep.Child("value"), *e.Value, 1024))
		}
	}
	return errs
}

// checkTargets repeats the schema's rules on targetRefs, and refuses a
// policy with targets that come without their resolved routes.
func checkTargets(spec *ratelimitv1alpha1.RateLimitPolicySpec, routes *Routes, path *field.Path) field.ErrorList {
	if len(spec.TargetRefs) == 0 {
		return nil
	}
	var errs field.ErrorList
	tp := path.Child("targetRefs")
	for i, t := range spec.TargetRefs {
		if t.Group != "gateway.networking.k8s.io" || (t.Kind != "HTTPRoute" && t.Kind != "Gateway") {
			errs = append(errs, field.Invalid(tp.Index(i), string(t.Group)+"/"+string(t.Kind), "targetRefs name HTTPRoutes or Gateways of group gateway.networking.k8s.io"))
		}
	}
	m := &spec.Match
	if len(m.Hosts) > 0 || len(m.Paths) > 0 || len(m.Methods) > 0 || m.Domain != "" || len(m.Descriptor) > 0 {
		errs = append(errs, field.Invalid(path.Child("match"), "", "a policy with targetRefs takes its hosts, paths and methods from its targets, and answers HTTP checks only: match may narrow it with headers and when only"))
	}
	if routes == nil {
		errs = append(errs, field.Invalid(tp, "", "targets are resolved from the cluster's Gateways and HTTPRoutes by the controller; local mode has none, so use match.hosts and match.paths there"))
	}
	return errs
}

// maxDescriptorMatch bounds match.descriptor, as the schema does.
const maxDescriptorMatch = 16

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
