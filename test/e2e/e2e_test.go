// Package e2e tests the built binary as real processes with real servers:
// a kube-apiserver and etcd (envtest) that kubectl installs config/default
// into, a redis-server, `manager controller` (as the ServiceAccount the
// manifests bind, so their RBAC is what it gets) and `manager check`, and
// nginx and Caddy from Debian's packages (Envoy and Traefik from PyPI
// wheels, with `manager local`) in front of a small application,
// configured from config/examples. Everything listens on loopback and stops
// with the test.
//
//	KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.2 go test ./test/e2e/ -v
package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/argohealth"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/nginxtest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// env is the running system under test.
type env struct {
	root, dir string
	kube      *kubetest.Cluster
	redis     *redistest.Server
	checkAddr string // host:port of `manager check`
}

// policy is a fixed-window policy: limit requests per minute per key, on
// /api/*.
func policy(name, key string, limit int) string {
	return fmt.Sprintf(`apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: %s
spec:
  match:
    paths: ["/api/*"]
  key: %q
  onMissingKey: Deny
  limits:
  - name: minute
    fixedWindow: {limit: %d, window: 1m}
`, name, key, limit)
}

func (e *env) apply(t *testing.T, namespace, manifest string) {
	t.Helper()
	if _, err := e.kube.Kubectl("get", "namespace", namespace); err != nil {
		e.kube.MustKubectl("create", "namespace", namespace)
	}
	out, err := e.kube.KubectlStdin([]byte(manifest), "apply", "-n", namespace, "-f", "-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl apply -n %s: %s", namespace, strings.TrimSpace(out))
}

func (e *env) waitReady(t *testing.T, namespace, what string) {
	t.Helper()
	if _, err := e.kube.Kubectl("wait", "-n", namespace, "--for=condition=Ready", "--timeout=30s", what); err != nil {
		out, _ := e.kube.Kubectl("get", "-n", namespace, "rlp", "-o", "yaml")
		t.Fatalf("%v\n%s", err, out)
	}
}

func TestEndToEnd(t *testing.T) {
	start := time.Now()
	// Fail at once, with what to install, when a program is missing.
	systest.RequireCommand(t, "redis-server", "redis-server")
	systest.RequireCommand(t, "nginx", "nginx")
	systest.RequireCommand(t, "caddy", "caddy")
	kubetest.Assets(t)

	e := &env{root: kubetest.RepoRoot(t), dir: t.TempDir()}
	// The binary is built from, and kubectl reads, files this process
	// never opens itself: make them inputs of the test's cached result.
	var inputs []string
	for _, p := range []string{"go.mod", "go.sum", "api", "cmd", "internal", "webhook", "config"} {
		inputs = append(inputs, filepath.Join(e.root, p))
	}
	kubetest.TrackFiles(t, inputs...)
	manager := (&systest.Manager{Dir: e.dir}).Path(t)

	// The cluster: install Sluice the way the README says.
	e.kube = kubetest.Start(t, kubetest.Options{})
	out, err := e.kube.Kubectl("apply", "-k", filepath.Join(e.root, "config", "default"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl apply -k config/default:\n%s", out)
	e.kube.MustKubectl("wait", "--for=condition=Established", "--timeout=30s", "crd/ratelimitpolicies.ratelimit.sluice.dev")

	e.redis = redistest.Start(t)
	redisURL := "redis://" + e.redis.Addr() + "/0"

	// The controller runs as the sluice-controller ServiceAccount: the
	// ClusterRoleBinding from config/default is all the access it has.
	saKubeconfig := e.kube.ServiceAccountKubeconfig("sluice-system", "sluice-controller")
	probePort := systest.FreePort(t)
	ctrlProc := systest.Start(t, e.dir, "controller", []string{"POD_NAMESPACE=sluice-system"}, manager, "controller",
		"--kubeconfig", saKubeconfig,
		"--redis-url", redisURL,
		"--metrics-bind-address", "127.0.0.1:"+strconv.Itoa(systest.FreePort(t)),
		"--health-probe-bind-address", "127.0.0.1:"+strconv.Itoa(probePort),
		"--leader-elect=true",
	)
	checkPort := systest.FreePort(t)
	e.checkAddr = "127.0.0.1:" + strconv.Itoa(checkPort)
	checkProc := systest.Start(t, e.dir, "check", nil, manager, "check", "--listen", e.checkAddr, "--redis-url", redisURL, "--report-policy")
	ctrlProc.WaitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/readyz", probePort), 30*time.Second)
	checkProc.WaitHTTP(t, "http://"+e.checkAddr+"/readyz", 30*time.Second)
	t.Logf("set-up done in %s", time.Since(start).Round(time.Millisecond))

	t.Run("samples", func(t *testing.T) { testSamples(t, e) })

	// One application per proxy, one namespace (and so one set of
	// buckets) per server.
	apps := map[string]*upstream{"nginx": {}, "nginx-429": {}, "caddy": {}, "edit": {}}
	addr := map[string]string{}
	for name, app := range apps {
		srv := httptest.NewServer(app)
		t.Cleanup(srv.Close)
		addr[name] = strings.TrimPrefix(srv.URL, "http://")
	}
	const limit = 5
	e.apply(t, "e2e-nginx", policy("api", "{client_ip}", limit))
	e.apply(t, "e2e-nginx-429", policy("api", "{client_ip}", limit))
	e.apply(t, "e2e-caddy", policy("api", "{client_ip}", limit))
	e.apply(t, "e2e-edit", policy("api", "{header:X-Client}", 3))
	for _, ns := range []string{"e2e-nginx", "e2e-nginx-429", "e2e-caddy", "e2e-edit"} {
		e.waitReady(t, ns, "rlp/api")
	}

	plain := nginxtest.ReadIngress(t, filepath.Join(e.root, "config", "examples", "ingress-nginx", "ingress.yaml"))
	with429 := nginxtest.ReadIngress(t, filepath.Join(e.root, "config", "examples", "ingress-nginx", "ingress-429.yaml"))
	servers := []nginxtest.Server{
		{Port: systest.FreePort(t), Namespace: "e2e-nginx", Upstream: addr["nginx"], Ingress: plain, ClientHeaders: true},
		{Port: systest.FreePort(t), Namespace: "e2e-nginx-429", Upstream: addr["nginx-429"], Ingress: with429,
			LogFormat: nginxtest.ReadLogFormat(t, filepath.Join(e.root, "config", "examples", "ingress-nginx", "controller-configmap.yaml"))},
		{Port: systest.FreePort(t), Namespace: "e2e-edit", Upstream: addr["edit"], Ingress: plain, ClientHeaders: true},
	}
	nginx := nginxtest.StartServers(t, e.dir, e.checkAddr, servers...)
	caddyPort := systest.FreePort(t)
	startCaddy(t, e.root, e.dir, caddyPort, e.checkAddr, "e2e-caddy", addr["caddy"])

	t.Run("nginx auth_request: 403 with the rate-limit headers", func(t *testing.T) {
		testProxy(t, fmt.Sprintf("http://127.0.0.1:%d/api/items", servers[0].Port), apps["nginx"], limit, http.StatusForbidden, plain.ResponseHeaders, true)
	})
	t.Run("nginx with the 429 snippets: 429 with Retry-After", func(t *testing.T) {
		testProxy(t, fmt.Sprintf("http://127.0.0.1:%d/api/items", servers[1].Port), apps["nginx-429"], limit, http.StatusTooManyRequests, nil, true)
		// The access log of controller-configmap.yaml names the rule,
		// allowed and denied, from X-Sluice-Policy.
		waitAccessLog(t, nginx, `"GET /api/items HTTP/1.1" 200 .* sluice_policy="e2e-nginx-429/api;decision=allowed;reason=Allowed;limit=minute;remaining=[0-9]+;key=[0-9a-f]{16}"$`)
		waitAccessLog(t, nginx, `"GET /api/items HTTP/1.1" 429 .* sluice_policy="e2e-nginx-429/api;decision=denied;reason=RateLimited;limit=minute;remaining=0;key=[0-9a-f]{16}"$`)
	})
	t.Run("caddy forward_auth: 429 with Retry-After", func(t *testing.T) {
		testProxy(t, fmt.Sprintf("http://127.0.0.1:%d/api/items", caddyPort), apps["caddy"], limit, http.StatusTooManyRequests, []string{"RateLimit", "RateLimit-Policy"}, false)
	})
	t.Run("kubectl patch and delete take effect within 2s", func(t *testing.T) {
		testEditDelete(t, e, fmt.Sprintf("http://127.0.0.1:%d/api/items", servers[2].Port))
	})
	t.Run("Argo CD health of live policies", func(t *testing.T) { testArgoHealth(t, e) })
	t.Logf("end to end in %s", time.Since(start).Round(time.Millisecond))
}

// testSamples applies config/samples and waits for every policy to be Ready.
func testSamples(t *testing.T, e *env) {
	out, err := e.kube.Kubectl("apply", "-n", "default", "-k", filepath.Join(e.root, "config", "samples"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl apply -k config/samples:\n%s", out)
	begin := time.Now()
	out, err = e.kube.Kubectl("wait", "-n", "default", "--for=condition=Ready", "--timeout=30s", "rlp", "--all")
	if err != nil {
		get, _ := e.kube.Kubectl("get", "-n", "default", "rlp", "-o", "yaml")
		t.Fatalf("%v\n%s", err, get)
	}
	t.Logf("kubectl wait --for=condition=Ready rlp --all (%s):\n%s", time.Since(begin).Round(time.Millisecond), out)
	t.Logf("kubectl get rlp:\n%s", e.kube.MustKubectl("get", "-n", "default", "rlp"))
}

// testProxy sends limit+3 requests through a proxy: the first limit reach
// the application, the rest are denied with deny and the rate-limit
// headers. toUpstream are headers the application must have received on
// allowed requests (auth-response-headers, copy_headers); allowedHeaders
// says whether the proxy also gives allowed responses the rate-limit
// headers (nginx with add_header; Caddy hands them to the application only).
func testProxy(t *testing.T, url string, app *upstream, limit, deny int, toUpstream []string, allowedHeaders bool) {
	before, _ := app.hits()
	codes, resps := statuses(t, url, limit+3, nil)
	t.Logf("statuses: %v", codes)
	t.Logf("first response (allowed):\n%s", resps[0].dump())
	t.Logf("first denial:\n%s", resps[limit].dump())
	if !prefixOK(codes, limit, deny) {
		t.Fatalf("statuses %v: want %d times 200, then %d", codes, limit, deny)
	}
	hits, last := app.hits()
	if got := hits - before; got != limit {
		t.Errorf("the application received %d requests, want %d (denied ones must not reach it)", got, limit)
	}
	for _, h := range toUpstream {
		if strings.EqualFold(h, "X-Sluice-Over-Limit") {
			continue // no soft limit here: none, or empty (TestSoftLimitThroughProxies)
		}
		if last.Get(h) == "" {
			t.Errorf("the application did not receive the %s header", h)
		}
	}
	if !strings.Contains(resps[0].body, "hello from upstream") {
		t.Errorf("allowed response body %q is not the application's", resps[0].body)
	}
	denied := resps[limit]
	for _, h := range nginxtest.RateLimitHeaders {
		if denied.header.Get(h) == "" {
			t.Errorf("the denial lacks %s", h)
		}
	}
	if got := denied.header.Get("RateLimit"); !strings.Contains(got, `"api/minute";r=0`) {
		t.Errorf("RateLimit = %q, want r=0 for api/minute", got)
	}
	if got := denied.header.Get("RateLimit-Policy"); !strings.Contains(got, fmt.Sprintf(`"api/minute";q=%d;w=60`, limit)) {
		t.Errorf("RateLimit-Policy = %q, want q=%d;w=60", got, limit)
	}
	if ra, err := strconv.Atoi(denied.header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Errorf("Retry-After = %q, want 1..60 seconds", denied.header.Get("Retry-After"))
	}
	if deny == http.StatusTooManyRequests && !strings.Contains(denied.header.Get("Content-Type"), "application/problem+json") {
		t.Errorf("Content-Type = %q, want application/problem+json", denied.header.Get("Content-Type"))
	}
	if got := resps[0].header.Get("RateLimit"); allowedHeaders && !strings.Contains(got, fmt.Sprintf("r=%d", limit-1)) {
		t.Errorf("allowed response RateLimit = %q, want r=%d", got, limit-1)
	}
}

// testEditDelete measures how long a `kubectl patch` and a `kubectl
// delete` take to change what the proxy enforces.
func testEditDelete(t *testing.T, e *env, url string) {
	client := func(id string) map[string]string { return map[string]string{"X-Client": id} }
	codes, _ := statuses(t, url, 4, client("a"))
	if !prefixOK(codes, 3, http.StatusForbidden) {
		t.Fatalf("limit 3, client a: %v", codes)
	}

	// Raise the limit from 3 to 6.
	patch := `{"spec":{"limits":[{"name":"minute","fixedWindow":{"limit":6,"window":"1m"}}]}}`
	begin := time.Now()
	e.kube.MustKubectl("patch", "-n", "e2e-edit", "rlp", "api", "--type=merge", "-p", patch)
	patched := time.Now()
	probe := 0
	var enforced time.Duration
	for {
		probe++ // a new client each time: the probe reads the quota in force
		r := get(t, url, client(fmt.Sprintf("probe-%d", probe)))
		if q, err := quota(r.header); err == nil && q == 6 && r.status == http.StatusOK {
			enforced = time.Since(patched)
			break
		}
		if time.Since(patched) > 10*time.Second {
			t.Fatalf("limit 6 not in force 10s after kubectl patch; last answer:\n%s", r.dump())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("kubectl patch (limit 3 -> 6): the proxy enforces it %s after kubectl returned (%s after it started; kubectl took %s), %d probes",
		enforced.Round(time.Millisecond), time.Since(begin).Round(time.Millisecond), patched.Sub(begin).Round(time.Millisecond), probe)
	if enforced > 2*time.Second {
		t.Errorf("the new limit took %s, want under 2s", enforced)
	}
	codes, _ = statuses(t, url, 7, client("b"))
	if !prefixOK(codes, 6, http.StatusForbidden) {
		t.Errorf("limit 6, new client b: %v", codes)
	}
	codes, _ = statuses(t, url, 4, client("a"))
	if !prefixOK(codes, 3, http.StatusForbidden) {
		t.Errorf("limit 6, client a after 3 of its window: %v, want 3 more then 403", codes)
	}

	// Delete it: client b, denied now, is let through.
	if r := get(t, url, client("b")); r.status != http.StatusForbidden {
		t.Fatalf("client b before the delete: %d, want 403", r.status)
	}
	begin = time.Now()
	e.kube.MustKubectl("delete", "-n", "e2e-edit", "rlp", "api")
	deleted := time.Now()
	var lifted time.Duration
	for {
		r := get(t, url, client("b"))
		if r.status == http.StatusOK {
			lifted = time.Since(deleted)
			if r.header.Get("RateLimit") != "" {
				t.Errorf("a request no policy matches carries RateLimit: %q", r.header.Get("RateLimit"))
			}
			break
		}
		if time.Since(deleted) > 10*time.Second {
			t.Fatalf("still denied 10s after kubectl delete:\n%s", r.dump())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("kubectl delete: client b is let through %s after kubectl returned (%s after it started)",
		lifted.Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))
	if lifted > 2*time.Second {
		t.Errorf("lifting the limit took %s, want under 2s", lifted)
	}
	codes, _ = statuses(t, url, 20, client("b"))
	if countOf(codes, http.StatusOK) != 20 {
		t.Errorf("after the delete: %v, want 20 times 200", codes)
	}
}

func (e *env) object(t *testing.T, namespace, name string) map[string]any {
	t.Helper()
	out := e.kube.MustKubectl("get", "-n", namespace, "rlp", name, "-o", "json")
	var obj map[string]any
	if err := json.Unmarshal([]byte(out), &obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

func argo(t *testing.T, script string, obj map[string]any) argohealth.Result {
	t.Helper()
	res, err := argohealth.Evaluate(script, obj)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// testArgoHealth runs the Argo CD health check on policies this run's
// controller brought into each state: fresh, ready, invalid, Redis down.
func testArgoHealth(t *testing.T, e *env) {
	b, err := os.ReadFile(filepath.Join(e.root, "config", "gitops", "argocd", "health.lua"))
	if err != nil {
		t.Fatal(err)
	}
	script := string(b)
	const ns = "e2e-gitops"
	e.kube.MustKubectl("create", "namespace", ns)
	check := func(state string, obj map[string]any, want, wantMessage string) {
		t.Helper()
		res := argo(t, script, obj)
		t.Logf("%s: Argo CD health %s: %s", state, res.Status, res.Message)
		if res.Status != want || !strings.Contains(res.Message, wantMessage) {
			t.Errorf("%s: health %s %q, want %s with %q", state, res.Status, res.Message, want, wantMessage)
		}
	}

	// Fresh: the object as the API server stored it, before the controller.
	out, err := e.kube.KubectlStdin([]byte(policy("fresh", "global", 10)), "create", "-n", ns, "-f", "-", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var fresh map[string]any
	if err := json.Unmarshal([]byte(out), &fresh); err != nil {
		t.Fatal(err)
	}
	check("fresh", fresh, argohealth.Progressing, "Waiting for the Sluice controller")

	e.waitReady(t, ns, "rlp/fresh")
	check("ready", e.object(t, ns, "fresh"), argohealth.Healthy, "In force")

	invalid := strings.Replace(policy("invalid", "global", 10), `paths: ["/api/*"]`, `paths: ["/api/*"]
    when: 'request.hedaers["x-plan"] == "free"'`, 1)
	e.apply(t, ns, invalid)
	e.kube.MustKubectl("wait", "-n", ns, "--for=condition=Stalled", "--timeout=30s", "rlp/invalid")
	check("invalid", e.object(t, ns, "invalid"), argohealth.Degraded, "spec.match.when")

	// Redis down: a new policy cannot be applied; the controller retries.
	e.redis.Kill()
	e.apply(t, ns, policy("while-down", "global", 10))
	e.kube.MustKubectl("wait", "-n", ns, "--for=condition=Reconciling", "--timeout=30s", "rlp/while-down")
	check("Redis down", e.object(t, ns, "while-down"), argohealth.Progressing, "Redis:")
	begin := time.Now()
	e.redis.Restart()
	e.kube.MustKubectl("wait", "-n", ns, "--for=condition=Ready", "--timeout=60s", "rlp/while-down")
	t.Logf("Ready %s after Redis came back", time.Since(begin).Round(time.Millisecond))
	check("Redis back", e.object(t, ns, "while-down"), argohealth.Healthy, "In force")
}
