package policy

import (
	"fmt"
	"math"
	"slices"
	"strconv"
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

	// Header values that never change for this limit, rendered once here
	// rather than for every answer. Each slice has capacity 1, so a
	// handler that appends to a header cannot write into a shared array.
	QuotaID      string   // `"<policy>/<limit>"`, the IETF headers' identifier
	PolicyHeader []string // RateLimit-Policy: `"<policy>/<limit>";q=<quota>;w=<seconds>`
	LimitHeader  []string // X-RateLimit-Limit: the quota
}

// Compile turns a spec into a Policy. Every problem is reported, each
// naming its field (such as "spec.limits[1].gcra.period"), so a person can
// fix them all at once. The API server's schema already rejects most
// mistakes; Compile checks what only code can: the key template's
// placeholders, the CEL `when` expression and the engine's numeric bounds.
func Compile(namespace, name string, spec *ratelimitv1alpha1.RateLimitPolicySpec) (*Policy, error) {
	specPath := field.NewPath("spec")
	var errs field.ErrorList
	p := &Policy{
		Namespace:    namespace,
		Name:         name,
		OnMissingKey: spec.OnMissingKey,
		Cost:         int64(spec.Cost),
		Shadow:       spec.Mode == ratelimitv1alpha1.ModeShadow,
		FailClosed:   spec.FailureMode == ratelimitv1alpha1.FailureModeClosed,
		HeaderStyle:  spec.Response.Headers,
	}
	// Files in local mode are not defaulted by an API server: apply the
	// schema's defaults here so both sources mean the same.
	if p.OnMissingKey == "" {
		p.OnMissingKey = ratelimitv1alpha1.OnMissingKeySkip
	}
	if p.Cost == 0 {
		p.Cost = 1
	}
	if p.HeaderStyle == "" {
		p.HeaderStyle = ratelimitv1alpha1.HeaderStyleBoth
	}
	errs = append(errs, checkEnums(spec, specPath)...)

	keySrc := spec.Key
	if keySrc == "" {
		keySrc = "{client_ip}"
	}
	key, err := parseKeyTemplate(keySrc)
	if err != nil {
		errs = append(errs, field.Invalid(specPath.Child("key"), keySrc, err.Error()))
	}
	p.key = key

	p.match = compileMatch(&spec.Match)
	errs = append(errs, validateMatch(&spec.Match, specPath.Child("match"))...)
	if spec.Match.When != "" {
		w, err := compileWhen(spec.Match.When)
		if err != nil {
			errs = append(errs, field.Invalid(specPath.Child("match", "when"), spec.Match.When, err.Error()))
		}
		p.match.when = w
	}

	if spec.Response.DenyStatus != nil {
		status := int(*spec.Response.DenyStatus)
		if status < 400 || status > 599 {
			errs = append(errs, field.Invalid(specPath.Child("response", "denyStatus"), status, "must be an HTTP error status from 400 to 599"))
		}
		p.DenyStatus = status
	}

	limitsPath := specPath.Child("limits")
	switch n := len(spec.Limits); {
	case n == 0:
		errs = append(errs, field.Required(limitsPath, "at least one limit is needed"))
	case n > 8:
		errs = append(errs, field.TooMany(limitsPath, n, 8))
	}
	seen := map[string]bool{}
	var summary []string
	for i := range spec.Limits {
		l := &spec.Limits[i]
		lp := limitsPath.Index(i)
		if seen[string(l.Name)] {
			errs = append(errs, field.Duplicate(lp.Child("name"), l.Name))
		}
		seen[string(l.Name)] = true
		if !isDNSLabel(string(l.Name)) {
			errs = append(errs, field.Invalid(lp.Child("name"), l.Name, "must be a DNS label: lower-case letters, digits and '-', starting and ending with a letter or digit"))
		}
		compiled, desc, lerrs := compileLimit(l, lp)
		errs = append(errs, lerrs...)
		if len(lerrs) > 0 {
			continue
		}
		if p.Cost > compiled.Limit.Capacity {
			errs = append(errs, field.Invalid(specPath.Child("cost"), p.Cost,
				fmt.Sprintf("must not exceed limit %q's capacity %d: such a request could never be allowed", l.Name, compiled.Limit.Capacity)))
		}
		compiled.renderHeaders(name)
		p.Limits = append(p.Limits, compiled)
		summary = append(summary, string(l.Name)+"="+desc)
	}
	p.Summary = strings.Join(summary, " ")

	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return p, nil
}

func checkEnums(spec *ratelimitv1alpha1.RateLimitPolicySpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = checkEnum(errs, path.Child("onMissingKey"), spec.OnMissingKey,
		ratelimitv1alpha1.OnMissingKeySkip, ratelimitv1alpha1.OnMissingKeyDeny, ratelimitv1alpha1.OnMissingKeyShared)
	errs = checkEnum(errs, path.Child("mode"), spec.Mode, ratelimitv1alpha1.ModeEnforce, ratelimitv1alpha1.ModeShadow)
	errs = checkEnum(errs, path.Child("failureMode"), spec.FailureMode, ratelimitv1alpha1.FailureModeOpen, ratelimitv1alpha1.FailureModeClosed)
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
		host := strings.TrimPrefix(string(h), "*.")
		if host == "" || strings.ContainsAny(host, "*/: ") {
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
	return errs
}

// compileLimit converts one API limit into the engine's terms and a short
// description for the summary.
func compileLimit(l *ratelimitv1alpha1.Limit, path *field.Path) (Limit, string, field.ErrorList) {
	var (
		errs   field.ErrorList
		out    = Limit{Name: string(l.Name)}
		desc   string
		chosen int
	)
	duration := func(p *field.Path, d ratelimitv1alpha1.Duration, def string) time.Duration {
		s := string(d)
		if s == "" {
			s = def
		}
		v, err := time.ParseDuration(s)
		switch {
		case err != nil || s == "":
			errs = append(errs, field.Invalid(p, s, "must be a duration such as 500ms, 1s, 1m30s or 24h"))
		case v < time.Millisecond || v > 8784*time.Hour:
			errs = append(errs, field.Invalid(p, s, "must be between 1ms and 8784h (366 days)"))
		}
		return v
	}
	count := func(p *field.Path, c ratelimitv1alpha1.Count) int64 {
		if c < 1 || c > ratelimit.MaxCount {
			errs = append(errs, field.Invalid(p, c, fmt.Sprintf("must be from 1 to %d", ratelimit.MaxCount)))
		}
		return int64(c)
	}
	if tb := l.TokenBucket; tb != nil {
		chosen++
		p := path.Child("tokenBucket")
		out.Limit = ratelimit.Limit{Algorithm: ratelimit.TokenBucket,
			Capacity: count(p.Child("capacity"), tb.Capacity),
			Rate:     count(p.Child("refillRate"), tb.RefillRate),
			Interval: duration(p.Child("refillInterval"), tb.RefillInterval, "")}
		desc = fmt.Sprintf("tokenBucket(%d,+%d/%s)", tb.Capacity, tb.RefillRate, tb.RefillInterval)
	}
	windows := []struct {
		name string
		w    *ratelimitv1alpha1.WindowLimit
		alg  ratelimit.Algorithm
	}{
		{"fixedWindow", l.FixedWindow, ratelimit.FixedWindow},
		{"slidingWindowLog", l.SlidingWindowLog, ratelimit.SlidingWindowLog},
		{"slidingWindowCounter", l.SlidingWindowCounter, ratelimit.SlidingWindowCounter},
	}
	for _, w := range windows {
		if w.w == nil {
			continue
		}
		chosen++
		p := path.Child(w.name)
		out.Limit = ratelimit.Limit{Algorithm: w.alg,
			Capacity: count(p.Child("limit"), w.w.Limit),
			Interval: duration(p.Child("window"), w.w.Window, "")}
		desc = fmt.Sprintf("%s(%d/%s)", w.name, w.w.Limit, w.w.Window)
	}
	if lb := l.LeakyBucket; lb != nil {
		chosen++
		p := path.Child("leakyBucket")
		out.Limit = ratelimit.Limit{Algorithm: ratelimit.LeakyBucket,
			Capacity: count(p.Child("capacity"), lb.Capacity),
			Rate:     count(p.Child("leakRate"), lb.LeakRate),
			Interval: duration(p.Child("leakInterval"), lb.LeakInterval, "1s")}
		desc = fmt.Sprintf("leakyBucket(%d,-%d/%s)", lb.Capacity, lb.LeakRate, out.Limit.Interval)
	}
	if g := l.GCRA; g != nil {
		chosen++
		p := path.Child("gcra")
		out.Limit = ratelimit.Limit{Algorithm: ratelimit.GCRA,
			Capacity: count(p.Child("burst"), g.Burst),
			Rate:     count(p.Child("rate"), g.Rate),
			Interval: duration(p.Child("period"), g.Period, "")}
		desc = fmt.Sprintf("gcra(%d/%s,burst %d)", g.Rate, g.Period, g.Burst)
	}
	if chosen != 1 {
		errs = append(errs, field.Invalid(path, string(l.Name),
			"exactly one algorithm must be set: tokenBucket, fixedWindow, slidingWindowLog, slidingWindowCounter, leakyBucket or gcra"))
		return out, "", errs
	}
	if len(errs) > 0 {
		return out, "", errs
	}
	if err := out.Limit.Validate(); err != nil {
		errs = append(errs, field.Invalid(path, string(l.Name), "the numbers are beyond what the engine counts exactly: "+err.Error()))
		return out, "", errs
	}
	out.Window = quotaWindow(out.Limit)
	return out, desc, nil
}

// renderHeaders fills the limit's constant header values.
func (l *Limit) renderHeaders(policyName string) {
	l.QuotaID = strconv.Quote(policyName + "/" + l.Name)
	w := int64(math.Ceil(l.Window.Seconds()))
	if w < 1 {
		w = 1
	}
	l.PolicyHeader = []string{l.QuotaID + ";q=" + strconv.FormatInt(l.Limit.Capacity, 10) + ";w=" + strconv.FormatInt(w, 10)}
	l.LimitHeader = []string{strconv.FormatInt(l.Limit.Capacity, 10)}
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

func isDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (c != '-' || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}

// String names the policy as namespace/name.
func (p *Policy) String() string { return p.Namespace + "/" + p.Name }

// KeyTemplate returns the key template's source text.
func (p *Policy) KeyTemplate() string { return p.key.source }

// Global reports whether the key has no placeholder: one bucket for all.
func (p *Policy) Global() bool { return !p.key.dynamic }
