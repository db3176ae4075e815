package cluster

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// The policy the load runs against: one global token bucket, so that what
// the whole fleet admits has an exact bound whatever pod answers.
const (
	loadCapacity = 300
	loadRefill   = 50 // tokens a second
	loadPolicy   = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: steady
  namespace: load
spec:
  key: global
  limits:
  - name: bucket
    tokenBucket: {capacity: %d, refillRate: %d, refillInterval: 1s}
`
)

// startLoadPolicy creates the namespace load and its policy, once.
func startLoadPolicy(t testing.TB, c *cluster) {
	t.Helper()
	if _, err := c.kubectlErr("get", "namespace", "load"); err != nil {
		c.kubectl(t, "create", "namespace", "load")
	}
	c.applyYAML(t, fmt.Sprintf(loadPolicy, loadCapacity, loadRefill))
	c.waitReady(t, "load", "steady")
}

// steadyLoad is 4 clients through nginx (a new connection to the check
// Service per request, as auth_request makes) and 4 keep-alive clients of
// the check Service itself (as a proxy's connection pool), all counted
// against the load policy. The returned stop ends it and returns both.
func steadyLoad(t testing.TB, c *cluster) (stop func() (viaNginx, direct *load)) {
	t.Helper()
	startLoadPolicy(t, c)
	a := startApp(t)
	nginx := startNginx(t, c, "load", a.addr)
	header := http.Header{"Host": {"load.example.com"}}
	viaNginx := startLoad(4, throughProxy("http://"+nginx+"/load", header, http.StatusForbidden))
	directHeader := http.Header{"X-Original-Url": {"http://load.example.com/load"}, "X-Original-Method": {"GET"}, "X-Real-Ip": {"192.0.2.50"}}
	d := startLoad(4, direct(c.checkService(t)+":8080", "/check/load", directHeader))
	return func() (*load, *load) {
		viaNginx.Stop()
		d.Stop()
		return viaNginx, d
	}
}

// admittedBound is the most the load policy may admit over elapsed: the
// capacity, plus a refill per started second, plus one for the second the
// bucket's clock may have started in before the load.
func admittedBound(elapsed time.Duration) int64 {
	return loadCapacity + loadRefill*(int64(elapsed/time.Second)+2)
}

// rollingUpgrade upgrades the check Deployment to the second version's
// image under steady load: no request fails (no 5xx from the auth hook, no
// connection closed mid-request) and the fleet admits no more than the
// policy allows.
func rollingUpgrade(t *testing.T, c *cluster) {
	r := c.releases[version2]
	c.importImage(t, version2)
	stop := steadyLoad(t, c)
	time.Sleep(3 * time.Second)
	start := time.Now()
	c.kubectl(t, "-n", "sluice-system", "set", "image", "deployment/sluice-check", "check="+r.image)
	c.rollout(t, "sluice-system", "sluice-check")
	rolled := time.Since(start)
	time.Sleep(3 * time.Second) // the old pods' drain and exit
	viaNginx, d := stop()
	t.Logf("rolled out in %s; through nginx: %s", rolled.Round(100*time.Millisecond), viaNginx)
	t.Logf("keep-alive clients of the check Service: %s", d)
	if n := viaNginx.failed.Load() + d.failed.Load(); n > 0 {
		t.Errorf("%d checks failed during the rolling upgrade", n)
	}
	if admitted, bound := viaNginx.allowed.Load()+d.allowed.Load(), admittedBound(d.elapsed); admitted > bound {
		t.Errorf("%d requests admitted in %s, more than the policy's %d", admitted, d.elapsed, bound)
	}
	for _, pod := range c.pods(t, "check") {
		if img := c.jsonpath(t, "{.spec.containers[0].image}", "-n", "sluice-system", "get", "pod", pod); img != r.image {
			t.Errorf("after the upgrade pod %s runs %s, want %s", pod, img, r.image)
		}
	}
}
