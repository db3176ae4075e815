// Package cluster runs Sluice as a user does, in pods on a real kubelet: a
// one-node cluster (hack/cluster: kubelet, containerd, kube-proxy and the
// control plane on a bridge of the run's own), the release artifacts
// installed on it (the image, dist/install.yaml, the Helm chart), real
// proxies in front of the check Service, then upgrades under load and
// failovers. It needs root; one node runs per machine at a time.
package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// The two versions the tests install: the first, then an upgrade to the
// second (images that differ only by their version label, so by digest).
const (
	version1  = "v0.0.1-node.1"
	version2  = "v0.0.2-node.2"
	imageRepo = "ghcr.io/sluice-dev/sluice"
)

// node is the cluster the tests share, and the artifacts built for it.
var node *cluster

// lockFile makes test runs on one machine wait for each other's node
// rather than fight over its fixed addresses.
const lockFile = "/run/lock/sluice-node-test.lock"

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "test/cluster: the node needs root (bridges, iptables, mounts, cgroups); `make test` runs as root in CI")
		return 1
	}
	root, err := repoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	unlock, err := lock(lockFile, 30*time.Minute)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/cluster:", err)
		return 1
	}
	defer unlock()
	c := newCluster(root, filepath.Join(root, "bin", "cluster-test"))
	if owner := otherNode(c.dir); owner != "" {
		fmt.Fprintf(os.Stderr, "test/cluster: a node from %s is up on this machine (make cluster-up?): stop it first with K=%s hack/cluster/down.sh (make cluster-down)\n", owner, owner)
		return 1
	}
	start := time.Now()
	if err := c.buildArtifacts(); err != nil {
		fmt.Fprintln(os.Stderr, "test/cluster: build the release artifacts:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "test/cluster: artifacts built in %s\n", time.Since(start).Round(100*time.Millisecond))
	// A node left by a killed run is torn down first; whatever ends this
	// run (tests done, a failure, an interrupt) tears this one down.
	_ = c.script(5*time.Minute, "down.sh")
	interrupted := make(chan os.Signal, 1)
	signal.Notify(interrupted, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-interrupted
		fmt.Fprintln(os.Stderr, "test/cluster: interrupted; tearing the node down")
		_ = c.script(5*time.Minute, "down.sh")
		os.Exit(1)
	}()
	defer func() {
		down := time.Now()
		if err := c.script(5*time.Minute, "down.sh"); err != nil {
			fmt.Fprintln(os.Stderr, "test/cluster: tear down:", err)
		}
		fmt.Fprintf(os.Stderr, "test/cluster: node torn down in %s (logs kept in %s/logs)\n", time.Since(down).Round(100*time.Millisecond), c.dir)
	}()
	up := time.Now()
	if err := c.script(5*time.Minute, "up.sh"); err != nil {
		fmt.Fprintln(os.Stderr, "test/cluster: bring the node up:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "test/cluster: node Ready in %s\n", time.Since(up).Round(100*time.Millisecond))
	node = c
	return m.Run()
}

// otherNode is the state folder of a node up on this machine that is not
// dir's ("" when none is): one node runs per machine, and its owner file
// (hack/cluster/lib.sh) names its folder, whose pid files say whether it
// runs.
func otherNode(dir string) string {
	b, err := os.ReadFile("/run/sluice-node/owner")
	owner := strings.TrimSpace(string(b))
	if err != nil || owner == dir {
		return ""
	}
	for _, name := range []string{"apiserver", "kubelet"} {
		pid, err := os.ReadFile(filepath.Join(owner, name+".pid"))
		if err != nil {
			continue
		}
		var p int
		if _, err := fmt.Sscan(string(pid), &p); err == nil && p > 0 && syscall.Kill(p, 0) == nil {
			return owner
		}
	}
	return ""
}

// repoRoot is the checkout's root: the folder of go.mod above this one.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("no go.mod above %s", dir)
}

// lock takes an exclusive lock on path, waiting up to wait for a run that
// holds it; unlock releases it.
func lock(path string, wait time.Duration) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("another run holds the node (%s): %v", path, err)
		}
		time.Sleep(time.Second)
	}
}

// run runs a command within timeout and returns its standard output, or
// an error with both outputs.
func run(dir string, env []string, timeout time.Duration, name string, args ...string) (string, error) {
	stdout, stderr, err := systest.Run(dir, env, timeout, name, args...)
	if err != nil {
		return stdout, fmt.Errorf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, stderr, stdout)
	}
	return stdout, nil
}
