package reliability

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/controller"
	"github.com/sluice-dev/sluice/internal/fleet"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/webhook"
)

// The production defaults the fault tests hold the check path to
// (cmd/manager flags and check.New defaults).
const (
	redisTimeout    = 50 * time.Millisecond // --redis-timeout
	answerBound     = redisTimeout + 20*time.Millisecond
	breakerCooldown = time.Second // check.Options.BreakerCooldown default
	syncInterval    = 3 * time.Second
	loadRate        = 2000 // checks per second
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// following is the fleet.Follower of a check process that follows the
// table alone, at the default poll interval.
func following(client redis.UniversalClient, reader *policytable.Reader, log *slog.Logger) *fleet.Follower {
	f := fleet.NewFollower(client, 0, log)
	f.Follow(policytable.Channel, reader)
	return f
}

// testPolicy is a RateLimitPolicy as the controller would see it.
type testPolicy struct {
	namespace, name string
	spec            string // YAML of the spec
}

func (p testPolicy) parse(t testing.TB) ratelimitv1alpha1.RateLimitPolicySpec {
	t.Helper()
	return policytest.Spec(t, p.spec)
}

// compile builds the runnable policy, as the check process does from the table.
func (p testPolicy) compile(t testing.TB) *policy.Policy {
	t.Helper()
	return policytest.Compile(t, p.namespace, p.name, p.spec)
}

// limitPolicy is the policy most fault tests load: a per-client fixed
// window of limit requests an hour, answering with failureMode when Redis
// cannot.
func limitPolicy(namespace, failureMode string, limit int) testPolicy {
	return testPolicy{namespace: namespace, name: "per-client", spec: fmt.Sprintf(
		"failureMode: %s\nkey: '{header:X-Client}'\nlimits: [{name: hour, fixedWindow: {limit: %d, window: 1h}}]", failureMode, limit)}
}

// clusterState is the Kubernetes side of the controller: a fixed list of
// RateLimitPolicy objects (TableSync only lists them).
type clusterState struct {
	mu    sync.Mutex
	items []ratelimitv1alpha1.RateLimitPolicy
}

func newClusterState(t testing.TB, policies []testPolicy) *clusterState {
	s := &clusterState{}
	for _, p := range policies {
		s.items = append(s.items, ratelimitv1alpha1.RateLimitPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: p.namespace, Name: p.name, Generation: 1},
			Spec:       p.parse(t),
		})
	}
	return s
}

// set replaces (or adds) one policy, with the next generation.
func (s *clusterState) set(t testing.TB, p testPolicy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.items {
		if s.items[i].Namespace == p.namespace && s.items[i].Name == p.name {
			s.items[i].Spec = p.parse(t)
			s.items[i].Generation++
			return
		}
	}
	s.items = append(s.items, ratelimitv1alpha1.RateLimitPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.namespace, Name: p.name, Generation: 1}, Spec: p.parse(t)})
}

func (s *clusterState) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errors.New("clusterState: Get is not used by TableSync")
}

func (s *clusterState) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	l, ok := list.(*ratelimitv1alpha1.RateLimitPolicyList)
	if !ok {
		return fmt.Errorf("clusterState: cannot list %T", list)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l.Items = make([]ratelimitv1alpha1.RateLimitPolicy, len(s.items))
	for i := range s.items {
		s.items[i].DeepCopyInto(&l.Items[i])
	}
	return nil
}

// errorKinds counts store errors by kind. The store is wrapped so every
// error that made the checker answer by its failure mode is seen here.
type errorKinds struct {
	mu     sync.Mutex
	events []errorEvent
	counts map[string]int
	last   map[string]time.Time
	sample map[string]string
}

// observedStore is the Redis store with its errors counted by kind, and
// per Redis key the calls whose outcome is unknown (a timeout or a lost
// connection: the call may have run in Redis although the checker
// answered by the failure mode).
type observedStore struct {
	ratelimit.Store
	errs errorKinds

	mu      sync.Mutex
	unknown map[string]int
}

// observedBackend is b with its checks observed by s, and the rest (the
// Cluster's nodes, which the checker keeps a breaker for each of) the
// store's, as the check processes' stores have it.
func observedBackend(b ratelimit.Backend, s *observedStore) ratelimit.Backend {
	b.Store = s
	return b
}

func (s *observedStore) Check(ctx context.Context, timeout time.Duration, req *ratelimit.Request, dec *ratelimit.Decision) error {
	err := s.Store.Check(ctx, timeout, req, dec)
	if err != nil {
		s.errs.add(err)
		if k := errorKind(err); (k == "timeout" || k == "connection lost") && req.Action != ratelimit.DryRun {
			s.mu.Lock()
			if s.unknown == nil {
				s.unknown = map[string]int{}
			}
			for _, e := range req.Entries {
				s.unknown[e.Key]++
			}
			s.mu.Unlock()
		}
	}
	return err
}

// unknownCalls returns how many calls on key may or may not have run.
func (s *observedStore) unknownCalls(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unknown[key]
}

// errorKind names the kind of a store error.
func errorKind(err error) string {
	msg := err.Error()
	for _, k := range []string{"CROSSSLOT", "READONLY", "NOSCRIPT", "Function not found", "MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN", "LOADING", "MASTERDOWN", "NOREPLICAS"} {
		if strings.Contains(msg, k) {
			return k
		}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded), strings.Contains(msg, "i/o timeout"):
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET), strings.Contains(msg, "use of closed network connection"):
		return "connection lost"
	case errors.Is(err, redisstore.ErrClosed):
		return "store closed"
	}
	return "other"
}

func (e *errorKinds) add(err error) {
	kind := errorKind(err)
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.counts == nil {
		e.counts, e.last, e.sample = map[string]int{}, map[string]time.Time{}, map[string]string{}
	}
	if e.counts[kind] == 0 {
		e.sample[kind] = err.Error()
	}
	e.counts[kind]++
	e.last[kind] = now
	e.events = append(e.events, errorEvent{at: now, kind: kind, msg: err.Error()})
}

// errorEvent is one store error.
type errorEvent struct {
	at        time.Time
	kind, msg string
}

// between returns the errors from from to to.
func (e *errorKinds) between(from, to time.Time) []errorEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []errorEvent
	for _, ev := range e.events {
		if !ev.at.Before(from) && ev.at.Before(to) {
			out = append(out, ev)
		}
	}
	return out
}

// snapshot returns the counts, and when each kind was last seen.
func (e *errorKinds) snapshot() (counts map[string]int, last map[string]time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	counts, last = map[string]int{}, map[string]time.Time{}
	for k, v := range e.counts {
		counts[k], last[k] = v, e.last[k]
	}
	return counts, last
}

func (e *errorKinds) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.counts) == 0 {
		return "none"
	}
	kinds := make([]string, 0, len(e.counts))
	for k := range e.counts {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	var b strings.Builder
	for _, k := range kinds {
		fmt.Fprintf(&b, "%s=%d (e.g. %q); ", k, e.counts[k], truncate(e.sample[k], 160))
	}
	return strings.TrimSuffix(b.String(), "; ")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// stackOptions assemble a check process (and optionally a controller)
// in-process, wired as internal/app wires them.
type stackOptions struct {
	// storeClient is the check path's client (through a proxy, a Sentinel
	// or a Cluster client as the test needs).
	storeClient redis.UniversalClient
	// tableClient reads the policy table (default storeClient, as in
	// `manager check`).
	tableClient redis.UniversalClient
	// controllerClient, when set, runs the controller's table sync
	// (Publisher and TableSync, every syncInterval) over it.
	controllerClient redis.UniversalClient
	storeOptions     redisstore.Options
	policies         []testPolicy
}

// stack is one check process under test: policy table reader, checker
// with production defaults, the HTTP endpoint behind a timing wrapper;
// and the controller's table sync when asked.
type stack struct {
	t        testing.TB
	url      string
	checker  *check.Checker
	store    *observedStore
	reader   *policytable.Reader
	source   *watchedSource
	cluster  *clusterState
	sync     *controller.TableSync
	registry *prometheus.Registry

	current atomic.Pointer[load] // receives the server-side timings
	dialer  *preDialer           // the load client's connections
	client  *http.Client
}

func newStack(t testing.TB, o stackOptions) *stack {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	t.Cleanup(func() { cancel(); running.Wait() })

	s := &stack{t: t, cluster: newClusterState(t, o.policies)}
	if o.controllerClient != nil {
		cstore, err := redisstore.New(o.controllerClient, redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cstore.Close() })
		publisher := &policytable.Publisher{Table: policytable.New(o.controllerClient), Library: cstore}
		s.sync = &controller.TableSync{Client: s.cluster, Syncer: publisher, LastGood: controller.NewLastGood(), Interval: syncInterval}
		if err := s.sync.SyncOnce(ctx); err != nil {
			t.Fatalf("first table sync: %v", err)
		}
		running.Go(func() { _ = s.sync.Start(ctx) })
	}

	store, err := redisstore.New(o.storeClient, o.storeOptions)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	s.store = &observedStore{Store: store}
	tableClient := o.tableClient
	if tableClient == nil {
		tableClient = o.storeClient
	}
	s.reader = policytable.NewReader(policytable.New(tableClient), quiet)
	running.Go(func() { following(tableClient, s.reader, quiet).Run(ctx) })
	waitUntil(t, 10*time.Second, "the check process loads every policy from the table", func() error {
		for _, p := range o.policies {
			if s.reader.Policies().Get(p.namespace, p.name) == nil {
				return fmt.Errorf("%s/%s not loaded", p.namespace, p.name)
			}
		}
		return nil
	})

	s.registry = prometheus.NewRegistry()
	s.source = &watchedSource{Source: s.reader, expected: o.policies}
	metrics := check.NewMetrics(s.registry)
	s.checker = check.New(check.Options{Backend: observedBackend(store.Backend(), s.store), Source: s.source, Metrics: metrics, Observer: check.NewTally(metrics)})
	wh, err := webhook.New(webhook.Options{Checker: s.checker, Gatherer: s.registry, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		wh.ServeHTTP(w, r)
		if ld := s.current.Load(); ld != nil {
			ld.serverTime(r.Header.Get("X-Seq"), time.Since(start))
		}
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	s.dialer = &preDialer{addr: srv.Listener.Addr().String()}
	s.client = &http.Client{Transport: &http.Transport{
		MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute, DisableCompression: true,
		DialContext: s.dialer.DialContext,
	}}
	t.Cleanup(s.client.CloseIdleConnections)
	return s
}

// watchedSource is the check process's policy source, watched: every time
// the checker takes the policy set, it records whether a policy that the
// cluster holds was missing from it (the check would then skip it and
// allow). The policies never leave the cluster in these tests, so a
// missing one is a limit lifted by mistake.
type watchedSource struct {
	check.Source
	expected []testPolicy

	mu      sync.Mutex
	missing int
	first   time.Time
	last    time.Time
	example string
}

func (w *watchedSource) Policies() *policy.Set {
	set := w.Source.Policies()
	for _, p := range w.expected {
		if set.Get(p.namespace, p.name) == nil {
			w.mu.Lock()
			if w.missing == 0 {
				w.first = time.Now()
				w.example = fmt.Sprintf("%s/%s missing from revision %d (%d policies)", p.namespace, p.name, set.Revision, len(set.All()))
			}
			w.missing++
			w.last = time.Now()
			w.mu.Unlock()
			break
		}
	}
	return set
}

// checkPoliciesInForce fails t if any check ran without every policy.
func (s *stack) checkPoliciesInForce(t *testing.T, ld *load) {
	t.Helper()
	w := s.source
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.missing == 0 {
		t.Logf("policies: every check ran with all %d policies in force", len(w.expected))
		return
	}
	at := func(x time.Time) string {
		if ld == nil {
			return x.Format("15:04:05.000")
		}
		return "+" + ms(ld.since(x))
	}
	t.Errorf("policies: %d checks ran without a policy of the cluster (from %s to %s), e.g. %s: those requests skipped the policy and were allowed",
		w.missing, at(w.first), at(w.last), w.example)
}

// failureModeAnswers reads sluice_failure_mode_decisions_total by mode.
func (s *stack) failureModeAnswers() map[string]float64 {
	out := map[string]float64{}
	mfs, err := s.registry.Gather()
	if err != nil {
		s.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_failure_mode_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "mode" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// goroutines is a snapshot of the process's goroutines.
type goroutines struct {
	n      int
	stacks map[string]string // goroutine id -> its stack
}

func snapshotGoroutines() goroutines {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	g := goroutines{stacks: map[string]string{}}
	for _, st := range strings.Split(string(buf), "\n\n") {
		if id, ok := strings.CutPrefix(st, "goroutine "); ok {
			id, _, _ = strings.Cut(id, " ")
			g.stacks[id] = st
		}
	}
	g.n = len(g.stacks)
	return g
}

// goroutineBaseline lets the endpoint go idle and takes a snapshot.
func (s *stack) goroutineBaseline() goroutines {
	s.client.CloseIdleConnections()
	time.Sleep(300 * time.Millisecond)
	return snapshotGoroutines()
}

// without drops the goroutines whose stack mentions any of funcs.
func (g goroutines) without(funcs []string) goroutines {
	out := goroutines{stacks: map[string]string{}}
	for id, st := range g.stacks {
		if !slices.ContainsFunc(funcs, func(f string) bool { return strings.Contains(st, f) }) {
			out.stacks[id] = st
		}
	}
	out.n = len(out.stacks)
	return out
}

// goroutinesBackTo waits (up to 30s) for the goroutine count to come back
// within tolerance of base after the load ended, and says how long it
// took; on a timeout it shows the goroutines that were not there before.
// Goroutines whose stack mentions one of allowed are not counted.
func (s *stack) goroutinesBackTo(base goroutines, allowed ...string) {
	s.t.Helper()
	const tolerance = 2
	s.client.CloseIdleConnections()
	base = base.without(allowed)
	start := time.Now()
	for {
		all := snapshotGoroutines()
		now := all.without(allowed)
		if now.n <= base.n+tolerance {
			skipped := ""
			if len(allowed) > 0 {
				skipped = fmt.Sprintf("; %d not counted, in %s", all.n-now.n, strings.Join(allowed, ", "))
			}
			s.t.Logf("goroutines: %d after the load (baseline %d, tolerance %d%s), back in %s",
				now.n, base.n, tolerance, skipped, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > 30*time.Second {
			var extra []string
			for id, st := range now.stacks {
				if _, ok := base.stacks[id]; !ok {
					extra = append(extra, st)
				}
			}
			s.t.Fatalf("goroutines: %d, 30s after the load, baseline %d; not there before:\n%s", now.n, base.n, strings.Join(extra, "\n\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// breakerLog samples the circuit breaker's state every millisecond.
type breakerLog struct {
	mu      sync.Mutex
	changes []breakerChange
	stop    chan struct{}
	done    chan struct{}
}

type breakerChange struct {
	at    time.Time
	state check.BreakerState
}

func watchBreaker(b *check.Breaker) *breakerLog {
	l := &breakerLog{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		last := check.BreakerState(-1)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			if st := b.State(); st != last {
				l.mu.Lock()
				l.changes = append(l.changes, breakerChange{time.Now(), st})
				l.mu.Unlock()
				last = st
			}
			select {
			case <-l.stop:
				return
			case <-t.C:
			}
		}
	}()
	return l
}

func (l *breakerLog) end() []breakerChange {
	close(l.stop)
	<-l.done
	return l.changes
}

// firstChange returns when the breaker first entered state after from.
func firstChange(changes []breakerChange, state check.BreakerState, from time.Time) (time.Time, bool) {
	for _, c := range changes {
		if c.state == state && !c.at.Before(from) {
			return c.at, true
		}
	}
	return time.Time{}, false
}

// waitUntil polls cond until it returns nil.
func waitUntil(t testing.TB, timeout time.Duration, what string, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		err := cond()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// policiesOnNode checks that a Redis node holds the policy table with
// every policy and the library.
func policiesOnNode(ctx context.Context, c redis.Cmdable, policies []testPolicy) error {
	ids, err := c.HKeys(ctx, policytable.HashKey).Result()
	if err != nil {
		return fmt.Errorf("policy table: %w", err)
	}
	for _, p := range policies {
		if !slices.Contains(ids, p.namespace+"/"+p.name) {
			return fmt.Errorf("policy table lacks %s/%s (has %v)", p.namespace, p.name, ids)
		}
	}
	return libraryOnNode(ctx, c)
}

// libraryOnNode checks that a node has the rate-limit library loaded.
func libraryOnNode(ctx context.Context, c redis.Cmdable) error {
	libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: redisstore.LibraryName}).Result()
	if err != nil {
		return fmt.Errorf("function list: %w", err)
	}
	for _, l := range libs {
		if l.Name == redisstore.LibraryName {
			return nil
		}
	}
	return fmt.Errorf("library %s not loaded", redisstore.LibraryName)
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
}
