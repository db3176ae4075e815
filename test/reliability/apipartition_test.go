package reliability

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/testutil/faultproxy"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// Leader election of the partition test: short, so a partition longer
// than the renew deadline costs the leader its lease within seconds
// (production keeps 15s / 10s / 2s).
const (
	apiLeaseDuration = 4 * time.Second
	apiRenewDeadline = 3 * time.Second
	apiRetryPeriod   = 500 * time.Millisecond
	apiLeaseNS       = "sluice-system"
	apiLeaseName     = "sluice-controller.ratelimit.sluice.dev"
)

// kubelet runs `manager controller` as a Deployment's pod would be: when
// the process exits, it starts it again a second later, until stopped.
type kubelet struct {
	t    *testing.T
	dir  string
	bin  string
	args []string

	mu       sync.Mutex
	procs    []*systest.Proc
	exits    []string
	metrics  string // the current process's metrics address
	stop     chan struct{}
	stopped  chan struct{}
	restarts int
}

func startKubelet(t *testing.T, dir, bin string, args ...string) *kubelet {
	k := &kubelet{t: t, dir: dir, bin: bin, args: args, stop: make(chan struct{}), stopped: make(chan struct{})}
	k.run()
	go func() {
		defer close(k.stopped)
		for {
			k.mu.Lock()
			p := k.procs[len(k.procs)-1]
			k.mu.Unlock()
			for {
				if done, err := p.Exited(); done {
					k.mu.Lock()
					k.exits = append(k.exits, fmt.Sprintf("%s at %s: %v; last log line: %s", p.Name, time.Now().Format("15:04:05.000"), err, lastLine(p)))
					k.mu.Unlock()
					break
				}
				select {
				case <-k.stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
			select {
			case <-k.stop:
				return
			case <-time.After(time.Second): // the kubelet's restart delay
			}
			k.run()
		}
	}()
	t.Cleanup(k.end)
	return k
}

func (k *kubelet) run() {
	k.mu.Lock()
	defer k.mu.Unlock()
	metrics := fmt.Sprintf("127.0.0.1:%d", systest.FreePort(k.t))
	name := fmt.Sprintf("controller-%d", len(k.procs)+1)
	args := append(append([]string{"controller"}, k.args...), "--metrics-bind-address", metrics)
	k.procs = append(k.procs, systest.Start(k.t, k.dir, name, nil, k.bin, args...))
	k.metrics = metrics
	if len(k.procs) > 1 {
		k.restarts++
	}
}

func (k *kubelet) end() {
	select {
	case <-k.stop:
	default:
		close(k.stop)
	}
	<-k.stopped
}

func (k *kubelet) state() (restarts int, exits []string, metrics string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.restarts, append([]string(nil), k.exits...), k.metrics
}

func lastLine(p *systest.Proc) string {
	return truncate(strings.TrimSpace(p.Tail(1)), 300)
}

// reconciles reads controller_runtime_reconcile_total of the policy
// reconciler from a controller's /metrics (-1 when it does not answer).
func reconciles(addr string) int {
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	n := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "controller_runtime_reconcile_total{") && strings.Contains(line, `controller="ratelimitpolicy"`) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			n += int(v)
		}
	}
	return n
}

// leaseHolder is the leader-election Lease's holder ("" when none).
func leaseHolder(ctx context.Context, k client.Client) string {
	var l coordinationv1.Lease
	if err := k.Get(ctx, types.NamespacedName{Namespace: apiLeaseNS, Name: apiLeaseName}, &l); err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// tableSnapshot is the policy table in Redis: its revision and entries.
type tableSnapshot struct {
	revision int64
	entries  map[string]string
}

func readTable(ctx context.Context, t testing.TB, srv *redistest.Server) tableSnapshot {
	t.Helper()
	c := srv.Client()
	rev, err := c.Get(ctx, policytable.RevisionKey).Int64()
	if err != nil {
		t.Fatalf("policy table revision: %v", err)
	}
	entries, err := c.HGetAll(ctx, policytable.HashKey).Result()
	if err != nil {
		t.Fatalf("policy table: %v", err)
	}
	return tableSnapshot{revision: rev, entries: entries}
}

// TestControllerPartitionedFromAPIServer cuts the link between `manager
// controller` (leader-elected, lease 4s, renew deadline 3s) and the API
// server while Redis stays reachable, under 2,000 checks a second on the
// check endpoint: first for less than the renew deadline (the leader
// keeps its lease), then for 12s (it loses the lease and exits, and is
// started again, as a pod's container is, while the link is still cut).
// The check endpoint keeps enforcing the last table exactly all along;
// nothing is written to the table during the partition; after it the
// controller resumes (the new process leads and reconciles every policy)
// without rewriting unchanged policies: the table revision, the table's
// entries and the policies' resourceVersions (no status patch) stay as
// they were, and a policy edited afterwards is in force.
func TestControllerPartitionedFromAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("an API server, the manager binary and 30s of load")
	}
	ctx := context.Background()
	kubetest.Assets(t)
	bin := (&systest.Manager{Dir: t.TempDir()}).Path(t)
	srv := redistest.Start(t)
	kube := kubetest.Start(t, kubetest.Options{CRDDirs: []string{filepath.Join(kubetest.RepoRoot(t), "config", "crd", "bases")}})
	k := systest.KubeClient(t, kube.Config)
	systest.CreateNamespaces(t, k, apiLeaseNS, "open", "closed")

	// The controller reaches the API server through a link the test cuts.
	apiURL, err := url.Parse(kube.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	link := faultproxy.StartProcess(t, apiURL.Host, "TestFaultProxyHelperProcess")
	b, err := os.ReadFile(kube.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), apiURL.Host) {
		t.Fatalf("the admin kubeconfig does not name %s", apiURL.Host)
	}
	kubeconfig := filepath.Join(t.TempDir(), "through-link.kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(strings.ReplaceAll(string(b), apiURL.Host, link.Addr())), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, p := range faultPolicies {
		obj := &ratelimitv1alpha1.RateLimitPolicy{Spec: p.parse(t)}
		obj.Namespace, obj.Name = p.namespace, p.name
		if err := k.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	kl := startKubelet(t, dir, bin, "--kubeconfig", kubeconfig, "--redis-url", "redis://"+srv.Addr()+"/0",
		"--health-probe-bind-address", "0",
		"--leader-elect=true", "--leader-election-namespace", apiLeaseNS,
		"--leader-elect-lease-duration", apiLeaseDuration.String(),
		"--leader-elect-renew-deadline", apiRenewDeadline.String(),
		"--leader-elect-retry-period", apiRetryPeriod.String(),
		"--sync-interval", "1s")
	versions := map[string]string{}
	for _, p := range faultPolicies {
		versions[p.namespace] = systest.WaitReady(t, k, p.namespace, p.name, 60*time.Second).ResourceVersion
	}
	first := leaseHolder(ctx, k)
	if first == "" {
		t.Fatal("the policies are Ready, but no controller holds the lease")
	}
	st := newStack(t, stackOptions{storeClient: newClient(t, srv.Addr()), policies: faultPolicies})
	warmUpProbing(t, st, faultLoad("", 0))
	original := readTable(ctx, t, srv)

	// Watch the table: nothing may change it until the edit at the end.
	var watchMu sync.Mutex
	var changes []string
	stopWatch := make(chan struct{})
	var watching sync.WaitGroup
	watching.Go(func() {
		last := original
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(50 * time.Millisecond):
			}
			now := readTable(ctx, t, srv)
			if now.revision != last.revision || !maps.Equal(now.entries, last.entries) {
				watchMu.Lock()
				changes = append(changes, fmt.Sprintf("%s: revision %d (was %d), %d entries", time.Now().Format("15:04:05.000"), now.revision, last.revision, len(now.entries)))
				watchMu.Unlock()
				last = now // report each change once
			}
		}
	})
	endWatch := func() []string {
		close(stopWatch)
		watching.Wait()
		watchMu.Lock()
		defer watchMu.Unlock()
		return changes
	}
	bl := watchBreaker(st.checker.Breaker())
	mon := startStallMonitor(t, srv.Addr())
	// Half the fault tests' rate: answer times are not this test's
	// question (Redis stays), and the machine also runs the API server,
	// etcd and the controller.
	spec := faultLoad("api-", 60*time.Second)
	spec.rate = loadRate / 2
	ld := st.startLoad(spec)
	time.Sleep(2 * time.Second)

	// A short partition: less than the renew deadline.
	shortAt := ld.since(time.Now())
	link.Set(faultproxy.Fault{Blackhole: true})
	time.Sleep(apiRenewDeadline - time.Second)
	link.Heal()
	shortEnd := ld.since(time.Now())
	time.Sleep(3 * time.Second)
	if h := leaseHolder(ctx, k); h != first {
		t.Errorf("after a partition of %s (renew deadline %s) the lease moved from %q to %q", shortEnd-shortAt, apiRenewDeadline, first, h)
	}
	if restarts, exits, _ := kl.state(); restarts > 0 {
		t.Errorf("the controller exited during a partition shorter than its renew deadline: %v", exits)
	}

	// A long partition: the leader loses its lease and exits; the
	// process started again cannot reach the API server either.
	longAt := ld.since(time.Now())
	link.Set(faultproxy.Fault{Blackhole: true})
	time.Sleep(12 * time.Second)
	link.Heal()
	longEnd := ld.since(time.Now())
	healed := time.Now()
	restarts, exits, _ := kl.state()
	t.Logf("partitions: +%s to +%s (%s) and +%s to +%s (%s); the controller exited %d times: %v",
		ms(shortAt), ms(shortEnd), ms(shortEnd-shortAt), ms(longAt), ms(longEnd), ms(longEnd-longAt), len(exits), exits)
	if len(exits) == 0 {
		t.Errorf("the leader kept running through a partition of %s, longer than its renew deadline %s: it cannot have renewed its lease", longEnd-longAt, apiRenewDeadline)
	}

	// It resumes: a process leads and reconciles both policies.
	var leader string
	waitUntil(t, 60*time.Second, "a controller leads again and has reconciled the policies", func() error {
		leader = leaseHolder(ctx, k)
		_, _, metrics := kl.state()
		if n := reconciles(metrics); leader == "" || leader == first || n < len(faultPolicies) {
			return fmt.Errorf("lease holder %q (first %q), %d reconciles by the current process", leader, first, n)
		}
		return nil
	})
	resumed := time.Since(healed)
	time.Sleep(3 * time.Second) // three table syncs of the new leader
	rec := ld.stop()
	breaker := bl.end()
	mon.end()
	changed := endWatch()
	t.Logf("after the heal: %s leads (after %s), %d restarts in all; load: %d checks in %s",
		leader, resumed.Round(time.Millisecond), restarts, len(rec.samples), rec.duration.Round(time.Millisecond))

	// The check endpoint enforced the last table exactly all along:
	// Redis decided every check, but where the machine stalled this
	// process or Redis past the deadline.
	for _, ph := range []phase{
		{"before the partitions", 0, shortAt},
		{"short partition", shortAt, shortEnd},
		{"long partition", longAt, longEnd},
		{"after the heal", longEnd, rec.duration},
	} {
		sv, cl := rec.latencies(func(_ int, s *sample) bool { return s.at >= ph.from && s.at < ph.to })
		t.Logf("answer times, %-22s server %s | client %s", ph.name+":", sv, cl)
	}
	st.checkPoliciesInForce(t, ld)
	logBreaker(t, ld, breaker)
	logStalls(t, ld, mon)
	excluded := environmentalErrors(t, st, mon, ld)
	n := checkExact(t, rec, excluded...)
	t.Logf("exact: %d key values, each %d admitted and %d denied (%d checks answered by their failure mode during stalls of the machine; store errors %s)",
		n, faultLimit, faultGroup-faultLimit, rec.undecided(), &st.store.errs)

	// Nothing rewritten: the table, its revision, the policies' status.
	if len(changed) > 0 {
		t.Errorf("the policy table changed although no policy did: %v", changed)
	}
	for _, p := range faultPolicies {
		var got ratelimitv1alpha1.RateLimitPolicy
		if err := k.Get(ctx, types.NamespacedName{Namespace: p.namespace, Name: p.name}, &got); err != nil {
			t.Fatal(err)
		}
		if got.ResourceVersion != versions[p.namespace] {
			t.Errorf("%s/%s: resourceVersion %s, was %s: the resumed controller rewrote an unchanged policy (status %+v)",
				p.namespace, p.name, got.ResourceVersion, versions[p.namespace], got.Status)
		}
		if got.Status.TableRevision != original.revision {
			t.Errorf("%s/%s: status.tableRevision %d, the table's %d", p.namespace, p.name, got.Status.TableRevision, original.revision)
		}
	}
	t.Logf("unchanged: table revision %d, %d entries, both policies' resourceVersions", original.revision, len(original.entries))

	// And the resumed controller applies an edit.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var p ratelimitv1alpha1.RateLimitPolicy
		if err := k.Get(ctx, types.NamespacedName{Namespace: "closed", Name: "per-client"}, &p); err != nil {
			return err
		}
		p.Spec.Limits[0].FixedWindow.Limit = 5
		return k.Update(ctx, &p)
	})
	if err != nil {
		t.Fatal(err)
	}
	edited := time.Now()
	p := systest.WaitReady(t, k, "closed", "per-client", 30*time.Second)
	after := readTable(ctx, t, srv)
	if after.revision <= original.revision || after.entries["open/per-client"] != original.entries["open/per-client"] {
		t.Errorf("after the edit: revision %d (was %d), the unchanged policy's entry changed: %v", after.revision, original.revision,
			after.entries["open/per-client"] != original.entries["open/per-client"])
	}
	waitUntil(t, 10*time.Second, "the check endpoint enforces the edit", func() error {
		if got := st.reader.Policies().Get("closed", "per-client"); got == nil || got.Generation != p.Generation {
			return fmt.Errorf("the check endpoint holds %v", got)
		}
		return nil
	})
	t.Logf("an edit after the partition (generation %d) was Ready and enforced %s later, at table revision %d",
		p.Generation, time.Since(edited).Round(time.Millisecond), after.revision)
}
