// Package envtest starts a real kube-apiserver and etcd (controller-runtime's
// envtest) for every suite that needs an API server, and for
// hack/devcluster: one place that finds the binaries, installs the CRDs and
// runs the caller's setup hooks (start a manager, write a kubeconfig), as
// Cluster API's internal/test/envtest does. It finds the binaries through
// KUBEBUILDER_ASSETS (`make test` builds them into bin/k8s) and, when they
// are missing, says what to run.
package envtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sluice-dev/sluice/internal/app"
)

// Options configure Start.
type Options struct {
	// CRDDirs are installed before the setup hooks run (none: the caller
	// applies its CRDs itself, as a person would). CRDDir is Sluice's.
	CRDDirs []string
	// APIServerFlags are kube-apiserver flags beyond envtest's, without
	// their dashes (the front proxy's requestheader-* for an aggregated API).
	APIServerFlags map[string]string
	// Setup hooks run in order once the API server is up and the CRDs are
	// installed. An error stops the API server and is Start's error.
	Setup []func(*Environment) error
}

// Environment is a running API server.
type Environment struct {
	// Config is the admin's REST config (group system:masters).
	Config *rest.Config
	// Client is a direct (uncached) client for Config with Sluice's types.
	Client client.Client
	// Assets is the directory of kube-apiserver, etcd and kubectl.
	Assets string
	env    *crenvtest.Environment
}

// Assets returns KUBEBUILDER_ASSETS after checking that it holds the
// binaries, or an error that says what to run.
func Assets() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		return "", errors.New("KUBEBUILDER_ASSETS is not set: run `make test`, which builds kube-apiserver, etcd and kubectl into bin/k8s, " +
			"or set KUBEBUILDER_ASSETS=$PWD/bin/k8s/<version> after `make envtest`")
	}
	for _, name := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return "", fmt.Errorf("%s not found in KUBEBUILDER_ASSETS=%s: run `make envtest`", name, dir)
		}
	}
	return dir, nil
}

// RepoRoot is the directory of the module's go.mod, found upwards from the
// working directory (a test's is its package's folder).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// CRDDir is the folder of Sluice's generated CRDs, config/crd/bases.
func CRDDir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "config", "crd", "bases"), nil
}

// Start runs an API server, installs o.CRDDirs and runs o.Setup. The
// caller stops it with Stop.
func Start(o Options) (*Environment, error) {
	assets, err := Assets()
	if err != nil {
		return nil, err
	}
	env := &crenvtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     o.CRDDirs,
		ErrorIfCRDPathMissing: len(o.CRDDirs) > 0,
	}
	for flag, value := range o.APIServerFlags {
		env.ControlPlane.GetAPIServer().Configure().Set(flag, value)
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start envtest: %w", err)
	}
	e := &Environment{Config: cfg, Assets: assets, env: env}
	if e.Client, err = client.New(cfg, client.Options{Scheme: app.Scheme()}); err != nil {
		return nil, errors.Join(fmt.Errorf("client: %w", err), env.Stop())
	}
	for _, setup := range o.Setup {
		if err := setup(e); err != nil {
			return nil, errors.Join(err, env.Stop())
		}
	}
	return e, nil
}

// Stop stops the API server and etcd.
func (e *Environment) Stop() error { return e.env.Stop() }

// Kubeconfig provisions a user with a client certificate and returns its
// kubeconfig. A user named system:serviceaccount:<ns>:<name> in the groups
// system:serviceaccounts and system:serviceaccounts:<ns> is what RBAC sees
// for that ServiceAccount.
func (e *Environment) Kubeconfig(name string, groups ...string) ([]byte, error) {
	user, err := e.env.AddUser(crenvtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, fmt.Errorf("add user %s: %w", name, err)
	}
	raw, err := user.KubeConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig of %s: %w", name, err)
	}
	return raw, nil
}

// WriteKubeconfig is Kubeconfig written to file (mode 0600).
func (e *Environment) WriteKubeconfig(file, name string, groups ...string) error {
	raw, err := e.Kubeconfig(name, groups...)
	if err != nil {
		return err
	}
	return os.WriteFile(file, raw, 0o600)
}

// GatewayAPICRDDir is the folder of Gateway API's standard-channel CRDs in
// the module cache, at the version go.mod requires (the API's types are
// built from the same module, so the two agree).
func GatewayAPICRDDir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("find the gateway-api module: %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "standard")
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("gateway-api CRDs: %w (run `go mod download sigs.k8s.io/gateway-api`)", err)
	}
	return dir, nil
}
