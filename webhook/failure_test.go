package webhook

import (
	"net/http"
	"testing"
	"time"
)

// TestRedisFailures kills and freezes redis-server under a stream of checks:
// every check answers as the policy's failureMode says without waiting for
// Redis, and correct decisions resume once Redis is back, with no restart
// of the endpoint.
func TestRedisFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and freezes redis-server")
	}
	srv, store := redisStore(t)
	ep := newEndpoint(t, store.Backend(), Options{},
		compile(t, "open", "p", "failureMode: Open\nkey: '{header:X-Client}'\nlimits: [{name: l, fixedWindow: {limit: 2, window: 1h}}]"),
		compile(t, "closed", "p", "failureMode: Closed\nkey: global\nlimits: [{name: l, fixedWindow: {limit: 1000000, window: 1h}}]"),
	)
	// A check that waited on the frozen server would wait out the Redis
	// client's read timeout (3s: the freeze lasts until the loop ends);
	// one that keeps the store deadline (50ms) answers well within bound,
	// even on a machine whose load adds hundreds of milliseconds.
	const bound = time.Second
	client := "a"
	check := func(ns string) (int, time.Duration) {
		h := map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/", "X-Forwarded-Host": "h", "X-Client": client}
		start := time.Now()
		resp, _ := do(t, "GET", ep.URL+"/check/"+ns, h)
		return resp.StatusCode, time.Since(start)
	}
	// Counting works before the fault: the third request of a client is denied.
	countsAgain := func(name string) {
		t.Helper()
		if a, b, c := first(check("open")), first(check("open")), first(check("open")); a != 200 || b != 200 || c != 429 {
			t.Fatalf("%s, client %s: %d %d %d, want 200 200 429", name, client, a, b, c)
		}
	}
	countsAgain("before the faults")
	client = "b" // a fresh client, whose requests the failure mode allows

	underFault := func(name string, d time.Duration) {
		t.Helper()
		var slowest time.Duration
		n := 0
		for end := time.Now().Add(d); time.Now().Before(end); n++ {
			sOpen, dOpen := check("open")
			sClosed, dClosed := check("closed")
			if sOpen != http.StatusOK || sClosed != http.StatusTooManyRequests {
				t.Fatalf("%s, check %d: open %d closed %d; want 200 (fail open) and 429 (fail closed)", name, n, sOpen, sClosed)
			}
			slowest = max(slowest, dOpen, dClosed)
		}
		t.Logf("%s: %d check pairs, slowest answer %s (bound %s)", name, n, slowest, bound)
		if slowest > bound {
			t.Errorf("%s: a check took %s: it waited on Redis beyond the store deadline", name, slowest)
		}
	}
	recovered := func(name string) {
		t.Helper()
		start := time.Now()
		for {
			s, _ := check("closed")
			if s == http.StatusOK {
				break
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("%s: decisions did not resume within 5s", name)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("%s: decisions resumed %s after Redis came back", name, time.Since(start))
	}

	srv.Kill()
	underFault("redis-server killed", 1500*time.Millisecond)
	srv.Restart()
	recovered("after restart")
	countsAgain("after restart")

	client = "c"
	srv.Freeze()
	underFault("redis-server frozen (SIGSTOP)", 1500*time.Millisecond)
	srv.Thaw()
	recovered("after SIGCONT")
	// The breaker's probes during the freeze sat in Redis's socket and ran
	// on SIGCONT, counting against client c: requests that fail-open
	// admitted are counted late, not lost. A fresh client shows counting.
	client = "d"
	countsAgain("after SIGCONT")
}

func first(s int, _ time.Duration) int { return s }
