package cluster

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// helm runs the helm that release.mk pins (make release-tools builds it),
// against the node, with its caches in the test's folder.
func (c *cluster) helm(t testing.TB, args ...string) string {
	t.Helper()
	mk := readFile(t, filepath.Join(c.root, "release.mk"))
	m := regexp.MustCompile(`(?m)^HELM_VERSION \?= (\S+)$`).FindStringSubmatch(mk)
	if m == nil {
		t.Fatal("release.mk sets no HELM_VERSION")
	}
	bin := filepath.Join(c.root, "bin", "helm-"+m[1])
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s not found: run `make release-tools` (`make test` does)", bin)
	}
	home := filepath.Join(c.dir, "helm")
	env := []string{"KUBECONFIG=" + c.kubeconfig, "HELM_CACHE_HOME=" + home + "/cache", "HELM_CONFIG_HOME=" + home + "/config", "HELM_DATA_HOME=" + home + "/data"}
	out, err := run(c.root, env, 6*time.Minute, bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// helmLifecycle replaces the installer's installation by the chart's, as
// the README's Helm section does: helm install of the first version (both
// Deployments Ready, a policy enforced), helm upgrade to the second under
// steady load (no check fails), and helm uninstall, which leaves nothing
// but the CRD (and so the policies) and, in the namespace, the Lease the
// controller made, as documented.
func helmLifecycle(t *testing.T, c *cluster) {
	c.kubectl(t, "delete", "--wait", "--timeout=180s", "-f", c.releases[version1].installer)

	start := time.Now()
	c.kubectl(t, "create", "namespace", "sluice-system")
	c.kubectl(t, "label", "namespace", "sluice-system", "pod-security.kubernetes.io/enforce=restricted")
	values := []string{
		"--namespace", "sluice-system",
		"--set", "redis.url=redis://" + nodeIP + ":" + strconv.Itoa(redisPort) + "/0",
		"--set", "redis.check.password=" + c.redisPassword(t, "sluice-check"),
		"--set", "redis.controller.password=" + c.redisPassword(t, "sluice-controller"),
	}
	c.helm(t, append([]string{"install", "sluice", c.releases[version1].chart, "--wait", "--timeout", "5m"}, values...)...)
	c.rollout(t, "sluice-system", "sluice-controller")
	c.rollout(t, "sluice-system", "sluice-check")
	waitFor(t, "a controller holds the Lease", time.Minute, func() (bool, string) { return c.leader(t) != "", "no holder" })
	t.Logf("helm install: both Deployments Ready and a leader in %s", time.Since(start).Round(100*time.Millisecond))
	for _, pod := range c.pods(t, "check") {
		if img := c.jsonpath(t, "{.spec.containers[0].image}", "-n", "sluice-system", "get", "pod", pod); img != c.releases[version1].image {
			t.Errorf("pod %s runs %s, want the chart's %s", pod, img, c.releases[version1].image)
		}
	}
	// The installer's deletion took the CRD and every policy with it.
	c.kubectl(t, "apply", "-f", filepath.Join(c.root, "config", "samples", "tokenbucket-per-ip.yaml"))
	c.waitReady(t, "default", "api-per-ip")
	expectDecisions(t, "http://"+c.checkService(t)+":8080/check/default", "http://localhost/api/items", "192.0.2.40", 10)

	stop := steadyLoad(t, c)
	time.Sleep(3 * time.Second)
	upgrade := time.Now()
	c.helm(t, append([]string{"upgrade", "sluice", c.releases[version2].chart, "--wait", "--timeout", "5m"}, values...)...)
	c.rollout(t, "sluice-system", "sluice-check")
	upgraded := time.Since(upgrade)
	time.Sleep(3 * time.Second)
	viaNginx, d := stop()
	t.Logf("helm upgrade to %s in %s; through nginx: %s", version2, upgraded.Round(100*time.Millisecond), viaNginx)
	t.Logf("keep-alive clients of the check Service: %s", d)
	if n := viaNginx.failed.Load() + d.failed.Load(); n > 0 {
		t.Errorf("%d checks failed during helm upgrade", n)
	}
	for _, pod := range append(c.pods(t, "check"), c.pods(t, "controller")...) {
		if img := c.jsonpath(t, "{.spec.containers[0].image}", "-n", "sluice-system", "get", "pod", pod); img != c.releases[version2].image {
			t.Errorf("after helm upgrade pod %s runs %s, want %s", pod, img, c.releases[version2].image)
		}
	}

	c.helm(t, "uninstall", "sluice", "--namespace", "sluice-system", "--wait", "--timeout", "3m")
	// The pods go after their ReplicaSets, by garbage collection.
	waitFor(t, "the pods gone", 2*time.Minute, func() (bool, string) {
		out := c.kubectl(t, "get", "pods", "-n", "sluice-system", "-o", "name")
		return strings.TrimSpace(out) == "", out
	})
	left := c.kubectl(t, "get", "all,secrets,serviceaccounts,roles,rolebindings,leases,networkpolicies,poddisruptionbudgets,configmaps",
		"-n", "sluice-system", "-o", "name")
	var leftover []string
	for _, name := range strings.Fields(left) {
		switch name {
		case "configmap/kube-root-ca.crt", "serviceaccount/default": // every namespace's own
		case "lease.coordination.k8s.io/sluice-controller.ratelimit.sluice.dev":
			// The controller's leader-election record, which it made
			// itself (released, without holder): the README says it stays
			// with the namespace.
		default:
			leftover = append(leftover, name)
		}
	}
	if len(leftover) > 0 {
		t.Errorf("helm uninstall left in sluice-system: %v", leftover)
	}
	for _, kind := range []string{"clusterroles", "clusterrolebindings"} {
		if out := c.kubectl(t, "get", kind, "-o", "name"); strings.Contains(out, "sluice") {
			t.Errorf("helm uninstall left %s: %s", kind, grepLines(out, "sluice"))
		}
	}
	if _, err := c.kubectlErr("get", "crd", "ratelimitpolicies.ratelimit.sluice.dev"); err != nil {
		t.Errorf("the CRD went with helm uninstall (every policy with it): %v", err)
	}
	if _, err := c.kubectlErr("-n", "default", "get", "ratelimitpolicy", "api-per-ip"); err != nil {
		t.Errorf("a policy went with helm uninstall: %v", err)
	}
}
