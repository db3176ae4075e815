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
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
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
	manager, err := filepath.Abs(o.manager)
	if err != nil {
		return err
	}
	if _, err := os.Stat(manager); err != nil {
		return fmt.Errorf("the manager binary: %w (make build)", err)
	}
	dir, err := os.MkdirTemp("", "sluice-soak-")
	if err != nil {
		return err
	}
	if o.keepTemporary {
		log.Printf("logs and data in %s", dir)
	} else {
		defer os.RemoveAll(dir)
	}

	redisAddr, stopRedis, err := startRedis(dir)
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

	ctlMetrics, checkAddr := freeAddr(), freeAddr()
	controller, err := startProc(dir, "controller", manager, "controller", "--kubeconfig", kubeconfig, "--redis-url", "redis://"+redisAddr+"/0",
		"--metrics-bind-address", ctlMetrics, "--health-probe-bind-address", freeAddr())
	if err != nil {
		return err
	}
	defer controller.stop()
	checker, err := startProc(dir, "check", manager, "check", "--listen", checkAddr, "--redis-url", "redis://"+redisAddr+"/0")
	if err != nil {
		return err
	}
	defer checker.stop()
	for _, a := range algorithms {
		if _, err := waitReady(ctx, k, a.name, 0, 60*time.Second); err != nil {
			return err
		}
	}
	if err := waitHTTP(ctx, "http://"+checkAddr+"/readyz", 30*time.Second); err != nil {
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

// proc is one manager process.
type proc struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

func startProc(dir, name, bin string, args ...string) (*proc, error) {
	p := &proc{name: name, log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, args...) // #nosec G204 -- the manager binary with the soak's own arguments
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = p.cmd.Wait(); f.Close(); close(p.done) }()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// startRedis runs a private redis-server on a free loopback port.
func startRedis(dir string) (addr string, stop func(), err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, errors.New("redis-server is not on PATH (make deps, or apt-get install redis-server)")
	}
	addr = freeAddr()
	_, port, _ := net.SplitHostPort(addr)
	p, err := startProc(dir, "redis", bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err != nil {
		return "", nil, err
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) || p.exited() {
			p.stop()
			return "", nil, fmt.Errorf("redis-server on %s did not answer (log %s)", addr, p.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return addr, p.stop, nil
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer 200 within %s: %v", url, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitReady waits until the policy is Ready at a generation above after.
func waitReady(ctx context.Context, k client.Client, name string, after int64, timeout time.Duration) (int64, error) {
	deadline := time.Now().Add(timeout)
	for {
		var p ratelimitv1alpha1.RateLimitPolicy
		err := k.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &p)
		if err == nil && p.Generation > after && p.Status.ObservedGeneration == p.Generation &&
			apimeta.IsStatusConditionTrue(p.Status.Conditions, ratelimitv1alpha1.ConditionReady) {
			return p.Generation, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("policy %s not Ready within %s (err %v, status %+v)", name, timeout, err, p.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
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

// load is an open-loop load on the check endpoint.
type load struct {
	url string
	o   options

	sent, allowed, denied, undecided, errors, notSent atomic.Int64
	mu                                                sync.Mutex
	firstErrors                                       []string
}

func (l *load) run(ctx context.Context) {
	// A fixed number of connections (checks beyond them wait for one), so
	// the check process's descriptors and goroutines follow what it holds,
	// not how many checks a slow moment had in flight.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		MaxConnsPerHost: l.o.conns, MaxIdleConns: l.o.conns, MaxIdleConnsPerHost: l.o.conns, IdleConnTimeout: time.Minute, DisableCompression: true,
	}}
	defer client.CloseIdleConnections()
	sem := make(chan struct{}, l.o.maxInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	start := time.Now()
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for i := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		due := int(time.Since(start).Seconds() * float64(l.o.rate))
		for ; i < due; i++ {
			select {
			case sem <- struct{}{}:
			default:
				l.notSent.Add(1)
				continue
			}
			second := int(time.Since(start).Seconds())
			wg.Go(func() {
				defer func() { <-sem }()
				l.one(client, i, second)
			})
		}
	}
}

// one sends check i: algorithm i%6; one in ten to one of ten hot key
// values, the others to key values that change every second.
func (l *load) one(c *http.Client, i, second int) {
	alg := algorithms[i%len(algorithms)].name
	key := fmt.Sprintf("s%d-%d", second, (i/len(algorithms))%l.o.keysPerSecond)
	if i%10 == 0 {
		key = fmt.Sprintf("hot-%d", (i/10)%10)
	}
	req, err := http.NewRequest(http.MethodGet, l.url, nil)
	if err != nil {
		l.fail(err.Error())
		return
	}
	req.Header.Set("X-Forwarded-Method", "GET")
	req.Header.Set("X-Forwarded-Host", "app.example")
	req.Header.Set("X-Forwarded-Uri", "/"+alg)
	req.Header.Set("X-Key", key)
	l.sent.Add(1)
	resp, err := c.Do(req)
	if err != nil {
		l.fail(err.Error())
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	decided := resp.Header.Get("X-RateLimit-Remaining") != ""
	switch {
	case resp.StatusCode == http.StatusOK && decided:
		l.allowed.Add(1)
	case resp.StatusCode == http.StatusTooManyRequests && decided:
		l.denied.Add(1)
	case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusTooManyRequests:
		l.undecided.Add(1) // the failure mode answered: Redis did not in time
	default:
		l.fail(fmt.Sprintf("status %d for %s key %s", resp.StatusCode, alg, key))
	}
}

func (l *load) fail(msg string) {
	l.errors.Add(1)
	l.mu.Lock()
	if len(l.firstErrors) < 5 {
		l.firstErrors = append(l.firstErrors, msg)
	}
	l.mu.Unlock()
}

// sample is one look at the processes and Redis.
type sample struct {
	at                                   time.Duration
	checkRSS, checkGo, checkFD, checkTCP int64
	checkHTTP                            int64 // sluice_http_open_connections
	ctlRSS, ctlGo, ctlFD, ctlTCP         int64
	redisMem, redisClients, redisKeys    int64
	sent, errors, undecided              int64
}

const sampleHeader = "time     check: RSS MiB goroutines fds tcp http | controller: RSS MiB goroutines fds tcp | redis: used MiB clients keys | checks sent errors failure-mode"

func (s sample) String() string {
	mib := func(b int64) string { return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) }
	return fmt.Sprintf("%7s  check: %6s %4d %4d %4d %4d | controller: %6s %4d %4d %4d | redis: %6s %4d %7d | %9d %d %d",
		s.at.Round(time.Second), mib(s.checkRSS), s.checkGo, s.checkFD, s.checkTCP, s.checkHTTP,
		mib(s.ctlRSS), s.ctlGo, s.ctlFD, s.ctlTCP, mib(s.redisMem), s.redisClients, s.redisKeys, s.sent, s.errors, s.undecided)
}

func takeSample(ctx context.Context, at time.Duration, checker, controller *proc, checkMetrics, ctlMetrics string, rdb *redis.Client, ld *load) sample {
	s := sample{at: at, sent: ld.sent.Load(), errors: ld.errors.Load(), undecided: ld.undecided.Load()}
	s.checkRSS, s.checkFD, s.checkTCP = procStats(checker.cmd.Process.Pid)
	s.ctlRSS, s.ctlFD, s.ctlTCP = procStats(controller.cmd.Process.Pid)
	m := scrape(checkMetrics)
	s.checkGo, s.checkHTTP = int64(m["go_goroutines"]), int64(m["sluice_http_open_connections"])
	s.ctlGo = int64(scrape(ctlMetrics)["go_goroutines"])
	if info, err := rdb.Info(ctx, "memory", "clients").Result(); err == nil {
		f := parseInfo(info)
		s.redisMem, _ = strconv.ParseInt(f["used_memory"], 10, 64)
		s.redisClients, _ = strconv.ParseInt(f["connected_clients"], 10, 64)
	}
	s.redisKeys, _ = rdb.DBSize(ctx).Result()
	return s
}

// procStats reads a process's resident memory, open descriptors and, of
// those, sockets.
func procStats(pid int) (rss, fds, sockets int64) {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
				rss = kb << 10
			}
		}
	}
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		return rss, 0, 0
	}
	for _, e := range ents {
		fds++
		if target, err := os.Readlink(filepath.Join(fdDir, e.Name())); err == nil && strings.HasPrefix(target, "socket:") {
			sockets++
		}
	}
	return rss, fds, sockets
}

// scrape reads the unlabelled (or summed) values of a /metrics page.
func scrape(url string) map[string]float64 {
	out := map[string]float64{}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(f[0], "{")
		v, err := strconv.ParseFloat(f[1], 64)
		if err == nil {
			out[name] += v
		}
	}
	return out
}

func parseInfo(text string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out
}

// report prints the verdict and returns an error when anything grew or
// any answer was an error.
func report(o options, samples []sample, ld *load, edits []string, editErr error, procs ...*proc) error {
	var problems []string
	for _, p := range procs {
		if p.exited() {
			problems = append(problems, fmt.Sprintf("%s exited (log %s)", p.name, p.log))
		}
	}
	if editErr != nil {
		problems = append(problems, "policy edits: "+editErr.Error())
	}
	fmt.Printf("\nchecks: %d sent, %d allowed, %d denied, %d answered by the failure mode, %d errors, %d not sent (more than %d in flight)\n",
		ld.sent.Load(), ld.allowed.Load(), ld.denied.Load(), ld.undecided.Load(), ld.errors.Load(), ld.notSent.Load(), o.maxInFlight)
	if n := ld.errors.Load(); n > 0 {
		problems = append(problems, fmt.Sprintf("%d error answers, e.g. %v", n, ld.firstErrors))
	}
	if ld.denied.Load() == 0 || ld.allowed.Load() == 0 {
		problems = append(problems, "the load was not both allowed and denied: the policies did not apply")
	}
	fmt.Printf("policy edits: %d (%s)\n", len(edits), strings.Join(edits, "; "))

	var after []sample
	for _, s := range samples {
		if s.at >= o.warmup {
			after = append(after, s)
		}
	}
	if len(after) < 4 {
		problems = append(problems, fmt.Sprintf("only %d samples after the warm-up (%s): run longer or sample more often", len(after), o.warmup))
	} else {
		q := max(len(after)/4, 1)
		first, last := after[:q], after[len(after)-q:]
		fmt.Printf("\nflat after the warm-up (%s): the mean of the last %d samples against the first %d after the warm-up, within x%.2f + slack\n", o.warmup, q, q, o.flatRatio)
		for _, r := range []struct {
			what  string
			get   func(sample) int64
			slack int64
			bytes bool
		}{
			{"check RSS", func(s sample) int64 { return s.checkRSS }, o.flatRSS, true},
			{"check goroutines", func(s sample) int64 { return s.checkGo }, o.flatB, false},
			{"check descriptors", func(s sample) int64 { return s.checkFD }, o.flatB, false},
			{"check sockets", func(s sample) int64 { return s.checkTCP }, o.flatB, false},
			{"controller RSS", func(s sample) int64 { return s.ctlRSS }, o.flatRSS, true},
			{"controller goroutines", func(s sample) int64 { return s.ctlGo }, o.flatB, false},
			{"controller descriptors", func(s sample) int64 { return s.ctlFD }, o.flatB, false},
			{"controller sockets", func(s sample) int64 { return s.ctlTCP }, o.flatB, false},
			{"Redis used_memory", func(s sample) int64 { return s.redisMem }, o.flatRSS, true},
			{"Redis clients", func(s sample) int64 { return s.redisClients }, o.flatB, false},
		} {
			a, b, peak := mean(first, r.get), mean(last, r.get), slices.MaxFunc(after, func(x, y sample) int { return int(r.get(x) - r.get(y)) })
			limit := a*o.flatRatio + float64(r.slack)
			verdict := "flat"
			if b > limit {
				verdict = "GREW"
				problems = append(problems, fmt.Sprintf("%s grew from %.0f to %.0f (limit %.0f)", r.what, a, b, limit))
			}
			unit := func(v float64) string {
				if r.bytes {
					return strconv.FormatFloat(v/(1<<20), 'f', 1, 64) + " MiB"
				}
				return strconv.FormatFloat(v, 'f', 1, 64)
			}
			fmt.Printf("  %-24s %12s -> %12s (peak %s, limit %s): %s\n", r.what, unit(a), unit(b), unit(float64(r.get(peak))), unit(limit), verdict)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%d problems:\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
	fmt.Println("\nsoak: flat, no error answers")
	return nil
}

func mean(ss []sample, get func(sample) int64) float64 {
	var sum float64
	for _, s := range ss {
		sum += float64(get(s))
	}
	return sum / math.Max(1, float64(len(ss)))
}
