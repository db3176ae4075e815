package convert

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/nginxtest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
	"github.com/sluice-dev/sluice/webhook"
)

// convertIngress runs `manager convert ingress-nginx args...` with stdin
// and returns its standard output, standard error and exit status.
func convertIngress(t *testing.T, stdin []byte, args ...string) (stdout, stderr []byte, code int) {
	t.Helper()
	cmd := exec.Command(manager.Path(t), append([]string{"convert", "ingress-nginx"}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.Bytes(), errOut.Bytes(), code
}

// convertedPolicies reads the policies of the command's output.
func convertedPolicies(t *testing.T, out []byte) []ratelimitv1alpha1.RateLimitPolicy {
	t.Helper()
	var policies []ratelimitv1alpha1.RateLimitPolicy
	for _, doc := range strings.Split(string(out), "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var p ratelimitv1alpha1.RateLimitPolicy
		if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
			t.Fatalf("%v:\n%s", err, doc)
		}
		policies = append(policies, p)
	}
	return policies
}

// ingressInputs are the Ingress manifests of the converter's test data
// and of this package's.
func ingressInputs(t *testing.T) []string {
	t.Helper()
	root := kubetest.RepoRoot(t)
	var files []string
	for _, pattern := range []string{
		filepath.Join(root, "internal", "convert", "ingressnginx", "testdata", "*.yaml"),
		filepath.Join(root, "internal", "convert", "ingressnginx", "testdata", "*.json"),
		filepath.Join("testdata", "ingress-*.yaml"),
	} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 4 {
		t.Fatalf("too few Ingress manifests: %v", files)
	}
	return files
}

// TestIngressConvertedPoliciesApply converts every Ingress manifest of
// the test data (with --allow-partial: some hold what does not convert)
// and applies the output to a real API server with `kubectl apply
// --server-side`, in the Ingresses' own namespaces and then all in one:
// every policy must pass the CRD's schema and CEL rules as written.
func TestIngressConvertedPoliciesApply(t *testing.T) {
	root := kubetest.RepoRoot(t)
	cluster := kubetest.Start(t, kubetest.Options{CRDDirs: []string{filepath.Join(root, "config", "crd", "bases")}})
	namespaces := map[string]bool{}
	total := 0
	for i, f := range ingressInputs(t) {
		for _, run := range []struct {
			name string
			args []string
		}{
			{"own namespaces", []string{"--allow-partial", f}},
			{"one namespace", []string{"--allow-partial", "--namespace-from-ingress=false", "--namespace", fmt.Sprintf("ingress-%d", i), f}},
		} {
			args := run.args
			t.Run(filepath.Base(f)+"/"+run.name, func(t *testing.T) {
				out, stderr, code := convertIngress(t, nil, args...)
				if code != 0 {
					t.Fatalf("exit status %d:\n%s", code, stderr)
				}
				policies := convertedPolicies(t, out)
				if len(policies) == 0 {
					t.Fatalf("no policy converted:\n%s", stderr)
				}
				want := map[string]int{}
				for _, p := range policies {
					if p.Namespace == "" {
						t.Fatalf("policy %s has no namespace", p.Name)
					}
					want[p.Namespace]++
					if !namespaces[p.Namespace] {
						cluster.MustKubectl("create", "namespace", p.Namespace)
						namespaces[p.Namespace] = true
					}
				}
				if msg, err := cluster.KubectlStdin(out, "apply", "--server-side", "--field-manager", "convert-test", "-f", "-"); err != nil {
					t.Fatalf("the API server refuses the converted policies: %v\n%s\n--- converted:\n%s", err, msg, out)
				}
				for ns, n := range want {
					got := strings.Fields(cluster.MustKubectl("get", "rlp", "-n", ns, "-o", "name"))
					if len(got) < n {
						t.Fatalf("%d policies in %s, want at least %d: %v", len(got), ns, n, got)
					}
				}
				total += len(policies)
			})
		}
	}
	t.Logf("%d converted policies applied", total)
}

// TestIngressConvertCommand runs the command as a person does: standard
// input, the reports' lines, and the exit status with and without
// --allow-partial.
func TestIngressConvertCommand(t *testing.T) {
	shop, err := os.ReadFile(filepath.Join("testdata", "ingress-shop.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("standard input", func(t *testing.T) {
		out, stderr, code := convertIngress(t, shop, "-")
		if code != 0 {
			t.Fatalf("exit status %d:\n%s", code, stderr)
		}
		if p := convertedPolicies(t, out); len(p) != 1 || p[0].Name != "shop" || p[0].Namespace != "shop" {
			t.Fatalf("want policy shop/shop:\n%s", out)
		}
		if !bytes.Contains(stderr, []byte("1 Ingresses read, 1 policies written")) {
			t.Errorf("no summary on standard error:\n%s", stderr)
		}
	})
	bad := []byte(`apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: hooks
  namespace: shop
  annotations:
    nginx.ingress.kubernetes.io/limit-rps: "ten"
    nginx.ingress.kubernetes.io/limit-connections: "5"
spec:
  rules:
  - host: hooks.example.com
`)
	t.Run("an error and a limit that does not convert", func(t *testing.T) {
		for _, args := range [][]string{{"-"}, {"--allow-partial", "-"}} {
			out, stderr, code := convertIngress(t, append(append([]byte{}, bad...), append([]byte("---\n"), shop...)...), args...)
			for _, line := range []string{
				`-:7: shop/hooks: annotation limit-rps: error: "ten" is not an integer`,
				`-:8: shop/hooks: annotation limit-connections: inexact: not convertible`,
			} {
				if !bytes.Contains(stderr, []byte(line)) {
					t.Errorf("%v: no report %q:\n%s", args, line, stderr)
				}
			}
			if args[0] == "-" {
				if code != 1 || len(out) != 0 {
					t.Errorf("without --allow-partial: exit status %d, %d bytes written; want 1 and nothing", code, len(out))
				}
				continue
			}
			if code != 0 {
				t.Errorf("with --allow-partial: exit status %d:\n%s", code, stderr)
			}
			if p := convertedPolicies(t, out); len(p) != 1 || p[0].Name != "shop" {
				t.Errorf("with --allow-partial: want the policy of shop alone:\n%s", out)
			}
		}
	})
	t.Run("usage", func(t *testing.T) {
		if _, _, code := convertIngress(t, nil); code == 0 {
			t.Error("no file named: exit status 0")
		}
		if _, _, code := convertIngress(t, nil, "--namespace-from-ingress=false", "-"); code == 0 {
			t.Error("--namespace-from-ingress=false without --namespace: exit status 0")
		}
	})
}

// A step of the differential: n requests from client at once, after a
// pause since the previous step; want is nginx's answers, 'o' allowed and
// 'x' denied, by the arithmetic of limit_req (see ingress-shop.yaml: levels
// in requests, rps draining 2/s with room for 7, rpm 0.1/s with room for
// 19). Every pause leaves each level half a request (or more) away from
// where a step's count would change, so a machine that stalls a step by up
// to 250 ms still gets these answers.
type limitStep struct {
	pause  time.Duration
	client string
	want   string
}

var limitSteps = []limitStep{
	// rps 7, rpm 7.
	{0, "127.0.0.1", "ooooooo" + "xxx"},
	// rps 7-2.5=4.5: two fit (6.5); rpm 6.875+2=8.875.
	{1250 * time.Millisecond, "127.0.0.1", "oo" + "xxxx"},
	// rps 6.5-4=2.5: four fit (6.5); rpm 8.675+4=12.675.
	{2 * time.Second, "127.0.0.1", "oooo" + "xxxx"},
	// rps 2.5: four fit; rpm 12.475+4=16.475.
	{2 * time.Second, "127.0.0.1", "oooo" + "xxxx"},
	// rps 2.5 has room for four, rpm 16.275 for two: rpm decides (18.275),
	// and the requests it denies count in neither zone.
	{2 * time.Second, "127.0.0.1", "oo" + "xxxxxx"},
	// rps 4.5-1=3.5 has room, rpm 18.225 none.
	{500 * time.Millisecond, "127.0.0.1", "xxx"},
	// A whitelisted client: never limited.
	{0, "127.0.0.2", strings.Repeat("o", 25)},
	// Another client: a bucket of its own.
	{0, "127.0.0.3", "ooooooo" + "xxx"},
}

// TestIngressNginxDecidesAsLimitReq runs one real nginx with two servers
// for the Ingress of testdata/ingress-shop.yaml: one with limit_req_zone
// and limit_req as ingress-nginx writes them from its annotations, the
// other with the auth-url the converter proposes (rendered as
// ingress-nginx renders auth-url) in front of `manager local` serving the
// converted policy on a real redis-server. Each request of every step
// goes to one server, then at once to the other, from the same client
// address: the answers must be the same, step by step, and nginx's must
// be what limit_req's arithmetic says.
func TestIngressNginxDecidesAsLimitReq(t *testing.T) {
	src := filepath.Join("testdata", "ingress-shop.yaml")
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var ing networkingv1.Ingress
	if err := yaml.Unmarshal(raw, &ing); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := convertIngress(t, nil, src)
	if code != 0 {
		t.Fatalf("manager convert: exit status %d:\n%s", code, stderr)
	}
	t.Logf("converted:\n%s", out)
	authURL := regexp.MustCompile(`'nginx\.ingress\.kubernetes\.io/auth-url=([^']+)'`).FindSubmatch(out)
	if authURL == nil {
		t.Fatalf("no auth-url in the converter's comment:\n%s", out)
	}

	dir := t.TempDir()
	policies := filepath.Join(dir, "policies")
	if err := os.MkdirAll(policies, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(policies, "shop.yaml"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	redis := redistest.Start(t)
	checkAddr := freeAddr(t)
	sluice := systest.Start(t, dir, "manager", nil, manager.Path(t), "local", "--policies", policies,
		"--listen", checkAddr, "--redis-url", "redis://"+redis.Addr())
	sluice.WaitHTTP(t, "http://"+checkAddr+"/healthz", 60*time.Second)
	waitPolicy(t, checkAddr, ing.Namespace, ing.Name)

	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello from upstream\n")
	}))
	t.Cleanup(app.Close)
	upstream := strings.TrimPrefix(app.URL, "http://")

	nativePort, sluicePort := systest.FreePort(t), systest.FreePort(t)
	conf := nginxHTTP(t, &ing, nativePort, sluicePort, upstream, checkAddr,
		strings.Replace(string(authURL[1]), "http://sluice-check.sluice-system.svc.cluster.local:8080", "http://"+checkAddr, 1))
	nginxtest.Start(t, dir, conf, nativePort, sluicePort)

	clients := map[string]*http.Client{}
	for _, st := range limitSteps {
		if clients[st.client] == nil {
			clients[st.client] = clientFrom(t, st.client)
		}
	}
	host := ing.Spec.Rules[0].Host
	native := fmt.Sprintf("http://127.0.0.1:%d/api/items", nativePort)
	viaSluice := fmt.Sprintf("http://127.0.0.1:%d/api/items", sluicePort)
	var gotNginx, gotSluice []string
	for i, st := range limitSteps {
		time.Sleep(st.pause)
		c := clients[st.client]
		var a, b strings.Builder
		for range len(st.want) {
			a.WriteByte(answer(t, c, native, host, http.StatusServiceUnavailable))
			b.WriteByte(answer(t, c, viaSluice, host, http.StatusForbidden))
		}
		gotNginx, gotSluice = append(gotNginx, a.String()), append(gotSluice, b.String())
		if a.String() != b.String() {
			t.Errorf("step %d (%s after %s): nginx's limit_req answered %s, Sluice %s", i+1, st.client, st.pause, a.String(), b.String())
		}
		if a.String() != st.want {
			t.Errorf("step %d (%s after %s): nginx's limit_req answered %s, where its arithmetic says %s (a step delayed by more than 250 ms?)", i+1, st.client, st.pause, a.String(), st.want)
		}
	}
	t.Logf("nginx limit_req: %s", strings.Join(gotNginx, " "))
	t.Logf("Sluice:          %s", strings.Join(gotSluice, " "))
}

// waitPolicy waits until the check endpoint has the policy in force
// (asked in dry run for a client no step uses).
func waitPolicy(t *testing.T, addr, namespace, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		body := fmt.Sprintf(`{"namespace":%q,"policy":%q,"dryRun":true,"request":{"method":"GET","host":"shop.example.com","path":"/api/x","clientIP":"127.0.0.99"}}`, namespace, name)
		resp, err := http.Post("http://"+addr+"/v1/check", "application/json", strings.NewReader(body))
		if err == nil {
			var r webhook.CheckResponse
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if yaml.Unmarshal(b, &r) == nil && len(r.Policies) == 1 {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("policy %s/%s not in force after 30s", namespace, name)
}

// clientFrom is an HTTP client whose connections come from the loopback
// address ip, nginx's $remote_addr.
func clientFrom(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	tr := &http.Transport{
		DialContext:         d.DialContext,
		MaxIdleConnsPerHost: 4,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// answer sends one request and says 'o' for 200, 'x' for the denial
// status, and fails t for anything else.
func answer(t *testing.T, c *http.Client, url, host string, deny int) byte {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return 'o'
	case deny:
		return 'x'
	}
	t.Fatalf("%s: status %d", url, resp.StatusCode)
	return '?'
}

// nginxHTTP is the nginx configuration's http block. The first server is
// ingress-nginx's rendering of the Ingress's rate limits (nginx.tmpl's
// geo, map and limit_req_zone lines, buildRateLimit's limit_req lines in
// each location, limit_req_status from the ConfigMap's default), the
// second its rendering of auth-url (nginxtest's, as test/e2e's). Both have
// ingress-nginx's locations for the Ingress's Prefix paths.
func nginxHTTP(t *testing.T, ing *networkingv1.Ingress, nativePort, sluicePort int, upstream, checkAddr, authURL string) string {
	t.Helper()
	ann := func(name string) string { return ing.Annotations["nginx.ingress.kubernetes.io/"+name] }
	num := func(name string, def int) int {
		n, err := strconv.Atoi(ann(name))
		if err != nil {
			return def
		}
		return n
	}
	mult := num("limit-burst-multiplier", 5)
	rps, rpm := num("limit-rps", 0), num("limit-rpm", 0)
	id := "c2hvcF9zaG9w" // base64 of the zone name, as ingress-nginx's ID
	zone := ing.Namespace + "_" + ing.Name + "_uid"
	var limits []string
	var b strings.Builder
	fmt.Fprintf(&b, `	limit_req_status 503;

	geo $remote_addr $whitelist_%[1]s {
		default 0;
`, id)
	for _, cidr := range strings.Split(ann("limit-whitelist"), ",") {
		if cidr = strings.TrimSpace(cidr); cidr != "" {
			fmt.Fprintf(&b, "\t\t%s 1;\n", cidr)
		}
	}
	fmt.Fprintf(&b, "\t}\n\tmap $whitelist_%[1]s $limit_%[1]s {\n\t\t0 $binary_remote_addr;\n\t\t1 \"\";\n\t}\n", id)
	if rpm > 0 {
		fmt.Fprintf(&b, "\tlimit_req_zone $limit_%s zone=%s_rpm:5m rate=%dr/m;\n", id, zone, rpm)
	}
	if rps > 0 {
		fmt.Fprintf(&b, "\tlimit_req_zone $limit_%s zone=%s_rps:5m rate=%dr/s;\n", id, zone, rps)
		limits = append(limits, fmt.Sprintf("limit_req zone=%s_rps burst=%d nodelay;", zone, rps*mult))
	}
	if rpm > 0 {
		limits = append(limits, fmt.Sprintf("limit_req zone=%s_rpm burst=%d nodelay;", zone, rpm*mult))
	}

	var locations []string
	for _, r := range ing.Spec.Rules {
		for _, p := range r.HTTP.Paths {
			if p.PathType == nil || *p.PathType != networkingv1.PathTypePrefix || p.Path == "/" || strings.HasSuffix(p.Path, "/") {
				t.Fatalf("the test renders Prefix paths like /api only, not %q", p.Path)
			}
			locations = append(locations, p.Path+"/", "= "+p.Path)
		}
	}
	host := ing.Spec.Rules[0].Host
	fmt.Fprintf(&b, "\n\tserver {\n\t\tlisten 127.0.0.1:%d;\n\t\tserver_name %s;\n", nativePort, host)
	for _, l := range locations {
		fmt.Fprintf(&b, "\t\tlocation %s {\n\t\t\t%s\n\t\t\tproxy_pass http://%s;\n\t\t}\n", l, strings.Join(limits, "\n\t\t\t"), upstream)
	}
	fmt.Fprintf(&b, `	}

	server {
		listen 127.0.0.1:%d;
		server_name %s;

`, sluicePort, host)
	b.WriteString(nginxtest.AuthLocation(checkAddr, authURL))
	for _, l := range locations {
		fmt.Fprintf(&b, "\t\tlocation %s {\n\t\t\tset $namespace %q;\n\t\t\tauth_request %s;\n\t\t\tproxy_pass http://%s;\n\t\t}\n", l, ing.Namespace, nginxtest.AuthPath, upstream)
	}
	b.WriteString("\t}\n")
	if !slices.Contains(strings.Fields(b.String()), "nodelay;") {
		t.Fatal("no limit_req rendered")
	}
	return b.String()
}
