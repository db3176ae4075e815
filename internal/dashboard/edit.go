package dashboard

import (
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

// applyEdits sets the edited numbers on spec. It only converts the
// inputs' text: whether the numbers make a valid policy is for the
// folder's Edit to say (the CRD schema, then policy.Compile), which names
// each field at fault the same way.
func applyEdits(spec *ratelimitv1alpha1.RateLimitPolicySpec, edits []LimitEdit) error {
	var errs field.ErrorList
	limitsPath := field.NewPath("spec", "limits")
	for _, e := range edits {
		i := limitIndex(spec, e.Name)
		if i < 0 {
			errs = append(errs, field.NotFound(limitsPath, e.Name))
			continue
		}
		l := &spec.Limits[i]
		alg, targets := limitFields(l)
		p := limitsPath.Index(i).Child(alg)
		for name, raw := range e.Params {
			t, ok := targets[name]
			if !ok {
				errs = append(errs, field.NotSupported(p.Child(name), name, sortedKeys(targets)))
				continue
			}
			raw = strings.TrimSpace(raw)
			switch {
			case t.count != nil:
				n, err := strconv.ParseInt(raw, 10, 64)
				if err != nil {
					errs = append(errs, field.Invalid(p.Child(name), raw, "must be a whole number"))
					continue
				}
				*t.count = ratelimitv1alpha1.Count(n)
			case t.duration != nil:
				*t.duration = ratelimitv1alpha1.Duration(raw)
			}
		}
	}
	return errs.ToAggregate()
}

func limitIndex(spec *ratelimitv1alpha1.RateLimitPolicySpec, name string) int {
	for i := range spec.Limits {
		if string(spec.Limits[i].Name) == name {
			return i
		}
	}
	return -1
}

// target is where one edited parameter goes.
type target struct {
	count    *ratelimitv1alpha1.Count
	duration *ratelimitv1alpha1.Duration
}

// limitFields maps a limit's parameters, by their API names, to the spec's
// fields. A limit with no or several algorithms has none (Compile says why).
func limitFields(l *ratelimitv1alpha1.Limit) (string, map[string]target) {
	switch {
	case l.TokenBucket != nil:
		tb := l.TokenBucket
		return "tokenBucket", map[string]target{"capacity": {count: &tb.Capacity},
			"refillRate": {count: &tb.RefillRate}, "refillInterval": {duration: &tb.RefillInterval}}
	case l.FixedWindow != nil:
		return "fixedWindow", windowFields(l.FixedWindow)
	case l.SlidingWindowLog != nil:
		return "slidingWindowLog", windowFields(l.SlidingWindowLog)
	case l.SlidingWindowCounter != nil:
		return "slidingWindowCounter", windowFields(l.SlidingWindowCounter)
	case l.LeakyBucket != nil:
		lb := l.LeakyBucket
		return "leakyBucket", map[string]target{"capacity": {count: &lb.Capacity},
			"leakRate": {count: &lb.LeakRate}, "leakInterval": {duration: &lb.LeakInterval}}
	case l.GCRA != nil:
		g := l.GCRA
		return "gcra", map[string]target{"rate": {count: &g.Rate}, "period": {duration: &g.Period}, "burst": {count: &g.Burst}}
	case l.Calendar != nil:
		return ratelimitv1alpha1.AlgorithmCalendar, map[string]target{"limit": {count: &l.Calendar.Limit}}
	case l.Concurrency != nil:
		c := l.Concurrency
		return ratelimitv1alpha1.AlgorithmConcurrency, map[string]target{"limit": {count: &c.Limit}, "leaseTimeout": {duration: &c.LeaseTimeout}}
	}
	return "", map[string]target{}
}

func windowFields(w *ratelimitv1alpha1.WindowLimit) map[string]target {
	return map[string]target{"limit": {count: &w.Limit}, "window": {duration: &w.Window}}
}

func sortedKeys(m map[string]target) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
