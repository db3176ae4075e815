package grpcserver

import (
	"fmt"
	"strings"
	"testing"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// tokenBudgetPolicy is a tenant's token budget: an estimate of 1000 (at
// most 2000) reserved per request, held by its request id.
const tokenBudgetPolicy = `match: {domain: llm, descriptor: [{key: tenant}, {key: x-request-id}]}
key: '{descriptor:tenant}'
charge: Reserve
reserve: {holder: x-request-id, ttl: 5m, max: 2000}
cost: 1000
limits:
- {name: minute, fixedWindow: {limit: 10000, window: 1h}}
- {name: month, calendar: {limit: 5000000, period: Month, timeZone: Europe/Berlin}}`

// Over the rate limit service a token budget reserves at admission (the
// call's hits_addend when it has one, else cost; above reserve.max
// clamped, an absurd one clamped as every hits_addend is, both counted)
// and settles on the stream-done call (is_negative_hits, hits_addend the
// actual): the difference is given back or taken. A duplicate admission
// is denied and its settlement changes nothing; a denied request's or an
// unknown holder's settlement changes nothing.
func TestRLSReserveThenSettle(t *testing.T) {
	for _, store := range []struct {
		name string
		new  func(t *testing.T) ratelimit.Backend
	}{
		{"memory", func(t *testing.T) ratelimit.Backend { return storetest.Memory(t, nil).Backend() }},
		{"redis", func(t *testing.T) ratelimit.Backend { return storetest.Redis(t, redistest.Start(t).Addr()).Backend() }},
	} {
		t.Run(store.name, func(t *testing.T) {
			e := start(t, store.new(t), Options{Domains: DomainBindings{"llm": "ns"}}, nil, compile(t, "ns", "budget", tokenBudgetPolicy))
			send := func(d *ratelimitcommonv3.RateLimitDescriptor) *ratelimitv3.RateLimitResponse {
				return e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "llm", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{d}})
			}
			admit := func(id string, hits *uint64, want ratelimitv3.RateLimitResponse_Code, remaining uint32) {
				t.Helper()
				d := rlsDescriptor("tenant", "acme", "x-request-id", id)
				if hits != nil {
					d.HitsAddend = wrapperspb.UInt64(*hits)
				}
				r := send(d)
				if r.GetOverallCode() != want || want == rlsOK && r.GetStatuses()[0].GetLimitRemaining() != remaining {
					t.Fatalf("admission of %s: %v, remaining %d; want %v, %d", id, r.GetOverallCode(), r.GetStatuses()[0].GetLimitRemaining(), want, remaining)
				}
			}
			settle := func(id string, actual uint64, remaining uint32) {
				t.Helper()
				d := rlsDescriptor("tenant", "acme", "x-request-id", id)
				d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(actual), true
				r := send(d)
				if r.GetOverallCode() != rlsOK || r.GetStatuses()[0].GetLimitRemaining() != remaining {
					t.Fatalf("settlement of %s: %v, remaining %d; want OK, %d", id, r.GetOverallCode(), r.GetStatuses()[0].GetLimitRemaining(), remaining)
				}
			}
			n := func(v uint64) *uint64 { return &v }
			admit("r1", nil, rlsOK, 9000)      // cost: 1000
			admit("r2", n(5000), rlsOK, 7000)  // clamped to max
			admit("r1", n(10), rlsOver, 0)     // a duplicate
			admit("r3", n(1<<62), rlsOK, 5000) // absurd: clamped to the largest count, then to max
			settle("r1", 300, 5000)            // the duplicate's settlement: nothing
			settle("r1", 300, 5700)            // r1's own: 700 back
			settle("r1", 300, 5700)            // settled already
			settle("unknown", 50, 5700)        // holds nothing
			settle("r2", 0, 7700)              // nothing used: all back
			settle("r3", 2000, 7700)           // as reserved
			admit("r4", n(0), rlsOK, 7700)     // an explicit 0 counts nothing, reserves nothing
			settle("r4", 5, 7700)              // nothing reserved
			admit("r5", nil, rlsOK, 6700)
			settle("r5", 3000, 4700) // 2000 more than reserved: taken

			for outcome, want := range map[string]float64{"reserved": 4, "clamped": 2, "settled_below": 2, "settled_exact": 1, "settled_above": 1, "nothing_reserved": 4} {
				if got := testutil.ToFloat64(counterOf(t, e.reg, "sluice_reservations_total", map[string]string{"namespace": "ns", "policy": "budget", "outcome": outcome})); got != want {
					t.Errorf("reservations %s: %v, want %v", outcome, got, want)
				}
			}
			if got := testutil.ToFloat64(counterOf(t, e.reg, "sluice_rls_hits_addend_clamped_total", nil)); got != 1 {
				t.Errorf("hits_addend clamped: %v, want 1", got)
			}
		})
	}
}

// ext_authz cannot settle: a token budget checked through it is refused
// with the no-release problem, as a concurrency limit is.
func TestExtAuthzRefusesReserve(t *testing.T) {
	e := start(t, storetest.Memory(t, nil).Backend(), Options{}, nil,
		compile(t, "shop", "api", "match: {paths: [/api/*]}\ncharge: Reserve\nreserve: {}\nlimits: [{name: day, fixedWindow: {limit: 1000, window: 24h}}]"))
	a := e.check(t, req{host: "shop.example.com", path: "/api/items", source: "203.0.113.5", extensions: shop})
	if a.code != codes.Internal || a.httpStatus != 500 {
		t.Fatalf("a token budget through ext_authz: %v %d, want Internal 500", a.code, a.httpStatus)
	}
	if p := problem(t, a.body); p["type"] != checkhttp.ProblemNoRelease || !strings.Contains(fmt.Sprint(p["detail"]), "policy shop/api has charge Reserve") {
		t.Fatalf("problem %v", p)
	}
	if got := testutil.ToFloat64(counterOf(t, e.reg, "sluice_reservations_total", map[string]string{"namespace": "shop", "policy": "api", "outcome": "refused_no_release"})); got != 1 {
		t.Errorf("refusals counted: %v, want 1", got)
	}
}

// A settlement is no decision: the figures read for its answer (a check
// at cost 0 of the part that gave back) never count toward the penalty
// box, though a settlement above the estimate took the budget into debt,
// where such a read is "denied". Only denied admissions ban.
func TestRLSSettlementsCountNoDenial(t *testing.T) {
	const budget = `match: {domain: llm, descriptor: [{key: tenant}, {key: rid}]}
key: '{descriptor:tenant}'
charge: Reserve
reserve: {holder: rid}
limits: [{name: tokens, fixedWindow: {limit: 1000, window: 1h}}]
penalty: {denials: 2, within: 1m, ban: 1m, maxBan: 10m}`
	for _, store := range []struct {
		name string
		new  func(t *testing.T) ratelimit.Backend
	}{
		{"memory", func(t *testing.T) ratelimit.Backend { return storetest.Memory(t, nil).Backend() }},
		{"redis", func(t *testing.T) ratelimit.Backend { return storetest.Redis(t, redistest.Start(t).Addr()).Backend() }},
	} {
		t.Run(store.name, func(t *testing.T) {
			e := start(t, store.new(t), Options{Domains: DomainBindings{"llm": "ns"}}, nil, compile(t, "ns", "budget", budget))
			send := func(id string, hits uint64, settle bool) ratelimitv3.RateLimitResponse_Code {
				d := rlsDescriptor("tenant", "acme", "rid", id)
				d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(hits), settle
				return e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "llm", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{d}}).GetOverallCode()
			}
			if got := send("r1", 900, false); got != rlsOK {
				t.Fatalf("r1's admission: %v", got)
			}
			send("r1", 1900, true) // 1000 more than reserved: into debt
			send("r2", 10, true)   // two settlements of holders that hold nothing
			send("r3", 10, true)
			out, err := e.s.opts.Checker.Buckets().Inspect(t.Context(), "ns", "budget", "acme")
			if err != nil {
				t.Fatal(err)
			}
			if out.Reason == check.ReasonBanned {
				t.Errorf("the bucket is banned by settlements alone (no admission was denied): %+v", out.Limits)
			}
		})
	}
}
