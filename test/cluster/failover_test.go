package cluster

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// leaderFailover deletes the leader controller's pod: the standby holds
// the Lease within the lease duration (the leader releases it on its way
// out, so much sooner), and a policy applied meanwhile becomes Ready and
// is enforced.
func leaderFailover(t *testing.T, c *cluster) {
	old := c.leader(t)
	if old == "" {
		t.Fatal("no leader")
	}
	start := time.Now()
	c.kubectl(t, "-n", "sluice-system", "delete", "pod", old, "--wait=false")
	c.applyYAML(t, `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: applied-during-failover
  namespace: default
spec:
  match:
    paths: ["/failover"]
  key: "{client_ip}"
  limits:
  - name: minute
    fixedWindow: {limit: 3, window: 1m}
`)
	var leader string
	took := waitFor(t, "another controller holds the Lease", 30*time.Second, func() (bool, string) {
		leader = c.leader(t)
		return leader != "" && leader != old, "holder " + leader
	})
	c.waitReady(t, "default", "applied-during-failover")
	ready := time.Since(start)
	expectDecisions(t, "http://"+c.checkService(t)+":8080/check/default", "http://localhost/failover", "192.0.2.20", 3)
	t.Logf("leader %s deleted: %s holds the Lease after %s; the policy applied meanwhile Ready after %s",
		old, leader, took.Round(100*time.Millisecond), ready.Round(100*time.Millisecond))
	if took > 15*time.Second {
		t.Errorf("the Lease changed hands after %s, more than the lease duration (15 s)", took)
	}
	c.rollout(t, "sluice-system", "sluice-controller")
}

// checkPodKilled kills a check pod's process with SIGKILL under steady
// load: no drain, no endpoint removal beforehand. Requests in flight at
// that pod fail, and new connections fail until the kubelet has restarted
// the container; the test states how many and bounds them.
func checkPodKilled(t *testing.T, c *cluster) {
	pods := c.pods(t, "check")
	victim := pods[0]
	restarts := c.jsonpath(t, "{.status.containerStatuses[0].restartCount}", "-n", "sluice-system", "get", "pod", victim)
	stop := steadyLoad(t, c)
	time.Sleep(3 * time.Second)
	pid := c.containerPID(t, victim)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	back := waitFor(t, "the killed container restarted and Ready", 2*time.Minute, func() (bool, string) {
		st := c.jsonpath(t, "{.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].ready}", "-n", "sluice-system", "get", "pod", victim)
		return st != restarts+" true" && strings.HasSuffix(st, " true"), st
	})
	time.Sleep(3 * time.Second)
	viaNginx, d := stop()
	t.Logf("pod %s killed; its container restarted and Ready %s later", victim, back.Round(100*time.Millisecond))
	t.Logf("through nginx: %s", viaNginx)
	t.Logf("keep-alive clients of the check Service: %s", d)
	_ = killed
	// Bound: what reached the dead pod while the kubelet restarted it.
	// Each client loses at most one request per pause while its requests
	// fail (5 ms apart, only to the dead pod, about half of them), for no
	// longer than the container took to be Ready again.
	failed := viaNginx.failed.Load() + d.failed.Load()
	if bound := int64(8 * (back/pause + 1) / 2); failed > bound {
		t.Errorf("%d checks failed after the SIGKILL, more than the bound %d", failed, bound)
	}
	if admitted, bound := viaNginx.allowed.Load()+d.allowed.Load(), admittedBound(d.elapsed); admitted > bound {
		t.Errorf("%d requests admitted in %s, more than the policy's %d", admitted, d.elapsed, bound)
	}
}

// redisRestarted stops the node's Redis and starts it again, empty: the
// probes stay green throughout (no pod restarts, every pod Ready), each
// policy's failure mode answers meanwhile (Open allows, Closed denies),
// and once the controller has loaded the library and the table again,
// Redis decides again.
func redisRestarted(t *testing.T, c *cluster) {
	c.applyYAML(t, `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: redis-open
  namespace: default
spec:
  match:
    paths: ["/redis-open"]
  key: "{client_ip}"
  failureMode: Open
  limits:
  - name: minute
    fixedWindow: {limit: 2, window: 1m}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: redis-closed
  namespace: default
spec:
  match:
    paths: ["/redis-closed"]
  key: "{client_ip}"
  failureMode: Closed
  limits:
  - name: minute
    fixedWindow: {limit: 2, window: 1m}
`)
	c.waitReady(t, "default", "redis-open")
	c.waitReady(t, "default", "redis-closed")
	service := "http://" + c.checkService(t) + ":8080/check/default"
	restarts := c.restartCounts(t)

	pidFile := filepath.Join(c.dir, "redis.pid")
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, pidFile)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	// Each policy's failure mode, repeatedly (more than the limit of 2:
	// nothing is counted), while the probes are watched.
	for i := range 8 {
		if got := ask(t, service, "http://localhost/redis-open", "192.0.2.30"); got != http.StatusOK {
			t.Errorf("Redis down, failureMode Open, request %d: %d, want 200", i+1, got)
		}
		if got := ask(t, service, "http://localhost/redis-closed", "192.0.2.30"); got == http.StatusOK {
			t.Errorf("Redis down, failureMode Closed, request %d: allowed", i+1)
		}
		c.requireAllReady(t)
		time.Sleep(500 * time.Millisecond)
	}
	c.startRedis(t)
	down := time.Since(stopped)
	again := waitFor(t, "Redis decides again", time.Minute, func() (bool, string) {
		code := ask(t, service, "http://localhost/redis-closed", "192.0.2.31")
		return code == http.StatusOK, fmt.Sprint(code)
	})
	// The first allowed one counted: one more, then denied.
	if got := ask(t, service, "http://localhost/redis-closed", "192.0.2.31"); got != http.StatusOK {
		t.Errorf("second request after Redis came back: %d, want 200", got)
	}
	if got := ask(t, service, "http://localhost/redis-closed", "192.0.2.31"); got != http.StatusForbidden {
		t.Errorf("third request after Redis came back: %d, want 403 (Redis counts again)", got)
	}
	c.requireAllReady(t)
	if now := c.restartCounts(t); now != restarts {
		t.Errorf("restart counts %s before the outage, %s after: a probe failed", restarts, now)
	}
	t.Logf("Redis down %s: every pod Ready throughout, Open allowed and Closed denied; Redis decided again %s after it restarted",
		down.Round(100*time.Millisecond), again.Round(100*time.Millisecond))
}

// ask sends one auth-url check and returns its status.
func ask(t testing.TB, check, url, client string) int {
	t.Helper()
	return askCheck(t, check, url, client).StatusCode
}

// restartCounts are the restart counts of every Sluice container.
func (c *cluster) restartCounts(t testing.TB) string {
	t.Helper()
	return c.jsonpath(t, "{range .items[*]}{.metadata.name}={.status.containerStatuses[0].restartCount} {end}",
		"-n", "sluice-system", "get", "pods", "-l", "app.kubernetes.io/name=sluice")
}

// requireAllReady fails t unless every Sluice pod is Ready.
func (c *cluster) requireAllReady(t testing.TB) {
	t.Helper()
	out := c.jsonpath(t, "{range .items[*]}{.metadata.name}={.status.containerStatuses[0].ready} {end}",
		"-n", "sluice-system", "get", "pods", "-l", "app.kubernetes.io/name=sluice")
	if strings.Contains(out, "=false") {
		t.Errorf("a pod is not Ready: %s", out)
	}
}

// startRedis starts the node's Redis as up.sh does, its pid where down.sh
// looks for it.
func (c *cluster) startRedis(t testing.TB) {
	t.Helper()
	log, err := os.OpenFile(filepath.Join(c.dir, "logs", "redis.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command("redis-server", filepath.Join(c.dir, "redis", "redis.conf"))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.dir, "redis.pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait() }()
}
