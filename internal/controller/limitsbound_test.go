package controller

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/policy"
)

// boundPolicy is a policy of n limits. A domain or keys make it a
// descriptor policy.
func boundPolicy(name string, n int, domain string, keys ...string) ratelimitv1alpha1.RateLimitPolicy {
	p := ratelimitv1alpha1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	for i := range n {
		p.Spec.Limits = append(p.Spec.Limits, ratelimitv1alpha1.Limit{
			Name:        ratelimitv1alpha1.LimitName(fmt.Sprintf("l%d", i)),
			FixedWindow: &ratelimitv1alpha1.WindowLimit{Limit: 10, Window: "1m"},
		})
	}
	p.Spec.Match.Domain = domain
	for _, k := range keys {
		p.Spec.Match.Descriptor = append(p.Spec.Match.Descriptor, ratelimitv1alpha1.DescriptorEntryMatch{Key: k})
	}
	return p
}

// hostPolicy is an HTTP policy of n limits for hosts.
func hostPolicy(name string, n int, hosts ...ratelimitv1alpha1.HostMatch) ratelimitv1alpha1.RateLimitPolicy {
	p := boundPolicy(name, n, "")
	p.Spec.Match.Hosts = hosts
	return p
}

func TestLimitsBoundCases(t *testing.T) {
	const bound = 640 // 80 policies of 8 limits; 64 descriptors of 10 limits
	type verdict struct {
		over   bool
		reason string
		msg    []string
	}
	http := func(figures ...string) verdict {
		return verdict{true, ratelimitv1alpha1.ReasonHTTPPoliciesOverBound, figures}
	}
	desc := func(figures ...string) verdict {
		return verdict{true, ratelimitv1alpha1.ReasonDescriptorPoliciesOverBound, figures}
	}
	for _, tc := range []struct {
		name     string
		policies []ratelimitv1alpha1.RateLimitPolicy
		want     map[string]verdict // by policy; absent: not over
	}{{
		name:     "HTTP policies at the bound",
		policies: []ratelimitv1alpha1.RateLimitPolicy{boundPolicy("a", 8, ""), hostPolicy("b", 8, "a.example.com"), hostPolicy("c", 8, "b.example.com"), hostPolicy("d", 624, "*.example.com")},
	}, {
		name:     "HTTP policies over the bound",
		policies: []ratelimitv1alpha1.RateLimitPolicy{boundPolicy("a", 8, ""), hostPolicy("b", 8, "a.example.com"), hostPolicy("c", 9, "b.example.com"), hostPolicy("d", 624, "*.example.com")},
		want: map[string]verdict{
			"a": http("A request to host b.example.com can match 3 HTTP policies of this namespace with 641 limits"),
			"c": http("host b.example.com", "641 limits"),
			"d": http("host b.example.com", "641 limits", "more than the 640 one check evaluates", "400 too-many-limits", "match.hosts"),
		},
	}, {
		name: "a host listed twice, or under a wildcard of the same policy, counts once",
		policies: []ratelimitv1alpha1.RateLimitPolicy{
			hostPolicy("a", 8*79, "A.example.com", "a.example.com", "*.example.com", "*.b.example.com", "x.b.example.com"),
			boundPolicy("b", 8, ""),
		},
	}, {
		name:     "any host",
		policies: []ratelimitv1alpha1.RateLimitPolicy{boundPolicy("a", 8*79, ""), boundPolicy("b", 9, ""), hostPolicy("c", 1, "c.example.com")},
		want: map[string]verdict{
			"a": http("A request to host c.example.com can match 3 HTTP policies"),
			"b": http("host c.example.com", "642 limits"),
			"c": http("host c.example.com", "642 limits"),
		},
	}, {
		name:     "descriptor policies are counted apart from HTTP ones",
		policies: []ratelimitv1alpha1.RateLimitPolicy{boundPolicy("http", 600, ""), boundPolicy("d", 10, "edge")},
	}, {
		name: "64 × 11 over it; other domains and keys apart",
		policies: []ratelimitv1alpha1.RateLimitPolicy{
			boundPolicy("user", 8, "edge", "user"), boundPolicy("user-day", 3, "edge", "user"),
			boundPolicy("ip", 10, "edge", "remote_address"), boundPolicy("other", 10, "other", "user"),
			boundPolicy("two-keys", 10, "edge", "user", "path"),
		},
		want: map[string]verdict{
			"user": desc("of domain edge carries up to 64 descriptors, and a descriptor with the keys [user] can match 2 descriptor policies of this namespace with 11 limits together",
				"up to 64 × 11 = 704 limits in one check, more than the 640", "INVALID_ARGUMENT"),
			"user-day": desc("704 limits"),
		},
	}, {
		name: "a policy of any domain meets every domain's descriptors of its keys",
		policies: []ratelimitv1alpha1.RateLimitPolicy{
			boundPolicy("ip", 10, "edge", "remote_address"), boundPolicy("other", 5, "other"),
			boundPolicy("any", 5, "", "x"),
		},
	}, {
		name: "... and takes them over",
		policies: []ratelimitv1alpha1.RateLimitPolicy{
			boundPolicy("ip", 10, "edge", "remote_address"), boundPolicy("other", 5, "other"),
			boundPolicy("any", 5, "", "x"), boundPolicy("other-day", 1, "other"),
		},
		want: map[string]verdict{
			"other":     desc("of domain other", "the keys [x]", "3 descriptor policies", "64 × 11 = 704"),
			"other-day": desc("of domain other", "the keys [x]", "64 × 11 = 704"),
			"any":       desc("of domain other", "the keys [x]", "64 × 11 = 704"),
		},
	}, {
		name:     "a domain policy meets the any-domain policies of any keys",
		policies: []ratelimitv1alpha1.RateLimitPolicy{boundPolicy("edge", 6, "edge"), boundPolicy("keys", 5, "", "k"), boundPolicy("more-keys", 4, "", "k", "v")},
		want: map[string]verdict{
			"edge": desc("of domain edge", "the keys [k]", "64 × 11 = 704"),
			"keys": desc("of domain edge", "the keys [k]"),
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			b := newLimitsBound(tc.policies, bound)
			for i := range tc.policies {
				p := &tc.policies[i]
				over, reason, msg := b.of(p)
				want := tc.want[p.Name]
				if over != want.over || reason != want.reason {
					t.Errorf("%s: over %v reason %q (%s), want over %v reason %q", p.Name, over, reason, msg, want.over, want.reason)
				}
				for _, f := range want.msg {
					if !strings.Contains(msg, f) {
						t.Errorf("%s: message %q lacks %q", p.Name, msg, f)
					}
				}
			}
		})
	}
}

// TestLimitsBoundIsTheMostOneRequestMeets compares each policy's worst
// case with the most limits that internal/policy's matcher finds on any
// host or descriptor a brute force can name: each one the policies name,
// deeper ones, and ones they do not name.
func TestLimitsBoundIsTheMostOneRequestMeets(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	hostPool := []ratelimitv1alpha1.HostMatch{"a.example.com", "A.Example.com", "b.example.com", "x.b.example.com", "example.com", "other.org",
		"*.example.com", "*.b.example.com", "*.org", "*.x.b.example.com"}
	var hosts []string
	for _, h := range hostPool {
		h := strings.ToLower(strings.TrimPrefix(string(h), "*."))
		hosts = append(hosts, h, "zz."+h, "y.zz."+h)
	}
	hosts = append(hosts, "unnamed.net")
	domains := []string{"", "a", "b", "c"}
	keySets := [][]string{nil, {"k"}, {"k", "v"}, {"v"}, {"v", "k"}}
	for round := range 300 {
		var policies []ratelimitv1alpha1.RateLimitPolicy
		for i := range 1 + rng.IntN(12) {
			d, ks := domains[rng.IntN(len(domains))], keySets[rng.IntN(len(keySets))]
			p := boundPolicy(fmt.Sprintf("p%d", i), 1+rng.IntN(8), d, ks...)
			if d == "" && ks == nil { // an HTTP policy
				for range rng.IntN(4) {
					p.Spec.Match.Hosts = append(p.Spec.Match.Hosts, hostPool[rng.IntN(len(hostPool))])
				}
			}
			policies = append(policies, p)
		}
		var requests []policy.Request
		for _, h := range hosts {
			requests = append(requests, policy.Request{Method: "GET", Host: h, Path: "/"})
		}
		for _, d := range append(domains[1:], "unnamed") {
			for _, ks := range append(keySets[1:], []string{"unnamed"}) {
				r := policy.Request{Kind: policy.KindDescriptor, Domain: d}
				for _, k := range ks {
					r.Descriptor = append(r.Descriptor, policy.DescriptorEntry{Key: k, Value: "x"})
				}
				requests = append(requests, r)
			}
		}
		compiled := make([]*policy.Policy, len(policies))
		for i := range policies {
			c, err := policy.Compile("ns", policies[i].Name, &policies[i].Spec)
			if err != nil {
				t.Fatal(err)
			}
			compiled[i] = c
		}
		// most[i] is the most limits one request (one descriptor) that
		// policy i matches meets.
		most := make([]int, len(policies))
		var eval policy.Eval
		for _, r := range requests {
			eval.Reset(&r)
			limits, matched := 0, []int{}
			for i, c := range compiled {
				if ok, err := eval.Match(c); err != nil {
					t.Fatal(err)
				} else if ok {
					limits += len(policies[i].Spec.Limits)
					matched = append(matched, i)
				}
			}
			for _, i := range matched {
				most[i] = max(most[i], limits)
			}
		}
		bound := check.MaxParts * (5 + rng.IntN(20))
		b := newLimitsBound(policies, bound)
		for i := range policies {
			p := &policies[i]
			got, factor := b.http.of(p).limits, 1
			if c, ok := classOf(p); ok {
				got, factor = b.worst[c].limits, check.MaxParts
			}
			if got != most[i] {
				t.Fatalf("round %d: %s: worst %d limits, the matcher finds %d; policies %s", round, p.Name, got, most[i], summary(policies))
			}
			if over, _, _ := b.of(p); over != (factor*most[i] > bound) {
				t.Fatalf("round %d: %s over %v at %d × %d against %d", round, p.Name, over, factor, most[i], bound)
			}
		}
	}
}

// summary is each policy's match and limits.
func summary(policies []ratelimitv1alpha1.RateLimitPolicy) string {
	var b strings.Builder
	for i := range policies {
		p := &policies[i]
		fmt.Fprintf(&b, "%s(hosts %v, domain %q, %d keys, %d limits) ", p.Name, p.Spec.Match.Hosts, p.Spec.Match.Domain, len(p.Spec.Match.Descriptor), len(p.Spec.Limits))
	}
	return b.String()
}
