package reliability

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// loadSpec is a bounded open-loop load on the check endpoint: rate checks
// a second, request i asking namespace i%len(namespaces) about the key
// value prefix+n, where n changes every group requests of a namespace, so
// every key value gets exactly group requests within a few milliseconds.
type loadSpec struct {
	rate       int
	namespaces []string
	group      int
	prefix     string
	// max bounds how long the load may run (it sizes the record).
	max time.Duration
}

// sample is one check as the load saw it.
type sample struct {
	at     time.Duration // when it was sent, since the load started
	client time.Duration // until the answer was read, at the load client
	server atomic.Int64  // nanoseconds inside the endpoint's handler
	status int           // HTTP status; 0: not sent (too many in flight); -1: transport error
	// decided: the answer carries rate-limit headers, so Redis (or the
	// cache of its denials) decided it, not the failure mode.
	decided bool
}

func (s *sample) serverTime() time.Duration { return time.Duration(s.server.Load()) }

// preDialed is how many connections the load client dials before a load
// starts: more than the checks in flight while a fault holds every answer
// until the deadline (2,000 a second for 50ms), so the load does not dial
// during the fault. A dial runs socket(2) as a raw system call, which
// keeps its Go P for the whole call; on a 2-CPU machine a burst of dials
// right after a Redis kill can hold one P for tens of milliseconds, and
// the endpoint's timers on that P, the store's deadlines, fire that late:
// the load, in the endpoint's process, would make checks miss the deadline.
const preDialed = 256

// preDialer gives the load client connections dialed beforehand, and
// dials only when they are used up.
type preDialer struct {
	addr  string
	mu    sync.Mutex
	conns []net.Conn
	d     net.Dialer
}

// fill dials until n connections are ready.
func (p *preDialer) fill(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.conns) < n {
		c, err := p.d.Dial("tcp", p.addr)
		if err != nil {
			panic(fmt.Sprintf("pre-dialing the check endpoint %s: %v", p.addr, err)) // loopback, up
		}
		p.conns = append(p.conns, c)
	}
}

// drain closes the connections not taken, so none outlives the load.
func (p *preDialer) drain() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *preDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	p.mu.Lock()
	if n := len(p.conns); n > 0 && addr == p.addr {
		c := p.conns[n-1]
		p.conns = p.conns[:n-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	return p.d.DialContext(ctx, network, addr)
}

// maxInFlight bounds the load's concurrent requests, so a stalled
// endpoint cannot make the load itself the problem.
const maxInFlight = 1000

type load struct {
	spec    loadSpec
	stack   *stack
	start   time.Time
	samples []sample

	sent     int // dispatcher only
	inFlight atomic.Int64
	skipped  atomic.Int64
	// firstSkip and lastSkip are when the first and the last check not
	// sent were due (dispatcher only).
	firstSkip, lastSkip time.Duration

	stopc      chan struct{}
	dispatcher sync.WaitGroup
	requests   sync.WaitGroup
}

// startLoad starts the load; stop ends it and returns the record.
func (s *stack) startLoad(spec loadSpec) *load {
	if spec.group <= 0 {
		spec.group = 1
	}
	n := int(spec.max.Seconds()*float64(spec.rate)) + spec.rate
	s.dialer.fill(preDialed)
	ld := &load{spec: spec, stack: s, samples: make([]sample, n), stopc: make(chan struct{}), start: time.Now()}
	s.current.Store(ld)
	ld.dispatcher.Go(ld.dispatch)
	return ld
}

// since is how long after the load's start t is.
func (ld *load) since(t time.Time) time.Duration { return t.Sub(ld.start) }

// target returns the namespace index and key number of request i.
func (ld *load) target(i int) (ns, key int) {
	n := len(ld.spec.namespaces)
	return i % n, i / n / ld.spec.group
}

func (ld *load) dispatch() {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ld.stopc:
			return
		case <-t.C:
		}
		due := min(int(time.Since(ld.start).Seconds()*float64(ld.spec.rate)), len(ld.samples))
		for ; ld.sent < due; ld.sent++ {
			i := ld.sent
			if ld.inFlight.Load() >= maxInFlight {
				if ld.skipped.Add(1) == 1 {
					ld.firstSkip = ld.since(time.Now())
				}
				ld.lastSkip = ld.since(time.Now())
				continue
			}
			ld.inFlight.Add(1)
			ld.requests.Go(func() { ld.one(i) })
		}
	}
}

func (ld *load) one(i int) {
	defer ld.inFlight.Add(-1)
	ns, key := ld.target(i)
	req, err := http.NewRequest(http.MethodGet, ld.stack.url+"/check/"+ld.spec.namespaces[ns], nil)
	if err != nil {
		panic(err) // a constant URL
	}
	req.Header.Set("X-Forwarded-Method", "GET")
	req.Header.Set("X-Forwarded-Host", "app.example")
	req.Header.Set("X-Forwarded-Uri", "/")
	req.Header.Set("X-Client", ld.spec.prefix+strconv.Itoa(key))
	req.Header.Set("X-Seq", strconv.Itoa(i))
	s := &ld.samples[i]
	start := time.Now()
	s.at = start.Sub(ld.start)
	resp, err := ld.stack.client.Do(req)
	if err != nil {
		s.status, s.client = -1, time.Since(start)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	s.client = time.Since(start)
	s.status = resp.StatusCode
	s.decided = resp.Header.Get("X-Ratelimit-Remaining") != ""
}

// serverTime records the handler's time of the request with X-Seq seq.
func (ld *load) serverTime(seq string, d time.Duration) {
	i, err := strconv.Atoi(seq)
	if err != nil || i < 0 || i >= len(ld.samples) {
		return
	}
	ld.samples[i].server.Store(int64(d))
}

// stop ends the load, waits for the answers in flight and returns the record.
func (ld *load) stop() *record {
	close(ld.stopc)
	ld.dispatcher.Wait()
	ld.requests.Wait()
	ld.stack.dialer.drain()
	ld.stack.current.CompareAndSwap(ld, nil)
	return &record{load: ld, samples: ld.samples[:ld.sent], skipped: int(ld.skipped.Load()), duration: time.Since(ld.start)}
}

// record is what a load saw.
type record struct {
	load     *load
	samples  []sample
	skipped  int
	duration time.Duration
}

// latency is a distribution of answer times.
type latency struct {
	n             int
	p50, p99, max time.Duration
}

func (l latency) String() string {
	return fmt.Sprintf("n=%d p50=%s p99=%s max=%s", l.n, ms(l.p50), ms(l.p99), ms(l.max))
}

func distribution(ds []time.Duration) latency {
	if len(ds) == 0 {
		return latency{}
	}
	slices.Sort(ds)
	q := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return latency{n: len(ds), p50: q(0.5), p99: q(0.99), max: ds[len(ds)-1]}
}

// latencies returns the server-side and client-side answer times of the
// sent checks that keep says to keep (nil: all).
func (r *record) latencies(keep func(i int, s *sample) bool) (server, client latency) {
	var sv, cl []time.Duration
	for i := range r.samples {
		s := &r.samples[i]
		if s.status == 0 || (keep != nil && !keep(i, s)) {
			continue
		}
		sv = append(sv, s.serverTime())
		cl = append(cl, s.client)
	}
	return distribution(sv), distribution(cl)
}

// tally is how one key value of one namespace was answered.
type tally struct {
	ns, key  int
	sent     int
	admitted int // decided 200
	denied   int // decided denial
	failOpen int // undecided 200: the failure mode allowed
	failShut int // undecided denial: the failure mode denied
	errors   int // 5xx, transport errors
	// first and last are when its first request was sent and its last
	// answer came.
	first, last time.Duration
}

func (t *tally) String() string {
	return fmt.Sprintf("ns %d key %d: sent %d admitted %d denied %d fail-open %d fail-closed %d errors %d, from %s to %s",
		t.ns, t.key, t.sent, t.admitted, t.denied, t.failOpen, t.failShut, t.errors, t.first.Round(time.Millisecond), t.last.Round(time.Millisecond))
}

// complete reports whether the key value got all its group's requests.
func (t *tally) complete(group int) bool { return t.sent == group }

// tallies groups the record by key value, in order of first request.
func (r *record) tallies() []*tally {
	byKey := map[[2]int]*tally{}
	var out []*tally
	for i := range r.samples {
		s := &r.samples[i]
		if s.status == 0 {
			continue
		}
		ns, key := r.load.target(i)
		t := byKey[[2]int{ns, key}]
		if t == nil {
			t = &tally{ns: ns, key: key, first: s.at}
			byKey[[2]int{ns, key}] = t
			out = append(out, t)
		}
		t.sent++
		t.last = max(t.last, s.at+s.client)
		switch {
		case s.status < 0 || s.status >= 500:
			t.errors++
		case s.status == http.StatusOK && s.decided:
			t.admitted++
		case s.status == http.StatusOK:
			t.failOpen++
		case s.decided:
			t.denied++
		default:
			t.failShut++
		}
	}
	return out
}

// statusCounts counts the answers by HTTP status per namespace.
func (r *record) statusCounts() map[string]map[int]int {
	out := map[string]map[int]int{}
	for i := range r.samples {
		s := &r.samples[i]
		if s.status == 0 {
			continue
		}
		ns, _ := r.load.target(i)
		name := r.load.spec.namespaces[ns]
		if out[name] == nil {
			out[name] = map[int]int{}
		}
		out[name][s.status]++
	}
	return out
}

// undecided counts the answers not decided by Redis.
func (r *record) undecided() int {
	n := 0
	for i := range r.samples {
		if s := &r.samples[i]; s.status != 0 && !s.decided {
			n++
		}
	}
	return n
}

// lastUndecided returns when the last answer not decided by Redis came.
func (r *record) lastUndecided() time.Duration {
	var last time.Duration
	for i := range r.samples {
		if s := &r.samples[i]; s.status != 0 && !s.decided {
			last = max(last, s.at+s.client)
		}
	}
	return last
}
