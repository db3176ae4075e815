package check

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// eachStore runs f over the memory store and over a real redis-server,
// both on one simulated clock: per-limit modes are decided by the stores
// (shadow entries, the penalty box), so each is held to the same facts.
func eachStore(t *testing.T, f func(t *testing.T, newChecker func(*Metrics, ...*policy.Policy) *Checker)) {
	t.Run("memory", func(t *testing.T) {
		clock := ratelimittest.FutureClock()
		f(t, func(m *Metrics, ps ...*policy.Policy) *Checker {
			return newChecker(t, Options{Backend: storetest.Memory(t, clock.Now).Backend(), Now: clock.Now, Metrics: m}, ps...)
		})
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		clock := ratelimittest.FutureClock()
		f(t, func(m *Metrics, ps ...*policy.Policy) *Checker {
			client := redisstore.NewClient(&redis.UniversalOptions{Addrs: []string{srv.Addr()}})
			t.Cleanup(func() { _ = client.Close() })
			store, err := redisstore.New(client, redisstore.Options{Clock: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = store.Close() })
			return newChecker(t, Options{Backend: store.Backend(), Now: clock.Now, Metrics: m, Timeout: 10 * time.Second}, ps...) // no failure mode under load
		})
	})
}

func checkOnce(t *testing.T, c *Checker) *Outcome {
	t.Helper()
	out, err := c.Check(context.Background(), Input{Namespace: "ns", Request: request()})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// softOver lists the limits out says the request went on over.
func softOver(out *Outcome) []string {
	var names []string
	for i := range out.Limits {
		if lr := &out.Limits[i]; out.SoftOver(lr) {
			names = append(names, lr.Policy.Name+"/"+lr.Limit.Name)
		}
	}
	return names
}

// TestSoftLimit: a soft limit over lets the request go on, flagged, and
// reports (the client's warning); it consumes nothing while over, while
// the enforced limit beside it goes on counting and denies at its own
// quota; all or nothing holds over the enforced limits only; the
// decisions count soft_over.
func TestSoftLimit(t *testing.T) {
	eachStore(t, func(t *testing.T, newChecker func(*Metrics, ...*policy.Policy) *Checker) {
		m := NewMetrics(prometheus.NewRegistry())
		c := newChecker(m, policytest.Compile(t, "ns", "api", `key: global
limits:
- {name: burst, mode: Soft, fixedWindow: {limit: 2, window: 1h}}
- {name: quota, fixedWindow: {limit: 5, window: 1h}}`))
		for i := 1; i <= 6; i++ {
			out := checkOnce(t, c)
			burst, quota := out.Limits[0], out.Limits[1]
			switch {
			case i <= 2:
				if !out.Allowed || len(softOver(out)) != 0 || out.Reporting() != &out.Limits[0] || burst.Remaining != int64(2-i) {
					t.Fatalf("request %d: allowed %v, over %v, reporting %+v; want allowed, none over, burst reporting", i, out.Allowed, softOver(out), out.Reporting())
				}
			case i <= 5:
				if !out.Allowed || out.Reason != ReasonAllowed || len(softOver(out)) != 1 || out.Reporting().Limit.Name != "burst" || quota.Remaining != int64(5-i) {
					t.Fatalf("request %d: allowed %v (%s), over %v, reporting %s, quota remaining %d; want allowed over burst, burst reporting, quota %d",
						i, out.Allowed, out.Reason, softOver(out), out.Reporting().Limit.Name, quota.Remaining, 5-i)
				}
			default:
				if out.Allowed || out.Reporting().Limit.Name != "quota" || len(softOver(out)) != 0 || !out.Part(0).Denied {
					t.Fatalf("request %d: allowed %v, reporting %s, over %v; want denied by quota, no soft flag on a denial", i, out.Allowed, out.Reporting().Limit.Name, softOver(out))
				}
			}
			if burst.Remaining < 0 {
				t.Fatalf("request %d: burst remaining %d: a soft limit over consumed", i, burst.Remaining)
			}
		}
		if got := testutil.ToFloat64(m.decisions.WithLabelValues("ns", "api", "burst", string(ResultSoftOver))); got != 4 {
			t.Fatalf("soft_over decisions of burst: %v, want 4 (3 allowed over it, 1 denied by quota)", got)
		}
		if got := testutil.ToFloat64(m.decisions.WithLabelValues("ns", "api", "quota", string(ResultDenied))); got != 1 {
			t.Fatalf("denied decisions of quota: %v, want 1", got)
		}
	})
}

// TestLimitModePrecedence: a limit's own mode wins for it, whatever
// spec.mode says: an enforced limit of a shadow policy denies, a shadow
// limit of an enforced policy never denies nor reports.
func TestLimitModePrecedence(t *testing.T) {
	eachStore(t, func(t *testing.T, newChecker func(*Metrics, ...*policy.Policy) *Checker) {
		c := newChecker(nil,
			policytest.Compile(t, "ns", "a-trial", `key: global
limits:
- {name: trial, mode: Shadow, fixedWindow: {limit: 1, window: 1h}}
- {name: quota, fixedWindow: {limit: 100, window: 1h}}`),
			policytest.Compile(t, "ns", "b-watched", `key: global
mode: Shadow
limits:
- {name: hard, mode: Enforce, fixedWindow: {limit: 3, window: 1h}}
- {name: watch, fixedWindow: {limit: 1, window: 1h}}`))
		for i := 1; i <= 4; i++ {
			out := checkOnce(t, c)
			if want := i <= 3; out.Allowed != want {
				t.Fatalf("request %d: allowed %v, want %v (b-watched's hard limit of 3 enforced)", i, out.Allowed, want)
			}
			if lr := out.Reporting(); lr == nil || lr.Limit.Shadow() {
				t.Fatalf("request %d: reporting %+v; want an enforced limit, never a shadow one", i, lr)
			}
		}
	})
}

// TestAllShadowLimitsAsShadowPolicy: a policy whose limits are all in
// mode Shadow decides, reports and bans exactly as the same policy in
// spec.mode Shadow, penalty box included (its would-be bans).
func TestAllShadowLimitsAsShadowPolicy(t *testing.T) {
	eachStore(t, func(t *testing.T, newChecker func(*Metrics, ...*policy.Policy) *Checker) {
		limits := `
limits:
- {name: a, MODEfixedWindow: {limit: 2, window: 1h}}
- {name: b, MODEtokenBucket: {capacity: 3, refillRate: 1, refillInterval: 1h}}
penalty: {denials: 2, within: 1h, ban: 1m, maxBan: 4m}`
		policyMode := policytest.Compile(t, "ns", "p", "key: global\nmode: Shadow"+strings.ReplaceAll(limits, "MODE", ""))
		limitMode := policytest.Compile(t, "ns", "q", "key: global"+strings.ReplaceAll(limits, "MODE", "mode: Shadow, "))
		mp, ml := NewMetrics(prometheus.NewRegistry()), NewMetrics(prometheus.NewRegistry())
		cp, cl := newChecker(mp, policyMode), newChecker(ml, limitMode)
		for i := 1; i <= 6; i++ {
			op, ol := checkOnce(t, cp), checkOnce(t, cl)
			if op.Allowed != ol.Allowed || op.Reason != ol.Reason || op.Tightest != ol.Tightest || op.Policies[0].Ban != ol.Policies[0].Ban ||
				(op.Reporting() == nil) != (ol.Reporting() == nil) || len(softOver(ol)) != 0 {
				t.Fatalf("request %d: spec.mode Shadow %v/%s ban %s, limits in Shadow %v/%s ban %s; want the same", i,
					op.Allowed, op.Reason, op.Policies[0].Ban, ol.Allowed, ol.Reason, ol.Policies[0].Ban)
			}
			for j := range op.Limits {
				if op.Limits[j].Result != ol.Limits[j].Result {
					t.Fatalf("request %d, limit %d: %+v vs %+v", i, j, op.Limits[j].Result, ol.Limits[j].Result)
				}
			}
		}
		for _, lim := range []string{"a", "b"} {
			p := testutil.ToFloat64(mp.decisions.WithLabelValues("ns", "p", lim, string(ResultShadowDenied)))
			l := testutil.ToFloat64(ml.decisions.WithLabelValues("ns", "q", lim, string(ResultShadowDenied)))
			if p != l || p == 0 {
				t.Fatalf("limit %s: %v shadow denials by spec.mode, %v by the limits' mode; want the same, above 0", lim, p, l)
			}
		}
	})
}

// TestSoftDenialsBanNoOne: the penalty box follows spec.mode and counts
// only enforced limits' denials: a soft limit far over bans no one, and
// the enforced limit beside it still does.
func TestSoftDenialsBanNoOne(t *testing.T) {
	eachStore(t, func(t *testing.T, newChecker func(*Metrics, ...*policy.Policy) *Checker) {
		c := newChecker(nil, policytest.Compile(t, "ns", "p", `key: global
limits:
- {name: burst, mode: Soft, fixedWindow: {limit: 1, window: 1h}}
- {name: quota, fixedWindow: {limit: 4, window: 1h}}
penalty: {denials: 1, within: 1h, ban: 1m, maxBan: 4m}`))
		for i := 1; i <= 4; i++ {
			if out := checkOnce(t, c); !out.Allowed || out.Policies[0].Ban != 0 {
				t.Fatalf("request %d: allowed %v, ban %s; want allowed over the soft limit, no ban", i, out.Allowed, out.Policies[0].Ban)
			}
		}
		if out := checkOnce(t, c); out.Allowed || out.Policies[0].Ban != time.Minute || out.Reason != ReasonBanned {
			t.Fatalf("quota's denial: allowed %v, ban %s, reason %s; want denied, a 1m ban", out.Allowed, out.Policies[0].Ban, out.Reason)
		}
	})
}

// TestHiddenLimit: a hidden limit that denies is the decision's reporting
// limit (operators see it) but the client is shown the visible one, and
// the denial keeps its retry.
func TestHiddenLimit(t *testing.T) {
	eachStore(t, func(t *testing.T, newChecker func(*Metrics, ...*policy.Policy) *Checker) {
		c := newChecker(nil, policytest.Compile(t, "ns", "p", `key: global
limits:
- {name: flood, visibility: Hidden, fixedWindow: {limit: 1, window: 1h}}
- {name: plan, fixedWindow: {limit: 100, window: 24h}}`))
		if out := checkOnce(t, c); out.Shown() == nil || out.Shown().Limit.Name != "plan" || out.Reporting().Limit.Name != "flood" {
			t.Fatalf("allowed: shown %+v, reporting %+v; want plan shown though flood has fewer remaining", out.Shown(), out.Reporting())
		}
		out := checkOnce(t, c)
		if out.Allowed || out.Reporting().Limit.Name != "flood" || out.Shown().Limit.Name != "plan" || out.RetryAfter <= 0 || out.Shown().Remaining != 99 {
			t.Fatalf("denied by flood: allowed %v, reporting %s, shown %+v, retry %s; want plan shown (99 left), a retry", out.Allowed, out.Reporting().Limit.Name, out.Shown(), out.RetryAfter)
		}
	})
}

// TestPenaltyBoxFollowsSpecMode: the penalty box is the policy's whatever
// its limits' modes: a shadow policy whose limits all enforce reports the
// bans it would issue (never enforcing them, while its limits deny), and
// an enforced policy whose limits are all soft keeps its box, which
// counts no soft limit's denial.
func TestPenaltyBoxFollowsSpecMode(t *testing.T) {
	eachStore(t, func(t *testing.T, newChecker func(*Metrics, ...*policy.Policy) *Checker) {
		c := newChecker(nil, policytest.Compile(t, "ns", "p", `key: global
mode: Shadow
limits:
- {name: hard, mode: Enforce, fixedWindow: {limit: 1, window: 1h}}
penalty: {denials: 1, within: 1h, ban: 1m, maxBan: 4m}`))
		checkOnce(t, c)
		out := checkOnce(t, c)
		if out.Allowed || out.Policies[0].Ban != time.Minute || out.Reason == ReasonBanned {
			t.Fatalf("shadow policy, enforced limit over: allowed %v, ban %s, reason %s; want denied by the limit, a 1m ban reported (not enforced)",
				out.Allowed, out.Policies[0].Ban, out.Reason)
		}
		s := newChecker(nil, policytest.Compile(t, "ns", "q", `key: global
limits:
- {name: soft, mode: Soft, fixedWindow: {limit: 1, window: 1h}}
penalty: {denials: 1, within: 1h, ban: 1m, maxBan: 4m}`))
		for i := 1; i <= 3; i++ {
			if out := checkOnce(t, s); !out.Allowed || out.Policies[0].Ban != 0 {
				t.Fatalf("soft limit, request %d: allowed %v, ban %s; want allowed, no ban", i, out.Allowed, out.Policies[0].Ban)
			}
		}
	})
}
