package cluster

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// installFromInstaller installs the release as the README says: the
// installer applied, the two Redis Secrets created; then every sample and
// a Gateway API route with policies attached, each Ready and in force at
// every check pod (waitReady), and enforced through the check Service.
func installFromInstaller(t *testing.T, c *cluster) {
	r := c.releases[version1]
	// The Gateway API's CRDs first, from the module the project builds
	// against: the controller looks for them when it starts.
	gw, err := run(c.root, nil, 5*time.Minute, "go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api")
	if err != nil {
		t.Fatal(err)
	}
	c.kubectl(t, "apply", "--server-side", "-f", filepath.Join(strings.TrimSpace(gw), "config", "crd", "standard"))
	c.kubectl(t, "wait", "--for=condition=Established", "crd/httproutes.gateway.networking.k8s.io", "--timeout=60s")

	start := time.Now()
	// What `make cluster-deploy` runs: the image imported, the installer
	// applied, the Redis Secrets created, both Deployments waited for.
	if err := c.script(10*time.Minute, "deploy.sh", "LAYOUT="+r.layout, "INSTALLER="+r.installer); err != nil {
		t.Fatal(err)
	}
	leaderTook := waitFor(t, "a controller holds the Lease", time.Minute, func() (bool, string) {
		l := c.leader(t)
		return l != "", "no holder"
	})
	t.Logf("installed in %s (both Deployments Ready; leader %s, Lease taken %s after they were)",
		time.Since(start).Round(100*time.Millisecond), c.leader(t), leaderTook.Round(100*time.Millisecond))
	for _, pod := range append(c.pods(t, "controller"), c.pods(t, "check")...) {
		if img := c.jsonpath(t, "{.spec.containers[0].image}", "-n", "sluice-system", "get", "pod", pod); img != r.image {
			t.Errorf("pod %s runs %s, want the installer's %s", pod, img, r.image)
		}
	}

	c.kubectl(t, "apply", "-k", filepath.Join(c.root, "config", "samples"))
	c.kubectl(t, "create", "namespace", "shop")
	examples := filepath.Join(c.root, "config", "examples", "gateway-api")
	c.kubectl(t, "apply", "-f", filepath.Join(examples, "route.yaml"), "-f", filepath.Join(examples, "policy.yaml"))
	want := map[string]bool{}
	for _, ns := range []string{"default", "shop"} {
		for _, name := range strings.Fields(c.jsonpath(t, "{.items[*].metadata.name}", "-n", ns, "get", "ratelimitpolicies")) {
			c.waitReady(t, ns, name)
			want[ns+"/"+name] = true
		}
	}
	samples, _ := filepath.Glob(filepath.Join(c.root, "config", "samples", "*.yaml"))
	if len(want) < len(samples) { // kustomization.yaml and one policy per other file, at least
		t.Fatalf("%d policies Ready, want at least one per sample file (%d)", len(want), len(samples)-1)
	}

	service := c.checkService(t)
	// Enforced through the Service: a sample (10 per client, then denied)
	// and the policy attached to the route (20 a minute per client).
	expectDecisions(t, "http://"+service+":8080/check/default", "http://localhost/api/items", "192.0.2.10", 10)
	expectDecisions(t, "http://"+service+":8080/check/shop", "http://shop.example.com/api/items", "192.0.2.11", 20)

	// Exactly the shipped RBAC: the controller was never refused anything.
	if logs := c.logs(t, "controller"); strings.Contains(strings.ToLower(logs), "forbidden") {
		t.Errorf("the controller was refused something by the API server:\n%s", grepLines(logs, "forbidden"))
	}
}

// policiesInForce asks a check process's dashboard state which policies
// it enforces (namespace/name).
func policiesInForce(base string) (map[string]bool, error) {
	resp, err := http.Get(base + "/api/dashboard/state")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var state struct {
		Policies []struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
			InForce   bool   `json:"inForce"`
		} `json:"policies"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&state); err != nil {
		return nil, fmt.Errorf("state: %d %w", resp.StatusCode, err)
	}
	in := map[string]bool{}
	for _, p := range state.Policies {
		if p.InForce {
			in[p.Namespace+"/"+p.Name] = true
		}
	}
	return in, nil
}

// expectDecisions asks the auth-url route for the original request url as
// from client, limit times allowed and then denied, with its headers.
func expectDecisions(t *testing.T, check, url, client string, limit int) {
	t.Helper()
	var codes []int
	var denial http.Header
	for range limit + 2 {
		resp := askCheck(t, check, url, client)
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode != http.StatusOK && denial == nil {
			denial = resp.Header
		}
	}
	for i, code := range codes {
		if want := map[bool]int{true: http.StatusOK, false: http.StatusForbidden}[i < limit]; code != want {
			t.Fatalf("%s for %s: statuses %v, want %d times 200, then 403", check, url, codes, limit)
		}
	}
	for _, h := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
		if denial.Get(h) == "" {
			t.Errorf("%s for %s: the denial lacks %s (%v)", check, url, h, denial)
		}
	}
}

// askCheck sends one auth-url check (the original request url, as from
// client) and returns the answer, its body read.
func askCheck(t testing.TB, check, url, client string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, check, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Original-URL", url)
	req.Header.Set("X-Original-Method", http.MethodGet)
	req.Header.Set("X-Real-IP", client)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func grepLines(text, word string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(strings.ToLower(line), word) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// readFile is os.ReadFile that fails t.
func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
