package policy

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"slices"
	"testing"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

// The pieces random policies and requests are drawn from: few enough that
// hosts, suffixes, paths and prefixes often meet.
var (
	indexHosts     = []string{"a.x", "b.a.x", "x", "ax", "c.b"}
	indexHostRules = []string{"a.x", "b.a.x", "x", "*.x", "*.a.x", "c.b", "*.b"}
	indexPaths     = []string{"/", "/a", "/a/", "/a/b", "/ab", "/b", ""}
	indexPathRules = []string{"/", "/a", "/a/b", "/b", "/*", "/a*", "/a/*", "/ab*", "/b/*"}
)

// TestCandidatesMatchTheScan: for random policy sets and requests, the
// policies of the index's candidates that match are those a scan of the
// whole namespace matches, in the same order.
func TestCandidatesMatchTheScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for set := range 300 {
		var policies []*Policy
		for i := range 1 + rng.IntN(40) {
			policies = append(policies, randomIndexPolicy(t, rng, fmt.Sprintf("p%02d", i)))
		}
		s := NewSet(1, policies)
		for range 50 {
			r := randomIndexRequest(rng)
			want := matching(t, s.Namespace("ns"), r)
			candidates := s.AppendCandidates(nil, "ns", r)
			if got := matching(t, candidates, r); !slices.Equal(got, want) {
				t.Fatalf("set %d, request %+v: candidates match %v, the scan %v", set, r, got, want)
			}
			if !slices.IsSortedFunc(candidates, byName) || len(slices.Compact(slices.Clone(candidates))) != len(candidates) {
				t.Fatalf("set %d: candidates %v not in name order once each", set, names(candidates))
			}
		}
		if got := s.AppendCandidates(nil, "other", randomIndexRequest(rng)); len(got) != 0 {
			t.Fatalf("another namespace's candidates: %v", names(got))
		}
	}
}

func matching(t *testing.T, policies []*Policy, r *Request) []string {
	t.Helper()
	var e Eval
	e.Reset(r)
	var out []string
	for _, p := range policies {
		if ok, err := e.Match(p); err != nil || ok {
			out = append(out, p.Name)
		}
	}
	return out
}

func names(policies []*Policy) []string {
	out := make([]string, len(policies))
	for i, p := range policies {
		out[i] = p.Name
	}
	return out
}

// randomIndexPolicy is an HTTP policy with random hosts, paths and
// methods, a descriptor policy, or a policy targeting a route.
func randomIndexPolicy(t *testing.T, rng *rand.Rand, name string) *Policy {
	t.Helper()
	spec := ratelimitv1alpha1.RateLimitPolicySpec{
		Limits: []ratelimitv1alpha1.Limit{{Name: "l", FixedWindow: &ratelimitv1alpha1.WindowLimit{Limit: 10, Window: "1m"}}},
	}
	var routes *Routes
	switch rng.IntN(10) {
	case 0:
		spec.Match.Domain = "d"
		spec.Key = "{descriptor}"
	case 1:
		spec.TargetRefs = []gatewayv1.LocalPolicyTargetReferenceWithSectionName{{LocalPolicyTargetReference: gatewayv1.LocalPolicyTargetReference{
			Group: "gateway.networking.k8s.io", Kind: "HTTPRoute", Name: "target"}}}
		routes = &Routes{Tables: []RouteTable{{Gateway: "gw/edge", Entries: []RouteEntry{
			{Hostnames: []string{pick(rng, indexHostRules)}, Path: prefix(pick(rng, []string{"/a", "/b"})), Targeted: true},
		}}}}
	default:
		for range rng.IntN(3) {
			spec.Match.Hosts = append(spec.Match.Hosts, ratelimitv1alpha1.HostMatch(pick(rng, indexHostRules)))
		}
		for range rng.IntN(3) {
			spec.Match.Paths = append(spec.Match.Paths, ratelimitv1alpha1.PathMatch(pick(rng, indexPathRules)))
		}
		if rng.IntN(4) == 0 {
			spec.Match.Methods = []ratelimitv1alpha1.HTTPMethod{"POST"}
		}
	}
	p, err := CompileTargeted("ns", name, &spec, routes)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// randomIndexRequest is an HTTP request with random readings of its path,
// or a descriptor.
func randomIndexRequest(rng *rand.Rand) *Request {
	if rng.IntN(8) == 0 {
		return &Request{Kind: KindDescriptor, Domain: "d", Descriptor: []DescriptorEntry{{Key: "k", Value: "v"}}}
	}
	r := &Request{Method: pick(rng, []string{"GET", "POST"}), Host: pick(rng, indexHosts), Path: pick(rng, indexPaths),
		Header: http.Header{}, ClientIP: netip.MustParseAddr("203.0.113.7")}
	for i := range rng.IntN(3) {
		r.AltPaths[i] = pick(rng, indexPaths)
	}
	return r
}

func pick(rng *rand.Rand, from []string) string { return from[rng.IntN(len(from))] }
