package check

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// nodeStore puts a key value on node "a" or "b" by its first letter (the
// rendered key holds it after the policy's name), and fails every call
// that touches a node in down with a NodeError naming it. A failover
// (moves: a node's keys to another node) takes effect in its map of
// nodes when RefreshNodes is called, as a Cluster client's slot map does
// once re-read.
type nodeStore struct {
	ratelimit.Store
	mu        sync.Mutex
	down      map[string]bool
	all       []string
	calls     map[string]int // calls per node
	moves     map[string]string
	moved     map[string]string // the moves the map of nodes knows of
	refreshed int
}

func (s *nodeStore) node(key string) string {
	value := key[:strings.IndexByte(key, '}')]
	n := value[strings.LastIndexByte(value, '/')+1:][:1]
	if to, ok := s.moved[n]; ok {
		return to
	}
	return n
}

func (s *nodeStore) RefreshNodes() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshed++
	s.moved = maps.Clone(s.moves)
}

func (s *nodeStore) NodesOf(_ context.Context, req *ratelimit.Request, dst []string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nodesOf(req, dst)
}

func (s *nodeStore) nodesOf(req *ratelimit.Request, dst []string) []string {
	from := len(dst)
	for _, e := range req.Entries {
		n := s.node(e.Key)
		seen := false
		for _, d := range dst[from:] {
			seen = seen || d == n
		}
		if !seen {
			dst = append(dst, n)
		}
	}
	return dst
}

func (s *nodeStore) AllNodes(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.all, nil
}

func (s *nodeStore) Check(ctx context.Context, timeout time.Duration, req *ratelimit.Request, dec *ratelimit.Decision) error {
	s.mu.Lock()
	var failed string
	for _, n := range s.nodesOf(req, nil) {
		s.calls[n]++
		if s.down[n] && failed == "" {
			failed = n
		}
	}
	s.mu.Unlock()
	if failed != "" {
		return &ratelimit.NodeError{Node: failed, Err: errors.New("connection refused")}
	}
	return s.Store.Check(ctx, timeout, req, dec)
}

func (s *nodeStore) set(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

func (s *nodeStore) callsTo(n string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[n]
}

// TestBreakerPerNode: a node that fails opens its own breaker; keys on the
// other node keep their decisions, the failing node's keys get the failure
// mode without a call but one probe per cooldown, a request spanning both
// takes the failure mode without holding the healthy node's probe, the
// metrics show each node, and a node the store no longer has is dropped.
func TestBreakerPerNode(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	store := &nodeStore{Store: storetest.Memory(t, clock.Now), down: map[string]bool{"b": true}, all: []string{"a", "b"}, calls: map[string]int{}}
	reg := prometheus.NewRegistry()
	p := policytest.Compile(t, "ns", "p", "failureMode: Closed\nkey: '{header:X-Client}'\nlimits: [{name: l, fixedWindow: {limit: 3, window: 1h}}]")
	// Namespace two: every request has a key on a and one on b.
	onA := policytest.Compile(t, "two", "p", "failureMode: Closed\nkey: 'a{header:X-Client}'\nlimits: [{name: l, fixedWindow: {limit: 100, window: 1h}}]")
	onB := policytest.Compile(t, "two", "q", "failureMode: Closed\nkey: 'b{header:X-Client}'\nlimits: [{name: l, fixedWindow: {limit: 100, window: 1h}}]")
	c := newChecker(t, Options{Backend: ratelimit.Backend{Store: store, Nodes: store}, Now: clock.Now, Metrics: NewMetrics(reg)}, p, onA, onB)
	ctx := context.Background()
	run := func(ns, client string) *Outcome {
		req := request()
		req.Header = http.Header{"X-Client": {client}}
		out, err := c.Check(ctx, Input{Namespace: ns, Request: req})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	// Node b fails 5 times, 6ms apart: its breaker opens; a's keys are
	// decided all along, exactly 3 admitted.
	admitted := 0
	for i := range 10 {
		clock.Advance(6 * time.Millisecond)
		if out := run("ns", "a1"); out.Degraded {
			t.Fatalf("check %d on node a answered by the failure mode: %v", i, out.StoreErr)
		} else if out.Allowed {
			admitted++
		}
		if out := run("ns", "b1"); !out.Degraded || out.Allowed {
			t.Fatalf("check %d on node b: %+v", i, out)
		}
	}
	if admitted != 3 {
		t.Errorf("node a: %d admitted, want 3", admitted)
	}
	if n := store.callsTo("b"); n != 5 {
		t.Errorf("%d calls to node b, want 5: then its breaker is open", n)
	}
	states := c.BreakerStates()
	if states["a"] != BreakerClosed || states["b"] != BreakerOpen || c.Breaker().State() != BreakerClosed {
		t.Fatalf("breakers %v, whole %s; want a closed, b open", states, c.Breaker().State())
	}
	if out := run("ns", "b2"); !errors.Is(out.StoreErr, errBreakerOpen) || !strings.Contains(out.StoreErr.Error(), "node b") {
		t.Errorf("answer on node b while open: %v", out.StoreErr)
	}
	wantMetrics := func(what, want string) {
		t.Helper()
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_breaker_state", "sluice_breaker_node_state"); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	wantMetrics("b open", metricsText(map[string]BreakerState{"a": BreakerClosed, "b": BreakerOpen}, BreakerOpen))

	// A request on both nodes: the failure mode, no call anywhere.
	before := store.callsTo("a")
	if out := run("two", "b3"); !out.Degraded || out.Allowed {
		t.Errorf("a request on both nodes with b open: %+v", out)
	}
	if store.callsTo("a") != before {
		t.Error("a request with a key on an open node was sent")
	}

	// After the cooldown one probe goes to b (failing: open again), and
	// only one.
	clock.Advance(time.Second)
	run("ns", "b4")
	run("ns", "b5")
	if n := store.callsTo("b"); n != 6 {
		t.Errorf("%d calls to node b after one cooldown, want 6 (one probe)", n)
	}

	// A request on both nodes whose failure names b leaves a's probe to
	// the next call: a's breaker, opened here by hand, is not held.
	for range 5 {
		clock.Advance(6 * time.Millisecond)
		c.breaker.get("a").Failure()
	}
	clock.Advance(time.Second)
	run("two", "b6") // probes a and b; b fails
	if s := c.breaker.get("a").State(); s != BreakerOpen {
		t.Errorf("node a after a shared probe that b failed: %s, want open with its probe given back", s)
	}
	store.set(func() { store.down = map[string]bool{} })
	if out := run("ns", "a7"); out.Degraded {
		t.Errorf("node a's next call is not its probe: %v", out.StoreErr)
	}
	clock.Advance(time.Second)
	if out := run("ns", "b7"); out.Degraded {
		t.Errorf("node b's probe after it recovered: %v", out.StoreErr)
	}
	wantMetrics("all closed", metricsText(map[string]BreakerState{"a": BreakerClosed, "b": BreakerClosed}, BreakerClosed))

	// b leaves the cluster, c joins: c's first use drops b.
	store.set(func() { store.all = []string{"a", "c"} })
	store.set(func() { store.down = map[string]bool{"c": true} })
	c.breaker.get("c")
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := c.BreakerStates()["b"]; !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node b not dropped: %v", c.BreakerStates())
		}
		time.Sleep(time.Millisecond)
	}
	wantMetrics("b dropped", metricsText(map[string]BreakerState{"a": BreakerClosed, "c": BreakerClosed}, BreakerClosed))
}

// TestOneNodeStore: a store that names no node has one breaker for all its
// calls, and no per-node series.
func TestOneNodeStore(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	reg := prometheus.NewRegistry()
	failing := &countingStore{Store: storetest.Memory(t, clock.Now), err: errors.New("redis: connection refused")}
	c := newChecker(t, Options{Backend: ratelimit.Backend{Store: failing}, Now: clock.Now, Metrics: NewMetrics(reg)},
		policytest.Compile(t, "ns", "p", "key: global\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"))
	for range 10 {
		clock.Advance(6 * time.Millisecond)
		if _, err := c.Check(context.Background(), Input{Namespace: "ns", Request: request()}); err != nil {
			t.Fatal(err)
		}
	}
	if failing.calls != 5 || c.Breaker().State() != BreakerOpen {
		t.Fatalf("%d calls, breaker %s; want 5, open", failing.calls, c.Breaker().State())
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(metricsText(nil, BreakerOpen)), "sluice_breaker_state", "sluice_breaker_node_state"); err != nil {
		t.Error(err)
	}
}

func metricsText(nodes map[string]BreakerState, whole BreakerState) string {
	var b strings.Builder
	if len(nodes) > 0 {
		b.WriteString("# HELP sluice_breaker_node_state Circuit breaker state per Redis Cluster master (node: its address, as the slot map names it): 0 closed, 1 open, 2 half-open. Absent outside Cluster mode; a master that no longer serves slots is dropped.\n# TYPE sluice_breaker_node_state gauge\n")
		for _, n := range []string{"a", "b", "c"} {
			if s, ok := nodes[n]; ok {
				fmt.Fprintf(&b, "sluice_breaker_node_state{node=%q} %d\n", n, s)
			}
		}
	}
	fmt.Fprintf(&b, "# HELP sluice_breaker_state Circuit breaker state: 0 closed, 1 open, 2 half-open. In Redis Cluster mode the worst of the masters' breakers (sluice_breaker_node_state): 1 when any is open, else 2 when any is probing.\n# TYPE sluice_breaker_state gauge\nsluice_breaker_state %d\n", whole)
	return b.String()
}

// TestBreakerLearnsFailover: while a node's breaker is open no call goes
// there to fail and tell the store that its keys moved, so the checker
// has the store re-read its map of nodes when it refuses a call: a
// failover is learned at once, not after the breaker's next probe failed,
// a cooldown later.
func TestBreakerLearnsFailover(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	store := &nodeStore{Store: storetest.Memory(t, clock.Now), down: map[string]bool{"b": true}, all: []string{"a", "b"}, calls: map[string]int{}}
	p := policytest.Compile(t, "ns", "p", "failureMode: Closed\nkey: '{header:X-Client}'\nlimits: [{name: l, fixedWindow: {limit: 3, window: 1h}}]")
	c := newChecker(t, Options{Backend: ratelimit.Backend{Store: store, Nodes: store}, Now: clock.Now}, p)
	run := func(client string) *Outcome {
		req := request()
		req.Header = http.Header{"X-Client": {client}}
		out, err := c.Check(context.Background(), Input{Namespace: "ns", Request: req})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for range 5 {
		clock.Advance(6 * time.Millisecond)
		run("b1")
	}
	if s := c.BreakerStates()["b"]; s != BreakerOpen || store.refreshed != 0 {
		t.Fatalf("after 5 failures on b: breaker %s, %d refreshes; want open, none yet", s, store.refreshed)
	}

	// b's replica, c, takes its keys over; the store's map does not know
	// yet. The next check on b is refused by b's breaker and has the map
	// read again; the one after it goes to c, in the same instant.
	store.set(func() { store.moves, store.all = map[string]string{"b": "c"}, []string{"a", "c"} })
	if out := run("b1"); !out.Degraded {
		t.Fatalf("the check refused by b's open breaker was decided: %+v", out)
	}
	if store.refreshed != 1 {
		t.Fatalf("%d refreshes of the map of nodes after a refused call, want 1", store.refreshed)
	}
	for i := range 4 {
		out := run("b1")
		if out.Degraded {
			t.Fatalf("check %d after the map was read again: answered by the failure mode (%v), not by node c", i, out.StoreErr)
		}
		if want := i < 3; out.Allowed != want {
			t.Errorf("check %d on node c: allowed %t, want %t (limit 3)", i, out.Allowed, want)
		}
	}
	if n := store.callsTo("c"); n != 4 {
		t.Errorf("%d calls to node c, want 4", n)
	}
	if n := store.callsTo("b"); n != 5 {
		t.Errorf("%d calls to node b, want the 5 before its breaker opened", n)
	}
}
