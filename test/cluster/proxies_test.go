package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/envoytest"
	"github.com/sluice-dev/sluice/internal/testutil/nginxtest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// app is the application behind the proxies, on loopback: it counts the
// requests that reach it.
type app struct {
	addr string
	hits atomic.Int64
}

func startApp(t testing.TB) *app {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &app{addr: ln.Addr().String()}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		a.hits.Add(1)
		_, _ = io.WriteString(w, "hello from the application\n")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return a
}

// startNginx runs nginx as ingress-nginx renders the Ingress example
// (config/examples/ingress-nginx/ingress.yaml) for namespace, its auth-url
// pointed at the check Service's ClusterIP, the rate-limit headers copied
// to the client. It returns the address clients send requests to.
func startNginx(t testing.TB, c *cluster, namespace, upstream string) string {
	t.Helper()
	ingress := nginxtest.ReadIngress(t, filepath.Join(c.root, "config", "examples", "ingress-nginx", "ingress.yaml"))
	port := systest.FreePort(t)
	nginxtest.StartServers(t, t.TempDir(), c.checkService(t)+":8080",
		nginxtest.Server{Port: port, Namespace: namespace, Upstream: upstream, Ingress: ingress, ClientHeaders: true})
	return "127.0.0.1:" + strconv.Itoa(port)
}

// startEnvoy runs the Envoy ext_authz gRPC example
// (config/examples/envoy/envoy-grpc.yaml: the namespace shop) with its
// check cluster at the check Service's ClusterIP, gRPC port.
func startEnvoy(t testing.TB, c *cluster, upstream string) string {
	t.Helper()
	port := systest.FreePort(t)
	conf := envoytest.Example(t, c.root, "envoy-grpc.yaml", port, map[string]string{
		envoytest.GRPCCheckSocket: c.checkService(t) + ":9090", envoytest.AppSocket: upstream,
	})
	envoytest.Run(t, t.TempDir(), "envoy-grpc.yaml", conf, port)
	return "127.0.0.1:" + strconv.Itoa(port)
}

// from is a client whose connections come from source (a loopback
// address), so each proxy test is a client of its own to the policies.
func from(source string) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
	}}
}

// throughProxies puts real nginx (ingress-nginx's auth-url) and real Envoy
// (ext_authz over gRPC) in front of the application, both asking the check
// Service: the policy attached to the route decides (20 a minute per
// client), denied requests never reach the application, and the client
// sees the rate-limit headers.
func throughProxies(t *testing.T, c *cluster) {
	a := startApp(t)
	for _, proxy := range []struct {
		name, addr, source string
		deny               int
	}{
		{"nginx", startNginx(t, c, "shop", a.addr), "127.0.0.2", http.StatusForbidden},
		{"envoy", startEnvoy(t, c, a.addr), "127.0.0.3", http.StatusTooManyRequests},
	} {
		t.Run(proxy.name, func(t *testing.T) {
			client := from(proxy.source)
			before := a.hits.Load()
			var codes []int
			var denial http.Header
			for range 22 {
				req, err := http.NewRequest(http.MethodGet, "http://"+proxy.addr+"/api/items", nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Host = "shop.example.com"
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				codes = append(codes, resp.StatusCode)
				if resp.StatusCode == proxy.deny && denial == nil {
					denial = resp.Header
				}
			}
			t.Logf("%s: %v", proxy.name, codes)
			for i, code := range codes {
				if want := map[bool]int{true: http.StatusOK, false: proxy.deny}[i < 20]; code != want {
					t.Fatalf("statuses %v: want 20 times 200, then %d", codes, proxy.deny)
				}
			}
			if got := a.hits.Load() - before; got != 20 {
				t.Errorf("the application received %d requests, want the 20 allowed", got)
			}
			if got := denial.Get("RateLimit-Policy"); !strings.Contains(got, `"api-per-client/minute";q=20;w=60`) {
				t.Errorf("denial RateLimit-Policy %q, want api-per-client/minute q=20 w=60 (headers %v)", got, denial)
			}
			if got := denial.Get("RateLimit"); !strings.Contains(got, fmt.Sprintf("%q;r=0", "api-per-client/minute")) {
				t.Errorf("denial RateLimit %q, want r=0", got)
			}
		})
	}
}
