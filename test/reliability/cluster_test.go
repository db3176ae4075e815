package reliability

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/redisconn"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// clusterPolicies add to the fault policies a namespace whose two
// policies key the same client differently, so one check spans two
// Cluster slots (the store's dry-run-then-consume path).
var clusterPolicies = append([]testPolicy{
	{namespace: "multi", name: "a", spec: fmt.Sprintf(
		"failureMode: Closed\nkey: 'a-{header:X-Client}'\nlimits: [{name: hour, fixedWindow: {limit: %d, window: 1h}}]", faultLimit)},
	{namespace: "multi", name: "b", spec: fmt.Sprintf(
		"failureMode: Closed\nkey: 'b-{header:X-Client}'\nlimits: [{name: hour, fixedWindow: {limit: %d, window: 1h}}, {name: day, fixedWindow: {limit: 1000, window: 24h}}]", faultLimit)},
}, faultPolicies...)

// TestClusterMasterKilledUnderLoad kills a master of a Redis Cluster of 3
// masters with a replica each, under 2,000 checks a second: the one that
// serves the policy table's slot. Its replica takes its slots over; checks
// must be decided by Redis again within 5s of the cluster serving every
// slot, and no call is ever refused with CROSSSLOT.
//
// It pins two things the check path does for a Cluster. Each master has
// its own circuit breaker, so while the dead master's opens, the healthy
// masters' checks are still Redis's. And a dead master's breaker that
// refuses a call has the store read the slot map again
// (ratelimit.Nodes.RefreshNodes): no call goes to a dead node to fail and
// say its slots moved, and go-redis's Cluster client otherwise reloads
// its map only on MOVED or ASK, which a dead node never sends, or every
// ClusterStateReloadInterval (60s by default), so checks would wait for
// the breaker's next failed probe.
func TestClusterMasterKilledUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a Redis Cluster failover under load")
	}
	ctx := context.Background()
	// A shorter node timeout than the default 3s keeps the test short;
	// the failover's shape does not depend on it. Without full coverage
	// required, the healthy masters serve their slots while one is down.
	cl := redistest.StartClusterWithReplicas(t, 3, 1, redistest.WithArgs("--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no"))
	// As `--redis-cluster-addrs` makes it.
	clusterClient := func() redis.UniversalClient {
		opts, err := (&redisconn.Config{ClusterAddrs: cl.Addrs()}).Options()
		if err != nil {
			t.Fatal(err)
		}
		c := redisstore.NewClient(opts)
		if _, ok := c.(*redis.ClusterClient); !ok {
			t.Fatalf("a Cluster configuration made a %T", c)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	st := newStack(t, stackOptions{storeClient: clusterClient(), controllerClient: clusterClient(), policies: clusterPolicies})
	victim, err := cl.MasterOf(ctx, int(ratelimit.HashSlot(policytable.HashKey)))
	if err != nil {
		t.Fatal(err)
	}
	onVictim, err := slotsOf(ctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	spec := loadSpec{rate: loadRate, namespaces: []string{"open", "closed", "multi"}, group: faultGroup, prefix: "cluster-", max: 30 * time.Second}
	warmUp(t, st, spec)
	base := st.goroutineBaseline()
	bl := watchBreaker(st.checker.Breaker())
	mon := startStallMonitor(t, "")

	spec.prefix = "kill-"
	ld := st.startLoad(spec)
	time.Sleep(3 * time.Second)
	killAt := ld.since(time.Now())
	victim.Kill()
	if err := cl.WaitHealthy(30 * time.Second); err != nil {
		t.Fatalf("the cluster did not recover from losing %s: %v", victim.Addr(), err)
	}
	healedAt := ld.since(time.Now())
	time.Sleep(8 * time.Second)
	rec := ld.stop()
	changes := bl.end()
	mon.end()
	t.Logf("load: %d checks in %s; master %s (policy table slot) killed at +%s; its replica served all slots again at +%s (%s later)",
		len(rec.samples), rec.duration.Round(time.Millisecond), victim.Addr(), ms(killAt), ms(healedAt), ms(healedAt-killAt))

	checkAnswerTimes(t, rec, mon, []phase{
		{"before the kill", 0, killAt},
		{"master down", killAt, healedAt},
		{"after the failover", healedAt, rec.duration},
	})
	st.checkPoliciesInForce(t, ld)
	logBreaker(t, ld, changes)

	// While the master was away: every answer is Redis's or the policy's
	// failure mode; how many were which.
	decided, undecided, wrong := 0, 0, 0
	for i := range rec.samples {
		s := &rec.samples[i]
		if s.status == 0 || s.at < killAt || s.at >= healedAt {
			continue
		}
		ns, _ := ld.target(i)
		switch {
		case s.decided:
			decided++
		case spec.namespaces[ns] == "open" && s.status == http.StatusOK,
			spec.namespaces[ns] != "open" && s.status == http.StatusTooManyRequests:
			undecided++
		default:
			wrong++
		}
	}
	t.Logf("while the master was away: %d checks decided by Redis, %d by the failure mode", decided, undecided)
	if wrong > 0 {
		t.Errorf("while the master was away: %d answers neither Redis's nor the failure mode's", wrong)
	}
	checkHealthyMastersDecide(t, ld, rec, onVictim, killAt, healedAt)
	lastUndecided := rec.lastUndecided()
	t.Logf("checks resumed: the last answer by the failure mode came at +%s, %s after the kill and %s after the cluster healed",
		ms(lastUndecided), ms(lastUndecided-killAt), ms(lastUndecided-healedAt))
	// The store errors after the cluster healed, each with its moment.
	after, naming := map[string]int{}, 0
	var listed strings.Builder
	for _, ev := range st.store.errs.between(ld.start.Add(healedAt), time.Now()) {
		after[ev.kind]++
		if strings.Contains(ev.msg, victim.Addr()) {
			naming++
		}
		fmt.Fprintf(&listed, "\n\t+%s %s", ms(ld.since(ev.at)), ev.msg)
	}
	t.Logf("store errors after the cluster healed: %v, %d of them naming the dead master%s", after, naming, listed.String())
	if lastUndecided > healedAt+5*time.Second {
		t.Errorf("checks did not resume within 5s of the cluster healing: failure-mode answers went on until %s after it "+
			"(the load ended %s after it); store errors after it: %v, %d of them naming the dead master %s, whose slots its replica serves",
			lastUndecided-healedAt, rec.duration-healedAt, after, naming, victim.Addr())
	}

	counts, _ := st.store.errs.snapshot()
	t.Logf("store errors by kind: %s", &st.store.errs)
	if counts["CROSSSLOT"] > 0 {
		t.Errorf("%d calls refused with CROSSSLOT", counts["CROSSSLOT"])
	}
	fault := phase{"failover", killAt, max(lastUndecided, healedAt)}
	logStalls(t, ld, mon, fault)
	excluded := append(environmentalErrors(t, st, mon, ld, fault), fault)
	n := checkExact(t, rec, excluded...)
	t.Logf("exact: %d single-slot key values before the kill and after the checks resumed", n)
	checkMultiSlot(t, rec, excluded)
	// go-redis keeps a client per node it has seen, with a redial loop for
	// a node that is gone, until it drops nodes absent from the slot map
	// a minute after a reload; those are not the check path's.
	st.goroutinesBackTo(base, "pool.(*ConnPool).tryDial", "maintnotifications.(*CircuitBreakerManager).cleanupLoop")

	// The table and the library survived on the promoted replica.
	if err := policiesOnNode(ctx, clusterClient(), clusterPolicies); err != nil {
		t.Errorf("after the failover: %v", err)
	}
	masters, err := cl.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range masters {
		if err := libraryOnNode(ctx, m.Client()); err != nil {
			t.Errorf("master %s: %v", m.Addr(), err)
		}
	}
	t.Logf("after the failover: %d masters, each with the library; the policy table on %s", len(masters), mustMasterOf(t, cl))
}

// slotsOf returns the slots master m serves now.
func slotsOf(ctx context.Context, m *redistest.Server) (map[uint16]bool, error) {
	slots, err := m.Client().ClusterSlots(ctx).Result() //nolint:staticcheck // the slot map go-redis's cluster client reads
	if err != nil {
		return nil, err
	}
	out := map[uint16]bool{}
	for _, s := range slots {
		if s.Nodes[0].Addr != m.Addr() {
			continue
		}
		for slot := s.Start; slot <= s.End; slot++ {
			out[uint16(slot)] = true
		}
	}
	return out, nil
}

// checkHealthyMastersDecide: while a master is away, the single-slot
// checks whose bucket is on another master are decided by Redis (each
// master has its own breaker), and those on the dead master's slots get
// the failure mode. The cluster runs with cluster-require-full-coverage
// no: with Redis's default (yes) every master answers CLUSTERDOWN once the
// dead one is marked failed, and no breaker can help. A request spanning
// the dead master and a healthy one that times out names the dead one
// alone, so no healthy master's breaker opens: all the healthy checks are
// Redis's. A busy machine may push a few past the deadline: the bound is
// 95%.
func checkHealthyMastersDecide(t *testing.T, ld *load, rec *record, onVictim map[uint16]bool, from, to time.Duration) {
	t.Helper()
	healthy, healthyDecided, dead, deadDecided := 0, 0, 0, 0
	for i := range rec.samples {
		s := &rec.samples[i]
		if s.status <= 0 || s.at < from || s.at >= to {
			continue
		}
		ns, key := ld.target(i)
		name := ld.spec.namespaces[ns]
		if name == "multi" {
			continue // two slots: one of them may be the dead master's
		}
		bucket, _ := ratelimit.SplitKey(ratelimit.Key(name, "per-client", ld.spec.prefix+strconv.Itoa(key), "hour"))
		if onVictim[ratelimit.HashSlot(bucket)] {
			dead++
			if s.decided {
				deadDecided++
			}
			continue
		}
		healthy++
		if s.decided {
			healthyDecided++
		}
	}
	t.Logf("while the master was away: %d of %d checks on the healthy masters' slots decided by Redis; %d of %d on the dead master's",
		healthyDecided, healthy, deadDecided, dead)
	if healthy == 0 || dead == 0 {
		t.Fatalf("the load put %d checks on healthy masters and %d on the dead one while it was away: the test needs both", healthy, dead)
	}
	if float64(healthyDecided) < 0.95*float64(healthy) {
		t.Errorf("checks on healthy masters: %d of %d decided by Redis, want at least 95%% (a breaker per master keeps them decided)", healthyDecided, healthy)
	}
}

func mustMasterOf(t *testing.T, cl *redistest.Cluster) string {
	m, err := cl.MasterOf(context.Background(), int(ratelimit.HashSlot(policytable.HashKey)))
	if err != nil {
		t.Fatal(err)
	}
	return m.Addr()
}

// checkMultiSlot checks the key values of the two-slot namespace outside
// the fault: all decided by Redis and never more than the limit admitted
// (a concurrent request can make the second round deny after the first
// allowed, which under-admits by design).
func checkMultiSlot(t *testing.T, rec *record, excluded []phase) {
	t.Helper()
	multi := -1
	for i, ns := range rec.load.spec.namespaces {
		if ns == "multi" {
			multi = i
		}
	}
	n, under := 0, 0
	for _, tl := range rec.tallies() {
		if tl.ns != multi || !tl.complete(rec.load.spec.group) || overlapsAny(tl, excluded) {
			continue
		}
		n++
		if tl.failOpen+tl.failShut+tl.errors > 0 || tl.admitted > faultLimit {
			t.Errorf("multi-slot %s: want every answer by Redis and at most %d admitted", tl, faultLimit)
		}
		if tl.admitted < faultLimit {
			under++
		}
	}
	t.Logf("multi-slot: %d key values spanning two slots, none above the limit; %d admitted fewer than %d (a concurrent request consumed between the dry run and the write)", n, under, faultLimit)
}
