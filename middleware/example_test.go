package middleware_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/middleware"
)

// Two requests per client address, one more each minute, counted in the
// process. The third request is denied without reaching the handler.
func Example() {
	lim, err := middleware.New(middleware.WithPolicyYAML(`
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: per-client
spec:
  key: "{client_ip}"
  limits:
  - name: burst
    tokenBucket: {capacity: 2, refillRate: 1, refillInterval: 1m}
`))
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()

	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	h := lim.Handler(hello)

	for range 3 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil)) // from 192.0.2.1
		// The headers are set in the draft's spelling ("RateLimit", not
		// Go's canonical "Ratelimit"): index the map rather than Get.
		fmt.Println(rec.Code, rec.Header()["RateLimit"], rec.Header()["Retry-After"])
		fmt.Print(rec.Body)
	}
	// Output:
	// 200 ["per-client/burst";r=1;t=60] []
	// hello
	// 200 ["per-client/burst";r=0;t=120] []
	// hello
	// 429 ["per-client/burst";r=0;t=120] [60]
	// {"type":"https://sluice.dev/problems/rate-limited","title":"Rate limit exceeded","status":429,"detail":"limit \"burst\" of policy default/per-client is exhausted; retry in 60s","policy":"default/per-client","limit":"burst","retryAfter":60}
}

// A policy built in Go: 100 logins an hour in all, with the legacy
// X-RateLimit headers only. Other paths are not limited.
func ExampleWithPolicy() {
	lim, err := middleware.New(middleware.WithPolicy("logins", ratelimitv1alpha1.RateLimitPolicySpec{
		Match:    ratelimitv1alpha1.RequestMatch{Paths: []ratelimitv1alpha1.PathMatch{"/login"}},
		Key:      "global",
		Limits:   []ratelimitv1alpha1.Limit{{Name: "hour", FixedWindow: &ratelimitv1alpha1.WindowLimit{Limit: 100, Window: "1h"}}},
		Response: ratelimitv1alpha1.Response{Headers: ratelimitv1alpha1.HeaderStyleLegacy},
	}))
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()
	h := lim.Handler(http.NotFoundHandler())

	for _, path := range []string{"/login", "/login", "/about"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", path, nil))
		fmt.Println(path, rec.Header()["X-RateLimit-Remaining"])
	}
	// Output:
	// /login [99]
	// /login [98]
	// /about []
}

// A denial answered by the service itself: the rate-limit headers and
// Retry-After are already set.
func ExampleWithDenyHandler() {
	lim, err := middleware.New(
		middleware.WithPolicyYAML(`
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-user}
spec:
  key: "{header:X-User}"
  onMissingKey: Deny
  limits:
  - {name: minute, fixedWindow: {limit: 1, window: 1m}}
`),
		middleware.WithDenyHandler(func(w http.ResponseWriter, _ *http.Request, d middleware.Decision) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(d.Status)
			switch d.Reason {
			case middleware.ReasonMissingKey:
				fmt.Fprintln(w, "sign in first")
			default:
				fmt.Fprintf(w, "slow down: try again in %s\n", d.RetryAfter.Round(time.Minute))
			}
		}),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }))

	for _, user := range []string{"ann", "ann", ""} {
		r := httptest.NewRequest("GET", "/", nil)
		if user != "" {
			r.Header.Set("X-User", user)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		fmt.Print(rec.Code, " ", rec.Body)
	}
	// Output:
	// 200 ok
	// 429 slow down: try again in 1m0s
	// 429 sign in first
}

// Counters in Redis, shared by every replica of the service. The client
// must not retry commands; NewRedisClient sets that up.
func ExampleWithRedis() {
	client := middleware.NewRedisClient(&redis.UniversalOptions{Addrs: []string{"redis:6379"}})
	defer client.Close()
	lim, err := middleware.New(
		middleware.WithRedis(client),
		middleware.WithNamespace("shop"), // part of the Redis keys
		middleware.WithPolicyYAML(`
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: api}
spec:
  failureMode: Closed # deny while Redis cannot answer within 50ms
  limits:
  - {name: burst, tokenBucket: {capacity: 20, refillRate: 10, refillInterval: 1s}}
  - {name: day, fixedWindow: {limit: 10000, window: 24h}}
`),
	)
	if err != nil {
		log.Print(err)
		return
	}
	defer lim.Close()
	if err := http.ListenAndServe(":8080", lim.Handler(http.NotFoundHandler())); err != nil {
		log.Print(err)
	}
}

// The cluster's policies for namespace shop, decided by the Sluice check
// endpoint; while it cannot answer within 100ms, requests are allowed.
func ExampleWithRemote() {
	lim, err := middleware.New(
		middleware.WithNamespace("shop"),
		middleware.WithRemote(middleware.RemoteOptions{
			URL:         "http://sluice-check.sluice-system:8080",
			Timeout:     100 * time.Millisecond,
			FailureMode: ratelimitv1alpha1.FailureModeOpen,
		}),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()
	if err := http.ListenAndServe(":8080", lim.Handler(http.NotFoundHandler())); err != nil {
		log.Print(err)
	}
}
