package checkhttp_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
)

func answer(t *testing.T, c *check.Checker, now time.Time) (*check.Outcome, http.Header) {
	t.Helper()
	spec := policytest.Spec(t, "limits: [{name: x, fixedWindow: {limit: 1, window: 1s}}]")
	out, err := c.Check(context.Background(), check.Input{Namespace: "shop", Request: sampleRequest(&spec)})
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	checkhttp.SetHeaders(h, out, now)
	return out, h
}

// TestSoftLimitRendered: a request over a soft limit goes on with
// X-Sluice-Over-Limit naming it (the policy, the limit, the mode), and the
// client sees that limit with 0 remaining; two soft limits over are both
// named; under them, no header.
func TestSoftLimitRendered(t *testing.T) {
	now := time.Date(2027, time.January, 15, 9, 30, 0, 0, time.UTC)
	c := checktest.New(t, check.Options{Now: func() time.Time { return now }},
		policytest.Compile(t, "shop", "api", `key: global
limits:
- {name: burst, mode: Soft, fixedWindow: {limit: 1, window: 1h}}
- {name: hourly, mode: Soft, fixedWindow: {limit: 2, window: 1h}}
- {name: quota, fixedWindow: {limit: 100, window: 24h}}`))
	out, h := answer(t, c, now)
	if v := checkhttp.OverLimit(out); v != "" || !strings.Contains(get(h, "RateLimit"), `"api/burst";r=0;`) {
		t.Fatalf("under: over-limit %q, RateLimit %q; want none, burst at 0 left", v, get(h, "RateLimit"))
	}
	out, h = answer(t, c, now)
	if v := checkhttp.OverLimit(out); !out.Allowed || v != "shop/api;limit=burst;mode=Soft" {
		t.Fatalf("over burst: allowed %v, over-limit %q", out.Allowed, v)
	}
	if get(h, "RateLimit") != `"api/burst";r=0;t=3600` || get(h, "X-RateLimit-Remaining") != "0" || h.Get("Retry-After") != "" {
		t.Fatalf("over burst: the client sees %v; want burst at 0 left, no Retry-After", h)
	}
	out, _ = answer(t, c, now)
	if v := checkhttp.OverLimit(out); v != "shop/api;limit=burst;mode=Soft, shop/api;limit=hourly;mode=Soft" {
		t.Fatalf("over both: over-limit %q", v)
	}
}

// TestHiddenLimitRendered: a hidden limit never appears in the client's
// headers nor in a denial's problem, which still carries Retry-After.
func TestHiddenLimitRendered(t *testing.T) {
	now := time.Date(2027, time.January, 15, 9, 30, 0, 0, time.UTC)
	c := checktest.New(t, check.Options{Now: func() time.Time { return now }},
		policytest.Compile(t, "shop", "api", `key: global
limits:
- {name: flood, visibility: Hidden, fixedWindow: {limit: 1, window: 1m}}
- {name: plan, fixedWindow: {limit: 100, window: 24h}}`))
	_, h := answer(t, c, now)
	if got := get(h, "RateLimit-Policy"); got != `"api/plan";q=100;w=86400` {
		t.Fatalf("allowed: RateLimit-Policy %q; want the plan, not the hidden flood limit", got)
	}
	out, h := answer(t, c, now)
	body, _ := checkhttp.DenialBody(out, 429, nil)
	if out.Allowed || h.Get("Retry-After") != "60" || strings.Contains(get(h, "RateLimit"), "flood") || strings.Contains(string(body), "flood") {
		t.Fatalf("denied by flood: headers %v, body %s; want Retry-After 60 and no word of flood", h, body)
	}
	if !strings.Contains(string(body), `"detail":"a limit of policy shop/api is exhausted; retry in 60s"`) {
		t.Fatalf("body %s", body)
	}
	if r, _ := checkhttp.RuleOf(out); r.Limit != "flood" {
		t.Fatalf("X-Sluice-Policy (the operator's) names %q; want flood", r.Limit)
	}
}

// get reads a header as SetHeaders spells it (RateLimit, not Go's
// canonical Ratelimit).
func get(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return h.Get(name)
}
