// Package docsite builds the docs site for the tests that read it: the
// generator that `make docs` runs (mkdocs-material, pinned and installed
// into bin/ by hack/install-docs.sh), over the repository's docs/, strictly,
// into a folder of the test's own.
package docsite

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
)

// Build builds the site into a temporary folder and returns it. A warning
// (a broken link or anchor, a page missing from the nav) fails the build
// and so the test, as it fails `make docs`.
func Build(t testing.TB) string {
	t.Helper()
	root := kubetest.RepoRoot(t)
	// The site's sources are inputs of the test's cached result.
	kubetest.TrackFiles(t, filepath.Join(root, "docs"), filepath.Join(root, "mkdocs.yml"), filepath.Join(root, "config", "examples"))
	mkdocs := install(t, root)
	site := filepath.Join(t.TempDir(), "site")
	start := time.Now()
	cmd := exec.Command(mkdocs, "build", "--strict", "--site-dir", site)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "NO_MKDOCS_2_WARNING=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mkdocs build --strict: %v\n%s", err, out)
	}
	t.Logf("site built in %s", time.Since(start).Round(time.Millisecond))
	return site
}

// install returns the path of the pinned mkdocs, installing it when
// missing (`make test` has installed it already through `make docs`).
func install(t testing.TB, root string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(root, "hack", "install-docs.sh"), filepath.Join(root, "bin"))
	cmd.Dir = root
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/install-docs.sh: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}
