package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/overrides"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
)

type memoryResult struct {
	memstoreBytesPerKey float64
	redisBytesPerKey    map[ratelimit.Algorithm]float64
}

// measureMemory fills the memory store with 1,000,000 live keys, and
// Redis with 100,000 live keys of each algorithm, and reports the bytes
// each key costs.
func measureMemory(redisAddr string) (memoryResult, error) {
	res := memoryResult{redisBytesPerKey: map[ratelimit.Algorithm]float64{}}
	limit := ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Capacity: 100, Rate: 1, Interval: time.Hour}

	const memKeys = 1_000_000
	store := memstore.New()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	req := ratelimit.Request{Entries: make([]ratelimit.Entry, 1)}
	var dec ratelimit.Decision
	for i := 0; i < memKeys; i++ {
		req.Entries[0] = ratelimit.Entry{Key: ratelimit.Key("bench", "mem", strconv.Itoa(i), "l"), Limit: limit, Cost: 1}
		if err := store.Check(context.Background(), 0, &req, &dec); err != nil {
			return res, err
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if store.Len() != memKeys {
		return res, fmt.Errorf("memory store holds %d keys, want %d", store.Len(), memKeys)
	}
	res.memstoreBytesPerKey = float64(after.HeapAlloc-before.HeapAlloc) / memKeys
	store.Close()

	client := redisstore.NewClient(&redis.UniversalOptions{Addrs: []string{redisAddr}})
	defer client.Close()
	rs, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		return res, err
	}
	defer rs.Close()
	const redisKeys = 100_000
	for _, alg := range ratelimit.Algorithms {
		l := ratelimit.Limit{Algorithm: alg, Capacity: 100, Interval: time.Hour}
		switch alg {
		case ratelimit.TokenBucket, ratelimit.LeakyBucket, ratelimit.GCRA:
			l.Rate = 1
		case ratelimit.Calendar:
			l = ratelimit.CalendarLimit(100, ratelimit.Day, time.UTC)
		}
		if err := client.FlushAll(context.Background()).Err(); err != nil {
			return res, err
		}
		used0, err := usedMemory(client)
		if err != nil {
			return res, err
		}
		var wg sync.WaitGroup
		errc := make(chan error, 16)
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				req := ratelimit.Request{Entries: make([]ratelimit.Entry, 1)}
				var dec ratelimit.Decision
				for i := w; i < redisKeys; i += 16 {
					// A holder for Concurrency (one request in flight per key); the others ignore it.
					req.Entries[0] = ratelimit.Entry{Key: ratelimit.Key("bench", "mem", "10.0."+strconv.Itoa(i), "l"), Limit: l, Cost: 1, Holder: "h"}
					if err := rs.Check(context.Background(), 0, &req, &dec); err != nil {
						errc <- err
						return
					}
				}
			}(w)
		}
		wg.Wait()
		close(errc)
		if err := <-errc; err != nil {
			return res, err
		}
		used1, err := usedMemory(client)
		if err != nil {
			return res, err
		}
		res.redisBytesPerKey[alg] = float64(used1-used0) / redisKeys
	}
	return res, client.FlushAll(context.Background()).Err()
}

func usedMemory(c redis.UniversalClient) (int64, error) {
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no used_memory in INFO")
}

// reportHeader is the report's title and the machine.
func reportHeader() string {
	redisVersion, _ := exec.Command("redis-server", "--version").Output()
	return fmt.Sprintf("# Sluice check-path benchmark, %s\n\nMachine: %d CPUs, %s, %s; the load generator, the servers and Redis share the CPUs. Load average at the start: %s.\n",
		time.Now().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), runtime.Version(), strings.TrimSpace(string(redisVersion)), loadAverage())
}

// loadAverage is the machine's load average over 1, 5 and 15 minutes,
// which says how much other work shared the CPUs with a run.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if fields := strings.Fields(string(b)); err == nil && len(fields) >= 3 {
		return strings.Join(fields[:3], ", ")
	}
	return "unknown"
}

func renderReport(h httpConfigs, half halfLoad, mem memoryResult, ov overridesCost, profiles []string, rounds int, d time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## HTTP check endpoint (ingress-nginx auth-url)\n\nLoad: wrk -t2 -c50, %s per configuration, %d interleaved rounds (medians), ingress-nginx auth-url headers, 10,000 client IPs. "+
		"Two ceilings: bare net/http and bare fasthttp servers answering 200 with their default options (Sluice's check routes are fasthttp handlers).\n\n", d, rounds)
	fmt.Fprintln(&b, "| configuration | req/s | p50 | p99 | server CPU µs/req | Redis CPU µs/req | Redis calls/decision | Redis cmds/decision (incl. in scripts) | × net/http ceiling | × fasthttp ceiling | × baseline |")
	fmt.Fprintln(&b, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	ceiling, fastCeiling, baseline := medianRPS(h.bare), medianRPS(h.bareFast), medianRPS(h.naive)
	for _, c := range h.all() {
		rps := medianRPS(c)
		fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %.1f | %.1f | %.3f | %.3f | %.2f | %.2f | %.2f |\n",
			c.name, rps, round(medianP50(c)), round(medianP99(c)), serverCPUPerRequest(c), redisCPUPerRequest(c),
			redisCallsPerRequest(c), redisCmdsPerRequest(c), rps/ceiling, rps/fastCeiling, rps/baseline)
	}
	fmt.Fprintf(&b, "\nLatency at half the allowing throughput (%d req/s), Sluice allowing:\n", half.rate)
	fmt.Fprintf(&b, "- wrk closed loop, -t1 -c%d (the fewest connections reaching that rate): %.0f req/s, p50 %s, p99 %s.\n",
		half.closedConn, half.closed.rps, round(half.closed.p50), round(half.closed.p99))
	fmt.Fprintf(&b, "- open loop at exactly that rate (%d connections, each request's latency counted from its due time): p50 %s, p99 %s, %d requests, %d errors; "+
		"the bare servers under the same generator at the same rate (the floor this machine and generator set): net/http p50 %s, p99 %s (%d errors); fasthttp p50 %s, p99 %s (%d errors).\n",
		half.open.conns, round(half.open.p50), round(half.open.p99), half.open.sent, half.open.errors,
		round(half.bare.p50), round(half.bare.p99), half.bare.errors, round(half.bareFast.p50), round(half.bareFast.p99), half.bareFast.errors)

	fmt.Fprintf(&b, "\nMemory: the in-memory store holds 1,000,000 live token-bucket keys at %.0f bytes each. Redis, per live key (100,000 keys each): ", mem.memstoreBytesPerKey)
	var parts []string
	for _, alg := range ratelimit.Algorithms {
		parts = append(parts, fmt.Sprintf("%s %.0f B", alg, mem.redisBytesPerKey[alg]))
	}
	fmt.Fprintf(&b, "%s.\n", strings.Join(parts, ", "))

	fmt.Fprintln(&b, "\n### Targets (ratios from this run)")
	allow, three, deny := medianRPS(h.allow), medianRPS(h.three), medianRPS(h.deny)
	fmt.Fprintf(&b, "- Allowing, one limit ≥ 0.55 × the bare net/http ceiling: %.2f × — %s (× the fasthttp ceiling: %.2f)\n",
		allow/ceiling, verdict(allow >= 0.55*ceiling), allow/fastCeiling)
	calendar := medianRPS(h.calendar)
	fmt.Fprintf(&b, "- A calendar quota allowing ≥ 0.9 × the token bucket: %.2f × — %s\n", calendar/allow, verdict(calendar >= 0.9*allow))
	fmt.Fprintf(&b, "- Three limits ≥ 0.9 × one limit: %.2f × — %s\n", three/allow, verdict(three >= 0.9*allow))
	// Both per decision, so the ratio is Redis's work for one decision
	// with three limits against one with one, whatever the throughputs.
	cpuOne, cpuThree := redisCPUPerRequest(h.allow), redisCPUPerRequest(h.three)
	fmt.Fprintf(&b, "- Redis CPU per decision, three limits ≤ 1.3 × one limit's: %.1f µs vs %.1f µs, %.2f × — %s\n",
		cpuThree, cpuOne, cpuThree/cpuOne, verdict(cpuOne > 0 && cpuThree <= 1.3*cpuOne))
	// A p99 of answers that were errors, or of requests never sent, says
	// nothing: errors fail the target.
	openErrs := ""
	if half.open.errors > 0 {
		openErrs = fmt.Sprintf(", %d errors", half.open.errors)
	}
	fmt.Fprintf(&b, "- Open-loop p99 at half the allowing rate ≤ 1.5 × the bare net/http server's under the same generator: %s vs %s, %.2f ×%s — %s (bare fasthttp %s, %.2f ×)\n",
		round(half.open.p99), round(half.bare.p99), float64(half.open.p99)/float64(half.bare.p99), openErrs,
		verdict(half.open.errors == 0 && half.bare.p99 > 0 && float64(half.open.p99) <= 1.5*float64(half.bare.p99)),
		round(half.bareFast.p99), float64(half.open.p99)/float64(half.bareFast.p99))
	leased, hot := medianRPS(h.hotLeased), medianRPS(h.hotExact)
	fmt.Fprintf(&b, "- Leased, one hot global key ≥ 0.8 × the bare net/http ceiling: %.2f × — %s (× the same key exact: %.2f; Redis calls per decision %.4f)\n",
		leased/ceiling, verdict(leased >= 0.8*ceiling), leased/hot, redisCallsPerRequest(h.hotLeased))
	penalty := medianRPS(h.penalty)
	fmt.Fprintf(&b, "- Penalty box, allowing ≥ 0.9 × the token bucket alone: %.2f × — %s (Redis CPU per decision %.1f µs vs %.1f µs)\n",
		penalty/allow, verdict(penalty >= 0.9*allow), redisCPUPerRequest(h.penalty), cpuOne)
	overridden := medianRPS(h.overridden)
	fmt.Fprintf(&b, "- %s declared overrides (%d RateLimitOverrides files, half the 10,000 client IPs overridden), allowing ≥ 0.9 × the token bucket alone: %.2f × — %s (server CPU per decision %.1f µs vs %.1f µs)\n",
		thousands(overrides.MaxPerPolicy), overrides.MaxPerPolicy/overridesPerObject, overridden/allow, verdict(overridden >= 0.9*allow), serverCPUPerRequest(h.overridden), serverCPUPerRequest(h.allow))
	fmt.Fprintf(&b, "  - Their memory: the check process's resident set %s with the policy alone (after a warm-up load), %s once the overrides were in force (%.1f s after the files were written), %s after the rounds: %.0f bytes per override; Redis holds them in %s (%.0f bytes each), and its longest command while they were written and read took %s\n",
		mib(ov.rssBefore), mib(ov.rssLoaded), ov.applied.Seconds(), mib(ov.rssAfter), float64(ov.rssAfter-ov.rssBefore)/overrides.MaxPerPolicy,
		mib(ov.redisBytes), float64(ov.redisBytes)/overrides.MaxPerPolicy, round(ov.redisLongest))
	traced := medianRPS(h.traced)
	fmt.Fprintf(&b, "- Every check traced (sampled, exported over OTLP/gRPC), allowing: %.2f × the untraced token bucket, server CPU per decision %.1f µs vs %.1f µs (the cost; tracing off is the token bucket's row)\n",
		traced/allow, serverCPUPerRequest(h.traced), serverCPUPerRequest(h.allow))
	denyCalls := redisCallsPerRequest(h.deny)
	fmt.Fprintf(&b, "- Denial flood ≥ 0.85 × the bare net/http ceiling: %.2f × — %s (× the fasthttp ceiling: %.2f); Redis calls per denied request %.4f (< 0.05) — %s\n",
		deny/ceiling, verdict(deny >= 0.85*ceiling), deny/fastCeiling, denyCalls, verdict(denyCalls < 0.05))
	for _, p := range profiles {
		fmt.Fprintf(&b, "\n### CPU profile of Sluice\n\n```\n%s```\n", p)
	}
	return b.String()
}

// thousands renders n with commas between its thousands.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// mib renders a number of bytes in MiB.
func mib(bytes int64) string { return fmt.Sprintf("%.1f MiB", float64(bytes)/(1<<20)) }

// verdict is a target's word in the report.
func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
