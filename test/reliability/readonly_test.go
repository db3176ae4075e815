package reliability

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/faultproxy"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// TestDemotedPrimaryBehindOneAddress puts the check process behind one
// address (a proxy standing for a DNS name or a Service) in front of a
// primary with a replica, under 2,000 checks a second. Then the replica is
// promoted (REPLICAOF NO ONE), the old primary becomes its replica and the
// address is repointed at the new primary, as a failover behind a name
// does: connections opened before keep talking to the demoted primary,
// which answers every write with READONLY.
//
// Those connections must be dropped, so that checks are decided by Redis
// again within the breaker's probe interval; and since a READONLY reply
// means the call was not applied, no key value may have been counted
// twice: every key value is admitted exactly its limit by Redis.
func TestDemotedPrimaryBehindOneAddress(t *testing.T) {
	if testing.Short() {
		t.Skip("a failover behind one address under load")
	}
	ctx := context.Background()
	primary, replica := redistest.Start(t), redistest.Start(t)
	host, port, _ := net.SplitHostPort(primary.Addr())
	if err := replica.Client().ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	waitInSync(t, replica, primary)
	addr := faultproxy.Start(t, primary.Addr())
	st := newStack(t, stackOptions{storeClient: newClient(t, addr.Addr()), controllerClient: newClient(t, addr.Addr()), policies: faultPolicies})
	spec := faultLoad("", 20*time.Second)
	warmUp(t, st, spec)
	waitInSync(t, replica, primary) // the library and the table are on the replica too
	bl := watchBreaker(st.checker.Breaker())

	spec.prefix = "demote-"
	ld := st.startLoad(spec)
	time.Sleep(2 * time.Second)
	switchAt := ld.since(time.Now())
	// The primary is demoted first (a replica of an address where nothing
	// listens: read-only, its data kept), the replica catches up with it
	// and is promoted, the old primary follows it, and the address is
	// repointed: no write lands on the old primary after the replica took
	// over, so none is lost. (Promoting the replica first would lose what
	// the old primary accepts until its own REPLICAOF, which its resync
	// drops, and admit a key value beyond its limit. FAILOVER pauses writes
	// instead, so calls time out and none reads READONLY.)
	if err := primary.Client().ReplicaOf(ctx, "127.0.0.1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	waitInSync(t, replica, primary)
	if err := replica.Client().ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	host, port, _ = net.SplitHostPort(replica.Addr())
	if err := primary.Client().ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	addr.SetTarget(replica.Addr())
	promotedAt := ld.since(time.Now())
	time.Sleep(4 * time.Second)
	rec := ld.stop()
	changes := bl.end()
	logBreaker(t, ld, changes)

	counts, _ := st.store.errs.snapshot()
	t.Logf("store errors by kind: %s", &st.store.errs)
	if counts["READONLY"] == 0 {
		t.Errorf("no call was answered READONLY: the test did not reach the demoted primary through an old connection")
	}
	last := rec.lastUndecided()
	t.Logf("failover from +%s, replica promoted and the address repointed at +%s; the last answer by the failure mode came at +%s (%s after the failover began); %d connections through the address",
		ms(switchAt), ms(promotedAt), ms(last), ms(last-switchAt), addr.Accepted())
	if last > switchAt+breakerCooldown {
		t.Errorf("checks were answered by the failure mode until %s after the switch, beyond the breaker's probe interval %s", ms(last-switchAt), breakerCooldown)
	}

	// A call refused with READONLY was not applied, so every key value's
	// Redis decisions reach exactly its limit. Errors of any other kind
	// (a timeout on a busy machine) leave the outcome unknown: key values
	// that saw one while they were checked are left out, and counted.
	var unknown []phase
	for _, ev := range st.store.errs.between(ld.start, time.Now()) {
		if ev.kind != "READONLY" {
			at := ld.since(ev.at)
			unknown = append(unknown, phase{"error " + ev.kind, at - redisTimeout, at + redisTimeout})
		}
	}
	exact, refused, left := 0, 0, 0
	for _, tl := range rec.tallies() {
		if !tl.complete(spec.group) {
			continue
		}
		if overlapsAny(tl, unknown) {
			left++
			continue
		}
		if tl.admitted != faultLimit || tl.errors > 0 {
			t.Errorf("%s: want exactly %d admitted by Redis (READONLY calls are not applied)", tl, faultLimit)
			continue
		}
		exact++
		if tl.failOpen+tl.failShut > 0 {
			refused++
		}
	}
	t.Logf("exact: %d key values admitted exactly %d by Redis, %d of them with checks answered by the failure mode after READONLY; %d left out (another error while checked)",
		exact, faultLimit, refused, left)
	if refused == 0 {
		t.Errorf("no key value saw READONLY answers among its checks: nothing shows READONLY calls were not counted")
	}

	// The demoted primary follows the new one: the same counters on both.
	waitInSync(t, primary, replica)
	a, err := primary.Client().DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	b, err := replica.Client().DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Errorf("the demoted primary holds %d keys, the new primary %d", a, b)
	}
}

// waitInSync waits until the replica's link to primary is up and it has
// processed everything primary sent.
func waitInSync(t *testing.T, replica, primary *redistest.Server) {
	t.Helper()
	waitUntil(t, 20*time.Second, "the replica is in sync with its primary", func() error {
		ctx := context.Background()
		r, err := replica.Info(ctx, "replication")
		if err != nil {
			return err
		}
		if r["role"] != "slave" || r["master_link_status"] != "up" || r["master_sync_in_progress"] != "0" {
			return fmt.Errorf("role %s, link %s", r["role"], r["master_link_status"])
		}
		p, err := primary.Info(ctx, "replication")
		if err != nil {
			return err
		}
		if r["master_repl_offset"] != p["master_repl_offset"] {
			return fmt.Errorf("replica at offset %s, primary at %s", r["master_repl_offset"], p["master_repl_offset"])
		}
		return nil
	})
}
