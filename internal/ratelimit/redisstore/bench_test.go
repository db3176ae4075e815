package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

var benchLimits = []ratelimit.Limit{
	{Algorithm: ratelimit.TokenBucket, Capacity: 1000, Rate: 100, Interval: time.Second},
	{Algorithm: ratelimit.SlidingWindowCounter, Capacity: 100000, Interval: time.Hour},
	{Algorithm: ratelimit.GCRA, Capacity: 50, Rate: 100, Interval: time.Second},
}

func benchRequest(value string, n int) *ratelimit.Request {
	req := &ratelimit.Request{}
	for i := range n {
		l := benchLimits[i]
		req.Entries = append(req.Entries, ratelimit.Entry{Key: ratelimit.Key("bench", "p", value, l.Algorithm.String()), Limit: l, Cost: 1})
	}
	return req
}

// policyLimits are the limits of hack/bench's policies: "allow" has the
// first, "three" all of them; they always allow.
var policyLimits = []struct {
	name  string
	limit ratelimit.Limit
}{
	{"burst", ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Capacity: 1_000_000_000, Rate: 1_000_000, Interval: time.Second}},
	{"minute", ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 1_000_000_000, Interval: time.Minute}},
	{"day", ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 1_000_000_000, Interval: 24 * time.Hour}},
}

func policyRequest(value string, n int) *ratelimit.Request {
	req := &ratelimit.Request{}
	for _, l := range policyLimits[:n] {
		req.Entries = append(req.Entries, ratelimit.Entry{Key: ratelimit.Key("bench", "three", value, l.name), Limit: l.limit, Cost: 1})
	}
	return req
}

// BenchmarkCheck: one request of one or three limits against a local
// redis-server (a token bucket, a sliding window counter and GCRA; and
// hack/bench's policies: a token bucket, and a token bucket with two fixed
// windows), sequential (one round trip per op: latency) and from many
// goroutines (pipelined and merged by the store: throughput). Besides time
// and allocations it reports the server's own time in the library per
// decision (redis-µs/op, from INFO commandstats: FCALL, inner commands
// included), the server's CPU per decision (redis-cpu-µs/op: the change of
// used_cpu_user+used_cpu_sys, everything Redis did, network included),
// calls per pipeline and calls per command (merging).
func BenchmarkCheck(b *testing.B) {
	srv, s := benchStore(b)
	for _, c := range []struct {
		name string
		n    int
		req  func(value string, n int) *ratelimit.Request
	}{
		{"entries=1", 1, benchRequest},
		{"entries=3", 3, benchRequest},
		{"policy=one", 1, policyRequest},
		{"policy=three", 3, policyRequest},
	} {
		n, request := c.n, c.req
		b.Run(c.name, func(b *testing.B) {
			req := request("seq", n)
			var dec ratelimit.Decision
			cpu := resetStats(b, srv)
			for b.Loop() {
				if err := s.Check(context.Background(), 0, req, &dec); err != nil {
					b.Fatal(err)
				}
			}
			reportRedisTime(b, srv, cpu)
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			before := s.Stats()
			cpu := resetStats(b, srv)
			checkInParallel(b, s, request, n)
			reportRedisTime(b, srv, cpu)
			st := s.Stats()
			if p := st.Pipelines - before.Pipelines; p > 0 {
				b.ReportMetric(float64(st.Calls-before.Calls)/float64(p), "calls/pipeline")
			}
			if c := st.Commands - before.Commands; c > 0 {
				b.ReportMetric(float64(st.Calls-before.Calls)/float64(c), "calls/command")
			}
		})
	}
}

// benchStore is a store over a redis-server of the benchmark's own, its
// library loaded.
func benchStore(b *testing.B) (*redistest.Server, *redisstore.Store) {
	srv := redistest.Start(b)
	return srv, loadedStore(b, &redis.UniversalOptions{Addrs: []string{srv.Addr()}, DisableIdentity: true})
}

// loadedStore is a store on a client of opts, its library loaded.
func loadedStore(b *testing.B, opts *redis.UniversalOptions) *redisstore.Store {
	c := redisstore.NewClient(opts)
	b.Cleanup(func() { _ = c.Close() })
	s, err := redisstore.New(c, redisstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	if err := s.EnsureLoaded(context.Background()); err != nil {
		b.Fatal(err)
	}
	return s
}

// checkInParallel runs b.N checks from 32 goroutines per CPU, each over
// its own 100 key values of request(value, n).
func checkInParallel(b *testing.B, s *redisstore.Store, request func(value string, n int) *ratelimit.Request, n int) {
	var next atomic.Int64
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		reqs := make([]*ratelimit.Request, 100)
		base := next.Add(1) * 100
		for i := range reqs {
			reqs[i] = request(fmt.Sprint(base+int64(i)), n)
		}
		var dec ratelimit.Decision
		for i := 0; pb.Next(); i++ {
			if err := s.Check(context.Background(), 0, reqs[i%len(reqs)], &dec); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// resetStats clears the server's command statistics and returns its CPU
// time so far (µs).
func resetStats(b *testing.B, srv *redistest.Server) float64 {
	if err := srv.Client().ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	return redisCPU(b, srv)
}

// redisCPU is the server's user and system CPU time so far, in µs.
func redisCPU(b *testing.B, srv *redistest.Server) float64 {
	info, err := srv.Client().Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var us float64
	for _, line := range strings.Split(info, "\r\n") {
		for _, name := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(line, name); ok {
				s, _ := strconv.ParseFloat(v, 64)
				us += s * 1e6
			}
		}
	}
	return us
}

// reportRedisTime reports the time Redis spent in FCALL (the library and
// the commands it runs) per op since resetStats, and its CPU time per op
// since cpu (resetStats' result).
func reportRedisTime(b *testing.B, srv *redistest.Server, cpu float64) {
	b.ReportMetric((redisCPU(b, srv)-cpu)/float64(b.N), "redis-cpu-µs/op")
	info, err := srv.Client().Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		stats, ok := strings.CutPrefix(line, "cmdstat_fcall:")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				usec, _ := strconv.ParseFloat(v, 64)
				b.ReportMetric(usec/float64(b.N), "redis-µs/op")
			}
		}
	}
}

// BenchmarkCheckCluster: requests of one and three limits from many
// goroutines against a Redis Cluster of 3 masters on this machine, key
// values spread over the slots: the store's per-master batching.
func BenchmarkCheckCluster(b *testing.B) {
	cl := redistest.StartCluster(b, 3)
	s := loadedStore(b, &redis.UniversalOptions{Addrs: cl.Addrs(), IsClusterMode: true, DisableIdentity: true})
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("policy=%d/parallel", n), func(b *testing.B) {
			before := s.Stats()
			checkInParallel(b, s, policyRequest, n)
			st := s.Stats()
			if p := st.Pipelines - before.Pipelines; p > 0 {
				b.ReportMetric(float64(st.Calls-before.Calls)/float64(p), "calls/pipeline")
			}
		})
	}
}

// BenchmarkInFlight: a request's life in a concurrency limit against a
// local redis-server, sequentially: its admission (the allowing check,
// comparable to BenchmarkCheck's policy=one), and its admission and
// release (what each request costs in all). Each request has a holder of
// its own; the limit never denies.
func BenchmarkInFlight(b *testing.B) {
	srv, s := benchStore(b)
	l := ratelimit.Limit{Algorithm: ratelimit.Concurrency, Capacity: 1_000_000_000, Interval: time.Minute}
	for _, release := range []bool{false, true} {
		name := "admission"
		if release {
			name = "admission+release"
		}
		b.Run(name, func(b *testing.B) {
			// A bucket of its own per run: a holder takes units once.
			value := name + strconv.FormatInt(time.Now().UnixNano(), 36)
			req := &ratelimit.Request{Entries: []ratelimit.Entry{{Key: ratelimit.Key("bench", "in-flight", value, "l"), Limit: l, Cost: 1}}}
			back := &ratelimit.Request{Entries: req.Entries, Action: ratelimit.Release}
			var dec ratelimit.Decision
			var n int
			cpu := resetStats(b, srv)
			for b.Loop() {
				n++
				req.Entries[0].Holder = strconv.Itoa(n)
				if err := s.Check(context.Background(), 0, req, &dec); err != nil || !dec.Allowed {
					b.Fatal(err, dec.Allowed)
				}
				if !release {
					continue
				}
				if err := s.Check(context.Background(), 0, back, &dec); err != nil || !dec.Allowed {
					b.Fatal(err, dec.Allowed)
				}
			}
			reportRedisTime(b, srv, cpu)
		})
	}
}

// BenchmarkCheckInstructions counts the instructions a redis-server runs
// in FCALL per decision (instr/op: the library, the commands it runs, its
// arguments and reply), under valgrind's callgrind: unlike CPU time, the
// count does not depend on what else the machine runs, so it compares
// versions of the library on shared cores. Each iteration is a batch of 5
// requests merged into one call as flushers merge them (CheckBatch), of
// hack/bench's policies with one and with three limits, over 100 warm key
// values. Skipped without valgrind; slow (Redis runs about 50 times slower
// under it): run it alone, -benchtime 200x is plenty.
func BenchmarkCheckInstructions(b *testing.B) {
	valgrind, err := exec.LookPath("valgrind")
	if err != nil {
		b.Skip("valgrind not found")
	}
	srv := startCallgrind(b, valgrind)
	s := loadedStore(b, &redis.UniversalOptions{Addrs: []string{srv.addr}, DisableIdentity: true})
	const batch = 5
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("policy=%d", n), func(b *testing.B) {
			reqs := make([]*ratelimit.Request, 100)
			for i := range reqs {
				reqs[i] = policyRequest(fmt.Sprint("instr", i), n)
			}
			at, decs := make([]int64, batch), make([]ratelimit.Decision, batch)
			for i := range at {
				at[i] = -1
			}
			ctx := context.Background()
			check := func(i int) {
				from := i * batch % len(reqs)
				if err := s.CheckBatch(ctx, reqs[from:from+batch], at, decs); err != nil {
					b.Fatal(err)
				}
			}
			for i := range len(reqs) / batch { // every bucket written once: warm
				check(i)
			}
			srv.control(b, "-z")
			srv.control(b, "-i", "on")
			i := 0
			for b.Loop() {
				check(i)
				i++
			}
			srv.control(b, "-i", "off")
			b.ReportMetric(srv.instructions(b)/float64(i*batch), "instr/op")
		})
	}
}

// callgrindServer is a redis-server run under callgrind, instrumented only
// between control(-i on) and control(-i off).
type callgrindServer struct {
	addr, dir string
	cmd       *exec.Cmd
}

func startCallgrind(b *testing.B, valgrind string) *callgrindServer {
	port, dir := systest.FreePort(b), b.TempDir()
	cmd := exec.Command(valgrind, "--tool=callgrind", "--instr-atstart=no", "--toggle-collect=fcallCommand", "--callgrind-out-file="+filepath.Join(dir, "cg.out"),
		"redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	srv := &callgrindServer{addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir, cmd: cmd}
	c := redis.NewClient(&redis.Options{Addr: srv.addr})
	defer func() { _ = c.Close() }()
	for deadline := time.Now().Add(30 * time.Second); c.Ping(context.Background()).Err() != nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("redis-server under callgrind did not answer within 30s")
		}
	}
	return srv
}

// control runs callgrind_control with args on the server.
func (s *callgrindServer) control(b *testing.B, args ...string) {
	out, err := exec.Command("callgrind_control", append(args, strconv.Itoa(s.cmd.Process.Pid))...).CombinedOutput()
	if err != nil {
		b.Fatalf("callgrind_control %v: %v: %s", args, err, out)
	}
}

// instructions dumps the counts since the last zeroing and returns their
// total.
func (s *callgrindServer) instructions(b *testing.B) float64 {
	s.control(b, "-d")
	files, _ := filepath.Glob(filepath.Join(s.dir, "cg.out*"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if keep := os.Getenv("SLUICE_CALLGRIND_KEEP"); keep != "" && err == nil { // for callgrind_annotate
			_ = os.WriteFile(keep, data, 0o600)
		}
		_ = os.Remove(f)
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "totals: "); ok {
				if n, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && n > 0 {
					return n
				}
			}
		}
	}
	b.Fatal("no callgrind totals in " + s.dir)
	return 0
}

// budgets are the limits of token budgets the reservation benchmarks
// measure: a token bucket, and a minute's fixed window with a month.
var budgets = []struct {
	name   string
	limits []ratelimit.Limit
}{
	{"tokenbucket", []ratelimit.Limit{policyLimits[0].limit}},
	{"window+month", []ratelimit.Limit{policyLimits[1].limit, ratelimit.CalendarLimit(1_000_000_000, ratelimit.Month, time.UTC)}},
}

// budgetRound is request i's round on a budget of limits, over 100 key
// values: an admission that reserves 1000 units and its settlement at
// 600 (reserve), or an admission of 1000 and a refund of 400 (what a
// charge-then-refund scheme sends). Each request has a holder of its own.
func budgetRound(limits []ratelimit.Limit, reserve bool, i int) (admit, back *ratelimit.Request) {
	value, holder := fmt.Sprint("budget", i%100), fmt.Sprint("req-", i)
	admit, back = &ratelimit.Request{}, &ratelimit.Request{Action: ratelimit.Refund}
	for q, l := range limits {
		e := ratelimit.Entry{Key: ratelimit.Key("bench", "budget", value, fmt.Sprint("l", q)), Limit: l, Cost: 1000}
		a, r := e, e
		r.Cost = 400
		if reserve {
			a.Holder, a.Reserve = holder, 5*time.Minute
			r.Holder, r.Cost = holder, 600
			back.Action = ratelimit.Settle
		}
		admit.Entries, back.Entries = append(admit.Entries, a), append(back.Entries, r)
	}
	return admit, back
}

// BenchmarkReserve: a token budget's round per op (see budgetRound),
// reserve and settle beside admit and refund, sequential (two round trips
// per op) against a local redis-server, with the server's time in the
// library (redis-µs/op) and its CPU (redis-cpu-µs/op).
func BenchmarkReserve(b *testing.B) {
	srv, s := benchStore(b)
	ctx := context.Background()
	for _, budget := range budgets {
		for _, reserve := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/reserve=%v", budget.name, reserve), func(b *testing.B) {
				var dec ratelimit.Decision
				round := func(i int) {
					admit, back := budgetRound(budget.limits, reserve, i)
					for _, req := range []*ratelimit.Request{admit, back} {
						if err := s.Check(ctx, 0, req, &dec); err != nil || !dec.Allowed {
							b.Fatalf("%v: %v %+v", req.Action, err, dec)
						}
					}
				}
				for i := range 100 {
					round(i)
				}
				cpu := resetStats(b, srv)
				i := 100
				for b.Loop() {
					round(i)
					i++
				}
				reportRedisTime(b, srv, cpu)
			})
		}
	}
}

// BenchmarkReserveInstructions counts, as BenchmarkCheckInstructions
// does, the instructions of a token budget's round per op (see
// budgetRound): reserve and settle beside admit and refund.
func BenchmarkReserveInstructions(b *testing.B) {
	valgrind, err := exec.LookPath("valgrind")
	if err != nil {
		b.Skip("valgrind not found")
	}
	srv := startCallgrind(b, valgrind)
	s := loadedStore(b, &redis.UniversalOptions{Addrs: []string{srv.addr}, DisableIdentity: true})
	for _, budget := range budgets {
		for _, reserve := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/reserve=%v", budget.name, reserve), func(b *testing.B) {
				benchRound(b, srv, s, budget.limits, reserve)
			})
		}
	}
}

// benchRound counts the instructions of budgetRound per op.
func benchRound(b *testing.B, srv *callgrindServer, s *redisstore.Store, limits []ratelimit.Limit, reserve bool) {
	ctx := context.Background()
	at, decs := []int64{-1}, make([]ratelimit.Decision, 1)
	round := func(i int) {
		admit, back := budgetRound(limits, reserve, i)
		for _, req := range []*ratelimit.Request{admit, back} {
			if err := s.CheckBatch(ctx, []*ratelimit.Request{req}, at, decs); err != nil || !decs[0].Allowed {
				b.Fatalf("%v: %v %+v", req.Action, err, decs[0])
			}
		}
	}
	for i := range 100 { // every bucket written once: warm
		round(i)
	}
	srv.control(b, "-z")
	srv.control(b, "-i", "on")
	i := 100
	for b.Loop() {
		round(i)
		i++
	}
	srv.control(b, "-i", "off")
	b.ReportMetric(srv.instructions(b)/float64(i-100), "instr/op")
}
