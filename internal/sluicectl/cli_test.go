package sluicectl

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func TestBadUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the message
	}{
		{nil, "no command given"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"override"}, "override needs a subcommand"},
		{[]string{"override", "patch", "shop/p", "k"}, `unknown command "override patch"`},
		{[]string{"inspect", "shop/p"}, "two arguments, NAMESPACE/POLICY KEY (got 1)"},
		{[]string{"inspect", "shop/p", ""}, "KEY is empty"},
		{[]string{"inspect", "shop", "acme"}, `NAMESPACE/POLICY "shop"`},
		{[]string{"inspect", "shop/p/x", "acme"}, `NAMESPACE/POLICY "shop/p/x"`},
		{[]string{"inspect", "/p", "acme"}, `NAMESPACE/POLICY "/p"`},
		{[]string{"reset", "shop/p"}, "NAMESPACE/POLICY KEY (got 1)"},
		{[]string{"lift", "shop/p", "a", "b"}, "(got 3)"},
		{[]string{"top"}, "one argument, NAMESPACE/POLICY (got 0)"},
		{[]string{"top", "shop/p", "--window", "soon"}, `--window "soon"`},
		{[]string{"top", "shop/p", "--window", "-5m"}, `--window "-5m"`},
		{[]string{"bans", "shop/p", "acme"}, "(got 2)"},
		{[]string{"override", "list"}, "(got 0)"},
		{[]string{"override", "delete", "shop/p"}, "(got 1)"},
		{[]string{"override", "set", "shop/p", "acme"}, "NAME=NUMBER... (got 2 arguments)"},
		{[]string{"override", "set", "shop/p", "acme", "per-minute"}, `"per-minute": want NAME=NUMBER`},
		{[]string{"override", "set", "shop/p", "acme", "=5"}, `"=5": want NAME=NUMBER`},
		{[]string{"override", "set", "shop/p", "acme", "per-minute=ten"}, `the number "ten" is not a positive integer`},
		{[]string{"override", "set", "shop/p", "acme", "per-minute=0"}, `the number "0" is not a positive integer`},
		{[]string{"override", "set", "shop/p", "acme", "per-minute=-3"}, `the number "-3"`},
		{[]string{"override", "set", "shop/p", "acme", "per-minute=1.5"}, `the number "1.5"`},
		{[]string{"override", "set", "shop/p", "acme", "m=1", "m=2"}, `limit "m" is given twice`},
		{[]string{"override", "set", "shop/p", "acme", "m=1", "--expires", "friday"}, `--expires "friday": want a duration`},
		{[]string{"override", "set", "shop/p", "acme", "m=1", "--expires", "-1h"}, `--expires "-1h": want a positive duration`},
		{[]string{"override", "set", "shop/p", "acme", "m=1", "--expires", "0s"}, `--expires "0s": want a positive duration`},
		{[]string{"explain", "shop"}, "explain needs --url"},
		{[]string{"explain", "--url", "https://x/"}, "one argument, NAMESPACE (got 0)"},
		{[]string{"explain", "shop/p", "--url", "https://x/"}, `NAMESPACE "shop/p"`},
		{[]string{"explain", "shop", "--url", "/api/cart"}, `--url "/api/cart": want an absolute URL`},
		{[]string{"explain", "shop", "--url", "https://x/", "--header", "X-Tenant"}, `--header "X-Tenant": want K=V`},
		{[]string{"explain", "shop", "--url", "https://x/", "--client-ip", "nobody"}, `--client-ip "nobody"`},
		{[]string{"explain", "shop", "--url", "https://x/", "--transport", "nginx"}, `--transport "nginx": want one of http, ext-authz-grpc, v1-check, middleware`},
		{[]string{"inspect", "shop/p", "acme", "--transport", "http"}, "--transport is a flag of explain, not of inspect"},
		{[]string{"inspect", "shop/p", "acme", "--limit", "m"}, "--limit is a flag of reset, not of inspect"},
		{[]string{"reset", "shop/p", "acme", "--expires", "1h"}, "--expires is a flag of override set, not of reset"},
		{[]string{"bans", "shop/p", "--url", "https://x/"}, "--url is a flag of explain, not of bans"},
		{[]string{"bans", "shop/p", "--frobnicate"}, "unknown flag: --frobnicate"},
		{[]string{"bans", "shop/p", "-o", "xml"}, `--output "xml": want table, json or yaml`},
		{[]string{"bans", "shop/p", "--server", "127.0.0.1:8081"}, `--server "127.0.0.1:8081"`},
		{[]string{"bans", "shop/p", "--request-timeout", "0s"}, "--request-timeout 0s"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := Main(tc.args, &stdout, &stderr); code != ExitUsage {
				t.Errorf("exit code %d, want %d (bad usage); stderr:\n%s", code, ExitUsage, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) || !strings.Contains(stderr.String(), "kubectl sluice --help") {
				t.Errorf("stderr:\n%s\nwant it to say %q and point to --help", stderr.String(), tc.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout: %q, want nothing", stdout.String())
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"reset", "--help"}} {
		var stdout, stderr bytes.Buffer
		if code := Main(args, &stdout, &stderr); code != ExitOK {
			t.Errorf("%v: exit code %d, want 0", args, code)
		}
		for _, want := range []string{"override set NAMESPACE/POLICY KEY NAME=NUMBER...", "Exit codes:", "4  forbidden", "5  not found"} {
			if !strings.Contains(stdout.String(), want) {
				t.Errorf("%v: help lacks %q", args, want)
			}
		}
	}
}

// TestParse checks what each command line asks of the admin API.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args              []string
		verb, path, query string
		body              string
	}{
		{[]string{"explain", "shop", "--url", "https://shop.example.com/api/cart?x=1", "--method", "POST", "--client-ip", "203.0.113.7",
			"--header", "X-Tenant=acme", "--header", "X-Tenant=beta", "--header", "X-Empty="},
			"POST", "namespaces/shop/explain", "",
			`{"url":"https://shop.example.com/api/cart?x=1","method":"POST","clientIP":"203.0.113.7","headers":{"X-Empty":[""],"X-Tenant":["acme","beta"]}}`},
		{[]string{"explain", "shop", "--url", "https://shop.example.com/", "--transport", "middleware"}, "POST", "namespaces/shop/explain", "",
			`{"url":"https://shop.example.com/","transport":"middleware"}`},
		{[]string{"inspect", "shop/per-tenant", "203.0.113.7"}, "GET", "namespaces/shop/ratelimitpolicies/per-tenant/keys", "key=203.0.113.7", ""},
		{[]string{"reset", "shop/per-tenant", "a b&c"}, "DELETE", "namespaces/shop/ratelimitpolicies/per-tenant/keys", "key=a+b%26c", ""},
		{[]string{"reset", "--limit", "per-minute", "shop/per-tenant", "acme"}, "DELETE", "namespaces/shop/ratelimitpolicies/per-tenant/keys", "key=acme&limit=per-minute", ""},
		{[]string{"top", "shop/per-tenant"}, "GET", "namespaces/shop/ratelimitpolicies/per-tenant/top", "", ""},
		{[]string{"top", "shop/per-tenant", "--window", "1m"}, "GET", "namespaces/shop/ratelimitpolicies/per-tenant/top", "window=1m", ""},
		{[]string{"bans", "shop/per-tenant"}, "GET", "namespaces/shop/ratelimitpolicies/per-tenant/bans", "", ""},
		{[]string{"lift", "shop/per-tenant", "acme"}, "DELETE", "namespaces/shop/ratelimitpolicies/per-tenant/bans", "key=acme", ""},
		{[]string{"override", "list", "shop/per-tenant"}, "GET", "namespaces/shop/ratelimitpolicies/per-tenant/overrides", "", ""},
		{[]string{"override", "delete", "shop/per-tenant", "acme"}, "DELETE", "namespaces/shop/ratelimitpolicies/per-tenant/overrides", "key=acme", ""},
		{[]string{"override", "set", "shop/per-tenant", "acme", "per-minute=1000", "per-day=50000"}, "PUT", "namespaces/shop/ratelimitpolicies/per-tenant/overrides", "key=acme",
			`{"limits":{"per-day":50000,"per-minute":1000}}`},
		{[]string{"override", "set", "shop/per-tenant", "acme", "per-minute=1000", "--expires", "48h"}, "PUT", "namespaces/shop/ratelimitpolicies/per-tenant/overrides", "key=acme",
			`{"limits":{"per-minute":1000},"expiresIn":"48h"}`},
		{[]string{"override", "set", "shop/per-tenant", "acme", "per-minute=1000", "--expires", "2026-12-31T00:00:00Z"}, "PUT", "namespaces/shop/ratelimitpolicies/per-tenant/overrides", "key=acme",
			`{"limits":{"per-minute":1000},"expires":"2026-12-31T00:00:00Z"}`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			got := fakeServer(t, 200, `{}`)
			var stdout, stderr bytes.Buffer
			args := append([]string{"--server", got.url, "-o", "json"}, tc.args...)
			if code := Main(args, &stdout, &stderr); code != ExitOK {
				t.Fatalf("exit code %d; stderr:\n%s", code, stderr.String())
			}
			r := got.last(t)
			if r.method != tc.verb || r.path != base+tc.path || r.query != tc.query {
				t.Errorf("called %s %s?%s, want %s %s?%s", r.method, r.path, r.query, tc.verb, base+tc.path, tc.query)
			}
			if r.body != tc.body {
				t.Errorf("body %s, want %s", r.body, tc.body)
			}
			if tc.body != "" && r.contentType != "application/json" {
				t.Errorf("Content-Type %q, want application/json", r.contentType)
			}
		})
	}
}

// TestRefusedBeforeAnyCall: every argument of every command that cannot
// name what it must (a namespace, a policy or a limit as Kubernetes names
// them, a window the server keeps, a kubeconfig or context that is there)
// is refused with exit code 2 and the argument named, and nothing is
// called. (What only the server reads, an explained request's method and
// headers, it refuses with 400: exit code 2 too, TestErrors.)
func TestRefusedBeforeAnyCall(t *testing.T) {
	long := strings.Repeat("a", 254)
	kc := kubeconfig(t, "https://127.0.0.1:1", "https://127.0.0.1:1")
	for _, tc := range []struct {
		args []string
		want string // in the message
	}{
		{[]string{"explain", "..", "--url", "https://x/"}, `NAMESPACE ".."`},
		{[]string{"explain", ".", "--url", "https://x/"}, `NAMESPACE "."`},
		{[]string{"explain", "sh%op", "--url", "https://x/"}, `NAMESPACE "sh%op"`},
		{[]string{"explain", "Shop", "--url", "https://x/"}, `NAMESPACE "Shop"`},
		{[]string{"explain", "shop", "--url", "https://x/", "--context", "nosuch", "--kubeconfig", kc}, `--context "nosuch"`},
		{[]string{"explain", "shop", "--url", "https://x/", "--kubeconfig", "/nonexistent/config"}, `--kubeconfig "/nonexistent/config"`},
		{[]string{"inspect", "shop/a%b", "acme"}, `NAMESPACE/POLICY "shop/a%b"`},
		{[]string{"inspect", "../p", "acme"}, `NAMESPACE/POLICY "../p"`},
		{[]string{"inspect", "shop/..", "acme"}, `NAMESPACE/POLICY "shop/.."`},
		{[]string{"inspect", "shop/Per_Tenant", "acme"}, `NAMESPACE/POLICY "shop/Per_Tenant"`},
		{[]string{"inspect", "shop/" + long, "acme"}, `NAMESPACE/POLICY "shop/` + long},
		{[]string{"reset", "shop/a%b", "acme"}, `NAMESPACE/POLICY "shop/a%b"`},
		{[]string{"reset", "shop/p", "acme", "--limit", "per%minute"}, `--limit "per%minute"`},
		{[]string{"reset", "shop/p", "acme", "--limit", "Per_Minute"}, `--limit "Per_Minute"`},
		{[]string{"top", "sh%op/p"}, `NAMESPACE/POLICY "sh%op/p"`},
		{[]string{"top", "shop/p", "--window", "90s"}, `--window "90s"`},
		{[]string{"top", "shop/p", "--window", "30s"}, `--window "30s"`},
		{[]string{"top", "shop/p", "--window", "16m"}, `--window "16m"`},
		{[]string{"top", "shop/p", "--window", "1h"}, `--window "1h"`},
		{[]string{"bans", "../p"}, `NAMESPACE/POLICY "../p"`},
		{[]string{"bans", "shop/."}, `NAMESPACE/POLICY "shop/."`},
		{[]string{"lift", "shop/a%2Fb", "acme"}, `NAMESPACE/POLICY "shop/a%2Fb"`},
		{[]string{"override", "list", "../p"}, `NAMESPACE/POLICY "../p"`},
		{[]string{"override", "delete", "shop/a%b", "acme"}, `NAMESPACE/POLICY "shop/a%b"`},
		{[]string{"override", "set", "shop/a%b", "acme", "m=1"}, `NAMESPACE/POLICY "shop/a%b"`},
		{[]string{"override", "set", "shop/p", "acme", "per%minute=1"}, `"per%minute=1": the limit name "per%minute"`},
		{[]string{"override", "set", "shop/p", "acme", "Per_Minute=1"}, `"Per_Minute=1": the limit name "Per_Minute"`},
		{[]string{"bans", "shop/p", "--server", "http://127.0.0.1:1", "--context", "a"}, "--context is a flag of the kubeconfig"},
		{[]string{"bans", "shop/p", "--server", "http://127.0.0.1:1", "--kubeconfig", kc}, "--kubeconfig is a flag of the kubeconfig"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			f := fakeServer(t, 200, `{}`)
			args := tc.args
			if !slices.Contains(args, "--server") && !slices.Contains(args, "--kubeconfig") && !slices.Contains(args, "--context") {
				args = append([]string{"--server", f.url}, args...)
			}
			var stdout, stderr bytes.Buffer
			if code := Main(args, &stdout, &stderr); code != ExitUsage {
				t.Errorf("exit code %d, want %d (bad usage); stderr:\n%s", code, ExitUsage, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) || !strings.Contains(stderr.String(), "kubectl sluice --help") {
				t.Errorf("stderr:\n%s\nwant it to say %q and point to --help", stderr.String(), tc.want)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.calls) != 0 {
				t.Errorf("called the admin API: %+v", f.calls)
			}
		})
	}
}
