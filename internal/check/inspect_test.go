package check

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
)

// TestInspectAnswersTheNextRequest: Inspect says whether the next request
// of the policy's cost would be admitted, counting nothing: for every
// algorithm, once the requests made leave no room for one more (or for
// the cost of one), it says denied, with a retry, while its figures are
// the bucket's as they are (what remains, not what would after the next
// request); and allowed while there is room.
func TestInspectAnswersTheNextRequest(t *testing.T) {
	specs := []struct {
		name, limit string
		cost        int64
	}{
		{"fixed window", "fixedWindow: {limit: 3, window: 1m}", 1},
		{"fixed window, clock", "fixedWindow: {limit: 3, window: 1h, alignment: Clock}", 1},
		{"sliding window log", "slidingWindowLog: {limit: 3, window: 1m}", 1},
		{"sliding window counter", "slidingWindowCounter: {limit: 3, window: 1m}", 1},
		{"token bucket", "tokenBucket: {capacity: 3, refillRate: 1, refillInterval: 1h}", 1},
		{"leaky bucket", "leakyBucket: {capacity: 3, leakRate: 1, leakInterval: 1h}", 1},
		{"gcra", "gcra: {rate: 1, period: 1h, burst: 3}", 1},
		{"calendar", "calendar: {limit: 3, period: Month}", 1},
		{"concurrency", "concurrency: {limit: 3, leaseTimeout: 1m}", 1},
		{"cost 2", "fixedWindow: {limit: 3, window: 1m}", 2},
	}
	adminStores(t, func(t *testing.T, store ratelimit.Backend) {
		ctx := context.Background()
		for i, s := range specs {
			name := fmt.Sprintf("p%d", i)
			spec := fmt.Sprintf("key: global\ncost: %d\nlimits: [{name: l, %s}]", s.cost, s.limit)
			c := newChecker(t, Options{Backend: store}, policytest.Compile(t, "ns", name, spec))
			inspect := func() (*Outcome, LimitResult) {
				t.Helper()
				out, err := c.Buckets().Inspect(ctx, "ns", name, "global")
				if err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
				return out, out.Limits[0]
			}
			if out, l := inspect(); !out.Allowed || !l.Allowed || l.Remaining != 3 {
				t.Fatalf("%s, untouched: allowed %v, %+v; want allowed, 3 remaining", s.name, out.Allowed, l.Result)
			}
			admitted := int64(0)
			for n := 0; ; n++ {
				out, err := c.Check(ctx, Input{Namespace: "ns", Policy: name, Request: request(), Holder: fmt.Sprint("h", n)})
				if err != nil {
					t.Fatal(err)
				}
				if !out.Allowed {
					break
				}
				admitted += s.cost
				if ins, l := inspect(); admitted+s.cost <= 3 && (!ins.Allowed || l.Remaining != 3-admitted) {
					t.Fatalf("%s, %d admitted: allowed %v, %+v; want allowed, %d remaining", s.name, admitted, ins.Allowed, l.Result, 3-admitted)
				}
			}
			out, l := inspect()
			if out.Allowed || l.Allowed || l.RetryAfter <= 0 || out.RetryAfter <= 0 || l.Remaining != 3-admitted {
				t.Fatalf("%s, full (%d admitted): allowed %v, %+v, retry %s; want denied with a retry, %d remaining", s.name, admitted, out.Allowed, l.Result, out.RetryAfter, 3-admitted)
			}
			if again, _ := inspect(); again.Allowed {
				t.Fatalf("%s: a second inspection allowed", s.name)
			}
		}
	})
}
