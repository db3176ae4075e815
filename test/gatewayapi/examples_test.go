package gatewayapi_test

// The wiring examples of config/examples/gateway-api on a real API server:
// each file is applied as a user applies it (kubectl, server-side, the
// server's strict field validation) against the CRDs of the project it is
// for, taken from that project's own Go module; and route.yaml with
// policy.yaml is applied for real, with the manager binary reconciling it
// and answering checks.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/envtest"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// The projects' modules whose CRDs the examples are checked against: the
// newest releases the Go module proxy serves (Envoy Gateway v1.9.1, Istio's
// API v1.32.0; Gateway API is the version go.mod requires).
const (
	envoyGatewayModule = "github.com/envoyproxy/gateway@v1.9.1"
	istioAPIModule     = "istio.io/api@v1.32.0"
)

// exampleFiles are the files of config/examples/gateway-api and the kinds
// each holds, in order: a file added there must be added here (and so to a
// test), and a document that changes kind is noticed.
var exampleFiles = map[string][]string{
	"route.yaml":                      {"Gateway", "HTTPRoute"},
	"policy.yaml":                     {"RateLimitPolicy", "RateLimitPolicy"},
	"envoy-gateway-extauth-http.yaml": {"SecurityPolicy", "ReferenceGrant"},
	"envoy-gateway-extauth-grpc.yaml": {"SecurityPolicy", "ReferenceGrant"},
	"envoy-gateway-ratelimit.yaml":    {"BackendTrafficPolicy", "EnvoyPatchPolicy", "RateLimitPolicy", "RateLimitPolicy"},
	"istio.yaml":                      {"AuthorizationPolicy"},
	"istio-ratelimit.yaml":            {"EnvoyFilter", "RateLimitPolicy", "RateLimitPolicy"},
	"external-auth-filter.yaml":       {"HTTPRoute", "ReferenceGrant"},
	"external-auth-filter-grpc.yaml":  {"HTTPRoute", "ReferenceGrant"},
	// Helm values of istiod, not an object: TestIstioMeshConfigExample.
	"istio-values.yaml": nil,
}

// exampleDir is config/examples/gateway-api.
func exampleDir(t *testing.T) string {
	return filepath.Join(kubetest.RepoRoot(t), "config", "examples", "gateway-api")
}

// moduleDir downloads a module (path@version) through the Go module proxy,
// as `go mod download` does, and returns its folder in the module cache.
// It runs outside this module, so go.mod and go.sum are not touched.
func moduleDir(t *testing.T, module string) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", module)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GO111MODULE=on")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); err != nil || jerr != nil || info.Dir == "" {
		t.Fatalf("go mod download %s: %v %s %s\n%s", module, err, info.Error, stderr.String(), out)
	}
	return info.Dir
}

// exampleCRDs are the CRD folders and files the examples are checked
// against: Sluice's, Gateway API's experimental channel (a superset of the
// standard one, and what the ExternalAuth filter needs), Envoy Gateway's
// and Istio's.
func exampleCRDs(t *testing.T) []string {
	t.Helper()
	sluice, err := envtest.CRDDir()
	if err != nil {
		t.Fatal(err)
	}
	standard, err := envtest.GatewayAPICRDDir()
	if err != nil {
		t.Fatal(err)
	}
	experimental := filepath.Join(filepath.Dir(standard), "experimental")
	eg := filepath.Join(moduleDir(t, envoyGatewayModule), "charts", "gateway-helm", "charts", "crds", "crds", "generated")
	istio := filepath.Join(moduleDir(t, istioAPIModule), "kubernetes", "customresourcedefinitions.gen.yaml")
	return []string{sluice, experimental, eg, istio}
}

// kindsOf lists the kinds of a file's YAML documents, in order.
func kindsOf(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, line := range strings.Split(string(b), "\n") {
		if k, ok := strings.CutPrefix(line, "kind: "); ok {
			kinds = append(kinds, strings.TrimSpace(k))
		}
	}
	return kinds
}

// TestWiringExamplesValidate applies every manifest of
// config/examples/gateway-api with `kubectl apply --server-side
// --dry-run=server` (strict field validation, kubectl's default) to an API
// server holding the CRDs of Gateway API (experimental channel), Envoy
// Gateway v1.9.1, Istio 1.32 and Sluice: every object must be accepted as
// written, its OpenAPI schema and CEL rules included. A copy with a
// misspelled field must be refused, so that the check is known to be strict.
func TestWiringExamplesValidate(t *testing.T) {
	dir := exampleDir(t)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
	}
	var want []string
	for f := range exampleFiles {
		want = append(want, f)
	}
	slices.Sort(want)
	if !slices.Equal(files, want) {
		t.Fatalf("config/examples/gateway-api holds %v, the test knows %v: add the new file to exampleFiles and to a test", files, want)
	}

	c := kubetest.Start(t, kubetest.Options{CRDDirs: exampleCRDs(t)})
	c.MustKubectl("create", "namespace", "shop")
	c.MustKubectl("create", "namespace", "sluice-system")

	for _, name := range files {
		kinds := exampleFiles[name]
		if kinds == nil {
			continue
		}
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, name)
			if got := kindsOf(t, file); !slices.Equal(got, kinds) {
				t.Fatalf("kinds %v, want %v", got, kinds)
			}
			out, err := c.Kubectl("apply", "--server-side", "--dry-run=server", "-f", file)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s", out)
			if n := strings.Count(out, "serverside-applied (server dry run)"); n != len(kinds) {
				t.Errorf("%d objects applied, want %d", n, len(kinds))
			}
		})
	}

	// The same check refuses what a schema does not have: a field misspelled
	// in each project's object.
	for _, c2 := range []struct{ file, old, new string }{
		{"envoy-gateway-extauth-http.yaml", "      headersToBackend:", "      headersToUpstream:"},
		{"istio.yaml", "  action: CUSTOM", "  action: CUSTOM\n  actions: CUSTOM"},
		{"external-auth-filter.yaml", "          allowedResponseHeaders:", "          allowedResponseHeader:"},
		{"istio-ratelimit.yaml", "      operation: INSERT_BEFORE\n      value:\n        name: envoy.filters.http.ratelimit", "      operaton: INSERT_BEFORE\n      value:\n        name: envoy.filters.http.ratelimit"},
		{"policy.yaml", "  targetRefs:\n  - {group: gateway.networking.k8s.io, kind: HTTPRoute, name: api}\n  key:", "  targetRefs:\n  - {group: gateway.networking.k8s.io, kind: HTTPRoute, name: api, port: 80}\n  key:"},
	} {
		t.Run("misspelled in "+c2.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(dir, c2.file))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Count(string(b), c2.old) != 1 {
				t.Fatalf("%q is not in %s once: update the test with the example", c2.old, c2.file)
			}
			out, err := c.KubectlStdin([]byte(strings.Replace(string(b), c2.old, c2.new, 1)), "apply", "--server-side", "--dry-run=server", "-f", "-")
			if err == nil {
				t.Fatalf("accepted:\n%s", out)
			}
			if !strings.Contains(err.Error(), "unknown field") && !strings.Contains(err.Error(), "field not declared in schema") {
				t.Errorf("refused, but not for the field:\n%v", err)
			}
		})
	}
}

// TestPolicyExample applies route.yaml and policy.yaml with kubectl to an
// API server with Gateway API's standard CRDs, runs `manager all` (the
// controller and the check endpoint, one process, on a real Redis) against
// it, and follows the commands of policy.yaml's comment: the policies
// become Ready with the Gateway as an Accepted ancestor, and the check
// endpoint limits exactly the route's (and the rule's) requests.
func TestPolicyExample(t *testing.T) {
	sluiceCRDs, err := envtest.CRDDir()
	if err != nil {
		t.Fatal(err)
	}
	gatewayCRDs, err := envtest.GatewayAPICRDDir()
	if err != nil {
		t.Fatal(err)
	}
	c := kubetest.Start(t, kubetest.Options{CRDDirs: []string{sluiceCRDs, gatewayCRDs}})
	dir := exampleDir(t)
	c.MustKubectl("create", "namespace", "shop")
	c.MustKubectl("apply", "-f", filepath.Join(dir, "route.yaml"), "-f", filepath.Join(dir, "policy.yaml"))

	redis := redistest.Start(t)
	tmp := t.TempDir()
	manager := (&systest.Manager{Dir: tmp}).Path(t)
	listen := "127.0.0.1:" + strconv.Itoa(systest.FreePort(t))
	probe := "127.0.0.1:" + strconv.Itoa(systest.FreePort(t))
	p := systest.Start(t, tmp, "manager", nil, manager, "all", "--kubeconfig", c.Kubeconfig,
		"--redis-url", "redis://"+redis.Addr()+"/0", "--listen", listen,
		"--metrics-bind-address", "0", "--health-probe-bind-address", probe, "--sync-interval", "1s")
	p.WaitHTTP(t, "http://"+listen+"/readyz", 30*time.Second)

	c.MustKubectl("wait", "--for=condition=Ready", "rlp", "--all", "-n", "shop", "--timeout=30s")
	t.Logf("kubectl get rlp -n shop:\n%s", c.MustKubectl("get", "rlp", "-n", "shop"))
	for _, name := range []string{"api-per-client", "checkout-per-client"} {
		var ancestors []struct {
			AncestorRef    struct{ Group, Kind, Namespace, Name string }
			ControllerName string
			Conditions     []struct{ Type, Status, Reason string }
		}
		out := c.MustKubectl("get", "rlp", name, "-n", "shop", "-o", "jsonpath={.status.ancestors}")
		if err := json.Unmarshal([]byte(out), &ancestors); err != nil {
			t.Fatalf("%s: status.ancestors %q: %v", name, out, err)
		}
		if len(ancestors) != 1 {
			t.Fatalf("%s: ancestors %s, want the Gateway default/eg", name, out)
		}
		a := ancestors[0]
		if a.AncestorRef.Group != "gateway.networking.k8s.io" || a.AncestorRef.Kind != "Gateway" || a.AncestorRef.Namespace != "default" || a.AncestorRef.Name != "eg" ||
			a.ControllerName != "ratelimit.sluice.dev/controller" ||
			len(a.Conditions) != 1 || a.Conditions[0].Type != "Accepted" || a.Conditions[0].Status != "True" || a.Conditions[0].Reason != "Accepted" {
			t.Errorf("%s: ancestor %s, want default/eg Accepted by ratelimit.sluice.dev/controller", name, out)
		}
	}

	// The check endpoint, asked as Envoy's ext_authz HTTP asks it
	// (/envoy/shop + the original path, the original method and Host),
	// from one client.
	ask := func(method, host, path string) int {
		req, err := http.NewRequest(method, "http://"+listen+"/envoy/shop"+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		req.Header.Set("X-Forwarded-For", "203.0.113.7")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	runs := func(n int, method, host, path string) string {
		var codes []string
		for range n {
			codes = append(codes, strconv.Itoa(ask(method, host, path)))
		}
		return runsOf(codes)
	}
	// Not the route's: another host, a method or path no rule matches.
	// Never limited, never counted.
	for _, r := range [][3]string{{"GET", "shop.example.com", "/checkout"}, {"GET", "www.example.com", "/api/items"}, {"GET", "shop.example.com", "/apix"}} {
		if got := runs(25, r[0], r[1], r[2]); got != "[200 x25]" {
			t.Errorf("%s %s%s (not the route's): %s, want [200 x25]", r[0], r[1], r[2], got)
		}
	}
	// The checkout rule: 3 a minute (checkout-per-client); the denied
	// request is counted by neither policy.
	if got, want := runs(4, "POST", "shop.example.com", "/checkout/cart"), "[200 x3, 429 x1]"; got != want {
		t.Errorf("POST /checkout/cart: %s, want %s (checkout-per-client)", got, want)
	}
	// The whole route: 20 a minute (api-per-client), of which the three
	// checkouts took three.
	if got, want := runs(18, "GET", "shop.example.com", "/api/items"), "[200 x17, 429 x1]"; got != want {
		t.Errorf("GET /api/items: %s, want %s (api-per-client, 3 taken by the checkouts)", got, want)
	}
}

// runsOf renders outcomes as runs of equal ones: [200 x5, 429 x3].
func runsOf(xs []string) string {
	var parts []string
	for i := 0; i < len(xs); {
		j := i
		for j < len(xs) && xs[j] == xs[i] {
			j++
		}
		parts = append(parts, fmt.Sprintf("%s x%d", xs[i], j-i))
		i = j
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// TestIstioMeshConfigExample decodes istio-values.yaml's meshConfig into
// Istio's own MeshConfig type (istio.io/api v1.32.0, protojson: unknown
// fields and wrong types refused) with testdata/istiomesh, a module of its
// own, and checks the providers that istio.yaml and the e2e tests name. A
// misspelled field must be refused.
func TestIstioMeshConfigExample(t *testing.T) {
	file := filepath.Join(exampleDir(t), "istio-values.yaml")
	kubetest.TrackFiles(t, file, "testdata/istiomesh")
	istiomesh := func(values string) (string, error) {
		cmd := exec.Command("go", "run", ".", values)
		cmd.Dir = "testdata/istiomesh"
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("%w: %s", err, stderr.String())
		}
		return string(out), nil
	}
	out, err := istiomesh(file)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the extension providers as Istio's MeshConfig reads them:\n%s", out)
	var mesh struct {
		ExtensionProviders []struct {
			Name              string
			EnvoyExtAuthzHTTP *struct {
				Service    string
				Port       int
				PathPrefix string
			} `json:"envoyExtAuthzHttp"`
			EnvoyExtAuthzGrpc *struct {
				Service string
				Port    int
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &mesh); err != nil {
		t.Fatal(err)
	}
	if p := mesh.ExtensionProviders; len(p) != 2 || p[0].Name != "sluice-http" || p[0].EnvoyExtAuthzHTTP == nil ||
		p[0].EnvoyExtAuthzHTTP.Service != "sluice-check.sluice-system.svc.cluster.local" || p[0].EnvoyExtAuthzHTTP.Port != 8080 || p[0].EnvoyExtAuthzHTTP.PathPrefix != "/envoy/shop" ||
		p[1].Name != "sluice-grpc" || p[1].EnvoyExtAuthzGrpc == nil || p[1].EnvoyExtAuthzGrpc.Port != 9090 {
		t.Errorf("providers %+v, want sluice-http (port 8080, /envoy/shop) and sluice-grpc (port 9090) on the check Service", p)
	}

	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(bad, bytes.Replace(b, []byte("      pathPrefix:"), []byte("      path_prefix_:"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := istiomesh(bad); err == nil || !strings.Contains(err.Error(), "path_prefix_") {
		t.Errorf("a misspelled field: %v\n%s, want it refused", err, out)
	}
}
