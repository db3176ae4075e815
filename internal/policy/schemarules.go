package policy

import (
	"errors"
	"regexp"
	"strings"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/schemavalues"
)

// ValidateSpec checks spec against the CRD schema's rules that Compile
// leaves to the schema, for specs that no API server and no schema
// validator (internal/crdschema) have checked: the middleware's, which
// must not carry the API server's libraries. The schema's value rules
// (types, patterns, enums, lengths, bounds, list sizes, sets) are read from
// the generated CRD itself (internal/schemavalues); its CEL rules are
// repeated here in Go. The parity test of internal/policyfiles holds both,
// with Compile, equal to the API server case by case (test/cel's cases).
func ValidateSpec(spec *ratelimitv1alpha1.RateLimitPolicySpec) field.ErrorList {
	path := field.NewPath("spec")
	errs := schemavalues.PolicySpec(spec)
	errs = append(errs, validateMatch(&spec.Match, path.Child("match"))...)
	errs = append(errs, validateTargets(spec, path)...)
	errs = append(errs, validateReserve(spec, path)...)
	errs = append(errs, validateLimitModes(spec, path)...)
	return append(errs, validateLimits(spec.Limits, path.Child("limits"))...)
}

// ValidateAndCompile is ValidateSpec, then Compile, every error of both
// reported at once: for a spec nothing has checked against the schema.
func ValidateAndCompile(namespace, name string, spec *ratelimitv1alpha1.RateLimitPolicySpec) (*Policy, error) {
	errs := ValidateSpec(spec)
	p, err := Compile(namespace, name, spec)
	if len(errs) == 0 {
		return p, err
	}
	var compileErrs utilerrors.Aggregate
	if err != nil && !errors.As(err, &compileErrs) {
		return nil, errors.Join(errs.ToAggregate(), err)
	}
	if compileErrs != nil {
		for _, e := range compileErrs.Errors() {
			if fe, ok := e.(*field.Error); ok {
				errs = append(errs, fe)
			}
		}
	}
	return nil, errs.ToAggregate()
}

// The schema's patterns (the markers of api/v1alpha1's shared types).
var (
	durationPattern = regexp.MustCompile(`^([0-9]{1,5}(h|m|s|ms)){1,4}$`)
	hostPattern     = regexp.MustCompile(`^([*][.])?[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?([.][a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?)*$`)
)

// alignmentFixedWindowOnly is the schema's message for an alignment on a
// sliding window.
const alignmentFixedWindowOnly = "alignment is fixedWindow's only: a sliding window ends now, and slidingWindowCounter's windows are always aligned to the clock"

// validateLimits is the schema's rules on spec.limits that the engine
// does not need: how many, and the windows' alignment.
func validateLimits(limits []ratelimitv1alpha1.Limit, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i := range limits {
		l := &limits[i]
		if w := l.SlidingWindowLog; w != nil && w.Alignment != "" {
			errs = append(errs, field.Forbidden(path.Index(i).Child(ratelimitv1alpha1.AlgorithmSlidingWindowLog, "alignment"), alignmentFixedWindowOnly))
		}
		if w := l.SlidingWindowCounter; w != nil && w.Alignment != "" {
			errs = append(errs, field.Forbidden(path.Index(i).Child(ratelimitv1alpha1.AlgorithmSlidingWindowCounter, "alignment"), alignmentFixedWindowOnly))
		}
	}
	return errs
}

// pathSpaces are the characters of the schema's [[:space:]], which a
// path may not hold.
const pathSpaces = " \t\n\v\f\r"

// validateMatch is the schema's rules on spec.match (see ValidateSpec).
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
		if !strings.HasPrefix(s, "/") || (star >= 0 && star != len(s)-1) || strings.ContainsAny(s, "?#"+pathSpaces) {
			errs = append(errs, field.Invalid(path.Child("paths").Index(i), p, "must start with '/', hold no '?', '#' or spaces, and hold '*' only as its last character (a prefix match)"))
		}
	}
	for i, h := range m.Headers {
		if !validHeaderName(string(h.Name)) {
			errs = append(errs, field.Invalid(path.Child("headers").Index(i).Child("name"), h.Name, "must be an HTTP header name"))
		}
	}
	return append(errs, validateDescriptorMatch(m, path)...)
}

// validateDescriptorMatch is the schema's rules on match.domain and
// match.descriptor (see ValidateSpec).
func validateDescriptorMatch(m *ratelimitv1alpha1.RequestMatch, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if m.Domain == "" && len(m.Descriptor) == 0 {
		return nil
	}
	if len(m.Hosts) > 0 || len(m.Paths) > 0 || len(m.Methods) > 0 || len(m.Headers) > 0 || len(m.ExemptClients) > 0 {
		errs = append(errs, field.Invalid(path, "", "hosts, paths, methods, headers and exemptClients select HTTP checks; a descriptor policy (domain or descriptor set) answers Envoy rate limit service requests, which carry none of them"))
	}
	return errs
}

// validateTargets is the schema's rules on targetRefs (see ValidateSpec).
func validateTargets(spec *ratelimitv1alpha1.RateLimitPolicySpec, path *field.Path) field.ErrorList {
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
	return errs
}

// validateReserve is the schema's rules on charge Reserve and spec.reserve
// (see ValidateSpec): they go together; a descriptor policy's holder is an
// entry of match.descriptor that the key leaves out, an HTTP policy's is
// unset; pricing is weights or an expression. (No lease and no
// concurrency limit: compileLease and checkInFlightPolicy; every limit
// enforces: validateLimitModes.)
func validateReserve(spec *ratelimitv1alpha1.RateLimitPolicySpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	reserve := spec.Charge == ratelimitv1alpha1.ChargeReserve
	switch {
	case reserve && spec.Reserve == nil:
		return field.ErrorList{field.Invalid(path.Child("charge"), spec.Charge, "charge Reserve needs reserve: the holder (descriptor policies), ttl and max of a request's reservation")}
	case !reserve && spec.Reserve != nil:
		return field.ErrorList{field.Invalid(path.Child("reserve"), "", "reserve is for charge Reserve only: set charge: Reserve, or remove reserve")}
	case spec.Reserve == nil:
		return nil
	}
	r, hp := spec.Reserve, path.Child("reserve", "holder")
	if m := &spec.Match; m.Domain != "" || len(m.Descriptor) > 0 {
		if r.Holder == "" || !listsEntry(m.Descriptor, r.Holder) || spec.Key == "" ||
			strings.Contains(spec.Key, "{descriptor}") || strings.Contains(spec.Key, "{descriptor:"+r.Holder+"}") {
			errs = append(errs, field.Invalid(hp, r.Holder, reserveHolderRule))
		}
	} else if r.Holder != "" {
		errs = append(errs, field.Invalid(hp, r.Holder, reserveHolderRule))
	}
	if pr := r.Pricing; pr != nil && pr.Expression != "" && (pr.InputTokens != nil || pr.OutputTokens != nil || pr.CachedInputTokens != nil) {
		errs = append(errs, field.Invalid(path.Child("reserve", "pricing"), "", "pricing is weights or an expression, not both"))
	}
	return errs
}

// reserveHolderRule is the schema's message on reserve.holder.
const reserveHolderRule = "reserve.holder of a descriptor policy names an entry of match.descriptor (such as Envoy's x-request-id) that the key leaves out (set a key without {descriptor} or {descriptor:<holder>}, so the bucket is shared by the requests it counts); an HTTP policy sets no holder: the middleware and POST /v1/check hold per request"

// The schema's messages on limits of their own mode Shadow or Soft.
const (
	leaseNeedsEnforce   = "a lease cannot serve a limit in mode Shadow or Soft: such a limit is decided by Redis with every request; remove the lease or enforce the limit"
	reserveNeedsEnforce = "charge Reserve needs every limit to enforce: a Shadow or Soft limit lets a request go on over it holding no reservation, so its settlement could not be counted there; use spec.mode Shadow for a trial of the whole budget"
)

// validateLimitModes is the schema's rules on limits that never deny (their
// own mode Shadow or Soft): a lease cannot serve them (the lease sends a
// request with such a limit to Redis), and charge Reserve cannot count
// them (the engine reserves only for a limit that admitted the request).
func validateLimitModes(spec *ratelimitv1alpha1.RateLimitPolicySpec, path *field.Path) field.ErrorList {
	enforced := true
	for i := range spec.Limits {
		if m := spec.Limits[i].Mode; m != "" && m != ratelimitv1alpha1.LimitModeEnforce {
			enforced = false
		}
	}
	if enforced {
		return nil
	}
	var errs field.ErrorList
	if spec.Lease != nil {
		errs = append(errs, field.Invalid(path.Child("lease"), "", leaseNeedsEnforce))
	}
	if spec.Charge == ratelimitv1alpha1.ChargeReserve {
		errs = append(errs, field.Invalid(path.Child("limits"), "", reserveNeedsEnforce))
	}
	return errs
}
