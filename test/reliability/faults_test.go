package reliability

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// The fault tests' policies: per-client fixed windows of faultLimit
// requests an hour, one failing open and one failing closed. Each client
// key gets faultGroup requests, so a correct answer is exactly faultLimit
// admitted and the rest denied.
const (
	faultLimit = 20
	faultGroup = 40
)

var faultPolicies = []testPolicy{
	limitPolicy("open", "Open", faultLimit),
	limitPolicy("closed", "Closed", faultLimit),
}

func faultLoad(prefix string, most time.Duration) loadSpec {
	return loadSpec{rate: loadRate, namespaces: []string{"open", "closed"}, group: faultGroup, prefix: prefix, max: most}
}

// newClient is a client as the check and controller processes make them.
func newClient(t testing.TB, addrs ...string) redis.UniversalClient {
	c := redisstore.NewClient(&redis.UniversalOptions{Addrs: addrs})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// warmUp runs a short load so connections exist and the library is
// loaded, then waits until Redis decides checks with the breaker closed
// (on a busy machine the first calls can pass the deadline).
func warmUp(t testing.TB, s *stack, spec loadSpec) {
	t.Helper()
	spec.prefix, spec.max = "warm-", time.Second
	rec := s.startLoad(spec).stopAfter(500 * time.Millisecond)
	if n := rec.undecided(); n > 0 {
		t.Logf("warm-up: %d of %d checks answered by the failure mode (%s)", n, len(rec.samples), &s.store.errs)
	}
	waitUntil(t, 10*time.Second, "Redis decides checks after the warm-up", func() error {
		if st := s.checker.Breaker().State(); st != check.BreakerClosed {
			return fmt.Errorf("breaker %s", st)
		}
		rec := s.startLoad(spec).stopAfter(50 * time.Millisecond)
		if n := rec.undecided(); n > 0 {
			return fmt.Errorf("%d of %d checks answered by the failure mode", n, len(rec.samples))
		}
		return nil
	})
}

func (ld *load) stopAfter(d time.Duration) *record {
	time.Sleep(d)
	return ld.stop()
}

// checkAnswerTimes fails t when a check took longer than the deadline +
// 20ms inside the endpoint, unless this process, or one of its threads,
// waited for a CPU during that check (measured by mon, nil to excuse
// nothing): the product cannot answer while it does not run, and a
// deadline's timer fires only when the thread of its P runs. It logs the
// distributions of each phase.
func checkAnswerTimes(t *testing.T, rec *record, mon *stallMonitor, phases []phase) {
	t.Helper()
	for _, ph := range phases {
		for nsIdx, ns := range rec.load.spec.namespaces {
			sv, cl := rec.latencies(func(i int, s *sample) bool {
				n, _ := rec.load.target(i)
				return n == nsIdx && s.at >= ph.from && s.at < ph.to
			})
			t.Logf("answer times, %-28s %-6s server %s | client %s", ph.name+",", ns+":", sv, cl)
		}
	}
	sv, cl := rec.latencies(nil)
	t.Logf("answer times, all %d checks: server %s | client %s; %d checks not sent (load saturated)", sv.n, sv, cl, rec.skipped)
	over, excused := 0, 0
	for i := range rec.samples {
		s := &rec.samples[i]
		if s.status == 0 || s.serverTime() <= answerBound {
			continue
		}
		ns, key := rec.load.target(i)
		sent := rec.load.start.Add(s.at)
		var stalls []stall
		if mon != nil {
			for _, st := range mon.near(sent.Add(s.serverTime()/2), s.serverTime()/2) {
				if strings.HasPrefix(st.what, "process") {
					stalls = append(stalls, st)
				}
			}
		}
		if len(stalls) > 0 {
			if excused < 5 {
				t.Logf("environment: check %d (%s, key %d, sent at +%s) took %s in the endpoint while the process or one of its threads waited for a CPU: %v",
					i, rec.load.spec.namespaces[ns], key, ms(s.at), ms(s.serverTime()), stalls)
			}
			excused++
			continue
		}
		if over < 5 {
			t.Errorf("check %d (%s, key %d, sent at +%s, status %d) took %s in the endpoint, more than the deadline %s + 20ms",
				i, rec.load.spec.namespaces[ns], key, ms(s.at), s.status, ms(s.serverTime()), redisTimeout)
		}
		over++
	}
	if over > 0 {
		t.Errorf("%d checks took longer than the deadline + 20ms (%d more while the process or one of its threads waited for a CPU)", over, excused)
	} else if excused > 0 {
		t.Logf("environment: %d checks took longer than the deadline + 20ms, each while the process or one of its threads waited for a CPU", excused)
	}
	if rec.skipped > 0 {
		// maxInFlight checks in flight: answers had stopped for a while
		// before the first skip.
		from, to := rec.load.start.Add(rec.load.firstSkip-time.Second), rec.load.start.Add(rec.load.lastSkip)
		var stalls []stall
		if mon != nil {
			stalls = mon.near(from.Add(to.Sub(from)/2), to.Sub(from)/2)
		}
		if len(stalls) > 0 {
			t.Logf("environment: %d checks were not sent, more than %d in flight, from +%s to +%s while the machine stalled: %v",
				rec.skipped, maxInFlight, ms(rec.load.firstSkip), ms(rec.load.lastSkip), stalls[:min(len(stalls), 5)])
		} else {
			t.Errorf("%d checks were not sent: more than %d in flight (from +%s to +%s), and the machine did not stall",
				rec.skipped, maxInFlight, ms(rec.load.firstSkip), ms(rec.load.lastSkip))
		}
	}
}

// phase is a stretch of the load, by send time.
type phase struct {
	name     string
	from, to time.Duration
}

// checkFailureModes checks the answers to checks sent within [from, to)
// and answered before to, while Redis could not answer: the open
// namespace allows (or denies from the cache of denials, which is
// exact), the closed namespace denies. It returns how many it checked.
func checkFailureModes(t *testing.T, rec *record, from, to time.Duration) int {
	t.Helper()
	n, bad := 0, 0
	for i := range rec.samples {
		s := &rec.samples[i]
		if s.status == 0 || s.at < from || s.at+s.client > to {
			continue
		}
		n++
		ns, key := rec.load.target(i)
		var ok bool
		switch rec.load.spec.namespaces[ns] {
		case "open":
			ok = (s.status == http.StatusOK && !s.decided) || (s.status == http.StatusTooManyRequests && s.decided)
		case "closed":
			ok = s.status == http.StatusTooManyRequests
		}
		if !ok {
			if bad < 5 {
				t.Errorf("check %d (%s, key %d) sent at +%s while Redis was away: status %d, decided %v",
					i, rec.load.spec.namespaces[ns], key, s.at.Round(time.Millisecond), s.status, s.decided)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d checks during the fault were not answered by their failure mode", bad, n)
	}
	return n
}

// checkExact checks every key value of the open and closed namespaces
// whose requests all fell outside the fault windows: exactly faultLimit
// admitted, the rest denied, all by Redis. It returns how many it checked.
func checkExact(t *testing.T, rec *record, faults ...phase) int {
	t.Helper()
	n, bad := 0, 0
	for _, tl := range rec.tallies() {
		if ns := rec.load.spec.namespaces[tl.ns]; !tl.complete(rec.load.spec.group) || (ns != "open" && ns != "closed") {
			continue
		}
		overlaps := false
		for _, f := range faults {
			if tl.first < f.to && tl.last > f.from {
				overlaps = true
			}
		}
		if overlaps {
			continue
		}
		n++
		if tl.admitted != faultLimit || tl.denied != faultGroup-faultLimit {
			if bad < 5 {
				t.Errorf("%s: want %d admitted and %d denied", tl, faultLimit, faultGroup-faultLimit)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d key values outside the faults were not decided exactly", bad, n)
	}
	return n
}

// firstExactAfter returns when the first key value whose requests all
// came after from was decided exactly, per namespace (-1 if none).
func firstExactAfter(rec *record, from time.Duration) []time.Duration {
	out := make([]time.Duration, len(rec.load.spec.namespaces))
	for i := range out {
		out[i] = -1
	}
	for _, tl := range rec.tallies() {
		if tl.first < from || !tl.complete(rec.load.spec.group) || out[tl.ns] >= 0 {
			continue
		}
		if tl.admitted == faultLimit && tl.denied == faultGroup-faultLimit {
			out[tl.ns] = tl.last
		}
	}
	return out
}

// firstDecidedAfter returns when the first answer decided by Redis came
// for a check sent after from, per namespace (-1 if none).
func firstDecidedAfter(rec *record, from time.Duration) []time.Duration {
	out := make([]time.Duration, len(rec.load.spec.namespaces))
	for i := range out {
		out[i] = -1
	}
	for i := range rec.samples {
		s := &rec.samples[i]
		if s.status == 0 || s.at < from || !s.decided {
			continue
		}
		ns, _ := rec.load.target(i)
		if end := s.at + s.client; out[ns] < 0 || end < out[ns] {
			out[ns] = end
		}
	}
	return out
}

// checkRecovery checks that decisions were exact again within 5s of
// Redis being back at back, and logs when.
func checkRecovery(t *testing.T, rec *record, back time.Duration, what string) {
	t.Helper()
	decided, exact := firstDecidedAfter(rec, back), firstExactAfter(rec, back)
	for i, ns := range rec.load.spec.namespaces {
		if exact[i] < 0 {
			t.Errorf("%s, %s: no key value was decided exactly after Redis came back", what, ns)
			continue
		}
		t.Logf("%s, %s: first answer by Redis %s after it was back; first key value with exactly %d admitted and %d denied done %s after",
			what, ns, ms(decided[i]-back), faultLimit, faultGroup-faultLimit, ms(exact[i]-back))
		if exact[i]-back > 5*time.Second {
			t.Errorf("%s, %s: correct decisions resumed %s after Redis was back, more than 5s", what, ns, exact[i]-back)
		}
	}
}

func logBreaker(t *testing.T, ld *load, changes []breakerChange) {
	t.Helper()
	var b strings.Builder
	for _, c := range changes {
		fmt.Fprintf(&b, " +%s %s;", ms(ld.since(c.at)), c.state)
	}
	t.Logf("breaker:%s", b.String())
}

// TestRedisKilledUnderLoad kills redis-server under 2,000 checks a second
// and starts it again 5s later (empty: persistence is off), with the
// controller's table sync running beside the check endpoint.
func TestRedisKilledUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("20s of load with redis-server killed")
	}
	srv := redistest.Start(t)
	st := newStack(t, stackOptions{storeClient: newClient(t, srv.Addr()), controllerClient: newClient(t, srv.Addr()), policies: faultPolicies})
	warmUp(t, st, faultLoad("", 0))
	base := st.goroutineBaseline()
	bl := watchBreaker(st.checker.Breaker())
	mon := startStallMonitor(t, srv.Addr())

	ld := st.startLoad(faultLoad("kill-", 20*time.Second))
	time.Sleep(3 * time.Second)
	killAt := ld.since(time.Now())
	srv.Kill()
	killed := ld.since(time.Now())
	time.Sleep(5 * time.Second)
	restartAt := ld.since(time.Now())
	srv.Restart()
	back := ld.since(time.Now())
	time.Sleep(7 * time.Second)
	rec := ld.stop()
	changes := bl.end()
	mon.end()
	t.Logf("load: %d checks in %s; killed at +%s, restart at +%s, answering PING at +%s",
		len(rec.samples), rec.duration.Round(time.Millisecond), ms(killAt), ms(restartAt), ms(back))

	checkAnswerTimes(t, rec, mon, []phase{
		{"before the kill", 0, killAt},
		{"redis-server down", killAt, back},
		{"after the restart", back, rec.duration},
	})
	st.checkPoliciesInForce(t, ld)
	n := checkFailureModes(t, rec, killed, restartAt)
	t.Logf("failure modes: %d checks sent while Redis was down answered by their failureMode; metrics %v", n, st.failureModeAnswers())
	logBreaker(t, ld, changes)
	closedAt, ok := firstChange(changes, check.BreakerClosed, ld.start.Add(back))
	if !ok {
		t.Fatal("the breaker did not close after the restart")
	}
	t.Logf("breaker closed %s after redis-server answered again", ms(ld.since(closedAt)-back))
	checkRecovery(t, rec, back, "after the restart")
	fault := phase{"fault", killAt, ld.since(closedAt)}
	logStalls(t, ld, mon, fault)
	n = checkExact(t, rec, append(environmentalErrors(t, st, mon, ld, fault), fault)...)
	t.Logf("exact: %d key values before the kill and after the breaker closed, each %d admitted and %d denied", n, faultLimit, faultGroup-faultLimit)
	t.Logf("store errors by kind: %s", &st.store.errs)

	// The controller put the table back on the empty server.
	waitUntil(t, syncInterval+2*time.Second, "the table sync restores the policy table and library", func() error {
		return policiesOnNode(context.Background(), srv.Client(), faultPolicies)
	})
	st.goroutinesBackTo(base)
}

// TestRedisFrozenUnderLoad freezes redis-server (SIGSTOP) for 10s under
// 2,000 checks a second, then resumes it. The check path's connections go
// through a counting proxy, so the test sees every command that reached
// Redis during the freeze.
func TestRedisFrozenUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("20s of load with redis-server frozen")
	}
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	st := newStack(t, stackOptions{
		storeClient: newClient(t, proxy.Addr()),
		// The table reader and the controller talk to Redis directly,
		// so the proxy counts the check path's traffic alone.
		tableClient: newClient(t, srv.Addr()), controllerClient: newClient(t, srv.Addr()),
		policies: faultPolicies,
	})
	warmUp(t, st, faultLoad("", 0))
	base := st.goroutineBaseline()
	conns0 := proxy.Open()
	bl := watchBreaker(st.checker.Breaker())
	mon := startStallMonitor(t, srv.Addr())

	ld := st.startLoad(faultLoad("freeze-", 22*time.Second))
	time.Sleep(3 * time.Second)
	freezeAt := ld.since(time.Now())
	srv.Freeze()
	// The stop is certain only once kill(2) has returned: a check sent
	// between freezeAt and frozen may still have been answered by Redis.
	frozen := ld.since(time.Now())
	time.Sleep(10 * time.Second)
	thawAt := ld.since(time.Now())
	srv.Thaw()
	time.Sleep(6 * time.Second)
	rec := ld.stop()
	changes := bl.end()
	mon.end()
	t.Logf("load: %d checks in %s; frozen at +%s, thawed at +%s", len(rec.samples), rec.duration.Round(time.Millisecond), ms(freezeAt), ms(thawAt))

	checkAnswerTimes(t, rec, mon, []phase{
		{"before the freeze", 0, freezeAt},
		{"redis-server frozen", freezeAt, thawAt},
		{"after SIGCONT", thawAt, rec.duration},
	})
	st.checkPoliciesInForce(t, ld)
	n := checkFailureModes(t, rec, frozen, thawAt)
	t.Logf("failure modes: %d checks sent during the freeze answered by their failureMode; metrics %v", n, st.failureModeAnswers())
	logBreaker(t, ld, changes)

	openAt, ok := firstChange(changes, check.BreakerOpen, ld.start.Add(freezeAt))
	if !ok || ld.since(openAt) > thawAt {
		t.Fatal("the breaker did not open during the freeze")
	}
	t.Logf("breaker opened %s after the freeze", ms(ld.since(openAt)-freezeAt))
	closedAt, ok := firstChange(changes, check.BreakerClosed, ld.start.Add(thawAt))
	if !ok {
		t.Fatal("the breaker did not close after SIGCONT")
	}
	t.Logf("breaker closed %s after SIGCONT", ms(ld.since(closedAt)-thawAt))
	if d := ld.since(closedAt) - thawAt; d > breakerCooldown+time.Second {
		t.Errorf("the breaker closed %s after SIGCONT, want within one cooldown (%s) and a call", d, breakerCooldown)
	}

	// What reached Redis during the freeze: the calls in flight before the
	// breaker opened, then probes. Commands close together (a connection's
	// HELLO and its call, a pipeline) are one attempt.
	var before, during []redistest.Command
	for _, c := range proxy.Commands() {
		switch at := ld.since(c.At); {
		case at < freezeAt || at >= thawAt:
		case c.At.Before(openAt):
			before = append(before, c)
		default:
			during = append(during, c)
		}
	}
	attempts := groupAttempts(during, 100*time.Millisecond)
	open := thawAt - ld.since(openAt)
	allowed := int(math.Ceil(float64(open)/float64(breakerCooldown))) + 1
	t.Logf("commands that reached Redis during the freeze: %d (%s) before the breaker opened; then %d (%s) in %d attempts over %s with the breaker open (allowed: %d, one probe per %s)",
		len(before), countNames(before), len(during), countNames(during), len(attempts), open.Round(time.Millisecond), allowed, breakerCooldown)
	for _, a := range attempts {
		t.Logf("  probe at +%s: %s", ms(ld.since(a[0].At)), countNames(a))
	}
	if len(attempts) > allowed {
		t.Errorf("%d attempts reached Redis while the breaker was open for %s: more than one per %s", len(attempts), open, breakerCooldown)
	}

	checkRecovery(t, rec, thawAt, "after SIGCONT")
	// The freeze's calls and probes ran on SIGCONT against the keys they
	// carried: those keys were counted late, so only keys wholly outside
	// the freeze are held to exact counts.
	fault := phase{"fault", freezeAt, ld.since(closedAt)}
	logStalls(t, ld, mon, fault)
	n = checkExact(t, rec, append(environmentalErrors(t, st, mon, ld, fault), fault)...)
	t.Logf("exact: %d key values before the freeze and after the breaker closed", n)
	t.Logf("store errors by kind: %s", &st.store.errs)
	// The proxy's goroutines come and go with the store's connections,
	// which are bounded on their own: the pool keeps one per flusher once
	// a load has used them all, however many the warm-up happened to open.
	st.goroutinesBackTo(base, "redistest.(*Proxy)")
	bound := max(conns0, redisstore.DefaultFlushers)
	var conns int
	back := waitUntil(t, 30*time.Second, "the store's connections back within their bound", func() error {
		if conns = proxy.Open(); conns > bound {
			return fmt.Errorf("%d connections to Redis from the store (bound %d: one per flusher, or the %d after the warm-up)", conns, bound, conns0)
		}
		return nil
	})
	t.Logf("leaks: %d connections to Redis from the store (%d after the warm-up, bound %d), %d accepted in all; back %s after the load",
		conns, conns0, bound, proxy.Accepted(), back.Round(time.Millisecond))
}

// environmentalErrors classifies the store errors outside the injected
// faults: an error that coincides with a stall of this process or of
// Redis (another process had the CPU) is the deadline doing its job, and
// the key values it touched are left out of the exact counts (returned
// as extra windows); any other fails the test, since nothing explains it
// but the product.
func environmentalErrors(t *testing.T, st *stack, mon *stallMonitor, ld *load, faults ...phase) []phase {
	t.Helper()
	var excluded []phase
	unexplained, explained := 0, 0
	for _, ev := range st.store.errs.between(ld.start, time.Now()) {
		at := ld.since(ev.at)
		inFault := false
		for _, f := range faults {
			if at >= f.from && at < f.to {
				inFault = true
			}
		}
		if inFault {
			continue
		}
		stalls := mon.near(ev.at, redisTimeout+100*time.Millisecond)
		if len(stalls) == 0 {
			if unexplained < 5 {
				t.Errorf("store error (%s) at +%s, outside the injected faults, while neither this process nor Redis stalled",
					ev.kind, ms(at))
			}
			unexplained++
			continue
		}
		if explained < 5 {
			t.Logf("environment: store error (%s) at +%s during a stall of the machine: %v", ev.kind, ms(at), stalls)
		}
		explained++
		excluded = append(excluded, phase{"stall", at - redisTimeout - 100*time.Millisecond, at + breakerCooldown + 200*time.Millisecond})
	}
	if explained > 0 {
		t.Logf("environment: %d store errors outside the faults came with stalls of the machine; their key values are not held to exact counts", explained)
	}
	if unexplained > 0 {
		t.Errorf("%d store errors outside the injected faults are unexplained", unexplained)
	}
	return excluded
}

// logStalls logs the stalls of the machine during the load, outside the
// faults (a frozen Redis answers PING late by design).
func logStalls(t *testing.T, ld *load, mon *stallMonitor, faults ...phase) {
	t.Helper()
	var stalls []stall
	for _, s := range mon.all() {
		at := ld.since(s.at)
		if !slices.ContainsFunc(faults, func(f phase) bool { return at < f.to && at+s.took > f.from }) {
			stalls = append(stalls, s)
		}
	}
	if len(stalls) == 0 {
		t.Logf("environment: no stall of this process or Redis of %s or more, and no thread waiting %s or more for a CPU, outside the faults", stallThreshold, cpuWaitThreshold)
		return
	}
	var worst stall
	for _, s := range stalls {
		if s.took > worst.took {
			worst = s
		}
	}
	t.Logf("environment: %d stalls (of %s or more, or a thread waiting %s or more for a CPU) outside the faults; the longest at +%s: %s",
		len(stalls), stallThreshold, cpuWaitThreshold, ms(ld.since(worst.at)), worst)
}

// groupAttempts splits commands into runs with gaps of less than gap.
func groupAttempts(cmds []redistest.Command, gap time.Duration) [][]redistest.Command {
	var out [][]redistest.Command
	for i, c := range cmds {
		if i == 0 || c.At.Sub(cmds[i-1].At) >= gap {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], c)
	}
	return out
}

func countNames(cmds []redistest.Command) string {
	counts := map[string]int{}
	var order []string
	for _, c := range cmds {
		if counts[c.Name] == 0 {
			order = append(order, c.Name)
		}
		counts[c.Name]++
	}
	parts := make([]string, len(order))
	for i, n := range order {
		parts[i] = fmt.Sprintf("%s x%d", n, counts[n])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
