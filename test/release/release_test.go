// Package release tests what a release ships and how it is made: the
// installer manifest (hack/build-installer.sh, `make build-installer`), the
// version a build stamps into the binary and its /metrics, the image
// (`make image`, `make image-push`), the Helm chart (charts/sluice) and
// `make release`, with crane and helm as `make release-tools` builds them.
package release

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
)

func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err == io.EOF {
			return objs
		} else if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

func key(u *unstructured.Unstructured) string {
	return u.GetAPIVersion() + "/" + u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
}

// images lists every container image of a workload's pod template.
func images(t *testing.T, u *unstructured.Unstructured) []string {
	t.Helper()
	var out []string
	for _, field := range []string{"containers", "initContainers"} {
		cs, _, err := unstructured.NestedSlice(u.Object, "spec", "template", "spec", field)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if img, ok := c.(map[string]any)["image"].(string); ok {
				out = append(out, img)
			}
		}
	}
	return out
}

func TestInstallerPinsTheImage(t *testing.T) {
	root := kubetest.RepoRoot(t)
	kubetest.TrackFiles(t, filepath.Join(root, "config"), filepath.Join(root, "hack", "build-installer.sh"))
	const img = "registry.example/sluice@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	out := filepath.Join(t.TempDir(), "install.yaml")
	cmd := exec.Command(filepath.Join(root, "hack", "build-installer.sh"))
	cmd.Env = append(os.Environ(), "IMG="+img, "KUBECTL="+filepath.Join(kubetest.Assets(t), "kubectl"), "OUT="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build-installer: %v\n%s", err, b)
	}
	installer, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(installer, []byte(":latest")) {
		t.Errorf("install.yaml names a :latest image")
	}
	def, err := kubetest.Kustomize(t, filepath.Join(root, "config", "default"))
	if err != nil {
		t.Fatal(err)
	}
	// Everything config/default installs but the Redis Secrets, which the
	// user creates once: a new release's installer must not reset them.
	want := map[string]bool{}
	for _, u := range decode(t, def) {
		if u.GetKind() == "Secret" {
			continue
		}
		want[key(u)] = true
	}
	got := map[string]bool{}
	workloads := 0
	for _, u := range decode(t, installer) {
		got[key(u)] = true
		if imgs := images(t, u); len(imgs) > 0 {
			workloads++
			for _, i := range imgs {
				if i != img {
					t.Errorf("%s runs image %s, want %s", key(u), i, img)
				}
			}
		}
	}
	for k := range want {
		if !got[k] {
			t.Errorf("install.yaml lacks %s, which config/default installs", k)
		}
	}
	for k := range got {
		if !want[k] {
			t.Errorf("install.yaml holds %s, which config/default does not install", k)
		}
	}
	if workloads != 2 {
		t.Errorf("install.yaml has %d workloads with containers, want 2 (controller and check Deployments)", workloads)
	}
}

// The installer applied as the README says: server-side apply to an empty
// cluster, then the two Redis Secrets; applying it again (an upgrade)
// leaves the Secrets alone.
func TestInstallerAppliesToAPIServer(t *testing.T) {
	root := kubetest.RepoRoot(t)
	kubetest.TrackFiles(t, filepath.Join(root, "config"), filepath.Join(root, "hack", "build-installer.sh"))
	const img = "registry.example/sluice@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	out := filepath.Join(t.TempDir(), "install.yaml")
	run(t, root, []string{"IMG=" + img, "KUBECTL=" + filepath.Join(kubetest.Assets(t), "kubectl"), "OUT=" + out}, time.Minute,
		filepath.Join(root, "hack", "build-installer.sh"))
	c := kubetest.Start(t, kubetest.Options{})
	applied := c.MustKubectl("apply", "--server-side", "-f", out)
	t.Logf("kubectl apply --server-side -f install.yaml:\n%s", applied)
	if strings.Contains(applied, "Warning") {
		t.Errorf("the API server warned:\n%s", applied)
	}
	for _, component := range []string{"check", "controller"} {
		c.MustKubectl("-n", "sluice-system", "create", "secret", "generic", "sluice-redis-"+component,
			"--from-literal=url=redis://redis.example:6379/0", "--from-literal=username=sluice-"+component, "--from-literal=password=secret-"+component)
	}
	again := c.MustKubectl("apply", "--server-side", "-f", out)
	if strings.Contains(again, "secret/") {
		t.Errorf("applying install.yaml again touched a Secret:\n%s", again)
	}
	for _, component := range []string{"check", "controller"} {
		pw := c.MustKubectl("-n", "sluice-system", "get", "secret", "sluice-redis-"+component, "-o", "jsonpath={.data.password}")
		if pw != base64.StdEncoding.EncodeToString([]byte("secret-"+component)) {
			t.Errorf("Secret sluice-redis-%s lost its password after the second apply", component)
		}
		image := c.MustKubectl("-n", "sluice-system", "get", "deployment", "sluice-"+component, "-o", "jsonpath={.spec.template.spec.containers[0].image}")
		if image != img {
			t.Errorf("Deployment sluice-%s runs %s, want %s", component, image, img)
		}
	}
	c.MustKubectl("-n", "sluice-system", "get", "networkpolicy", "sluice-check", "sluice-controller")
	if ns := c.MustKubectl("get", "namespace", "sluice-system", "-o", "jsonpath={.metadata.labels.pod-security\\.kubernetes\\.io/enforce}"); ns != "restricted" {
		t.Errorf("namespace sluice-system enforces Pod Security %q, want restricted", ns)
	}
	if can, _ := c.Kubectl("auth", "can-i", "get", "secrets", "-n", "sluice-system", "--as=system:serviceaccount:sluice-system:sluice-controller"); strings.TrimSpace(can) != "no" {
		t.Errorf("the controller may read Secrets: %q", can)
	}
	if can, _ := c.Kubectl("auth", "can-i", "list", "ratelimitpolicies.ratelimit.sluice.dev", "-A", "--as=system:serviceaccount:sluice-system:sluice-check"); strings.TrimSpace(can) != "no" {
		t.Errorf("the check endpoint's ServiceAccount may list policies: %q", can)
	}
}

func TestInstallerRefusesABadDigest(t *testing.T) {
	root := kubetest.RepoRoot(t)
	cmd := exec.Command(filepath.Join(root, "hack", "build-installer.sh"))
	cmd.Env = append(os.Environ(), "IMG=registry.example/sluice@sha256:beef", "KUBECTL="+filepath.Join(kubetest.Assets(t), "kubectl"),
		"OUT="+filepath.Join(t.TempDir(), "install.yaml"))
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "64 hex digits") {
		t.Fatalf("build-installer with a short digest: err %v, output:\n%s", err, b)
	}
}

const (
	stampVersion  = "v9.8.7-3-gabcdef0-dirty"
	stampRevision = "abcdef0123456789abcdef0123456789abcdef01"
)

// buildStamped builds the manager with the ldflags `make build` uses.
func buildStamped(t *testing.T) string {
	t.Helper()
	root := kubetest.RepoRoot(t)
	bin := filepath.Join(t.TempDir(), "manager")
	pkg := "github.com/sluice-dev/sluice/internal/buildinfo"
	cmd := exec.Command("go", "build", "-ldflags", "-X "+pkg+".Version="+stampVersion+" -X "+pkg+".Revision="+stampRevision, "-o", bin, "./cmd/manager")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return bin
}

func TestVersionIsStamped(t *testing.T) {
	bin := buildStamped(t)
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("manager version: %v\n%s", err, out)
	}
	want := fmt.Sprintf("sluice %s\ncommit %s\ngo %s\nredis library %s\n", stampVersion, stampRevision, runtime.Version(), redisstore.LibraryName)
	if string(out) != want {
		t.Errorf("manager version printed:\n%s\nwant:\n%s", out, want)
	}

	// manager local serves the same values as sluice_build_info.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	root := kubetest.RepoRoot(t)
	ctx, cancel := context.WithCancel(context.Background())
	var logs bytes.Buffer
	local := exec.CommandContext(ctx, bin, "local", "--policies", filepath.Join(root, "config", "samples"), "--listen", addr)
	local.Stdout, local.Stderr = &logs, &logs
	if err := local.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = local.Wait() })
	metric := fmt.Sprintf(`sluice_build_info{goversion=%q,library=%q,revision=%q,version=%q} 1`,
		runtime.Version(), redisstore.LibraryName, stampRevision, stampVersion)
	var body string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if body = string(b); resp.StatusCode == http.StatusOK {
			break
		}
	}
	if !strings.Contains(body, metric) {
		t.Errorf("/metrics of manager local lacks\n%s\ngot:\n%s\nlog:\n%s", metric, body, logs.String())
	}
}
