package release

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
// bin/ (`make test` builds them first), at release.mk's version.
func tool(t testing.TB, name string) string {
	t.Helper()
	return systest.PinnedTool(t, "release.mk", name, "release-tools")
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
