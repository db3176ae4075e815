package middleware_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/middleware"
)

const goodManifest = `
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: per-client
spec:
  key: "{client_ip}"
  limits:
  - name: burst
    tokenBucket: {capacity: 2, refillRate: 1, refillInterval: 1m}
`

// TestPolicyYAML: manifests as kubectl applies them; several documents,
// other kinds skipped.
func TestPolicyYAML(t *testing.T) {
	text := `# policies of the shop
apiVersion: v1
kind: ConfigMap
metadata: {name: unrelated}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: login, namespace: shop}
spec:
  match: {paths: [/login]}
  key: global
  limits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]
---
{"apiVersion": "ratelimit.sluice.dev/v1alpha1", "kind": "RateLimitPolicy", "metadata": {"name": "api"},
 "spec": {"match": {"paths": ["/api/*"]}, "key": "global", "limits": [{"name": "l", "fixedWindow": {"limit": 2, "window": "1h"}}]}}
---
`
	h := newLimiter(t, middleware.WithNamespace("shop"), middleware.WithPolicyYAML(text)).Handler(&app{})
	for _, c := range []struct {
		path   string
		status int
	}{{"/login", 200}, {"/login", 429}, {"/api/a", 200}, {"/api/b", 200}, {"/api/c", 429}, {"/other", 200}} {
		if rec := send(h, "GET", c.path, "", nil); rec.Code != c.status {
			t.Errorf("%s: %d, want %d", c.path, rec.Code, c.status)
		}
	}
}

// TestConfigurationErrors: New refuses what cannot work, naming the
// option, policy and field.
func TestConfigurationErrors(t *testing.T) {
	spec := func(s string) middleware.Option { return middleware.WithPolicy("p", policytest.Spec(t, s)) }
	ok := spec("limits: [{name: l, fixedWindow: {limit: 1, window: 1m}}]")
	remote := middleware.WithRemote(middleware.RemoteOptions{URL: "http://sluice-check:8080"})
	for _, c := range []struct {
		name string
		opts []middleware.Option
		want []string
	}{
		{"no policies", nil, []string{"no policies"}},
		{"bad duration", []middleware.Option{spec("limits: [{name: l, fixedWindow: {limit: 1, window: 1 day}}]")},
			[]string{`policy "p"`, "spec.limits[0].fixedWindow.window"}},
		{"every error at once", []middleware.Option{spec("key: '{nope}'\ncost: 5\nlimits: [{name: l, tokenBucket: {capacity: 2, refillRate: 1, refillInterval: 1s}}]")},
			[]string{"spec.key", "spec.cost"}},
		{"two algorithms", []middleware.Option{spec("limits: [{name: l, fixedWindow: {limit: 1, window: 1m}, gcra: {rate: 1, period: 1s, burst: 1}}]")},
			[]string{"spec.limits[0]"}},
		{"unknown field in YAML", []middleware.Option{middleware.WithPolicyYAML(strings.Replace(goodManifest, "limits:", "limts:", 1))},
			[]string{"WithPolicyYAML", "document 1", `unknown field "spec.limts"`}},
		{"not a manifest", []middleware.Option{middleware.WithPolicyYAML("key: global\nlimits: []")},
			[]string{"document 1: kind: Required value"}},
		{"wrong apiVersion", []middleware.Option{middleware.WithPolicyYAML(strings.Replace(goodManifest, "v1alpha1", "v9", 1))},
			[]string{`apiVersion "ratelimit.sluice.dev/v9"`}},
		{"no name", []middleware.Option{middleware.WithPolicyYAML(strings.Replace(goodManifest, "name: per-client", "labels: {}", 1))},
			[]string{"metadata.name: Required value"}},
		{"another namespace", []middleware.Option{middleware.WithPolicyYAML(strings.Replace(goodManifest, "name: per-client", "name: per-client\n  namespace: shop", 1))},
			[]string{`metadata.namespace "shop"`, "WithNamespace"}},
		{"defined twice", []middleware.Option{middleware.WithPolicyYAML(goodManifest + "---\n" + goodManifest)},
			[]string{`policy "per-client": defined twice`}},
		{"bad policy name", []middleware.Option{middleware.WithPolicy("Per Client", policytest.Spec(t, "limits: [{name: l, fixedWindow: {limit: 1, window: 1m}}]"))},
			[]string{`policy "Per Client": name`}},
		{"bad namespace", []middleware.Option{ok, middleware.WithNamespace("Shop_1")}, []string{`namespace "Shop_1"`}},
		{"two stores", []middleware.Option{ok, middleware.WithMemoryStore(), middleware.WithRedisURL("redis://localhost:6379")},
			[]string{"WithMemoryStore and WithRedisURL exclude each other"}},
		{"memory cap with Redis", []middleware.Option{ok, middleware.WithRedisURL("redis://localhost:6379"), middleware.WithMemoryMaxKeys(10)},
			[]string{"WithMemoryMaxKeys caps the in-memory store", "WithRedisURL"}},
		{"negative memory cap", []middleware.Option{ok, middleware.WithMemoryMaxKeys(-1)}, []string{"WithMemoryMaxKeys: -1: want 0 (no cap) or more"}},
		{"nil Redis client", []middleware.Option{ok, middleware.WithRedis(nil)}, []string{"WithRedis: the client is nil"}},
		{"bad Redis URL", []middleware.Option{ok, middleware.WithRedisURL("http://localhost")}, []string{"WithRedisURL"}},
		{"remote with policies", []middleware.Option{ok, remote}, []string{"WithRemote uses the check endpoint's policies"}},
		{"remote with a store", []middleware.Option{middleware.WithRedisURL("redis://localhost:6379"), remote}, []string{"exclude each other"}},
		{"remote without URL", []middleware.Option{middleware.WithRemote(middleware.RemoteOptions{})}, []string{"WithRemote: URL: required"}},
		{"remote URL not http", []middleware.Option{middleware.WithRemote(middleware.RemoteOptions{URL: "sluice-check:8080"})}, []string{"want http://host"}},
		{"remote failure mode", []middleware.Option{middleware.WithRemote(middleware.RemoteOptions{URL: "http://c", FailureMode: "Sometimes"})}, []string{`FailureMode "Sometimes"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := middleware.New(c.opts...)
			if err == nil {
				l.Close()
				t.Fatalf("New succeeded; want an error mentioning %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestMetrics: WithMetrics counts the in-process decisions.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newLimiter(t, middleware.WithMetrics(reg), middleware.WithPolicyYAML(goodManifest)).Handler(&app{})
	for range 3 {
		send(h, "GET", "/", "", nil)
	}
	for result, want := range map[string]float64{"allowed": 2, "denied": 1} {
		got := decisions(t, reg, result)
		if got != want {
			t.Errorf("sluice_decisions_total{result=%q} = %v, want %v", result, got, want)
		}
	}
}

// decisions reads sluice_decisions_total of the manifest's limit.
func decisions(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "sluice_decisions_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["result"] == result && labels["namespace"] == "default" && labels["policy"] == "per-client" && labels["limit"] == "burst" {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no sluice_decisions_total{result=%q}", result)
	return 0
}
