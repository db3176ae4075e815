package grpcserver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
)

const (
	rlsOK   = ratelimitv3.RateLimitResponse_OK
	rlsOver = ratelimitv3.RateLimitResponse_OVER_LIMIT
)

// rlsDescriptor is a descriptor from key, value pairs.
func rlsDescriptor(kv ...string) *ratelimitcommonv3.RateLimitDescriptor {
	d := &ratelimitcommonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitcommonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (e *endpoint) shouldRateLimit(t *testing.T, req *ratelimitv3.RateLimitRequest) *ratelimitv3.RateLimitResponse {
	t.Helper()
	resp, err := ratelimitv3.NewRateLimitServiceClient(e.conn).ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// codesOf is the overall code and each descriptor's.
func codesOf(resp *ratelimitv3.RateLimitResponse) []ratelimitv3.RateLimitResponse_Code {
	out := []ratelimitv3.RateLimitResponse_Code{resp.GetOverallCode()}
	for _, s := range resp.GetStatuses() {
		out = append(out, s.GetCode())
	}
	return out
}

func headersOf(resp *ratelimitv3.RateLimitResponse) map[string]string {
	h := map[string]string{}
	for _, v := range resp.GetResponseHeadersToAdd() {
		h[v.GetKey()] = v.GetValue()
	}
	return h
}

func TestRLSRefusesWhatItCannotRead(t *testing.T) {
	e := start(t, memstore.New().Backend(), Options{Domains: DomainBindings{"edge": "ns"}}, nil)
	many := make([]*ratelimitcommonv3.RateLimitDescriptor, MaxDescriptors+1)
	for i := range many {
		many[i] = rlsDescriptor("k", "v")
	}
	for name, req := range map[string]*ratelimitv3.RateLimitRequest{
		"no domain":        {Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{rlsDescriptor("k", "v")}},
		"no descriptors":   {Domain: "edge"},
		"too many entries": {Domain: "edge", Descriptors: many},
	} {
		_, err := ratelimitv3.NewRateLimitServiceClient(e.conn).ShouldRateLimit(context.Background(), req)
		if grpcstatus.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	if got := testutil.ToFloat64(e.s.metrics.requests.WithLabelValues(rlsService, codes.InvalidArgument.String())); got != 3 {
		t.Errorf("sluice_grpc_requests_total{service=ratelimit,code=InvalidArgument} = %v, want 3", got)
	}
}

func TestRLSLimitsDescriptors(t *testing.T) {
	e := start(t, memstore.New().Backend(), Options{Domains: DomainBindings{"edge": "ns"}}, nil,
		compile(t, "ns", "per-client", "match: {domain: edge, descriptor: [{key: remote_address}]}\nkey: '{descriptor:remote_address}'\nlimits: [{name: minute, fixedWindow: {limit: 3, window: 1m}}]"))
	send := func(addr string) *ratelimitv3.RateLimitResponse {
		return e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{rlsDescriptor("remote_address", addr)}})
	}
	for i := range 3 {
		resp := send("10.0.0.1")
		st := resp.GetStatuses()[0]
		if resp.GetOverallCode() != rlsOK || st.GetLimitRemaining() != uint32(2-i) {
			t.Fatalf("request %d: %v, remaining %d", i, codesOf(resp), st.GetLimitRemaining())
		}
		if cl := st.GetCurrentLimit(); cl.GetRequestsPerUnit() != 3 || cl.GetUnit() != ratelimitv3.RateLimitResponse_RateLimit_MINUTE || cl.GetName() != "per-client/minute" {
			t.Errorf("current_limit %v, want per-client/minute 3 per MINUTE", cl)
		}
		if d := st.GetDurationUntilReset().AsDuration(); d <= 0 || d > time.Minute {
			t.Errorf("duration_until_reset %v", d)
		}
	}
	resp := send("10.0.0.1")
	if got := codesOf(resp); got[0] != rlsOver || got[1] != rlsOver {
		t.Fatalf("fourth request: %v, want OVER_LIMIT", got)
	}
	h := headersOf(resp)
	if h["Retry-After"] == "" || h["RateLimit"] == "" || h["RateLimit-Policy"] != `"per-client/minute";q=3;w=60` || h["X-RateLimit-Remaining"] != "0" {
		t.Errorf("denial headers %v", h)
	}
	if resp := send("10.0.0.2"); resp.GetOverallCode() != rlsOK {
		t.Errorf("another address shares the first's bucket: %v", codesOf(resp))
	}
	// A descriptor no policy matches: OK with no limit.
	resp = e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{rlsDescriptor("generic_key", "x")}})
	if resp.GetOverallCode() != rlsOK || resp.GetStatuses()[0].GetCurrentLimit() != nil || len(resp.GetResponseHeadersToAdd()) != 0 {
		t.Errorf("unmatched descriptor: %v", resp)
	}
}

// Every descriptor of a request gets its own status: five descriptors,
// each limited by its own policy to a different limit.
func TestRLSStatusForEveryDescriptor(t *testing.T) {
	const n = 5
	var policies []*policy.Policy
	var descriptors []*ratelimitcommonv3.RateLimitDescriptor
	for i := range n {
		key := fmt.Sprintf("k%d", i)
		policies = append(policies, compile(t, "ns", key, fmt.Sprintf("match: {descriptor: [{key: %s}]}\nlimits: [{name: l, fixedWindow: {limit: %d, window: 1m}}]", key, 10+i)))
		descriptors = append(descriptors, rlsDescriptor(key, "v"))
	}
	e := start(t, memstore.New().Backend(), Options{Domains: DomainBindings{"edge": "ns"}}, nil, policies...)
	resp := e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: descriptors})
	if len(resp.GetStatuses()) != n {
		t.Fatalf("%d statuses, want %d", len(resp.GetStatuses()), n)
	}
	for i, st := range resp.GetStatuses() {
		limit := uint32(10 + i) //nolint:gosec // small
		if st.GetCode() != rlsOK || st.GetLimitRemaining() != limit-1 || st.GetCurrentLimit().GetRequestsPerUnit() != limit ||
			st.GetCurrentLimit().GetName() != fmt.Sprintf("k%d/l", i) || st.GetDurationUntilReset().AsDuration() <= 0 || st.GetDurationUntilReset().AsDuration() > time.Minute {
			t.Errorf("descriptor %d: %v, want OK, %d remaining of %d a minute (k%d/l), reset within 1m", i, st, limit-1, limit, i)
		}
	}
}

// A request's descriptors are decided together: when one is over its
// limit, none is counted (envoyproxy/ratelimit would count the others).
func TestRLSDecidesDescriptorsAllOrNothing(t *testing.T) {
	e := start(t, memstore.New().Backend(), Options{Domains: DomainBindings{"edge": "ns"}}, nil,
		compile(t, "ns", "client", "match: {descriptor: [{key: remote_address}]}\nlimits: [{name: l, fixedWindow: {limit: 10, window: 1h}}]"),
		compile(t, "ns", "login", "match: {descriptor: [{key: generic_key, value: login}]}\nlimits: [{name: l, fixedWindow: {limit: 2, window: 1h}}]"))
	both := &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{
		rlsDescriptor("remote_address", "10.0.0.1"), rlsDescriptor("generic_key", "login")}}
	var got [][]ratelimitv3.RateLimitResponse_Code
	for range 4 {
		got = append(got, codesOf(e.shouldRateLimit(t, both)))
	}
	want := [][]ratelimitv3.RateLimitResponse_Code{{rlsOK, rlsOK, rlsOK}, {rlsOK, rlsOK, rlsOK}, {rlsOver, rlsOK, rlsOver}, {rlsOver, rlsOK, rlsOver}}
	for i := range want {
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Fatalf("codes (overall, client, login) = %v, want %v", got, want)
			}
		}
	}
	// The two denied requests took nothing from the client's bucket.
	resp := e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: both.Descriptors[:1]})
	if r := resp.GetStatuses()[0].GetLimitRemaining(); r != 7 {
		t.Errorf("client's remaining %d, want 7 (10 - 2 admitted - this one)", r)
	}
}

func TestRLSHitsAddend(t *testing.T) {
	e := start(t, memstore.New().Backend(), Options{Domains: DomainBindings{"edge": "ns"}}, nil,
		compile(t, "ns", "tokens", "match: {descriptor: [{key: user}]}\nlimits: [{name: l, fixedWindow: {limit: 100, window: 1h}}]"))
	send := func(req *ratelimitv3.RateLimitRequest) uint32 {
		req.Domain = "edge"
		return e.shouldRateLimit(t, req).GetStatuses()[0].GetLimitRemaining()
	}
	d := func() *ratelimitcommonv3.RateLimitDescriptor { return rlsDescriptor("user", "u") }
	peek := d()
	peek.HitsAddend = wrapperspb.UInt64(0)
	forty := d()
	forty.HitsAddend = wrapperspb.UInt64(40)
	refund := d()
	refund.HitsAddend, refund.IsNegativeHits = wrapperspb.UInt64(50), true
	negativeOne := d()
	negativeOne.IsNegativeHits = true
	steps := []struct {
		name string
		req  *ratelimitv3.RateLimitRequest
		want uint32
	}{
		{"the policy's cost", &ratelimitv3.RateLimitRequest{Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{d()}}, 99},
		{"the request's hits_addend", &ratelimitv3.RateLimitRequest{HitsAddend: 9, Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{d()}}, 90},
		{"the descriptor's over the request's", &ratelimitv3.RateLimitRequest{HitsAddend: 9, Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{forty}}, 50},
		{"0: check without counting", &ratelimitv3.RateLimitRequest{HitsAddend: 9, Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{peek}}, 50},
		{"negative hits: given back", &ratelimitv3.RateLimitRequest{Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{refund}}, 100},
		{"never past untouched", &ratelimitv3.RateLimitRequest{Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{refund}}, 100},
		{"forty again", &ratelimitv3.RateLimitRequest{Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{forty}}, 60},
		{"negative hits of the policy's cost", &ratelimitv3.RateLimitRequest{Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{negativeOne}}, 61},
		{"negative hits beside a check", &ratelimitv3.RateLimitRequest{Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{forty, refund}}, 60}, // 39 counted, 50 back: 0 (never below), then 40
	}
	for _, s := range steps {
		if got := send(s.req); got != s.want {
			t.Errorf("%s: remaining %d, want %d", s.name, got, s.want)
		}
	}
}

func TestRLSShadowModeNeverDenies(t *testing.T) {
	e := start(t, memstore.New().Backend(), Options{Domains: DomainBindings{"edge": "ns"}}, nil,
		compile(t, "ns", "trial", "mode: Shadow\nmatch: {domain: edge}\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"))
	req := &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{rlsDescriptor("k", "v")}}
	for i := range 3 {
		if got := codesOf(e.shouldRateLimit(t, req)); got[0] != rlsOK || got[1] != rlsOK {
			t.Errorf("request %d: %v, want OK (shadow)", i, got)
		}
	}
}

// RLS requests carry no namespace: only the namespace the operator bound a
// domain to answers it, whatever domain another tenant's policy names.
func TestRLSDomainBindingKeepsTenantsApart(t *testing.T) {
	e := start(t, memstore.New().Backend(), Options{Domains: DomainBindings{"edge": "gateway", "team-b": "team-b"}}, nil,
		compile(t, "gateway", "edge", "match: {domain: edge}\nkey: global\nlimits: [{name: l, fixedWindow: {limit: 100, window: 1h}}]"),
		// Tenant B tries to limit the edge domain, and every domain.
		compile(t, "team-b", "grab-edge", "match: {domain: edge}\nkey: global\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"),
		compile(t, "team-b", "grab-all", "match: {descriptor: [{key: remote_address}]}\nkey: global\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"))
	edge := &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{rlsDescriptor("remote_address", "10.0.0.1")}}
	for i := range 5 {
		resp := e.shouldRateLimit(t, edge)
		if resp.GetOverallCode() != rlsOK || resp.GetStatuses()[0].GetCurrentLimit().GetName() != "edge/l" {
			t.Fatalf("edge request %d: %v; want OK by gateway/edge alone", i, resp)
		}
	}
	// Team B's own domain is answered by its own policies.
	own := &ratelimitv3.RateLimitRequest{Domain: "team-b", Descriptors: edge.Descriptors}
	if a, b := codesOf(e.shouldRateLimit(t, own)), codesOf(e.shouldRateLimit(t, own)); a[0] != rlsOK || b[0] != rlsOver {
		t.Errorf("team-b's domain: %v then %v, want OK then OVER_LIMIT", a, b)
	}
	// An unbound domain is OK with no limit, whatever the policies say.
	other := &ratelimitv3.RateLimitRequest{Domain: "unbound", Descriptors: edge.Descriptors}
	if resp := e.shouldRateLimit(t, other); resp.GetOverallCode() != rlsOK || len(resp.GetStatuses()) != 1 || resp.GetStatuses()[0].GetCurrentLimit() != nil {
		t.Errorf("unbound domain: %v", resp)
	}
}

func TestDomainBindingsFlag(t *testing.T) {
	d := DomainBindings{}
	if err := d.Set("edge=gateway, internal=team-a"); err != nil {
		t.Fatal(err)
	}
	if err := d.Set("edge=gateway"); err != nil {
		t.Errorf("binding a domain again to the same namespace: %v", err)
	}
	if got := d.String(); got != "edge=gateway,internal=team-a" {
		t.Errorf("String() = %q", got)
	}
	for _, bad := range []string{"edge=team-b", "edge", "=ns", "edge=Not_A_Namespace"} {
		if err := d.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted", bad)
		}
	}
}

// A denial the deny cache answers has figures only for the limit that
// denied: the other descriptor, charged nothing and not read from the
// store, reports no limit rather than a remaining 0 it does not have
// (Envoy would turn that into an "X-RateLimit-Remaining: 0" header).
// When the store decides the denial, it reports its real remaining.
func TestRLSCachedDenialReportsNoFiguresForOtherDescriptors(t *testing.T) {
	e := start(t, memstore.New().Backend(), Options{Domains: DomainBindings{"edge": "ns"}}, nil,
		compile(t, "ns", "client", "match: {descriptor: [{key: remote_address}]}\nlimits: [{name: l, fixedWindow: {limit: 10, window: 1h}}]"),
		compile(t, "ns", "login", "match: {descriptor: [{key: generic_key, value: login}]}\nlimits: [{name: l, fixedWindow: {limit: 2, window: 1h}}]"))
	both := &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{
		rlsDescriptor("remote_address", "10.0.0.1"), rlsDescriptor("generic_key", "login")}}
	for range 2 {
		e.shouldRateLimit(t, both)
	}
	cacheHits := func() float64 { return testutil.ToFloat64(counterOf(t, e.reg, "sluice_deny_cache_hits_total", nil)) }
	byStore := e.shouldRateLimit(t, both)
	client, login := byStore.GetStatuses()[0], byStore.GetStatuses()[1]
	if byStore.GetOverallCode() != rlsOver || client.GetCode() != rlsOK || client.GetLimitRemaining() != 8 || client.GetCurrentLimit().GetRequestsPerUnit() != 10 {
		t.Fatalf("denied by the store: %v; want OVER_LIMIT, the client's descriptor OK with 8 of 10 left", byStore)
	}
	if login.GetCode() != rlsOver || login.GetLimitRemaining() != 0 || login.GetCurrentLimit().GetRequestsPerUnit() != 2 {
		t.Fatalf("login's status %v, want OVER_LIMIT, 0 of 2 left", login)
	}
	if n := cacheHits(); n != 0 {
		t.Fatalf("%v deny cache hits before the cached denial", n)
	}
	fromCache := e.shouldRateLimit(t, both)
	if n := cacheHits(); n != 1 {
		t.Fatalf("%v deny cache hits, want 1: the store answered", n)
	}
	client, login = fromCache.GetStatuses()[0], fromCache.GetStatuses()[1]
	if fromCache.GetOverallCode() != rlsOver || login.GetCode() != rlsOver || login.GetCurrentLimit().GetRequestsPerUnit() != 2 || login.GetLimitRemaining() != 0 {
		t.Fatalf("denied from the cache: %v; want OVER_LIMIT by login's 2 an hour", fromCache)
	}
	if client.GetCode() != rlsOK || client.GetCurrentLimit() != nil || client.GetLimitRemaining() != 0 || client.GetDurationUntilReset() != nil {
		t.Errorf("the client's descriptor in a cached denial: %v; want OK without figures (nothing was read from the store)", client)
	}
	// Its bucket was not charged: 8 left before, 7 after this one.
	alone := e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: both.Descriptors[:1]})
	if r := alone.GetStatuses()[0].GetLimitRemaining(); r != 7 {
		t.Errorf("client's remaining %d, want 7", r)
	}
}

// withLimit is d carrying its own limit (RateLimitDescriptor.limit).
func withLimit(d *ratelimitcommonv3.RateLimitDescriptor, perUnit uint32, unit typev3.RateLimitUnit) *ratelimitcommonv3.RateLimitDescriptor {
	d.Limit = &ratelimitcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: perUnit, Unit: unit}
	return d
}

// A descriptor's own limit limits it, as envoyproxy/ratelimit does, also
// where no policy matches it: 2 a minute answer OK, OK, OVER_LIMIT.
func TestRLSDescriptorOwnLimit(t *testing.T) {
	// 10 seconds into a minute: the window ends in 50.
	at := time.Unix(1_800_000_000+10, 0)
	e := start(t, memstore.New(memstore.WithClock(func() time.Time { return at })).Backend(), Options{Domains: DomainBindings{"edge": "ns"}}, nil)
	req := &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{
		withLimit(rlsDescriptor("generic_key", "unconfigured"), 2, typev3.RateLimitUnit_MINUTE)}}
	var got []string
	for range 3 {
		resp := e.shouldRateLimit(t, req)
		st := resp.GetStatuses()[0]
		got = append(got, fmt.Sprintf("%s %d", resp.GetOverallCode(), st.GetLimitRemaining()))
		if cl := st.GetCurrentLimit(); cl.GetRequestsPerUnit() != 2 || cl.GetUnit() != ratelimitv3.RateLimitResponse_RateLimit_MINUTE {
			t.Errorf("current_limit %v, want 2 per MINUTE", cl)
		}
		if d := st.GetDurationUntilReset().AsDuration(); d != 50*time.Second {
			t.Errorf("duration_until_reset %v, want 50s: the rest of the minute", d)
		}
	}
	if want := []string{"OK 1", "OK 0", "OVER_LIMIT 0"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("answers %v, want %v", got, want)
	}
}

// A descriptor's own limit replaces the policies that match it (as the
// peer's replaces its configured limit), in the same all-or-nothing call
// as the other descriptors; a domain bound to no namespace ignores it, as
// the peer ignores it in a domain it has no configuration for; and
// --rls-descriptor-limits=false ignores it everywhere.
func TestRLSDescriptorOwnLimitReplacesPolicies(t *testing.T) {
	policies := []*policy.Policy{
		compile(t, "ns", "login", "match: {descriptor: [{key: generic_key, value: login}]}\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"),
		compile(t, "ns", "client", "match: {descriptor: [{key: remote_address}]}\nlimits: [{name: l, fixedWindow: {limit: 10, window: 1h}}]"),
	}
	at := time.Unix(1_800_000_000+10, 0)
	e := start(t, memstore.New(memstore.WithClock(func() time.Time { return at })).Backend(), Options{Domains: DomainBindings{"edge": "ns"}}, nil, policies...)
	req := func(domain string) *ratelimitv3.RateLimitRequest {
		return &ratelimitv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{
			withLimit(rlsDescriptor("generic_key", "login"), 3, typev3.RateLimitUnit_MINUTE), rlsDescriptor("remote_address", "10.0.0.1")}}
	}
	var got [][]ratelimitv3.RateLimitResponse_Code
	for i := range 4 {
		resp := e.shouldRateLimit(t, req("edge"))
		got = append(got, codesOf(resp))
		login := resp.GetStatuses()[0]
		if cl := login.GetCurrentLimit(); cl.GetName() != "@descriptor-limit/minute" || cl.GetRequestsPerUnit() != 3 || login.GetLimitRemaining() != uint32(max(2-i, 0)) { //nolint:gosec // small
			t.Errorf("request %d: login's status %v, want 3 a minute (@descriptor-limit/minute), %d remaining", i, login, max(2-i, 0))
		}
	}
	want := [][]ratelimitv3.RateLimitResponse_Code{{rlsOK, rlsOK, rlsOK}, {rlsOK, rlsOK, rlsOK}, {rlsOK, rlsOK, rlsOK}, {rlsOver, rlsOver, rlsOK}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("codes (overall, login, client) %v, want %v: 3 a minute in place of login's 1 an hour", got, want)
	}
	// The denied request charged the client nothing: 10 - 3 - this one.
	alone := e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: req("edge").Descriptors[1:]})
	if r := alone.GetStatuses()[0].GetLimitRemaining(); r != 6 {
		t.Errorf("client's remaining %d, want 6", r)
	}
	if resp := e.shouldRateLimit(t, req("unbound")); resp.GetOverallCode() != rlsOK || resp.GetStatuses()[0].GetCurrentLimit() != nil {
		t.Errorf("unbound domain: %v, want OK without a limit", resp)
	}

	off := start(t, memstore.New(memstore.WithClock(func() time.Time { return at })).Backend(), Options{Domains: DomainBindings{"edge": "ns"}, IgnoreDescriptorLimits: true}, nil, policies...)
	first, second := off.shouldRateLimit(t, req("edge")), off.shouldRateLimit(t, req("edge"))
	if first.GetOverallCode() != rlsOK || first.GetStatuses()[0].GetCurrentLimit().GetName() != "login/l" || second.GetOverallCode() != rlsOver {
		t.Errorf("descriptor limits off: %v then %v, want login's 1 an hour: OK then OVER_LIMIT", first, second)
	}
}

// A limit no unit or number can express is refused, naming the field:
// envoyproxy/ratelimit fails on an unknown unit too.
func TestRLSDescriptorOwnLimitRefusesWhatItCannotRead(t *testing.T) {
	e := start(t, memstore.New().Backend(), Options{Domains: DomainBindings{"edge": "ns"}}, nil)
	for name, tt := range map[string]struct {
		d    *ratelimitcommonv3.RateLimitDescriptor
		want string
	}{
		"unknown unit":         {withLimit(rlsDescriptor("k", "v"), 2, typev3.RateLimitUnit_UNKNOWN), "descriptors[1].limit.unit: 0 is no unit"},
		"unit out of range":    {withLimit(rlsDescriptor("k", "v"), 2, typev3.RateLimitUnit(8)), "descriptors[1].limit.unit: 8 is no unit"},
		"multiplier 0":         {withMultiplier(withLimit(rlsDescriptor("k", "v"), 2, typev3.RateLimitUnit_SECOND), 0), "descriptors[1].limit.unit_multiplier: 0"},
		"multiplier past 366d": {withMultiplier(withLimit(rlsDescriptor("k", "v"), 2, typev3.RateLimitUnit_YEAR), 2), "descriptors[1].limit.unit_multiplier: 2"},
	} {
		req := &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{rlsDescriptor("a", "b"), tt.d}}
		_, err := ratelimitv3.NewRateLimitServiceClient(e.conn).ShouldRateLimit(context.Background(), req)
		if grpcstatus.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want InvalidArgument naming %q", name, err, tt.want)
		}
	}
}

// A unit_multiplier (Envoy 1.35 on) multiplies the window.
func TestRLSDescriptorOwnLimitMultiplier(t *testing.T) {
	at := time.Unix(1_800_000_000+10, 0)
	e := start(t, memstore.New(memstore.WithClock(func() time.Time { return at })).Backend(), Options{Domains: DomainBindings{"edge": "ns"}}, nil)
	req := &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{
		withMultiplier(withLimit(rlsDescriptor("k", "v"), 1, typev3.RateLimitUnit_SECOND), 30)}}
	first, second := e.shouldRateLimit(t, req), e.shouldRateLimit(t, req)
	if first.GetOverallCode() != rlsOK || second.GetOverallCode() != rlsOver {
		t.Fatalf("1 per 30 seconds: %v then %v, want OK then OVER_LIMIT", codesOf(first), codesOf(second))
	}
	// 10s past a 30s boundary; no unit of the protocol says 30 seconds.
	if st := first.GetStatuses()[0]; st.GetDurationUntilReset().AsDuration() != 20*time.Second || st.GetCurrentLimit() != nil {
		t.Errorf("status %v, want 20s until reset and no current_limit", st)
	}
}

func withMultiplier(d *ratelimitcommonv3.RateLimitDescriptor, m uint32) *ratelimitcommonv3.RateLimitDescriptor {
	d.Limit.UnitMultiplier = wrapperspb.UInt32(m)
	return d
}

// A descriptor's own limit of 0 denies every request that counts, as
// envoyproxy/ratelimit does: OVER_LIMIT with its limit (0 a minute), 0
// remaining and the rest of the minute until reset, without asking the
// store and charging the request's other descriptors nothing. A check of
// nothing (hits_addend 0) is OK with the same figures, as the peer
// answers it while its window has counted nothing.
func TestRLSDescriptorOwnLimitOfZeroDenies(t *testing.T) {
	e := start(t, memstore.New().Backend(), Options{Domains: DomainBindings{"edge": "ns"}}, nil,
		compile(t, "ns", "client", "match: {descriptor: [{key: remote_address}]}\nlimits: [{name: l, fixedWindow: {limit: 10, window: 1h}}]"))
	client := func() *ratelimitcommonv3.RateLimitDescriptor { return rlsDescriptor("remote_address", "10.0.0.1") }
	blocked := func() *ratelimitcommonv3.RateLimitDescriptor {
		return withLimit(rlsDescriptor("generic_key", "blocked"), 0, typev3.RateLimitUnit_MINUTE)
	}
	checkOnly := func(d *ratelimitcommonv3.RateLimitDescriptor) *ratelimitcommonv3.RateLimitDescriptor {
		d.HitsAddend = wrapperspb.UInt64(0)
		return d
	}
	// ask sends the descriptors and checks the last one's figures: 0 a
	// minute, 0 remaining, reset at the end of the minute by the clock.
	ask := func(name string, ds ...*ratelimitcommonv3.RateLimitDescriptor) *ratelimitv3.RateLimitResponse {
		t.Helper()
		before := time.Now()
		resp := e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: ds})
		after := time.Now()
		st := resp.GetStatuses()[len(ds)-1]
		if cl := st.GetCurrentLimit(); cl == nil || cl.GetRequestsPerUnit() != 0 || cl.GetUnit() != ratelimitv3.RateLimitResponse_RateLimit_MINUTE || st.GetLimitRemaining() != 0 {
			t.Errorf("%s: status %v, want 0 per MINUTE with 0 remaining", name, st)
		}
		d := st.GetDurationUntilReset().AsDuration()
		if end := after.Add(d).Truncate(time.Minute); d <= 0 || d > time.Minute || end.Before(before.Add(d-time.Microsecond)) {
			t.Errorf("%s: duration_until_reset %v between %s and %s, want the rest of the minute", name, d, before.Format(time.StampMicro), after.Format(time.StampMicro))
		}
		return resp
	}
	storeCalls := func() uint64 {
		t.Helper()
		mfs, err := e.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "sluice_redis_duration_seconds" {
				return mf.GetMetric()[0].GetHistogram().GetSampleCount()
			}
		}
		t.Fatal("no sluice_redis_duration_seconds")
		return 0
	}

	calls := storeCalls()
	for i := range 2 {
		resp := ask(fmt.Sprintf("denial %d", i+1), client(), blocked())
		if got, want := fmt.Sprint(codesOf(resp)), fmt.Sprint([]ratelimitv3.RateLimitResponse_Code{rlsOver, rlsOK, rlsOver}); got != want {
			t.Errorf("denial %d: codes (overall, client, blocked) %s, want %s", i+1, got, want)
		}
		if st := resp.GetStatuses()[0]; st.GetCurrentLimit() != nil || st.GetLimitRemaining() != 0 {
			t.Errorf("denial %d: the client's status %v, want no figures (nothing was read or charged)", i+1, st)
		}
	}
	if n := storeCalls() - calls; n != 0 {
		t.Errorf("%d store calls for requests a limit of 0 denies, want none", n)
	}
	if n := testutil.ToFloat64(counterOf(t, e.reg, "sluice_decisions_total", map[string]string{"namespace": "ns", "policy": policy.DescriptorLimitPolicy, "limit": "minute", "result": "denied"})); n != 2 {
		t.Errorf("%v denials counted for @descriptor-limit/minute, want 2", n)
	}
	// The denials charged the client nothing: 10, less this request.
	alone := e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{client()}})
	if r := alone.GetStatuses()[0].GetLimitRemaining(); r != 9 {
		t.Errorf("client's remaining %d after two denials, want 9", r)
	}

	calls = storeCalls()
	if resp := ask("a check of nothing", checkOnly(blocked())); resp.GetOverallCode() != rlsOK {
		t.Errorf("a check of nothing: %v, want OK", codesOf(resp))
	}
	if n := storeCalls() - calls; n != 0 {
		t.Errorf("%d store calls for a check of nothing against a limit of 0, want none", n)
	}
	// Beside a descriptor that counts, the check of nothing lets it count.
	if resp := ask("a check of nothing beside the client", client(), checkOnly(blocked())); resp.GetOverallCode() != rlsOK || resp.GetStatuses()[0].GetLimitRemaining() != 8 {
		t.Errorf("a check of nothing beside the client: %v, want OK with the client's 8 remaining", resp)
	}
}
