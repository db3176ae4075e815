package checkstack_test

import (
	"context"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/buildinfo"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/checkstack"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/redisconn"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/topkeys"
)

// One global window of 100 an hour; a process leases 10 units at a time.
const leasedSpec = "key: global\nlease: {units: 10, ttl: 1m}\nlimits: [{name: hour, fixedWindow: {limit: 100, window: 1h}}]"

func leasedPolicy(t *testing.T) *check.StaticSource {
	t.Helper()
	return check.NewStaticSource(policytest.Compile(t, "ns", "leased", leasedSpec))
}

func remaining(t *testing.T, c *check.Checker, dryRun bool) int64 {
	t.Helper()
	action := ratelimit.Consume
	if dryRun {
		action = ratelimit.DryRun
	}
	out, err := c.Check(context.Background(), check.Input{Namespace: "ns", Request: &policy.Request{Method: "GET", Host: "h", Path: "/"}, Action: action})
	if err != nil || out.Degraded || len(out.Limits) != 1 {
		t.Fatalf("check: %+v, %v", out, err)
	}
	return out.Limits[0].Remaining
}

// Over Redis, a leased policy is answered from this process's lease, and
// Close gives back the units it did not use.
func TestOverRedisLeasesAndClosingGivesBack(t *testing.T) {
	srv := redistest.Start(t)
	conn, err := (&redisconn.Config{URL: "redis://" + srv.Addr() + "/0"}).Connect(redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	policies := leasedPolicy(t)
	stack := checkstack.New(checkstack.Options{Source: policies, Redis: conn.Store, Timeout: 2 * time.Second})
	if stack.Memory != nil || stack.Registry != nil {
		t.Fatalf("a stack over Redis without OwnRegistry: memory %v, registry %v", stack.Memory, stack.Registry)
	}
	// What Redis itself says, through a checker with no leases of its own
	// (a dry run reports what the request would leave).
	exact := check.New(check.Options{Backend: conn.Store.Backend(), Source: policies, Timeout: 2 * time.Second})
	untouched := remaining(t, exact, true)
	remaining(t, stack.Checker, false)
	if got := remaining(t, exact, true); got != untouched-10 {
		t.Fatalf("Redis after one leased check: %d remaining, want %d (a lease of 10)", got, untouched-10)
	}
	if err := stack.Close(); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, exact, true); got != untouched-1 {
		t.Fatalf("Redis after Close: %d remaining, want %d (the 9 unused units given back)", got, untouched-1)
	}
}

// Without Redis the stack makes the in-memory store with its cap; with
// OwnRegistry the process's registry holds the runtime and build
// collectors beside the checker's metrics.
func TestInMemoryWithOwnRegistry(t *testing.T) {
	stack := checkstack.New(checkstack.Options{Source: leasedPolicy(t), MemoryMaxKeys: 7, OwnRegistry: true})
	defer stack.Close()
	if stack.Memory == nil || stack.Memory.MaxKeys() != 7 {
		t.Fatalf("memory store %v, want one of 7 keys", stack.Memory)
	}
	if got := remaining(t, stack.Checker, false); got != 99 {
		t.Fatalf("in memory, after one check: %d remaining, want 99 (no lease)", got)
	}
	families, err := stack.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	for _, want := range []string{"go_goroutines", "process_start_time_seconds", buildinfo.MetricName, "sluice_decisions_total"} {
		if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+want+" ") {
			t.Errorf("registry lacks %s: %v", want, names)
		}
	}
}

// Two check processes over one redis-server: each records the key values
// it decides and publishes them (at the latest when it closes), and the
// top read through Redis merges both.
func TestTopKeysMergedThroughRedis(t *testing.T) {
	srv := redistest.Start(t)
	policies := check.NewStaticSource(policytest.Compile(t, "ns", "per-ip", "key: '{client_ip}'\nlimits: [{name: hour, fixedWindow: {limit: 3, window: 1h}}]"))
	checks := func(stack *checkstack.Stack, ip string, n int) {
		t.Helper()
		for range n {
			req := &policy.Request{Method: "GET", Host: "h", Path: "/", ClientIP: netip.MustParseAddr(ip)}
			if _, err := stack.Checker.Check(context.Background(), check.Input{Namespace: "ns", Request: req}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var stacks []*checkstack.Stack
	for range 2 {
		conn, err := (&redisconn.Config{URL: "redis://" + srv.Addr() + "/0"}).Connect(redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Close)
		stacks = append(stacks, checkstack.New(checkstack.Options{Source: policies, Redis: conn.Store, Timeout: 2 * time.Second, TopKeys: true}))
	}
	checks(stacks[0], "203.0.113.7", 2)
	checks(stacks[1], "203.0.113.7", 3) // the 4th and 5th of the key value: denied
	checks(stacks[1], "198.51.100.1", 1)
	for _, s := range stacks {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	answer, err := stacks[0].Top.Top(context.Background(), "ns", "per-ip", topkeys.DefaultWindow)
	if err != nil {
		t.Fatal(err)
	}
	want := &topkeys.Answer{Namespace: "ns", Policy: "per-ip", Window: topkeys.DefaultWindow,
		Denied:   topkeys.List{Total: 2, Entries: []topkeys.Entry{{Key: "203.0.113.7", Count: 2}}},
		Admitted: topkeys.List{Total: 4, Entries: []topkeys.Entry{{Key: "203.0.113.7", Count: 3}, {Key: "198.51.100.1", Count: 1}}}}
	if !reflect.DeepEqual(answer, want) {
		t.Fatalf("top through Redis: %+v, want %+v", answer, want)
	}
}

// In memory the process's own recorder answers at once; without TopKeys
// nothing is recorded.
func TestTopKeysInMemory(t *testing.T) {
	stack := checkstack.New(checkstack.Options{Source: leasedPolicy(t), TopKeys: true})
	defer stack.Close()
	remaining(t, stack.Checker, false)
	answer, err := stack.Top.Top(context.Background(), "ns", "leased", time.Minute)
	if err != nil || len(answer.Admitted.Entries) != 1 || answer.Admitted.Entries[0] != (topkeys.Entry{Key: "global", Count: 1}) {
		t.Fatalf("top in memory: %+v, %v", answer, err)
	}
	if off := checkstack.New(checkstack.Options{Source: leasedPolicy(t)}); off.Top != nil {
		t.Fatalf("a stack without TopKeys answers top: %v", off.Top)
	} else {
		_ = off.Close()
	}
}
