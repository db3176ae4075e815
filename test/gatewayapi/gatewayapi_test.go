// Package gatewayapi_test runs the controller against a real API server
// with Gateway API's CRDs and a real Redis, and asks an in-process check
// endpoint (which knows only Redis, as `manager check`) about requests:
// a policy that targets an HTTPRoute limits exactly the requests the route
// receives, follows the route's edits, and reports its ancestors.
package gatewayapi_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/fleet"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/redisconn"
	"github.com/sluice-dev/sluice/internal/testutil/envtest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/webhook"
)

// cluster is the API server, the controller, Redis and a check endpoint;
// one per test (one controller per process), whose subtests each work in a
// namespace of their own.
type cluster struct {
	client   client.Client
	checkURL string
	ns       string
}

// in is c for a subtest in namespace ns (created here).
func (c *cluster) in(t *testing.T, ns string) *cluster {
	t.Helper()
	if err := c.client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	sub := *c
	sub.ns = ns
	return &sub
}

func start(t *testing.T) *cluster {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv := redistest.Start(t)
	sluiceCRDs, err := envtest.CRDDir()
	if err != nil {
		t.Fatal(err)
	}
	gatewayCRDs, err := envtest.GatewayAPICRDDir()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	env, err := envtest.Start(envtest.Options{CRDDirs: []string{sluiceCRDs, gatewayCRDs}, Setup: []func(*envtest.Environment) error{
		func(e *envtest.Environment) error {
			go func() {
				done <- app.RunController(ctx, app.ControllerConfig{RESTConfig: e.Config, MetricsAddr: "0", ProbeAddr: "0", SyncInterval: time.Second},
					&redisconn.Config{URL: "redis://" + srv.Addr() + "/0"})
			}()
			return nil
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	rc := redisstore.NewClient(&redis.UniversalOptions{Addrs: []string{srv.Addr()}})
	store, err := redisstore.New(rc, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	warnings := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	reader := policytable.NewReader(policytable.New(rc), warnings)
	follower := fleet.NewFollower(rc, 200*time.Millisecond, warnings)
	follower.Follow(policytable.Channel, reader)
	go follower.Run(ctx)
	h, err := webhook.New(webhook.Options{Checker: check.New(check.Options{Backend: store.Backend(), Source: reader, DenyCacheSize: -1})})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ts.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
		_ = store.Close()
		_ = rc.Close()
		_ = env.Stop()
	})
	return &cluster{client: env.Client, checkURL: ts.URL}
}

// The scenarios share one API server and controller (attachment_test.go
// has those of Gateway API's attachment rules).
func TestTargetedPolicies(t *testing.T) {
	c := start(t)
	t.Run("HTTPRoute", func(t *testing.T) { policyTargetingAnHTTPRoute(t, c.in(t, "shop")) })
	t.Run("rule", func(t *testing.T) { policyTargetingOneRule(t, c.in(t, "team")) })
	t.Run("listener", func(t *testing.T) { policyTargetingAListener(t, c.in(t, "edge")) })
	t.Run("allowedRoutes.namespaces", func(t *testing.T) {
		routeFromAnotherNamespace(t, c.in(t, "shared-gateway"), c.in(t, "app"))
	})
	t.Run("sectionName and port", func(t *testing.T) { sectionNameAndPort(t, c.in(t, "ports")) })
	t.Run("listener refusals", func(t *testing.T) { listenerRefusals(t, c.in(t, "refusals")) })
	t.Run("status.parents", func(t *testing.T) { refusedByTheImplementation(t, c.in(t, "impl")) })
}

// apply creates or updates objects from YAML documents.
func (c *cluster) apply(t *testing.T, obj client.Object, doc string) {
	t.Helper()
	if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
		t.Fatal(err)
	}
	obj.SetNamespace(c.ns)
	existing := obj.DeepCopyObject().(client.Object)
	err := c.client.Get(context.Background(), client.ObjectKeyFromObject(obj), existing)
	if err == nil {
		obj.SetResourceVersion(existing.GetResourceVersion())
		err = c.client.Update(context.Background(), obj)
	} else {
		err = c.client.Create(context.Background(), obj)
	}
	if err != nil {
		t.Fatalf("apply %s: %v", obj.GetName(), err)
	}
}

// status asks the check endpoint about one request, as Traefik's
// ForwardAuth would, from its own client address.
func (c *cluster) status(t *testing.T, method, host, uri string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, c.checkURL+"/check/"+c.ns, nil)
	req.Header.Set("X-Forwarded-Method", method)
	req.Header.Set("X-Forwarded-Proto", "http")
	req.Header.Set("X-Forwarded-Host", host)
	req.Header.Set("X-Forwarded-Uri", uri)
	req.Header.Set("X-Forwarded-For", "203.0.113.9")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// statuses sends n requests and returns their statuses.
func (c *cluster) statuses(t *testing.T, n int, method, host, uri string) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = c.status(t, method, host, uri)
	}
	return out
}

// eventually polls cond for up to 10 s (the controller reconciles and the
// check endpoint's table follows within a second or two) and logs how long
// it took: the time an edit takes to reach enforcement, for the test's log
// (a figure, not a bound: these machines are shared).
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(10 * time.Second)
	for {
		ok, detail := cond()
		if ok {
			t.Logf("%s: after %v", what, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s: %s", what, detail)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *cluster) policy(t *testing.T, name string) *ratelimitv1alpha1.RateLimitPolicy {
	var p ratelimitv1alpha1.RateLimitPolicy
	if err := c.client.Get(context.Background(), types.NamespacedName{Namespace: c.ns, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

const gateway = `
metadata: {name: edge}
spec:
  gatewayClassName: any
  listeners:
  - {name: http, protocol: HTTP, port: 80, hostname: "*.example.com"}
  - {name: other, protocol: HTTP, port: 8080, hostname: "other.test"}
`

const apiRoute = `
metadata: {name: api}
spec:
  parentRefs: [{name: edge}]
  hostnames: [%s]
  rules:
  - name: orders
    matches: [{path: {type: PathPrefix, value: %s}}]
  - name: admin
    matches: [{path: {type: PathPrefix, value: /admin}, method: POST}]
`

// Another team's route on the same Gateway, more specific under /orders.
const specialRoute = `
metadata: {name: special}
spec:
  parentRefs: [{name: edge}]
  hostnames: [api.example.com]
  rules:
  - matches: [{path: {type: PathPrefix, value: /orders/special}}]
`

func targetPolicy(name, target, section string, limit int) string {
	sectionField := ""
	if section != "" {
		sectionField = ", sectionName: " + section
	}
	return fmt.Sprintf(`
metadata: {name: %s}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: %s%s}]
  key: global
  limits: [{name: minute, fixedWindow: {limit: %d, window: 1m}}]
`, name, target, sectionField, limit)
}

func ready(p *ratelimitv1alpha1.RateLimitPolicy) (bool, string) {
	c := apimeta.FindStatusCondition(p.Status.Conditions, ratelimitv1alpha1.ConditionReady)
	if c == nil {
		return false, "no Ready condition"
	}
	return c.Status == metav1.ConditionTrue && c.ObservedGeneration == p.Generation, c.Reason + ": " + c.Message
}

func policyTargetingAnHTTPRoute(t *testing.T, c *cluster) {
	c.apply(t, &gatewayv1.Gateway{}, gateway)
	c.apply(t, &gatewayv1.HTTPRoute{}, fmt.Sprintf(apiRoute, "api.example.com", "/orders"))
	c.apply(t, &gatewayv1.HTTPRoute{}, specialRoute)
	c.apply(t, &ratelimitv1alpha1.RateLimitPolicy{}, targetPolicy("orders", "api", "", 2))

	eventually(t, "the policy is Ready", func() (bool, string) { return ready(c.policy(t, "orders")) })
	p := c.policy(t, "orders")
	if len(p.Status.Ancestors) != 1 || string(p.Status.Ancestors[0].AncestorRef.Name) != "edge" ||
		p.Status.Ancestors[0].ControllerName != "ratelimit.sluice.dev/controller" ||
		!apimeta.IsStatusConditionTrue(p.Status.Ancestors[0].Conditions, "Accepted") {
		t.Fatalf("ancestors: %+v", p.Status.Ancestors)
	}

	eventually(t, "the route's requests are limited", func() (bool, string) {
		got := c.statuses(t, 1, "GET", "api.example.com", "/orders/1")
		return got[0] == http.StatusTooManyRequests, fmt.Sprint(got)
	})
	// Not the targeted route's: what a more specific route takes, another
	// host, a path no rule matches, a string prefix that is not a path
	// prefix.
	for _, r := range []struct{ method, host, uri string }{
		{"GET", "api.example.com", "/orders/special/x"},
		{"GET", "www.example.com", "/orders/1"},
		{"GET", "api.example.com", "/other"},
		{"GET", "api.example.com", "/ordersx"},
	} {
		if got := c.statuses(t, 3, r.method, r.host, r.uri); got[2] != http.StatusOK {
			t.Errorf("%s %s%s: %v, want 200s (not the targeted route's)", r.method, r.host, r.uri, got)
		}
	}
	if got := c.status(t, "POST", "api.example.com", "/admin/users"); got != http.StatusTooManyRequests {
		t.Errorf("POST /admin (the route's other rule): %d, want 429 (the global bucket is spent)", got)
	}

	// An edit of the route's paths reaches enforcement.
	c.apply(t, &gatewayv1.HTTPRoute{}, fmt.Sprintf(apiRoute, "api.example.com", "/shop"))
	eventually(t, "the edited route's requests are limited and the old path's are not", func() (bool, string) {
		shop, orders := c.status(t, "GET", "api.example.com", "/shop/cart"), c.status(t, "GET", "api.example.com", "/orders/1")
		return shop == http.StatusTooManyRequests && orders == http.StatusOK, fmt.Sprintf("/shop %d, /orders %d", shop, orders)
	})
	// An edit of its hostnames too.
	c.apply(t, &gatewayv1.HTTPRoute{}, fmt.Sprintf(apiRoute, "shop.example.com", "/shop"))
	eventually(t, "the edited hostname's requests are limited and the old hostname's are not", func() (bool, string) {
		shop, api := c.status(t, "GET", "shop.example.com", "/shop/cart"), c.status(t, "GET", "api.example.com", "/shop/cart")
		return shop == http.StatusTooManyRequests && api == http.StatusOK, fmt.Sprintf("shop.example.com %d, api.example.com %d", shop, api)
	})

	// The route deleted: not Ready, naming the target; back when it returns.
	var route gatewayv1.HTTPRoute
	route.Name, route.Namespace = "api", c.ns
	if err := c.client.Delete(context.Background(), &route); err != nil {
		t.Fatal(err)
	}
	eventually(t, "TargetNotFound", func() (bool, string) {
		p := c.policy(t, "orders")
		cond := apimeta.FindStatusCondition(p.Status.Conditions, ratelimitv1alpha1.ConditionReady)
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == ratelimitv1alpha1.ReasonTargetNotFound &&
			len(p.Status.Ancestors) == 1 && apimeta.IsStatusConditionFalse(p.Status.Ancestors[0].Conditions, "Accepted"), fmt.Sprintf("%+v %+v", cond, p.Status.Ancestors)
	})
	if got := c.status(t, "GET", "shop.example.com", "/shop/cart"); got != http.StatusOK {
		t.Errorf("with the route gone: %d, want 200", got)
	}
	c.apply(t, &gatewayv1.HTTPRoute{}, fmt.Sprintf(apiRoute, "api.example.com", "/shop"))
	eventually(t, "Ready again", func() (bool, string) { return ready(c.policy(t, "orders")) })
}

func policyTargetingOneRule(t *testing.T, c *cluster) {
	c.apply(t, &gatewayv1.Gateway{}, gateway)
	c.apply(t, &gatewayv1.HTTPRoute{}, fmt.Sprintf(apiRoute, "api.example.com", "/orders"))
	c.apply(t, &ratelimitv1alpha1.RateLimitPolicy{}, targetPolicy("admin", "api", "admin", 1))
	eventually(t, "the policy is Ready", func() (bool, string) { return ready(c.policy(t, "admin")) })
	eventually(t, "the admin rule's requests are limited", func() (bool, string) {
		got := c.statuses(t, 2, "POST", "api.example.com", "/admin/x")
		return got[1] == http.StatusTooManyRequests, fmt.Sprint(got)
	})
	if got := c.statuses(t, 3, "GET", "api.example.com", "/orders/1"); got[2] != http.StatusOK {
		t.Errorf("the orders rule: %v, want 200s", got)
	}
	if got := c.statuses(t, 2, "GET", "api.example.com", "/admin/x"); got[1] != http.StatusOK {
		t.Errorf("GET /admin (the rule matches POST only): %v, want 200s", got)
	}
	// A section the route lacks is reported.
	c.apply(t, &ratelimitv1alpha1.RateLimitPolicy{}, targetPolicy("admin", "api", "nope", 1))
	eventually(t, "an unknown rule is reported", func() (bool, string) {
		p := c.policy(t, "admin")
		cond := apimeta.FindStatusCondition(p.Status.Conditions, ratelimitv1alpha1.ConditionReady)
		return cond != nil && cond.Reason == ratelimitv1alpha1.ReasonTargetNotFound && cond.ObservedGeneration == p.Generation, fmt.Sprintf("%+v", cond)
	})
}

func policyTargetingAListener(t *testing.T, c *cluster) {
	c.apply(t, &gatewayv1.Gateway{}, gateway)
	c.apply(t, &ratelimitv1alpha1.RateLimitPolicy{}, `
metadata: {name: other-listener}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: edge, sectionName: other}]
  key: global
  limits: [{name: minute, fixedWindow: {limit: 1, window: 1m}}]
`)
	eventually(t, "the policy is Ready", func() (bool, string) { return ready(c.policy(t, "other-listener")) })
	eventually(t, "the listener's requests are limited", func() (bool, string) {
		got := c.statuses(t, 2, "GET", "other.test", "/anything")
		return got[1] == http.StatusTooManyRequests, fmt.Sprint(got)
	})
	if got := c.statuses(t, 3, "GET", "api.example.com", "/anything"); got[2] != http.StatusOK {
		t.Errorf("the other listener's host: %v, want 200s", got)
	}
	p := c.policy(t, "other-listener")
	if len(p.Status.Ancestors) != 1 || !apimeta.IsStatusConditionTrue(p.Status.Ancestors[0].Conditions, "Accepted") {
		t.Errorf("ancestors: %+v", p.Status.Ancestors)
	}
}

func TestMain(m *testing.M) {
	// The controller's log, for a failing test's output.
	logf.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.InfoLevel)))
	os.Exit(m.Run())
}
