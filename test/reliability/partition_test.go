package reliability

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/faultproxy"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// netemProbe says whether tc netem can shape a link on this machine (root,
// ip and tc on PATH, the kernel's netem qdisc), trying it on the loopback
// of a throwaway network namespace.
func netemProbe() error {
	if os.Geteuid() != 0 {
		return errors.New("not root")
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		return errors.New("no ip (iproute2) on PATH")
	}
	tc, err := exec.LookPath("tc")
	if err != nil {
		return errors.New("no tc (iproute2) on PATH")
	}
	ns := fmt.Sprintf("sluice-netem-probe-%d", os.Getpid())
	if out, err := exec.Command(ip, "netns", "add", ns).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns add: %v: %s", err, strings.TrimSpace(string(out)))
	}
	defer func() { _ = exec.Command(ip, "netns", "del", ns).Run() }()
	if out, err := exec.Command(ip, "netns", "exec", ns, tc, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms").CombinedOutput(); err != nil {
		return fmt.Errorf("tc qdisc add dev lo root netem: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// openFDs counts this process's open file descriptors.
func openFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestPartitionsAndSlowLinks puts the link between the check process and
// Redis through faults under 2,000 checks a second, 6s each, then heals
// it: a blackhole (a partition that drops everything), resets (a peer or
// firewall rejecting), 80ms of added round trip (over the 50ms deadline)
// and 20% segment loss. Both of the check process's links, the check
// path's and the policy table reader's, go through the fault; the
// controller's table sync reaches Redis directly (another pod).
//
// Every check is answered within the deadline (+20ms), by Redis or by its
// policy's failureMode; while every call fails, the breaker opens and
// lets through one probe a second; it closes within a second of the heal,
// and decisions are exact again; Redis never admits a key value more than
// its limit; and the goroutines, the process's descriptors and the
// connections to Redis come back to where they were.
func TestPartitionsAndSlowLinks(t *testing.T) {
	if testing.Short() {
		t.Skip("4 x 15s of load through link faults")
	}
	if err := netemProbe(); err != nil {
		t.Logf("link faults: tc netem cannot shape a link here (%v); the test's TCP fault proxy (internal/testutil/faultproxy) makes them", err)
	} else {
		t.Logf("link faults: tc netem works here, but the test uses its TCP fault proxy (internal/testutil/faultproxy), the same on every machine")
	}
	for _, tc := range []struct {
		name  string
		fault faultproxy.Fault
		// cut: no call can succeed during the fault.
		cut bool
	}{
		{"blackhole", faultproxy.Fault{Blackhole: true}, true},
		{"reset", faultproxy.Fault{Reset: true}, true},
		{"delay 80ms", faultproxy.Fault{Delay: 80 * time.Millisecond}, true},
		{"loss 20%", faultproxy.Fault{Loss: 0.2}, false},
	} {
		t.Run(tc.name, func(t *testing.T) { testLinkFault(t, tc.fault, tc.cut) })
	}
}

// TestFaultProxyHelperProcess is a link of TestPartitionsAndSlowLinks: the
// test binary started again as a fault proxy, so the link gets CPU as a
// network would while the load starves the test's own process.
func TestFaultProxyHelperProcess(*testing.T) { faultproxy.HelperProcess() }

func testLinkFault(t *testing.T, fault faultproxy.Fault, cut bool) {
	srv := redistest.Start(t)
	storeLink := faultproxy.StartProcess(t, srv.Addr(), "TestFaultProxyHelperProcess")
	tableLink := faultproxy.StartProcess(t, srv.Addr(), "TestFaultProxyHelperProcess")
	st := newStack(t, stackOptions{
		storeClient: newClient(t, storeLink.Addr()), tableClient: newClient(t, tableLink.Addr()),
		controllerClient: newClient(t, srv.Addr()), policies: faultPolicies,
	})
	warmUpProbing(t, st, faultLoad("", 0))
	base := st.goroutineBaseline()
	fds0, store0, table0 := openFDs(t), storeLink.Open(), tableLink.Open()
	bl := watchBreaker(st.checker.Breaker())
	mon := startStallMonitor(t, srv.Addr())

	ld := st.startLoad(faultLoad("link-", 20*time.Second))
	time.Sleep(3 * time.Second)
	faultAt := ld.since(time.Now())
	storeLink.Set(fault)
	tableLink.Set(fault)
	faulted := ld.since(time.Now())
	time.Sleep(6 * time.Second)
	healAt := ld.since(time.Now())
	storeLink.Heal()
	tableLink.Heal()
	healed := ld.since(time.Now())
	time.Sleep(6 * time.Second)
	rec := ld.stop()
	changes := bl.end()
	mon.end()
	t.Logf("load: %d checks in %s; fault %+v from +%s to +%s", len(rec.samples), rec.duration.Round(time.Millisecond), fault, ms(faultAt), ms(healAt))

	checkAnswerTimes(t, rec, mon, []phase{
		{"before the fault", 0, faultAt},
		{"during the fault", faultAt, healAt},
		{"after the heal", healAt, rec.duration},
	})
	st.checkPoliciesInForce(t, ld)
	logBreaker(t, ld, changes)

	// How the fault's checks were answered.
	during := rec.tallyBetween(faulted, healAt)
	t.Logf("during the fault: %s; metrics %v", during, st.failureModeAnswers())
	if cut {
		n := checkFailureModes(t, rec, faulted, healAt)
		t.Logf("failure modes: all %d checks sent during the fault answered by their failureMode", n)
	} else {
		checkAnsweredSomehow(t, rec, faulted, healAt)
		if during.decided == 0 {
			t.Errorf("loss: no check was decided by Redis during the fault")
		}
	}
	// No key value admitted by Redis beyond its limit, whatever the fault.
	checkNoOverAdmission(t, rec)

	// The breaker: open while every call fails, one probe a second, and
	// closed again within a cooldown and a call of the heal.
	if cut {
		openAt, ok := firstChange(changes, check.BreakerOpen, ld.start.Add(faultAt))
		if !ok || ld.since(openAt) > healAt {
			t.Fatal("the breaker did not open during the fault")
		}
		t.Logf("breaker opened %s after the fault began", ms(ld.since(openAt)-faultAt))
		// A probe is one call, but go-redis dials up to DialerRetries (5)
		// times, 100ms apart, when a dial fails: events less than 500ms
		// apart are one attempt.
		attempts := groupLinkEvents(storeLink.Events(), openAt, ld.start.Add(healAt), 500*time.Millisecond)
		open := healAt - ld.since(openAt)
		allowed := int(math.Ceil(float64(open)/float64(breakerCooldown))) + 1
		var probes []string
		for _, a := range attempts {
			connects := 0
			for _, e := range a {
				if e.Kind == "connect" {
					connects++
				}
			}
			probes = append(probes, fmt.Sprintf("+%s (%d connections, %d events)", ms(ld.since(a[0].At)), connects, len(a)))
		}
		t.Logf("check path's attempts to reach Redis while the breaker was open (%s): %d (allowed %d, one probe per %s): %s",
			open.Round(time.Millisecond), len(attempts), allowed, breakerCooldown, strings.Join(probes, "; "))
		if len(attempts) > allowed {
			t.Errorf("%d attempts reached the link while the breaker was open for %s: more than one per %s", len(attempts), open, breakerCooldown)
		}
	}
	recovered := healed
	if closedAt, ok := firstChange(changes, check.BreakerClosed, ld.start.Add(healed)); ok {
		recovered = ld.since(closedAt)
		t.Logf("breaker closed %s after the heal", ms(recovered-healAt))
		if d := recovered - healAt; d > breakerCooldown+time.Second {
			t.Errorf("the breaker closed %s after the heal, want within one cooldown (%s) and a call", d, breakerCooldown)
		}
	} else if st.checker.Breaker().State() != check.BreakerClosed {
		t.Errorf("the breaker is %s after the heal", st.checker.Breaker().State())
	}
	if last := rec.lastUndecided(); last > recovered {
		recovered = last
	}
	checkRecovery(t, rec, healAt, "after the heal")
	faultPhase := phase{"fault", faultAt, recovered}
	logStalls(t, ld, mon, faultPhase)
	n := checkExact(t, rec, append(environmentalErrors(t, st, mon, ld, faultPhase), faultPhase)...)
	t.Logf("exact: %d key values before the fault and after the recovery (+%s), each %d admitted and %d denied", n, ms(recovered), faultLimit, faultGroup-faultLimit)
	t.Logf("store errors by kind: %s", &st.store.errs)

	// Nothing left behind: goroutines (the proxy's own aside), connections
	// to Redis, descriptors.
	st.goroutinesBackTo(base)
	// The store's pool keeps a connection per flusher once the load has
	// used them all, however many the warm-up happened to open: that is
	// its bound, not a leak.
	storeBound := max(store0, redisstore.DefaultFlushers)
	var store, table, fds int
	back := waitUntil(t, 30*time.Second, "connections and descriptors back to their baseline", func() error {
		store, table, fds = storeLink.Open(), tableLink.Open(), openFDs(t)
		if store > storeBound || table > table0+2 || fds > fds0+(storeBound-store0)+4 {
			return fmt.Errorf("%d connections to Redis from the store (bound %d: one per flusher, or the %d after the warm-up), %d from the table reader (baseline %d), %d descriptors (baseline %d)",
				store, storeBound, store0, table, table0, fds, fds0)
		}
		return nil
	})
	t.Logf("leaks: %d connections to Redis from the store (%d after the warm-up, bound %d) and %d from the table reader (baseline %d), %d accepted in all; %d descriptors (baseline %d); back %s after the load",
		store, store0, storeBound, table, table0, storeLink.Accepted()+tableLink.Accepted(), fds, fds0, back.Round(time.Millisecond))
}

// warmUpProbing is warmUp, but it keeps sending checks while it waits for
// the breaker to close: warmUp waits without a check, so a breaker that
// its first load opened (a busy machine) gets no probe and stays open.
func warmUpProbing(t testing.TB, s *stack, spec loadSpec) {
	t.Helper()
	spec.prefix, spec.max = "warm-", time.Second
	rec := s.startLoad(spec).stopAfter(500 * time.Millisecond)
	if n := rec.undecided(); n > 0 {
		t.Logf("warm-up: %d of %d checks answered by the failure mode (%s)", n, len(rec.samples), &s.store.errs)
	}
	waitUntil(t, 20*time.Second, "Redis decides checks after the warm-up", func() error {
		rec := s.startLoad(spec).stopAfter(50 * time.Millisecond)
		if st := s.checker.Breaker().State(); st != check.BreakerClosed {
			return fmt.Errorf("breaker %s (store errors: %s)", st, &s.store.errs)
		}
		if n := rec.undecided(); n > 0 {
			return fmt.Errorf("%d of %d checks answered by the failure mode", n, len(rec.samples))
		}
		return nil
	})
}

// groupLinkEvents splits the link's events in [from, to) into runs with
// gaps of less than gap.
func groupLinkEvents(events []faultproxy.Event, from, to time.Time, gap time.Duration) [][]faultproxy.Event {
	var out [][]faultproxy.Event
	for _, e := range events {
		if e.At.Before(from) || !e.At.Before(to) {
			continue
		}
		if n := len(out); n == 0 || e.At.Sub(out[n-1][len(out[n-1])-1].At) >= gap {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], e)
	}
	return out
}

// answers counts how the checks of a stretch were answered.
type answers struct {
	n, decided, failOpen, failClosed, other int
}

func (a answers) String() string {
	return fmt.Sprintf("%d checks: %d decided by Redis, %d allowed by failureMode Open, %d denied by failureMode Closed, %d other",
		a.n, a.decided, a.failOpen, a.failClosed, a.other)
}

// tallyBetween counts the answers to the checks sent in [from, to).
func (r *record) tallyBetween(from, to time.Duration) answers {
	var a answers
	for i := range r.samples {
		s := &r.samples[i]
		if s.status == 0 || s.at < from || s.at >= to {
			continue
		}
		a.n++
		ns, _ := r.load.target(i)
		switch {
		case s.decided:
			a.decided++
		case s.status == http.StatusOK && r.load.spec.namespaces[ns] == "open":
			a.failOpen++
		case s.status == http.StatusTooManyRequests && r.load.spec.namespaces[ns] == "closed":
			a.failClosed++
		default:
			a.other++
		}
	}
	return a
}

// checkAnsweredSomehow checks that every check sent in [from, to) was
// decided by Redis or answered by its policy's failure mode.
func checkAnsweredSomehow(t *testing.T, rec *record, from, to time.Duration) {
	t.Helper()
	if a := rec.tallyBetween(from, to); a.other > 0 {
		t.Errorf("during the fault: %s: %d neither decided by Redis nor answered by their failureMode", a, a.other)
	}
}

// checkNoOverAdmission checks every key value: Redis admitted at most
// faultLimit of its requests (the failure mode may admit more; Redis must
// not, whatever reached it late or never).
func checkNoOverAdmission(t *testing.T, rec *record) {
	t.Helper()
	n, bad := 0, 0
	for _, tl := range rec.tallies() {
		n++
		if tl.admitted > faultLimit {
			if bad < 5 {
				t.Errorf("%s: Redis admitted %d, over the limit %d", tl, tl.admitted, faultLimit)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d key values were admitted by Redis beyond their limit", bad, n)
	}
}
