package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cluster is the node hack/cluster/up.sh started, driven the way a user
// drives one: kubectl with the admin kubeconfig, ctr for what only the
// node knows (images, container processes).
type cluster struct {
	root       string
	dir        string // the node's state folder (K)
	assets     string // bin/k8s/<version>
	kubeconfig string
	releases   map[string]release
}

// release is what `make image`, `make build-installer` and `make chart`
// wrote for one version.
type release struct {
	version   string
	layout    string // the OCI image layout
	image     string // repository@sha256:digest, as the installer pins it
	installer string // dist/install.yaml
	chart     string // the packaged chart
}

func newCluster(root, dir string) *cluster {
	return &cluster{
		root:       root,
		dir:        dir,
		assets:     filepath.Join(root, "bin", "k8s", k8sVersion(root)),
		kubeconfig: filepath.Join(dir, "kubeconfig"),
		releases:   map[string]release{},
	}
}

// k8sVersion is the Makefile's K8S_VERSION, so the test runs the binaries
// make built.
func k8sVersion(root string) string {
	b, _ := os.ReadFile(filepath.Join(root, "Makefile"))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "K8S_VERSION ?= "); ok {
			return strings.TrimSpace(v)
		}
	}
	return "1.37.2"
}

func (c *cluster) env() []string {
	return []string{"K=" + c.dir, "ASSETS=" + c.assets, "KUBECONFIG=" + c.kubeconfig}
}

// script runs hack/cluster/<name> for this node.
func (c *cluster) script(timeout time.Duration, name string, env ...string) error {
	_, err := run(c.root, append(c.env(), env...), timeout, filepath.Join(c.root, "hack", "cluster", name))
	return err
}

// buildArtifacts builds each version's release artifacts with the
// project's own targets, into the node's folder.
func (c *cluster) buildArtifacts() error {
	for _, v := range []string{version1, version2} {
		dir := filepath.Join(c.dir, "releases", v)
		r := release{version: v, layout: filepath.Join(dir, "image"), installer: filepath.Join(dir, "install.yaml"),
			chart: filepath.Join(dir, "sluice-"+strings.TrimPrefix(v, "v")+".tgz")}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		vars := []string{"--no-print-directory", "VERSION=" + v, "IMAGE_LAYOUT=" + r.layout, "DIST=" + dir,
			"PLATFORMS=linux/" + runtime.GOARCH, "IMG=" + imageRepo + ":" + v}
		for _, target := range []string{"image", "build-installer", "chart"} {
			if _, err := run(c.root, nil, 20*time.Minute, "make", append([]string{target}, vars...)...); err != nil {
				return err
			}
		}
		var index struct {
			Manifests []struct{ Digest string } `json:"manifests"`
		}
		b, err := os.ReadFile(filepath.Join(r.layout, "index.json"))
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, &index); err != nil || len(index.Manifests) != 1 {
			return fmt.Errorf("%s/index.json: want one index entry (%v)", r.layout, err)
		}
		r.image = imageRepo + "@" + index.Manifests[0].Digest
		installer, err := os.ReadFile(r.installer)
		if err != nil {
			return err
		}
		if !strings.Contains(string(installer), "image: "+r.image) {
			return fmt.Errorf("%s does not pin %s", r.installer, r.image)
		}
		c.releases[v] = r
	}
	if c.releases[version1].image == c.releases[version2].image {
		return fmt.Errorf("versions %s and %s built the same image", version1, version2)
	}
	return nil
}

// importImage puts a release's image into the node's containerd under the
// reference its installer and chart pin: nothing is pulled here.
func (c *cluster) importImage(t testing.TB, v string) {
	t.Helper()
	r := c.releases[v]
	if _, err := run(c.root, c.env(), 5*time.Minute, filepath.Join(c.root, "hack", "cluster", "import-image.sh"), r.layout, r.image); err != nil {
		t.Fatal(err)
	}
}

// kubectlErr runs kubectl as the admin.
func (c *cluster) kubectlErr(args ...string) (string, error) {
	return run(c.root, []string{"KUBECONFIG=" + c.kubeconfig}, 5*time.Minute, filepath.Join(c.assets, "kubectl"), args...)
}

// kubectl runs kubectl as the admin, failing t on an error.
func (c *cluster) kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.kubectlErr(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// applyYAML applies manifests given as text.
func (c *cluster) applyYAML(t testing.TB, yaml string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "objects.yaml")
	if err := os.WriteFile(f, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	c.kubectl(t, "apply", "-f", f)
}

// jsonpath reads one field of an object.
func (c *cluster) jsonpath(t testing.TB, path string, args ...string) string {
	t.Helper()
	return c.kubectl(t, append(args, "-o", "jsonpath="+path)...)
}

// checkService is the check Service's ClusterIP, which kube-proxy
// translates to a Ready check pod, from the host as from a pod.
func (c *cluster) checkService(t testing.TB) string {
	t.Helper()
	return c.jsonpath(t, "{.spec.clusterIP}", "-n", "sluice-system", "get", "service", "sluice-check")
}

// redisPassword is the password up.sh gave a Redis user.
func (c *cluster) redisPassword(t testing.TB, user string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "redis", "passwords"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, user+"="); ok {
			return p
		}
	}
	t.Fatalf("no password for %s", user)
	return ""
}

// The node's fixed addresses (hack/cluster/lib.sh).
const (
	nodeIP    = "10.88.0.1"
	redisPort = 16379
)

// waitFor polls cond every 200 ms until it holds, failing t after timeout
// with what cond said last.
func waitFor(t testing.TB, what string, timeout time.Duration, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ok, last := cond()
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %s; last: %s", what, timeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// rollout waits until a Deployment has rolled out completely.
func (c *cluster) rollout(t testing.TB, namespace, name string) {
	t.Helper()
	c.kubectl(t, "-n", namespace, "rollout", "status", "deployment/"+name, "--timeout=240s")
}

// leader is the controller replica holding the leader-election Lease.
func (c *cluster) leader(t testing.TB) string {
	t.Helper()
	out, _ := c.kubectlErr("-n", "sluice-system", "get", "lease", "sluice-controller.ratelimit.sluice.dev", "-o", "jsonpath={.spec.holderIdentity}")
	pod, _, _ := strings.Cut(out, "_")
	return pod
}

// waitReady waits for a RateLimitPolicy's Ready condition, and then until
// every check pod enforces it: each follows the policy table on its own,
// a moment after the controller wrote it.
func (c *cluster) waitReady(t testing.TB, namespace, name string) {
	t.Helper()
	c.kubectl(t, "-n", namespace, "wait", "--for=condition=Ready", "ratelimitpolicy/"+name, "--timeout=120s")
	for _, pod := range c.pods(t, "check") {
		ip := c.jsonpath(t, "{.status.podIP}", "-n", "sluice-system", "get", "pod", pod)
		waitFor(t, fmt.Sprintf("%s/%s in force at %s", namespace, name, pod), time.Minute, func() (bool, string) {
			inForce, err := policiesInForce("http://" + ip + ":8080")
			if err != nil {
				return false, err.Error()
			}
			return inForce[namespace+"/"+name], "not in force"
		})
	}
}

// pods lists the running pods of a component (check or controller), but
// those being deleted.
func (c *cluster) pods(t testing.TB, component string) []string {
	t.Helper()
	out := c.jsonpath(t, "{range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}{'\\n'}{end}", "-n", "sluice-system", "get", "pods",
		"-l", "app.kubernetes.io/name=sluice,app.kubernetes.io/component="+component, "--field-selector=status.phase=Running")
	var pods []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 1 {
			pods = append(pods, f[0])
		}
	}
	return pods
}

// containerPID is the host's process id of a pod's first container, from
// its containerd task.
func (c *cluster) containerPID(t testing.TB, pod string) int {
	t.Helper()
	id := c.jsonpath(t, "{.status.containerStatuses[0].containerID}", "-n", "sluice-system", "get", "pod", pod)
	id = strings.TrimPrefix(id, "containerd://")
	out, err := run(c.root, nil, time.Minute, "ctr", "-a", "/run/sluice-node/containerd.sock", "-n", "k8s.io", "task", "ls")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == id {
			pid, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
	}
	t.Fatalf("pod %s: container %s has no task in containerd:\n%s", pod, id, out)
	return 0
}

// logs is what every container of a component has logged.
func (c *cluster) logs(t testing.TB, component string) string {
	t.Helper()
	return c.kubectl(t, "-n", "sluice-system", "logs", "-l", "app.kubernetes.io/name=sluice,app.kubernetes.io/component="+component,
		"--tail=-1", "--prefix")
}
