package policy

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// compileLimits compiles a policy's limits and describes them for the
// summary. cost is the policy's cost, which no limit may make impossible.
func compileLimits(limits []ratelimitv1alpha1.Limit, cost int64, policyMode ratelimitv1alpha1.Mode, specPath *field.Path) ([]Limit, string, field.ErrorList) {
	limitsPath := specPath.Child("limits")
	var errs field.ErrorList
	if len(limits) == 0 {
		errs = append(errs, field.Required(limitsPath, "at least one limit is needed"))
	}
	var (
		out     []Limit
		summary []string
		seen    = map[ratelimitv1alpha1.LimitName]bool{}
	)
	for i := range limits {
		l := &limits[i]
		lp := limitsPath.Index(i)
		errs = append(errs, checkLimitName(l.Name, seen, lp.Child("name"))...)
		compiled, desc, lerrs := compileLimit(l, lp)
		errs = append(errs, lerrs...)
		if len(lerrs) > 0 {
			continue
		}
		if cost > compiled.Limit.Capacity {
			errs = append(errs, field.Invalid(specPath.Child("cost"), cost,
				fmt.Sprintf("must not exceed limit %q's capacity %d: such a request could never be allowed", l.Name, compiled.Limit.Capacity)))
		}
		compiled.Mode, compiled.Hidden = LimitModeOf(l.Mode, policyMode), l.Visibility == ratelimitv1alpha1.VisibilityHidden
		out = append(out, compiled)
		summary = append(summary, string(l.Name)+"="+desc+modeSummary(l))
	}
	return out, strings.Join(summary, " "), errs
}

// checkDebt reports the limits of a policy with charge Always whose state,
// up to one capacity in debt, would not stay within the engine's exact
// arithmetic (only bucket algorithms with extreme periods: refilling twice
// the capacity takes over 71 years).
func checkDebt(limits []Limit, specPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i := range limits {
		if limits[i].Limit.Algorithm == ratelimit.Concurrency {
			continue // refused with charge Always: checkInFlightPolicy
		}
		if err := limits[i].Limit.ValidateDebt(); err != nil {
			errs = append(errs, field.Invalid(specPath.Child("limits").Index(i), limits[i].Name,
				fmt.Sprintf("too large for charge Always (%v): use a shorter period or a smaller capacity, or charge Admitted", err)))
		}
	}
	return errs
}

// checkLimitName reports a name that is not a DNS label or that an earlier
// limit of the policy took (recorded in seen).
func checkLimitName(name ratelimitv1alpha1.LimitName, seen map[ratelimitv1alpha1.LimitName]bool, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if seen[name] {
		errs = append(errs, field.Duplicate(path, name))
	}
	seen[name] = true
	if len(validation.IsDNS1123Label(string(name))) > 0 {
		errs = append(errs, field.Invalid(path, name, "must be a DNS label: lower-case letters, digits and '-', starting and ending with a letter or digit"))
	}
	return errs
}

// algorithm is one of a Limit's algorithm fields: its JSON name, and how
// it compiles when set (ok false when the field is not set).
type algorithm struct {
	name    string
	compile func(l *ratelimitv1alpha1.Limit, path *field.Path, n *numbers) (lim ratelimit.Limit, desc string, ok bool)
}

// algorithms are the Limit's algorithm fields in the API's order.
var algorithms = []algorithm{
	{ratelimitv1alpha1.AlgorithmTokenBucket, compileTokenBucket},
	{ratelimitv1alpha1.AlgorithmFixedWindow, compileFixedWindow},
	windowAlgorithm(ratelimitv1alpha1.AlgorithmSlidingWindowLog, ratelimit.SlidingWindowLog,
		func(l *ratelimitv1alpha1.Limit) *ratelimitv1alpha1.WindowLimit { return l.SlidingWindowLog }),
	windowAlgorithm(ratelimitv1alpha1.AlgorithmSlidingWindowCounter, ratelimit.SlidingWindowCounter,
		func(l *ratelimitv1alpha1.Limit) *ratelimitv1alpha1.WindowLimit { return l.SlidingWindowCounter }),
	{ratelimitv1alpha1.AlgorithmLeakyBucket, compileLeakyBucket},
	{ratelimitv1alpha1.AlgorithmGCRA, compileGCRA},
	{ratelimitv1alpha1.AlgorithmCalendar, compileCalendar},
	{ratelimitv1alpha1.AlgorithmConcurrency, compileConcurrency},
}

// exactlyOneAlgorithm is the message for a limit with no algorithm or
// several: "exactly one algorithm must be set: tokenBucket, ... or gcra".
var exactlyOneAlgorithm = func() string {
	names := make([]string, len(algorithms))
	for i, a := range algorithms {
		names[i] = a.name
	}
	last := len(names) - 1
	return "exactly one algorithm must be set: " + strings.Join(names[:last], ", ") + " or " + names[last]
}()

// compileLimit converts one API limit into the engine's terms and a short
// description for the summary.
func compileLimit(l *ratelimitv1alpha1.Limit, path *field.Path) (Limit, string, field.ErrorList) {
	out := Limit{Name: string(l.Name)}
	var (
		n      numbers
		desc   string
		chosen int
	)
	for _, a := range algorithms {
		if lim, d, ok := a.compile(l, path.Child(a.name), &n); ok {
			chosen++
			out.Limit, desc = lim, d
		}
	}
	errs := n.errs
	if chosen != 1 {
		return out, "", append(errs, field.Invalid(path, string(l.Name), exactlyOneAlgorithm))
	}
	if len(errs) > 0 {
		return out, "", errs
	}
	if l.Concurrency != nil {
		out.Holder = l.Concurrency.Holder
	}
	if err := out.Limit.Validate(); err != nil {
		return out, "", field.ErrorList{field.Invalid(path, string(l.Name), "the numbers are beyond what the engine counts exactly: "+err.Error())}
	}
	return out, desc, nil
}

func compileTokenBucket(l *ratelimitv1alpha1.Limit, p *field.Path, n *numbers) (ratelimit.Limit, string, bool) {
	tb := l.TokenBucket
	if tb == nil {
		return ratelimit.Limit{}, "", false
	}
	lim := ratelimit.Limit{Algorithm: ratelimit.TokenBucket,
		Capacity: n.count(p.Child("capacity"), tb.Capacity),
		Rate:     n.count(p.Child("refillRate"), tb.RefillRate),
		Interval: n.duration(p.Child("refillInterval"), tb.RefillInterval, "")}
	return lim, fmt.Sprintf("%s(%d,+%d/%s)", ratelimitv1alpha1.AlgorithmTokenBucket, tb.Capacity, tb.RefillRate, tb.RefillInterval), true
}

// compileFixedWindow: alignment Clock is the engine's FixedWindowClock,
// FirstRequest (the default) its FixedWindow.
func compileFixedWindow(l *ratelimitv1alpha1.Limit, p *field.Path, n *numbers) (ratelimit.Limit, string, bool) {
	w := l.FixedWindow
	if w == nil {
		return ratelimit.Limit{}, "", false
	}
	lim := windowLimit(ratelimit.FixedWindow, w, p, n)
	if w.Alignment == ratelimitv1alpha1.WindowAlignmentClock {
		lim.Algorithm = ratelimit.FixedWindowClock
	}
	return lim, fixedWindowSummary(w), true
}

// fixedWindowSummary describes a fixed window for the policy's summary,
// e.g. "fixedWindow(100/1m,clock)".
func fixedWindowSummary(w *ratelimitv1alpha1.WindowLimit) string {
	if w.Alignment == ratelimitv1alpha1.WindowAlignmentClock {
		return fmt.Sprintf("%s(%d/%s,clock)", ratelimitv1alpha1.AlgorithmFixedWindow, w.Limit, w.Window)
	}
	return fmt.Sprintf("%s(%d/%s)", ratelimitv1alpha1.AlgorithmFixedWindow, w.Limit, w.Window)
}

// windowAlgorithm is a sliding window: a WindowLimit whose alignment the
// schema forbids.
func windowAlgorithm(name string, alg ratelimit.Algorithm, get func(*ratelimitv1alpha1.Limit) *ratelimitv1alpha1.WindowLimit) algorithm {
	return algorithm{name, func(l *ratelimitv1alpha1.Limit, p *field.Path, n *numbers) (ratelimit.Limit, string, bool) {
		w := get(l)
		if w == nil {
			return ratelimit.Limit{}, "", false
		}
		return windowLimit(alg, w, p, n), fmt.Sprintf("%s(%d/%s)", name, w.Limit, w.Window), true
	}}
}

func windowLimit(alg ratelimit.Algorithm, w *ratelimitv1alpha1.WindowLimit, p *field.Path, n *numbers) ratelimit.Limit {
	return ratelimit.Limit{Algorithm: alg,
		Capacity: n.count(p.Child("limit"), w.Limit),
		Interval: n.duration(p.Child("window"), w.Window, "")}
}

func compileLeakyBucket(l *ratelimitv1alpha1.Limit, p *field.Path, n *numbers) (ratelimit.Limit, string, bool) {
	lb := l.LeakyBucket
	if lb == nil {
		return ratelimit.Limit{}, "", false
	}
	lim := ratelimit.Limit{Algorithm: ratelimit.LeakyBucket,
		Capacity: n.count(p.Child("capacity"), lb.Capacity),
		Rate:     n.count(p.Child("leakRate"), lb.LeakRate),
		Interval: n.duration(p.Child("leakInterval"), lb.LeakInterval, "1s")}
	return lim, fmt.Sprintf("%s(%d,-%d/%s)", ratelimitv1alpha1.AlgorithmLeakyBucket, lb.Capacity, lb.LeakRate, lim.Interval), true
}

func compileGCRA(l *ratelimitv1alpha1.Limit, p *field.Path, n *numbers) (ratelimit.Limit, string, bool) {
	g := l.GCRA
	if g == nil {
		return ratelimit.Limit{}, "", false
	}
	lim := ratelimit.Limit{Algorithm: ratelimit.GCRA,
		Capacity: n.count(p.Child("burst"), g.Burst),
		Rate:     n.count(p.Child("rate"), g.Rate),
		Interval: n.duration(p.Child("period"), g.Period, "")}
	return lim, fmt.Sprintf("%s(%d/%s,burst %d)", ratelimitv1alpha1.AlgorithmGCRA, g.Rate, g.Period, g.Burst), true
}

// numbers reads a limit's counts and durations, collecting those out of
// the engine's range.
type numbers struct{ errs field.ErrorList }

func (n *numbers) count(p *field.Path, c ratelimitv1alpha1.Count) int64 {
	if c < 1 || c > ratelimit.MaxCount {
		n.errs = append(n.errs, field.Invalid(p, c, fmt.Sprintf("must be from 1 to %d", ratelimit.MaxCount)))
	}
	return int64(c)
}

// duration parses d, or def when d is empty.
func (n *numbers) duration(p *field.Path, d ratelimitv1alpha1.Duration, def string) time.Duration {
	s := string(d)
	if s == "" {
		s = def
	}
	v, err := time.ParseDuration(s)
	switch {
	case err != nil || !durationPattern.MatchString(s):
		n.errs = append(n.errs, field.Invalid(p, s, "must be a duration such as 500ms, 1s, 1m30s or 24h"))
	case v < time.Millisecond || v > 8784*time.Hour:
		n.errs = append(n.errs, field.Invalid(p, s, "must be between 1ms and 8784h (366 days)"))
	}
	return v
}

// LimitModeOf is the one rule of a limit's mode: its own mode when set,
// else its policy's (spec.mode, Enforce when unset).
func LimitModeOf(own ratelimitv1alpha1.LimitMode, policyMode ratelimitv1alpha1.Mode) ratelimitv1alpha1.LimitMode {
	switch {
	case own != "":
		return own
	case policyMode == ratelimitv1alpha1.ModeShadow:
		return ratelimitv1alpha1.LimitModeShadow
	}
	return ratelimitv1alpha1.LimitModeEnforce
}

// modeSummary is what the summary adds for a limit's own mode and
// visibility, "" for a limit that sets neither (the summary of every
// policy written before limits had them is unchanged).
func modeSummary(l *ratelimitv1alpha1.Limit) string {
	var s string
	if l.Mode != "" {
		s += ":" + string(l.Mode)
	}
	if l.Visibility == ratelimitv1alpha1.VisibilityHidden {
		s += ":" + string(l.Visibility)
	}
	return s
}
