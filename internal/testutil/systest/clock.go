package systest

import (
	"testing"
	"time"
)

// InOneWindow waits, when less than need is left of the current window of
// length window aligned to the clock (windows that start at multiples of it
// since the Unix epoch: fixedWindow with alignment Clock,
// slidingWindowCounter's windows, envoyproxy/ratelimit's units), until the
// next one has begun, so that steps taking at most need fall in one window
// and a count is not reset under them. It waits at most need.
func InOneWindow(t testing.TB, window, need time.Duration) {
	t.Helper()
	if need >= window {
		t.Fatalf("steps of %s cannot fall in one window of %s", need, window)
	}
	now := time.Now()
	next := now.Truncate(window).Add(window)
	if left := next.Sub(now); left < need {
		t.Logf("%s left of the clock's window of %s, less than the %s the steps take: waiting for the next one", left.Round(time.Millisecond), window, need)
		// A margin past the edge: the server reads its own clock (Redis
		// TIME), not the test's.
		time.Sleep(left + 500*time.Millisecond)
	}
}
