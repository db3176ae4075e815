// Command bench measures the check path side by side on this machine: a
// bare net/http handler and a bare fasthttp handler (the ceilings), a
// naive one-EVALSHA-per-request checker (the baseline), and Sluice's check
// endpoint in three
// configurations, interleaved over several rounds so that a noisy machine
// affects all alike; then Envoy's Rate Limit Service over gRPC the same
// way: a bare gRPC server (the ceiling), envoyproxy/ratelimit (the peer)
// and Sluice, loaded with ghz (rls.go). It reports medians and ratios,
// never absolute targets alone. `make bench` runs it (after
// hack/install-bench-tools.sh); BENCH_SAVE=1 writes bench/<date>.md.
//
//	bench -manager bin/manager [-only http|rls] [-rounds 3] [-duration 5s] [-save bench]
//	      [-ghz bin/ghz] [-ratelimit bin/service_cmd] [-rls-lean=true] [-rls-profile FILE]
//	bench serve-bare | serve-bare-fasthttp | serve-naive | serve-bare-grpc    (the comparison servers, started by bench)
//	bench fixed-rate -url URL -rate N [-duration 5s]   (the open-loop latency run alone)
//	bench protoset -o FILE   (the RLS v3 descriptors, for ghz or grpcurl --protoset)
//	bench grpc-load -addr ADDR -data FILE   (the lean RLS generator alone, on a ghz data file)
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	var err error
	if len(os.Args) > 1 && !strings.HasPrefix(os.Args[1], "-") {
		switch os.Args[1] {
		case "serve-bare":
			err = serveBare(os.Args[2:])
		case "serve-bare-fasthttp":
			err = serveBareFastHTTP(os.Args[2:])
		case "serve-naive":
			err = serveNaive(os.Args[2:])
		case "serve-bare-grpc":
			err = serveBareGRPC(os.Args[2:])
		case "grpc-load":
			err = runGRPCLoad(os.Args[2:])
		case "protoset":
			err = runProtoset(os.Args[2:])
		case "fixed-rate":
			err = runFixedRate(os.Args[2:])
		default:
			err = fmt.Errorf("unknown command %q", os.Args[1])
		}
	} else {
		err = run(os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// config is one server under test.
type config struct {
	name string
	path string // the check URL's path
	// serve is the subcommand of this program that serves a comparison
	// server; empty for Sluice (`manager local` with policies).
	serve    string
	pid      int
	url      string
	rounds   []sample
	policies string // YAML for Sluice configurations
	pprof    string // Sluice's profiler address
}

type sample struct {
	wrkResult
	serverCPU, redisCPU time.Duration
	// redisCmds counts every command Redis ran, those run inside scripts
	// included; redisCalls only the script calls (FCALL, EVALSHA, EVAL),
	// the commands that cost a client a round trip.
	redisCmds, redisCalls int64
}

const (
	allowOne = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: allow, namespace: bench}
spec:
  key: "{client_ip}"
  limits:
  - name: burst
    tokenBucket: {capacity: 1000000000, refillRate: 1000000, refillInterval: 1s}
`
	denyAll = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: deny, namespace: bench}
spec:
  key: "{client_ip}"
  limits:
  - name: daily
    fixedWindow: {limit: 1, window: 24h}
`
	// hotExact and hotLeased: one global bucket for every request, decided
	// by Redis on every check, and from leases of 1,000 units.
	hotExact = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: hot, namespace: bench}
spec:
  key: global
  limits:
  - name: burst
    tokenBucket: {capacity: 1000000000, refillRate: 1000000, refillInterval: 1s}
`
	hotLeased = hotExact + `  lease: {units: 1000, ttl: 1s}
`
	allowThree = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: three, namespace: bench}
spec:
  key: "{client_ip}"
  limits:
  - name: burst
    tokenBucket: {capacity: 1000000000, refillRate: 1000000, refillInterval: 1s}
  - name: minute
    fixedWindow: {limit: 1000000000, window: 1m}
  - name: day
    fixedWindow: {limit: 1000000000, window: 24h}
`
)

// options are the flags of a whole run.
type options struct {
	manager  string
	only     string // "", "http" or "rls"
	rounds   int
	duration time.Duration
	save     string
	// The RLS part's tools (hack/install-bench-tools.sh installs them)
	// and where to save a CPU profile of Sluice under RLS load.
	ghz, peer, rlsProfile string
	// httpProfile is where to save CPU profiles of Sluice under HTTP load.
	httpProfile string
	// rlsLean also loads every RLS configuration with the lean generator.
	rlsLean bool
}

func parseOptions(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&o.manager, "manager", "bin/manager", "the Sluice binary")
	fs.IntVar(&o.rounds, "rounds", 3, "interleaved rounds (medians are reported)")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "wrk duration per configuration per round")
	fs.StringVar(&o.save, "save", "", "folder to write <date>.md into (<date>-http.md or <date>-rls.md with -only)")
	fs.StringVar(&o.only, "only", "", "run one part: http (wrk on the check endpoint) or rls (ghz on Envoy's rate limit service); empty: both")
	fs.StringVar(&o.ghz, "ghz", "bin/ghz", "the ghz binary (RLS part)")
	fs.StringVar(&o.peer, "ratelimit", "bin/service_cmd", "envoyproxy/ratelimit's service_cmd binary (RLS part)")
	fs.BoolVar(&o.rlsLean, "rls-lean", true, "in each RLS round, also load every configuration with a lean grpc-go generator (bench grpc-load), to separate the servers' cost from ghz's")
	fs.StringVar(&o.httpProfile, "http-profile", "", "after the HTTP rounds, save a CPU profile of Sluice allowing with one limit and with three under wrk's load to FILE-<configuration>.pprof and report their tops")
	fs.StringVar(&o.rlsProfile, "rls-profile", "", "after the RLS rounds, save a CPU profile of Sluice under each scenario's load (lean generator) to FILE-<scenario>.pprof and report their tops")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch o.only {
	case "", "http", "rls":
	default:
		return o, fmt.Errorf("-only %q: want http or rls", o.only)
	}
	return o, nil
}

// runProtoset is `bench protoset -o FILE`.
func runProtoset(args []string) error {
	fs := flag.NewFlagSet("protoset", flag.ContinueOnError)
	out := fs.String("o", "rls.protoset", "file to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return writeProtoset(*out)
}

// run starts Redis, then runs the HTTP part and the RLS part (or the one
// -only names) on it, and reports.
func run(args []string) error {
	o, err := parseOptions(args)
	if err != nil {
		return err
	}
	need := []string{"redis-server"}
	if o.only != "rls" {
		need = append(need, "wrk")
	}
	if o.only != "http" {
		need = append(need, o.ghz, o.peer)
	}
	for _, bin := range need {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not found: run `make bench` (it installs it; or hack/install-bench-tools.sh, apt-get install wrk redis-server)", bin)
		}
	}
	dir, err := os.MkdirTemp("", "sluice-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ps := &processes{dir: dir}
	defer ps.kill()

	redisAddr, redisPid, err := ps.startRedis()
	if err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	if err := waitFor(func() error { return rdb.Ping(context.Background()).Err() }); err != nil {
		return fmt.Errorf("redis-server did not start: %w", err)
	}
	report := reportHeader()
	if o.only != "rls" {
		section, err := runHTTP(ps, o, redisAddr, redisPid, rdb)
		if err != nil {
			return err
		}
		report += section
	}
	if o.only != "http" {
		res, err := runRLS(ps, o, redisAddr, redisPid, rdb)
		if err != nil {
			return err
		}
		report += renderRLS(res, o.rounds, o.duration)
	}
	return writeReport(report, o.save, o.only)
}

// httpConfigs are the HTTP part's servers by role.
type httpConfigs struct {
	// bare and bareFast are the ceilings: net/http, and fasthttp, which
	// Sluice's check routes are served by.
	bare, bareFast *config
	naive          *config // the baseline
	// Sluice: one limit allowing, denying every request, three limits
	// allowing.
	allow, deny, three *config
	// Sluice on one hot global key: exact, and leased (spec.lease).
	hotExact, hotLeased *config
}

// all is every configuration in the order of the rounds and the table.
func (h httpConfigs) all() []*config {
	return []*config{h.bare, h.bareFast, h.naive, h.allow, h.deny, h.three, h.hotExact, h.hotLeased}
}

// runHTTP is the HTTP part: the check endpoint loaded with wrk round by
// round, then at half load, and Redis's memory.
func runHTTP(ps *processes, o options, redisAddr string, redisPid int, rdb *redis.Client) (string, error) {
	h := httpConfigs{
		bare:      &config{name: "bare net/http 200 (ceiling)", path: "/", serve: "serve-bare"},
		bareFast:  &config{name: "bare fasthttp 200 (ceiling)", path: "/", serve: "serve-bare-fasthttp"},
		naive:     &config{name: "naive EVALSHA per request (baseline)", path: "/", serve: "serve-naive"},
		allow:     &config{name: "Sluice, token bucket, allowing", path: "/check/bench", policies: allowOne},
		deny:      &config{name: "Sluice, denying every request", path: "/check/bench", policies: denyAll},
		three:     &config{name: "Sluice, three limits, allowing", path: "/check/bench", policies: allowThree},
		hotExact:  &config{name: "Sluice, one hot global key, exact", path: "/check/bench", policies: hotExact},
		hotLeased: &config{name: "Sluice, one hot global key, leased (1,000 units)", path: "/check/bench", policies: hotLeased},
	}
	if err := ps.startServers(h.all(), o.manager, redisAddr); err != nil {
		return "", err
	}
	if err := warmUp(h); err != nil {
		return "", err
	}
	if err := measureRounds(ps.dir, h.all(), redisPid, rdb, o); err != nil {
		return "", err
	}

	// Latency at half the allowing throughput, two ways (see halfLoad).
	half, err := measureHalfLoad(ps.dir, h, medianRPS(h.allow)/2, o.duration)
	if err != nil {
		return "", err
	}
	mem, err := measureMemory(redisAddr)
	if err != nil {
		return "", fmt.Errorf("memory: %w", err)
	}
	var profiles []string
	if o.httpProfile != "" {
		for _, p := range []struct {
			c    *config
			name string
		}{{h.allow, "one-limit-allowing"}, {h.three, "three-limits-allowing"}} {
			top, err := profileUnderLoad(p.c.pprof, o.manager, profileFile(o.httpProfile, p.name), p.c.name+" (wrk -t2 -c50)", o.duration, func() (float64, error) {
				w, err := runWrk(ps.dir, p.c.url, 2, 50, o.duration)
				return w.rps, err
			})
			if err != nil {
				return "", fmt.Errorf("profile: %w", err)
			}
			profiles = append(profiles, top)
		}
	}
	return renderReport(h, half, mem, profiles, o.rounds, o.duration), nil
}

// processes are the programs a run starts, each logging into dir.
type processes struct {
	dir   string
	procs []*exec.Cmd
}

func (ps *processes) start(name string, args ...string) (*exec.Cmd, error) {
	return ps.startEnv(nil, name, args...)
}

// startEnv starts name with exactly env as its environment (nil: this
// process's).
func (ps *processes) startEnv(env []string, name string, args ...string) (*exec.Cmd, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = env
	log, err := os.Create(filepath.Join(ps.dir, filepath.Base(name)+"-"+strconv.Itoa(len(ps.procs))+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ps.procs = append(ps.procs, cmd)
	return cmd, nil
}

func (ps *processes) kill() {
	for _, p := range ps.procs {
		_ = p.Process.Kill()
		_, _ = p.Process.Wait()
	}
}

// startRedis starts a redis-server without persistence on a free port.
func (ps *processes) startRedis() (addr string, pid int, err error) {
	addr = freeAddr()
	redisDir := filepath.Join(ps.dir, "redis")
	_ = os.MkdirAll(redisDir, 0o755)
	_, port, _ := net.SplitHostPort(addr)
	cmd, err := ps.start("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", redisDir)
	if err != nil {
		return "", 0, err
	}
	return addr, cmd.Process.Pid, nil
}

// startServers starts each configuration's server (a comparison server,
// this program's own subcommand, or `manager local` with the
// configuration's policies) and waits until each answers.
func (ps *processes) startServers(configs []*config, manager, redisAddr string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	for i, c := range configs {
		addr := freeAddr()
		c.url = "http://" + addr + c.path
		var cmd *exec.Cmd
		switch c.serve {
		case "serve-naive":
			cmd, err = ps.start(self, c.serve, "--listen", addr, "--redis", redisAddr)
		case "":
			pdir := filepath.Join(ps.dir, "policies"+strconv.Itoa(i))
			_ = os.MkdirAll(pdir, 0o755)
			if err := os.WriteFile(filepath.Join(pdir, "policy.yaml"), []byte(c.policies), 0o644); err != nil {
				return err
			}
			c.pprof = freeAddr()
			cmd, err = ps.start(manager, "local", "--policies", pdir, "--listen", addr, "--redis-url", "redis://"+redisAddr, "--pprof-listen", c.pprof)
		default:
			cmd, err = ps.start(self, c.serve, "--listen", addr)
		}
		if err != nil {
			return fmt.Errorf("start %s: %w", c.name, err)
		}
		c.pid = cmd.Process.Pid
		if err := waitFor(func() error { return probe("http://" + addr + "/healthz") }); err != nil {
			return fmt.Errorf("%s did not start: %w (logs in %s)", c.name, err, ps.dir)
		}
	}
	return nil
}

// warmUp sends every client IP twice to the denying configuration, so
// that its rounds measure a flood of keys already over their limit and
// denied once (the deny cache holds a key from its first denial on), not
// the keys' first requests, which reach Redis and would weigh on short
// runs; as the RLS part's warm-up does. It checks the answers on the way,
// and that the allowing configurations allow: a configuration answering
// otherwise measures nothing.
func warmUp(h httpConfigs) error {
	fmt.Fprintf(os.Stderr, "bench: HTTP warm-up, %d requests to %q\n", 2*loadClients, h.deny.name)
	for _, c := range []*config{h.allow, h.three, h.hotExact, h.hotLeased} {
		u, err := url.Parse(c.url)
		if err != nil {
			return err
		}
		if err := exchangeAll(u.Host, authURLRequests(u)[:1], http.StatusOK); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	u, err := url.Parse(h.deny.url)
	if err != nil {
		return err
	}
	reqs := authURLRequests(u)
	if err := exchangeAll(u.Host, reqs, http.StatusOK); err != nil {
		return fmt.Errorf("%s, first requests: %w", h.deny.name, err)
	}
	// ingress-nginx's profile denies with 403 (nginx turns a 429 into 500).
	if err := exchangeAll(u.Host, reqs, http.StatusForbidden); err != nil {
		return fmt.Errorf("%s, second requests: %w", h.deny.name, err)
	}
	return nil
}

// exchangeAll sends reqs to addr over a few connections at once and wants
// each answered with status want.
func exchangeAll(addr string, reqs [][]byte, want int) error {
	const conns = 8
	errs := make([]error, conns)
	var wg sync.WaitGroup
	for k := range conns {
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errs[k] = err
				return
			}
			defer c.Close()
			r := bufio.NewReader(c)
			for i := k; i < len(reqs); i += conns {
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				status, err := exchange(c, r, reqs[i])
				if err == nil && status != want {
					err = fmt.Errorf("request %d answered %d, want %d", i, status, want)
				}
				if err != nil {
					errs[k] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// measureRounds measures every configuration once per round, interleaved,
// so that a noisy machine affects all alike.
func measureRounds(dir string, configs []*config, redisPid int, rdb *redis.Client, o options) error {
	fmt.Fprintf(os.Stderr, "bench: %d rounds × %d configurations × %s, wrk -t2 -c50, 10,000 client IPs\n", o.rounds, len(configs), o.duration)
	for round := 1; round <= o.rounds; round++ {
		for _, c := range configs {
			s, err := measure(c, redisPid, rdb, func() (wrkResult, error) { return runWrk(dir, c.url, 2, 50, o.duration) })
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			c.rounds = append(c.rounds, s)
			fmt.Fprintf(os.Stderr, "  round %d  %-40s %9.0f req/s\n", round, c.name, s.rps)
		}
	}
	return nil
}

// writeReport prints the report and, with a save folder, writes it to
// <folder>/<date>.md (<date>-<part>.md for one part alone).
func writeReport(report, save, only string) error {
	fmt.Print(report)
	if save == "" {
		return nil
	}
	if err := os.MkdirAll(save, 0o755); err != nil {
		return err
	}
	base := time.Now().Format("2006-01-02")
	if only != "" {
		base += "-" + only
	}
	name := filepath.Join(save, base+".md")
	if err := os.WriteFile(name, []byte(report), 0o644); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "bench: saved", name)
	return nil
}

// measure runs one load on c's server and reads the server's and Redis's
// CPU time and Redis's command counts around it.
func measure(c *config, redisPid int, rdb *redis.Client, load func() (wrkResult, error)) (sample, error) {
	cpu0, err := processCPU(c.pid)
	if err != nil {
		return sample{}, err
	}
	rcpu0, _ := processCPU(redisPid)
	cmds0, calls0, err := redisCommands(rdb)
	if err != nil {
		return sample{}, err
	}
	w, err := load()
	if err != nil {
		return sample{}, err
	}
	cpu1, _ := processCPU(c.pid)
	rcpu1, _ := processCPU(redisPid)
	cmds1, calls1, _ := redisCommands(rdb)
	// INFO itself is a command: take it out.
	return sample{wrkResult: w, serverCPU: cpu1 - cpu0, redisCPU: rcpu1 - rcpu0, redisCmds: cmds1 - cmds0 - 1, redisCalls: calls1 - calls0}, nil
}

// redisCommands reads the commands Redis has run and, of those, the script calls.
func redisCommands(rdb *redis.Client) (commands, scriptCalls int64, err error) {
	info, err := rdb.Info(context.Background(), "stats", "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	found := false
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			commands, _ = strconv.ParseInt(v, 10, 64)
			found = true
		}
		for _, cmd := range []string{"cmdstat_fcall:", "cmdstat_fcall_ro:", "cmdstat_evalsha:", "cmdstat_eval:"} {
			if v, ok := strings.CutPrefix(line, cmd+"calls="); ok {
				n, _ := strconv.ParseInt(v[:strings.IndexByte(v, ',')], 10, 64)
				scriptCalls += n
			}
		}
	}
	if !found {
		return 0, 0, errors.New("no total_commands_processed in INFO")
	}
	return commands, scriptCalls, nil
}

func median(ss []sample, f func(sample) float64) float64 {
	vals := make([]float64, len(ss))
	for i, s := range ss {
		vals[i] = f(s)
	}
	sort.Float64s(vals)
	if len(vals) == 0 {
		return 0
	}
	return vals[len(vals)/2]
}

// The medians of one configuration's rounds, shared by the HTTP and RLS
// tables and their targets so that both read a figure the same way.
func medianRPS(c *config) float64 { return median(c.rounds, func(s sample) float64 { return s.rps }) }

func medianP50(c *config) time.Duration {
	return time.Duration(median(c.rounds, func(s sample) float64 { return float64(s.p50) }))
}

func medianP99(c *config) time.Duration {
	return time.Duration(median(c.rounds, func(s sample) float64 { return float64(s.p99) }))
}

// perRequest is the median over c's rounds of f per request (per
// decision, for a limiter) in that round.
func perRequest(c *config, f func(sample) float64) float64 {
	return median(c.rounds, func(s sample) float64 { return f(s) / float64(s.requests) })
}

func micros(d time.Duration) float64 { return float64(d.Microseconds()) }

func serverCPUPerRequest(c *config) float64 {
	return perRequest(c, func(s sample) float64 { return micros(s.serverCPU) })
}

// redisCPUPerRequest is Redis's CPU time per request in µs, read from
// /proc around each run (measure).
func redisCPUPerRequest(c *config) float64 {
	return perRequest(c, func(s sample) float64 { return micros(s.redisCPU) })
}

// redisCmdsPerRequest counts the commands run inside scripts too.
func redisCmdsPerRequest(c *config) float64 {
	return perRequest(c, func(s sample) float64 { return float64(s.redisCmds) })
}

func redisCallsPerRequest(c *config) float64 {
	return perRequest(c, func(s sample) float64 { return float64(s.redisCalls) })
}

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func probe(url string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %d", url, resp.StatusCode)
	}
	return nil
}

func waitFor(f func() error) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
