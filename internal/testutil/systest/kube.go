package systest

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/app"
)

// ClientHeader is the request header the policies of Policy key on.
const ClientHeader = "X-Client"

// KubeClient is a direct (uncached) client for cfg with Sluice's types.
func KubeClient(t testing.TB, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: app.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// CreateNamespaces creates namespaces.
func CreateNamespaces(t testing.TB, c client.Client, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// Policy is a RateLimitPolicy on path with the given limits, keyed on the
// X-Client header (a request without it is denied).
func Policy(namespace, name, path string, failure ratelimitv1alpha1.FailureMode, limits ...ratelimitv1alpha1.Limit) *ratelimitv1alpha1.RateLimitPolicy {
	return &ratelimitv1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: ratelimitv1alpha1.RateLimitPolicySpec{
			Match:        ratelimitv1alpha1.RequestMatch{Paths: []ratelimitv1alpha1.PathMatch{ratelimitv1alpha1.PathMatch(path)}},
			Key:          "{header:" + ClientHeader + "}",
			OnMissingKey: ratelimitv1alpha1.OnMissingKeyDeny,
			FailureMode:  failure,
			Limits:       limits,
		},
	}
}

// FixedWindow is a limit of n requests per window.
func FixedWindow(name string, n int64, window string) ratelimitv1alpha1.Limit {
	return ratelimitv1alpha1.Limit{Name: ratelimitv1alpha1.LimitName(name),
		FixedWindow: &ratelimitv1alpha1.WindowLimit{Limit: ratelimitv1alpha1.Count(n), Window: ratelimitv1alpha1.Duration(window)}}
}

// EveryAlgorithm is one limit per algorithm, each admitting a burst of n
// and refilling slowly (over an hour; the calendar year in Berlin), named
// after its algorithm.
func EveryAlgorithm(n int64) []ratelimitv1alpha1.Limit {
	c := ratelimitv1alpha1.Count(n)
	return []ratelimitv1alpha1.Limit{
		{Name: "token-bucket", TokenBucket: &ratelimitv1alpha1.TokenBucket{Capacity: c, RefillRate: 1, RefillInterval: "1h"}},
		{Name: "fixed-window", FixedWindow: &ratelimitv1alpha1.WindowLimit{Limit: c, Window: "1h"}},
		{Name: "sliding-window-log", SlidingWindowLog: &ratelimitv1alpha1.WindowLimit{Limit: c, Window: "1h"}},
		{Name: "sliding-window-counter", SlidingWindowCounter: &ratelimitv1alpha1.WindowLimit{Limit: c, Window: "1h"}},
		{Name: "leaky-bucket", LeakyBucket: &ratelimitv1alpha1.LeakyBucket{Capacity: c, LeakRate: 1, LeakInterval: "1h"}},
		{Name: "gcra", GCRA: &ratelimitv1alpha1.GCRA{Rate: 1, Period: "1h", Burst: c}},
		{Name: "calendar", Calendar: &ratelimitv1alpha1.CalendarLimit{Limit: c, Period: ratelimitv1alpha1.CalendarPeriodYear, TimeZone: "Europe/Berlin"}},
	}
}

// IsReady reports whether the policy is Ready at its current generation.
func IsReady(p *ratelimitv1alpha1.RateLimitPolicy) bool {
	return p.Status.ObservedGeneration == p.Generation && apimeta.IsStatusConditionTrue(p.Status.Conditions, ratelimitv1alpha1.ConditionReady)
}

// WaitReady waits until the policy is Ready at its current generation and
// returns it.
func WaitReady(t testing.TB, c client.Client, namespace, name string, timeout time.Duration) *ratelimitv1alpha1.RateLimitPolicy {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var p ratelimitv1alpha1.RateLimitPolicy
	for {
		err := c.Get(context.Background(), types.NamespacedName{Namespace: namespace, Name: name}, &p)
		if err == nil && IsReady(&p) {
			return &p
		}
		if time.Now().After(deadline) {
			t.Fatalf("policy %s/%s not Ready within %s (err %v): generation %d, status %+v", namespace, name, timeout, err, p.Generation, p.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
