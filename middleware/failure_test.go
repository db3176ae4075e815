package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/middleware"
)

// Two policies on one Redis: requests under /open fail open, under
// /closed fail closed.
var failurePolicies = []named{
	{"open", "match: {paths: ['/open']}\nfailureMode: Open\nkey: '{header:X-Client}'\nlimits: [{name: l, fixedWindow: {limit: 2, window: 1h}}]"},
	{"closed", "match: {paths: ['/closed']}\nfailureMode: Closed\nkey: global\nlimits: [{name: l, fixedWindow: {limit: 1000000, window: 1h}}]"},
}

// slack is what an answer may take beyond its deadline on a loaded
// machine (2 cores shared with other test binaries, or -race). The
// bounds still tell a deadline from the seconds go-redis and net/http
// would otherwise wait (ReadTimeout 3s, dial timeout 5s).
const slack = 150 * time.Millisecond

// TestRedisFailureModes kills and freezes redis-server: every answer
// comes within the store timeout (plus slack) as each policy's
// failureMode says, and counting resumes when Redis is back.
func TestRedisFailureModes(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and freezes redis-server")
	}
	srv := redistest.Start(t)
	client := middleware.NewRedisClient(&redis.UniversalOptions{Addrs: []string{srv.Addr()}})
	t.Cleanup(func() { client.Close() })
	const timeout = 50 * time.Millisecond
	a := &app{}
	h := newLimiter(t, append(policyOptions(t, failurePolicies), middleware.WithRedis(client), middleware.WithStoreTimeout(timeout))...).Handler(a)
	user := "a"
	ask := func(path string) (*httptest.ResponseRecorder, time.Duration) {
		start := time.Now()
		rec := send(h, "GET", path, "", map[string]string{"X-Client": user})
		return rec, time.Since(start)
	}
	counts := func(when string) {
		t.Helper()
		var codes []int
		for range 3 {
			rec, _ := ask("/open")
			codes = append(codes, rec.Code)
		}
		if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
			t.Fatalf("%s, client %s: %v, want [200 200 429]", when, user, codes)
		}
	}
	underFault := func(fault string) {
		t.Helper()
		slowest := time.Duration(0)
		for n := range 20 {
			open, dOpen := ask("/open")
			closed, dClosed := ask("/closed")
			if open.Code != 200 || open.Body.String() != "hello\n" {
				t.Fatalf("%s, pair %d: fail-open answered %d %q, want the app's 200", fault, n, open.Code, open.Body)
			}
			if _, ok := open.Header()["RateLimit"]; ok {
				t.Errorf("%s: a fail-open answer carries RateLimit headers: %v", fault, open.Header())
			}
			p := decodeProblem(t, closed)
			if closed.Code != 429 || p.Type != "https://sluice.dev/problems/limiter-unavailable" || p.Policy != "default/closed" || closed.Header().Get("Retry-After") != "1" {
				t.Fatalf("%s, pair %d: fail-closed answered %d %+v %v", fault, n, closed.Code, p, closed.Header())
			}
			slowest = max(slowest, dOpen, dClosed)
		}
		t.Logf("%s: slowest answer %s", fault, slowest)
		within(t, fault+": an answer", slowest, timeout+slack)
	}
	resumed := func(when string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			if rec, _ := ask("/closed"); rec.Code == 200 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: decisions did not resume within 5s", when)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	counts("before the faults")
	user = "b"
	srv.Kill()
	underFault("redis-server killed")
	srv.Restart()
	resumed("after the restart")
	counts("after the restart")

	user = "c"
	srv.Freeze()
	underFault("redis-server frozen")
	srv.Thaw()
	resumed("after SIGCONT")
	user = "d" // c's probes ran late, on SIGCONT: a fresh client shows counting
	counts("after SIGCONT")
}

// TestRedisClientOptions: WithRedis refuses a client that would retry a
// rate-limit call or ignore context deadlines, and takes one built by
// NewRedisClient or configured by hand.
func TestRedisClientOptions(t *testing.T) {
	spec := middleware.WithPolicy("p", policytest.Spec(t, "limits: [{name: l, fixedWindow: {limit: 1, window: 1m}}]"))
	const addr = "127.0.0.1:1" // never dialed: New does not contact Redis
	for _, c := range []struct {
		name    string
		client  redis.UniversalClient
		wantErr string
	}{
		{"go-redis defaults", redis.NewClient(&redis.Options{Addr: addr}), "MaxRetries 3"},
		{"retries off, context deadlines ignored", redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1}), "ContextTimeoutEnabled"},
		{"cluster defaults", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}}), "ContextTimeoutEnabled"},
		{"cluster with retries", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, MaxRetries: 2, ContextTimeoutEnabled: true}), "MaxRetries 2"},
		{"ring", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}}), "Ring is not supported"},
		{"by hand", redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true}), ""},
		{"NewRedisClient", middleware.NewRedisClient(&redis.UniversalOptions{Addrs: []string{addr}}), ""},
		{"NewRedisClient, cluster", middleware.NewRedisClient(&redis.UniversalOptions{Addrs: []string{addr}, IsClusterMode: true}), ""},
		{"NewRedisClient, sentinel", middleware.NewRedisClient(&redis.UniversalOptions{Addrs: []string{addr}, MasterName: "m"}), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer c.client.Close()
			l, err := middleware.New(spec, middleware.WithRedis(c.client))
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				l.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("New: error %v, want one mentioning %q", err, c.wantErr)
			}
			if c.name != "ring" && !strings.Contains(err.Error(), "NewRedisClient") {
				t.Errorf("the error does not say how to fix it: %v", err)
			}
		})
	}
}

// TestRemoteFailureModes: when the check endpoint is down, hangs or
// answers an error, RemoteOptions.FailureMode answers within the timeout;
// after repeated failures the breaker answers at once and only probes.
func TestRemoteFailureModes(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close() // connections are refused from now on

	release := make(chan struct{})
	hanging := &endpoint{}
	hanging.Server = httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		hanging.checks.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hanging.Close)
	t.Cleanup(func() { close(release) })

	broken := &endpoint{}
	broken.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		broken.checks.Add(1)
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"type":"https://sluice.dev/problems/check-failed","title":"Check failed","status":500,"detail":"boom"}`))
	}))
	t.Cleanup(broken.Close)

	// A namespace without the named policy: the endpoint answers 404.
	unknown := newEndpoint(t, "shop", nil)

	const timeout = 100 * time.Millisecond
	for _, target := range []struct {
		name string
		url  string
		opts middleware.RemoteOptions
	}{
		{"endpoint down", down.URL, middleware.RemoteOptions{}},
		{"endpoint hangs", hanging.URL, middleware.RemoteOptions{}},
		{"endpoint answers 500", broken.URL, middleware.RemoteOptions{}},
		{"no such policy", unknown.URL, middleware.RemoteOptions{Policy: "missing"}},
	} {
		for _, closed := range []bool{false, true} {
			name := target.name + "/open"
			if closed {
				name = target.name + "/closed"
			}
			t.Run(name, func(t *testing.T) {
				o := target.opts
				o.URL, o.Timeout = target.url, timeout
				if closed {
					o.FailureMode = "Closed"
				}
				a := &app{}
				h := newLimiter(t, middleware.WithRemote(o)).Handler(a)
				slowest := time.Duration(0)
				for n := range 8 {
					// Failures of one instant count once towards the breaker
					// (one lost connection fails many calls): space them.
					time.Sleep(6 * time.Millisecond)
					start := time.Now()
					rec := send(h, "GET", "/", "", nil)
					slowest = max(slowest, time.Since(start))
					switch {
					case !closed && (rec.Code != 200 || rec.Body.String() != "hello\n"):
						t.Fatalf("request %d: %d %q, want the app's 200", n+1, rec.Code, rec.Body)
					case closed:
						p := decodeProblem(t, rec)
						if rec.Code != 429 || p.Type != "https://sluice.dev/problems/limiter-unavailable" || rec.Header().Get("Retry-After") != "1" || p.RetryAfter == nil || *p.RetryAfter != 1 {
							t.Fatalf("request %d: %d %+v %v, want 429 limiter-unavailable with Retry-After 1", n+1, rec.Code, p, rec.Header())
						}
					}
				}
				within(t, "an answer", slowest, timeout+slack)
				if closed && a.calls.Load() != 0 {
					t.Errorf("fail-closed: the app served %d requests", a.calls.Load())
				}
			})
		}
	}
	// Eight requests per limiter, 2 limiters: the breaker opened after 5
	// failures each, so each endpoint saw at most 2 x 5 checks.
	for _, ep := range []*endpoint{hanging, broken} {
		if n := ep.checks.Load(); n > 10 {
			t.Errorf("an endpoint got %d checks; the breaker should have stopped them at 10", n)
		}
	}
}

// TestRemoteRecovers: once the endpoint answers again, the breaker's
// probe closes it and decisions resume within its cooldown.
func TestRemoteRecovers(t *testing.T) {
	ep := newEndpoint(t, "shop", []named{{"p", "key: global\nlimits: [{name: l, fixedWindow: {limit: 1000, window: 1h}}]"}})
	var failing atomic.Bool
	failing.Store(true)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return
		}
		ep.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	h := newLimiter(t, middleware.WithNamespace("shop"), middleware.WithRemote(middleware.RemoteOptions{URL: front.URL, FailureMode: "Closed"})).Handler(&app{})
	for range 6 {
		if rec := send(h, "GET", "/", "", nil); rec.Code != 429 {
			t.Fatalf("while failing: %d, want 429 (fail closed)", rec.Code)
		}
	}
	failing.Store(false)
	start := time.Now()
	for {
		rec := send(h, "GET", "/", "", nil)
		if rec.Code == 200 {
			if exact(rec.Header(), "RateLimit") == "" {
				t.Errorf("a decided answer without RateLimit: %v", rec.Header())
			}
			break
		}
		if time.Since(start) > 3*time.Second {
			t.Fatal("decisions did not resume within 3s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("decisions resumed after %s", time.Since(start))
}
