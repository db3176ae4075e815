package nginxtest

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// ExampleCheckAddr is the Service address the examples under
// config/examples use; tests put the address of the check process they
// run in its place.
const ExampleCheckAddr = "sluice-check.sluice-system.svc.cluster.local:8080"

// Ingress is an Ingress from config/examples/ingress-nginx.
type Ingress struct {
	AuthURL         string
	ResponseHeaders []string
	ConfigSnippet   string
	ServerSnippet   string
}

// ReadIngress reads an Ingress example file and the annotations that
// shape what ingress-nginx renders for it.
func ReadIngress(t testing.TB, file string) Ingress {
	t.Helper()
	var ing struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	readYAML(t, file, &ing)
	a := ing.Metadata.Annotations
	ex := Ingress{
		AuthURL:       a["nginx.ingress.kubernetes.io/auth-url"],
		ConfigSnippet: a["nginx.ingress.kubernetes.io/configuration-snippet"],
		ServerSnippet: a["nginx.ingress.kubernetes.io/server-snippet"],
	}
	if ex.AuthURL == "" {
		t.Fatalf("%s: no auth-url annotation", file)
	}
	if !strings.Contains(ex.AuthURL, ExampleCheckAddr) {
		t.Fatalf("%s: auth-url %q does not call %s", file, ex.AuthURL, ExampleCheckAddr)
	}
	if h := a["nginx.ingress.kubernetes.io/auth-response-headers"]; h != "" {
		for _, name := range strings.Split(h, ",") {
			ex.ResponseHeaders = append(ex.ResponseHeaders, strings.TrimSpace(name))
		}
	}
	return ex
}

// Server is one server block, configured the way ingress-nginx renders
// an Ingress with the example's annotations.
type Server struct {
	Port      int
	Namespace string // the Ingress's namespace: ingress-nginx's $namespace
	// Hostname is the Ingress rule's host (server_name); "" renders the
	// catch-all "_".
	Hostname string
	Upstream string // host:port of the application
	Ingress  Ingress
	// ClientHeaders copies the check's rate-limit headers to the client
	// (add_header ... always), for examples without a snippet that does.
	ClientHeaders bool
	// LogFormat, when set, is the server's access log format
	// (ReadLogFormat), the log written to nginx's standard output.
	LogFormat string
}

// ReadLogFormat reads log-format-upstream from an ingress-nginx controller
// ConfigMap example.
func ReadLogFormat(t testing.TB, file string) string {
	t.Helper()
	var cm struct {
		Data map[string]string `json:"data"`
	}
	readYAML(t, file, &cm)
	f := cm.Data["log-format-upstream"]
	if f == "" {
		t.Fatalf("%s: no log-format-upstream", file)
	}
	return f
}

// readYAML decodes the YAML file into v, or fails t.
func readYAML(t testing.TB, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// logFormatName names the log_format of the server on port.
func logFormatName(port int) string { return fmt.Sprintf("server_%d", port) }

// RateLimitHeaders are the headers the check endpoint answers with.
var RateLimitHeaders = []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"}

// upstreamVar is nginx's variable for a header of the upstream's answer.
func upstreamVar(header string) string {
	return "$upstream_http_" + strings.ReplaceAll(strings.ToLower(header), "-", "_")
}

// Render follows ingress-nginx's template for auth-url: an internal
// location that proxies to the auth URL without the body, with the original
// request in headers; auth_request in the Ingress's location;
// auth-response-headers as auth_request_set + proxy_set_header; the
// snippets where ingress-nginx puts them.
func (s Server) Render(checkAddr string) string {
	var b strings.Builder
	authURL := strings.Replace(s.Ingress.AuthURL, ExampleCheckAddr, checkAddr, 1)
	serverName := s.Hostname
	if serverName == "" {
		serverName = "_"
	}
	fmt.Fprintf(&b, "\n\tserver {\n\t\tlisten 127.0.0.1:%d;\n\t\tserver_name %s;\n\n", s.Port, serverName)
	if s.LogFormat != "" {
		fmt.Fprintf(&b, "\t\taccess_log /dev/stdout %s;\n", logFormatName(s.Port))
	}
	b.WriteString(AuthLocation(checkAddr, authURL))
	fmt.Fprintf(&b, "\n\t\tlocation / {\n\t\t\tset $namespace %q;\n\t\t\tauth_request %s;\n", s.Namespace, AuthPath)
	for i, h := range s.Ingress.ResponseHeaders {
		fmt.Fprintf(&b, "\t\t\tauth_request_set $authHeader%d %s;\n\t\t\tproxy_set_header '%s' $authHeader%d;\n", i, upstreamVar(h), h, i)
	}
	if s.ClientHeaders {
		for i, h := range RateLimitHeaders {
			fmt.Fprintf(&b, "\t\t\tauth_request_set $client_rl%d %s;\n\t\t\tadd_header %s $client_rl%d always;\n", i, upstreamVar(h), h, i)
		}
	}
	if s.Ingress.ConfigSnippet != "" {
		b.WriteString("\t\t\t# configuration-snippet\n" + indent(s.Ingress.ConfigSnippet, "\t\t\t"))
	}
	fmt.Fprintf(&b, "\t\t\tproxy_pass http://%s;\n\t\t}\n", s.Upstream)
	if s.Ingress.ServerSnippet != "" {
		b.WriteString("\t\t# server-snippet\n" + indent(s.Ingress.ServerSnippet, "\t\t"))
	}
	b.WriteString("\t}\n")
	return b.String()
}

// indent prefixes each line of s.
func indent(s, prefix string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(prefix + line + "\n")
	}
	return b.String()
}

// StartServers runs a private nginx (master and one worker, in the
// foreground) with the servers, on loopback.
func StartServers(t testing.TB, dir, checkAddr string, servers ...Server) *systest.Proc {
	t.Helper()
	var http strings.Builder
	ports := map[int]bool{}
	var listen []int
	for _, s := range servers {
		if s.LogFormat != "" {
			fmt.Fprintf(&http, "\tlog_format %s '%s';\n", logFormatName(s.Port), strings.ReplaceAll(s.LogFormat, "'", `\'`))
		}
		http.WriteString(s.Render(checkAddr))
		if !ports[s.Port] {
			if s.Hostname != "" {
				// ingress-nginx's default server: hosts no Ingress names get 404.
				fmt.Fprintf(&http, "\tserver {\n\t\tlisten 127.0.0.1:%d default_server;\n\t\tserver_name _;\n\t\treturn 404;\n\t}\n", s.Port)
			}
			listen = append(listen, s.Port)
		}
		ports[s.Port] = true
	}
	return Start(t, dir, http.String(), listen...)
}
