// Command soak runs Sluice's cluster processes (`manager controller` and
// `manager check`, built binaries) against a real API server (envtest) and
// redis-server for a long time at a steady load, and fails unless what
// they hold stays flat after a warm-up: resident memory, goroutines, open
// descriptors and connections of both processes, and Redis's memory and
// clients. The load covers every algorithm (one policy each), with key
// churn (new key values every second, and a few hot ones that get
// denied), and one policy is edited every minute. Any answer but an
// allow or a denial is an error. `make soak` runs it (20 minutes;
// SOAK_DURATION=2m for a try); it is not part of `make test`.
//
//	KUBEBUILDER_ASSETS=bin/k8s/1.37.2 go run ./hack/soak -manager bin/manager -duration 2m
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
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/hack/internal/procs"
	"github.com/sluice-dev/sluice/internal/testutil/envtest"
)

// namespace holds the soak's policies.
const namespace = "soak"

// algorithms are the policies, one per algorithm, each on its own path.
// Their limits let a key value through about ten times in ten seconds, so
// churned key values are allowed and the hot ones are denied.
var algorithms = []struct{ name, limit string }{
	{"token-bucket", "tokenBucket: {capacity: %d, refillRate: 1, refillInterval: 1s}"},
	{"fixed-window", "fixedWindow: {limit: %d, window: 10s}"},
	{"sliding-window-log", "slidingWindowLog: {limit: %d, window: 10s}"},
	{"sliding-window-counter", "slidingWindowCounter: {limit: %d, window: 10s}"},
	{"leaky-bucket", "leakyBucket: {capacity: %d, leakRate: 1, leakInterval: 1s}"},
	{"gcra", "gcra: {rate: 1, period: 1s, burst: %d}"},
}

func policySpec(i, limit int) (ratelimitv1alpha1.RateLimitPolicySpec, error) {
	a := algorithms[i]
	text := fmt.Sprintf("match: {paths: [/%s]}\nkey: '{header:X-Key}'\nlimits: [{name: %s, %s}]", a.name, a.name, fmt.Sprintf(a.limit, limit))
	var spec ratelimitv1alpha1.RateLimitPolicySpec
	return spec, yaml.UnmarshalStrict([]byte(text), &spec)
}

type options struct {
	manager        string
	crds           string
	duration       time.Duration
	warmup         time.Duration
	rate           int
	keysPerSecond  int
	editEvery      time.Duration
	sampleEvery    time.Duration
	maxInFlight    int
	conns          int
	keepTemporary  bool
	flatRatio      float64
	flatRSS, flatB int64
}

func main() {
	var o options
	flag.StringVar(&o.manager, "manager", filepath.Join("bin", "manager"), "the manager binary (make build)")
	flag.StringVar(&o.crds, "crds", filepath.Join("config", "crd", "bases"), "directory of the CRD manifests")
	flag.DurationVar(&o.duration, "duration", 20*time.Minute, "how long the load runs")
	flag.DurationVar(&o.warmup, "warmup", 0, "samples before this are not held flat (default: a fifth of the duration, at least 30s)")
	flag.IntVar(&o.rate, "rate", 500, "checks a second, open loop")
	flag.IntVar(&o.keysPerSecond, "keys-per-second", 200, "new key values a second for each algorithm (key churn)")
	flag.DurationVar(&o.editEvery, "edit-every", time.Minute, "how often a policy is edited (round robin)")
	flag.DurationVar(&o.sampleEvery, "sample-every", 10*time.Second, "how often the processes and Redis are sampled")
	flag.IntVar(&o.maxInFlight, "max-in-flight", 512, "most checks in flight (sent or waiting for a connection); a check due beyond it is counted as not sent")
	flag.IntVar(&o.conns, "conns", 64, "connections of the load to the check endpoint")
	flag.BoolVar(&o.keepTemporary, "keep", false, "keep the temporary directory (logs) after the run")
	flag.Float64Var(&o.flatRatio, "flat-ratio", 1.25, "a resource is flat when its mean over the last quarter is at most this times its mean right after the warm-up (plus the slack below)")
	flag.Int64Var(&o.flatRSS, "flat-rss-slack", 16<<20, "slack in bytes for resident memory and Redis memory")
	flag.Int64Var(&o.flatB, "flat-count-slack", 16, "slack for goroutines, descriptors, connections and Redis clients")
	flag.Parse()
	if o.warmup == 0 {
		o.warmup = max(o.duration/5, 30*time.Second)
	}
	if err := run(o); err != nil {
		log.Fatalf("soak: %v", err)
	}
}

func run(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	manager, dir, removeDir, err := procs.Prepare(o.manager, "sluice-soak-", o.keepTemporary)
	if err != nil {
		return err
	}
	defer removeDir()

	redisAddr, stopRedis, err := procs.StartRedis(dir)
	if err != nil {
		return err
	}
	defer stopRedis()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()

	kubeconfig := filepath.Join(dir, "kubeconfig")
	env, err := envtest.Start(envtest.Options{CRDDirs: []string{o.crds}, Setup: []func(*envtest.Environment) error{
		func(e *envtest.Environment) error {
			return e.WriteKubeconfig(kubeconfig, "soak-admin", "system:masters")
		},
	}})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	k := env.Client
	if err := createPolicies(ctx, k); err != nil {
		return err
	}

	ctlMetrics, checkAddr := procs.FreeAddr(), procs.FreeAddr()
	controller, err := procs.Start(dir, "controller", manager, "controller", "--kubeconfig", kubeconfig, "--redis-url", "redis://"+redisAddr+"/0",
		"--metrics-bind-address", ctlMetrics, "--health-probe-bind-address", procs.FreeAddr())
	if err != nil {
		return err
	}
	defer controller.Stop()
	checker, err := procs.Start(dir, "check", manager, "check", "--listen", checkAddr, "--redis-url", "redis://"+redisAddr+"/0")
	if err != nil {
		return err
	}
	defer checker.Stop()
	for _, a := range algorithms {
		if _, err := waitReady(ctx, k, a.name, 0, 60*time.Second); err != nil {
			return err
		}
	}
	if err := procs.WaitHTTP(ctx, "http://"+checkAddr+"/readyz", 30*time.Second); err != nil {
		return err
	}
	log.Printf("soak: %s at %d checks/s over %d algorithms, %d new key values a second each, a policy edit every %s; samples every %s, warm-up %s",
		o.duration, o.rate, len(algorithms), o.keysPerSecond, o.editEvery, o.sampleEvery, o.warmup)

	ld := &load{url: "http://" + checkAddr + "/check/" + namespace, o: o}
	samples, edits, editErr := sampleUnderLoad(ctx, o, ld, k, func(ctx context.Context, at time.Duration) sample {
		return takeSample(ctx, at, checker, controller, "http://"+checkAddr+"/metrics", "http://"+ctlMetrics+"/metrics", rdb, ld)
	})
	if ctx.Err() != nil {
		return errors.New("interrupted")
	}
	return report(o, samples, ld, edits, editErr, checker, controller)
}

// createPolicies creates the soak's namespace and a policy per algorithm.
func createPolicies(ctx context.Context, k client.Client) error {
	if err := k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return err
	}
	for i, a := range algorithms {
		spec, err := policySpec(i, 10)
		if err != nil {
			return fmt.Errorf("policy %s: %w", a.name, err)
		}
		if err := k.Create(ctx, &ratelimitv1alpha1.RateLimitPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: a.name}, Spec: spec}); err != nil {
			return err
		}
	}
	return nil
}

// sampleUnderLoad runs the load and the policy edits for o.duration, and
// takes a sample every o.sampleEvery (and one at the end), printing each.
func sampleUnderLoad(ctx context.Context, o options, ld *load, k client.Client, take func(context.Context, time.Duration) sample) (samples []sample, edits []string, editErr error) {
	loadCtx, endLoad := context.WithTimeout(ctx, o.duration)
	defer endLoad()
	var wg sync.WaitGroup
	wg.Go(func() { ld.run(loadCtx) })
	wg.Go(func() { edits, editErr = editPolicies(loadCtx, k, o.editEvery) })

	start := time.Now()
	tick := time.NewTicker(o.sampleEvery)
	fmt.Println(sampleHeader)
	for done := false; !done; {
		select {
		case <-loadCtx.Done():
			done = true
		case <-tick.C:
		}
		if done && len(samples) > 0 && time.Since(start)-samples[len(samples)-1].at < o.sampleEvery/2 {
			break
		}
		s := take(ctx, time.Since(start))
		samples = append(samples, s)
		fmt.Println(s)
	}
	tick.Stop()
	wg.Wait()
	return samples, edits, editErr
}

// editPolicies edits one policy every interval, round robin, moving its
// limit between 10 and 11, and waits for it to be Ready.
func editPolicies(loadCtx context.Context, k client.Client, every time.Duration) ([]string, error) {
	var out []string
	t := time.NewTicker(every)
	defer t.Stop()
	for n := 0; ; n++ {
		select {
		case <-loadCtx.Done():
			return out, nil
		case <-t.C:
		}
		i := n % len(algorithms)
		var generation int64
		// The edit runs to its end even when the load ends meanwhile.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var p ratelimitv1alpha1.RateLimitPolicy
			if err := k.Get(ctx, types.NamespacedName{Namespace: namespace, Name: algorithms[i].name}, &p); err != nil {
				return err
			}
			spec, err := policySpec(i, 10+(n/len(algorithms)+1)%2)
			if err != nil {
				return err
			}
			p.Spec, generation = spec, p.Generation
			return k.Update(ctx, &p)
		})
		if err != nil {
			cancel()
			return out, fmt.Errorf("edit %s: %w", algorithms[i].name, err)
		}
		start := time.Now()
		g, err := waitReady(ctx, k, algorithms[i].name, generation, 30*time.Second)
		cancel()
		if err != nil {
			return out, err
		}
		out = append(out, fmt.Sprintf("%s generation %d Ready in %s", algorithms[i].name, g, time.Since(start).Round(time.Millisecond)))
	}
}
