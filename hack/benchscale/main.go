// Command benchscale measures Sluice's control plane at scale: the built
// `manager controller` and three `manager check` processes against a real
// API server (envtest) and a private redis-server. It reports the time
// until 10,000 policies in 100 namespaces, applied at once, are all Ready
// and held by every check process; a check process's resident memory per
// thousand policies; and the time from a policy change to every check
// process serving it (p50, p99). `make bench-scale` runs it, then the
// matching benchmark of internal/check.
//
//	KUBEBUILDER_ASSETS=bin/k8s/1.37.2 go run ./hack/benchscale -manager bin/manager
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-dev/sluice/hack/internal/procs"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/testutil/envtest"
)

type options struct {
	manager      string
	crds         string
	namespaces   int
	perNamespace int
	replicas     int
	changes      int
	workers      int
	keep         bool
}

func main() {
	var o options
	flag.StringVar(&o.manager, "manager", filepath.Join("bin", "manager"), "the manager binary (make build)")
	flag.StringVar(&o.crds, "crds", filepath.Join("config", "crd", "bases"), "directory of the CRD manifests")
	flag.IntVar(&o.namespaces, "namespaces", 100, "namespaces of the policies")
	flag.IntVar(&o.perNamespace, "per-namespace", 100, "policies in each namespace")
	flag.IntVar(&o.replicas, "replicas", 3, "check processes")
	flag.IntVar(&o.changes, "changes", 60, "policy changes timed until every check process serves them")
	flag.IntVar(&o.workers, "workers", 32, "concurrent creates of the policies")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary directory (logs) after the run")
	flag.Parse()
	if err := run(o); err != nil {
		log.Fatalf("benchscale: %v", err)
	}
}

// cluster is what a run starts: the API server, Redis, the controller and
// the check processes.
type cluster struct {
	kube       client.WithWatch
	kubeConfig *rest.Config
	rdb        *redis.Client
	controller *procs.Proc
	// controllerMetrics is the controller's /metrics address.
	controllerMetrics string
	checks            []replica
}

// replica is one check process and the address of its endpoint.
type replica struct {
	proc *procs.Proc
	addr string
}

func run(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	manager, dir, removeDir, err := procs.Prepare(o.manager, "sluice-benchscale-", o.keep)
	if err != nil {
		return err
	}
	defer removeDir()
	c, cleanup, err := start(ctx, o, manager, dir)
	defer cleanup()
	if err != nil {
		return err
	}
	fmt.Printf("Sluice control plane at scale: %d policies in %d namespaces, %d check processes (load average %s)\n\n",
		o.namespaces*o.perNamespace, o.namespaces, o.replicas, loadAverage())

	idle := c.checkRSS()
	before, err := c.work(ctx)
	if err != nil {
		return err
	}
	applied, err := applyAll(ctx, c, o)
	if err != nil {
		return err
	}
	after, err := c.work(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("apply %d policies at once (%d creates in flight): all created in %s, all Ready in %s (%s after the last create), held by every check process in %s (target: 60s)\n",
		applied.count, o.workers, applied.created.Round(time.Millisecond), applied.ready.Round(time.Millisecond),
		(applied.ready - applied.created).Round(time.Millisecond), applied.published.Round(time.Millisecond))
	fmt.Printf("CPU time over the apply (%s on %d cores): %s\n", applied.published.Round(time.Millisecond), runtime.NumCPU(), after.cpu.since(before.cpu))
	fmt.Printf("API server writes over the apply: %s; the controller's reconciles: %.2f a policy\n",
		after.requests.writesSince(before.requests, applied.count), (after.reconciles-before.reconciles)/float64(applied.count))

	time.Sleep(3 * time.Second) // let the reloads' garbage go
	full := c.checkRSS()
	for i := range c.checks {
		perThousand := float64(full[i]-idle[i]) / float64(applied.count) * 1000
		fmt.Printf("check process %d: resident %.1f MiB with no policy, %.1f MiB with %d: %.2f MiB per thousand policies\n",
			i+1, mib(idle[i]), mib(full[i]), applied.count, mib(int64(perThousand)))
	}
	ctlRSS, _, _ := procs.Stats(c.controller.Cmd.Process.Pid)
	fmt.Printf("controller: resident %.1f MiB\n", mib(ctlRSS))

	lat, err := propagate(ctx, c, o)
	if err != nil {
		return err
	}
	fmt.Printf("a change of one policy until all %d check processes serve it, over %d changes: p50 %s, p99 %s, max %s (target: p99 within 1s)\n",
		o.replicas, len(lat), percentile(lat, 50), percentile(lat, 99), percentile(lat, 100))
	fmt.Printf("\nload average after the run: %s\n", loadAverage())
	return nil
}

// start runs Redis, the API server, the controller and the check
// processes, and waits until each answers. cleanup stops what started,
// also after an error.
func start(ctx context.Context, o options, manager, dir string) (c *cluster, cleanup func(), err error) {
	var stops []func()
	cleanup = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	c = &cluster{}
	redisAddr, stopRedis, err := procs.StartRedis(dir)
	if err != nil {
		return nil, cleanup, err
	}
	stops = append(stops, stopRedis)
	c.rdb = redis.NewClient(&redis.Options{Addr: redisAddr})
	stops = append(stops, func() { _ = c.rdb.Close() })
	redisURL := "redis://" + redisAddr + "/0"

	kubeconfig := filepath.Join(dir, "kubeconfig")
	env, err := envtest.Start(envtest.Options{CRDDirs: []string{o.crds}, Setup: []func(*envtest.Environment) error{
		func(e *envtest.Environment) error {
			return e.WriteKubeconfig(kubeconfig, "bench-admin", "system:masters")
		},
	}})
	if err != nil {
		return nil, cleanup, err
	}
	stops = append(stops, func() { _ = env.Stop() })
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS = -1 // no client-side throttle: the API server's own fairness decides, as for the controller
	c.kubeConfig = cfg
	if c.kube, err = client.NewWithWatch(cfg, client.Options{Scheme: app.Scheme()}); err != nil {
		return nil, cleanup, err
	}

	// The controller reads KUBECONFIG as in a cluster it reads its
	// service account: through controller-runtime's loader, unthrottled.
	c.controllerMetrics = procs.FreeAddr()
	ctl, err := procs.StartEnv(dir, "controller", append(os.Environ(), "KUBECONFIG="+kubeconfig), manager, "controller",
		"--redis-url", redisURL, "--metrics-bind-address", c.controllerMetrics, "--health-probe-bind-address", procs.FreeAddr())
	if err != nil {
		return nil, cleanup, err
	}
	c.controller = ctl
	stops = append(stops, ctl.Stop)
	for i := range o.replicas {
		addr := procs.FreeAddr()
		p, err := procs.Start(dir, fmt.Sprintf("check-%d", i+1), manager, "check", "--listen", addr, "--redis-url", redisURL)
		if err != nil {
			return nil, cleanup, err
		}
		stops = append(stops, p.Stop)
		c.checks = append(c.checks, replica{proc: p, addr: addr})
	}
	for _, r := range c.checks {
		if err := procs.WaitHTTP(ctx, "http://"+r.addr+"/readyz", 30*time.Second); err != nil {
			return nil, cleanup, fmt.Errorf("%s: %w (log %s)", r.proc.Name, err, r.proc.Log)
		}
	}
	if ctl.Exited() {
		return nil, cleanup, errors.New("the controller exited (log " + ctl.Log + ")")
	}
	return c, cleanup, nil
}

// work is what the programs of a run have done so far.
type work struct {
	cpu        cpuTimes
	requests   apiRequests
	reconciles float64
}

// work reads the programs' processor time, the API server's requests and
// the controller's reconciles.
func (c *cluster) work(ctx context.Context) (w work, err error) {
	w.cpu = c.cpu()
	if w.requests, err = readAPIRequests(ctx, c.kubeConfig); err != nil {
		return w, err
	}
	w.reconciles, err = reconciles(ctx, c.controllerMetrics)
	return w, err
}

// cpuTimes is the processor time used so far by each program of a run.
type cpuTimes []struct {
	name string
	used time.Duration
}

// cpu reads the processor time of the API server, etcd, Redis, the
// controller, the check processes together, and this program (the
// creates and the watch).
func (c *cluster) cpu() cpuTimes {
	sum := func(pids []int) time.Duration {
		var d time.Duration
		for _, pid := range pids {
			d += procs.CPU(pid)
		}
		return d
	}
	var checks []int
	for _, r := range c.checks {
		checks = append(checks, r.proc.Cmd.Process.Pid)
	}
	return cpuTimes{
		{"kube-apiserver", sum(procs.Children("kube-apiserver"))},
		{"etcd", sum(procs.Children("etcd"))},
		{"redis-server", sum(procs.Children("redis-server"))},
		{"controller", procs.CPU(c.controller.Cmd.Process.Pid)},
		{fmt.Sprintf("%d check processes", len(c.checks)), sum(checks)},
		{"benchscale", procs.CPU(os.Getpid())},
	}
}

// since is the processor time used from before to t.
func (t cpuTimes) since(before cpuTimes) cpuTimes {
	out := slices.Clone(t)
	for i := range out {
		out[i].used -= before[i].used
	}
	return out
}

func (t cpuTimes) String() string {
	parts := make([]string, len(t))
	for i, p := range t {
		parts[i] = fmt.Sprintf("%s %.1fs", p.name, p.used.Seconds())
	}
	return strings.Join(parts, ", ")
}

// checkRSS is each check process's resident memory.
func (c *cluster) checkRSS() []int64 {
	out := make([]int64, len(c.checks))
	for i, r := range c.checks {
		out[i], _, _ = procs.Stats(r.proc.Cmd.Process.Pid)
	}
	return out
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil || len(b) < 14 {
		return "unknown"
	}
	var one, five, fifteen string
	_, _ = fmt.Sscan(string(b), &one, &five, &fifteen)
	return one + ", " + five + ", " + fifteen
}
