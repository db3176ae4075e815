// Package nginxtest runs a private nginx from Debian's package for tests,
// and renders the location ingress-nginx writes for an Ingress's auth-url,
// so every test that puts nginx in front of Sluice runs it one way.
package nginxtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// AuthPath is the internal location AuthLocation renders, for the
// auth_request lines of the locations it guards.
const AuthPath = "/_external-auth-Lw-Prefix"

// Start runs a private nginx (master and one worker, in the foreground,
// its files under dir/nginx) whose http block holds http, and waits until
// it listens on each of ports on 127.0.0.1.
func Start(t testing.TB, dir, http string, ports ...int) *systest.Proc {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		t.Fatal("nginx is not on PATH: run `make test` (hack/install-deps.sh installs the packages the tests run) or `apt-get install nginx`")
	}
	prefix := filepath.Join(dir, "nginx")
	if err := os.MkdirAll(prefix, 0o755); err != nil {
		t.Fatal(err)
	}
	var conf strings.Builder
	if os.Geteuid() == 0 {
		// Workers would switch to nobody, who cannot enter the test's
		// private temporary directory.
		conf.WriteString("user root;\n")
	}
	fmt.Fprintf(&conf, `worker_processes 1;
daemon off;
pid %[1]s/nginx.pid;
error_log stderr notice;
events { worker_connections 256; }
http {
	access_log %[1]s/access.log;
	client_body_temp_path %[1]s/client_body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	server_tokens off;
`, prefix)
	conf.WriteString(http)
	conf.WriteString("}\n")
	confFile := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(confFile, []byte(conf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("nginx.conf:\n%s", conf.String())
	p := systest.Start(t, dir, "nginx", nil, bin, "-e", "stderr", "-p", prefix, "-c", confFile)
	for _, port := range ports {
		p.WaitTCP(t, "127.0.0.1:"+strconv.Itoa(port), 10*time.Second)
	}
	return p
}

// AuthLocation is the internal location ingress-nginx's template renders
// for auth-url, inside a server block (two tabs deep): it proxies to
// authURL without the body, the original request in headers, with
// checkAddr as the Host.
func AuthLocation(checkAddr, authURL string) string {
	return fmt.Sprintf(`		location = %s {
			internal;
			proxy_pass_request_body     off;
			proxy_set_header            Content-Length          "";
			proxy_set_header            X-Forwarded-Proto       "";
			proxy_set_header            X-Request-ID            $request_id;
			proxy_set_header            Host                    %s;
			proxy_set_header            X-Original-URL          $scheme://$http_host$request_uri;
			proxy_set_header            X-Original-Method       $request_method;
			proxy_set_header            X-Sent-From             "nginx-ingress-controller";
			proxy_set_header            X-Real-IP               $remote_addr;
			proxy_set_header            X-Forwarded-For         $remote_addr;
			proxy_set_header            X-Auth-Request-Redirect $request_uri;
			proxy_buffering             off;
			proxy_buffer_size           4k;
			proxy_buffers               4 4k;
			proxy_request_buffering     on;
			proxy_http_version          1.1;
			proxy_pass_request_headers  on;
			client_max_body_size        1m;
			set $target %s;
			proxy_pass $target;
		}
`, AuthPath, checkAddr, authURL)
}
