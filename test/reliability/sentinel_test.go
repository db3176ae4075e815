package reliability

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/redisconn"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// TestSentinelFailoverUnderLoad kills the master of a Sentinel setup (one
// replica, three Sentinels) under 2,000 checks a second. The check
// endpoint and the controller's table sync use Sentinel failover clients,
// as `--redis-sentinel-addrs` makes them: both follow the promoted replica
// without a restart; the table and the library are on it; and the
// requests admitted beyond a limit are no more than the writes the
// failover lost.
func TestSentinelFailoverUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a Sentinel failover under load")
	}
	ctx := context.Background()
	sen := redistest.StartSentinel(t)
	// As `--redis-sentinel-master` and `--redis-sentinel-addrs` make it.
	cfg := redisconn.Config{SentinelMaster: sen.MasterName, SentinelAddrs: sen.Addrs()}
	sentinelClient := func() redis.UniversalClient {
		opts, err := cfg.Options()
		if err != nil {
			t.Fatal(err)
		}
		c := redisstore.NewClient(opts)
		if _, ok := c.(*redis.Client); !ok {
			t.Fatalf("a Sentinel configuration made a %T", c)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	st := newStack(t, stackOptions{storeClient: sentinelClient(), controllerClient: sentinelClient(), policies: faultPolicies})
	old, err := sen.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	warmUp(t, st, faultLoad("", 0))
	base := st.goroutineBaseline()
	bl := watchBreaker(st.checker.Breaker())
	mon := startStallMonitor(t, "")

	announcedAt := watchPromotion(ctx, t, sen.Addrs(), "")
	ld := st.startLoad(faultLoad("failover-", 40*time.Second))
	time.Sleep(3 * time.Second)
	killAt := ld.since(time.Now())
	old.Kill()
	promoted := sen.WaitFailover(old, 30*time.Second)
	promotedAt := min(ld.since(time.Now()), ld.since(announcedAt())-answerBound)
	time.Sleep(8 * time.Second)
	rec := ld.stop()
	changes := bl.end()
	mon.end()
	t.Logf("load: %d checks in %s; master %s killed at +%s; Sentinels promoted %s at +%s (%s later)",
		len(rec.samples), rec.duration.Round(time.Millisecond), old.Addr(), ms(killAt), promoted.Addr(), ms(promotedAt), ms(promotedAt-killAt))

	checkAnswerTimes(t, rec, mon, []phase{
		{"before the kill", 0, killAt},
		{"master down", killAt, promotedAt},
		{"after the promotion", promotedAt, rec.duration},
	})
	st.checkPoliciesInForce(t, ld)
	logBreaker(t, ld, changes)
	n := checkFailureModes(t, rec, killAt+time.Millisecond, promotedAt)
	t.Logf("failure modes: %d checks sent while no master answered were answered by their failureMode", n)
	closedAt, ok := firstChange(changes, check.BreakerClosed, ld.start.Add(promotedAt))
	if !ok {
		t.Fatal("the breaker did not close after the promotion")
	}
	checkRecovery(t, rec, promotedAt, "after the promotion")
	fault := phase{"failover", killAt, max(ld.since(closedAt), promotedAt)}
	logStalls(t, ld, mon, fault)
	excluded := environmentalErrors(t, st, mon, ld, fault)
	n = checkExact(t, rec, append(excluded, fault)...)
	t.Logf("exact: %d key values before the kill and after the checks resumed", n)
	counts, last := st.store.errs.snapshot()
	t.Logf("store errors by kind: %s", &st.store.errs)
	if c := counts["READONLY"]; c > 0 {
		t.Logf("READONLY: %d, the last at +%s", c, ms(ld.since(last["READONLY"])))
	}
	st.goroutinesBackTo(base)

	// Over-admission: the counters on the new master against what the
	// checks admitted.
	direct, err := redisstore.New(sentinelClient(), redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.Close() })
	report := checkAdmissions(t, rec, st, direct, "closed", faultPolicies[1].compile(t), phase{"before the kill", killAt - time.Second, killAt})
	t.Logf("over-admission (failureMode Closed, limit %d per key value): %s", faultLimit, report)
	open := checkAdmissions(t, rec, st, direct, "open", faultPolicies[0].compile(t), phase{"before the kill", killAt - time.Second, killAt})
	t.Logf("failureMode Open: %s; plus %d requests admitted by the failure mode while no master answered", open, failOpenAdmissions(rec))

	// The table and the library are on the new master, and the controller
	// writes through it: a policy edited now reaches the check process.
	if err := policiesOnNode(ctx, promoted.Client(), faultPolicies); err != nil {
		t.Errorf("on the promoted master: %v", err)
	}
	took := waitUntil(t, 10*time.Second, "the controller's table sync succeeds on the new master", func() error { return st.sync.SyncOnce(ctx) })
	t.Logf("controller: a table sync succeeded %s after the load (the sync loop ran throughout)", ms(took))
	edited := limitPolicy("open", "Open", 30)
	st.cluster.set(t, edited)
	start := time.Now()
	if err := st.sync.SyncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the check process sees the edited policy", func() error {
		p := st.reader.Policies().Get("open", "per-client")
		if p == nil || p.Limits[0].Limit.Capacity != 30 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	t.Logf("controller: an edited policy reached the check process through the new master in %s", ms(time.Since(start)))
}

// admissions sums what checkAdmissions found.
type admissions struct {
	keys, admitted, counted, over, lost, lostKeys, unknown int
}

func (a admissions) String() string {
	return fmt.Sprintf("%d key values: %d requests admitted by Redis, %d counted on the final master; %d admitted beyond the limit; %d admitted writes lost (in %d key values); %d calls of unknown outcome (timed out)",
		a.keys, a.admitted, a.counted, a.over, a.lost, a.lostKeys, a.unknown)
}

// checkAdmissions compares, for every key value of namespace ns, the
// requests Redis admitted with the counter the final master holds: a
// counter never exceeds what was admitted plus calls whose outcome the
// checker did not learn (a call never runs twice); admitted requests not
// counted are writes the failover lost, only key values admitted within
// lossWindow may lose any, and admissions beyond the limit never exceed
// the lost writes.
func checkAdmissions(t *testing.T, rec *record, st *stack, direct *redisstore.Store, ns string, p *policy.Policy, lossWindow phase) admissions {
	t.Helper()
	nsIdx := slices.Index(rec.load.spec.namespaces, ns)
	limit := int(p.Limits[0].Limit.Capacity)
	var a admissions
	for _, tl := range rec.tallies() {
		if tl.ns != nsIdx {
			continue
		}
		key := ratelimit.Key(ns, p.Name, rec.load.spec.prefix+strconv.Itoa(tl.key), p.Limits[0].Name)
		counted := consumed(t, direct, key, p)
		unknown := st.store.unknownCalls(key)
		a.keys++
		a.admitted += tl.admitted
		a.counted += counted
		a.unknown += unknown
		if counted > tl.admitted+unknown {
			t.Errorf("%s: counted %d on Redis, more than the %d admitted and %d calls of unknown outcome: a call ran twice", tl, counted, tl.admitted, unknown)
		}
		lost := max(0, tl.admitted-counted)
		over := max(0, tl.admitted-limit)
		a.over += over
		a.lost += lost
		if lost > 0 {
			a.lostKeys++
			if tl.first >= lossWindow.to || tl.last <= lossWindow.from {
				t.Errorf("%s: %d admitted writes lost, yet none of its answers came in the second before the kill", tl, lost)
			}
		}
		if over > lost {
			t.Errorf("%s: %d admitted beyond the limit %d, more than the %d writes the failover lost", tl, over, limit, lost)
		}
	}
	return a
}

// failOpenAdmissions counts the requests the failure mode allowed.
func failOpenAdmissions(rec *record) int {
	n := 0
	for _, tl := range rec.tallies() {
		n += tl.failOpen
	}
	return n
}

// watchPromotion subscribes to every Sentinel for the first sign that
// one of them advertises the new master: the failover's leader answers
// get-master-addr-by-name with the promoted replica from the moment it
// publishes +promoted-slave, before its own +switch-master and up to a
// hello period before the other Sentinels learn of it, so a client that
// asks the leader may move then, long before WaitFailover's poll of every
// Sentinel agrees. From then on Redis may decide, and a check sent up to
// one deadline earlier may be answered by the new master. The function it
// returns waits for the first announcement and gives the moment it
// arrived.
func watchPromotion(ctx context.Context, t *testing.T, addrs []string, password string) func() time.Time {
	t.Helper()
	at := make(chan time.Time, len(addrs))
	var closers []io.Closer
	closeAll := func() {
		for _, c := range closers {
			_ = c.Close()
		}
		closers = nil
	}
	t.Cleanup(closeAll)
	for _, addr := range addrs {
		sub := redis.NewSentinelClient(&redis.Options{Addr: addr, Password: password})
		announced := sub.Subscribe(ctx, "+promoted-slave", "+switch-master")
		closers = append(closers, announced, sub)
		for range 2 { // both subscriptions are in place
			if _, err := announced.Receive(ctx); err != nil {
				t.Fatal(err)
			}
		}
		go func() {
			if _, ok := <-announced.Channel(); ok {
				at <- time.Now()
			}
		}()
	}
	// The watchers go once the first announcement is in, so that the
	// goroutine count after the load does not include them.
	return func() time.Time {
		defer closeAll()
		select {
		case when := <-at:
			return when
		case <-time.After(5 * time.Second):
			t.Fatal("no Sentinel announced a promotion")
			return time.Time{}
		}
	}
}
