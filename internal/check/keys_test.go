package check

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/topkeys"
)

type keyLog struct {
	mu   sync.Mutex
	seen []string
}

func (l *keyLog) Record(namespace, policy, key string, denied bool, _ time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	verdict := "admitted"
	if denied {
		verdict = "denied"
	}
	l.seen = append(l.seen, fmt.Sprintf("%s/%s %s %s", namespace, policy, key, verdict))
}

func (l *keyLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := l.seen
	l.seen = nil
	return seen
}

// Each consuming check tells the recorder, per policy whose limits
// decided, the key value and the verdict; dry runs and refunds tell
// nothing; a shadow policy's would-be denial is a denial.
func TestKeysRecorded(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	keys := &keyLog{}
	c := newChecker(t, Options{Now: clock.Now, Observer: RecordKeys(keys)},
		policytest.Compile(t, "ns", "per-ip", "key: '{client_ip}'\nlimits: [{name: l, fixedWindow: {limit: 2, window: 1h}}]"),
		policytest.Compile(t, "ns", "trial", "key: global\nmode: Shadow\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"),
	)
	check := func(action ratelimit.Action, want ...string) {
		t.Helper()
		if _, err := c.Check(context.Background(), Input{Namespace: "ns", Request: request(), Action: action}); err != nil {
			t.Fatal(err)
		}
		if got := keys.take(); !slices.Equal(got, want) {
			t.Fatalf("recorded %q, want %q", got, want)
		}
	}
	check(ratelimit.Consume, "ns/per-ip 192.0.2.1 admitted", "ns/trial global admitted")
	check(ratelimit.Consume, "ns/per-ip 192.0.2.1 admitted", "ns/trial global denied")
	check(ratelimit.Consume, "ns/per-ip 192.0.2.1 denied", "ns/trial global denied")
	check(ratelimit.Consume, "ns/per-ip 192.0.2.1 denied") // from the cache of denials: the shadow policy decided nothing
	check(ratelimit.DryRun)
	check(ratelimit.Refund)
}

// A policy whose limits allowed a request another policy denied neither
// admitted it nor denied it.
func TestKeysOfAPolicyOverruled(t *testing.T) {
	keys := &keyLog{}
	c := newChecker(t, Options{Observer: RecordKeys(keys), DenyCacheSize: -1},
		policytest.Compile(t, "ns", "wide", "key: global\nlimits: [{name: l, fixedWindow: {limit: 100, window: 1h}}]"),
		policytest.Compile(t, "ns", "narrow", "key: global\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"),
	)
	for _, want := range [][]string{{"ns/narrow global admitted", "ns/wide global admitted"}, {"ns/narrow global denied"}} {
		if _, err := c.Check(context.Background(), Input{Namespace: "ns", Request: request()}); err != nil {
			t.Fatal(err)
		}
		if got := keys.take(); !slices.Equal(got, want) {
			t.Fatalf("recorded %q, want %q", got, want)
		}
	}
}

// BenchmarkKeys: one allowed check of a policy on the memory store,
// without and with the top keys recorded, one caller and all CPUs at once
// (all on the one policy's ring: the worst case of its lock).
func BenchmarkKeys(b *testing.B) {
	p := policytest.Compile(b, "ns", "p", "key: '{client_ip}'\nlimits: [{name: l, fixedWindow: {limit: 1000000000, window: 1h}}]")
	for _, recorded := range []bool{false, true} {
		o := Options{}
		if recorded {
			o.Observer = Observers{NewTally(nil), RecordKeys(topkeys.NewRecorder(nil))}
		}
		c := newChecker(b, o, p)
		in := Input{Namespace: "ns", Request: request()}
		b.Run(fmt.Sprintf("recorded=%v/serial", recorded), func(b *testing.B) {
			out := &Outcome{}
			for b.Loop() {
				if err := c.CheckInto(context.Background(), in, out); err != nil || !out.Allowed {
					b.Fatalf("allowed %v, err %v", out.Allowed, err)
				}
			}
		})
		b.Run(fmt.Sprintf("recorded=%v/parallel", recorded), func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				out := &Outcome{}
				for pb.Next() {
					if err := c.CheckInto(context.Background(), in, out); err != nil || !out.Allowed {
						b.Errorf("allowed %v, err %v", out.Allowed, err)
						return
					}
				}
			})
		})
	}
}

// Recording a key value already in the sketch allocates nothing: the
// check keeps its budget (TestCheckIntoAllocs).
func TestKeysAllocateNothing(t *testing.T) {
	p := policytest.Compile(t, "ns", "p", "key: '{client_ip}'\nlimits: [{name: l, fixedWindow: {limit: 1000000000, window: 1h}}]")
	c := newChecker(t, Options{Observer: Observers{NewTally(nil), RecordKeys(topkeys.NewRecorder(nil))}}, p)
	in, out := Input{Namespace: "ns", Request: request()}, &Outcome{}
	check := func() {
		if err := c.CheckInto(context.Background(), in, out); err != nil || !out.Allowed {
			t.Fatalf("allowed %v, err %v", out.Allowed, err)
		}
	}
	check()
	if n := testing.AllocsPerRun(200, check); n > 2 {
		t.Errorf("%v allocations per check, want at most 2 (the key value and the limit's key)", n)
	}
}
