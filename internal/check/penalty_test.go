package check

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// penaltySpec: one request a second, and three denials within a minute
// ban the key for 1m, doubling up to 4m.
const penaltySpec = `key: global
limits: [{name: l, fixedWindow: {limit: 1, window: 1s}}]
penalty: {denials: 3, within: 1m, ban: 1m, maxBan: 4m}`

// burst sends n checks at one instant and returns the last outcome and
// the ban the burst issued (0: none).
func burst(t *testing.T, c *Checker, n int) (*Outcome, time.Duration) {
	t.Helper()
	var out *Outcome
	var ban time.Duration
	for range n {
		var err error
		if out, err = c.Check(context.Background(), Input{Namespace: "ns", Request: request()}); err != nil {
			t.Fatal(err)
		}
		if b := out.Policies[0].Ban; b > 0 {
			if ban > 0 {
				t.Fatalf("a second ban (%s after %s) in one burst", b, ban)
			}
			ban = b
		}
	}
	return out, ban
}

// TestPenaltyBox: three denials ban the key for 1m; while banned every
// request is denied (from the cache of denials too) until the ban's end
// and counts nothing; bans double while they follow each other within
// maxBan, up to maxBan, and start from ban again after maxBan of quiet;
// denials spread beyond `within` ban no one.
func TestPenaltyBox(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	c := newChecker(t, Options{Now: clock.Now, Metrics: m}, policytest.Compile(t, "ns", "p", penaltySpec))
	issued := func() float64 { return testutil.ToFloat64(m.bans.WithLabelValues("ns", "p", "Enforce")) }
	active := func() float64 { return testutil.ToFloat64(m.activeBans.WithLabelValues("ns", "p")) }

	if out, ban := burst(t, c, 3); ban != 0 || out.Reason != ReasonLimited {
		t.Fatalf("1 allowed and 2 denied issued a ban of %s, reason %s; want none, RateLimited", ban, out.Reason)
	}
	out, ban := burst(t, c, 1)
	if ban != time.Minute || out.Allowed || out.RetryAfter != time.Minute || out.Reason != ReasonBanned {
		t.Fatalf("the 3rd denial: ban %s, allowed %v, retry %s, reason %s; want a 1m ban and retry, Banned", ban, out.Allowed, out.RetryAfter, out.Reason)
	}
	// The limit reports a reset at the ban's end, as while banned: the
	// headers' reset and Retry-After agree from the ban's first denial.
	if l := out.Limits[0]; l.Reset != time.Minute {
		t.Fatalf("the 3rd denial: the limit's reset %s; want the ban's end, 1m", l.Reset)
	}
	if issued() != 1 || active() != 1 {
		t.Fatalf("metrics: %v issued, %v active; want 1 and 1", issued(), active())
	}

	clock.Advance(30 * time.Second) // the limit admits again; the ban holds
	out, ban = burst(t, c, 5)
	if l := out.Limits[0]; out.Allowed || !l.Banned || !l.Cached || l.Remaining != 0 || out.RetryAfter != 30*time.Second || ban != 0 || out.Reason != ReasonBanned {
		t.Fatalf("banned: allowed %v, reason %s, limit %+v, retry %s, ban %s; want a cached ban until its end, 0 remaining, Banned", out.Allowed, out.Reason, l, out.RetryAfter, ban)
	}

	// Each ban that follows the last within maxBan doubles, up to maxBan.
	for _, want := range []time.Duration{2 * time.Minute, 4 * time.Minute, 4 * time.Minute} {
		clock.Advance(out.RetryAfter)
		if first, _ := burst(t, c, 1); !first.Allowed {
			t.Fatalf("at the ban's end: denied %+v; want the limit's request allowed (the ban's denials counted nothing)", first.Limits)
		}
		if out, ban = burst(t, c, 3); ban != want || out.RetryAfter != want {
			t.Fatalf("ban %s, retry %s; want %s", ban, out.RetryAfter, want)
		}
	}
	// maxBan of quiet after a ban's end: the next ban starts from ban.
	clock.Advance(out.RetryAfter + 4*time.Minute)
	if _, ban = burst(t, c, 4); ban != time.Minute {
		t.Fatalf("after maxBan of quiet: ban %s, want 1m", ban)
	}
	// Denials further apart than `within` ban no one.
	clock.Advance(time.Minute)
	burst(t, c, 3)
	clock.Advance(time.Minute)
	if _, ban = burst(t, c, 2); ban != 0 {
		t.Fatalf("denials 1m apart, within 1m: ban %s, want none", ban)
	}
	if issued() != 5 {
		t.Fatalf("%v bans issued, want 5", issued())
	}
}

// TestPenaltyShadow: a shadow policy reports the ban it would issue (its
// decision's details and a metric) and bans no one.
func TestPenaltyShadow(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	m := NewMetrics(prometheus.NewRegistry())
	c := newChecker(t, Options{Now: clock.Now, Metrics: m}, policytest.Compile(t, "ns", "p", "mode: Shadow\n"+penaltySpec))
	out, ban := burst(t, c, 4)
	if ban != time.Minute || !out.Allowed {
		t.Fatalf("shadow: ban %s, allowed %v; want a 1m ban reported and the request allowed", ban, out.Allowed)
	}
	if got := testutil.ToFloat64(m.bans.WithLabelValues("ns", "p", "Shadow")); got != 1 {
		t.Fatalf("%v would-be bans counted, want 1", got)
	}
	if got := testutil.ToFloat64(m.activeBans.WithLabelValues("ns", "p")); got != 0 {
		t.Fatalf("%v bans active, want 0", got)
	}
	clock.Advance(time.Second)
	if out, _ := burst(t, c, 1); !out.Allowed || out.Limits[0].Banned || !out.Limits[0].Allowed {
		t.Fatalf("after a would-be ban: %+v; want the limit's own answer", out.Limits[0])
	}
}

// TestRefundLiftsNoBan: a refund (Envoy's negative hits), and other
// processes' refunds announced, give the limits their units back but
// neither lift a ban nor drop it from the cache of denials.
func TestRefundLiftsNoBan(t *testing.T) {
	for _, cache := range []int{0, -1} {
		clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
		counting := &countingStore{Store: newChecker(t, Options{Now: clock.Now}).store}
		c := newChecker(t, Options{Now: clock.Now, Backend: ratelimit.Backend{Store: counting}, DenyCacheSize: cache}, policytest.Compile(t, "ns", "p", penaltySpec))
		if _, ban := burst(t, c, 4); ban != time.Minute {
			t.Fatalf("cache %d: ban %s, want 1m", cache, ban)
		}
		for range 3 {
			if _, err := c.Check(context.Background(), Input{Namespace: "ns", Request: request(), Action: ratelimit.Refund}); err != nil {
				t.Fatal(err)
			}
		}
		c.ForgetAllDenials()
		clock.Advance(time.Second)
		calls := counting.calls
		out, _ := burst(t, c, 1)
		if out.Allowed || !out.Limits[0].Banned || out.RetryAfter != time.Minute-time.Second {
			t.Fatalf("cache %d, after refunds: allowed %v, %+v; want still banned for 59s", cache, out.Allowed, out.Limits[0])
		}
		if cache == 0 && counting.calls != calls {
			t.Fatalf("the ban was not answered from the cache of denials after refunds")
		}
	}
}

// TestPenaltySharedByReplicas: two check processes' checkers over one
// Redis count one key's denials together, and a ban one of them issues
// denies the key at the other at once; each counts the bans it issued as
// active, so the sum over processes is the fleet's.
func TestPenaltySharedByReplicas(t *testing.T) {
	srv := redistest.Start(t)
	clock := ratelimittest.FutureClock()
	replica := func() (*Checker, *Metrics) {
		client := redisstore.NewClient(&redis.UniversalOptions{Addrs: []string{srv.Addr()}})
		t.Cleanup(func() { _ = client.Close() })
		store, err := redisstore.New(client, redisstore.Options{Clock: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		m := NewMetrics(prometheus.NewRegistry())
		return newChecker(t, Options{Backend: store.Backend(), Now: clock.Now, Metrics: m}, policytest.Compile(t, "ns", "p", penaltySpec)), m
	}
	a, ma := replica()
	b, mb := replica()
	burst(t, a, 2) // allowed, then denial 1
	burst(t, b, 1) // denial 2
	if _, ban := burst(t, a, 1); ban != time.Minute {
		t.Fatalf("the third denial of the key, counted across replicas: ban %s, want 1m", ban)
	}
	clock.Advance(10 * time.Second)
	out, ban := burst(t, b, 1)
	if out.Allowed || !out.Limits[0].Banned || out.RetryAfter != 50*time.Second || ban != 0 {
		t.Fatalf("the other replica: allowed %v, %+v, retry %s; want banned for 50s", out.Allowed, out.Limits[0], out.RetryAfter)
	}
	activeA := testutil.ToFloat64(ma.activeBans.WithLabelValues("ns", "p"))
	activeB := testutil.ToFloat64(mb.activeBans.WithLabelValues("ns", "p"))
	if activeA+activeB != 1 || activeA != 1 {
		t.Fatalf("active bans: %v at the issuer, %v at the other; want 1 and 0", activeA, activeB)
	}
	clock.Advance(50 * time.Second)
	if out, _ := burst(t, b, 1); !out.Allowed {
		t.Fatalf("at the ban's end, the other replica: denied %+v", out.Limits[0])
	}
}
