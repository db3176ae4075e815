package security

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
	"github.com/sluice-dev/sluice/internal/topkeys"
	"github.com/sluice-dev/sluice/webhook"
)

const (
	// policyNS holds the test's policies.
	policyNS = "acl"
	// burst is what every limit of the test admits at once.
	burst = 3
	// syncInterval is the controller's default --sync-interval: how often
	// it restores the library and the table.
	syncInterval = 3 * time.Second
)

// testPolicies are one policy per algorithm, one with all their limits on
// one key (one library call with a key each), all failing open, and one
// failing closed.
func testPolicies() []*ratelimitv1alpha1.RateLimitPolicy {
	var out []*ratelimitv1alpha1.RateLimitPolicy
	for _, l := range systest.EveryAlgorithm(burst) {
		out = append(out, systest.Policy(policyNS, string(l.Name), "/"+string(l.Name), ratelimitv1alpha1.FailureModeOpen, l))
	}
	out = append(out,
		systest.Policy(policyNS, "all-algorithms", "/all", ratelimitv1alpha1.FailureModeOpen, systest.EveryAlgorithm(burst)...),
		systest.Policy(policyNS, "fail-closed", "/closed", ratelimitv1alpha1.FailureModeClosed, systest.FixedWindow("hour", burst, "1h")),
	)
	return out
}

func pathOf(p *ratelimitv1alpha1.RateLimitPolicy) string { return string(p.Spec.Match.Paths[0]) }

// TestProcessesAsACLUsers runs `manager controller` and `manager check`,
// built from this tree, as the Redis users of config/redis/users.acl
// against a real redis-server and API server: policies of every algorithm
// become Ready and are enforced, Redis refuses nothing they send, each user
// is refused what it must not do, and after FUNCTION FLUSH the check
// endpoint (whose user may not load the library) answers by failure mode
// until the controller loads the library again.
func TestProcessesAsACLUsers(t *testing.T) {
	ctx := context.Background()
	kubetest.Assets(t)
	root := kubetest.RepoRoot(t)
	bin := manager.Path(t)
	users := loadACLUsers(t)
	srv := redistest.Start(t, redistest.WithArgs("--aclfile", users.File))
	admin := srv.Client()
	redisURL := "redis://" + srv.Addr() + "/0"

	kube := kubetest.Start(t, kubetest.Options{CRDDirs: []string{filepath.Join(root, "config", "crd", "bases")}})
	k := systest.KubeClient(t, kube.Config)
	systest.CreateNamespaces(t, k, "sluice-system", policyNS)

	dir := t.TempDir()
	probe := fmt.Sprintf("127.0.0.1:%d", systest.FreePort(t))
	ctrl := systest.Start(t, dir, "controller", nil, bin, "controller",
		"--kubeconfig", kube.Kubeconfig,
		"--redis-url", redisURL,
		"--redis-username", controllerUser, "--redis-password-file", users.PasswordFile[controllerUser],
		"--metrics-bind-address", "0", "--health-probe-bind-address", probe,
		"--leader-elect=true", "--leader-election-namespace", "sluice-system",
		"--sync-interval", syncInterval.String(),
	)
	checkAddr := fmt.Sprintf("127.0.0.1:%d", systest.FreePort(t))
	chk := systest.Start(t, dir, "check", nil, bin, "check",
		"--listen", checkAddr,
		"--redis-url", redisURL,
		"--redis-username", checkUser, "--redis-password-file", users.PasswordFile[checkUser],
		"--redis-load-library=false", // as config/manager/check.yaml runs it
	)
	ctrl.WaitHTTP(t, "http://"+probe+"/readyz", 30*time.Second)
	chk.WaitHTTP(t, "http://"+checkAddr+"/readyz", 30*time.Second)
	cc := systest.NewCheckClient(checkAddr, policyNS)

	policies := testPolicies()
	for _, p := range policies {
		if err := k.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range policies {
		systest.WaitReady(t, k, policyNS, p.Name, 30*time.Second)
		cc.WaitLimit(t, pathOf(p), burst, 10*time.Second)
	}
	if log := aclLog(t, admin); len(log) > 0 {
		t.Fatalf("Redis refused the controller or the check endpoint while they set up:%s", describeLog(log))
	}

	var counter string // a counter key the check endpoint wrote
	t.Run("policies of every algorithm are enforced", func(t *testing.T) {
		for _, p := range policies {
			got := cc.Decisions(t, pathOf(p), "client-a", burst+2)
			if !systest.FirstN(got, burst) {
				t.Errorf("%s: decisions %v, want %d allowed then denied", p.Name, got, burst)
			}
			other := cc.MustAsk(t, pathOf(p), "client-b")
			if !other.Allowed || other.Degraded {
				t.Errorf("%s: another client's first request: %+v, want allowed by Redis", p.Name, other)
			}
			if len(other.Policies) != 1 || len(other.Policies[0].Limits) != len(p.Spec.Limits) {
				t.Fatalf("%s: answer %+v, want the policy's %d limits", p.Name, other, len(p.Spec.Limits))
			}
			for _, l := range other.Policies[0].Limits {
				alg, err := ratelimit.ParseAlgorithm(l.Algorithm)
				if err != nil {
					t.Fatal(err)
				}
				key, _ := ratelimit.RedisKey(l.RedisKey, alg) // a bucket, or a log's own key
				ttl, err := admin.PTTL(ctx, key).Result()
				if err != nil || ttl <= 0 {
					t.Errorf("%s: counter %s: TTL %v (%v), want one", p.Name, key, ttl, err)
				}
				counter = key
			}
		}
		if log := aclLog(t, admin); len(log) > 0 {
			t.Errorf("Redis refused what the processes sent in normal operation:%s", describeLog(log))
		}
	})
	if counter == "" {
		t.FailNow()
	}

	// The check endpoint publishes its top key values as its user, and
	// the controller's user reads them merged.
	t.Run("top key values published by the check user, read by the controller user", func(t *testing.T) {
		reader := topkeys.NewReader(users.client(t, srv.Addr(), controllerUser, nil), nil)
		name := policies[0].Name
		deadline := time.Now().Add(3 * topkeys.PublishInterval)
		for {
			answer, err := reader.Top(ctx, policyNS, name, topkeys.DefaultWindow)
			if err != nil {
				t.Fatal(err)
			}
			denied, admitted := answer.Denied.Entries, answer.Admitted.Entries
			if len(denied) == 1 && denied[0] == (topkeys.Entry{Key: "client-a", Count: 2}) && len(admitted) == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s/%s: top %+v, want client-a denied twice, client-a and client-b admitted", policyNS, name, answer)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if log := aclLog(t, admin); len(log) > 0 {
			t.Errorf("Redis refused publishing or reading top key values:%s", describeLog(log))
		}
	})

	if err := admin.Set(ctx, "app:secret", "s3cret", 0).Err(); err != nil {
		t.Fatal(err)
	}
	maxmemory := admin.ConfigGet(ctx, "maxmemory").Val()["maxmemory"]
	evilLibrary := "#!lua name=evil\nredis.register_function('evil', function() return redis.call('FLUSHALL') end)"
	noSuchSHA := strings.Repeat("0", 40)

	t.Run("check user is refused", func(t *testing.T) {
		c := users.client(t, srv.Addr(), checkUser, nil)
		for _, tc := range []struct {
			what string
			args []any
		}{
			{"FLUSHALL", []any{"FLUSHALL"}},
			{"FLUSHDB", []any{"FLUSHDB"}},
			{"CONFIG SET", []any{"CONFIG", "SET", "maxmemory", "1mb"}},
			{"CONFIG GET", []any{"CONFIG", "GET", "requirepass"}},
			{"EVAL of its own script", []any{"EVAL", "return 1", 0}},
			{"FUNCTION LOAD", []any{"FUNCTION", "LOAD", evilLibrary}},
			{"FUNCTION FLUSH", []any{"FUNCTION", "FLUSH"}},
			{"FUNCTION DELETE", []any{"FUNCTION", "DELETE", redisstore.LibraryName}},
			{"SCRIPT LOAD", []any{"SCRIPT", "LOAD", "return 1"}},
			{"SCRIPT FLUSH", []any{"SCRIPT", "FLUSH"}},
			{"HSET on the table", []any{"HSET", policytable.HashKey, policyNS + "/evil", "{}"}},
			{"HDEL on the table", []any{"HDEL", policytable.HashKey, policyNS + "/fail-closed"}},
			{"DEL of the table", []any{"DEL", policytable.HashKey}},
			{"SET of the revision", []any{"SET", policytable.RevisionKey, "1"}},
			{"GET of a key outside Sluice", []any{"GET", "app:secret"}},
			{"SET of a key outside Sluice", []any{"SET", "app:other", "x"}},
			{"KEYS", []any{"KEYS", "*"}},
			{"SCAN", []any{"SCAN", "0"}},
			{"HLEN of a counter (only the commands the library runs)", []any{"HLEN", counter}},
			{"the library pointed at the table", []any{"FCALL", redisstore.FunctionName, 1, policytable.HashKey, "1:0:-", "2:3:1:3600000000:1:0"}},
			{"any cached script (the controller's too) pointed at the table", []any{"EVALSHA", noSuchSHA, 2, policytable.HashKey, policytable.RevisionKey, policyNS + "/evil", "{}", policytable.Channel}},
			{"ACL SETUSER", []any{"ACL", "SETUSER", checkUser, "+@all"}},
			{"SHUTDOWN", []any{"SHUTDOWN", "NOSAVE"}},
		} {
			if err := c.Do(ctx, tc.args...).Err(); !refused(err) {
				t.Errorf("%s: %v, want NOPERM", tc.what, err)
			}
		}
		// What it may do: read the table.
		if n, err := c.HLen(ctx, policytable.HashKey).Result(); !refused(err) {
			t.Errorf("HLEN of the table: %d, %v; want NOPERM (HGETALL and GET only)", n, err)
		}
		// The hash holds each policy and the full sync's marker field.
		if m, err := c.HGetAll(ctx, policytable.HashKey).Result(); err != nil || len(m) != len(policies)+1 || m[policytable.MarkerField] == "" {
			t.Errorf("HGETALL of the table: %d entries, %v; want %d policies and the field %q", len(m), err, len(policies), policytable.MarkerField)
		}
	})

	t.Run("controller user is refused", func(t *testing.T) {
		c := users.client(t, srv.Addr(), controllerUser, nil)
		for _, tc := range []struct {
			what string
			args []any
		}{
			{"FLUSHALL", []any{"FLUSHALL"}},
			{"CONFIG SET", []any{"CONFIG", "SET", "maxmemory", "1mb"}},
			{"FUNCTION FLUSH", []any{"FUNCTION", "FLUSH"}},
			{"FUNCTION DELETE", []any{"FUNCTION", "DELETE", redisstore.LibraryName}},
			{"SCRIPT FLUSH", []any{"SCRIPT", "FLUSH"}},
			{"KEYS", []any{"KEYS", "*"}},
			{"GET of a key outside Sluice", []any{"GET", "app:secret"}},
			// The library and its commands on counters are the admin
			// API's (inspect, reset, lift: config/redis/README.md); code
			// of its own is not.
			{"a script on a counter", []any{"EVAL", "return redis.call('DEL', KEYS[1])", 1, counter}},
		} {
			if err := c.Do(ctx, tc.args...).Err(); !refused(err) {
				t.Errorf("%s: %v, want NOPERM", tc.what, err)
			}
		}
		// Inside a script the refusal is a script error.
		err := c.Eval(ctx, "return redis.call('GET', 'app:secret')", nil).Err()
		if err == nil || !strings.Contains(err.Error(), "can't access") {
			t.Errorf("a script reaching a key outside Sluice: %v, want a refusal", err)
		}
	})

	t.Run("nothing was changed by the refused commands", func(t *testing.T) {
		if v := admin.Get(ctx, "app:secret").Val(); v != "s3cret" {
			t.Errorf("app:secret = %q", v)
		}
		if v := admin.ConfigGet(ctx, "maxmemory").Val()["maxmemory"]; v != maxmemory {
			t.Errorf("maxmemory = %q, was %q", v, maxmemory)
		}
		if n := admin.HLen(ctx, policytable.HashKey).Val(); n != int64(len(policies))+1 {
			t.Errorf("the table holds %d fields, want %d policies and the marker", n, len(policies))
		}
		if !libraryLoaded(ctx, t, admin) || admin.Exists(ctx, counter).Val() != 1 {
			t.Errorf("the library or the counter %s is gone", counter)
		}
		libs := admin.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "evil"}).Val()
		if len(libs) != 0 {
			t.Errorf("library evil was loaded")
		}
		if n := admin.DBSize(ctx).Val(); n == 0 {
			t.Errorf("the database is empty")
		}
	})
	if err := admin.ACLLogReset(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	t.Run("library flushed: failure modes until the controller reloads it", func(t *testing.T) {
		testLibraryFlushed(ctx, t, admin, cc)
		for _, p := range []*systest.Proc{ctrl, chk} {
			if done, err := p.Exited(); done {
				t.Errorf("%s exited: %v", p.Name, err)
			}
		}
	})
}

// functionLists is how many FUNCTION LIST commands the server ran.
func functionLists(ctx context.Context, t *testing.T, admin redis.Cmdable) int64 {
	t.Helper()
	info, err := admin.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_function|list:calls="); ok {
			n, err := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			if err != nil {
				t.Fatalf("INFO commandstats: %q: %v", line, err)
			}
			return n
		}
	}
	return 0
}

func libraryLoaded(ctx context.Context, t *testing.T, admin redis.Cmdable) bool {
	t.Helper()
	libs, err := admin.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: redisstore.LibraryName}).Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(libs) == 1
}

// testLibraryFlushed empties the function and script caches behind
// everyone's back, just after the controller's periodic sync, so that the
// next sync is a whole interval away. The check endpoint's store finds the library missing
// and tries to load it, which its user may not: each policy's failure mode
// answers (Closed denies, Open allows), until the controller's periodic
// sync loads the library and Redis decides again.
func testLibraryFlushed(ctx context.Context, t *testing.T, admin *redis.Client, cc *systest.CheckClient) {
	var flushed time.Time
	var closed, open webhook.CheckResponse
	for attempt := 1; ; attempt++ {
		// Flush just after a sync of the controller (it lists the
		// functions every sync): the longest wait for the next one.
		before := functionLists(ctx, t, admin)
		deadline := time.Now().Add(2 * syncInterval)
		for functionLists(ctx, t, admin) == before {
			if time.Now().After(deadline) {
				t.Fatalf("the controller did not sync (FUNCTION LIST) within %s", 2*syncInterval)
			}
			time.Sleep(2 * time.Millisecond)
		}
		if err := admin.FunctionFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		flushed = time.Now()
		closed = cc.MustAsk(t, "/closed", fmt.Sprintf("flush-%d", attempt))
		open = cc.MustAsk(t, "/fixed-window", fmt.Sprintf("flush-%d", attempt))
		if closed.Degraded && open.Degraded {
			break
		}
		// The controller's sync reloaded it in between: flush again.
		if attempt == 3 {
			t.Fatalf("no answer by failure mode after a flush, three times: closed %+v, open %+v", closed, open)
		}
	}
	t.Logf("just after FUNCTION FLUSH: fail-closed policy: allowed=%v reason=%s error=%q", closed.Allowed, closed.Reason, closed.Error)
	t.Logf("just after FUNCTION FLUSH: fail-open policy: allowed=%v reason=%s error=%q", open.Allowed, open.Reason, open.Error)
	if closed.Allowed || closed.Reason != "StoreUnavailable" {
		t.Errorf("fail-closed policy: allowed=%v reason=%s, want denied, StoreUnavailable", closed.Allowed, closed.Reason)
	}
	if !strings.Contains(closed.Error, "not loaded") || strings.Contains(closed.Error, "NOPERM") {
		t.Errorf("the first failure: %q, want the library missing (and no attempt to load it)", closed.Error)
	}
	if !open.Allowed || open.Reason != "StoreUnavailable" {
		t.Errorf("fail-open policy: allowed=%v reason=%s, want allowed, StoreUnavailable", open.Allowed, open.Reason)
	}

	// Ask until Redis decides again: a fresh client each time, so every
	// answer is Redis's or the failure mode's, never the cache of denials.
	degraded := 0
	var recovered, restored time.Duration
	for i := 0; ; i++ {
		if restored == 0 && libraryLoaded(ctx, t, admin) {
			restored = time.Since(flushed)
		}
		r := cc.MustAsk(t, "/closed", fmt.Sprintf("recover-%d", i))
		if !r.Degraded {
			recovered = time.Since(flushed)
			if !r.Allowed {
				t.Errorf("first answer by Redis after the flush denied a fresh client: %+v", r)
			}
			break
		}
		degraded++
		if r.Allowed {
			t.Fatalf("the fail-closed policy allowed a request while Redis could not decide: %+v", r)
		}
		if time.Since(flushed) > 3*syncInterval {
			t.Fatalf("Redis does not decide again %s after the flush (the controller syncs every %s): %+v", time.Since(flushed), syncInterval, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("FUNCTION FLUSH: %d answers by failure mode; the controller restored the library within %s, and Redis decides again %s after the flush (controller sync every %s, circuit breaker probe every 1s)",
		degraded, restored.Round(time.Millisecond), recovered.Round(time.Millisecond), syncInterval)
	if bound := syncInterval + 3*time.Second; recovered > bound {
		t.Errorf("recovery took %s, want under %s (the controller's sync interval, then the breaker's next probe)", recovered, bound)
	}
	if !libraryLoaded(ctx, t, admin) {
		t.Errorf("the library %s is not loaded after recovery", redisstore.LibraryName)
	}
	if got := cc.Decisions(t, "/closed", "after-flush", burst+1); !systest.FirstN(got, burst) {
		t.Errorf("after recovery: decisions %v, want %d allowed then denied", got, burst)
	}

	// No refusal at all: the check process (--redis-load-library=false)
	// never tries to load the library; the controller restored it.
	log := aclLog(t, admin)
	t.Logf("ACL LOG after the flush:%s", describeLog(log))
	for _, e := range log {
		t.Errorf("unexpected refusal: %s refused %s %q", e.Username, e.Reason, e.Object)
	}
}
