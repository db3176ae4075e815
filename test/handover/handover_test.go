// Package handover tests the controller's leader election with the built
// binary: two `manager controller` processes against one API server
// (envtest) and one redis-server, each reaching Redis through its own
// counting loopback proxy, so the test sees exactly what each one sends.
// The standby sends nothing while the other leads; when the leader is
// killed (SIGKILL: no lease release) the standby takes over once the lease
// expires, and a policy edited after the kill becomes Ready and is
// enforced by `manager check`. A graceful stop (SIGTERM) hands over at once.
//
//	KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.2 go test ./test/handover/ -v
package handover

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// manager is cmd/manager built once for the package's tests.
var manager systest.Manager

func TestMain(m *testing.M) { manager.RunTests(m, "handover") }

// Short leader-election timings, so the test takes seconds; production
// keeps controller-runtime's 15s / 10s / 2s.
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = 500 * time.Millisecond
	// A standby tries the lease every retryPeriod with up to 120% jitter
	// (client-go), and counts the lease's duration from when it last saw
	// the holder renew, which it sees only at those tries. So after a kill
	// it takes over between leaseDuration-retryPeriod and
	// leaseDuration+2*2.2*retryPeriod, plus API latency.
	takeoverBound = leaseDuration + 2*22*retryPeriod/10 + time.Second

	leaseNamespace = "sluice-system"
	leaseName      = "sluice-controller.ratelimit.sluice.dev"
	policyNS       = "handover"
)

// controllerProc is one `manager controller` and its proxy to Redis.
type controllerProc struct {
	proc  *systest.Proc
	proxy *countingProxy
}

func startController(t *testing.T, dir, name, kubeconfig, redisAddr string) *controllerProc {
	t.Helper()
	proxy := startProxy(t, redisAddr)
	probe := fmt.Sprintf("127.0.0.1:%d", systest.FreePort(t))
	proc := systest.Start(t, dir, name, nil, manager.Path(t), "controller",
		"--kubeconfig", kubeconfig,
		"--redis-url", "redis://"+proxy.Addr()+"/0",
		"--metrics-bind-address", "0", "--health-probe-bind-address", probe,
		"--leader-elect=true", "--leader-election-namespace", leaseNamespace,
		"--leader-elect-lease-duration", leaseDuration.String(),
		"--leader-elect-renew-deadline", renewDeadline.String(),
		"--leader-elect-retry-period", retryPeriod.String(),
		"--sync-interval", "1s",
	)
	proc.WaitHTTP(t, "http://"+probe+"/readyz", 30*time.Second)
	return &controllerProc{proc: proc, proxy: proxy}
}

// holder is the lease's holder identity ("" when none holds it).
func holder(t *testing.T, k client.Client) string {
	t.Helper()
	var l coordinationv1.Lease
	err := k.Get(context.Background(), types.NamespacedName{Namespace: leaseNamespace, Name: leaseName}, &l)
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Now()
}

// setLimit changes the policy's first limit (a fixed window).
func setLimit(t *testing.T, k client.Client, name string, limit int64) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var p ratelimitv1alpha1.RateLimitPolicy
		if err := k.Get(context.Background(), types.NamespacedName{Namespace: policyNS, Name: name}, &p); err != nil {
			return err
		}
		p.Spec.Limits[0].FixedWindow.Limit = ratelimitv1alpha1.Count(limit)
		return k.Update(context.Background(), &p)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestLeaderHandover(t *testing.T) {
	ctx := context.Background()
	kubetest.Assets(t)
	root := kubetest.RepoRoot(t)
	manager.Path(t) // build before anything starts
	srv := redistest.Start(t)
	kube := kubetest.Start(t, kubetest.Options{CRDDirs: []string{filepath.Join(root, "config", "crd", "bases")}})
	k := systest.KubeClient(t, kube.Config)
	systest.CreateNamespaces(t, k, leaseNamespace, policyNS)
	dir := t.TempDir()

	// A first, so that it leads.
	a := startController(t, dir, "controller-a", kube.Kubeconfig, srv.Addr())
	waitFor(t, "controller-a holds the lease", 30*time.Second, func() bool { return holder(t, k) != "" })
	leaderA := holder(t, k)
	waitFor(t, "controller-a talks to Redis", 10*time.Second, func() bool { _, n := a.proxy.sent(); return n > 0 })
	b := startController(t, dir, "controller-b", kube.Kubeconfig, srv.Addr())

	checkAddr := fmt.Sprintf("127.0.0.1:%d", systest.FreePort(t))
	chk := systest.Start(t, dir, "check", nil, manager.Path(t), "check", "--listen", checkAddr, "--redis-url", "redis://"+srv.Addr()+"/0")
	chk.WaitHTTP(t, "http://"+checkAddr+"/readyz", 30*time.Second)
	cc := systest.NewCheckClient(checkAddr, policyNS)

	api := systest.Policy(policyNS, "api", "/api", ratelimitv1alpha1.FailureModeOpen, systest.FixedWindow("hour", 5, "1h"))
	if err := k.Create(ctx, api); err != nil {
		t.Fatal(err)
	}
	systest.WaitReady(t, k, policyNS, "api", 30*time.Second)
	cc.WaitLimit(t, "/api", 5, 10*time.Second)
	if got := cc.Decisions(t, "/api", "before", 6); !systest.FirstN(got, 5) {
		t.Fatalf("before the handover: decisions %v, want 5 allowed then denied", got)
	}

	// The standby stays silent while the leader works (it syncs every
	// second), for two lease durations.
	_, aBefore := a.proxy.sent()
	watch := time.Now()
	for time.Since(watch) < 2*leaseDuration {
		if conns, n := b.proxy.sent(); conns != 0 || n != 0 {
			t.Fatalf("the standby sent %d bytes over %d connections to Redis while controller-a led", n, conns)
		}
		if h := holder(t, k); h != leaderA {
			t.Fatalf("the lease moved to %q while controller-a was alive", h)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, aAfter := a.proxy.sent()
	t.Logf("while controller-a led (%s watched): it sent %d bytes to Redis, the standby 0 bytes over 0 connections", 2*leaseDuration, aAfter-aBefore)
	if aAfter == aBefore {
		t.Errorf("controller-a sent nothing to Redis while leading: is the sync running?")
	}

	// kill -9 the leader: it cannot release the lease.
	killed := time.Now()
	a.proc.Kill()
	// Edit a policy after the kill, and create another.
	setLimit(t, k, "api", 2)
	after := systest.Policy(policyNS, "after", "/after", ratelimitv1alpha1.FailureModeOpen, systest.FixedWindow("hour", 3, "1h"))
	if err := k.Create(ctx, after); err != nil {
		t.Fatal(err)
	}

	var leaderB string
	took := waitFor(t, "the standby takes the lease", 3*leaseDuration, func() bool {
		leaderB = holder(t, k)
		return leaderB != "" && leaderB != leaderA
	}).Sub(killed)
	waitFor(t, "the new leader talks to Redis", 10*time.Second, func() bool { return !b.proxy.firstSent().IsZero() })
	firstRedis := b.proxy.firstSent().Sub(killed)
	p := systest.WaitReady(t, k, policyNS, "api", 30*time.Second)
	ready := time.Since(killed)
	systest.WaitReady(t, k, policyNS, "after", 30*time.Second)
	cc.WaitLimit(t, "/api", 2, 10*time.Second)
	enforced := time.Since(killed)
	t.Logf("kill -9 of the leader (lease %s, renew deadline %s, retry period %s): the standby held the lease after %s, sent its first byte to Redis after %s; "+
		"the policy edited after the kill (generation %d) was Ready after %s and enforced by the check endpoint after %s",
		leaseDuration, renewDeadline, retryPeriod, took.Round(time.Millisecond), firstRedis.Round(time.Millisecond),
		p.Generation, ready.Round(time.Millisecond), enforced.Round(time.Millisecond))
	if took > takeoverBound {
		t.Errorf("takeover after %s, want within the lease (%s) plus the standby's retry jitter: %s", took, leaseDuration, takeoverBound)
	}
	if took < leaseDuration-retryPeriod-100*time.Millisecond {
		t.Errorf("takeover after %s: before the dead leader's lease (%s) can have expired", took, leaseDuration)
	}
	if firstRedis < took-time.Second {
		t.Errorf("the standby talked to Redis %s after the kill, before it held the lease (%s)", firstRedis, took)
	}
	if p.Generation != 2 || p.Status.ObservedGeneration != 2 {
		t.Errorf("policy api: generation %d, observed %d; want 2", p.Generation, p.Status.ObservedGeneration)
	}
	if got := cc.Decisions(t, "/api", "after-kill", 3); !systest.FirstN(got, 2) {
		t.Errorf("after the handover: /api decisions %v, want 2 allowed then denied", got)
	}
	if got := cc.Decisions(t, "/after", "after-kill", 4); !systest.FirstN(got, 3) {
		t.Errorf("after the handover: /after decisions %v, want 3 allowed then denied", got)
	}

	// A graceful stop (a rolling update) releases the lease: a new standby
	// takes over at its next try, without waiting for the lease to expire.
	c := startController(t, dir, "controller-c", kube.Kubeconfig, srv.Addr())
	time.Sleep(2 * retryPeriod)
	if conns, n := c.proxy.sent(); conns != 0 || n != 0 {
		t.Fatalf("the new standby sent %d bytes over %d connections to Redis", n, conns)
	}
	stopped := time.Now()
	b.proc.Stop()
	stopTook := time.Since(stopped)
	tookC := waitFor(t, "controller-c takes the lease", 3*leaseDuration, func() bool {
		h := holder(t, k)
		return h != "" && h != leaderB
	}).Sub(stopped)
	setLimit(t, k, "api", 4)
	systest.WaitReady(t, k, policyNS, "api", 30*time.Second)
	cc.WaitLimit(t, "/api", 4, 10*time.Second)
	t.Logf("SIGTERM of the leader: it stopped in %s and released the lease; the standby held it %s after the signal", stopTook.Round(time.Millisecond), tookC.Round(time.Millisecond))
	if tookC > leaseDuration {
		t.Errorf("graceful handover took %s, not faster than the lease (%s): was the lease released?", tookC, leaseDuration)
	}
	if got := cc.Decisions(t, "/api", "after-stop", 5); !systest.FirstN(got, 4) {
		t.Errorf("after the graceful handover: /api decisions %v, want 4 allowed then denied", got)
	}
}
