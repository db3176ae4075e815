package checkhttp

import (
	"testing"
	"time"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/check"
)

func TestRuleOf(t *testing.T) {
	p := testPolicy(t, ratelimitv1alpha1.HeaderStyleBoth)
	limited := denied(p, time.Second)
	limited.Limits[0].Key = "sluice:{shop/api/192.0.2.1}:burst"
	allowed := denied(p, 0)
	allowed.Allowed, allowed.Reason, allowed.Limits[0].Remaining = true, check.ReasonAllowed, 7
	allowed.Limits[0].Key = "sluice:{shop/api/192.0.2.1}:burst"
	unavailable := denied(p, 0)
	unavailable.Reason, unavailable.Tightest, unavailable.Limits, unavailable.Degraded = check.ReasonStoreUnavailable, -1, nil, true
	hash := KeyHash("sluice:{shop/api/192.0.2.1}:burst")
	for _, tc := range []struct {
		out  *check.Outcome
		want string
	}{
		{limited, "shop/api;decision=denied;reason=RateLimited;limit=burst;remaining=0;key=" + hash},
		{allowed, "shop/api;decision=allowed;reason=Allowed;limit=burst;remaining=7;key=" + hash},
		{unavailable, "shop/api;decision=denied;reason=StoreUnavailable"},
	} {
		r, ok := RuleOf(tc.out)
		if !ok || r.String() != tc.want {
			t.Errorf("RuleOf: %q, %t; want %q", r.String(), ok, tc.want)
		}
	}
	if _, ok := RuleOf(&check.Outcome{Allowed: true, Reason: check.ReasonNoPolicy, Tightest: -1}); ok {
		t.Errorf("RuleOf an outcome no policy matched: ok")
	}
	if len(hash) != 16 || hash == KeyHash("sluice:{shop/api/192.0.2.2}:burst") {
		t.Errorf("KeyHash %q: want 16 hex digits, distinct per key", hash)
	}
}
