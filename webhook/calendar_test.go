package webhook

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
)

// TestCalendarResetIsTheNextLocalBoundary: a calendar quota's answers
// count down to the next local midnight in its zone, in every header (the
// legacy reset as the Unix time that far from this process's clock): one
// minute before Berlin's midnight, then at the midnight that starts the
// 23-hour day summer time begins on.
func TestCalendarResetIsTheNextLocalBoundary(t *testing.T) {
	berlin, err := ratelimit.LoadZone("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	clock := ratelimittest.NewClock(time.Date(2026, 3, 28, 23, 59, 0, 0, berlin))
	c := checktest.New(t, check.Options{Now: clock.Now},
		compile(t, "ns", "p", "key: global\nlimits: [{name: day, calendar: {limit: 1, period: Day, timeZone: Europe/Berlin}}]"))
	s, err := New(Options{Checker: c})
	if err != nil {
		t.Fatal(err)
	}
	url := serveFast(t, s) + "/check/ns"
	h := map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/", "X-Forwarded-Host": "h"}
	want := func(status int, reset int64, headers map[string]string) {
		t.Helper()
		resp, body := do(t, "GET", url, h)
		if resp.StatusCode != status {
			t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, body)
		}
		at, _ := strconv.ParseInt(resp.Header.Get("X-RateLimit-Reset"), 10, 64)
		if now := time.Now().Unix(); at < now+reset-2 || at > now+reset+1 {
			t.Errorf("X-RateLimit-Reset %d, want %d+%d", at, now, reset)
		}
		for k, v := range headers {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("%s: %q, want %q (headers %v)", k, got, v, resp.Header)
			}
		}
	}
	want(200, 60, map[string]string{"RateLimit": `"p/day";r=0;t=60`, "RateLimit-Policy": `"p/day";q=1;w=86400`})
	want(429, 60, map[string]string{"Retry-After": "60", "X-RateLimit-Remaining": "0"})
	clock.Advance(time.Minute)
	want(200, 82800, map[string]string{"RateLimit": `"p/day";r=0;t=82800`})
	want(429, 82800, map[string]string{"Retry-After": "82800"})
}
