package reliability

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/controller"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/redisconn"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// evictionMaxMemory is the Redis maxmemory of the eviction tests: full
// after some tens of thousands of counters, so the load evicts all along.
const evictionMaxMemory = "8mb"

// eventLog records the Warning events the table sync emits.
type eventLog struct {
	mu     sync.Mutex
	events []string // "<namespace>/<name> <type> <reason> <message>"
}

var _ recorder.EventRecorder = (*eventLog)(nil)

func (l *eventLog) Eventf(regarding, _ k8sruntime.Object, eventtype, reason, _, note string, args ...any) {
	name := "?"
	if o, ok := regarding.(interface {
		GetNamespace() string
		GetName() string
	}); ok {
		name = o.GetNamespace() + "/" + o.GetName()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, fmt.Sprintf("%s %s %s %s", name, eventtype, reason, fmt.Sprintf(note, args...)))
}

func (l *eventLog) AnnotatedEventf(regarding, related k8sruntime.Object, _ map[string]string, eventtype, reason, action, note string, args ...any) {
	l.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

// withReason returns the events of reason, by policy.
func (l *eventLog) withReason(reason string) map[string][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]string{}
	for _, e := range l.events {
		f := strings.SplitN(e, " ", 4)
		if f[2] == reason {
			out[f[0]] = append(out[f[0]], f[3])
		}
	}
	return out
}

// lineLog is a logr sink that keeps the lines (the controller's log).
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		l.lines = append(l.lines, prefix+" "+args)
		l.mu.Unlock()
	}, funcr.Options{})
}

// Write takes a line of a slog text handler.
func (l *lineLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	l.lines = append(l.lines, string(b))
	l.mu.Unlock()
	return len(b), nil
}

func (l *lineLog) slog() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

func (l *lineLog) matching(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// tableLoss is a stretch of time when a key of the policy table was
// missing in Redis.
type tableLoss struct {
	from, to      time.Time
	hash, revison bool // which keys were missing at some point
	// fresh is what a check process starting during the loss loaded:
	// how many policies, at which revision (-1: not tried).
	freshPolicies int
	freshRevision int64
}

// tableWatch polls the table's two keys (EXISTS does not touch a key's
// LRU or LFU data, so the watch changes nothing Redis evicts).
type tableWatch struct {
	mu     sync.Mutex
	losses []*tableLoss
	stop   chan struct{}
	done   chan struct{}
}

func watchTable(t *testing.T, admin *redis.Client, checkClient redis.UniversalClient) *tableWatch {
	w := &tableWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		ctx := context.Background()
		var cur *tableLoss
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			var hash, rev *redis.IntCmd
			if _, err := admin.Pipelined(ctx, func(p redis.Pipeliner) error {
				hash = p.Exists(ctx, policytable.HashKey)
				rev = p.Exists(ctx, policytable.RevisionKey)
				return nil
			}); err != nil {
				t.Errorf("watching the policy table: %v", err)
				return
			}
			missingHash, missingRev := hash.Val() == 0, rev.Val() == 0
			now := time.Now()
			switch {
			case (missingHash || missingRev) && cur == nil:
				cur = &tableLoss{from: now, freshRevision: -1}
				w.mu.Lock()
				w.losses = append(w.losses, cur)
				w.mu.Unlock()
				// A check process that starts now: what does it enforce?
				entries, revision, err := policytable.New(checkClient).Load(ctx)
				if err == nil {
					cur.freshPolicies, cur.freshRevision = len(entries), revision
				}
				fallthrough
			case cur != nil && (missingHash || missingRev):
				w.mu.Lock()
				cur.hash, cur.revison = cur.hash || missingHash, cur.revison || missingRev
				w.mu.Unlock()
			case cur != nil:
				w.mu.Lock()
				cur.to = now
				w.mu.Unlock()
				cur = nil
			}
		}
	}()
	t.Cleanup(w.end)
	return w
}

func (w *tableWatch) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// TestEvictionUnderMemoryPressure fills a Redis of 8 MB maxmemory with
// counters (distinct key values through the check path, in process) under
// each kind of maxmemory-policy, with the controller's table sync
// (reading the policy through INFO, as `manager controller` does) beside
// it. The table has no TTL, so only an allkeys-* policy can evict it:
// then the table sync warns on every policy (EvictionRisk) and writes the
// table back within a sync interval whenever it is lost, saying so
// (PolicyTableRestored and its log line), and the running check process
// keeps every policy meanwhile. volatile-* evicts counters only;
// noeviction evicts nothing and answers by each policy's failureMode.
func TestEvictionUnderMemoryPressure(t *testing.T) {
	if testing.Short() {
		t.Skip("distinct key values through a full Redis, four times")
	}
	for _, tc := range []struct {
		policy string
		keys   int
	}{
		{"allkeys-random", 1_000_000},
		{"allkeys-lru", 300_000},
		{"volatile-lru", 300_000},
		{"noeviction", 100_000},
	} {
		t.Run(tc.policy, func(t *testing.T) { testEviction(t, tc.policy, tc.keys) })
	}
}

func testEviction(t *testing.T, maxmemoryPolicy string, keys int) {
	evicts := strings.HasPrefix(maxmemoryPolicy, "allkeys-")
	srv := redistest.Start(t, redistest.WithArgs("--maxmemory", evictionMaxMemory, "--maxmemory-policy", maxmemoryPolicy))
	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	t.Cleanup(func() { cancel(); running.Wait() })
	admin := srv.Client()

	// The controller's table sync, logging into ctlLog.
	ctlLog, events := &lineLog{}, &eventLog{}
	ctlCtx := logf.IntoContext(ctx, ctlLog.logger())
	ctlClient := newClient(t, srv.Addr())
	cstore, err := redisstore.New(ctlClient, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cstore.Close() })
	ts := &controller.TableSync{
		Client: newClusterState(t, faultPolicies), Syncer: &policytable.Publisher{Table: policytable.New(ctlClient), Library: cstore},
		LastGood: controller.NewLastGood(), Interval: syncInterval, Recorder: events,
		Memory: func(ctx context.Context) ([]redisconn.MemoryPolicy, error) {
			return redisconn.ReadMemoryPolicies(ctx, ctlClient)
		},
	}
	if err := ts.SyncOnce(ctlCtx); err != nil {
		t.Fatalf("first table sync: %v", err)
	}
	running.Go(func() { _ = ts.Start(ctlCtx) })

	// The check process: table reader, checker, over a client of its own.
	checkClient := newClient(t, srv.Addr())
	store, err := redisstore.New(checkClient, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	observed := &observedStore{Store: store}
	readerLog := &lineLog{}
	reader := policytable.NewReader(policytable.New(checkClient), readerLog.slog())
	running.Go(func() { following(checkClient, reader, readerLog.slog()).Run(ctx) })
	waitUntil(t, 10*time.Second, "the check process loads the policies", func() error {
		if n := len(reader.Policies().All()); n != len(faultPolicies) {
			return fmt.Errorf("%d policies", n)
		}
		return nil
	})
	source := &watchedSource{Source: reader, expected: faultPolicies}
	reg := prometheus.NewRegistry()
	// A deadline far above the load's queueing: answers by failureMode
	// here come from Redis refusing, not from time.
	metrics := check.NewMetrics(reg)
	checker := check.New(check.Options{Backend: observedBackend(store.Backend(), observed), Source: source, Timeout: 2 * time.Second, Metrics: metrics, Observer: check.NewTally(metrics)})

	watch := watchTable(t, admin, checkClient)
	stats := func() map[string]string {
		info, err := srv.Info(ctx, "all")
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	before := stats()

	// The load: distinct key values, alternately in the open and the
	// closed namespace; each key value's first request must be allowed
	// (by Redis), or answered by the failure mode.
	var next, decided, failOpen, failClosed, wrong atomic.Int64
	var firstWrong atomic.Value
	start := time.Now()
	var wg sync.WaitGroup
	for range 4 * runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			var out check.Outcome
			req := policy.Request{Method: http.MethodGet, Host: "app.example", Path: "/", Header: http.Header{}}
			for {
				i := int(next.Add(1) - 1)
				if i >= keys {
					return
				}
				ns := faultPolicies[i%2].namespace
				req.Header["X-Client"] = []string{"k" + strconv.Itoa(i)}
				err := checker.CheckInto(ctx, check.Input{Namespace: ns, Request: &req}, &out)
				switch {
				case err == nil && !out.Degraded && out.Allowed && len(out.Limits) == 1:
					decided.Add(1)
				case err == nil && out.Degraded && out.Allowed && ns == "open":
					failOpen.Add(1)
				case err == nil && out.Degraded && !out.Allowed && ns == "closed":
					failClosed.Add(1)
				default:
					if wrong.Add(1) == 1 {
						firstWrong.Store(fmt.Sprintf("value %d (%s): allowed %v degraded %v (%v) limits %d, err %v", i, ns, out.Allowed, out.Degraded, out.StoreErr, len(out.Limits), err))
					}
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	// Let the sync see the end state, then stop watching.
	time.Sleep(syncInterval + time.Second)
	watch.end()
	after := stats()
	t.Logf("%s, maxmemory %s: %d distinct key values in %s; decided by Redis %d, failure mode %d open / %d closed, wrong %d; evicted_keys %s, used_memory_peak %s, keys now %d; store errors: %s",
		maxmemoryPolicy, evictionMaxMemory, keys, took.Round(time.Millisecond), decided.Load(), failOpen.Load(), failClosed.Load(), wrong.Load(),
		diff(before, after, "evicted_keys"), after["used_memory_peak_human"], admin.DBSize(ctx).Val(), &observed.errs)
	if n := wrong.Load(); n > 0 {
		t.Errorf("%d checks of a fresh key value were neither allowed by Redis nor answered by their failure mode, e.g. %s", n, firstWrong.Load())
	}

	// The table: every loss restored within a sync interval (and a
	// margin for the machine), and said.
	watch.mu.Lock()
	losses := watch.losses
	watch.mu.Unlock()
	var longest time.Duration
	lostHash, late := 0, 0
	for i, l := range losses {
		if l.to.IsZero() {
			t.Errorf("loss %d at +%s (hash missing %v, revision missing %v): not restored by the end", i, ms(l.from.Sub(start)), l.hash, l.revison)
			continue
		}
		d := l.to.Sub(l.from)
		longest = max(longest, d)
		if l.hash {
			lostHash++
		}
		t.Logf("table loss %d at +%s: hash missing %v, revision missing %v; restored after %s; a check process starting then loaded %d policies at revision %d",
			i, ms(l.from.Sub(start)), l.hash, l.revison, ms(d), l.freshPolicies, l.freshRevision)
		// A sync restores the table; with allkeys-random the restored
		// keys may be evicted again before the watcher sees them, and the
		// next sync restores them: rarely two intervals, never more.
		if d > syncInterval+2*time.Second {
			late++
		}
		if d > 2*syncInterval+2*time.Second {
			t.Errorf("loss %d: the table was restored %s after it was lost, more than two sync intervals (%s) + 2s", i, d, syncInterval)
		}
	}
	// Rarely: one, or a tenth when there are more than 10 losses (a run
	// has about 6, so a tenth alone allowed none of them).
	if late > max(1, len(losses)/10) {
		t.Errorf("%d of %d losses restored later than a sync interval (%s) + 2s; want at most one, or a tenth", late, len(losses), syncInterval)
	}
	restoredLog := ctlLog.matching("policy table entries were missing in Redis; written back")
	restoredEvents := events.withReason(controller.ReasonTableRestored)
	riskEvents := events.withReason(controller.ReasonEvictionRisk)
	missingLog := readerLog.matching("policy table missing in Redis")
	t.Logf("table: %d losses (%d of the hash), longest %s; controller: %d 'written back' log lines, restore events on %d policies, eviction-risk events on %d policies; check process: %d 'policy table missing' log lines",
		len(losses), lostHash, ms(longest), len(restoredLog), len(restoredEvents), len(riskEvents), len(missingLog))
	source.mu.Lock()
	missing, example := source.missing, source.example
	source.mu.Unlock()
	if missing > 0 {
		t.Errorf("%d checks ran without a policy of the cluster (e.g. %s): a lost table lifted a limit", missing, example)
	}

	if !evicts {
		if len(losses) > 0 {
			t.Errorf("%s: the policy table (no TTL) was lost %d times", maxmemoryPolicy, len(losses))
		}
		if len(riskEvents) > 0 {
			t.Errorf("%s cannot evict the table, but the controller warned: %v", maxmemoryPolicy, riskEvents)
		}
		switch maxmemoryPolicy {
		case "noeviction":
			if diff(before, after, "evicted_keys") != "0" {
				t.Errorf("noeviction evicted %s keys", diff(before, after, "evicted_keys"))
			}
			if failOpen.Load()+failClosed.Load() == 0 || !strings.Contains(observed.errs.String(), "OOM") {
				t.Errorf("noeviction: no check was answered by its failure mode with Redis's OOM refusal (store errors: %s)", &observed.errs)
			}
		default:
			if diff(before, after, "evicted_keys") == "0" {
				t.Errorf("%s: no key was evicted; the test did not fill Redis", maxmemoryPolicy)
			}
		}
		return
	}

	// allkeys-*: the risk is named on every policy, once.
	for _, p := range faultPolicies {
		id := p.namespace + "/" + p.name
		if ev := riskEvents[id]; len(ev) != 1 || !strings.Contains(ev[0], "maxmemory-policy "+maxmemoryPolicy) {
			t.Errorf("policy %s: eviction-risk events %q, want one naming %s", id, ev, maxmemoryPolicy)
		}
	}
	if risk := ctlLog.matching("Redis may evict the policy table"); len(risk) != 1 {
		t.Errorf("the controller logged the eviction risk %d times, want once: %q", len(risk), risk)
	}
	// Every loss of the hash is said by the controller when it writes it
	// back (a loss of the revision alone is said by the check process).
	if lostHash > 0 && len(restoredLog) == 0 {
		t.Errorf("the policy table's hash was lost %d times, and the controller never said it wrote it back", lostHash)
	}
	if lostHash > 0 && len(restoredEvents) == 0 {
		t.Errorf("the policy table's hash was lost %d times, and no policy got a %s event", lostHash, controller.ReasonTableRestored)
	}
	if len(restoredLog) > 0 {
		t.Logf("controller: %s", restoredLog[0])
	}
}

// diff is after[key] - before[key] for integer INFO fields.
func diff(before, after map[string]string, key string) string {
	b, _ := strconv.ParseInt(before[key], 10, 64)
	a, _ := strconv.ParseInt(after[key], 10, 64)
	return strconv.FormatInt(a-b, 10)
}

// aclRules are the rules of a users.acl line's fields, each selector
// ("(~keys +cmd ...)") one rule as ACL SETUSER takes it.
func aclRules(fields []string) []string {
	var rules []string
	open := false
	for _, f := range fields {
		if open {
			rules[len(rules)-1] += " " + f
		} else {
			rules = append(rules, f)
		}
		switch {
		case strings.HasPrefix(f, "(") && !strings.HasSuffix(f, ")"):
			open = true
		case open && strings.HasSuffix(f, ")"):
			open = false
		}
	}
	return rules
}

// TestControllerUserReadsMaxmemoryPolicy runs the eviction check as the
// controller's Redis user of config/redis/users.acl: the check needs INFO
// memory (ACL +info|memory, that section alone). While the shipped user
// lacks it, the controller says once that it cannot check, and the table
// sync goes on; with it, the controller reads
// the policy.
func TestControllerUserReadsMaxmemoryPolicy(t *testing.T) {
	const user = "sluice-controller"
	ctx := context.Background()
	b, err := os.ReadFile(filepath.Join(kubetest.RepoRoot(t), "config", "redis", "users.acl"))
	if err != nil {
		t.Fatal(err)
	}
	var rules []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "user" && f[1] == user {
			rules = aclRules(f[2:])
		}
	}
	if rules == nil {
		t.Fatalf("config/redis/users.acl: no line for %s", user)
	}
	srv := redistest.Start(t, redistest.WithArgs("--maxmemory", evictionMaxMemory, "--maxmemory-policy", "allkeys-lru"))
	admin := srv.Client()
	if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", user}, append(toAny(rules), ">pw")...)...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %s %s: %v", user, strings.Join(rules, " "), err)
	}
	c := redisstore.NewClient(&redis.UniversalOptions{Addrs: []string{srv.Addr()}, Username: user, Password: "pw"})
	t.Cleanup(func() { _ = c.Close() })

	shippedGrants := slices.Contains(rules, "+info|memory") || slices.Contains(rules, "+info") || slices.Contains(rules, "+@all")
	_, err = redisconn.ReadMemoryPolicies(ctx, c)
	switch {
	case shippedGrants && err != nil:
		t.Fatalf("the shipped %s user grants INFO, yet: %v", user, err)
	case !shippedGrants && !redisconn.IsPermissionDenied(err):
		t.Fatalf("the shipped %s user lacks +info|memory; reading maxmemory-policy: %v, want NOPERM", user, err)
	case !shippedGrants:
		t.Logf("config/redis/users.acl: %s may not run INFO (%v); the controller cannot check the eviction risk until the line gains +info|memory", user, err)
		// The table sync goes on, and says once why it cannot check.
		cstore, err := redisstore.New(c, redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cstore.Close() })
		lines := &lineLog{}
		ts := &controller.TableSync{Client: newClusterState(t, faultPolicies), Syncer: &policytable.Publisher{Table: policytable.New(c), Library: cstore},
			LastGood: controller.NewLastGood(), Recorder: &eventLog{},
			Memory: func(ctx context.Context) ([]redisconn.MemoryPolicy, error) {
				return redisconn.ReadMemoryPolicies(ctx, c)
			}}
		for range 3 {
			if err := ts.SyncOnce(logf.IntoContext(ctx, lines.logger())); err != nil {
				t.Fatalf("table sync as %s: %v", user, err)
			}
		}
		if got := lines.matching("grant it +info|memory"); len(got) != 1 {
			t.Errorf("after 3 syncs the controller said %d times that it may not run INFO, want once: %q", len(got), got)
		}
		if err := policiesOnNode(ctx, admin, faultPolicies); err != nil {
			t.Errorf("the table sync as %s: %v", user, err)
		}
		if err := admin.Do(ctx, "ACL", "SETUSER", user, "+info|memory").Err(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := redisconn.ReadMemoryPolicies(ctx, c)
	if err != nil || len(got) != 1 || got[0].Policy != "allkeys-lru" || got[0].MaxMemory != 8<<20 || !got[0].EvictsTable() {
		t.Fatalf("as %s with +info|memory: %v, %v; want allkeys-lru with maxmemory 8 MiB", user, got, err)
	}
	// That grant is INFO memory alone: the whole INFO stays refused.
	if err := c.Info(ctx).Err(); !redisconn.IsPermissionDenied(err) {
		t.Errorf("as %s with +info|memory, INFO: %v, want NOPERM", user, err)
	}
	t.Logf("as %s with +info|memory: %v; INFO without a section refused", user, got)
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// TestEvictedTableHashIsAMissingTable is what an allkeys-* eviction of the
// table's hash alone (its revision kept: 16 of 20 losses under
// allkeys-random in TestEvictionUnderMemoryPressure, 3 of 3 under
// allkeys-lru) must leave the check processes: every policy, until the
// table sync writes the table back whole. A policy's single write (a
// reconcile racing the restore) must be refused, as it is when FLUSHALL
// took the revision too (TestPartlyRestoredTableKeepsEveryPolicy).
//
// The table is present only when its hash holds the marker field
// (policytable.MarkerField), whatever the revision says: with the revision
// alone, the write would succeed and the reader load a table of one
// policy, lifting the others until the next sync (up to --sync-interval,
// 3s).
func TestEvictedTableHashIsAMissingTable(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := newClient(t, srv.Addr())
	table := policytable.New(client)
	entries := make([]*policytable.Entry, len(faultPolicies))
	for i, p := range faultPolicies {
		entries[i] = &policytable.Entry{Namespace: p.namespace, Name: p.name, Generation: 1, Spec: p.parse(t)}
	}
	if _, _, err := table.Replace(ctx, entries, nil); err != nil {
		t.Fatal(err)
	}
	reader := policytable.NewReader(table, quiet)
	done := make(chan struct{})
	go func() { following(client, reader, quiet).Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitUntil(t, 5*time.Second, "reader loads the table", func() error {
		if n := len(reader.Policies().All()); n != len(entries) {
			return fmt.Errorf("%d policies", n)
		}
		return nil
	})

	if err := srv.Client().Del(ctx, policytable.HashKey).Err(); err != nil { // evicted
		t.Fatal(err)
	}
	if _, _, err := table.Put(ctx, entries[0]); !errors.Is(err, policytable.ErrTableMissing) {
		t.Errorf("a single write into a table whose hash was evicted: %v, want ErrTableMissing", err)
	}
	time.Sleep(1500 * time.Millisecond) // the reader's change message and polls
	set := reader.Policies()
	for _, e := range entries {
		if set.Get(e.Namespace, e.Name) == nil {
			t.Errorf("the reader holds revision %d without %s: that policy is not enforced", set.Revision, e.ID())
		}
	}
}
