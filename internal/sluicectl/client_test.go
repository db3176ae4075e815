package sluicectl

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func status(code int, reason, message string) string {
	return fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":%q,"reason":%q,"code":%d}`, message, reason, code)
}

// TestErrors checks each failure's exit code, the server's message and the
// hint printed with it.
func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		code      int
		body      string
		discovery bool
		exit      int
		want      []string
	}{
		{"forbidden", []string{"reset", "shop/per-tenant", "acme"}, 403,
			status(403, "Forbidden", "forbidden: you need update on ratelimitpolicies/keys in namespace shop"), true, ExitForbidden,
			[]string{"forbidden: you need update on ratelimitpolicies/keys in namespace shop",
				"hint: reset needs update on ratelimitpolicies/keys in namespace shop",
				"kubectl auth can-i update ratelimitpolicies.ratelimit.sluice.dev --subresource=keys -n shop"}},
		{"forbidden overrides", []string{"override", "list", "shop/per-tenant"}, 403,
			status(403, "Forbidden", "forbidden: you need get on ratelimitpolicies/overrides in namespace shop"), true, ExitForbidden,
			[]string{"override list needs get on ratelimitpolicies/overrides in namespace shop"}},
		{"forbidden by the API server", []string{"reset", "shop/per-tenant", "acme"}, 403,
			`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,` +
				`"message":"ratelimitpolicies.admin.ratelimit.sluice.dev \"per-tenant\" is forbidden: User \"bob\" cannot delete resource \"ratelimitpolicies/keys\" in API group \"admin.ratelimit.sluice.dev\" in the namespace \"shop\"",` +
				`"details":{"name":"per-tenant","group":"admin.ratelimit.sluice.dev","kind":"ratelimitpolicies"}}`, true, ExitForbidden,
			[]string{`User "bob" cannot delete resource`, "refused the call before it reached Sluice",
				"reset needs delete on ratelimitpolicies/keys in API group admin.ratelimit.sluice.dev (and update on ratelimitpolicies/keys in ratelimit.sluice.dev",
				"sluice-admin-edit (aggregated into edit and admin)"}},
		{"reading forbidden by the API server", []string{"bans", "shop/per-tenant"}, 403,
			`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,` +
				`"message":"ratelimitpolicies.admin.ratelimit.sluice.dev \"per-tenant\" is forbidden: User \"bob\" cannot get resource \"ratelimitpolicies/bans\" in API group \"admin.ratelimit.sluice.dev\" in the namespace \"shop\"",` +
				`"details":{"name":"per-tenant","group":"admin.ratelimit.sluice.dev","kind":"ratelimitpolicies"}}`, true, ExitForbidden,
			[]string{"refused the call before it reached Sluice",
				"bans needs get on ratelimitpolicies/bans in API group admin.ratelimit.sluice.dev (and get on ratelimitpolicies/keys in ratelimit.sluice.dev",
				"sluice-admin-view (aggregated into view, edit and admin)"}},
		{"unauthorized", []string{"bans", "shop/per-tenant"}, 401,
			status(401, "Unauthorized", "Unauthorized"), true, ExitUnauthorized, []string{"kubectl auth whoami"}},
		{"policy not found", []string{"inspect", "shop/nope", "acme"}, 404,
			status(404, "NotFound", `ratelimitpolicies "nope" not found in namespace shop`), true, ExitNotFound,
			[]string{`ratelimitpolicies "nope" not found in namespace shop`}},
		{"no admin API", []string{"inspect", "shop/per-tenant", "acme"}, 404, `404 page not found`, false, ExitError,
			[]string{"serves no Sluice admin API", "manager local --admin-listen"}},
		{"limit not found", []string{"reset", "shop/per-tenant", "acme", "--limit", "per-hour"}, 404,
			status(404, "NotFound", `limit "per-hour" is not a limit of policy shop/per-tenant (its limits: per-minute, per-day)`), true, ExitNotFound,
			[]string{`limit "per-hour" is not a limit of policy shop/per-tenant`}},
		{"expiry in the past", []string{"override", "set", "shop/per-tenant", "acme", "per-minute=5", "--expires", "2020-01-01T00:00:00Z"}, 400,
			status(400, "BadRequest", "expires 2020-01-01T00:00:00Z is in the past"), true, ExitUsage,
			[]string{"expires 2020-01-01T00:00:00Z is in the past"}},
		{"server error", []string{"top", "shop/per-tenant"}, 500,
			status(500, "InternalError", "the store is unavailable"), true, ExitError, []string{"the store is unavailable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fakeServer(t, tc.code, tc.body)
			f.discovery = tc.discovery
			var stdout, stderr bytes.Buffer
			if code := Main(append([]string{"--server", f.url}, tc.args...), &stdout, &stderr); code != tc.exit {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.exit, stderr.String())
			}
			for _, want := range tc.want {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr:\n%s\nwant it to say %q", stderr.String(), want)
				}
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout: %q, want nothing", stdout.String())
			}
		})
	}
}

func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"bans", "shop/p", "--server", "http://" + addr}, &stdout, &stderr); code != ExitError {
		t.Errorf("exit code %d, want %d", code, ExitError)
	}
	if want := "hint: cannot reach http://" + addr + ": is 'manager local --admin-listen' running there?"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr:\n%s\nwant %q", stderr.String(), want)
	}
}

// kubeconfig writes a kubeconfig whose two contexts reach two servers, the
// second with a client certificate file that does not exist.
func kubeconfig(t *testing.T, server, other string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config")
	config := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: a
  cluster: {server: %q}
- name: b
  cluster: {server: %q}
users:
- name: token
  user: {token: secret-token}
- name: cert
  user: {client-certificate: /nonexistent/cert.pem, client-key: /nonexistent/key.pem}
contexts:
- name: a
  context: {cluster: a, user: token}
- name: b
  context: {cluster: b, user: cert}
current-context: a
`, server, other)
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestKubeconfig checks that, without --server, the plugin calls the
// cluster of the kubeconfig (--kubeconfig or KUBECONFIG, --context) with
// its credentials, and that an API server without the admin API's
// APIService is named as such.
func TestKubeconfig(t *testing.T) {
	f := fakeServer(t, 200, `{"namespace":"shop","policy":"p","bans":[]}`)
	path := kubeconfig(t, f.url, "https://127.0.0.1:1")

	var stdout, stderr bytes.Buffer
	if code := Main([]string{"bans", "shop/p", "--kubeconfig", path}, &stdout, &stderr); code != ExitOK {
		t.Fatalf("exit code %d; stderr:\n%s", code, stderr.String())
	}
	t.Setenv("KUBECONFIG", path)
	stdout.Reset()
	if code := Main([]string{"bans", "shop/p"}, &stdout, &stderr); code != ExitOK {
		t.Fatalf("KUBECONFIG: exit code %d; stderr:\n%s", code, stderr.String())
	}
	stderr.Reset()
	if code := Main([]string{"bans", "shop/p", "--context", "b"}, &stdout, &stderr); code != ExitError {
		t.Errorf("--context b: exit code %d, want %d", code, ExitError)
	}
	if !strings.Contains(stderr.String(), "/nonexistent/cert.pem") {
		t.Errorf("--context b: stderr:\n%s\nwant it to name the client certificate it could not read", stderr.String())
	}

	missing := fakeServer(t, 404, status(404, "NotFound", "the server could not find the requested resource"))
	missing.discovery = false
	stderr.Reset()
	if code := Main([]string{"bans", "shop/p", "--kubeconfig", kubeconfig(t, missing.url, missing.url)}, &stdout, &stderr); code != ExitError {
		t.Errorf("no APIService: exit code %d, want %d", code, ExitError)
	}
	if want := "the APIService v1alpha1.admin.ratelimit.sluice.dev is missing"; !strings.Contains(stderr.String(), want) {
		t.Errorf("no APIService: stderr:\n%s\nwant %q", stderr.String(), want)
	}
}
