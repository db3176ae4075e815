package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/sluicectl"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// adminBase is the admin API's group/version, served by the controller
// Deployment behind the APIService.
const adminBase = "/apis/admin.ratelimit.sluice.dev/v1alpha1"

// dayTwoThroughTheAPIServer uses the admin API the way a tenant does: with
// the credentials of a ServiceAccount of namespace shop (a token, as
// `kubectl create token` gives), through the API server, which
// authenticates the caller and proxies to the controller's aggregated
// API; the controller authorizes each call against the policy it touches.
// A caller with no role is refused, a viewer (the built-in view role)
// reads but may not reset, an editor (edit) resets, and the reset key is
// admitted again by the check Service.
func dayTwoThroughTheAPIServer(t *testing.T, c *cluster) {
	waitFor(t, "the admin APIService is Available", 2*time.Minute, func() (bool, string) {
		got, _ := c.kubectlErr("get", "apiservice", "v1alpha1.admin.ratelimit.sluice.dev", "-o", "jsonpath={.status.conditions[?(@.type=='Available')].status}")
		return got == "True", "Available=" + got
	})
	c.applyYAML(t, `apiVersion: v1
kind: ServiceAccount
metadata: {name: viewer, namespace: shop}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: editor, namespace: shop}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: nobody, namespace: shop}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: viewer-view, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects: [{kind: ServiceAccount, name: viewer, namespace: shop}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: editor-edit, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}
subjects: [{kind: ServiceAccount, name: editor, namespace: shop}]
`)
	users := map[string]string{}
	for _, sa := range []string{"viewer", "editor", "nobody"} {
		users[sa] = c.userKubeconfig(t, sa)
	}

	// A client uses up its minute of shop/api-per-client (20) through the
	// check Service.
	const client = "192.0.2.21"
	check := "http://" + c.checkService(t) + ":8080/check/shop"
	expectDecisions(t, check, "http://shop.example.com/api/items", client, 20)
	keys := adminBase + "/namespaces/shop/ratelimitpolicies/api-per-client/keys?key=" + client

	if out, err := c.asUser(users["nobody"], "get", "--raw", keys); err == nil || !strings.Contains(strings.ToLower(out+err.Error()), "forbidden") {
		t.Errorf("a ServiceAccount without a role inspected a key: %v %s", err, out)
	}
	// The viewer and the editor through kubectl sluice, with their
	// kubeconfigs as kubectl would use them.
	plugin := (&systest.Manager{Dir: c.dir}).Plugin(t)
	out, code := c.pluginAs(t, plugin, users["viewer"], "inspect", "shop/api-per-client", client, "-o", "json")
	var state struct {
		Limits []struct {
			Name      string `json:"name"`
			Limit     int64  `json:"limit"`
			Remaining int64  `json:"remaining"`
		} `json:"limits"`
	}
	if err := json.Unmarshal([]byte(out), &state); code != 0 || err != nil || len(state.Limits) != 1 || state.Limits[0].Remaining != 0 || state.Limits[0].Limit != 20 {
		t.Fatalf("the viewer's inspect of %s: exit %d, %s (%v); want its minute limit of 20 used up", client, code, out, err)
	}
	// The API server refuses the viewer's reset itself: view grants no
	// delete in the admin group.
	if out, code := c.pluginAs(t, plugin, users["viewer"], "reset", "shop/api-per-client", client); code != sluicectl.ExitForbidden ||
		!strings.Contains(out, `cannot delete resource "ratelimitpolicies/keys" in API group "admin.ratelimit.sluice.dev"`) || !strings.Contains(out, "sluice-admin-edit") {
		t.Errorf("the viewer's reset: exit %d, %s; want forbidden (%d) by the API server, naming the role", code, out, sluicectl.ExitForbidden)
	}
	// What kube-controller-manager aggregated into view and edit, as
	// `kubectl auth can-i --list` shows it: a viewer reads, an editor
	// also changes.
	for sa, want := range map[string]string{"viewer": "[get]", "editor": "[delete get]"} {
		out, err := c.asUser(users[sa], "auth", "can-i", "--list", "-n", "shop")
		if err != nil {
			t.Fatalf("kubectl auth can-i --list as %s: %v", sa, err)
		}
		if got := canIVerbs(out, "ratelimitpolicies.admin.ratelimit.sluice.dev/keys"); got != want {
			t.Errorf("kubectl auth can-i --list as %s: %s on ratelimitpolicies/keys of the admin group, want %s\n%s", sa, got, want, out)
		}
	}
	if code := askCheck(t, check, "http://shop.example.com/api/items", client).StatusCode; code != http.StatusForbidden {
		t.Fatalf("before the reset: %d, want the key still denied (403)", code)
	}
	if out, code := c.pluginAs(t, plugin, users["editor"], "reset", "shop/api-per-client", client); code != 0 {
		t.Fatalf("the editor's reset: exit %d, %s", code, out)
	}
	t.Logf("viewer: inspect exit 0 (%s: %d of %d left), reset exit %d; editor: reset exit 0", client, state.Limits[0].Remaining, state.Limits[0].Limit, sluicectl.ExitForbidden)
	took := waitFor(t, "the reset key is admitted by the check Service", 10*time.Second, func() (bool, string) {
		code := askCheck(t, check, "http://shop.example.com/api/items", client).StatusCode
		return code == http.StatusOK, fmt.Sprint(code)
	})
	t.Logf("the check Service admitted the reset key %s after the reset", took.Round(time.Millisecond))

	// An override by the editor, listed to the viewer, in force in the
	// check Service's answers within a second.
	if out, code := c.pluginAs(t, plugin, users["editor"], "override", "set", "shop/api-per-client", client, "minute=100", "--expires", "1h"); code != 0 {
		t.Fatalf("the editor's override: exit %d, %s", code, out)
	}
	if out, code := c.pluginAs(t, plugin, users["viewer"], "override", "list", "shop/api-per-client"); code != 0 || !strings.Contains(out, client) || !strings.Contains(out, "system:serviceaccount:shop:editor") {
		t.Errorf("the viewer's override list: exit %d, %s; want the editor's override of %s, set by it", code, out, client)
	}
	took = waitFor(t, "the check Service answers with the override's limit", 10*time.Second, func() (bool, string) {
		policy := askCheck(t, check, "http://shop.example.com/api/items", client).Header.Get("RateLimit-Policy")
		return strings.Contains(policy, "q=100"), policy
	})
	t.Logf("the check Service answered with the override's limit %s after it was set", took.Round(time.Millisecond))
}

// canIVerbs is the verbs `kubectl auth can-i --list` lists for resource
// sorted ("[delete get]"), "[]" when it lists none.
func canIVerbs(out, resource string) string {
	var verbs []string
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 4 && fields[0] == resource {
			verbs = append(verbs, strings.Fields(strings.Trim(strings.Join(fields[3:], " "), "[]"))...)
		}
	}
	slices.Sort(verbs)
	return "[" + strings.Join(slices.Compact(verbs), " ") + "]"
}

// pluginAs runs kubectl sluice with a user's kubeconfig and returns its
// output (both streams) and exit code.
func (c *cluster) pluginAs(t testing.TB, plugin, kubeconfig string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(plugin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	t.Fatalf("kubectl sluice %s: %v", strings.Join(args, " "), err)
	return "", 0
}

// userKubeconfig writes a kubeconfig for ServiceAccount sa of namespace
// shop: the node's API server and CA, and a token the API server issued.
func (c *cluster) userKubeconfig(t testing.TB, sa string) string {
	t.Helper()
	token := strings.TrimSpace(c.kubectl(t, "create", "token", sa, "-n", "shop", "--duration=1h"))
	server := c.kubectl(t, "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")
	ca := c.kubectl(t, "config", "view", "--minify", "--raw", "-o", "jsonpath={.clusters[0].cluster.certificate-authority}")
	path := filepath.Join(c.dir, "kubeconfig-"+sa)
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: node
  cluster: {server: %q, certificate-authority: %q}
users:
- name: %s
  user: {token: %q}
contexts:
- name: %s
  context: {cluster: node, user: %s, namespace: shop}
current-context: %s
`, server, ca, sa, token, sa, sa, sa)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// asUser runs kubectl with the kubeconfig of a user.
func (c *cluster) asUser(kubeconfig string, args ...string) (string, error) {
	return run(c.root, []string{"KUBECONFIG=" + kubeconfig}, time.Minute, filepath.Join(c.assets, "kubectl"), args...)
}
