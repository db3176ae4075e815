package release

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// scratch is a folder for what several tests share (the release built
// once), removed after all tests.
var scratch string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-release-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	scratch = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// tool is the path of a release tool that `make release-tools` builds into
// bin/ (`make test` builds them first): bin/<name>-<version>, the version
// read from release.mk's <NAME>_VERSION, so the test runs what make runs.
func tool(t testing.TB, name string) string {
	t.Helper()
	root := kubetest.RepoRoot(t)
	mk, err := os.ReadFile(filepath.Join(root, "release.mk"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^` + strings.ToUpper(name) + `_VERSION \?= (\S+)$`)
	m := re.FindSubmatch(mk)
	if m == nil {
		t.Fatalf("release.mk sets no %s_VERSION", strings.ToUpper(name))
	}
	path := filepath.Join(root, "bin", name+"-"+string(m[1]))
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s not found: run `make release-tools` (`make test` runs it), which builds crane and helm into bin/", path)
	}
	return path
}

// run runs a command in dir with env added to the test's environment,
// within timeout, and returns its standard output; on failure it fails t
// with both outputs.
func run(t testing.TB, dir string, env []string, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	stdout, stderr, err := runErr(dir, env, timeout, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, stderr, stdout)
	}
	return stdout
}

// runErr is run that returns the error with both outputs.
var runErr = systest.Run
