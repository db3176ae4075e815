package webhook

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
)

// noMatchPolicies are n policies of ns without a match, of limits limits.
func noMatchPolicies(t testing.TB, ns string, n, limits int) []*policy.Policy {
	var spec strings.Builder
	spec.WriteString("key: '{client_ip}'\nlimits:\n")
	for l := range limits {
		fmt.Fprintf(&spec, "- {name: l%d, fixedWindow: {limit: 2, window: 1m}}\n", l)
	}
	ps := make([]*policy.Policy, n)
	for i := range ps {
		ps[i] = compile(t, ns, fmt.Sprintf("p%04d", i), spec.String())
	}
	return ps
}

// TestCheckOfManyLimits: /check of a namespace of 60 policies of five
// limits without a match (300 limits a request) is decided by Redis:
// allowed twice, then denied; a namespace whose requests meet more limits
// than one check evaluates answers 400 with a problem naming the bound,
// never 500.
func TestCheckOfManyLimits(t *testing.T) {
	_, store := redisStore(t)
	nginx := proxies[0]
	policies := append(noMatchPolicies(t, "sixty", 60, 5), noMatchPolicies(t, "huge", ratelimit.MaxEntries/8+1, 8)...)
	// A deadline for a loaded machine: Redis decides, never the failure mode.
	s, err := New(Options{Checker: checktest.New(t, check.Options{Backend: store.Backend(), Timeout: 5 * time.Second}, policies...)})
	if err != nil {
		t.Fatal(err)
	}
	url := serveFast(t, s)
	for i, want := range []int{http.StatusOK, http.StatusOK, nginx.denyStatus} {
		resp, body := do(t, nginx.method, url+nginx.path("sixty"), nginx.headers)
		if resp.StatusCode != want {
			t.Fatalf("check %d of 300 limits: %d %s, want %d", i+1, resp.StatusCode, body, want)
		}
	}

	resp, body := do(t, nginx.method, url+nginx.path("huge"), nginx.headers)
	var p checkhttp.Problem
	if err := json.Unmarshal([]byte(body), &p); err != nil || resp.StatusCode != http.StatusBadRequest ||
		resp.Header.Get("Content-Type") != checkhttp.ProblemContentType || p.Type != checkhttp.ProblemTooManyLimits ||
		!strings.Contains(p.Detail, fmt.Sprint(ratelimit.MaxEntries)) {
		t.Fatalf("check of %d limits: %d %s %s; want 400, a too-many-limits problem naming %d", 8*(ratelimit.MaxEntries/8+1), resp.StatusCode, resp.Header.Get("Content-Type"), body, ratelimit.MaxEntries)
	}
}
