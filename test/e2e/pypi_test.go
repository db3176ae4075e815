package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

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
