package policy

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// compilePenalty reads spec.penalty and checks what the schema's rules
// check, for policies that did not pass an API server (local mode's files).
func compilePenalty(spec *ratelimitv1alpha1.RateLimitPolicySpec, path *field.Path) (ratelimit.Penalty, field.ErrorList) {
	if spec.Penalty == nil {
		return ratelimit.Penalty{}, nil
	}
	var n numbers
	p := ratelimit.Penalty{
		Denials: n.count(path.Child("denials"), spec.Penalty.Denials),
		Within:  n.duration(path.Child("within"), spec.Penalty.Within, ""),
		Ban:     n.duration(path.Child("ban"), spec.Penalty.Ban, ""),
		MaxBan:  n.duration(path.Child("maxBan"), spec.Penalty.MaxBan, ""),
	}
	errs := n.errs
	if len(errs) == 0 && p.Ban > p.MaxBan {
		errs = append(errs, field.Invalid(path.Child("ban"), spec.Penalty.Ban, "ban must not exceed maxBan: maxBan caps every ban, the first included"))
	}
	if spec.Lease != nil {
		errs = append(errs, field.Invalid(path, "", "a lease cannot serve a penalty box: bans are decided by Redis with every request; remove the lease or the penalty"))
	}
	return p, errs
}
