package grpcserver

import (
	"fmt"
	"strings"
	"testing"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// inFlightPolicy counts, per tenant, two requests in flight and five an
// hour; the request id tells requests apart and stays out of the key.
const inFlightPolicy = `match: {descriptor: [{key: tenant}, {key: x-request-id}]}
key: '{descriptor:tenant}'
limits:
- {name: inflight, concurrency: {limit: 2, leaseTimeout: 1h, holder: x-request-id}}
- {name: hour, fixedWindow: {limit: 5, window: 1h}}`

// Over the rate limit service a release is Envoy's stream-done negative
// hit, named by its request id: it frees what that request holds in the
// concurrency limit, and nothing else. A denied request's release, a
// duplicate release and a release of a holder that holds nothing free
// nothing (and are counted so); the per-hour limit keeps what admitted
// requests were charged.
func TestRLSReleaseByHolder(t *testing.T) {
	for _, store := range []struct {
		name string
		new  func(t *testing.T) ratelimit.Backend
	}{
		{"memory", func(t *testing.T) ratelimit.Backend { return storetest.Memory(t, nil).Backend() }},
		{"redis", func(t *testing.T) ratelimit.Backend { return storetest.Redis(t, redistest.Start(t).Addr()).Backend() }},
	} {
		t.Run(store.name, func(t *testing.T) {
			e := start(t, store.new(t), Options{Domains: DomainBindings{"edge": "ns"}}, nil, compile(t, "ns", "api", inFlightPolicy))
			send := func(d *ratelimitcommonv3.RateLimitDescriptor) ratelimitv3.RateLimitResponse_Code {
				return e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{d}}).GetOverallCode()
			}
			admit := func(id string) ratelimitv3.RateLimitResponse_Code {
				return send(rlsDescriptor("tenant", "t", "x-request-id", id))
			}
			release := func(id string) {
				t.Helper()
				d := rlsDescriptor("tenant", "t", "x-request-id", id)
				d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(1), true
				if got := send(d); got != rlsOK {
					t.Fatalf("release of %s: %v, want OK", id, got)
				}
			}
			step := func(what, id string, want ratelimitv3.RateLimitResponse_Code) {
				t.Helper()
				if got := admit(id); got != want {
					t.Fatalf("%s (%s): %v, want %v", what, id, got, want)
				}
			}
			step("first in flight", "r1", rlsOK)
			step("second in flight", "r2", rlsOK)
			step("third while two are in flight", "r3", rlsOver)
			release("r3") // denied: holds nothing
			step("after a denied request's release", "r4", rlsOver)
			release("unknown")
			step("after an unknown holder's release", "r4", rlsOver)
			release("r1")
			release("r1") // a duplicate
			step("after r1's release", "r4", rlsOK)
			step("after the duplicate release freed nothing", "r5", rlsOver)
			step("a holder in flight admitted again", "r2", rlsOver)
			release("r2") // the duplicate's: r2 still runs
			step("after the duplicate's release", "r5", rlsOver)
			release("r2")
			release("r4")
			// Nothing in flight; three admitted of five an hour: the
			// releases left the hour's count alone.
			step("fourth this hour", "r6", rlsOK)
			release("r6")
			step("fifth this hour", "r7", rlsOK)
			release("r7")
			step("sixth this hour", "r8", rlsOver)

			for outcome, want := range map[string]float64{"freed": 5, "nothing_held": 4} {
				if got := testutil.ToFloat64(counterOf(t, e.reg, "sluice_releases_total", map[string]string{"namespace": "ns", "policy": "api", "outcome": outcome})); got != want {
					t.Errorf("releases %s: %v, want %v", outcome, got, want)
				}
			}
		})
	}
}

// ext_authz has no completion callback: a concurrency limit checked
// through it would hold its units until the lease timeout, counting
// requests per lease timeout rather than in flight. It is refused, never
// allowed or denied as if it meant that: an error answer naming the policy
// and the limit, counted in sluice_releases_total.
func TestExtAuthzRefusesConcurrency(t *testing.T) {
	e := start(t, storetest.Memory(t, nil).Backend(), Options{}, nil,
		compile(t, "shop", "api", "match: {paths: [/api/*]}\nlimits: [{name: inflight, concurrency: {limit: 2}}]"))
	for range 3 {
		a := e.check(t, req{host: "shop.example.com", path: "/api/items", source: "203.0.113.5", extensions: shop})
		if a.code != codes.Internal || a.httpStatus != 500 {
			t.Fatalf("a concurrency limit through ext_authz: %v %d, want Internal 500", a.code, a.httpStatus)
		}
		p := problem(t, a.body)
		if p["type"] != checkhttp.ProblemNoRelease || !strings.Contains(fmt.Sprint(p["detail"]), "policy shop/api, limit inflight") {
			t.Fatalf("problem %v", p)
		}
	}
	if got := testutil.ToFloat64(counterOf(t, e.reg, "sluice_releases_total", map[string]string{"namespace": "shop", "policy": "api", "outcome": "refused_no_release"})); got != 3 {
		t.Errorf("refusals counted: %v, want 3", got)
	}
}

// A request whose holder already holds is denied, and Envoy then sends
// that denied request's stream-done release, naming the same holder: it
// frees nothing (the first request still runs). Only the release that
// comes last frees the unit, so a client that chooses its request ids
// cannot run more than the limit by pairing each request with a duplicate.
func TestRLSDeniedDuplicateReleaseFreesNothing(t *testing.T) {
	for _, store := range []struct {
		name string
		new  func(t *testing.T) ratelimit.Backend
	}{
		{"memory", func(t *testing.T) ratelimit.Backend { return storetest.Memory(t, nil).Backend() }},
		{"redis", func(t *testing.T) ratelimit.Backend { return storetest.Redis(t, redistest.Start(t).Addr()).Backend() }},
	} {
		t.Run(store.name, func(t *testing.T) {
			e := start(t, store.new(t), Options{Domains: DomainBindings{"edge": "ns"}}, nil, compile(t, "ns", "api", inFlightPolicy))
			send := func(d *ratelimitcommonv3.RateLimitDescriptor) ratelimitv3.RateLimitResponse_Code {
				return e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{d}}).GetOverallCode()
			}
			step := func(what, id string, want ratelimitv3.RateLimitResponse_Code) {
				t.Helper()
				if got := send(rlsDescriptor("tenant", "t", "x-request-id", id)); got != want {
					t.Fatalf("%s (%s): %v, want %v", what, id, got, want)
				}
			}
			release := func(id string) {
				t.Helper()
				d := rlsDescriptor("tenant", "t", "x-request-id", id)
				d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(1), true
				if got := send(d); got != rlsOK {
					t.Fatalf("release of %s: %v, want OK", id, got)
				}
			}
			step("the first request", "x", rlsOK)
			step("its duplicate", "x", rlsOver)
			step("another duplicate", "x", rlsOver)
			release("x") // the first duplicate's release
			release("x") // the second's
			step("one more in flight", "y", rlsOK)
			step("a third while x and y run", "z", rlsOver)
			release("x") // x itself ends
			step("after x ended", "z", rlsOK)

			for outcome, want := range map[string]float64{"freed": 1, "nothing_held": 2} {
				if got := testutil.ToFloat64(counterOf(t, e.reg, "sluice_releases_total", map[string]string{"namespace": "ns", "policy": "api", "outcome": outcome})); got != want {
					t.Errorf("releases %s: %v, want %v", outcome, got, want)
				}
			}
		})
	}
}

// A holder Sluice cannot track (an empty request id, or one over 256
// bytes) fails no call: an error answer would let the request through
// every limit of the call by Envoy's default failure_mode_deny: false. The
// request is denied instead, by the concurrency limit (counted so, with
// the reason InvalidHolder in the answer's metadata), and nothing of the
// call is charged; its stream-done release frees nothing and is no error.
func TestRLSUntrackableHolderIsDenied(t *testing.T) {
	e := start(t, storetest.Memory(t, nil).Backend(), Options{Domains: DomainBindings{"edge": "ns"}, ReportPolicy: true}, nil,
		compile(t, "ns", "api", inFlightPolicy),
		compile(t, "ns", "route", "match: {descriptor: [{key: route}]}\nkey: '{descriptor:route}'\nlimits: [{name: hour, fixedWindow: {limit: 5, window: 1h}}]"))
	for _, id := range []string{"", strings.Repeat("r", ratelimit.MaxHolderLen+1)} {
		for range 3 {
			resp := e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{
				rlsDescriptor("route", "r"), rlsDescriptor("tenant", "t", "x-request-id", id)}})
			if got := codesOf(resp); got[0] != rlsOver || got[1] != rlsOK || got[2] != rlsOver {
				t.Fatalf("holder of %d bytes: %v, want OVER_LIMIT [OK OVER_LIMIT]", len(id), got)
			}
			if md := resp.GetDynamicMetadata().GetFields(); md["reason"].GetStringValue() != "InvalidHolder" || md["policy"].GetStringValue() != "ns/api" {
				t.Fatalf("metadata %v, want reason InvalidHolder of ns/api", md)
			}
			release := rlsDescriptor("tenant", "t", "x-request-id", id)
			release.HitsAddend, release.IsNegativeHits = wrapperspb.UInt64(1), true
			if got := codesOf(e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{release}})); got[0] != rlsOK {
				t.Fatalf("its release: %v, want OK", got)
			}
		}
	}
	// Nothing of the denied calls was charged: the route's hour and the
	// tenant's limits are whole.
	resp := e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{
		rlsDescriptor("route", "r"), rlsDescriptor("tenant", "t", "x-request-id", "r1")}})
	if got := codesOf(resp); got[0] != rlsOK || resp.GetStatuses()[0].GetLimitRemaining() != 4 {
		t.Fatalf("a trackable request: %v, route remaining %d; want OK, 4", got, resp.GetStatuses()[0].GetLimitRemaining())
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"sluice_decisions_total", map[string]string{"namespace": "ns", "policy": "api", "limit": "inflight", "result": "denied"}, 6},
		{"sluice_releases_total", map[string]string{"namespace": "ns", "policy": "api", "outcome": "nothing_held"}, 6},
		{"sluice_grpc_requests_total", map[string]string{"service": "envoy.service.ratelimit.v3.RateLimitService", "code": "OK"}, 13},
	} {
		if got := testutil.ToFloat64(counterOf(t, e.reg, c.name, c.labels)); got != c.want {
			t.Errorf("%s%v: %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// A duplicate denied before the store, by a limit of 0 in the same call
// or by another policy's holder that Sluice cannot track (InvalidHolder),
// is remembered on the hold all the same: its stream-done release frees
// nothing while the first request runs. Denied without the store, that
// release freed x's unit, and a third request ran under a limit of 2.
func TestRLSDuplicateDeniedBeforeTheStore(t *testing.T) {
	const policies = `match: {descriptor: [{key: tenant}, {key: x-request-id}, {key: session}]}
key: '{descriptor:tenant}'
limits:
- {name: inflight, concurrency: {limit: 2, leaseTimeout: 1h, holder: x-request-id}}`
	const sessions = `match: {descriptor: [{key: tenant}, {key: x-request-id}, {key: session}]}
key: '{descriptor:tenant}'
limits:
- {name: inflight, concurrency: {limit: 100, leaseTimeout: 1h, holder: session}}`
	request := func(id, session string) *ratelimitcommonv3.RateLimitDescriptor {
		return rlsDescriptor("tenant", "t", "x-request-id", id, "session", session)
	}
	for _, tc := range []struct {
		name string
		dup  func() []*ratelimitcommonv3.RateLimitDescriptor // x's duplicate's descriptors
	}{
		{"a limit of 0", func() []*ratelimitcommonv3.RateLimitDescriptor {
			return []*ratelimitcommonv3.RateLimitDescriptor{request("x", "s2"), withLimit(rlsDescriptor("path", "/z"), 0, typev3.RateLimitUnit_MINUTE)}
		}},
		{"an untrackable holder", func() []*ratelimitcommonv3.RateLimitDescriptor {
			return []*ratelimitcommonv3.RateLimitDescriptor{request("x", strings.Repeat("s", 300))}
		}},
	} {
		for _, store := range []struct {
			name string
			new  func(t *testing.T) ratelimit.Backend
		}{
			{"memory", func(t *testing.T) ratelimit.Backend { return storetest.Memory(t, nil).Backend() }},
			{"redis", func(t *testing.T) ratelimit.Backend { return storetest.Redis(t, redistest.Start(t).Addr()).Backend() }},
		} {
			t.Run(tc.name+"/"+store.name, func(t *testing.T) {
				e := start(t, store.new(t), Options{Domains: DomainBindings{"edge": "ns"}}, nil, compile(t, "ns", "api", policies), compile(t, "ns", "sessions", sessions))
				send := func(what string, want ratelimitv3.RateLimitResponse_Code, ds ...*ratelimitcommonv3.RateLimitDescriptor) {
					t.Helper()
					if got := e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: ds}).GetOverallCode(); got != want {
						t.Fatalf("%s: %v, want %v", what, got, want)
					}
				}
				release := func(what string, ds ...*ratelimitcommonv3.RateLimitDescriptor) {
					t.Helper()
					for _, d := range ds {
						d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(1), true
					}
					send(what, rlsOK, ds...)
				}
				send("x", rlsOK, request("x", "s1"))
				send("x's duplicate", rlsOver, tc.dup()...)
				release("the duplicate's release", tc.dup()...)
				send("y while x runs", rlsOK, request("y", "s3"))
				send("z while x and y run", rlsOver, request("z", "s4"))
			})
		}
	}
}
