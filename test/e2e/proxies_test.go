package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// startCaddy runs config/examples/caddy/Caddyfile as it is, its
// placeholders filled from the environment, behind global options that
// keep Caddy private: no admin endpoint, no HTTPS, loopback only, its
// state in the test's directory.
func startCaddy(t *testing.T, root, dir string, port int, checkAddr, namespace, upstreamAddr string) *systest.Proc {
	t.Helper()
	bin := systest.RequireCommand(t, "caddy", "caddy")
	example, err := os.ReadFile(filepath.Join(root, "config", "examples", "caddy", "Caddyfile"))
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "caddy")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	caddyfile := filepath.Join(home, "Caddyfile")
	global := "{\n\tadmin off\n\tauto_https off\n\tdefault_bind 127.0.0.1\n}\n\n"
	if err := os.WriteFile(caddyfile, append([]byte(global), example...), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"HOME=" + home, "XDG_CONFIG_HOME=" + home, "XDG_DATA_HOME=" + home,
		"SITE_ADDRESS=http://:" + strconv.Itoa(port),
		"SLUICE_CHECK=" + checkAddr,
		"SLUICE_NAMESPACE=" + namespace,
		"UPSTREAM=" + upstreamAddr,
	}
	p := systest.Start(t, dir, "caddy", env, bin, "run", "--config", caddyfile, "--adapter", "caddyfile")
	p.WaitTCP(t, "127.0.0.1:"+strconv.Itoa(port), 15*time.Second)
	return p
}
