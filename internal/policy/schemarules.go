package policy

import (
	"errors"
	"regexp"
	"slices"
	"strings"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

// ValidateSpec checks spec against the CRD schema's rules that Compile
// leaves to the schema: their copy in Go, for specs that no API server and
// no schema validator (internal/crdschema) have checked, the middleware's,
// which must not carry the API server's libraries. The parity test of
// internal/policyfiles holds it, with Compile, equal to the schema case by
// case (test/cel's cases).
func ValidateSpec(spec *ratelimitv1alpha1.RateLimitPolicySpec) field.ErrorList {
	path := field.NewPath("spec")
	errs := checkEnums(spec, path)
	errs = append(errs, validateMatch(&spec.Match, path.Child("match"))...)
	errs = append(errs, validateTargets(spec, path)...)
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

// maxLimits bounds a policy's limits, as the schema does.
const maxLimits = 8

// alignmentFixedWindowOnly is the schema's message for an alignment on a
// sliding window.
const alignmentFixedWindowOnly = "alignment is fixedWindow's only: a sliding window ends now, and slidingWindowCounter's windows are always aligned to the clock"

// validateLimits is the schema's rules on spec.limits that the engine
// does not need: how many, and the windows' alignment.
func validateLimits(limits []ratelimitv1alpha1.Limit, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(limits) > maxLimits {
		errs = append(errs, field.TooMany(path, len(limits), maxLimits))
	}
	for i := range limits {
		l := &limits[i]
		if l.FixedWindow != nil {
			errs = checkEnum(errs, path.Index(i).Child(ratelimitv1alpha1.AlgorithmFixedWindow, "alignment"), l.FixedWindow.Alignment,
				ratelimitv1alpha1.WindowAlignmentFirstRequest, ratelimitv1alpha1.WindowAlignmentClock)
		}
		if w := l.SlidingWindowLog; w != nil && w.Alignment != "" {
			errs = append(errs, field.Forbidden(path.Index(i).Child(ratelimitv1alpha1.AlgorithmSlidingWindowLog, "alignment"), alignmentFixedWindowOnly))
		}
		if w := l.SlidingWindowCounter; w != nil && w.Alignment != "" {
			errs = append(errs, field.Forbidden(path.Index(i).Child(ratelimitv1alpha1.AlgorithmSlidingWindowCounter, "alignment"), alignmentFixedWindowOnly))
		}
	}
	return errs
}

func checkEnums(spec *ratelimitv1alpha1.RateLimitPolicySpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = checkEnum(errs, path.Child("onMissingKey"), spec.OnMissingKey,
		ratelimitv1alpha1.OnMissingKeySkip, ratelimitv1alpha1.OnMissingKeyDeny, ratelimitv1alpha1.OnMissingKeyShared)
	errs = checkEnum(errs, path.Child("mode"), spec.Mode, ratelimitv1alpha1.ModeEnforce, ratelimitv1alpha1.ModeShadow)
	errs = checkEnum(errs, path.Child("failureMode"), spec.FailureMode, ratelimitv1alpha1.FailureModeOpen, ratelimitv1alpha1.FailureModeClosed)
	errs = checkEnum(errs, path.Child("charge"), spec.Charge, ratelimitv1alpha1.ChargeAdmitted, ratelimitv1alpha1.ChargeAlways)
	return checkEnum(errs, path.Child("response", "headers"), spec.Response.Headers,
		ratelimitv1alpha1.HeaderStyleIETF, ratelimitv1alpha1.HeaderStyleLegacy, ratelimitv1alpha1.HeaderStyleBoth, ratelimitv1alpha1.HeaderStyleNone)
}

// checkEnum reports got unless it is empty (the default applies) or one
// of allowed.
func checkEnum[T ~string](errs field.ErrorList, path *field.Path, got T, allowed ...T) field.ErrorList {
	if got == "" || slices.Contains(allowed, got) {
		return errs
	}
	return append(errs, field.NotSupported(path, string(got), allowed))
}

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

// maxDescriptorMatch bounds match.descriptor, as the schema does.
const maxDescriptorMatch = 16
