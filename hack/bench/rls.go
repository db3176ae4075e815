package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
)

// The RLS part loads Envoy's Rate Limit Service v3 (ShouldRateLimit) with
// ghz on three servers side by side, interleaved over rounds like the HTTP
// part: a bare grpc-go server answering OK (the ceiling), envoyproxy/
// ratelimit's own service_cmd (the peer), and Sluice's `manager local`
// gRPC endpoint, the last two on the same Redis with limits of the same
// size.

const (
	// rlsClients is how many distinct client values the requests carry, as
	// the HTTP part's 10,000 client IPs.
	rlsClients = 10_000
	// rlsConcurrency and rlsConns: ghz keeps 50 calls in flight (wrk's
	// -c50) over 2 HTTP/2 connections, as an Envoy with 2 worker threads
	// holds one connection per worker to its rate limit cluster.
	rlsConcurrency = 50
	rlsConns       = 2
	// allowLimit is the allowing runs' limit per bucket per minute: no
	// bucket comes near it (the busiest, one of 10 routes, gets a tenth
	// of the requests), so every request is allowed.
	allowLimit = 1_000_000_000
)

// rlsScenario is one kind of request, the same for all three servers.
type rlsScenario struct {
	name, domain string
	// descriptors are request i's descriptors, each a list of key, value
	// pairs.
	descriptors func(i int) [][]string
	// want is the answer of the servers that limit once warmed up.
	want rlsv3.RateLimitResponse_Code
	data string // ghz's data file
}

func clientValue(i int) string { return fmt.Sprintf("10.0.%d.%d", i/256%256, i%256) }

var rlsScenarios = []*rlsScenario{
	{
		name: "one descriptor, allowing", domain: "bench", want: rlsv3.RateLimitResponse_OK,
		descriptors: func(i int) [][]string {
			return [][]string{{"generic_key", "bench", "client", clientValue(i)}}
		},
	},
	{
		// What one Envoy route's rate_limits actions commonly send together:
		// per client, per user, per route.
		name: "three descriptors, allowing", domain: "bench", want: rlsv3.RateLimitResponse_OK,
		descriptors: func(i int) [][]string {
			return [][]string{
				{"generic_key", "bench", "client", clientValue(i)},
				{"generic_key", "bench-user", "user", "user-" + strconv.Itoa(i%1000)},
				{"generic_key", "bench-route", "route", "/api/route-" + strconv.Itoa(i%10)},
			}
		},
	},
	{
		// 10,000 clients over a limit of 1 a day: after the warm-up every
		// request is denied.
		name: "denial flood", domain: "bench-deny", want: rlsv3.RateLimitResponse_OVER_LIMIT,
		descriptors: func(i int) [][]string {
			return [][]string{{"generic_key", "bench", "client", clientValue(i)}}
		},
	},
}

// writeData writes the scenario's ghz data file: a JSON array of
// rlsClients requests. ghz parses each array element once, caches it and
// sends element n%len to its nth request, so the requests cycle through
// every client while the generator, which shares the 2 CPUs with the
// servers, spends nothing per request on templates (ghz's
// {{.RequestNumber}} templating re-renders and re-parses the JSON of every
// request).
func (s *rlsScenario) writeData(dir string) error {
	reqs := make([]rlsJSONRequest, rlsClients)
	for i := range reqs {
		reqs[i].Domain = s.domain
		for _, kv := range s.descriptors(i) {
			reqs[i].Descriptors = append(reqs[i].Descriptors, jsonDescriptor(kv))
		}
	}
	s.data = dataFile(dir, s.name)
	return writeRequests(s.data, reqs)
}

// rlsJSONRequest is a RateLimitRequest as ghz's data files spell it.
type rlsJSONRequest struct {
	Domain      string              `json:"domain"`
	Descriptors []rlsJSONDescriptor `json:"descriptors"`
}

type rlsJSONDescriptor struct {
	Entries        []rlsJSONEntry `json:"entries"`
	HitsAddend     *uint64        `json:"hits_addend,omitempty"`
	IsNegativeHits bool           `json:"is_negative_hits,omitempty"`
}

type rlsJSONEntry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// jsonDescriptor is the descriptor of key, value pairs kv.
func jsonDescriptor(kv []string) rlsJSONDescriptor {
	var d rlsJSONDescriptor
	for j := 0; j+1 < len(kv); j += 2 {
		d.Entries = append(d.Entries, rlsJSONEntry{kv[j], kv[j+1]})
	}
	return d
}

// dataFile is the path of a scenario's data file in dir.
func dataFile(dir, scenario string) string {
	return filepath.Join(dir, "rls-"+strings.ReplaceAll(strings.ReplaceAll(scenario, ",", ""), " ", "-")+".json")
}

func writeRequests(path string, reqs []rlsJSONRequest) error {
	b, err := json.Marshal(reqs)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// probe is request i of the scenario, for single questions.
func (s *rlsScenario) probe(i int) *rlsv3.RateLimitRequest {
	return rlsRequest(s.domain, s.descriptors(i)...)
}

// peerConfig is envoyproxy/ratelimit's configuration of the scenarios, one
// file per domain: fixed windows of a minute (a day for the denial
// flood), a bucket per distinct value of the last entry, as Sluice's
// policies below.
var peerConfig = map[string]string{
	"bench.yaml": `domain: bench
descriptors:
  - key: generic_key
    value: bench
    descriptors:
      - key: client
        rate_limit: {unit: minute, requests_per_unit: ` + strconv.Itoa(allowLimit) + `}
  - key: generic_key
    value: bench-user
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: ` + strconv.Itoa(allowLimit) + `}
  - key: generic_key
    value: bench-route
    descriptors:
      - key: route
        rate_limit: {unit: minute, requests_per_unit: ` + strconv.Itoa(allowLimit) + `}
`,
	"bench-deny.yaml": `domain: bench-deny
descriptors:
  - key: generic_key
    value: bench
    descriptors:
      - key: client
        rate_limit: {unit: day, requests_per_unit: 1}
`,
}

// sluicePolicy is a descriptor policy answering the descriptor
// [generic_key=value, entry=*] with a clock-aligned fixed window (the
// peer's windows are aligned to the clock too) per value of entry.
func sluicePolicy(namespace, domain, name, value, entry string, limit int, window string) string {
	return fmt.Sprintf(`apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: %s, namespace: %s}
spec:
  match:
    domain: %s
    descriptor:
    - {key: generic_key, value: %s}
    - {key: %s}
  key: "{descriptor:%s}"
  limits:
  - name: window
    fixedWindow: {limit: %d, window: %s, alignment: Clock}
`, name, namespace, domain, value, entry, entry, limit, window)
}

// sluicePolicies are the files of Sluice's policies folder. Each domain
// is bound to the namespace of the same name (--rls-domain).
var sluicePolicies = map[string]string{
	"client.yaml": sluicePolicy("bench", "bench", "client", "bench", "client", allowLimit, "1m"),
	"user.yaml":   sluicePolicy("bench", "bench", "user", "bench-user", "user", allowLimit, "1m"),
	"route.yaml":  sluicePolicy("bench", "bench", "route", "bench-route", "route", allowLimit, "1m"),
	"deny.yaml":   sluicePolicy("bench-deny", "bench-deny", "deny", "bench", "client", 1, "24h"),
}

// rlsServer is one server under test and its samples, one config per
// scenario.
type rlsServer struct {
	name string
	addr string
	pid  int
	// limits: it answers from limits (not the bare ceiling).
	limits bool
	// pprof is Sluice's profiler address.
	pprof string
	// runs are the ghz runs of each scenario, lean the lean generator's
	// (with -rls-lean).
	runs, lean []*config
}

// peerEnv is service_cmd's whole environment (nothing is inherited):
// Redis over TCP with the service's default pool of 10 connections and no
// write buffering (REDIS_PIPELINE_WINDOW=0, its default: each request's
// INCRBY and EXPIRE commands go out in one write), the configuration read
// from runtime/ratelimit/config/*.yaml without watching the root for
// symlink swaps, statistics kept in memory (no statsd), its local cache
// of over-limit keys on (Sluice caches denials too), every listener on
// loopback.
func peerEnv(runtime, redisAddr string, grpcPort, httpPort, debugPort string) []string {
	return []string{
		"REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL=" + redisAddr,
		"REDIS_POOL_SIZE=10",
		"REDIS_PIPELINE_WINDOW=0",
		"RUNTIME_ROOT=" + runtime,
		"RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_APPDIRECTORY=config",
		"RUNTIME_WATCH_ROOT=false",
		"USE_STATSD=false",
		"LOCAL_CACHE_SIZE_IN_BYTES=4194304",
		"HOST=127.0.0.1",
		"PORT=" + httpPort,
		"GRPC_HOST=127.0.0.1",
		"GRPC_PORT=" + grpcPort,
		"DEBUG_HOST=127.0.0.1",
		"DEBUG_PORT=" + debugPort,
		"LOG_LEVEL=warn",
	}
}

// startRLSServers starts the bare server, the peer and Sluice, and waits
// until each answers.
func (ps *processes) startRLSServers(o options, redisAddr string) ([]*rlsServer, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	bare := &rlsServer{name: "bare gRPC OK (ceiling)", addr: freeAddr()}
	cmd, err := ps.start(self, "serve-bare-grpc", "--listen", bare.addr)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", bare.name, err)
	}
	bare.pid = cmd.Process.Pid

	peer := &rlsServer{name: "envoyproxy/ratelimit (peer)", addr: freeAddr(), limits: true}
	runtime := filepath.Join(ps.dir, "runtime")
	cfgDir := filepath.Join(runtime, "ratelimit", "config")
	if err := writeFiles(cfgDir, peerConfig); err != nil {
		return nil, err
	}
	_, grpcPort, _ := net.SplitHostPort(peer.addr)
	_, httpPort, _ := net.SplitHostPort(freeAddr())
	_, debugPort, _ := net.SplitHostPort(freeAddr())
	cmd, err = ps.startEnv(peerEnv(runtime, redisAddr, grpcPort, httpPort, debugPort), o.peer)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", peer.name, err)
	}
	peer.pid = cmd.Process.Pid

	sluice := &rlsServer{name: "Sluice", addr: freeAddr(), limits: true, pprof: freeAddr()}
	pdir := filepath.Join(ps.dir, "rls-policies")
	for _, files := range []map[string]string{sluicePolicies, holdPolicies} {
		if err := writeFiles(pdir, files); err != nil {
			return nil, err
		}
	}
	cmd, err = ps.start(o.manager, "local", "--policies", pdir, "--listen", freeAddr(), "--grpc-listen", sluice.addr,
		"--rls-domain", "bench=bench", "--rls-domain", "bench-deny=bench-deny",
		"--rls-domain", "bench-bucket=bench-bucket", "--rls-domain", "bench-hold=bench-hold",
		"--rls-domain", "bench-reserve=bench-reserve",
		"--redis-url", "redis://"+redisAddr, "--pprof-listen", sluice.pprof)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", sluice.name, err)
	}
	sluice.pid = cmd.Process.Pid

	servers := []*rlsServer{bare, peer, sluice}
	for _, s := range servers {
		// A descriptor nothing limits: answered OK by all once they serve.
		probe := rlsRequest("bench", []string{"generic_key", "probe"})
		if err := waitFor(func() error {
			return mustAnswer(s.addr, rlsExchange{"a descriptor nothing limits", probe, rlsv3.RateLimitResponse_OK})
		}); err != nil {
			return nil, fmt.Errorf("%s did not start: %w (logs in %s)", s.name, err, ps.dir)
		}
	}
	return servers, nil
}

func writeFiles(dir string, files map[string]string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// rlsResults are the samples of each scenario (outer) on each server.
type rlsResults struct {
	servers []*rlsServer
	// profiles are `go tool pprof -top` of Sluice under each scenario's
	// load, with -rls-profile.
	profiles []string
}

// runRLS is the RLS part: servers, warm-up, checked answers, interleaved
// rounds, and with -rls-profile a CPU profile of Sluice allowing one
// descriptor.
func runRLS(ps *processes, o options, redisAddr string, redisPid int, rdb *redis.Client) (rlsResults, error) {
	var res rlsResults
	protoset := filepath.Join(ps.dir, "rls.protoset")
	if err := writeProtoset(protoset); err != nil {
		return res, fmt.Errorf("protoset: %w", err)
	}
	for _, sc := range rlsScenarios {
		if err := sc.writeData(ps.dir); err != nil {
			return res, err
		}
	}
	servers, err := ps.startRLSServers(o, redisAddr)
	if err != nil {
		return res, err
	}
	res.servers = servers
	load := func(s *rlsServer, sc *rlsScenario) ghzRun {
		return ghzRun{ghz: o.ghz, protoset: protoset, addr: s.addr, data: sc.data,
			concurrency: rlsConcurrency, conns: rlsConns, d: o.duration}
	}
	for _, s := range servers {
		for _, sc := range rlsScenarios {
			s.runs = append(s.runs, &config{name: sc.name + " — " + s.name, pid: s.pid})
			s.lean = append(s.lean, &config{name: sc.name + " — " + s.name + " (lean)", pid: s.pid})
		}
	}
	if err := rlsWarmUp(ps.dir, servers, load); err != nil {
		return res, err
	}
	if err := holdWarmUp(ps.dir, servers[2]); err != nil {
		return res, err
	}
	if err := checkAnswers(servers); err != nil {
		return res, err
	}
	if err := rlsRounds(ps.dir, o, servers, load, redisPid, rdb); err != nil {
		return res, err
	}
	// The allowing runs must have stayed allowing, the flood denying.
	if err := checkAnswers(servers); err != nil {
		return res, fmt.Errorf("after the rounds: %w", err)
	}
	if o.rlsProfile != "" {
		res.profiles, err = rlsProfiles(o, servers[2])
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// rlsWarmUp makes two passes over every client, so connections and pools
// are open and in the denial flood every bucket is over its limit and has
// been denied once already (the peer's local cache and Sluice's deny cache
// hold a key from its first denial on).
func rlsWarmUp(dir string, servers []*rlsServer, load func(*rlsServer, *rlsScenario) ghzRun) error {
	fmt.Fprintf(os.Stderr, "bench: RLS warm-up, %d requests per scenario and server\n", 2*rlsClients)
	for _, s := range servers {
		for _, sc := range rlsScenarios {
			g := load(s, sc)
			g.requests = 2 * rlsClients
			if _, err := g.run(dir); err != nil {
				return fmt.Errorf("warm-up %s, %s: %w", s.name, sc.name, err)
			}
		}
	}
	return nil
}

// rlsRounds measures every scenario on every server, interleaved, o.rounds
// times: with ghz, and with -rls-lean the lean generator too.
func rlsRounds(dir string, o options, servers []*rlsServer, load func(*rlsServer, *rlsScenario) ghzRun, redisPid int, rdb *redis.Client) error {
	fmt.Fprintf(os.Stderr, "bench: RLS %d rounds × %d scenarios × %d servers × %s, ghz -c%d --connections %d, %d clients\n",
		o.rounds, len(rlsScenarios), len(servers), o.duration, rlsConcurrency, rlsConns, rlsClients)
	for r := 1; r <= o.rounds; r++ {
		for i, sc := range rlsScenarios {
			for _, s := range servers {
				type run struct {
					c    *config
					load func() (wrkResult, error)
				}
				runs := []run{{s.runs[i], func() (wrkResult, error) { return load(s, sc).run(dir) }}}
				if o.rlsLean {
					runs = append(runs, run{s.lean[i], func() (wrkResult, error) {
						return grpcLoad(s.addr, sc.data, rlsConcurrency, rlsConns, 1, o.duration)
					}})
				}
				for _, l := range runs {
					smp, err := measure(l.c, redisPid, rdb, l.load)
					if err != nil {
						return fmt.Errorf("%s: %w", l.c.name, err)
					}
					l.c.rounds = append(l.c.rounds, smp)
					fmt.Fprintf(os.Stderr, "  round %d  %-68s %9.0f req/s  p99 %s\n", r, l.c.name, smp.rps, round(smp.p99))
				}
			}
		}
		if err := holdRound(r, o, servers[2], redisPid, rdb); err != nil {
			return err
		}
	}
	return nil
}

// rlsProfiles are `go tool pprof -top` of Sluice under each scenario's
// load from the lean generator.
func rlsProfiles(o options, sluice *rlsServer) ([]string, error) {
	var profiles []string
	for _, sc := range rlsScenarios {
		name := strings.TrimSuffix(filepath.Base(sc.data), ".json")
		top, err := profileUnderLoad(sluice.pprof, o.manager, profileFile(o.rlsProfile, name), sc.name+" (lean generator)", o.duration, func() (float64, error) {
			w, err := grpcLoad(sluice.addr, sc.data, rlsConcurrency, rlsConns, 1, o.duration)
			return w.rps, err
		})
		if err != nil {
			return profiles, fmt.Errorf("profile: %w", err)
		}
		profiles = append(profiles, top)
	}
	return profiles, nil
}

// checkAnswers asks each limiting server request 0 of each scenario: a
// scenario measured on a server that answers otherwise measures nothing.
func checkAnswers(servers []*rlsServer) error {
	for _, s := range servers {
		if !s.limits {
			continue
		}
		var exchanges []rlsExchange
		for _, sc := range rlsScenarios {
			exchanges = append(exchanges, rlsExchange{sc.name, sc.probe(0), sc.want})
		}
		if err := mustAnswer(s.addr, exchanges...); err != nil {
			return fmt.Errorf("%s, %w", s.name, err)
		}
	}
	return nil
}

// renderRLS is the RLS part's section of the report.
func renderRLS(res rlsResults, rounds int, d time.Duration) string {
	var b strings.Builder
	fmt.Fprintln(&b, "\n## Envoy Rate Limit Service v3 (gRPC ShouldRateLimit)")
	fmt.Fprintf(&b, "\nLoad: ghz -c%d --connections %d (an Envoy with 2 workers holds one connection each to its rate limit cluster), %s per configuration, %d interleaved rounds (medians); "+
		"the requests cycle through %d client values (10.0.x.y), in the three-descriptor request with 1,000 users and 10 routes. "+
		"Servers: a bare grpc-go server answering OK with Sluice's transport options (the ceiling); envoyproxy/ratelimit's service_cmd (the peer; fixed windows in Redis, INCRBY+EXPIRE pipelined per request, its over-limit local cache on); "+
		"Sluice `manager local --grpc-listen --rls-domain`; the peer and Sluice on the same Redis, clock-aligned fixed windows of the same size "+
		"(%d a minute allowing, 1 a day for the flood). Calls ghz cut at the end of a run (its connections closed under them) are not counted as failed.\n\n",
		rlsConcurrency, rlsConns, d, rounds, rlsClients, allowLimit)
	renderRLSTable(&b, res.servers, func(s *rlsServer) []*config { return s.runs })
	fmt.Fprintln(&b, "\n### RLS targets (ratios from this run, ghz)")
	renderRLSTargets(&b, res.servers, func(s *rlsServer) []*config { return s.runs })

	if len(res.servers[0].lean[0].rounds) > 0 {
		fmt.Fprintf(&b, "\n### The same with a lean generator\n\n"+
			"ghz spends more CPU per call than any of the servers, and it shares the 2 CPUs with them, so its figures are mostly its own. "+
			"`bench grpc-load` sends the same requests (same data file, %d calls in flight over %d connections, closed loop) from grpc-go with each request marshaled once and the answers left unparsed; "+
			"its runs are interleaved with ghz's in the same rounds. Server and Redis CPU per call do not depend on the generator.\n\n", rlsConcurrency, rlsConns)
		renderRLSTable(&b, res.servers, func(s *rlsServer) []*config { return s.lean })
		fmt.Fprintln(&b, "\nTargets with the lean generator:")
		renderRLSTargets(&b, res.servers, func(s *rlsServer) []*config { return s.lean })
	}
	renderHolds(&b)
	for _, p := range res.profiles {
		fmt.Fprintf(&b, "\n### CPU profile of Sluice\n\n```\n%s```\n", p)
	}
	return b.String()
}

// renderRLSTable writes one row per scenario and server; runs picks the
// generator's samples.
func renderRLSTable(b *strings.Builder, servers []*rlsServer, runs func(*rlsServer) []*config) {
	fmt.Fprintln(b, "| scenario | server | req/s | p50 | p99 | server CPU µs/req | Redis CPU µs/req | Redis calls/req | Redis cmds/req (incl. in scripts) | generator CPU µs/req | failed calls | × ceiling | × peer |")
	fmt.Fprintln(b, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	bare, peer := runs(servers[0]), runs(servers[1])
	for i, sc := range rlsScenarios {
		for _, s := range servers {
			c := runs(s)[i]
			var failed int64
			for _, smp := range c.rounds {
				failed += smp.non2xx
			}
			fmt.Fprintf(b, "| %s | %s | %.0f | %s | %s | %.1f | %.1f | %.3f | %.3f | %.1f | %d | %.2f | %.2f |\n",
				sc.name, s.name, medianRPS(c), round(medianP50(c)), round(medianP99(c)),
				serverCPUPerRequest(c), redisCPUPerRequest(c), redisCallsPerRequest(c), redisCmdsPerRequest(c),
				perRequest(c, func(s sample) float64 { return micros(s.clientCPU) }),
				failed, medianRPS(c)/medianRPS(bare[i]), medianRPS(c)/medianRPS(peer[i]))
		}
	}
}

// renderRLSTargets writes the targets as ratios of runs: Sluice against
// the bare ceiling and against its own one-descriptor rate, with the
// peer's ratios beside them.
func renderRLSTargets(b *strings.Builder, servers []*rlsServer, runs func(*rlsServer) []*config) {
	bare, peer, sluice := runs(servers[0]), runs(servers[1]), runs(servers[2])
	one, three, deny := 0, 1, 2
	r := medianRPS(sluice[one]) / medianRPS(bare[one])
	fmt.Fprintf(b, "- One descriptor, allowing, ≥ 0.8 × bare gRPC ceiling: %.2f × — %s (× envoyproxy/ratelimit: %.2f; p99 %s vs its %s)\n",
		r, verdict(r >= 0.8), medianRPS(sluice[one])/medianRPS(peer[one]), round(medianP99(sluice[one])), round(medianP99(peer[one])))
	r = medianRPS(sluice[three]) / medianRPS(sluice[one])
	fmt.Fprintf(b, "- Three descriptors ≥ 0.9 × one descriptor: %.2f × — %s (envoyproxy/ratelimit: %.2f ×)\n",
		r, verdict(r >= 0.9), medianRPS(peer[three])/medianRPS(peer[one]))
	r = medianRPS(sluice[deny]) / medianRPS(bare[deny])
	fmt.Fprintf(b, "- Denial flood ≥ 0.9 × bare gRPC ceiling: %.2f × — %s (envoyproxy/ratelimit: %.2f ×)\n",
		r, verdict(r >= 0.9), medianRPS(peer[deny])/medianRPS(bare[deny]))
}
