package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/nginxtest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// A policy for api.example.com's /api/ tree and /login, two GETs a minute
// per X-Case header: each case below counts in its own bucket.
const spellingPolicy = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: api
  namespace: shop
spec:
  match:
    hosts: [api.example.com]
    paths: ["/api/*", "/login"]
    methods: [GET]
  key: "{header:X-Case}"
  onMissingKey: Deny
  limits:
  - name: minute
    fixedWindow: {limit: 2, window: 1m}
`

// routes is a Go backend (net/http's ServeMux, as most Go services route)
// that records which of its routes served each request.
type routes struct {
	mu     sync.Mutex
	served map[string][]string // X-Case -> patterns
}

func (b *routes) handler() http.Handler {
	mux := http.NewServeMux()
	for _, p := range []string{"/api/", "/login", "/"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			b.mu.Lock()
			b.served[r.Header.Get("X-Case")] = append(b.served[r.Header.Get("X-Case")], r.Pattern)
			b.mu.Unlock()
			_, _ = io.WriteString(w, "served by "+r.Pattern+"\n")
		})
	}
	return mux
}

// TestProxiedSpellings sends, through a real nginx configured from the
// ingress-nginx example (server_name api.example.com beside a default
// server, as ingress-nginx renders an Ingress rule's host) in front of a Go
// backend, request spellings that nginx or the backend route to
// api.example.com's /login or /api/ while their text says otherwise. Each
// must count against the policy: two reach the backend, then nginx denies.
// Local mode and Redis decide, as a new user would set it up.
func TestProxiedSpellings(t *testing.T) {
	systest.RequireCommand(t, "nginx", "nginx")
	systest.RequireCommand(t, "caddy", "caddy")
	dir := t.TempDir()
	root := kubetest.RepoRoot(t)
	manager := (&systest.Manager{Dir: dir}).Path(t)
	policies := filepath.Join(dir, "policies")
	if err := os.MkdirAll(policies, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(policies, "api.yaml"), []byte(spellingPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	// Dated back, so local mode applies it without waiting for it to settle.
	old := time.Now().Add(-time.Hour)
	_ = os.Chtimes(filepath.Join(policies, "api.yaml"), old, old)
	redis := redistest.Start(t)
	checkAddr := "127.0.0.1:" + strconv.Itoa(systest.FreePort(t))
	local := systest.Start(t, dir, "local", nil, manager, "local", "--policies", policies, "--listen", checkAddr,
		"--redis-url", "redis://"+redis.Addr()+"/0")
	local.WaitHTTP(t, "http://"+checkAddr+"/readyz", 30*time.Second)

	backend := &routes{served: map[string][]string{}}
	app := &http.Server{Handler: backend.handler()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = app.Serve(ln) }()
	t.Cleanup(func() { _ = app.Close() })

	example := nginxtest.ReadIngress(t, filepath.Join(root, "config", "examples", "ingress-nginx", "ingress.yaml"))
	srv := nginxtest.Server{Port: systest.FreePort(t), Namespace: "shop", Hostname: "api.example.com", Upstream: ln.Addr().String(), Ingress: example}
	nginxtest.StartServers(t, dir, checkAddr, srv)
	nginxAddr := "127.0.0.1:" + strconv.Itoa(srv.Port)

	for _, c := range []struct{ name, requestLine, host string }{
		{"plain", "GET /login", "api.example.com"},
		{"host with two ports", "GET /login", "api.example.com:1:2"},
		{"host in capitals with a trailing dot", "GET /login", "API.Example.COM."},
		{"encoded slashes and dot segments", "GET /api/x%2F..%2F..%2Fpub", "api.example.com"},
		{"absolute form with another Host", "GET http://api.example.com/login", "other.example.net"},
		{"HEAD on a GET policy", "HEAD /login", "api.example.com"},
		{"a host parameter of the client's own", "GET /login?host=other.example.net", "api.example.com"},
		{"path parameters", "GET /login;jsessionid=x", "api.example.com"},
		{"a trailing slash", "GET /login/", "api.example.com"},
		{"a dot segment with a parameter", "GET /pub/..;/login", "api.example.com"},
	} {
		t.Run(c.name, func(t *testing.T) {
			caseID := strings.ReplaceAll(c.name, " ", "-")
			var codes []int
			for range 4 {
				codes = append(codes, rawStatus(t, nginxAddr, c.requestLine, c.host, caseID))
			}
			backend.mu.Lock()
			served := backend.served[caseID]
			backend.mu.Unlock()
			t.Logf("%s HTTP/1.1, Host: %s: nginx answered %v; the backend served %v", c.requestLine, c.host, codes, served)
			if want := []int{200, 200, 403, 403}; fmt.Sprint(codes) != fmt.Sprint(want) {
				t.Errorf("statuses %v, want %v: the policy must apply", codes, want)
			}
			if len(served) != 2 {
				t.Errorf("the backend served %d requests, want 2", len(served))
			}
		})
	}

	// Caddy (like Traefik) passes the client's own headers to the check
	// endpoint: a client's X-Original-URL beside Caddy's X-Forwarded-* must
	// not choose how its request is read.
	t.Run("Caddy: a client's X-Original-URL", func(t *testing.T) {
		caddyPort := systest.FreePort(t)
		startCaddy(t, root, dir, caddyPort, checkAddr, "shop", ln.Addr().String())
		code := rawStatus(t, "127.0.0.1:"+strconv.Itoa(caddyPort), "GET /login", "api.example.com", "caddy",
			"X-Original-URL: http://other.example.net/public", "X-Original-Method: GET")
		if code != http.StatusBadRequest {
			t.Errorf("status %d, want 400 (the check endpoint refuses both profiles' headers at once)", code)
		}
		backend.mu.Lock()
		defer backend.mu.Unlock()
		if n := len(backend.served["caddy"]); n != 0 {
			t.Errorf("the backend served %d requests, want 0", n)
		}
	})
}

// rawStatus sends one request exactly as written (a request line nginx
// would read in absolute form, a Host no client library would send) and
// returns the status.
func rawStatus(t *testing.T, addr, requestLine, host, caseID string, extra ...string) int {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	req := requestLine + " HTTP/1.1\r\nHost: " + host + "\r\nX-Case: " + caseID + "\r\nConnection: close\r\n"
	for _, h := range extra {
		req += h + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	method, _, _ := strings.Cut(requestLine, " ")
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s: %v", requestLine, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
