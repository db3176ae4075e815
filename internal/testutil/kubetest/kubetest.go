// Package kubetest starts a real kube-apiserver and etcd (through
// internal/testutil/envtest) for tests that drive it the way a person does:
// with kubectl and kubeconfig files. It fails the test, never skips it,
// when the envtest binaries are missing.
package kubetest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/sluice-dev/sluice/internal/testutil/envtest"
)

// Cluster is a running API server with an admin kubeconfig.
type Cluster struct {
	t   testing.TB
	env *envtest.Environment
	// Config is the admin's REST config (group system:masters).
	Config *rest.Config
	// Kubeconfig is the path of the admin's kubeconfig file.
	Kubeconfig string
	kubectl    string
}

// Options configure Start.
type Options struct {
	// CRDDirs are installed before Start returns (none: the test applies
	// its CRDs itself, as a person would).
	CRDDirs []string
	// APIServerFlags are kube-apiserver flags beyond envtest's, without
	// their dashes.
	APIServerFlags map[string]string
}

// Assets returns KUBEBUILDER_ASSETS, or fails t with what to run.
func Assets(t testing.TB) string {
	t.Helper()
	dir, err := envtest.Assets()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// RepoRoot is the directory of the module's go.mod, found upwards from the
// test's working directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := envtest.RepoRoot()
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	return dir
}

// Start runs an API server until t ends and writes the admin kubeconfig
// into t's temporary directory.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	env, err := envtest.Start(envtest.Options{CRDDirs: o.CRDDirs, APIServerFlags: o.APIServerFlags})
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("kubetest: stop envtest: %v", err)
		}
	})
	c := &Cluster{t: t, env: env, Config: env.Config, kubectl: filepath.Join(env.Assets, "kubectl")}
	c.Kubeconfig = c.UserKubeconfig("admin", "system:masters")
	return c
}

// UserKubeconfig provisions a user with a client certificate and returns
// the path of its kubeconfig. A user named
// system:serviceaccount:<ns>:<name> in the groups system:serviceaccounts
// and system:serviceaccounts:<ns> is what RBAC sees for that ServiceAccount,
// so bindings to the ServiceAccount apply to it.
func (c *Cluster) UserKubeconfig(name string, groups ...string) string {
	c.t.Helper()
	file := filepath.Join(c.t.TempDir(), strings.NewReplacer(":", "_", "/", "_").Replace(name)+".kubeconfig")
	if err := c.env.WriteKubeconfig(file, name, groups...); err != nil {
		c.t.Fatalf("kubetest: %v", err)
	}
	return file
}

// ServiceAccountKubeconfig is UserKubeconfig for the identity of a
// ServiceAccount.
func (c *Cluster) ServiceAccountKubeconfig(namespace, name string) string {
	c.t.Helper()
	return c.UserKubeconfig("system:serviceaccount:"+namespace+":"+name,
		"system:serviceaccounts", "system:serviceaccounts:"+namespace)
}

// KubectlPath is the kubectl built with the envtest binaries.
func (c *Cluster) KubectlPath() string { return c.kubectl }

// Kubectl runs kubectl as the admin with a one-minute deadline and returns
// its standard output; on failure the error holds standard error.
func (c *Cluster) Kubectl(args ...string) (string, error) {
	return c.KubectlStdin(nil, args...)
}

// KubectlStdin is Kubectl with standard input (for `-f -`).
func (c *Cluster) KubectlStdin(stdin []byte, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.kubectl, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w\n%s%s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}

// MustKubectl is Kubectl that fails t on error.
func (c *Cluster) MustKubectl(args ...string) string {
	c.t.Helper()
	out, err := c.Kubectl(args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// Kustomize renders a kustomization with `kubectl kustomize`, as
// `kubectl apply -k` does.
func Kustomize(t testing.TB, dir string) ([]byte, error) {
	t.Helper()
	kubectl := filepath.Join(Assets(t), "kubectl")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, kubectl, "kustomize", dir)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("kubectl kustomize %s: %w\n%s", dir, err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// TrackFiles opens every file under the given paths (files or
// directories), so that `go test` counts them as inputs of the test and
// reruns it when one changes. Tests that hand files to other programs
// (kubectl -k, go build) need it: the test cache sees only what the test
// process itself opens.
func TrackFiles(t testing.TB, paths ...string) {
	t.Helper()
	for _, root := range paths {
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			return f.Close()
		})
		if err != nil {
			t.Fatalf("kubetest: track %s: %v", root, err)
		}
	}
}
